"""A web dashboard over a queue: overview, jobs, job detail, workers, schedules, actions,
metrics.

Needs the ``dashboard`` extra (``pip install 'sqlq_orm[dashboard]'``): Starlette,
Jinja2, uvicorn and prometheus_client. Charts are server-drawn SVG; the pages refresh
themselves with a few lines of plain JavaScript (no build step, nothing fetched from a
CDN).

Layer: beside :mod:`sqlq_orm.cli` (it reads through :mod:`sqlq_orm.ops` and acts
through :class:`~sqlq_orm.Queue`); only the CLI imports it.
"""

from sqlq_orm.dashboard.app import create_app
from sqlq_orm.dashboard.security import Authorize, DashboardRefused, is_loopback

__all__ = ["Authorize", "DashboardRefused", "create_app", "is_loopback"]
