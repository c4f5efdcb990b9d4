"""A small, known queue for the dashboard tests: every state the pages show."""

from __future__ import annotations

from dataclasses import dataclass


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
