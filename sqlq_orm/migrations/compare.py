"""An autogenerate comparison Alembic lacks on SQLite: an index's DESC columns.

The claim index sorts ``priority DESC``. SQLAlchemy's SQLite reflection drops DESC,
so Alembic's batch mode, which rebuilds a table from its reflection, recreates the
index ascending, and ``alembic check`` cannot see the difference: the claim then sorts
with a temporary B-tree. Importing :mod:`sqlq_orm.migrations` registers
:func:`compare_index_order` with Alembic's autogenerate (as Alembic's plugins do), so
``alembic check`` in a host app's project, ``alembic revision --autogenerate`` and
:func:`sqlq_orm.migrate.check` report such an index as ``remove_index`` +
``add_index``, which is also the fix autogenerate writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from alembic.autogenerate import comparators
from alembic.operations import ops
from sqlalchemy import Index, Table
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import ColumnClause, UnaryExpression

from sqlq_orm.db.backends import find_backend


def declared_descending_columns(index: Index) -> set[str]:
    """The columns ``index`` declares DESC (``column("priority").desc()``)."""
    found = set()
    for expression in index.expressions:
        if (
            isinstance(expression, UnaryExpression)
            and expression.modifier is operators.desc_op
            and isinstance(expression.element, ColumnClause)
        ):
            found.add(expression.element.name)
    return found


def _after_alembics_own(target: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a comparator to run after Alembic's (whose ops it edits)."""
    try:  # Alembic 1.18+ runs comparators by priority
        from alembic.util.langhelpers import DispatchPriority
    except ImportError:  # earlier: in order of registration, Alembic's first
        return comparators.dispatch_for(target)
    return comparators.dispatch_for(target, priority=DispatchPriority.LAST)


@_after_alembics_own("schema")
def accept_emulated_partial_indexes(
    autogen_context: Any, upgrade_ops: ops.UpgradeOps, schemas: Any
) -> None:
    """Drop the differences a database's emulation of a model index is made of.

    MySQL has no partial indexes: the model's partial unique index is stored as a
    unique index of the same name over a generated column (see
    :mod:`sqlq_orm.db.backends.mysql`). Alembic would report that index as changed and
    the column as extra; when the stored index is exactly that, neither is a difference.
    """
    connection = autogen_context.connection
    metadata = autogen_context.metadata
    if connection is None or metadata is None:
        return
    backend = find_backend(connection.dialect)
    if backend is None:
        return
    emulated: dict[tuple[str, str], str] = {}  # (table, index) -> generated column
    for tables in metadata if isinstance(metadata, Sequence) else [metadata]:
        for table in tables.tables.values():
            for index in table.indexes:
                column = backend.generated_key_column(index)
                if column is not None:
                    emulated[(table.name, str(index.name))] = column

    def is_emulation(table: str, op: Any) -> bool:
        if isinstance(op, ops.DropColumnOp):
            return op.column_name in {c for (t, _), c in emulated.items() if t == table}
        if isinstance(op, ops.DropIndexOp):
            column = emulated.get((table, op.index_name or ""))
            return column is not None and [c.name for c in op.to_index().columns] == [column]
        if isinstance(op, ops.CreateIndexOp):
            return (table, op.index_name or "") in emulated
        return False

    for table_ops in upgrade_ops.ops:
        if not isinstance(table_ops, ops.ModifyTableOps):
            continue
        name = table_ops.table_name
        dropped = {
            op.index_name
            for op in table_ops.ops
            if is_emulation(name, op) and isinstance(op, ops.DropIndexOp)
        }
        table_ops.ops[:] = [
            op
            for op in table_ops.ops
            if not is_emulation(name, op)
            or (isinstance(op, ops.CreateIndexOp) and op.index_name not in dropped)
        ]
    upgrade_ops.ops[:] = [
        op for op in upgrade_ops.ops if not (isinstance(op, ops.ModifyTableOps) and op.is_empty())
    ]


@comparators.dispatch_for("table")
def compare_index_order(
    autogen_context: Any,
    modify_ops: ops.ModifyTableOps,
    schema: str | None,
    table_name: str,
    conn_table: Table | None,
    metadata_table: Table | None,
) -> None:
    """Add drop + create of every index whose stored DESC columns differ from the model."""
    connection = autogen_context.connection
    if conn_table is None or metadata_table is None or connection is None:
        return
    backend = find_backend(connection.dialect)
    if backend is None:
        return
    stored_indexes = {index.name: index for index in conn_table.indexes}
    for index in sorted(metadata_table.indexes, key=lambda ix: str(ix.name)):
        stored = stored_indexes.get(index.name)
        if stored is None:
            continue  # missing: Alembic's own comparison reports it
        found = backend.descending_index_columns(connection, table_name, str(index.name))
        if found is None or found == declared_descending_columns(index):
            continue
        modify_ops.ops.append(ops.DropIndexOp.from_index(stored))
        modify_ops.ops.append(ops.CreateIndexOp.from_index(index))
