"""A schema newer than the code is refused, never used silently (#11, defect 8).

A database records the sqlq revision it was migrated to in ``sqlq_alembic_version``.
A revision this code does not ship means a newer sqlq_orm migrated it: this code
cannot know what changed, so :func:`sqlq_orm.migrate.check_schema_revision` and
:func:`sqlq_orm.migrate.upgrade` refuse it, naming both revisions.
"""

from __future__ import annotations

import pytest
import sqlalchemy

import sqlq_orm
from sqlq_orm import migrate
from sqlq_orm.errors import SchemaNewerThanCode
from sqlq_orm.migrations import VERSION_TABLE

FUTURE_REVISION = "sqlq_9999"


def stamp(url: str, revision: str) -> None:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text(f"UPDATE {VERSION_TABLE} SET version_num = :revision"),
            {"revision": revision},
        )
    engine.dispose()


def test_this_code_knows_its_own_newest_revision():
    assert migrate.newest_revisions() == [sqlq_orm.migrations.NEWEST_REVISION]


def test_a_database_at_the_newest_revision_passes(db_url):
    migrate.upgrade(db_url)

    migrate.check_schema_revision(db_url)


def test_a_database_never_migrated_passes(db_url):
    migrate.check_schema_revision(db_url)


def test_a_revision_this_code_does_not_know_is_refused_naming_both(db_url):
    migrate.upgrade(db_url)
    stamp(db_url, FUTURE_REVISION)

    with pytest.raises(SchemaNewerThanCode) as refused:
        migrate.check_schema_revision(db_url)

    assert refused.value.found == [FUTURE_REVISION]
    assert refused.value.newest == migrate.newest_revisions()
    assert FUTURE_REVISION in str(refused.value)
    assert migrate.newest_revisions()[0] in str(refused.value)


def test_upgrade_refuses_a_newer_schema_and_changes_nothing(db_url):
    migrate.upgrade(db_url)
    stamp(db_url, FUTURE_REVISION)

    with pytest.raises(SchemaNewerThanCode):
        migrate.upgrade(db_url)

    assert migrate.current(db_url) == {FUTURE_REVISION}
