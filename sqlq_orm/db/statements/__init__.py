"""Every statement the queue runs, prebuilt once per queue and reused.

Hot paths (claim, start, heartbeat, finish) run these prebuilt Core statements with
bound parameters; nothing here goes through an ORM flush. Every write made on behalf
of a lease is guarded by ``id``, ``lease_token`` and the expected status, and callers
check the row count (or the ``RETURNING`` rows) to learn whether it took.

Bound parameter names start with ``p_`` so they never collide with column names. The
statements come in groups, one module each; :class:`Statements` builds them all.
"""

from __future__ import annotations

from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.db.backends import Backend
from sqlq_orm.db.statements.admin import AdminStatements
from sqlq_orm.db.statements.base import ACTIVE_VALUES, HELD_VALUES
from sqlq_orm.db.statements.bulk import BulkStatements
from sqlq_orm.db.statements.claim import ClaimStatements, row_number
from sqlq_orm.db.statements.controls import ControlStatements
from sqlq_orm.db.statements.dependencies import DependencyStatements
from sqlq_orm.db.statements.enqueue import EnqueueStatements
from sqlq_orm.db.statements.history import HistoryStatements
from sqlq_orm.db.statements.leases import LeasesStatements
from sqlq_orm.db.statements.rate_limits import RateLimitStatements
from sqlq_orm.db.statements.schedules import ScheduleStatements
from sqlq_orm.db.statements.sweep import SweepStatements
from sqlq_orm.db.tables import Tables


class Statements(
    EnqueueStatements,
    ClaimStatements,
    LeasesStatements,
    HistoryStatements,
    SweepStatements,
    AdminStatements,
    ScheduleStatements,
    DependencyStatements,
    ControlStatements,
    BulkStatements,
    RateLimitStatements,
):
    """Every statement the queue runs, prebuilt for one set of tables and one clock."""

    def __init__(self, tables: Tables, dialect: Backend, now: ColumnElement[int]) -> None:
        super().__init__(tables, dialect, now)
        self._build_dependencies()  # first: the finishing statements return its column
        self._build_controls()  # before the claim, which guards against paused queues
        self._build_enqueue()
        self._build_claim_group()
        self._build_leases()
        self._build_history()
        self._build_sweep()
        self._build_admin()
        self._build_schedules()
        self._build_bulk()
        self._build_rate_limits()


__all__ = ["ACTIVE_VALUES", "HELD_VALUES", "Statements", "Tables", "row_number"]
