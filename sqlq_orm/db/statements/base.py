"""What every group of statements shares: tables, backend, clock, and the lease guard."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    case,
    literal_column,
    null,
    update,
)
from sqlalchemy.engine import Connection, CursorResult, Row
from sqlalchemy.sql import CompoundSelect, Select
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.core import timing
from sqlq_orm.db.backends import Backend
from sqlq_orm.db.driver_sql import DriverStatements
from sqlq_orm.db.statements import returning
from sqlq_orm.db.tables import Tables
from sqlq_orm.schema.mixins import JOB_MIXIN_COLUMNS
from sqlq_orm.schema.states import ACTIVE, HELD

HELD_VALUES = sorted(s.value for s in HELD)
ACTIVE_VALUES = sorted(s.value for s in ACTIVE)


def status_in(column: ColumnElement[str], values: Sequence[str]) -> ColumnElement[bool]:
    """``status IN ('A', 'B')`` with the statuses as literal SQL, not bound parameters.

    psycopg prepares a statement after its fifth run on a connection; in the generic
    plan, bound statuses can no longer prove that a row satisfies a partial index's
    predicate, so ``ON CONFLICT (dedupe_key) WHERE status IN (...)`` stops matching the
    partial unique index and fails. The values are our own enum constants.
    """
    for value in values:
        if not value.isidentifier():
            raise ValueError(f"status {value!r} cannot be inlined as SQL")
    return column.in_([literal_column(f"'{value}'") for value in values])


def lease_cleared() -> dict[str, Any]:
    """Column values that clear a job's lease (it no longer has a holder)."""
    return {"lease_token": None, "lease_expires_at": None, "deadline_at": None}


class StatementGroup:
    """Tables, backend and clock of one queue; the groups build their statements on it."""

    def __init__(self, tables: Tables, dialect: Backend, now: ColumnElement[int]) -> None:
        self.tables = tables
        self.dialect = dialect
        self.now = now
        self.app_columns = tuple(c for c in tables.jobs.c if c.name not in JOB_MIXIN_COLUMNS)
        """Columns the host app added to its job model (enqueue fills them, a claim
        returns them for the handler)."""
        self.app_column_names = tuple(c.key for c in self.app_columns)
        self._plans: dict[int, returning.LockUpdateRead] = {}
        self._driver = DriverStatements() if dialect.prebuilt_as_driver_sql else None

    def execute(
        self,
        connection: Connection,
        statement: Any,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        execution_options: Mapping[str, Any] | None = None,
    ) -> CursorResult[Any]:
        """Run one of these prebuilt statements (never one built per call): as cached
        driver SQL where the backend asks for it (:mod:`sqlq_orm.db.driver_sql`)."""
        if self._driver is None:
            return connection.execute(statement, params, execution_options=execution_options)
        return self._driver.execute(connection, statement, params, execution_options)

    def write(
        self,
        connection: Connection,
        statement: Any,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    ) -> int:
        """Run one of these prebuilt statements that returns no rows (an insert of
        history); return the rows it changed. Where the backend sends driver SQL, it
        goes straight onto a cursor (:func:`~sqlq_orm.db.driver_sql.run_on_cursor`)."""
        if self._driver is None:
            return int(connection.execute(statement, params).rowcount)
        return self._driver.write(connection, statement, params)

    def update_by_id(self, table: Any) -> Update:
        """``UPDATE table`` for a statement whose guard names its rows by primary key
        (the backend may make the database read them through it; see
        :attr:`~sqlq_orm.db.backends.base.Backend.by_primary_key`)."""
        return self.dialect.by_primary_key(update(table))

    def returning_update(
        self,
        update: Update,
        columns: Sequence[ColumnElement[Any]],
        *,
        by_id: bool = False,
        lock: Select[Any] | CompoundSelect[Any] | None = None,
        locked_update: Update | None = None,
        keep: Callable[[Sequence[Row[Any]]], list[int]] | None = None,
    ) -> Update:
        """``update ... RETURNING columns``; run it with :meth:`run_returning`, which
        works on backends without ``UPDATE ... RETURNING`` too (see
        :mod:`sqlq_orm.db.statements.returning`)."""
        statement, plan = returning.returning_update(
            self.dialect,
            self.tables.jobs.c.id,
            update,
            columns,
            by_id=by_id,
            lock=lock,
            locked_update=locked_update,
            keep=keep,
        )
        if plan is not None:
            self._plans[id(statement)] = plan
        return statement

    def run_returning(
        self,
        connection: Connection,
        statement: Any,
        params: Mapping[str, Any],
        *,
        count_changed: bool = False,
    ) -> tuple[list[Row[Any]], int]:
        """Run an update built by :meth:`returning_update`: (returned rows, rows changed;
        see :func:`~sqlq_orm.db.statements.returning.run_returning`)."""
        plan = self._plans.get(id(statement))
        return returning.run_returning(
            self.dialect,
            connection,
            statement,
            plan,
            params,
            count_changed=count_changed,
            execute=self.execute,
        )

    def lease_guard(self) -> ColumnElement[bool]:
        """``id = :p_id AND lease_token = :p_token``: the fence of every lease call."""
        j = self.tables.jobs.c
        return and_(j.id == bindparam("p_id"), j.lease_token == bindparam("p_token"))

    def later(self, seconds: ColumnElement[Any]) -> ColumnElement[Any]:
        """The instant ``seconds`` (> 0) from now, never early: ``now`` is the current
        second truncated, so one more second (see :mod:`sqlq_orm.core.timing`)."""
        return self.now + seconds + timing.ROUNDING_SECONDS

    def deadline_from_now(self) -> ColumnElement[Any]:
        """When a run started now must end: never before now + max runtime (see
        :meth:`later`), or NULL without one."""
        j = self.tables.jobs.c
        return case(
            (j.max_runtime_seconds.is_(None), null()), else_=self.later(j.max_runtime_seconds)
        )
