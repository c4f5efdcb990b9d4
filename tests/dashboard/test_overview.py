"""The overview answers the five questions at a glance, in a real chromium: counts per
queue and per type, the longest-silent held job and who holds it, the types that fail
again and again with the retry distribution, the Top-N failures (failed vs retrying),
retention; plus run time p50/p95 per type."""

from __future__ import annotations

import pytest

from tests.dashboard.conftest import screenshot
from tests.dashboard.seed import seed

pytestmark = pytest.mark.browser


def cells(page, table: str) -> list[list[str]]:
    rows = page.locator(f"#{table} tbody tr")
    return [
        [c.strip() for c in rows.nth(i).locator("th, td").all_inner_texts()]
        for i in range(rows.count())
    ]


def test_the_overview_answers_the_five_questions(serve, page, queue, clock):
    jobs = seed(queue)
    flaky = queue.enqueue("flaky", max_retries=3, queue="retries").id
    [lease] = queue.claim("w-alive", queues=["retries"], start=True)
    assert lease.job_id == flaky
    clock.advance(7)
    queue.fail(lease, "TIMEOUT:UPSTREAM", "slow")  # retrying: QUEUED, retry 1
    clock.advance(200)
    served = serve()
    page.goto(served.url + "/")

    # 1. Counts by state per queue (already) and per type.
    by_type = {row[0]: row[1:] for row in cells(page, "by-type")}
    assert by_type["charge_card"][5] == "2"  # FAILED column (after waiting..succeeded)
    assert by_type["flaky"][1] == "1"  # QUEUED
    # 2. The longest-silent held job, and who holds it.
    stuck = " ".join(page.locator("#stuck").inner_text().split())
    assert f"job {jobs.running} (resize_image) on w-alive" in stuck and "3m 27s" in stuck
    # 3. Types that fail again and again, and the retry distribution.
    types = {row[0]: row[1:] for row in cells(page, "types")}
    assert types["charge_card"][:2] == ["2", "0"] and types["flaky"][:3] == ["0", "1", "1"]
    assert cells(page, "retries") == [["flaky", "1", "1", "0"]]
    # 4. Failure Top-N: failed vs still retrying.
    errors = {row[0]: row[1:] for row in cells(page, "errors")}
    assert errors == {"PAYMENT:CARD_DECLINED": ["2", "0"], "TIMEOUT:UPSTREAM": ["0", "1"]}
    # 5. Retention: how long kept, how many, due for pruning.
    retention = {row[0]: row[1:] for row in cells(page, "retention")}
    assert retention["FAILED"][:2] == ["90 days", "2"] and retention["FAILED"][3] == "0"
    # Run time per type.
    durations = {row[0]: row[1:] for row in cells(page, "durations")}
    assert durations["charge_card"][:2] == ["2", "0s"]  # jobs that ran to an end
    screenshot(page, f"overview-five-questions-{queue.context.engine.dialect.name}")


def test_an_empty_queue_reads_as_empty_not_broken(serve, page, queue):
    page.goto(serve().url + "/")
    assert "none" in page.locator("#stuck").inner_text()
    assert cells(page, "types") == [["no type has failed or is retrying"]]
    assert cells(page, "retries") == [["no job has been retried"]]


def test_the_charts_cover_the_chosen_range_and_say_their_bucket_size(serve, page, queue, clock):
    old = queue.enqueue("nightly").id
    [lease] = queue.claim("w-1", start=True)
    queue.succeed(lease)  # finished now ...
    clock.advance(3 * 86_400)  # ... which is three days ago when the page is read
    served = serve()
    page.goto(served.url + "/")
    assert page.locator("#throughput-caption").inner_text().endswith("per 2 min, last hour")
    assert page.locator("svg.chart").first.locator("g").count() == 30
    assert page.locator("svg.chart rect.ok").count() == 0  # not in the last hour
    page.click("#range-7d")
    assert "range=7d" in page.url
    assert page.locator("#range-7d").get_attribute("aria-current") == "true"
    caption = page.locator("#throughput-caption").inner_text()
    assert caption.endswith("per 4 h, last 7 days")
    assert page.locator("svg.chart").first.locator("g").count() == 42
    bars = page.locator("svg.chart").first.locator("g title").all_text_contents()
    assert sum("1 succeeded" in t for t in bars) == 1, old
    page.click("#range-24h")
    assert page.locator("#throughput-caption").inner_text().endswith("per 30 min, last 24 hours")
    assert page.locator("svg.chart rect.ok").count() == 0
    response = page.goto(served.url + "/?range=1y")
    assert response is not None and response.status == 400
    assert "range must be one of 1h, 24h, 7d, got '1y'" in page.locator("#error").inner_text()


def test_retention_shows_table_sizes_and_how_long_no_prune_ran(serve, page, queue, clock):
    seed(queue)  # one SUCCEEDED job, two FAILED, finished at the pinned start
    served = serve()
    page.goto(served.url + "/")
    assert "Nothing is due" in page.locator("#last-prune").inner_text()
    # 32 days later the SUCCEEDED job (kept 30 days) has been due for 2 days: no
    # prune can have run since.
    clock.advance(32 * 86_400)
    # Sizes are measured in the background: the first view says so, a later one has them.
    deadline = 30
    while "sqlq_jobs" not in page.locator("#sizes").inner_text() and deadline:
        page.wait_for_timeout(200)
        page.reload()
        deadline -= 1
    sizes = dict(cells(page, "sizes"))
    assert {"sqlq_jobs", "sqlq_job_attempts", "sqlq_job_events"} <= set(sizes)
    assert sizes["sqlq_jobs"].endswith("B")  # e.g. "24.6 kB"
    assert "None has run for at least 2d" in page.locator("#last-prune").inner_text()
