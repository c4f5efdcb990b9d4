"""The jobs list's exact count (``count=all``) in bounded time (issue 34 item 16): a
count that takes longer than its budget is cancelled by the database, and the page
shows the bounded count and says why. Deterministic, not timed: on SQLite a budget of
0 s is past before the first progress step of a count over 3,000 rows (the other
databases' cancellation: tests/conformance/test_joblist.py)."""

from __future__ import annotations

import urllib.request

import pytest

import sqlq_orm.dashboard.pages as pages


def get(url: str) -> str:
    with urllib.request.urlopen(url) as response:
        assert response.status == 200
        return response.read().decode()


def test_an_exact_count_past_its_budget_shows_the_bounded_count_and_says_so(
    serve, queue, engine, monkeypatch
):
    if engine.dialect.name != "sqlite":
        pytest.skip("the page's part is the same everywhere; SQLite makes it deterministic")
    queue.enqueue_many([{"type": "t", "payload": {"n": n}} for n in range(3000)])

    served = serve()
    counted = get(served.url + "/jobs?type=t&count=all")
    assert "3,000 jobs match" in counted and 'id="count-gave-up"' not in counted

    monkeypatch.setattr(pages, "EXACT_COUNT_SECONDS", 0)
    slow = serve()
    shown = get(slow.url + "/jobs?type=t&count=all")
    assert 'id="count-gave-up"' in shown
    assert "Counting every match took longer than 0 ms, so it was stopped" in shown
