"""Operator comforts in a real chromium: status badges readable (WCAG AA, 4.5:1) in
light and dark mode, a favicon, thousands separators, and screenshots of the main
pages at desktop and phone widths (light and dark) for a person to look at."""

from __future__ import annotations

import pytest

from tests.dashboard.conftest import screenshot
from tests.dashboard.seed import seed

pytestmark = pytest.mark.browser

# The contrast ratio of WCAG 2: relative luminance of the text and background colours.
CONTRAST = """() => {
  function rgb(text) { return text.match(/[\\d.]+/g).slice(0, 3).map(Number); }
  function lum(c) {
    const [r, g, b] = c.map(v => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  return [...document.querySelectorAll('.badge')].map(el => {
    const style = getComputedStyle(el);
    const [a, b] = [lum(rgb(style.color)), lum(rgb(style.backgroundColor))];
    return [el.className, (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)];
  });
}"""

PAGES = ("/", "/jobs", "/workers")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_status_badges_meet_wcag_aa_contrast(serve, browser, queue, scheme):
    jobs = seed(queue)
    queue.enqueue("report", depends_on=[jobs.queued])  # a WAITING badge too
    served = serve()
    context = browser.new_context(color_scheme=scheme)
    page = context.new_page()
    try:
        seen = set()
        for path in (*PAGES, f"/jobs/{jobs.failed}"):
            page.goto(served.url + path)
            for name, ratio in page.evaluate(CONTRAST):
                seen.add(name)
                assert ratio >= 4.5, f"{name} on {path} ({scheme}): {ratio:.2f}:1"
        for status in ("waiting", "queued", "running", "succeeded", "failed"):
            assert f"badge status-{status}" in seen, seen
    finally:
        context.close()


def test_a_favicon_and_thousands_separators(serve, page, queue):
    queue.enqueue_many([{"type": "bulk"} for _ in range(1_234)])
    served = serve()
    page.goto(served.url + "/")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon and page.request.get(served.url + icon).status == 200
    assert page.locator("#total-jobs").inner_text() == "1,234"


@pytest.mark.parametrize("width, height, label", [(1280, 900, "desktop"), (390, 844, "phone")])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_of_the_main_pages(serve, browser, queue, clock, width, height, label, scheme):
    jobs = seed(queue)
    served = serve()
    context = browser.new_context(
        viewport={"width": width, "height": height},
        is_mobile=label == "phone",
        color_scheme=scheme,
    )
    page = context.new_page()
    name = queue.context.engine.dialect.name
    try:
        for page_name, path in (
            ("overview", "/"),
            ("jobs", "/jobs"),
            ("job", f"/jobs/{jobs.failed}"),
            ("workers", "/workers"),
        ):
            page.goto(served.url + path)
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{path} is {overflow}px wider than the {label} screen"
            screenshot(page, f"{page_name}-{label}-{scheme}-{name}")
    finally:
        context.close()


def test_the_workers_page_runs_only_the_workers_queries(serve, page, queue):
    from sqlalchemy import event

    jobs = seed(queue)
    statements: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    served = serve()
    engine = queue.context.engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        page.goto(served.url + "/workers")
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert "w-alive" in page.locator("#workers").inner_text()
    assert str(jobs.running) in page.locator("#held").inner_text()
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    # The workers, what each holds, the oldest held (and the clock): not the report's
    # counts, retries, durations, error codes, throughput or retention.
    assert len(reads) <= 4, reads
    assert not any("sqlq_job_attempts" in s for s in reads), reads
