"""Live updates that keep the operator's place, in a real chromium: the data regions
change, a filter being typed, selected text and a table scrolled sideways do not; the
header says when the data is stale; the rate can be changed (and off)."""

from __future__ import annotations

import time

import pytest

from sqlq_orm.dashboard import create_app
from tests.dashboard.conftest import _Server
from tests.dashboard.seed import seed

pytestmark = pytest.mark.browser

UPDATE_WAIT_MS = 30_000


def status_text(page) -> str:
    return page.locator("#live-status").inner_text()


def wait_for_status(page, fragment: str) -> None:
    page.locator("#live-status", has_text=fragment).wait_for(timeout=UPDATE_WAIT_MS)


def test_a_filter_being_typed_survives_updates_and_the_rows_still_update(serve, page, queue):
    seed(queue)
    served = serve(refresh_seconds=1)
    page.goto(served.url + "/jobs")
    rows = page.locator("#jobs tbody tr")
    assert rows.count() == 5
    page.fill("input[name=type]", "send_")
    page.focus("input[name=type]")
    queue.enqueue("send_sms", {"to": "+100"})
    wait_for_status(page, "paused (typing)")  # an update was due and held back
    assert page.locator("input[name=type]").input_value() == "send_"
    assert page.evaluate("document.activeElement.name") == "type"
    assert rows.count() == 5
    page.locator("h1").click()  # done typing: the rows catch up, the text stays
    page.locator("#jobs tbody tr", has_text="send_sms").wait_for(timeout=UPDATE_WAIT_MS)
    assert page.locator("input[name=type]").input_value() == "send_"


def test_selected_text_is_not_taken_away(serve, page, queue):
    seed(queue)
    served = serve(refresh_seconds=1)
    page.goto(served.url + "/")
    page.evaluate(
        """() => { const cell = document.querySelector('#errors tbody td');
                   const range = document.createRange(); range.selectNodeContents(cell);
                   const s = getSelection(); s.removeAllRanges(); s.addRange(range); }"""
    )
    queue.enqueue("send_email", {"to": "cy@example.com"})
    wait_for_status(page, "paused (text selected)")
    assert page.evaluate("String(getSelection())") == "PAYMENT:CARD_DECLINED"
    assert page.locator("#total-jobs").inner_text() == "5"
    page.evaluate("getSelection().removeAllRanges()")
    page.locator("#total-jobs", has_text="6").wait_for(timeout=UPDATE_WAIT_MS)


def test_a_table_scrolled_sideways_stays_scrolled_on_a_phone(serve, browser, queue):
    seed(queue)
    served = serve(refresh_seconds=1)
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        page.goto(served.url + "/jobs")
        box = page.locator("#jobs").locator("xpath=..")
        box.evaluate("el => { el.scrollLeft = 120; }")
        assert box.evaluate("el => el.scrollLeft") >= 100
        before = box.evaluate("el => el.scrollLeft")
        queue.enqueue("send_sms", {"to": "+100"})
        page.locator("#jobs tbody tr", has_text="send_sms").wait_for(timeout=UPDATE_WAIT_MS)
        assert box.evaluate("el => el.scrollLeft") == before
    finally:
        context.close()


def test_the_header_says_stale_when_the_server_is_gone(queue, page):
    seed(queue)
    server = _Server(create_app(queue, refresh_seconds=1))
    server.__enter__()
    try:
        page.goto(f"http://127.0.0.1:{server.port}/")
        wait_for_status(page, "live, updated")
        assert "stale" not in (page.get_attribute("body", "class") or "")
    finally:
        server.__exit__()
    wait_for_status(page, "stale: the server does not answer; data from")
    assert "stale" in (page.get_attribute("body", "class") or "")


def test_the_header_says_stale_when_the_database_fails(serve, page, queue, monkeypatch):
    seed(queue)
    served = serve(refresh_seconds=1)
    page.goto(served.url + "/")
    wait_for_status(page, "live, updated")

    def gone(*args, **kwargs):
        raise ConnectionError("database unreachable")

    monkeypatch.setattr(queue, "stats", gone)  # the page's read fails: HTTP 500
    wait_for_status(page, "stale: the server answered 500")
    assert page.locator("#total-jobs").inner_text() == "5"  # still shown, marked stale
    monkeypatch.undo()
    wait_for_status(page, "live, updated")
    assert "stale" not in (page.get_attribute("body", "class") or "")


def test_the_update_rate_can_be_changed_and_turned_off(serve, page, queue):
    seed(queue)
    served = serve(refresh_seconds=1)
    page.goto(served.url + "/")
    assert page.locator("#live-rate").input_value() == "1"
    page.select_option("#live-rate", "0")
    wait_for_status(page, "updates off")
    refreshed = page.get_attribute("body", "data-refreshed")
    queue.enqueue("send_email", {"to": "cy@example.com"})
    time.sleep(2.5)  # more than two periods of the old rate: nothing may arrive
    assert page.locator("#total-jobs").inner_text() == "5"
    assert page.get_attribute("body", "data-refreshed") == refreshed
    page.reload()  # the choice is kept
    assert page.locator("#live-rate").input_value() == "0"
    page.select_option("#live-rate", "1")
    queue.enqueue("send_email", {"to": "dee@example.com"})
    page.locator("#total-jobs", has_text="7").wait_for(timeout=UPDATE_WAIT_MS)
