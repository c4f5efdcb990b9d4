"""Jobs written as a release at ``sqlq_0001`` wrote them, in plain SQL.

Upgrade tests need rows in a database still at an old revision. Today's ``Queue``
cannot write them (its statements name columns later revisions add), so these rows
are inserted with the columns ``sqlq_0001`` has, and nothing else.
"""

from __future__ import annotations

import sqlalchemy

T0 = 1_700_000_000

_JOB = (
    "INSERT INTO sqlq_jobs (queue, type, status, priority, payload, created_at, run_at,"
    " claimed_at, started_at, heartbeat_at, finished_at, claimed_by, attempt_count,"
    " retry_count, max_retries) VALUES ('default', 'send_invoice', :status, 0,"
    " :payload, :t0, :t0, :claimed, :claimed, :claimed, :finished, :worker, :attempts, 0, 3)"
)
_ATTEMPT = (
    "INSERT INTO sqlq_job_attempts (job_id, attempt, worker_id, started_at, finished_at,"
    " status) VALUES (:id, 1, 'worker-1', :t1, :t1, 'SUCCEEDED')"
)
_EVENT = (
    "INSERT INTO sqlq_job_events (job_id, ts, event, actor, detail)"
    " VALUES (:id, :ts, :event, :actor, NULL)"
)


def seed_0001_history(url: str) -> None:
    """Three jobs, two of them run to success: 3 jobs, 2 attempts, 9 events."""
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        for n in (1, 2, 3):
            done = n < 3
            connection.execute(
                sqlalchemy.text(_JOB),
                {
                    "status": "SUCCEEDED" if done else "QUEUED",
                    "payload": f'{{"invoice":{n}}}',
                    "t0": T0,
                    "claimed": T0 + 1 if done else None,
                    "finished": T0 + 1 if done else None,
                    "worker": "worker-1" if done else None,
                    "attempts": 1 if done else 0,
                },
            )
            # Ids from the database (PostgreSQL's sequence moves only when it picks one).
            job_id = connection.execute(sqlalchemy.text("SELECT max(id) FROM sqlq_jobs")).scalar()
            events = [("ENQUEUED", "system")]
            if done:
                connection.execute(sqlalchemy.text(_ATTEMPT), {"id": job_id, "t1": T0 + 1})
                events += [("CLAIMED", "worker-1"), ("STARTED", "worker-1")]
                events += [("SUCCEEDED", "worker-1")]
            for event, actor in events:
                connection.execute(
                    sqlalchemy.text(_EVENT),
                    {
                        "id": job_id,
                        "ts": T0 + (event != "ENQUEUED"),
                        "event": event,
                        "actor": actor,
                    },
                )
    engine.dispose()


def insert_old_jobs(url: str, payloads: list[str]) -> list[int]:
    """QUEUED jobs with these payload texts, written with ``sqlq_0001``'s columns only
    (what any later revision's upgrade finds in place); returns their ids in order."""
    engine = sqlalchemy.create_engine(url)
    ids = []
    with engine.begin() as connection:
        for payload in payloads:
            connection.execute(
                sqlalchemy.text(_JOB),
                {
                    "status": "QUEUED",
                    "payload": payload,
                    "t0": T0,
                    "claimed": None,
                    "finished": None,
                    "worker": None,
                    "attempts": 0,
                },
            )
            ids.append(
                connection.execute(sqlalchemy.text("SELECT max(id) FROM sqlq_jobs")).scalar()
            )
    engine.dispose()
    return ids
