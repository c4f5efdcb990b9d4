"""The dashboard's pure parts: charts, formatting, loopback and CSRF checks."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from sqlq_orm.dashboard.charts import Series, nice_ceiling, stacked_bars
from sqlq_orm.dashboard.rendering import format_duration, format_local, format_ts
from sqlq_orm.dashboard.security import (
    CsrfTokens,
    DashboardRefused,
    is_loopback,
    loopback_only,
    require_safe_bind,
)


@pytest.mark.parametrize("value, ceiling", [(0, 1), (1, 1), (3, 5), (7, 10), (11, 20), (201, 500)])
def test_the_scale_tops_at_1_2_or_5_times_a_power_of_ten(value, ceiling):
    assert nice_ceiling(value) == ceiling


def test_bars_stack_in_proportion_to_the_scale():
    svg = stacked_bars(
        ["a", "b"], [Series("ok", "ok", [5, 0]), Series("failed", "bad", [5, 0])], title="t"
    )
    # Scale 10 over a 142px plot: each half of the first bar is 71px tall.
    assert svg.count('height="71.0"') == 2
    assert "<title>a: 5 ok, 5 failed</title>" in svg
    assert "<title>b: 0 ok, 0 failed</title>" in svg


def test_chart_text_is_escaped():
    svg = stacked_bars(["<b>"], [Series("x&y", "ok", [1])], title="<script>")
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "x&amp;y" in svg


def test_series_of_the_wrong_length_are_refused():
    with pytest.raises(ValueError, match="every series needs 2 values"):
        stacked_bars(["a", "b"], [Series("x", "ok", [1])], title="t")


@pytest.mark.parametrize(
    "seconds, text",
    [(None, ""), (0, "0s"), (45, "45s"), (60, "1m"), (725, "12m 5s"), (12000, "3h 20m"),
     (187200, "2d 4h"), (-5, "-5s")],
)  # fmt: skip
def test_durations_read_in_two_units_at_most(seconds, text):
    assert format_duration(seconds) == text


def test_timestamps_are_utc():
    assert format_ts(1_700_000_000) == "2023-11-14 22:13:20Z"
    assert format_ts(None) == ""


@pytest.mark.parametrize(
    "zone, text",
    [("Europe/Paris", "2023-11-14 23:13 CET"), ("America/New_York", "2023-11-14 17:13 EST"),
     ("UTC", "2023-11-14 22:13 UTC"), ("Mars/Olympus_Mons", "2023-11-14 22:13 UTC")],
)  # fmt: skip
def test_schedule_runs_read_in_the_schedules_zone_and_unknown_zones_in_utc(zone, text):
    assert format_local(1_700_000_000, zone) == text
    assert format_local(None, zone) == "never"


@pytest.mark.parametrize(
    "host, loopback",
    [("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("10.0.0.5", False), ("example.com", False),
     (None, False)],
)  # fmt: skip
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


def request_from(client: tuple[str, int] | None) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/", "headers": [], "client": client})


def test_without_a_hook_only_loopback_clients_get_in():
    assert loopback_only(request_from(("127.0.0.1", 5000)))
    assert not loopback_only(request_from(("192.168.1.20", 5000)))
    assert not loopback_only(request_from(None))


def test_an_open_bind_needs_a_hook():
    with pytest.raises(DashboardRefused, match="'0.0.0.0' without an authorisation hook"):
        require_safe_bind("0.0.0.0", None)
    require_safe_bind("0.0.0.0", lambda request: True)
    require_safe_bind("127.0.0.1", None)


def test_csrf_tokens_belong_to_one_cookie_and_one_secret():
    tokens = CsrfTokens(b"secret")
    nonce = tokens.new_nonce()
    assert tokens.verify(nonce, tokens.token_for(nonce))
    assert not tokens.verify(tokens.new_nonce(), tokens.token_for(nonce))
    assert not tokens.verify(nonce, CsrfTokens(b"other").token_for(nonce))
    assert not tokens.verify(None, tokens.token_for(nonce))
    assert not tokens.verify(nonce, None)


def test_every_template_and_static_file_ships_in_the_package():
    import fnmatch
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["sqlq_orm"]
    package = root / "sqlq_orm"
    files = [
        p.relative_to(package).as_posix()
        for folder in ("dashboard/templates", "dashboard/static")
        for p in (package / folder).iterdir()
    ]
    assert files
    missing = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert missing == []


@pytest.mark.parametrize(
    "fields, served",
    [({"status": "FAILED"}, True), ({"status": "FAILED", "error_code": "A:B"}, True),
     ({"status": "FAILED", "worker": "w"}, False), ({"queue": "mail"}, False), ({}, False)],
)  # fmt: skip
def test_a_total_is_counted_on_the_index_only_where_a_status_leads_it(fields, served):
    from sqlq_orm.dashboard.pages import index_counts
    from sqlq_orm.ops.joblist import JobFilter

    assert index_counts(JobFilter(**fields)) is served
