"""The operator's controls in a real (headless) chromium: pause and resume a queue,
discard a job and discard matching, run a schedule now, pause and resume a schedule;
bulk cancel with the cascade's dependents counted. Each goes through its confirmation
page and changes nothing until confirmed."""

from __future__ import annotations

import pytest

from sqlq_orm.schema.states import JobStatus
from tests.dashboard.seed import seed, seed_schedules
from tests.support.queue_helpers import event_names

pytestmark = pytest.mark.browser


def events_by(queue, job_id: int) -> list[tuple[str, str]]:
    events = queue.tables.events
    with queue.context.engine.connect() as connection:
        rows = connection.execute(events.select().where(events.c.job_id == job_id))
        return [(row.event, row.actor) for row in rows]


def test_pausing_a_queue_from_the_overview_stops_claims_until_resumed(serve, page, queue):
    seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + "/")
    page.click("#pause-queue-mail")
    assert page.locator("h1").inner_text() == "Pause queue mail?"
    assert queue.paused_queues() == []  # asking changed nothing
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "Queue mail paused."
    assert queue.paused_queues() == ["mail"]
    assert queue.claim("w-2", queues=["mail"]) == []
    page.goto(served.url + "/")
    assert page.locator("#by-queue .paused").inner_text() == "paused"
    page.click("#resume-queue-mail")
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "Queue mail resumed."
    assert queue.paused_queues() == []
    assert len(queue.claim("w-2", queues=["mail"])) == 1


def test_a_queues_rate_limit_is_set_changed_and_removed_from_the_overview(serve, page, queue):
    seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + "/")
    page.click("#limit-queue-mail")
    assert page.locator("h1").inner_text() == "Limit queue mail?"
    page.fill("#max_starts", "0")
    page.fill("#per_seconds", "60")
    page.evaluate("document.querySelector('#max_starts').removeAttribute('min')")
    page.click("#confirm")
    assert "max_starts must be" in page.locator("#error").inner_text()
    assert queue.stats().rate_limits == {}  # refused: nothing written
    page.goto(served.url + "/")
    page.click("#limit-queue-mail")
    page.fill("#max_starts", "2")
    page.fill("#per_seconds", "60")
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "Queue mail: at most 2 starts per 60 s."
    assert queue.stats().rate_limits == {"mail": (2, 60)}
    queue.enqueue_many([{"type": "send_email", "queue": "mail"}] * 3)
    assert len(queue.claim("w-2", queues=["mail"], limit=10)) == 2  # the limit holds
    page.goto(served.url + "/")
    assert page.locator("#limit-mail").inner_text() == "at most 2 per 60 s"
    page.click("#limit-queue-mail")  # the form starts from the current limit
    assert page.locator("#max_starts").input_value() == "2"
    page.goto(served.url + "/")
    page.click("#unlimit-queue-mail")
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "Queue mail: rate limit removed."
    assert queue.stats().rate_limits == {}


def test_discarding_a_job_deletes_it_and_its_history(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + f"/jobs/{jobs.failed}")
    page.click("#discard")
    assert "cannot be undone" in page.locator("#discard-warning").inner_text()
    assert queue.get_job(jobs.failed).status == JobStatus.FAILED  # asking changed nothing
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "1 job discarded."
    page.goto(served.url + f"/jobs/{jobs.failed}")
    assert "there is no job with id" in page.content()
    page.goto(served.url + f"/jobs/{jobs.running}")
    assert page.locator("#discard").count() == 0  # a held job is never offered


def test_discarding_matching_jobs_deletes_only_the_matches(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + "/jobs?status=FAILED")
    page.click("#bulk-discard")
    assert page.locator("#count").inner_text() == "2"
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "2 jobs discarded."
    assert queue.counts_by_status()["FAILED"] == 0
    assert queue.get_job(jobs.succeeded).status == JobStatus.SUCCEEDED


def test_cancel_matching_counts_the_dependents_the_cascade_cancelled(serve, page, queue):
    parent = queue.enqueue("fetch", queue="etl").id
    children = [queue.enqueue("load", {"n": n}, depends_on=[parent]).id for n in range(2)]
    served = serve(enable_actions=True)
    page.goto(served.url + "/jobs?queue=etl")
    page.click("#bulk-cancel")
    assert page.locator("#count").inner_text() == "1"
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "1 job cancelled."
    assert page.locator("#dependents").inner_text().startswith("2 jobs waiting on it cancelled")
    for child in children:
        assert queue.get_job(child).status == JobStatus.CANCELLED
        assert "CANCELLED" in event_names(queue.context.engine, child)
        assert ("CANCELLED", "dashboard") in events_by(queue, child)


def test_schedules_can_be_run_now_paused_and_resumed(serve, page, queue, clock):
    from sqlq_orm import Schedule

    seeded = seed_schedules(queue, clock)
    declared = Schedule.declare(
        "0 9 * * *", "send_report", name=seeded.ticked, queue="reports", timezone="Europe/Paris"
    )
    served = serve(enable_actions=True, schedules=[declared])
    page.goto(served.url + "/schedules")
    assert page.locator(f"#run-{seeded.due}").count() == 0  # not declared to the dashboard
    before = queue.counts_by_status()["QUEUED"]
    page.click(f"#run-{seeded.ticked}")
    assert queue.counts_by_status()["QUEUED"] == before  # asking changed nothing
    page.click("#confirm")
    outcome = page.locator("#outcome").inner_text()
    assert outcome.startswith(f"Schedule {seeded.ticked} enqueued job ")
    job_id = int(outcome.rsplit(" ", 1)[1].rstrip("."))
    assert queue.get_job(job_id).type == "send_report"
    assert ("ENQUEUED", "dashboard") in events_by(queue, job_id)

    page.goto(served.url + "/schedules")
    page.click(f"#pause-{seeded.due}")
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == f"Schedule {seeded.due} paused."
    state = {s.name: s for s in queue.list_schedules()}
    assert state[seeded.due].paused_at is not None
    page.goto(served.url + "/schedules")
    assert "paused since" in page.locator("#schedules").inner_text()
    page.click(f"#resume-{seeded.due}")
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == f"Schedule {seeded.due} resumed."
    assert {s.name: s for s in queue.list_schedules()}[seeded.due].paused_at is None


def test_controls_refuse_without_actions_and_name_a_bad_target(serve, page, queue):
    seed(queue)
    served = serve()
    response = page.goto(served.url + "/controls/pause-queue?name=mail")
    assert response.status == 403 and "read-only" in page.content()
    served = serve(enable_actions=True)
    response = page.goto(served.url + "/controls/run-schedule?name=nightly")
    assert response.status == 409 and "was not given them" in page.content()
    response = page.goto(served.url + "/controls/pause-queue?name=")
    assert response.status == 400 and "queue must be a non-empty string" in page.content()
