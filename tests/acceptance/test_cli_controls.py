"""``sqlq queue pause|resume|limit|unlimit|list``, run for real against every database."""

from __future__ import annotations

import json

import pytest

import sqlq_orm
from tests.acceptance.test_cli import migrated_url, one_error_line, queue_on, sqlq  # noqa: F401

pytestmark = pytest.mark.slow


def test_queue_pause_stops_claims_until_resume_and_list_shows_it(migrated_url):  # noqa: F811
    assert sqlq("--db", migrated_url, "enqueue", "a", "--queue", "mail").returncode == 0

    paused = sqlq("--db", migrated_url, "queue", "pause", "mail")
    again = sqlq("--db", migrated_url, "queue", "pause", "mail")
    listed = sqlq("--db", migrated_url, "queue", "list", "--json")
    text = sqlq("--db", migrated_url, "queue", "list")

    assert (paused.returncode, paused.stdout.strip()) == (0, "paused queue mail")
    assert again.stdout.strip() == "queue mail was already paused"
    (row,) = json.loads(listed.stdout)["queues"]
    assert (row["queue"], row["paused"], row["changed_by"], row["queued"]) == (
        "mail", True, "cli", 1,
    )  # fmt: skip
    assert "mail   paused" in text.stdout
    queue = queue_on(migrated_url)
    assert queue.claim("w", queues=["mail"]) == []
    assert "mail (paused)" in sqlq("--db", migrated_url, "stats").stdout

    resumed = sqlq("--db", migrated_url, "queue", "resume", "mail")

    assert resumed.stdout.strip() == "resumed queue mail"
    assert len(queue.claim("w", queues=["mail"])) == 1
    assert "running" in sqlq("--db", migrated_url, "queue", "list").stdout
    queue.engine.dispose()


def test_queue_pause_of_a_bad_name_is_one_error_line(migrated_url):  # noqa: F811
    line = one_error_line(sqlq("--db", migrated_url, "queue", "pause", "x" * 101))
    assert "name" in line


def test_queue_limit_and_unlimit_are_obeyed_and_shown(migrated_url):  # noqa: F811
    queue = queue_on(migrated_url)
    for _ in range(3):
        queue.enqueue("a", queue="mail")

    limited = sqlq("--db", migrated_url, "queue", "limit", "mail", "--max", "2", "--per", "60")
    listed = sqlq("--db", migrated_url, "queue", "list", "--json")
    stats = sqlq("--db", migrated_url, "stats").stdout
    metrics = sqlq("--db", migrated_url, "stats", "--format", "prometheus").stdout

    assert (limited.returncode, limited.stdout.strip()) == (
        0, "queue mail: at most 2 starts per 60 s per rate key",
    )  # fmt: skip
    (row,) = json.loads(listed.stdout)["queues"]
    assert (row["rate_limit"], row["rate_period"]) == (2, 60)
    assert "mail (2/60s)" in stats
    assert 'sqlq_queue_rate_limit{queue="mail"} 2' in metrics
    assert 'sqlq_queue_rate_period_seconds{queue="mail"} 60' in metrics
    assert len(queue.claim("w", queues=["mail"], limit=5)) == 2
    bad = one_error_line(
        sqlq("--db", migrated_url, "queue", "limit", "mail", "--max", "0", "--per", "60")
    )
    assert "max_starts must be >= 1, got 0" in bad

    unlimited = sqlq("--db", migrated_url, "queue", "unlimit", "mail")

    assert unlimited.stdout.strip() == "removed the rate limit of queue mail"
    assert len(queue.claim("w", queues=["mail"], limit=5)) == 1
    queue.engine.dispose()


def test_jobs_actions_by_filter_are_dry_runs_until_yes(migrated_url):  # noqa: F811
    queue = queue_on(migrated_url)
    ids = [queue.enqueue("digest", queue="mail").id for _ in range(3)]
    other = queue.enqueue("digest").id

    dry = sqlq("--db", migrated_url, "jobs", "cancel", "--queue", "mail")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("3 job(s) match; nothing done (dry run)")
    assert [queue.get_job(i).status for i in ids] == ["QUEUED"] * 3

    done = sqlq("--db", migrated_url, "jobs", "cancel", "--queue", "mail", "--yes",
                "--reason", "vendor down")  # fmt: skip
    assert done.stdout.strip() == "cancelled 3 job(s)"
    retried = sqlq(
        "--db", migrated_url, "jobs", "retry", "--status", "cancelled", "--type", "digest",
        "--yes", "--batch", "2", "--json",
    )  # fmt: skip
    result = json.loads(retried.stdout)
    assert (result["acted"], result["batches"], result["complete"]) == (3, 2, True)
    discarded = sqlq("--db", migrated_url, "jobs", "discard", "--queue", "mail", "--yes")
    assert discarded.stdout.strip() == "discarded 3 job(s)"
    single = sqlq("--db", migrated_url, "jobs", "discard", str(other))
    assert single.stdout.strip() == "discarded 1 job(s)"
    assert queue.counts_by_status()["QUEUED"] == 0
    queue.engine.dispose()


def test_jobs_actions_select_by_arguments_and_refuse_bad_json(migrated_url):  # noqa: F811
    queue = queue_on(migrated_url)
    acme = [queue.enqueue("digest", {"tenant": "acme", "n": n}).id for n in range(2)]
    other = queue.enqueue("digest", {"tenant": "other"}).id

    done = sqlq("--db", migrated_url, "jobs", "cancel", "--args", '{"tenant": "acme"}', "--yes")

    assert done.stdout.strip() == "cancelled 2 job(s)", done.stderr
    assert [queue.get_job(i).status for i in acme] == ["CANCELLED"] * 2
    assert queue.get_job(other).status == "QUEUED"
    assert "--args must be a JSON object" in one_error_line(
        sqlq("--db", migrated_url, "jobs", "cancel", "--args", "{tenant: acme}")
    )
    assert "args_contain['tenant'] must be a string" in one_error_line(
        sqlq("--db", migrated_url, "jobs", "cancel", "--args", '{"tenant": [1]}')
    )
    queue.engine.dispose()


def test_jobs_actions_select_by_concurrency_key_and_name_app_columns_they_cannot_see(
    migrated_url,  # noqa: F811
):
    queue = queue_on(migrated_url)
    keyed = queue.enqueue("sync", concurrency_key="acct:1", concurrency_limit=1).id
    other = queue.enqueue("sync").id

    done = sqlq("--db", migrated_url, "jobs", "cancel", "--concurrency-key", "acct:1", "--yes")

    assert done.stdout.strip() == "cancelled 1 job(s)", done.stderr
    assert (queue.get_job(keyed).status, queue.get_job(other).status) == ("CANCELLED", "QUEUED")
    # sqlq's own models have no app columns: the error names them all (none) and
    # nothing is cancelled.
    refused = sqlq("--db", migrated_url, "jobs", "cancel", "--columns", '{"tenant_id": 7}')
    assert "'tenant_id' is not one of the app's columns on sqlq_jobs (those are: none)" in (
        one_error_line(refused)
    )
    assert "--columns must be a JSON object" in one_error_line(
        sqlq("--db", migrated_url, "jobs", "cancel", "--columns", "tenant_id=7")
    )
    assert queue.get_job(other).status == "QUEUED"
    queue.engine.dispose()


def test_jobs_without_a_target_or_with_a_status_the_action_skips_is_one_error_line(
    migrated_url,  # noqa: F811
):
    assert "name the jobs to discard" in one_error_line(
        sqlq("--db", migrated_url, "jobs", "discard")
    )
    assert "not SUCCEEDED" in one_error_line(
        sqlq("--db", migrated_url, "jobs", "cancel", "--status", "succeeded")
    )


def test_schedules_pause_resume_run_and_an_orphan_is_reported(migrated_url):  # noqa: F811
    from tests.acceptance.test_cli import SCHEDULED

    assert sqlq("--db", migrated_url, "worker", "--burst", "--handlers", SCHEDULED).returncode == 0
    queue = queue_on(migrated_url)
    queue.register_schedules([sqlq_orm.Schedule.declare("0 * * * *", "gone", name="old")])

    paused = sqlq("--db", migrated_url, "schedules", "pause", "nightly_echo")
    listed = sqlq("--db", migrated_url, "schedules", "--handlers", SCHEDULED)
    ran = sqlq("--db", migrated_url, "schedules", "run", "nightly_echo", "--handlers", SCHEDULED)
    resumed = sqlq("--db", migrated_url, "schedules", "resume", "nightly_echo")

    assert paused.stdout.strip() == "paused schedule nightly_echo", paused.stderr
    assert [s.paused_at is None for s in queue.list_schedules()] == [True, True]
    line = {row.split()[0]: row for row in listed.stdout.splitlines()[1:]}
    assert line["nightly_echo"].endswith("paused")
    assert "orphaned: no longer declared in code" in line["old"]
    job = queue.get_job(int(ran.stdout.strip()))
    assert (job.type, job.status) == ("echo", "QUEUED")
    assert resumed.stdout.strip() == "resumed schedule nightly_echo"
    assert "needs --handlers" not in one_error_line(
        sqlq("--db", migrated_url, "schedules", "run", "nope", "--handlers", SCHEDULED)
    )
    queue.engine.dispose()
