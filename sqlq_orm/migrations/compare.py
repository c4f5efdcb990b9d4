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
