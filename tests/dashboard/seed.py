"""A small, known queue for the dashboard tests: every state the pages show."""

from __future__ import annotations

from dataclasses import dataclass

from sqlq_orm import Schedule


@dataclass(frozen=True)
class Seeded:
    succeeded: int
    failed: int
    failed_too: int
    queued: int
    running: int
    worker: str = "w-alive"


def seed(queue) -> Seeded:
    """One job in each state the pages show, a live worker holding one, two failures."""
    succeeded = queue.enqueue("send_email", {"to": "ada@example.com"}, queue="mail").id
    [lease] = queue.claim("w-alive", queues=["mail"], start=True)
    queue.succeed(lease)
    failed = queue.enqueue("charge_card", {"order": 17, "amount": "12.50"}, max_retries=0).id
    failed_too = queue.enqueue("charge_card", {"order": 18}, max_retries=0).id
    for _ in range(2):
        [lease] = queue.claim("w-alive", start=True)
        queue.fail(lease, "PAYMENT:CARD_DECLINED", "card ending 4242 declined", retryable=False)
    running = queue.enqueue("resize_image", {"path": "cat.png"}, queue="media").id
    queue.claim("w-alive", queues=["media"], start=True, lease_seconds=300)
    queue.register_worker(
        "w-alive", hostname="box-1", pid=4242, queues=["default", "mail", "media"], concurrency=4
    )
    queued = queue.enqueue(
        "send_email", {"to": "bob@example.com"}, queue="mail", dedupe_key="welcome-bob"
    ).id
    return Seeded(
        succeeded=succeeded, failed=failed, failed_too=failed_too, queued=queued, running=running
    )


@dataclass(frozen=True)
class SeededSchedules:
    ticked: str
    due: str
    ticked_job: int


def seed_schedules(queue, clock) -> SeededSchedules:
    """Two schedules registered at the pinned start (2023-11-14 22:13:20Z).

    ``morning-report`` (09:00 Paris time) has run once: the clock is moved to just after
    2023-11-15 09:00 CET and ticked. ``cleanup`` (every 15 min, UTC) was never ticked,
    so its first slot (2023-11-14 22:15 UTC) is due.
    """
    report = Schedule.declare(
        "0 9 * * *", "send_report", name="morning-report", queue="reports",
        timezone="Europe/Paris",
    )  # fmt: skip
    cleanup = Schedule.declare("*/15 * * * *", "prune_tmp", name="cleanup")
    queue.register_schedules([report, cleanup])
    clock.set(1_700_035_230)  # 2023-11-15 08:00:30Z = 09:00:30 in Paris
    [job] = queue.enqueue_due_slots({report.name: report}).job_ids
    return SeededSchedules(ticked=report.name, due=cleanup.name, ticked_job=job)
