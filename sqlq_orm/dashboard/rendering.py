"""Templates, their filters, and the one function every page is rendered through.

A page asked for with the ``X-Sqlq-Refresh`` header (the self-refresh script) gets
only its content block; anything else gets the whole page. Every page response makes
sure the browser holds a CSRF cookie, so the forms on it carry a valid token.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from sqlq_orm.core.cron import time_zone
from sqlq_orm.core.docs import DASHBOARD_AUTH_PAGE, ERROR_CODES_PAGE
from sqlq_orm.dashboard.security import CSRF_COOKIE, CSRF_FIELD, CsrfTokens
from sqlq_orm.errors import InvalidInput

REFRESH_HEADER = "X-Sqlq-Refresh"

SECURITY_HEADERS = {
    # No framing: a page on another site cannot overlay the confirm button
    # (clickjacking gets round a CSRF token). Scripts, styles and forms: this app only.
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def format_ts(value: int | None) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM:SSZ`` (UTC); an empty cell for None."""
    if value is None:
        return ""
    return datetime.fromtimestamp(int(value), UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_ts_minute(value: int | None) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM`` (UTC): a list's narrow time cell, whose
    ``title`` carries :func:`format_ts`'s full time."""
    if value is None:
        return ""
    return datetime.fromtimestamp(int(value), UTC).strftime("%Y-%m-%d %H:%M")


def format_local(value: int | None, zone_name: str) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM TZ`` in the IANA zone ``zone_name``; ``never``
    for None.

    How ``sqlq schedules`` shows a schedule's runs: in the schedule's own zone, so a
    daily 09:00 job reads 09:00. A zone this machine does not know (no tzdata) falls
    back to UTC rather than failing the page.
    """
    if value is None:
        return "never"
    try:
        zone: ZoneInfo | None = time_zone(zone_name)
    except InvalidInput:
        zone = None
    moment = datetime.fromtimestamp(int(value), UTC)
    if zone is not None:
        moment = moment.astimezone(zone)
    return moment.strftime("%Y-%m-%d %H:%M %Z")


def format_duration(seconds: int | None) -> str:
    """``45s``, ``12m 5s``, ``3h 20m``, ``2d 4h``: two units at most; empty for None."""
    if seconds is None:
        return ""
    seconds = int(seconds)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    for unit, size, small, small_size in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "m", 60),
        ("m", 60, "s", 1),
    ):
        if seconds >= size:
            rest = (seconds % size) // small_size
            return f"{sign}{seconds // size}{unit}" + (f" {rest}{small}" if rest else "")
    return f"{sign}{seconds}s"


def format_detail(value: Any) -> str:
    """An event's detail as compact JSON, with its moments (``*_at`` epoch seconds)
    written as UTC times: ``"run_at": "2023-11-14 22:15:00Z"``, not ``1700000100``."""
    if isinstance(value, dict):
        value = {
            key: format_ts(item)
            if key.endswith("_at") and isinstance(item, int) and not isinstance(item, bool)
            else item
            for key, item in value.items()
        }
    return json.dumps(value, ensure_ascii=False, default=str)


def format_json(value: Any) -> str:
    """Decoded JSON shown indented (text that did not decode is shown as is)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def format_thousands(value: int | None) -> str:
    """``1,234,567``: counts an operator reads at a glance (empty for None)."""
    return "" if value is None else f"{int(value):,}"


def format_bytes(value: int | None) -> str:
    """``12.5 MB``: a size in decimal units, three significant digits (empty for None)."""
    if value is None:
        return ""
    size = float(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{int(size)} B" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def make_environment() -> Environment:
    env = Environment(
        loader=PackageLoader("sqlq_orm.dashboard", "templates"),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ts"] = format_ts
    env.filters["ts_minute"] = format_ts_minute
    env.filters["local"] = format_local
    env.filters["duration"] = format_duration
    env.filters["json"] = format_json
    env.filters["detail"] = format_detail
    env.filters["thousands"] = format_thousands
    env.filters["bytes"] = format_bytes
    env.globals["error_codes_page"] = ERROR_CODES_PAGE
    env.globals["dashboard_auth_page"] = DASHBOARD_AUTH_PAGE
    return env


class Renderer:
    """Renders a template into a response with the page's shared context."""

    def __init__(
        self, env: Environment, csrf: CsrfTokens, *, actions_enabled: bool, refresh_seconds: int
    ) -> None:
        self.env = env
        self.csrf = csrf
        self.actions_enabled = actions_enabled
        self.refresh_seconds = refresh_seconds

    def page(
        self,
        request: Request,
        template: str,
        *,
        status_code: int = 200,
        refresh: bool = True,
        **context: Any,
    ) -> HTMLResponse:
        nonce = request.cookies.get(CSRF_COOKIE)
        new_nonce = None
        if not nonce:
            nonce = new_nonce = self.csrf.new_nonce()
        base = base_path(request)
        html = self.env.get_template(template).render(
            base=base,
            fragment=request.headers.get(REFRESH_HEADER) == "1",
            refresh_seconds=self.refresh_seconds if refresh else 0,
            actions_enabled=self.actions_enabled,
            csrf_field=CSRF_FIELD,
            csrf_token=self.csrf.token_for(nonce),
            path=request.url.path,
            **context,
        )
        response = HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)
        if new_nonce:
            response.set_cookie(
                CSRF_COOKIE,
                new_nonce,
                path=base or "/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response


def base_path(request: Request) -> str:
    """Where the dashboard is mounted (``""`` at the root, ``"/jobs"`` under /jobs)."""
    return str(request.scope.get("root_path", "")).rstrip("/")
