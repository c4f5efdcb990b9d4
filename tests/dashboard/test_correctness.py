"""What the dashboard got wrong, in a real chromium and over HTTP: out-of-range ids,
confirm pages for jobs that cannot take the action, re-POST on reload, WAITING jobs
left out of a bulk cancel, bulk counts that stopped at 1,000, bulk actions offered
where nothing can match."""

from __future__ import annotations

import re
import urllib.parse

import pytest

from sqlq_orm.schema.states import JobStatus
from tests.dashboard.seed import seed
from tests.dashboard.test_security import Raw
from tests.dashboard.test_writes import retry_is_unchanged
from tests.support.queue_helpers import event_names

TOO_BIG = str(2**63)
WAY_TOO_BIG = "99999999999999999999"


@pytest.mark.parametrize(
    "path, status, message",
    [
        (f"/jobs/{WAY_TOO_BIG}", 404, f"no job with id {WAY_TOO_BIG}"),
        (f"/jobs/{TOO_BIG}", 404, f"no job with id {TOO_BIG}"),
        (f"/jobs?id={TOO_BIG}", 400, f"id must be a job id from 1 to {2**63 - 1}, got {TOO_BIG}"),
        (f"/jobs?before={WAY_TOO_BIG}", 400, "before must be a job id"),
        (f"/jobs?sort=run_at&after=7:{WAY_TOO_BIG}", 400, "after must be a job id"),
        (f"/actions/retry?job={TOO_BIG}", 400, "job must be a job id"),
        (f"/actions/cancel?job={WAY_TOO_BIG}", 400, "job must be a job id"),
        (f"/actions/cancel?id={TOO_BIG}", 400, "id must be a job id"),
        (f"/actions/retry?selected=1&selected={TOO_BIG}", 400, "selected must be a job id"),
        (
            "/actions/retry?" + "&".join(f"selected={n}" for n in range(1, 502)),
            400,
            "at most 500 jobs can be selected, got 501",
        ),
    ],
)
def test_an_out_of_range_id_is_named_not_a_server_error(serve, queue, path, status, message):
    seed(queue)
    got, body, _ = Raw(serve(enable_actions=True).url).request("GET", path)
    assert (got, message in body) == (status, True), body[-600:]


@pytest.mark.parametrize(
    "arguments, message",
    [
        ('{"t":"\\ud800"}', "args_contain[&#39;t&#39;] is not valid Unicode"),
        ('{"\\ud800":1}', "args_contain key is not valid Unicode"),
        ("[" * 5000, "arguments is nested too deeply"),
        ('{"t":' + "[" * 5000, "arguments is nested too deeply"),
    ],
    ids=["surrogate-value", "surrogate-key", "deep-list", "deep-member"],
)
def test_hostile_arguments_filters_are_named_not_a_server_error(serve, queue, arguments, message):
    # Issue 34 item 14: a lone surrogate or 5,000 levels of "[" answered 500.
    query = urllib.parse.urlencode({"arguments": arguments})
    got, body, _ = Raw(serve().url).request("GET", f"/jobs?{query}")
    assert (got, message in body) == (400, True), body[-600:]


@pytest.mark.parametrize("action", ["retry", "cancel"])
@pytest.mark.parametrize("job", [TOO_BIG, WAY_TOO_BIG])
def test_a_posted_out_of_range_id_is_refused_and_changes_nothing(serve, queue, action, job):
    jobs = seed(queue)
    raw = Raw(serve(enable_actions=True).url)
    cookie, token = raw.form(jobs.failed)
    form = urllib.parse.urlencode({"csrf_token": token, "job": job}).encode()
    status, body, _ = raw.request("POST", f"/actions/{action}", form, Cookie=f"sqlq_csrf={cookie}")
    assert status == 400 and "job must be a job id" in body
    retry_is_unchanged(queue, jobs.failed)


def test_no_confirm_form_for_a_job_that_does_not_exist_or_cannot_take_the_action(serve, queue):
    jobs = seed(queue)
    raw = Raw(serve(enable_actions=True).url)
    status, body, _ = raw.request("GET", "/actions/retry?job=999")
    assert status == 404 and "no job with id 999" in body and 'id="confirm"' not in body
    status, body, _ = raw.request("GET", f"/actions/retry?job={jobs.queued}")
    assert status == 409 and 'id="confirm"' not in body
    assert f"job {jobs.queued} is QUEUED: only FAILED or CANCELLED jobs can be retried" in body
    status, body, _ = raw.request("GET", f"/actions/cancel?job={jobs.succeeded}")
    assert status == 409 and "is SUCCEEDED" in body and 'id="confirm"' not in body
    assert raw.request("GET", f"/actions/retry?job={jobs.failed}")[0] == 200  # the control


@pytest.mark.browser
def test_reloading_the_outcome_page_does_not_send_the_form_again(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + f"/actions/retry?job={jobs.failed}")
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "1 job retried."
    assert "/actions/retry/done?outcome=" in page.url
    # The job is claimed and fails again: a re-POST would now retry it a second time.
    [lease] = queue.claim("w-2", start=True, queues=["default"], limit=1)
    assert lease.job_id == jobs.failed
    queue.fail(lease, "PAYMENT:CARD_DECLINED", "again", retryable=False)
    response = page.reload()
    assert response is not None and response.request.method == "GET"
    assert page.locator("#outcome").inner_text() == "1 job retried."
    assert event_names(queue.context.engine, jobs.failed).count("RETRIED") == 1
    assert queue.get_job(jobs.failed).status == JobStatus.FAILED
    # An outcome this process does not hold (restart, another process) says so.
    page.goto(served.url + "/actions/retry/done?outcome=nope")
    assert "no longer held" in page.locator("#error").inner_text()


@pytest.mark.browser
def test_cancel_matching_includes_waiting_jobs(serve, page, queue):
    parent = queue.enqueue("fetch").id
    waiting = [queue.enqueue("report", {"n": n}, depends_on=[parent]).id for n in range(3)]
    served = serve(enable_actions=True)
    page.goto(served.url + f"/jobs/{waiting[0]}")
    assert page.locator("#cancel").count() == 1  # the job page offers it...
    page.goto(served.url + "/jobs?status=WAITING")
    page.click("#bulk-cancel")
    assert page.locator("#count").inner_text() == "3"  # ...and so does the bulk action
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "3 jobs cancelled."
    assert {queue.get_job(j).status for j in waiting} == {JobStatus.CANCELLED}
    assert queue.get_job(parent).status == JobStatus.QUEUED


@pytest.mark.browser
def test_bulk_actions_are_offered_only_where_something_can_match(serve, page, queue):
    seed(queue)
    served = serve(enable_actions=True)
    offered = {}
    for status in ("SUCCEEDED", "FAILED", "QUEUED", ""):
        page.goto(served.url + f"/jobs?status={status}&queue=default")
        offered[status] = [page.locator(f"#bulk-{name}").count() for name in ("retry", "cancel")]
    assert offered == {"SUCCEEDED": [0, 0], "FAILED": [1, 0], "QUEUED": [0, 1], "": [1, 1]}


@pytest.mark.browser
@pytest.mark.slow
def test_bulk_counts_are_exact_past_a_thousand_and_the_cap_is_stated(
    serve, page, queue, monkeypatch
):
    import sqlq_orm.dashboard.actions as actions

    monkeypatch.setattr(actions, "MAX_BULK", 1_000)  # 10,000 by default; smaller here
    ids = queue.enqueue_many([{"type": "bulk", "queue": "bulk"} for _ in range(1_234)])
    served = serve(enable_actions=True)
    page.goto(served.url + "/jobs?queue=bulk")
    page.click("#bulk-cancel")
    assert page.locator("#count").inner_text() == "1,234"
    assert "applies to the oldest 1,000" in page.locator("#capped").inner_text()
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "1,000 jobs cancelled."
    statuses = [queue.get_job(j).status for j in (ids[-1], ids[1000], ids[999], ids[0])]
    assert statuses == ["QUEUED", "QUEUED", "CANCELLED", "CANCELLED"]  # the oldest 1,000
    page.goto(served.url + "/actions/cancel?queue=bulk")
    assert page.locator("#count").inner_text() == "234"
    assert page.locator("#capped").count() == 0
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "234 jobs cancelled."
    counts = queue.counts_by_status()
    assert counts["CANCELLED"] == 1_234 and counts["QUEUED"] == 0


@pytest.mark.browser
def test_the_overview_tells_waiting_on_parents_from_queue_latency(serve, page, queue, clock):
    parent = queue.enqueue("fetch").id
    queue.enqueue("report", depends_on=[parent])
    clock.advance(90)
    page.goto(serve().url + "/")
    cards = page.locator(".cards").inner_text()
    assert "1 waiting on parents" in " ".join(cards.split())
    assert "1m 30s oldest ready job has waited (queue latency)" in " ".join(cards.split())
    assert page.locator("h2", has_text="Queue latency").count() == 1
    assert "oldest waiting" not in page.content()


@pytest.mark.browser
def test_a_requeued_job_shows_no_claim_of_a_past_attempt_and_event_times_are_times(
    serve, page, queue, clock
):
    job = queue.enqueue("flaky", max_retries=2).id
    [lease] = queue.claim("w-1", start=True)
    queue.heartbeat(lease)
    queue.fail(lease, "TIMEOUT:UPSTREAM", "slow upstream")  # retry scheduled: QUEUED
    served = serve()
    page.goto(served.url + f"/jobs/{job}")
    assert page.locator("#job-status").inner_text() == "QUEUED"
    fields = page.locator("table.fields").inner_text()
    for stale in ("claimed", "heartbeat", "lease expires", "worker"):
        assert stale not in fields.split(), (stale, fields)
    assert "w-1" in page.locator("#attempts").inner_text()  # the attempt says who ran it
    scheduled = page.locator("#events li", has_text="RETRY_SCHEDULED").inner_text()
    assert re.search(r'"run_at": "\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ"', scheduled), scheduled
    # The control: while it is held, the claim is shown.
    clock.advance(3600)  # past the backoff
    [lease] = queue.claim("w-2", start=True)
    page.goto(served.url + f"/jobs/{job}")
    assert "by w-2" in page.locator("table.fields").inner_text()


@pytest.mark.browser
def test_an_unset_app_column_reads_not_set(serve, page, engine):
    import sqlq_orm
    from sqlq_orm.dashboard import create_app
    from tests.acceptance.test_host_app import RENAMED

    RENAMED.base.metadata.create_all(engine)
    queue = sqlq_orm.Queue(engine, models=RENAMED.models)
    job = queue.enqueue("send_invoice", {"invoice": 12}).id
    page.goto(serve(app=create_app(engine, models=RENAMED.models)).url + f"/jobs/{job}")
    cell = page.locator("tr.app-column", has_text="tenant_id").locator("td")
    assert cell.inner_text() == "not set"


@pytest.mark.browser
def test_the_jobs_list_has_a_total_and_filters_by_worker_and_time(
    serve, page, queue, clock, monkeypatch
):
    jobs = seed(queue)  # all created at 2023-11-14 22:13:20Z
    clock.advance(3600)
    later = queue.enqueue("send_email", {"to": "late@example.com"}).id
    served = serve()
    page.goto(served.url + "/jobs")
    assert page.locator("#total").inner_text() == "6 jobs match (every job)"
    page.fill("input[name=worker]", "w-alive")
    page.click("form.filters button")
    assert "worker=w-alive" in page.url
    ids = page.locator("#jobs tbody tr td:first-child").all_inner_texts()
    assert str(later) not in ids and str(jobs.running) in ids
    page.goto(served.url + "/jobs?created_after=2023-11-14 23:00")
    assert page.locator("#total").inner_text() == "1 job matches"
    assert page.locator("#jobs tbody tr td:first-child").all_inner_texts() == [str(later)]
    assert page.locator("input[name=created_after]").input_value() == "2023-11-14 23:00"
    page.goto(served.url + "/jobs?created_before=2023-11-14T23:00")
    assert page.locator("#total").inner_text() == "5 jobs match"
    response = page.goto(served.url + "/jobs?created_after=yesterday")
    assert response is not None and response.status == 400
    assert "created_after must be a UTC time like" in page.locator("#error").inner_text()
    # A worker on the workers page links to its page, and that to its jobs.
    page.goto(served.url + "/workers")
    page.click("#workers >> text=w-alive")  # its own page, which links to its jobs
    page.click("#all-jobs")
    assert page.locator("input[name=worker]").input_value() == "w-alive"
    # Past one page, the total counts no further than MAX_COUNTED (10,000; 3 here).
    import sqlq_orm.dashboard.pages as pages
    from sqlq_orm.ops import joblist

    monkeypatch.setattr(pages, "PAGE_SIZE", 2)
    monkeypatch.setattr(pages, "MAX_COUNTED", 3)
    page.goto(served.url + "/jobs")
    assert page.locator("#total").inner_text() == "more than 3 jobs match (every job)"
    # A rare match is counted among the ids the page's scan read (2 here), and says
    # so; the exact count is one click away.
    for module in (pages, joblist):
        monkeypatch.setattr(module, "SCAN_CHUNK", 2)
    page.goto(served.url + "/jobs?type=send_email&created_before=2023-11-14 23:00")
    assert page.locator("#total").inner_text() == (
        "1 job matches among the newest 2 jobs (count them all)"
    )
    page.click("#count-all")
    assert page.locator("#total").inner_text() == "2 jobs match"


@pytest.mark.browser
def test_rows_ticked_on_the_list_can_be_retried_together_and_stay_ticked(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=True, refresh_seconds=1)
    page.goto(served.url + "/jobs")
    for job in (jobs.failed, jobs.failed_too, jobs.succeeded):
        page.check(f"input[name=selected][value='{job}']")
    queue.enqueue("send_sms", {"to": "+100"})  # the next update brings a new row...
    page.locator("#jobs tbody tr", has_text="send_sms").wait_for(timeout=30_000)
    for job in (jobs.failed, jobs.failed_too, jobs.succeeded):  # ...and keeps the ticks
        assert page.is_checked(f"input[name=selected][value='{job}']")
    page.click("#selected-retry")
    assert page.locator("#count").inner_text() == "2"
    assert f"{jobs.succeeded} (SUCCEEDED)" in page.locator("#not-applying").inner_text()
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "2 jobs retried."
    assert queue.get_job(jobs.failed).status == JobStatus.QUEUED
    assert queue.get_job(jobs.failed_too).status == JobStatus.QUEUED
    assert queue.get_job(jobs.succeeded).status == JobStatus.SUCCEEDED
    assert queue.get_job(jobs.queued).status == JobStatus.QUEUED


@pytest.mark.browser
def test_the_jobs_list_filters_by_arguments_and_a_bulk_action_keeps_the_filter(serve, page, queue):
    acme = [queue.enqueue("invoice", {"tenant": "acme", "n": n}).id for n in range(2)]
    globex = queue.enqueue("invoice", {"tenant": "globex", "n": 0}).id
    served = serve(enable_actions=True)
    page.goto(served.url + "/jobs")
    page.fill("input[name=arguments]", '{"tenant": "acme"}')
    page.click("form.filters button")
    ids = page.locator("#jobs tbody tr td:nth-child(2)").all_inner_texts()
    assert ids == [str(j) for j in reversed(acme)]
    assert page.locator("#total").inner_text() == "2 jobs match"
    assert page.locator("input[name=arguments]").input_value() == '{"tenant": "acme"}'
    page.click("#bulk-cancel")
    assert page.locator("#count").inner_text() == "2"
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "2 jobs cancelled."
    assert queue.get_job(globex).status == JobStatus.QUEUED
    response = page.goto(served.url + "/jobs?arguments=tenant=acme")
    assert response is not None and response.status == 400
    assert "arguments must be a JSON object like" in page.locator("#error").inner_text()


@pytest.mark.browser
def test_the_job_page_shows_what_a_job_returned_and_nothing_for_one_without(serve, page, queue):
    done = queue.enqueue("t", {"order": 7}).id
    (lease,) = queue.claim("w", start=True)
    queue.succeed(lease, result={"charged": 1250, "currency": "EUR"})
    plain = queue.enqueue("t", {"order": 8}).id
    url = serve().url

    page.goto(url + f"/jobs/{done}")
    shown = page.locator("#result").inner_text()
    assert '"charged": 1250' in shown and '"currency": "EUR"' in shown
    page.goto(url + f"/jobs/{plain}")
    assert page.locator("#result").count() == 0


@pytest.mark.browser
def test_the_jobs_list_filters_by_concurrency_key_and_names_an_unknown_app_column(
    serve, page, queue
):
    keyed = queue.enqueue("sync", concurrency_key="acct:1", concurrency_limit=1).id
    queue.enqueue("sync")
    url = serve(enable_actions=True).url  # the id is the second column, after the tick box
    page.goto(url + "/jobs")
    page.fill("input[name=concurrency_key]", "acct:1")
    page.click("form.filters button")
    assert page.locator("#jobs tbody tr td:nth-child(2)").all_inner_texts() == [str(keyed)]
    assert page.locator("input[name=concurrency_key]").input_value() == "acct:1"
    query = urllib.parse.urlencode({"columns": '{"tenant_id": 7}'})
    response = page.goto(url + "/jobs?" + query)
    assert response is not None and response.status == 400
    assert "'tenant_id' is not one of the app's columns" in page.locator("#error").inner_text()
