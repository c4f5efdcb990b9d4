"""Updates that read back what they changed, on databases with and without ``RETURNING``.

Where the backend has ``UPDATE ... RETURNING`` (PostgreSQL, SQLite) the statement runs
as built. Where it has not (MariaDB, MySQL) each such statement carries a
:class:`LockUpdateRead` plan, run in the caller's transaction:

1. lock the rows the update would change (``SELECT id ... FOR UPDATE``, ``SKIP
   LOCKED`` for a claim), unless the guard names one row by ``p_id``;
2. update exactly those rows (by id, with the same guard);
3. read the returned columns back by id: the rows are locked by this transaction,
   so what it reads is what it wrote.

Either way the caller gets the rows and how many rows changed, and runs one code path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql import CompoundSelect, Select
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.db.backends import Backend
from sqlq_orm.errors import SqlqError

LOCKED_IDS = "sqlq_ids"
"""Expanding parameter: the ids step 1 locked, in the order it locked them."""
LOCKED_ID_LIST = "sqlq_id_list"
"""The same ids as one comma-separated string (a row's position: ``FIND_IN_SET``)."""


@dataclass(frozen=True)
class LockUpdateRead:
    """How a database without ``UPDATE ... RETURNING`` runs one such update."""

    lock: Select[Any] | CompoundSelect[Any] | None
    """``SELECT id ... FOR UPDATE``; None when the guard names one row by ``p_id``
    (the update itself then locks it)."""
    update: Update
    """The update, restricted to the locked ids (``sqlq_ids``)."""
    read: Select[Any]
    """The returned columns of the updated rows."""
    keep: Callable[[Sequence[Row[Any]]], list[int]] | None = None
    """Which of the locked rows to update (ids, in lock order); all of them when None.
    The claim's lock returns more columns than the id and drops, here, the jobs its
    concurrency limits leave out (they stay locked until the claim commits)."""


def returning_update(
    dialect: Backend,
    jobs_id: ColumnElement[int],
    update: Update,
    columns: Sequence[ColumnElement[Any]],
    *,
    by_id: bool = False,
    lock: Select[Any] | CompoundSelect[Any] | None = None,
    locked_update: Update | None = None,
    keep: Callable[[Sequence[Row[Any]]], list[int]] | None = None,
) -> tuple[Update, LockUpdateRead | None]:
    """``update ... RETURNING columns``, and the plan for backends without it (else None).

    ``by_id``: the update's guard is ``id = :p_id``. ``lock`` and ``locked_update``
    replace the default plan's first two steps (the claim picks its rows itself and
    gives each its own token); ``keep`` chooses among the locked rows.
    """
    statement = update.returning(*columns)
    if dialect.update_returning:
        return statement, None
    ids = jobs_id.in_(bindparam(LOCKED_IDS, expanding=True))
    if by_id and lock is None:
        return statement, LockUpdateRead(
            None, update, select(*columns).where(jobs_id == bindparam("p_id"))
        )
    if lock is None:
        # In id order, so two batches over the same rows lock them alike.
        where: Any = update.whereclause
        lock = select(jobs_id).where(where).order_by(jobs_id).with_for_update()
    return statement, LockUpdateRead(
        lock,
        locked_update if locked_update is not None else update.where(ids),
        select(*columns).where(ids),
        keep,
    )


def run_returning(
    dialect: Backend,
    connection: Connection,
    statement: Any,
    plan: LockUpdateRead | None,
    params: Mapping[str, Any],
    *,
    count_changed: bool = False,
    execute: Callable[..., Any] | None = None,
) -> tuple[list[Row[Any]], int]:
    """Run an update built by :func:`returning_update`: (returned rows, rows changed).

    ``execute(connection, statement, params, execution_options)`` runs the statement
    with ``RETURNING`` (default: ``connection.execute``; the statement groups pass
    theirs, which may send it as cached driver SQL).

    With ``RETURNING``, the rows changed are asked of the database only with
    ``count_changed`` (SQLite needs a statement for it); otherwise they are the rows
    returned."""
    if plan is None:
        # preserve_rowcount: where the statement is a SELECT over the UPDATE's RETURNING
        # (PostgreSQL writing the history in the same statement), the row count is
        # otherwise gone once the rows are read.
        options = {"preserve_rowcount": True} if count_changed else {}
        if execute is None:
            result = connection.execute(statement, params, execution_options=options)
        else:
            result = execute(connection, statement, params, options)
        rows = list(result.all())
        counted = count_changed and bool(rows)  # nothing returned: nothing to check
        changed = dialect.rows_changed(connection, result) if counted else len(rows)
        return rows, changed
    if plan.lock is None:
        changed = int(connection.execute(plan.update, params).rowcount)
        if changed == 0:
            return [], 0
        return list(connection.execute(plan.read, params).all()), changed
    locked = list(connection.execute(plan.lock, params))
    ids = [row[0] for row in locked] if plan.keep is None else plan.keep(locked)
    if not ids:
        return [], 0
    step = {**params, LOCKED_IDS: ids, LOCKED_ID_LIST: ",".join(str(i) for i in ids)}
    changed = int(connection.execute(plan.update, step).rowcount)
    if changed != len(ids):
        # The rows are locked by this transaction: nothing else can have moved them.
        raise SqlqError(
            f"update changed {changed} of the {len(ids)} row(s) it had locked; "
            "rolled back, nothing was written"
        )
    return list(connection.execute(plan.read, step).all()), changed
