"""Which tables in this process are sqlq job tables: the library's and a host app's.

Every class bound from :class:`~sqlq_orm.schema.mixins.JobMixin` is remembered here
when it is defined, so code that sees only SQL (the SQLite rebuild guard in
:mod:`sqlq_orm.db.backends.sqlite_rebuilds`) can tell a job table, whose rows others
reference ``ON DELETE CASCADE``, from any other table, whatever the host named it.
"""

from __future__ import annotations

import weakref
from typing import Any

_JOB_MODELS: weakref.WeakSet[type[Any]] = weakref.WeakSet()


def remember_job_model(cls: type[Any]) -> None:
    """Record a class bound from ``JobMixin`` (mapped now or later)."""
    _JOB_MODELS.add(cls)


def job_table_names() -> frozenset[str]:
    """The names of the job tables of every mapped ``JobMixin`` class in the process."""
    names = set()
    for cls in list(_JOB_MODELS):
        table = cls.__dict__.get("__table__")
        if table is not None:
            names.add(str(table.name))
    return frozenset(names)
