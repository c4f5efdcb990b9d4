"""``JsonText``: a column that holds JSON text written by the library, stored in each
database's JSON type so it can be queried (``payload @> ...`` on PostgreSQL).

Python sees a ``str`` both ways: the service encodes payloads and results itself (the
size cap is measured on that text, :mod:`sqlq_orm.core.validation`) and decodes them
when asked (a corrupt value is reported per job), so the column must not parse or
re-serialise anything on the way. Per database:

- PostgreSQL: ``JSONB``. Values are bound as text and cast (``CAST(:p AS JSONB)``) and
  read back as text (``CAST(payload AS TEXT)``), so psycopg never parses them. JSONB
  keeps the *value*, not the text: keys come back sorted (shorter first), a duplicated
  key keeps its last value, spacing is PostgreSQL's (``{"a": 1}``), and numbers keep
  their digits but not their notation (``1e2`` reads as ``100``). A string holding NUL
  (``\\u0000``) cannot be stored at all (the queue refuses it, naming the value).
- MariaDB/MySQL: ``JSON`` (MariaDB: ``LONGTEXT`` with a ``JSON_VALID`` check), kept
  byte for byte.
- SQLite: ``TEXT``, kept byte for byte; SQLite's JSON functions read it.

The per-dialect SQL lives here (SQLAlchemy's ``@compiles`` hooks) rather than in
:mod:`sqlq_orm.db.backends` because it is part of the column's type: a host that maps
the mixins, and Alembic comparing models with the database, must see it without the
queue.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, Text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler, TypeCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator, TypeEngine


class JsonText(TypeDecorator[str]):
    """JSON text in the database's JSON type: JSONB, JSON, or TEXT on SQLite."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Any) -> TypeEngine[Any]:
        return _JsonColumn()

    def bind_expression(self, bindvalue: Any) -> ColumnElement[str]:
        return _JsonIn(bindvalue)

    def column_expression(self, colexpr: Any) -> ColumnElement[str]:
        return _JsonOut(colexpr)


class _JsonColumn(Text):
    """The DDL type: rendered per dialect below; binds and reads plain strings."""

    __visit_name__ = "sqlq_json_column"


@compiles(_JsonColumn)
def _json_column_default(element: _JsonColumn, compiler: TypeCompiler, **kw: Any) -> str:
    return "TEXT"


@compiles(_JsonColumn, "postgresql")
def _json_column_postgresql(element: _JsonColumn, compiler: TypeCompiler, **kw: Any) -> str:
    return "JSONB"


@compiles(_JsonColumn, "mysql")
@compiles(_JsonColumn, "mariadb")
def _json_column_mysql(element: _JsonColumn, compiler: TypeCompiler, **kw: Any) -> str:
    return "JSON"


class _JsonIn(FunctionElement[str]):
    """A bound value going into a JSON column (cast from text where the type needs it)."""

    name = "sqlq_json_in"
    inherit_cache = True
    type = Text()


class _JsonOut(FunctionElement[str]):
    """A JSON column read as its text."""

    name = "sqlq_json_out"
    inherit_cache = True
    type = Text()


@compiles(_JsonIn)
@compiles(_JsonOut)
def _as_is(element: FunctionElement[str], compiler: SQLCompiler, **kw: Any) -> str:
    (inner,) = element.clauses
    return str(compiler.process(inner, **kw))


@compiles(_JsonIn, "postgresql")
def _jsonb_in(element: FunctionElement[str], compiler: SQLCompiler, **kw: Any) -> str:
    (inner,) = element.clauses
    return f"CAST({compiler.process(inner, **kw)} AS JSONB)"


@compiles(_JsonOut, "postgresql")
def _jsonb_out(element: FunctionElement[str], compiler: SQLCompiler, **kw: Any) -> str:
    (inner,) = element.clauses
    return f"CAST({compiler.process(inner, **kw)} AS TEXT)"


# ------------------------------------------------------------ searching by arguments

MEMBER_KINDS = {
    # kind: (SQLite json_each types, MariaDB/MySQL JSON_TYPE names)
    "string": ("'text'", "'STRING'"),
    "number": ("'integer', 'real'", "'INTEGER', 'DOUBLE', 'DECIMAL', 'UNSIGNED INTEGER'"),
    "true": ("'true'", "'BOOLEAN'"),
    "false": ("'false'", "'BOOLEAN'"),
    "null": ("'null'", "'NULL'"),
}
"""How each database names the JSON type of a top-level member (fixed text, never input)."""


class JsonHasMember(FunctionElement[bool]):
    """True when the JSON object in a column has the top-level member ``key`` equal to a
    scalar: ``JsonHasMember(column, key, as_json, value, kind)``, all but ``kind``
    bound parameters (``as_json``: ``{"key": value}`` as JSON text; ``kind``: one of
    :data:`MEMBER_KINDS`, a literal). Equal means the same JSON type and value,
    numbers compared as numbers (``1`` matches ``1.0``), exactly for every 64-bit
    integer; a key holding an array or an object never matches a scalar. PostgreSQL:
    ``payload @> '{"key": value}'``, which a GIN index on the column serves;
    MariaDB/MySQL: ``JSON_CONTAINS`` at the key's path plus its ``JSON_TYPE``, and for
    a number its text compared as a ``DECIMAL`` (``JSON_CONTAINS`` alone compares
    doubles); SQLite: a lookup in ``json_each(payload)``.
    """

    name = "sqlq_json_has_member"
    inherit_cache = True
    type = Boolean()


def _member_parts(
    element: JsonHasMember, compiler: SQLCompiler, **kw: Any
) -> tuple[str, str, str, str, str]:
    column, key, as_json, value, kind = element.clauses
    return (
        str(compiler.process(column, **kw)),
        str(compiler.process(key, **kw)),
        str(compiler.process(as_json, **kw)),
        str(compiler.process(value, **kw)),
        str(kind.name),
    )


@compiles(JsonHasMember)
def _member_sqlite(element: JsonHasMember, compiler: SQLCompiler, **kw: Any) -> str:
    column, key, _, value, kind = _member_parts(element, compiler, **kw)
    types = MEMBER_KINDS[kind][0]
    same_value = "" if kind in ("true", "false", "null") else f" AND m.atom = {value}"
    return (
        f"EXISTS (SELECT 1 FROM json_each({column}) AS m "
        f"WHERE json_type({column}) = 'object' AND m.key = {key} "
        f"AND m.type IN ({types}){same_value})"
    )


@compiles(JsonHasMember, "postgresql")
def _member_postgresql(element: JsonHasMember, compiler: SQLCompiler, **kw: Any) -> str:
    column, _, as_json, _, _ = _member_parts(element, compiler, **kw)
    return f"{column} @> CAST({as_json} AS JSONB)"


@compiles(JsonHasMember, "mysql")
@compiles(JsonHasMember, "mariadb")
def _member_mysql(element: JsonHasMember, compiler: SQLCompiler, **kw: Any) -> str:
    column, key, as_json, value, kind = _member_parts(element, compiler, **kw)
    # The key is a bound value inside a quoted path member ($."key"); the filter refuses
    # keys holding a quote or a backslash, which that quoting cannot carry.
    path = f"CONCAT('$.\"', {key}, '\"')"
    contains = f"JSON_CONTAINS({column}, JSON_EXTRACT({as_json}, {path}), {path})"
    if kind == "number":
        # JSON_CONTAINS compares numbers as doubles: 2**53 + 1 would equal 2**53. The
        # member's JSON text read as a DECIMAL compares exactly with the bound integer;
        # only members already equal as doubles are cast (CASE keeps the order), so no
        # far-off number is ever truncated into the comparison (issue 34 item 1).
        contains = (
            f"CASE WHEN {contains} THEN "
            f"CAST(JSON_EXTRACT({column}, {path}) AS DECIMAL(65, 30)) = {value} "
            "ELSE 0 END"
        )
    return (
        f"(JSON_TYPE(JSON_EXTRACT({column}, {path})) IN ({MEMBER_KINDS[kind][1]}) AND {contains})"
    )
