"""Build the dashboard: one ASGI app over one queue.

A host mounts it under a prefix (Starlette ``Mount("/jobs", app)``, FastAPI
``app.mount("/jobs", ...)``, or a WSGI host through ``a2wsgi.ASGIMiddleware``);
``sqlq dashboard`` serves it with uvicorn on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from sqlq_orm.core.docs import DASHBOARD_AUTH_PAGE
from sqlq_orm.core.schedule import Schedule
from sqlq_orm.dashboard.actions import Actions
from sqlq_orm.dashboard.cache import DEFAULT_FRESH_SECONDS, SharedAnswer
from sqlq_orm.dashboard.controls import Controls
from sqlq_orm.dashboard.metrics import exposition, metrics_registry
from sqlq_orm.dashboard.pages import Pages
from sqlq_orm.dashboard.rendering import Renderer, make_environment
from sqlq_orm.dashboard.security import (
    Authorize,
    CsrfTokens,
    HostAllowList,
    cross_site_write,
    loopback_only,
)
from sqlq_orm.db.tables import Models
from sqlq_orm.errors import InvalidInput
from sqlq_orm.ops.table_sizes import table_sizes
from sqlq_orm.queue.queue import Queue

DEFAULT_REFRESH_SECONDS = 5


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class _Gate:
    """Before anything else: the ``Host`` must be allowed (else 400), ``authorize``
    must say yes (else 403), and a write must not come from another site (else 403)."""

    def __init__(self, app: ASGIApp, authorize: Authorize, hosts: HostAllowList) -> None:
        self.app = app
        self.authorize = authorize
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            refusal = None
            if not self.hosts.allows(request.headers.get("host")):
                refusal = PlainTextResponse(
                    "400 Bad Request: this dashboard does not answer for the host name "
                    f"{request.headers.get('host')!r} (see allowed_hosts / --allowed-host, "
                    f"{DASHBOARD_AUTH_PAGE})",
                    status_code=400,
                )
            elif not self.authorize(request):
                refusal = PlainTextResponse(
                    f"403 Forbidden: not authorised (who gets in: {DASHBOARD_AUTH_PAGE})",
                    status_code=403,
                )
            elif request.method not in SAFE_METHODS and (why := cross_site_write(request)):
                refusal = PlainTextResponse(
                    f"403 Forbidden: {why}; nothing was changed (see {DASHBOARD_AUTH_PAGE})",
                    status_code=403,
                )
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(
    queue: Queue | Engine,
    *,
    models: Models | None = None,
    enable_actions: bool = False,
    authorize: Authorize | None = None,
    secret: bytes | None = None,
    refresh_seconds: int = DEFAULT_REFRESH_SECONDS,
    allowed_hosts: Sequence[str] | None = None,
    shared_seconds: float = DEFAULT_FRESH_SECONDS,
    schedules: Sequence[Schedule] = (),
) -> ASGIApp:
    """The dashboard for ``queue`` (a :class:`~sqlq_orm.Queue`, or an engine plus the
    app's ``models``) as an ASGI app.

    Read-only unless ``enable_actions``. ``authorize(request) -> bool`` is asked on
    every request; without it only loopback clients get in. ``secret`` signs the CSRF
    tokens (default: random per process; pass one shared by every process when the
    host runs several behind one address). Pages refresh themselves every
    ``refresh_seconds`` (0: never).

    ``allowed_hosts``: the ``Host`` names it answers (default: ``localhost``,
    ``127.0.0.1``, ``::1``); a host app serving it under its own domain lists that
    domain (``"jobs.example.com"``, ``".example.com"`` for subdomains too) or ``"*"``
    when its own stack checks the host already. Anything else answers 400: a
    DNS-rebinding page cannot read or drive the dashboard.

    ``shared_seconds``: the stats report behind the overview and ``/metrics`` is
    computed once for every request and tab, and refreshed in the background when it
    is older than this (longer when it is costly: see
    :mod:`sqlq_orm.dashboard.cache`); 0 computes it on every request.

    ``schedules``: the host's declared schedules (``registry.schedules``), which the
    schedules page can then run now (their payloads live in code). Pausing and
    resuming queues and schedules needs nothing more than ``enable_actions``.
    """
    if isinstance(queue, Engine):
        queue = Queue(queue, models=models)
    elif models is not None:
        raise InvalidInput("pass models= with an engine, not with a Queue (it has its own)")
    if isinstance(refresh_seconds, bool) or not isinstance(refresh_seconds, int):
        raise InvalidInput(f"refresh_seconds must be an integer, got {refresh_seconds!r}")
    if refresh_seconds < 0:
        raise InvalidInput(f"refresh_seconds must be >= 0, got {refresh_seconds}")
    if isinstance(shared_seconds, bool) or not isinstance(shared_seconds, int | float):
        raise InvalidInput(f"shared_seconds must be a number, got {shared_seconds!r}")
    if shared_seconds < 0:
        raise InvalidInput(f"shared_seconds must be >= 0, got {shared_seconds}")
    hosts = HostAllowList(allowed_hosts)
    csrf = CsrfTokens(secret)
    renderer = Renderer(
        make_environment(), csrf, actions_enabled=enable_actions, refresh_seconds=refresh_seconds
    )
    # queue.stats looked up on each call: a host (or a test) may wrap it later.
    report = SharedAnswer(lambda: queue.stats(), fresh_seconds=float(shared_seconds))
    # Table sizes: slow to measure on SQLite (dbstat walks every page) and slow to
    # change, so measured in the background at most every 5 minutes.
    sizes = SharedAnswer(
        lambda: table_sizes(queue), fresh_seconds=max(float(shared_seconds), 300.0)
    )
    pages = Pages(queue, renderer, report, runnable={s.name for s in schedules}, sizes=sizes)
    actions = Actions(queue, renderer, csrf, enabled=enable_actions, after_write=report.clear)
    controls = Controls(
        queue,
        renderer,
        csrf,
        enabled=enable_actions,
        schedules=schedules,
        after_write=report.clear,
    )
    registry = metrics_registry(report.get)

    async def metrics(request: Request) -> Response:
        body, content_type = await run_in_threadpool(
            exposition, registry, request.headers.get("accept")
        )
        return Response(body, media_type=content_type)

    app: Any = Starlette(
        routes=[
            Route("/", pages.overview, name="overview"),
            Route("/jobs", pages.jobs, name="jobs"),
            Route("/jobs/{job_id:int}", pages.job, name="job"),
            Route("/workers", pages.workers, name="workers"),
            Route("/worker", pages.worker, name="worker"),
            Route("/schedules", pages.schedules, name="schedules"),
            Route("/dependencies", pages.dependencies, name="dependencies"),
            Route("/metrics", metrics, name="metrics"),
            Route("/actions/{action}", actions.confirm, methods=["GET"], name="confirm"),
            Route("/actions/{action}/done", actions.done, methods=["GET"], name="done"),
            Route("/actions/{action}", actions.perform, methods=["POST"], name="perform"),
            Route("/controls/{control}", controls.confirm, methods=["GET"]),
            Route("/controls/{control}/done", controls.done, methods=["GET"]),
            Route("/controls/{control}", controls.perform, methods=["POST"]),
            Mount("/static", StaticFiles(packages=[("sqlq_orm.dashboard", "static")])),
        ]
    )
    return _Gate(app, authorize or loopback_only, hosts)
