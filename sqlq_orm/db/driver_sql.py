"""Prebuilt statements sent as driver SQL, compiled once: the one-call hot paths.

``connection.execute(statement)`` looks the statement up in SQLAlchemy's compiled
cache, builds its parameters through the compiler and sets up typed result
processing on every call: on SQLite that is more time than the database spends on a
one-row insert or update (issue 27). The statements a job's life runs (enqueue's
insert and event, start, succeed, the attempt rows) never change after a queue is
built, so here each is compiled once and later calls hand the SQL string and its
parameters to ``connection.exec_driver_sql``: still through the same connection, so
the engine's ``before_cursor_execute`` / ``after_cursor_execute`` events, sqlq's hooks
and the tests' fault injection see every statement as before.

A statement is sent this way only where that changes nothing it does: no
schema translation on the connection, no literal-execute parameters, and no result
column whose type would process what the driver returns.
Anything else goes through ``connection.execute`` as always.

Writes whose result nobody reads (the history's inserts) and SQLite's ``BEGIN`` go
one step further, :func:`run_on_cursor`: straight onto a DBAPI cursor of the
connection, with the engine's ``before_cursor_execute`` / ``after_cursor_execute``
listeners called around it and a driver error handed to SQLAlchemy's own error
handling (wrapped as :class:`~sqlalchemy.exc.DBAPIError`, ``handle_error`` events,
disconnect detection), as ``exec_driver_sql`` does; what it skips is the execution
context and the result object set up for rows nobody reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection, CursorResult, Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import is_exit_exception

SCHEMA_TRANSLATE = "schema_translate_map"


class DriverStatement:
    """One statement compiled for one dialect: its SQL and how to order its parameters.

    A statement with expanding parameters (``IN :p_ids``) has one SQL string per
    number of values in each; they are rendered by SQLAlchemy on first use of each
    shape and kept (claims and finishes come in a few batch sizes)."""

    __slots__ = ("_compiled", "_expanding", "_positional", "_shapes", "sql")

    def __init__(self, compiled: SQLCompiler) -> None:
        self._compiled = compiled
        self.sql = compiled.string
        self._expanding = tuple(
            name for bind, name in compiled.bind_names.items() if bind.expanding
        )
        self._shapes: dict[tuple[tuple[int, int], ...], _Shape] = {}
        self._positional: tuple[tuple[str, str, Any, Any], ...] | None = None
        if not self._expanding:
            shape = _Shape(
                compiled.string,
                tuple(compiled.positiontup)
                if compiled.positional and compiled.positiontup
                else None,
                {},
                _single_processors(compiled._bind_processors) or {},
            )
            self._shapes[()] = shape
            self._positional = _positional_plan(compiled, shape)

    def _fast_values(self, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """The driver's parameters of a positional statement without ``IN`` lists,
        built as ``construct_params`` builds them (the caller's value by key or name,
        else the bind's own value, its callable called now: a pinned clock); None
        where a required value is missing (the slow path raises SQLAlchemy's error)."""
        plan = self._positional
        if plan is None:
            return None
        values = []
        for key, name, bind, process in plan:
            if key in params:
                value = params[key]
            elif name in params:
                value = params[name]
            elif bind.required:
                return None
            elif bind.callable:
                value = bind.effective_value
            else:
                value = bind.value
            values.append(value if process is None else process(value))
        return tuple(values)

    @property
    def expanding(self) -> bool:
        """Whether the SQL depends on how many values an ``IN`` parameter has."""
        return bool(self._expanding)

    def render(self, params: Mapping[str, Any]) -> tuple[str, Any] | None:
        """The SQL and the driver's parameters for one execution (defaults and clock
        values of ``callable_`` binds filled in, bind processors applied); None for
        values this path does not take (a ragged ``IN`` of tuples)."""
        fast = self._fast_values(params)
        if fast is not None:
            return self.sql, fast
        values = self._compiled.construct_params(params, _check=True)
        try:
            signature = tuple(_shape_of(values[name]) for name in self._expanding)
        except TypeError:
            return None
        shape = self._shapes.get(signature)
        if shape is None:
            state = self._compiled.construct_expanded_state(params)
            processors = _single_processors(state.processors)
            if processors is None:
                return None
            shape = _Shape(
                state.statement,
                tuple(state.positiontup) if state.positiontup is not None else None,
                {name: list(state.parameter_expansion.get(name, ())) for name in self._expanding},
                processors,
            )
            self._shapes[signature] = shape
        for name, names in shape.expansion.items():
            given = values.pop(name)
            if given and isinstance(given[0], tuple):  # IN of tuples: (a, b) per row
                given = [item for row in given for item in row]
            values.update(zip(names, given, strict=True))
        for name, process in shape.processors.items():
            if name in values:
                values[name] = process(values[name])
        if shape.positions is None:
            return shape.sql, values
        return shape.sql, tuple(values[name] for name in shape.positions)


def _positional_plan(
    compiled: SQLCompiler, shape: _Shape
) -> tuple[tuple[str, str, Any, Any], ...] | None:
    """Per ``?`` of a statement: the bind's key, its name, the bind and its
    processor; None where parameters need more than that (named parameters,
    escaped names, parameters the compiler collects itself)."""
    if (
        shape.positions is None
        or compiled.escaped_bind_names
        or getattr(compiled, "_collect_params", False)
    ):
        return None
    binds = {name: bind for bind, name in compiled.bind_names.items()}
    if any(name not in binds for name in shape.positions):
        return None
    return tuple(
        (binds[name].key, name, binds[name], shape.processors.get(name)) for name in shape.positions
    )


def _single_processors(processors: Mapping[str, Any]) -> dict[str, Callable[[Any], Any]] | None:
    """Bind processors by name; None if one is a tuple-typed bind's list of them
    that would process something (the statement then runs as Core).

    A tuple-typed bind whose elements need no processing (``(id, lease_token) IN
    :p_pairs``, the fence of every batch finish) has nothing to apply: it is left
    out, so its statement runs as driver SQL too."""
    single: dict[str, Callable[[Any], Any]] = {}
    for name, process in processors.items():
        if callable(process):
            single[name] = process
        elif process is None or (
            isinstance(process, (tuple, list)) and all(item is None for item in process)
        ):
            continue
        else:
            return None
    return single


def _shape_of(values: Sequence[Any]) -> tuple[int, int]:
    """How many values an ``IN`` parameter has, and how wide each is (0: scalars);
    raises TypeError for anything else (a ragged ``IN`` of tuples, a scalar)."""
    if not values or not isinstance(values[0], tuple):
        if any(isinstance(item, (tuple, list)) for item in values):
            raise TypeError("mixed IN values")
        return len(values), 0
    width = len(values[0])
    if any(not isinstance(row, tuple) or len(row) != width for row in values):
        raise TypeError("ragged IN of tuples")
    return len(values), width


class _Shape:
    """The SQL of a statement for one count of values per expanding parameter."""

    __slots__ = ("expansion", "positions", "processors", "sql")

    def __init__(
        self,
        sql: str,
        positions: tuple[str, ...] | None,
        expansion: dict[str, list[str]],
        processors: Mapping[str, Callable[[Any], Any]],
    ) -> None:
        self.sql = sql
        self.positions = positions
        self.expansion = expansion
        self.processors = processors


def run_on_cursor(
    connection: Connection, sql: str, parameters: Any = (), *, many: bool = False
) -> int | None:
    """Run ``sql`` on a DBAPI cursor of ``connection``; return its rowcount, or None
    where this path would skip something the connection does (echo logging), and the
    caller runs it the usual way instead.

    The engine's cursor listeners and the dialect's ``do_execute`` family see the
    statement as from ``exec_driver_sql``, with ``context`` None (there is no
    execution context); a listener's changed statement and parameters are what runs
    (``retval=True``). A driver error goes through the connection's own handling and
    comes out as SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError`, as from
    ``exec_driver_sql``."""
    if connection._echo:
        return None
    dialect = connection.dialect
    cursor = connection.connection.cursor()
    listened = connection._has_events or connection.engine._has_events
    try:
        if listened:
            for before in connection.dispatch.before_cursor_execute:
                sql, parameters = before(connection, cursor, sql, parameters, None, many)
        if not (dialect._has_events and _run_by_listener(dialect, cursor, sql, parameters, many)):
            if many:
                cursor.executemany(sql, parameters)
            elif parameters:
                cursor.execute(sql, parameters)
            else:
                cursor.execute(sql)
        if listened:
            connection.dispatch.after_cursor_execute(
                connection, cursor, sql, parameters, None, many
            )
        count = int(cursor.rowcount)
    except BaseException as exc:
        # Driver errors and exits (KeyboardInterrupt, cancellation) get SQLAlchemy's
        # own handling (private, stable through 2.x): wrapped as DBAPIError,
        # handle_error events, a lost connection invalidated. Anything else (a
        # listener's own exception) goes to the caller as it is, as from execute().
        if isinstance(exc, dialect.loaded_dbapi.Error) or is_exit_exception(exc):
            connection._handle_dbapi_exception(exc, sql, parameters, cursor, None)
        raise
    finally:
        cursor.close()
    return count


def _run_by_listener(dialect: Dialect, cursor: Any, sql: str, parameters: Any, many: bool) -> bool:
    """Offer the statement to the dialect's ``do_execute`` family of listeners, as
    SQLAlchemy does; True when one of them ran it."""
    if many:
        return any(run(cursor, sql, parameters, None) for run in dialect.dispatch.do_executemany)
    if not parameters:
        return any(run(cursor, sql, None) for run in dialect.dispatch.do_execute_no_params)
    return any(run(cursor, sql, parameters, None) for run in dialect.dispatch.do_execute)


def prepare(statement: Any, dialect: Dialect) -> DriverStatement | None:
    """Compile ``statement`` for ``dialect``, or None where it must run as Core."""
    compiled = statement.compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler):
        return None
    if compiled.literal_execute_params or _single_processors(compiled._bind_processors) is None:
        return None
    for column in compiled._result_columns:
        if column[3]._cached_result_processor(dialect, None) is not None:
            return None
    return DriverStatement(compiled)


class DriverStatements:
    """The compiled forms of one queue's prebuilt statements, made on first use."""

    def __init__(self) -> None:
        # Keyed by id(); the statement is kept beside its compiled form, so an id
        # is never reused while it is in here. Only prebuilt statements come here.
        self._prepared: dict[int, tuple[Any, DriverStatement | None]] = {}

    def _driver(self, connection: Connection, statement: Any) -> DriverStatement | None:
        entry = self._prepared.get(id(statement))
        if entry is None:
            entry = (statement, prepare(statement, connection.dialect))
            self._prepared[id(statement)] = entry
        return entry[1]

    def write(
        self,
        connection: Connection,
        statement: Any,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    ) -> int:
        """Run prebuilt ``statement``, which returns no rows, for its effect alone;
        return the rows it changed. On a cursor (:func:`run_on_cursor`) where that is
        equivalent, else as :meth:`execute` would."""
        driver = self._driver(connection, statement)
        if driver is not None and not connection.get_execution_options().get(SCHEMA_TRANSLATE):
            counted: int | None = None
            if isinstance(params, Mapping):
                rendered = driver.render(params)
                if rendered is not None:
                    counted = run_on_cursor(connection, rendered[0], rendered[1])
            elif params and not driver.expanding:
                rows = [driver.render(row) for row in params]
                if all(row is not None for row in rows):
                    many = [row[1] for row in rows if row is not None]
                    counted = run_on_cursor(connection, driver.sql, many, many=True)
            if counted is not None:
                return counted
        return int(self.execute(connection, statement, params).rowcount)

    def execute(
        self,
        connection: Connection,
        statement: Any,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        execution_options: Mapping[str, Any] | None = None,
    ) -> CursorResult[Any]:
        """Run prebuilt ``statement`` as driver SQL where that is equivalent (see the
        module), else through ``connection.execute``."""
        driver = self._driver(connection, statement)
        if driver is None or connection.get_execution_options().get(SCHEMA_TRANSLATE):
            return connection.execute(statement, params, execution_options=execution_options)
        if isinstance(params, Mapping):
            rendered = driver.render(params)
            if rendered is not None:
                sql, values = rendered
                return connection.exec_driver_sql(sql, values, execution_options=execution_options)
        elif not driver.expanding:
            rows = [driver.render(row) for row in params]
            if rows and all(row is not None for row in rows):
                many = [row[1] for row in rows if row is not None]
                return connection.exec_driver_sql(
                    driver.sql, many, execution_options=execution_options
                )
        return connection.execute(statement, params, execution_options=execution_options)
