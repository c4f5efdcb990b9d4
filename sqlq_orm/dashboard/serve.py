"""Serve the dashboard with uvicorn (what ``sqlq dashboard`` runs)."""

from __future__ import annotations

import importlib
import os
import sys

from starlette.types import ASGIApp

from sqlq_orm.dashboard.security import Authorize, DashboardRefused, require_safe_bind

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def load_authorize(spec: str | None) -> Authorize | None:
    """The host's hook from ``"package.module:function"`` (None: no hook)."""
    if not spec:
        return None
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise DashboardRefused(
            f"--authorize must look like 'package.module:function', got {spec!r}"
        )
    # Like ``python -m``: the working directory is importable.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DashboardRefused(f"cannot import {module_name!r} for --authorize: {exc}") from None
    found = getattr(module, attribute, None)
    if not callable(found):
        raise DashboardRefused(
            f"--authorize {spec!r} names {type(found).__name__}, not a function "
            "taking the request and returning True or False"
        )
    hook: Authorize = found
    return hook


def serve(app: ASGIApp, *, host: str, port: int, authorize: Authorize | None) -> None:
    """Run ``app`` on ``host:port`` until interrupted.

    Refuses (:class:`~sqlq_orm.dashboard.security.DashboardRefused`) a non-loopback
    ``host`` when there is no ``authorize`` hook.
    """
    require_safe_bind(host, authorize)
    import uvicorn  # the dashboard extra installs it; only serving needs it

    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
