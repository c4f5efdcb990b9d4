"""A first end-to-end pass over the service on both databases."""

from sqlq_orm import JobStatus


def test_enqueue_claim_start_succeed_ends_succeeded(queue):
    job = queue.enqueue("send_email", {"to": "a@example.com"})
    (lease,) = queue.claim("worker-a")
    queue.start(lease)
    queue.succeed(lease)
    assert queue.get_job(job.id).status == JobStatus.SUCCEEDED.value
