"""Every page in a real (headless) chromium, against a dashboard served by uvicorn.

Each page (the schedules page too) is opened, checked for its content and saved as a
screenshot artifact; the retry button is clicked through its confirmation and the job
is QUEUED in the database; the page refreshes itself in place.
"""

from __future__ import annotations

import pytest

from sqlq_orm.schema.states import JobStatus
from tests.dashboard.conftest import screenshot
from tests.dashboard.seed import seed, seed_schedules

pytestmark = pytest.mark.browser


def backend(queue) -> str:
    return queue.context.engine.dialect.name


def status_of(queue, job_id: int) -> str:
    return queue.get_job(job_id).status


def test_every_page_shows_its_content(serve, page, queue):
    jobs = seed(queue)
    served = serve()
    name = backend(queue)

    page.goto(served.url + "/")
    assert page.locator("h1").inner_text() == "Overview"
    assert page.locator("#total-jobs").inner_text() == "5"
    by_queue = page.locator("#by-queue").inner_text()
    assert "mail" in by_queue and "media" in by_queue
    assert "PAYMENT:CARD_DECLINED" in page.locator("#errors").inner_text()
    assert page.locator("svg.chart").count() == 2
    assert "expired but not swept" in page.locator("#leases").inner_text()
    screenshot(page, f"overview-{name}")

    page.goto(served.url + "/jobs")
    rows = page.locator("#jobs tbody tr")
    assert rows.count() == 5
    assert rows.first.locator("td").first.inner_text() == str(jobs.queued)
    screenshot(page, f"jobs-{name}")

    page.goto(served.url + "/jobs?status=FAILED&type=charge_card")
    assert page.locator("#jobs tbody tr").count() == 2
    assert page.locator("select[name=status]").input_value() == "FAILED"
    screenshot(page, f"jobs-filtered-{name}")

    page.goto(served.url + f"/jobs/{jobs.failed}")
    assert page.locator("#job-status").inner_text() == "FAILED"
    assert '"amount": "12.50"' in page.locator("#payload").inner_text()
    assert "PAYMENT:CARD_DECLINED" in page.locator("#attempts").inner_text()
    events = page.locator("#events").inner_text()
    assert "ENQUEUED" in events and "FAILED" in events
    assert page.locator("#retry").count() == 0  # read-only: no action buttons
    screenshot(page, f"job-{name}")

    page.goto(served.url + "/workers")
    workers = page.locator("#workers").inner_text()
    assert "w-alive" in workers and "box-1" in workers and "alive" in workers
    assert str(jobs.running) in page.locator("#held").inner_text()
    screenshot(page, f"workers-{name}")

    page.goto(served.url + "/metrics")
    assert 'sqlq_jobs{queue="default",status="FAILED"} 2.0' in page.content()


def test_the_schedules_page_shows_each_schedule_in_its_own_time_zone(serve, page, queue, clock):
    schedules = seed_schedules(queue, clock)
    served = serve()
    page.goto(served.url + "/")
    page.click("header nav >> text=Schedules")
    assert page.locator("h1").inner_text() == "Schedules"
    assert page.locator("header nav a[aria-current]").inner_text() == "Schedules"
    rows = page.locator("#schedules tbody tr")
    assert rows.count() == 2
    # By name: cleanup, then morning-report. Cells: name, type, queue, cron, timezone,
    # last run, next run, jobs link.
    cleanup = rows.nth(0).locator("td").all_inner_texts()
    report = rows.nth(1).locator("td").all_inner_texts()
    assert cleanup[:7] == [
        schedules.due, "prune_tmp", "default", "*/15 * * * *", "UTC", "never",
        "2023-11-14 22:15 UTC overdue by 9h 45m",
    ]  # fmt: skip
    # 09:00 in Paris reads 09:00 (not 08:00Z): the CLI's way of showing a schedule.
    assert report[:7] == [
        schedules.ticked, "send_report", "reports", "0 9 * * *", "Europe/Paris",
        "2023-11-15 09:00 CET", "2023-11-16 09:00 CET",
    ]  # fmt: skip
    screenshot(page, f"schedules-{backend(queue)}")

    rows.nth(1).locator("a", has_text="send_report jobs").click()
    assert page.locator("input[name=type]").input_value() == "send_report"
    assert page.locator("input[name=queue]").input_value() == "reports"
    jobs = page.locator("#jobs tbody tr")
    assert jobs.count() == 1
    assert jobs.first.locator("td").first.inner_text() == str(schedules.ticked_job)


def test_the_pages_fit_a_phone_screen(serve, browser, queue, clock):
    seed(queue)
    seed_schedules(queue, clock)
    served = serve()
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        for path in ("/", "/jobs", "/workers", "/schedules"):
            page.goto(served.url + path)
            # Wide tables scroll inside their own box; the page itself never does.
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{path} is {overflow}px wider than the phone"
        page.goto(served.url + "/")
        screenshot(page, f"overview-phone-{backend(queue)}")
    finally:
        context.close()


def test_a_list_sorted_by_a_column_off_a_phone_screen_opens_with_that_column_in_view(
    serve, browser, queue
):
    if backend(queue) == "mysql":
        pytest.skip("the page's script, not a query: SQLite and PostgreSQL run it")
    seed(queue)
    served = serve()
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        page.goto(served.url + "/jobs?sort=finished_at")
        header = page.locator("#jobs thead th[aria-sort]")
        assert "finished" in header.inner_text()
        # The column's left and right edges against the box the table scrolls in.
        inside = header.evaluate(
            """th => {
                let box = th.parentNode;
                while (box.scrollWidth <= box.clientWidth) box = box.parentNode;
                const outer = box.getBoundingClientRect(), cell = th.getBoundingClientRect();
                return [box.scrollLeft > 0, cell.left >= outer.left - 1,
                        cell.right <= outer.right + 1];
            }"""
        )
        assert inside == [True, True, True]
    finally:
        context.close()


def test_clicking_retry_on_a_failed_job_queues_it(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + f"/jobs/{jobs.failed}")
    page.click("#retry")
    assert page.locator("h1").inner_text() == "Retry?"
    assert status_of(queue, jobs.failed) == JobStatus.FAILED  # asking changed nothing
    screenshot(page, f"confirm-retry-{backend(queue)}")
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "1 job retried."
    assert status_of(queue, jobs.failed) == JobStatus.QUEUED
    assert status_of(queue, jobs.failed_too) == JobStatus.FAILED
    page.goto(served.url + f"/jobs/{jobs.failed}")
    assert page.locator("#job-status").inner_text() == "QUEUED"
    assert "RETRIED by dashboard" in page.locator("#events").inner_text()


def test_retrying_a_filtered_selection_queues_every_match(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + "/jobs?error_code=PAYMENT:CARD_DECLINED")
    page.click("text=Retry matching…")
    assert page.locator("#count").inner_text() == "2"
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "2 jobs retried."
    assert status_of(queue, jobs.failed) == JobStatus.QUEUED
    assert status_of(queue, jobs.failed_too) == JobStatus.QUEUED
    assert status_of(queue, jobs.succeeded) == JobStatus.SUCCEEDED


def test_cancelling_from_the_job_page_cancels_it(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + f"/jobs/{jobs.queued}")
    page.click("#cancel")
    page.click("#confirm")
    assert page.locator("#outcome").inner_text() == "1 job cancelled."
    assert status_of(queue, jobs.queued) == JobStatus.CANCELLED


def test_the_overview_refreshes_itself_without_reloading(serve, page, queue):
    seed(queue)
    served = serve(refresh_seconds=1)
    page.goto(served.url + "/")
    assert page.locator("#total-jobs").inner_text() == "5"
    page.evaluate("window.loadedOnce = true")
    queue.enqueue("send_email", {"to": "cy@example.com"})
    # Playwright polls the element until the refresh lands (no fixed sleep).
    page.locator("#total-jobs", has_text="6").wait_for(timeout=30_000)
    assert page.evaluate("window.loadedOnce") is True  # same document: no reload


def test_a_form_sent_without_its_csrf_token_changes_nothing(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=True)
    page.goto(served.url + f"/actions/retry?job={jobs.failed}")
    page.evaluate("document.querySelector('input[name=csrf_token]').remove()")
    page.click("#confirm")
    assert "CSRF token is missing" in page.locator("#error").inner_text()
    assert status_of(queue, jobs.failed) == JobStatus.FAILED


def test_a_read_only_dashboard_offers_no_actions_and_refuses_them(serve, page, queue):
    jobs = seed(queue)
    served = serve(enable_actions=False)
    page.goto(served.url + f"/jobs/{jobs.failed}")
    assert page.locator("#retry").count() == 0
    assert "read-only" in page.locator("header .mode").inner_text()
    response = page.goto(served.url + f"/actions/retry?job={jobs.failed}")
    assert response.status == 403
    assert "actions are disabled" in page.locator("#error").inner_text()
    assert status_of(queue, jobs.failed) == JobStatus.FAILED


def test_the_dependencies_page_shows_what_each_waiting_job_waits_on(serve, page, queue):
    fetch = queue.enqueue("fetch").id
    done = queue.enqueue("warm_cache").id
    (lease,) = [lease for lease in queue.claim("w-1", limit=2, start=True) if lease.job_id == done]
    queue.succeed(lease)
    report = queue.enqueue("report", depends_on=[fetch, done]).id
    audit = queue.enqueue("audit", depends_on=[fetch], on_parent_failure="run").id
    served = serve()
    name = backend(queue)

    page.goto(served.url + "/dependencies")
    assert page.locator("h1").inner_text() == "Dependencies"
    rows = page.locator("#waiting tbody tr")
    assert rows.count() == 2
    first = rows.first.inner_text()
    assert str(report) in first and f"{fetch} fetch" in first and f"{done} warm_cache" in first
    assert "(runs anyway)" in rows.nth(1).inner_text()
    screenshot(page, f"dependencies-{name}")

    rows.first.locator("a").first.click()
    assert page.locator("#job-status").inner_text() == "WAITING"
    parents = page.locator("#parents tbody tr")
    assert [parents.nth(i).locator("td").first.inner_text() for i in range(2)] == [
        str(fetch), str(done),
    ]  # fmt: skip
    parents.first.locator("a").click()
    children = page.locator("#children").inner_text()
    assert str(report) in children and str(audit) in children and "run" in children
    screenshot(page, f"job-with-children-{name}")


def test_a_worker_page_shows_what_it_holds_what_it_ran_and_its_queues(serve, page, queue):
    jobs = seed(queue)
    served = serve()
    page.goto(served.url + "/workers")
    page.click("#workers >> text=w-alive")
    assert page.locator("h1").inner_text().startswith("Worker w-alive")
    assert page.locator("#worker-state").text_content() == "alive"
    assert page.locator("#worker-queues").inner_text() == "default, mail, media"
    held = page.locator("#held tbody tr td:first-child").all_inner_texts()
    assert held == [str(jobs.running)]
    recent = page.locator("#recent tbody tr td:first-child").all_inner_texts()
    assert recent == [str(j) for j in (jobs.running, jobs.failed_too, jobs.failed, jobs.succeeded)]
    screenshot(page, f"worker-{backend(queue)}")
    # A worker id no row has (gone): its claimed jobs still show, and it says so.
    page.goto(served.url + "/worker?id=w-gone")
    assert "No worker is registered with this id" in page.locator("#unregistered").inner_text()
    response = page.goto(served.url + "/worker?id=")
    assert response is not None and response.status == 400


def test_sorting_by_a_column_header_keeps_the_filter_and_pages_in_that_order(
    serve, page, queue, monkeypatch
):
    from sqlq_orm.dashboard import pages
    from sqlq_orm.ops import jobsort

    if backend(queue) == "mysql":
        pytest.skip("the same statements as on SQLite; tests/conformance/test_jobsort runs them")
    monkeypatch.setattr(pages, "PAGE_SIZE", 2)
    monkeypatch.setattr(jobsort, "SORT_WINDOW", 5)  # the window: every job but the oldest
    queue.enqueue("other", priority=9)
    ids = {queue.enqueue("email", priority=p).id: p for p in (1, 3, 0, 3, 2)}
    by_priority = sorted(ids, key=lambda i: (ids[i], i), reverse=True)
    served = serve()

    page.goto(served.url + "/jobs?type=email")
    page.click("#jobs thead >> text=priority")
    header = page.locator("#jobs thead th", has_text="priority")
    assert header.get_attribute("aria-sort") == "descending"
    assert page.locator("#jobs thead th[aria-sort]").count() == 1
    assert "sort=priority" in page.url and "type=email" in page.url
    shown = page.locator("#jobs tbody tr td:first-child").all_inner_texts()
    page.click("#older")
    shown += page.locator("#jobs tbody tr td:first-child").all_inner_texts()
    page.click("#older")
    shown += page.locator("#jobs tbody tr td:first-child").all_inner_texts()
    assert shown == [str(i) for i in by_priority]
    assert f"among the jobs from id {min(ids)} up" in page.locator("#sort-window").inner_text()
    screenshot(page, f"jobs-sorted-{backend(queue)}")

    page.click("#jobs thead >> text=priority")  # the same header again: ascending
    assert header.get_attribute("aria-sort") == "ascending"
    assert page.locator("#jobs tbody tr td:first-child").all_inner_texts() == [
        str(i) for i in by_priority[::-1][:2]
    ]
    page.fill("input[name=type]", "other")  # a new filter keeps the order
    page.click("text=Filter")
    assert "sort=priority" in page.url and "dir=asc" in page.url
    assert header.get_attribute("aria-sort") == "ascending"
