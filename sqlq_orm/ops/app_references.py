"""An app's foreign keys into the job table, as retention must see them.

A host app may keep a column that references ``sqlq_jobs.id`` (an invoice naming the
job that sent it). Declared ``ON DELETE SET NULL`` or ``ON DELETE CASCADE``, it lets
the database delete the job (the app row forgets it, or goes with it). Declared
without ``ON DELETE`` (or ``RESTRICT``/``NO ACTION``), the database refuses to delete a
referenced job, and one such job used to fail prune's whole batch. :func:`blocking`
finds those foreign keys by reflection; prune leaves the jobs they reference out of
its deletes (:func:`unreferenced`) and reports them (:func:`count_referenced`,
:func:`reason`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, column, exists, func, inspect, select, table
from sqlalchemy import Table as SqlTable
from sqlalchemy.engine import Connection

from sqlq_orm.core.docs import RETENTION_PAGE

LETS_DELETE = frozenset({"CASCADE", "SET NULL"})
"""``ON DELETE`` actions under which the database deletes a referenced job."""


@dataclass(frozen=True)
class AppReference:
    """A column of an app table that references the job table's ``id`` and stops the
    database from deleting a job it names."""

    table: str
    column: str
    schema: str | None = None

    @property
    def name(self) -> str:
        return f"{self.table}.{self.column}"

    def names(self, job_id: Any) -> ColumnElement[bool]:
        """True where some row of this table references ``job_id``."""
        referencing: Any = column(self.column)
        source = table(self.table, referencing, schema=self.schema)
        return exists(select(referencing).select_from(source).where(referencing == job_id))


def blocking(connection: Connection, jobs: SqlTable) -> list[AppReference]:
    """The foreign keys into ``jobs.id`` whose ``ON DELETE`` does not let a job go.

    One reflection of the foreign keys of the schema the job table lives in (other
    schemas are not looked at: a delete they stop is still caught by prune, job by
    job). The queue's own tables (attempts, events, edges) cascade and never count.
    """
    found: list[AppReference] = []
    inspector = inspect(connection)
    for (schema, name), keys in inspector.get_multi_foreign_keys(schema=jobs.schema).items():
        for key in keys:
            if key["referred_table"] != jobs.name or key.get("referred_schema") not in (
                None,
                jobs.schema,
                schema,
            ):
                continue
            action = str((key.get("options") or {}).get("ondelete") or "").upper()
            if action in LETS_DELETE:
                continue
            pairs = dict(zip(key["referred_columns"], key["constrained_columns"], strict=False))
            if "id" in pairs:
                found.append(AppReference(name, pairs["id"], schema))
    return sorted(set(found), key=lambda ref: ref.name)


def unreferenced(references: list[AppReference], job_id: Any) -> list[ColumnElement[bool]]:
    """Conditions that keep jobs some app row references out of a delete."""
    return [~ref.names(job_id) for ref in references]


def count_referenced(
    connection: Connection, references: list[AppReference], jobs: SqlTable, due: list[Any]
) -> dict[str, int]:
    """Per reference, how many jobs matching ``due`` (conditions on ``jobs``) it holds."""
    counts: dict[str, int] = {}
    for ref in references:
        query = select(jobs.c.id).where(and_(*due), ref.names(jobs.c.id)).subquery()
        found = int(connection.execute(select(func.count()).select_from(query)).scalar_one())
        if found:
            counts[ref.name] = counts.get(ref.name, 0) + found
    return counts


def reason(held_back: dict[str, int], unseen: int = 0) -> str:
    """Why prune kept jobs it would have deleted, and what to do about it ("" if none)."""
    parts = []
    if held_back:
        listed = ", ".join(f"{name} ({count})" for name, count in sorted(held_back.items()))
        parts.append(
            f"kept {sum(held_back.values())} finished job(s) due for deletion: rows of "
            f"{listed} still reference them through a foreign key without ON DELETE, so "
            "the database refuses to delete them"
        )
    if unseen:
        parts.append(
            f"kept {unseen} finished job(s) whose delete the database refused "
            "(a foreign key prune could not see, e.g. from another schema)"
        )
    if not parts:
        return ""
    return (
        "; ".join(parts) + ". Delete or re-point those rows, or declare the foreign key "
        "ON DELETE SET NULL (the app row stays and forgets the job) or ON DELETE CASCADE "
        f"(the app row goes with the job); see {RETENTION_PAGE}"
    )
