"""Give each test an empty server database cheaply: empty the tables, keep the schema.

Rebuilding the schema for every test (drop it, then ``create_all``) costs about 0.2 s
on PostgreSQL and 0.3-0.5 s on MariaDB, and some 2,500 tests run on a server: minutes
of the suite. Emptying the tables of a schema that is exactly the models' costs 15-40 ms.

Whether the schema is exactly the models' is not assumed: after each test that used the
``engine`` fixture, a fingerprint of the catalog (tables, columns with types and
defaults, indexes, constraints, triggers, functions, views, sequences, storage options)
is compared with the one taken right after ``create_all`` on a rebuilt database. Any
difference (a test added a column, ran a migration, made a view) and the next test gets
the full rebuild, as before. Tests that take only ``db_url`` (migration tests, which
need a database with no tables at all) always get the full rebuild.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import sqlalchemy

_POSTGRES_FINGERPRINT = """
SELECT md5(string_agg(item, ',' ORDER BY item)) FROM (
  SELECT c.relname::text || ':' || c.relkind::text || ':'
         || coalesce(array_to_string(c.reloptions, ','), '') AS item
    FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT a.attrelid::regclass::text || '.' || a.attname::text || ':'
         || format_type(a.atttypid, a.atttypmod) || ':' || a.attnotnull::text || ':'
         || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
   WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT conname::text || ':' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL
  SELECT t.tgname::text
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
   WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
  UNION ALL
  SELECT proname::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace
  UNION ALL
  SELECT typname::text FROM pg_type
   WHERE typnamespace = 'public'::regnamespace AND typtype IN ('c', 'd', 'e', 'r')
) AS catalog
"""

_MARIADB_FINGERPRINT = """
SELECT MD5(GROUP_CONCAT(item ORDER BY item SEPARATOR ',')) FROM (
  SELECT CONCAT_WS(':', TABLE_NAME, TABLE_TYPE, ENGINE, COALESCE(CREATE_OPTIONS, '')) AS item
    FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(':', TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE,
                   COALESCE(COLUMN_DEFAULT, ''), EXTRA, COALESCE(GENERATION_EXPRESSION, ''))
    FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(':', TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE,
                   COALESCE(SUB_PART, ''))
    FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(':', TABLE_NAME, CONSTRAINT_NAME, CONSTRAINT_TYPE)
    FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(':', TABLE_NAME, CONSTRAINT_NAME, CHECK_CLAUSE)
    FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE()
  UNION ALL
  SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()
  UNION ALL
  SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()
) AS catalog
"""


_POSTGRES_ABANDONED = """
SELECT pid, left(query, 200) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND state IN ('idle in transaction', 'idle in transaction (aborted)')
"""

_MARIADB_ABANDONED = """
SELECT p.ID, LEFT(COALESCE(t.trx_query, ''), 200)
  FROM information_schema.PROCESSLIST p
  JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID
 WHERE p.DB = DATABASE() AND p.COMMAND = 'Sleep' AND p.ID <> CONNECTION_ID()
"""


@dataclass
class ServerDatabase:
    """One test session's throw-away database on a server, and what its schema is now."""

    url: str
    """The direct URL (never PgBouncer's: emptying and rebuilding need a session)."""
    models_fingerprint: str | None = None
    """The catalog's fingerprint right after ``create_all`` on a rebuilt database."""
    tables: list[str] = field(default_factory=list)
    """The models' tables, emptied between tests while the schema is theirs exactly."""
    holds_models_schema: bool = False
    """True when the schema is exactly the models' (the rows may be anything)."""

    @property
    def is_postgres(self) -> bool:
        return self.url.startswith("postgresql")

    def _engine(self) -> sqlalchemy.Engine:
        return sqlalchemy.create_engine(self.url, isolation_level="AUTOCOMMIT")

    def end_abandoned_transactions(self) -> None:
        """End the transactions an earlier test left open on this database, with a
        warning naming them. A failed test can leave one (a paused writer, a thread
        still inside its transaction); its locks would make the next rebuild or
        emptying wait forever (PostgreSQL's lock waits, MariaDB's metadata locks)
        instead of the suite going on."""
        engine = self._engine()
        with engine.connect() as connection:
            sql = _POSTGRES_ABANDONED if self.is_postgres else _MARIADB_ABANDONED
            abandoned = connection.exec_driver_sql(sql).all()
            for session_id, query in abandoned:
                warnings.warn(
                    f"a test left a transaction open on the test database (session "
                    f"{session_id}, last statement {query!r}); ending it",
                    stacklevel=2,
                )
                if self.is_postgres:
                    connection.exec_driver_sql(f"SELECT pg_terminate_backend({int(session_id)})")
                else:
                    connection.exec_driver_sql(f"KILL {int(session_id)}")
        engine.dispose()

    def rebuild(self) -> None:
        """Leave the database with no tables at all (the full, slow reset)."""
        self.holds_models_schema = False
        self.end_abandoned_transactions()
        if self.is_postgres:
            engine = self._engine()
            with engine.connect() as connection:
                connection.exec_driver_sql("DROP SCHEMA public CASCADE")
                connection.exec_driver_sql("CREATE SCHEMA public")
            engine.dispose()
            return
        parsed = sqlalchemy.make_url(self.url)
        engine = sqlalchemy.create_engine(parsed.set(database=None), isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS `{parsed.database}`")
            connection.exec_driver_sql(f"CREATE DATABASE `{parsed.database}`")
        engine.dispose()

    def empty_tables(self) -> None:
        """Delete every row; the schema stays as it is.

        PostgreSQL: one ``TRUNCATE ... RESTART IDENTITY``, which also leaves the tables
        without statistics, as new ones are (the plan tests rely on the planner seeing a
        new table, not one whose rows were deleted). MariaDB: ``DELETE``, because its
        TRUNCATE is DDL (a new file per table, fsyncs) that costs 10-30 times more on a
        busy server; its id counters go on, as a production table's do, so no test may
        count on a job's id there.
        """
        self.end_abandoned_transactions()
        engine = self._engine()
        with engine.connect() as connection:
            if self.is_postgres:
                names = ", ".join(f'"{name}"' for name in self.tables)
                connection.exec_driver_sql(f"TRUNCATE {names} RESTART IDENTITY")
            else:
                connection.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 0")
                for name in self.tables:
                    connection.exec_driver_sql(f"DELETE FROM `{name}`")
                connection.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 1")
        engine.dispose()

    def fingerprint(self) -> str:
        """A digest of the database's schema (not of its rows)."""
        engine = self._engine()
        with engine.connect() as connection:
            sql = _POSTGRES_FINGERPRINT if self.is_postgres else _MARIADB_FINGERPRINT
            digest = connection.exec_driver_sql(sql).scalar_one()
        engine.dispose()
        return str(digest)

    def models_created(self, metadata: sqlalchemy.MetaData) -> None:
        """``metadata.create_all`` just ran on a rebuilt database: remember what the
        schema looks like, and its tables, children first."""
        if self.models_fingerprint is None:
            self.models_fingerprint = self.fingerprint()
            self.tables = [table.name for table in reversed(metadata.sorted_tables)]

    def test_ended(self) -> None:
        """Check whether the test left the models' schema exactly as it found it."""
        self.holds_models_schema = (
            self.models_fingerprint is not None and self.fingerprint() == self.models_fingerprint
        )
