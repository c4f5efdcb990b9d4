"""The Alembic revisions: one head, up and down cleanly, and exactly the models' schema.

Run on a SQLite file and on PostgreSQL (``db_url`` is an empty database). Besides
Alembic's own autogenerate diff, which ignores CHECK constraints and on SQLite cannot
see an index's DESC or WHERE, the migrated schema is compared with the one
``create_all`` builds from the models, reflected in full.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from alembic.script import ScriptDirectory
from sqlalchemy import func, select

import sqlq_orm
from alembic import command
from sqlq_orm import SqlqError, migrate
from sqlq_orm.migrations import MIGRATIONS_DIR, VERSION_TABLE, VERSIONS_DIR
from sqlq_orm.schema.models import Base, Job, JobAttempt, JobEvent
from tests.support import factories
from tests.support.faultkit import drop_index_sql
from tests.support.old_rows import insert_old_jobs, seed_0001_history

REPO_ROOT = Path(__file__).resolve().parents[2]
SQLQ_TABLES = set(Base.metadata.tables)
NEWEST = set(migrate.newest_revisions())
"""sqlq's head revision: where an upgrade ends."""


def table_names(url: str) -> set[str]:
    engine = sqlalchemy.create_engine(url)
    try:
        return set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def schema_snapshot(url: str) -> dict[str, Any]:
    """Everything reflection tells about sqlq's tables, in comparable form.

    On SQLite the stored ``CREATE`` statements are included: they are the only place
    SQLite keeps an index's DESC. A table's definitions are compared as a set, since
    a table rebuilt by a batch migration lists its constraints in another order.
    """
    engine = sqlalchemy.create_engine(url)
    try:
        inspector = sqlalchemy.inspect(engine)
        snapshot: dict[str, Any] = {}
        for table in sorted(SQLQ_TABLES):
            snapshot[table] = {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], c.get("default"))
                    for c in inspector.get_columns(table)
                ],
                "pk": inspector.get_pk_constraint(table),
                "fks": inspector.get_foreign_keys(table),
                "uniques": sorted(inspector.get_unique_constraints(table), key=str),
                "checks": sorted(
                    (c["name"], c["sqltext"]) for c in inspector.get_check_constraints(table)
                ),
                "indexes": sorted(
                    (
                        ix["name"],
                        tuple(ix["column_names"]),
                        bool(ix["unique"]),
                        repr(ix.get("column_sorting")),
                        sorted((k, str(v)) for k, v in ix.get("dialect_options", {}).items()),
                    )
                    for ix in inspector.get_indexes(table)
                ),
            }
            if engine.dialect.name in ("mysql", "mariadb"):
                # The generated column behind a partial unique index is added with the
                # index, so a later revision's ADD COLUMN lands after it: compare the
                # columns, not their order.
                snapshot[table]["columns"].sort()
        if engine.dialect.name == "sqlite":
            with engine.connect() as connection:
                snapshot["sqlite_master"] = [
                    (kind, name, _comparable_sqlite_sql(kind, sql))
                    for kind, name, sql in connection.exec_driver_sql(
                        "SELECT type, name, sql FROM sqlite_master "
                        "WHERE name LIKE 'sqlq_%' OR tbl_name LIKE 'sqlq_%' ORDER BY name"
                    )
                ]
        return snapshot
    finally:
        engine.dispose()


def _comparable_sqlite_sql(kind: str, sql: str | None) -> Any:
    """A stored ``CREATE`` as compared: verbatim for an index (its DESC lives there);
    for a table, its lines as a sorted list with the table name unquoted. A table that
    Alembic's batch mode rebuilt (sqlq_0003 changes CHECKs) lists its constraints in the
    order of a Python set, and SQLite quotes the name of a renamed table. The lines are
    the definitions between top-level commas: ``ALTER TABLE ... ADD COLUMN`` (sqlq_0007)
    appends its column to the last column's line."""
    if kind != "table" or sql is None:
        return sql
    head, _, body = sql.partition("(")
    definitions, depth, current = [], 0, ""
    for char in body.rstrip().removesuffix(")"):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            definitions.append(current)
            current = ""
        else:
            current += char
    definitions.append(current)
    return head.replace('"', ""), sorted(" ".join(d.split()) for d in definitions)


def test_revisions_have_a_single_head_labelled_sqlq():
    scripts = ScriptDirectory.from_config(migrate.config())

    (head,) = scripts.get_heads()
    assert scripts.get_revision("sqlq@head").revision == head
    chain = [s.revision for s in scripts.walk_revisions()]
    assert chain == sorted(chain, reverse=True)  # sqlq_0001, sqlq_0002, ... in one line
    assert chain[-1] == "sqlq_0001"
    assert {"sqlq_0004", "sqlq_0005", "sqlq_0009"} <= set(chain)
    assert head == sqlq_orm.migrations.NEWEST_REVISION


def test_upgrade_from_empty_creates_the_tables_and_records_the_revision(db_url):
    assert migrate.current(db_url) == set()

    migrate.upgrade(db_url)

    assert migrate.current(db_url) == NEWEST
    assert table_names(db_url) == SQLQ_TABLES | {VERSION_TABLE}


def test_migrated_schema_matches_the_models(db_url):
    migrate.upgrade(db_url)
    migrated = schema_snapshot(db_url)
    autogenerate_diff = migrate.check(db_url)
    migrate.downgrade(db_url, "base")
    engine = sqlq_orm.create_engine(db_url)
    Base.metadata.create_all(engine)
    engine.dispose()

    from_models = schema_snapshot(db_url)

    assert autogenerate_diff == []
    assert migrated == from_models


def test_downgrade_to_base_drops_everything_and_upgrade_restores_it(db_url):
    migrate.upgrade(db_url)

    migrate.downgrade(db_url, "base")

    assert migrate.current(db_url) == set()
    assert table_names(db_url) == {VERSION_TABLE}
    migrate.upgrade(db_url)
    assert migrate.current(db_url) == NEWEST
    assert migrate.check(db_url) == []


def test_running_the_upgrade_twice_keeps_the_data(db_url, clock):
    migrate.upgrade(db_url)
    engine = sqlq_orm.create_engine(db_url)
    job = sqlq_orm.Queue(engine, clock=clock).enqueue("send_email", {"to": "a@example.com"})

    migrate.upgrade(db_url, "heads")

    with engine.connect() as connection:
        assert connection.scalar(select(Job.type).where(Job.id == job.id)) == "send_email"
    engine.dispose()
    assert migrate.current(db_url) == NEWEST


def test_upgrade_from_0001_with_jobs_in_place_keeps_them_and_adds_what_is_new(db_url, clock):
    migrate.upgrade(db_url, "sqlq_0001")
    seed_0001_history(db_url)  # jobs 1 and 2 SUCCEEDED, job 3 QUEUED

    migrate.upgrade(db_url)

    assert migrate.current(db_url) == NEWEST
    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    assert [queue.get_job(n).status for n in (1, 2, 3)] == ["SUCCEEDED", "SUCCEEDED", "QUEUED"]
    assert queue.get_job(3).concurrency_key is None  # old jobs are not limited
    [lease] = queue.claim("worker-1", limit=5)
    queue.succeed(queue.start(lease))
    # sqlq_0002: schedules
    schedule = sqlq_orm.Schedule.declare("* * * * *", "tick")
    scheduler = sqlq_orm.Scheduler(queue, [schedule])
    scheduler.register()
    clock.advance(60)
    assert len(scheduler.tick().job_ids) == 1
    # sqlq_0004: concurrency keys
    for _ in range(2):
        queue.enqueue("t", queue="limited", concurrency_key="k")
    assert len(queue.claim("worker-1", queues=["limited"], limit=5)) == 1
    assert sqlq_orm.invariants.check(queue) == []
    engine.dispose()


def test_upgrade_from_0002_with_jobs_in_place_lets_new_jobs_wait_for_old_ones(db_url, clock):
    migrate.upgrade(db_url, "sqlq_0002")
    seed_0001_history(db_url)  # jobs 1 and 2 SUCCEEDED, job 3 QUEUED (rows 0002 also has)

    migrate.upgrade(db_url)

    assert migrate.current(db_url) == NEWEST
    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    parents = [1, 2, 3]
    child = queue.enqueue("report", depends_on=parents, dedupe_key="report-1")
    assert queue.get_job(child.id).status == "WAITING"
    # The dedupe index was rebuilt: a WAITING job holds its key.
    assert queue.enqueue("report", depends_on=parents, dedupe_key="report-1").created is False
    (lease,) = queue.claim("worker-1", start=True)
    assert lease.job_id == 3
    queue.succeed(lease)
    assert queue.get_job(child.id).status == "QUEUED"
    assert sqlq_orm.invariants.check(queue) == []
    engine.dispose()


def test_downgrade_from_0003_queues_waiting_jobs_and_keeps_the_rest(db_url, clock):
    migrate.upgrade(db_url)
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    parent = queue.enqueue("fetch")
    child = queue.enqueue("report", depends_on=[parent.id])

    migrate.downgrade(db_url, "sqlq_0002")

    assert migrate.current(db_url) == {"sqlq_0002"}
    with engine.connect() as connection:
        assert set(connection.scalars(select(Job.status))) == {"QUEUED"}
        assert connection.scalar(select(func.count()).select_from(Job)) == 2
    engine.dispose()
    migrate.upgrade(db_url)
    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    assert {lease.job_id for lease in queue.claim("worker-1", limit=5)} == {parent.id, child.id}
    assert sqlq_orm.invariants.check(queue) == []
    engine.dispose()


def test_upgrade_to_job_ids_with_jobs_in_place_keeps_them_and_never_reuses_an_id(db_url, clock):
    before = ScriptDirectory.from_config(migrate.config()).get_revision("sqlq_0005").down_revision
    migrate.upgrade(db_url, str(before))
    seed_0001_history(db_url)  # jobs 1 and 2 SUCCEEDED, job 3 QUEUED

    migrate.upgrade(db_url)

    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    assert [queue.get_job(n).status for n in (1, 2, 3)] == ["SUCCEEDED", "SUCCEEDED", "QUEUED"]
    newest = queue.enqueue("a").id
    assert newest == 4
    with sqlalchemy.orm.Session(engine) as session:
        session.delete(session.get(Job, newest))
        session.commit()
    assert queue.enqueue("b").id == 5  # 4 was handed out: never again
    engine.dispose()
    migrate.downgrade(db_url, str(before))
    assert count(db_url, Job) == 4
    migrate.upgrade(db_url)
    assert migrate.check(db_url) == []


def test_upgrade_to_results_with_jobs_in_place_keeps_them_and_stores_results(db_url, clock):
    migrate.upgrade(db_url, "sqlq_0005")
    seed_0001_history(db_url)  # jobs 1 and 2 SUCCEEDED, job 3 QUEUED

    migrate.upgrade(db_url)  # through sqlq_0007 and whatever follows it

    assert "sqlq_0007" in sqlq_orm.migrations.ordered_revisions()
    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    assert [queue.get_job(n).status for n in (1, 2, 3)] == ["SUCCEEDED", "SUCCEEDED", "QUEUED"]
    assert queue.result(1) is None  # succeeded before results existed: none stored
    (lease,) = queue.claim("worker-1", start=True)
    queue.succeed(lease, result={"rows": 3})
    assert queue.result(3) == {"rows": 3}
    snoozing = queue.enqueue("t", {})
    (lease,) = queue.claim("worker-1", start=True)
    queue.snooze(lease, 60)  # a SNOOZED attempt and event, which sqlq_0007 allows
    engine.dispose()
    migrate.downgrade(db_url, "sqlq_0005")
    assert count(db_url, Job) == 4
    plain = sqlalchemy.create_engine(db_url)
    with plain.connect() as connection:
        statuses = connection.execute(
            select(JobAttempt.status).where(JobAttempt.job_id == snoozing.id)
        ).scalars()
        assert list(statuses) == ["RELEASED"]  # as it was recorded before sqlq_0007
    plain.dispose()
    migrate.upgrade(db_url)
    assert migrate.check(db_url) == []


def test_upgrade_to_queue_controls_with_jobs_in_place_keeps_them_and_pauses(db_url, clock):
    before = ScriptDirectory.from_config(migrate.config()).get_revision("sqlq_0009").down_revision
    migrate.upgrade(db_url, str(before))
    seed_0001_history(db_url)  # jobs 1 and 2 SUCCEEDED, job 3 QUEUED

    migrate.upgrade(db_url)

    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    assert [queue.get_job(n).status for n in (1, 2, 3)] == ["SUCCEEDED", "SUCCEEDED", "QUEUED"]
    queue.pause_queue("default")
    assert queue.claim("w") == []
    queue.resume_queue("default")
    assert [lease.job_id for lease in queue.claim("w")] == [3]
    engine.dispose()
    migrate.downgrade(db_url, str(before))
    assert count(db_url, Job) == 3
    migrate.upgrade(db_url)
    assert migrate.check(db_url) == []


def test_upgrade_to_rate_limits_with_jobs_in_place_keeps_them_and_limits(db_url, clock):
    before = ScriptDirectory.from_config(migrate.config()).get_revision("sqlq_0011").down_revision
    migrate.upgrade(db_url, str(before))
    seed_0001_history(db_url)  # jobs 1 and 2 SUCCEEDED, job 3 QUEUED

    migrate.upgrade(db_url)

    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    assert [queue.get_job(n).status for n in (1, 2, 3)] == ["SUCCEEDED", "SUCCEEDED", "QUEUED"]
    assert queue.get_job(3).rate_key is None
    queue.enqueue("t", rate_key="tenant:1")
    queue.set_rate_limit("default", 1, 60)
    queue.enqueue("t")
    # One start per key: the old job (no key) and tenant:1's; the second keyless waits.
    assert [lease.job_id for lease in queue.claim("w", limit=5)] == [3, 4]
    assert queue.claim("w", limit=5) == []
    held = queue.enqueue("digest", dedupe_key="d", dedupe_period=60)
    engine.dispose()
    migrate.downgrade(db_url, str(before))
    assert count(db_url, Job) == 6
    migrate.upgrade(db_url)
    assert migrate.check(db_url) == []
    assert held.created


def test_upgrade_to_stand_in_attempts_keeps_old_timelines_and_the_downgrade_writes_events_out(
    db_url, clock
):
    before = ScriptDirectory.from_config(migrate.config()).get_revision("sqlq_0013").down_revision
    migrate.upgrade(db_url, str(before))
    seed_0001_history(db_url)  # jobs 1 and 2 SUCCEEDED (every event written), job 3 QUEUED

    migrate.upgrade(db_url)

    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    old = ["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED"]
    assert [e.event for e in sqlq_orm.job_timeline(queue, 1).events] == old
    (lease,) = queue.claim("w", start=True, lease_seconds=30)  # job 3, a stand-in row
    queue.succeed(lease)
    shown = [(e.event, e.actor, e.detail) for e in sqlq_orm.job_timeline(queue, 3).events]
    assert count(db_url, JobEvent) == 9  # nothing written for job 3's run
    assert sqlq_orm.invariants.check(queue) == []
    engine.dispose()

    migrate.downgrade(db_url, str(before))

    assert count(db_url, JobEvent) == 9 + 3
    url = sqlalchemy.make_url(db_url)
    with sqlalchemy.create_engine(url).connect() as connection:
        rows = connection.execute(
            sqlalchemy.text(
                "SELECT event, actor, detail FROM sqlq_job_events WHERE job_id = 3 ORDER BY id"
            )
        ).all()
    assert [(event, actor, json.loads(detail or "null")) for event, actor, detail in rows] == shown
    migrate.upgrade(db_url)
    assert migrate.check(db_url) == []


def test_upgrade_to_json_payloads_with_jobs_in_place_keeps_every_payload(db_url, clock):
    before = ScriptDirectory.from_config(migrate.config()).get_revision("sqlq_0010").down_revision
    migrate.upgrade(db_url, str(before))
    payloads = [{"b": 1, "a": [1.5, None, True]}, "ünï ✓ 🚀", [], {"nested": {"k": "v"}}, 7]
    # Written as the release before sqlq_0010 wrote them (today's Queue names columns
    # that later revisions add): compact JSON text, the first job SUCCEEDED with a result.
    texts = [json.dumps(payload, separators=(",", ":"), ensure_ascii=False) for payload in payloads]
    ids = insert_old_jobs(db_url, texts)
    engine = sqlalchemy.create_engine(db_url)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text(
                "UPDATE sqlq_jobs SET status = 'SUCCEEDED', finished_at = :t, result = :result"
                " WHERE id = :id"
            ),
            {"t": 1_700_000_001, "result": '{"done":[1,2]}', "id": ids[0]},
        )
    engine.dispose()

    migrate.upgrade(db_url)

    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=clock)
    assert [json.loads(queue.get_job(n).payload) for n in ids] == payloads
    assert json.loads(queue.get_job(ids[0]).result) == {"done": [1, 2]}
    leases = queue.claim("w", limit=10)
    assert [lease.payload for lease in leases] == payloads[1:]
    with engine.connect() as connection:
        assert sqlq_orm.migrations.standing.PROBES["sqlq_0010"](connection)
    engine.dispose()
    migrate.downgrade(db_url, str(before))
    engine = sqlq_orm.create_engine(db_url)
    with engine.connect() as connection:
        kept = dict(connection.execute(select(Job.id, Job.payload)).all())
        assert sqlq_orm.migrations.standing.PROBES["sqlq_0010"](connection) == (
            engine.dialect.name == "sqlite"
        )
    engine.dispose()
    assert [json.loads(kept[n]) for n in ids] == payloads
    migrate.upgrade(db_url)
    assert migrate.check(db_url) == []


def test_upgrade_to_json_payloads_refuses_rows_it_cannot_convert_and_changes_nothing(db_url):
    before = ScriptDirectory.from_config(migrate.config()).get_revision("sqlq_0010").down_revision
    migrate.upgrade(db_url, str(before))
    engine = sqlq_orm.create_engine(db_url)
    if engine.dialect.name == "sqlite":
        engine.dispose()
        pytest.skip("SQLite keeps TEXT: sqlq_0010 converts nothing there")
    engine.dispose()
    good, bad = insert_old_jobs(db_url, ['{"ok":1}', '{"n":1}'])
    engine = sqlq_orm.create_engine(db_url)
    # What the column held as TEXT and its JSON type refuses: PostgreSQL's JSONB cannot
    # store NUL, MariaDB's JSON (which can) must be valid JSON.
    unconvertible = '{"bytes": "a\\u0000b"}' if engine.dialect.name == "postgresql" else '{"n": 1'
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text("UPDATE sqlq_jobs SET payload = :bad WHERE id = :id"),
            {"bad": unconvertible, "id": bad},
        )
    engine.dispose()

    with pytest.raises(SqlqError, match=rf"sqlq_0010 cannot convert .* jobs \[{bad}\]"):
        migrate.upgrade(db_url)

    assert migrate.current(db_url) == {str(before)}
    assert count(db_url, Job) == 2
    assert good != bad


def test_upgrade_accepts_a_host_apps_engine(db_url):
    engine = sqlq_orm.configure_engine(sqlalchemy.create_engine(db_url))

    migrate.upgrade(engine)

    assert migrate.current(engine) == NEWEST
    engine.dispose()


def test_upgrade_adopts_tables_created_from_the_models(db_url, clock):
    engine = sqlq_orm.create_engine(db_url)
    Base.metadata.create_all(engine)
    job = sqlq_orm.Queue(engine, clock=clock).enqueue("send_email")

    migrate.upgrade(engine)

    assert migrate.current(engine) == NEWEST
    assert sqlq_orm.Queue(engine).get_job(job.id).type == "send_email"
    engine.dispose()


def test_upgrade_refuses_unrecorded_tables_that_differ_from_the_models(db_url):
    engine = sqlq_orm.create_engine(db_url)
    Base.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.exec_driver_sql(drop_index_sql(engine, "ix_sqlq_jobs_lease", "sqlq_jobs"))

    with pytest.raises(sqlq_orm.SqlqError, match="differ from the models"):
        migrate.upgrade(engine)

    assert migrate.current(engine) == set()
    assert VERSION_TABLE not in table_names(db_url)
    engine.dispose()


def test_upgrade_refuses_tables_that_the_host_apps_alembic_manages(db_url):
    engine = sqlq_orm.create_engine(db_url)
    Base.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text("CREATE TABLE alembic_version (version_num VARCHAR(32))")
        )
        connection.execute(sqlalchemy.text("INSERT INTO alembic_version VALUES ('sqlq_0001')"))

    # sqlq's revisions recorded in the app's history: the second-branch recipe.
    with pytest.raises(sqlq_orm.SqlqError, match="app's own Alembic.*`alembic upgrade heads`"):
        migrate.upgrade(engine)

    assert VERSION_TABLE not in table_names(db_url)
    engine.dispose()


def test_repo_template_is_the_packaged_template():
    assert (REPO_ROOT / "alembic" / "script.py.mako").read_text() == (
        MIGRATIONS_DIR / "script.py.mako"
    ).read_text()


# ------------------------------------------------------------------ alembic CLI


def run_alembic(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run the ``alembic`` command line; return its output, failing with it on error."""
    full_env = {k: v for k, v in os.environ.items() if k != "SQLQ_DATABASE_URL"}
    full_env.update(PYTHONPATH=str(REPO_ROOT), **(env or {}))
    done = subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_alembic_upgrade_and_check_from_the_repo_root(db_url):
    env = {"SQLQ_DATABASE_URL": db_url}

    run_alembic("upgrade", "head", cwd=REPO_ROOT, env=env)
    output = run_alembic("check", cwd=REPO_ROOT, env=env)

    assert "No new upgrade operations detected" in output
    assert migrate.current(db_url) == NEWEST


def test_alembic_without_a_url_migrates_sqlq_db_in_the_working_directory(tmp_path):
    run_alembic("-c", str(REPO_ROOT / "alembic.ini"), "upgrade", "head", cwd=tmp_path)

    assert migrate.current(f"sqlite:///{tmp_path / 'sqlq.db'}") == NEWEST


HOST_ENV_PY = """
from alembic import context
from sqlalchemy import create_engine

from host_models import metadata as host_metadata
from sqlq_orm.migrations import safe_migration
from sqlq_orm.schema.models import Base as SqlqBase

config = context.config
engine = create_engine(config.get_main_option("sqlalchemy.url"))
# safe_migration, as docs/howto/alembic.md says: sqlq revisions rebuild sqlq_jobs on SQLite.
with engine.connect() as connection, safe_migration(connection):
    context.configure(
        connection=connection, target_metadata=[host_metadata, SqlqBase.metadata]
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
"""

HOST_MODELS_PY = """
import sqlalchemy as sa

metadata = sa.MetaData()
widgets = sa.Table(
    "widgets", metadata, sa.Column("id", sa.Integer, primary_key=True, autoincrement=False)
)
"""

HOST_REVISION_PY = """
import sqlalchemy as sa
from alembic import op

revision = "3f1c2a9b7d10"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "widgets", sa.Column("id", sa.Integer, primary_key=True, autoincrement=False)
    )


def downgrade():
    op.drop_table("widgets")
"""


def make_host_alembic(root: Path, url: str) -> None:
    """A host app's own Alembic setup, whose version_locations add sqlq's revisions."""
    (root / "migrations" / "versions").mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(HOST_ENV_PY)
    (root / "migrations" / "versions" / "3f1c2a9b7d10_widgets.py").write_text(HOST_REVISION_PY)
    (root / "host_models.py").write_text(HOST_MODELS_PY)
    (root / "alembic.ini").write_text(
        textwrap.dedent(
            f"""\
            [alembic]
            script_location = %(here)s/migrations
            prepend_sys_path = %(here)s
            path_separator = space
            version_locations = %(here)s/migrations/versions sqlq_orm.migrations:versions
            sqlalchemy.url = {url.replace("%", "%%")}
            """
        )
    )


def test_host_app_runs_sqlq_revisions_from_its_own_alembic(db_url, tmp_path):
    make_host_alembic(tmp_path, db_url)

    run_alembic("upgrade", "heads", cwd=tmp_path)

    engine = sqlalchemy.create_engine(db_url)
    with engine.connect() as connection:
        heads = set(connection.scalars(sqlalchemy.text("SELECT version_num FROM alembic_version")))
    engine.dispose()
    assert heads == {"3f1c2a9b7d10", *NEWEST}
    assert table_names(db_url) == SQLQ_TABLES | {"widgets", "alembic_version"}
    assert "No new upgrade operations detected" in run_alembic("check", cwd=tmp_path)


# ------------------------------------------------- SQLite table rebuilds (batch mode)

BATCH_REVISION_PY = """
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "{newest}"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("sqlq_jobs", recreate="always") as batch:
        batch.add_column(sa.Column("note", sa.String(50), nullable=True))
    {extra}


def downgrade():
    with op.batch_alter_table("sqlq_jobs", recreate="always") as batch:
        batch.drop_column("note")
"""


def upgrade_with_extra_revision(url: str, versions: Path, extra: str = "") -> None:
    versions.mkdir()
    (versions / "0002_batch.py").write_text(
        BATCH_REVISION_PY.format(extra=extra, newest=max(NEWEST))
    )
    engine = sqlq_orm.create_engine(url)
    with engine.connect() as connection:
        config = migrate.config(connection)
        config.set_main_option("version_locations", f"{VERSIONS_DIR}{os.pathsep}{versions}")
        command.upgrade(config, "heads")
    engine.dispose()


def count(url: str, model: Any) -> int:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.scalar(select(func.count()).select_from(model)))
    finally:
        engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'queue.db'}"


def seed_job_with_history(url: str) -> None:
    engine = sqlq_orm.create_engine(url)
    with sqlalchemy.orm.Session(engine) as session:
        made = factories.factories_for(sqlq_orm.Models.default(), session)
        attempt = made.attempt(status="FAILED", finished_at=factories.T0 + 5)
        made.event(job=attempt.job, event="CLAIMED")
        session.commit()
    engine.dispose()


def test_sqlite_table_rebuild_keeps_attempts_and_events(sqlite_url, tmp_path):
    migrate.upgrade(sqlite_url)
    seed_job_with_history(sqlite_url)

    upgrade_with_extra_revision(sqlite_url, tmp_path / "more_versions")

    assert (count(sqlite_url, Job), count(sqlite_url, JobAttempt), count(sqlite_url, JobEvent)) == (
        1, 1, 1,
    )  # fmt: skip
    assert migrate.current(sqlite_url) == {"0002"}


def test_sqlite_table_rebuild_keeps_autoincrement_and_the_sequence_past_pruned_ids(
    sqlite_url, tmp_path
):
    migrate.upgrade(sqlite_url)
    engine = sqlq_orm.create_engine(sqlite_url)
    queue = sqlq_orm.Queue(engine)
    ids = [queue.enqueue("a").id for _ in range(3)]
    with engine.begin() as connection:
        connection.execute(sqlalchemy.delete(Job).where(Job.id.in_(ids[1:])))  # the newest
    engine.dispose()

    upgrade_with_extra_revision(sqlite_url, tmp_path / "more_versions")

    engine = sqlq_orm.create_engine(sqlite_url)
    with engine.connect() as connection:
        created = connection.scalar(
            sqlalchemy.text("SELECT sql FROM sqlite_master WHERE name = 'sqlq_jobs'")
        )
    assert "AUTOINCREMENT" in created
    assert sqlq_orm.Queue(engine).enqueue("b").id == ids[-1] + 1
    engine.dispose()


def test_sqlite_migration_that_orphans_rows_is_rolled_back(sqlite_url, tmp_path):
    migrate.upgrade(sqlite_url)
    seed_job_with_history(sqlite_url)

    with pytest.raises(sqlq_orm.SqlqError, match="foreign key in sqlq_job_attempts"):
        upgrade_with_extra_revision(
            sqlite_url, tmp_path / "more_versions", extra='op.execute("DELETE FROM sqlq_jobs")'
        )

    assert migrate.current(sqlite_url) == NEWEST
    assert count(sqlite_url, Job) == 1


def test_sqlite_upgrade_runs_again_when_the_lock_is_refused_at_once(tmp_path):
    # busy_timeout 0 makes SQLite refuse the lock at once, as it does (whatever the
    # timeout) where waiting could deadlock: the migration starts again and succeeds.
    import threading

    url = f"sqlite:///{tmp_path / 'queue.db'}"
    engine = sqlq_orm.create_engine(url, busy_timeout_ms=0)
    holder = sqlite3.connect(tmp_path / "queue.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, holder.rollback)
    release.start()
    try:
        migrate.upgrade(engine)
    finally:
        release.join()
        holder.close()

    assert migrate.current(engine) == set(migrate.newest_revisions())
    engine.dispose()
