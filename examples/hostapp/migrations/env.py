"""The app's Alembic environment: its own metadata, sqlq's tables included."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy.pool import NullPool

from app import DATABASE_URL, make_engine
from models import Base
from sqlq_orm.migrations import safe_migration

if context.config.config_file_name is not None:
    fileConfig(context.config.config_file_name, disable_existing_loggers=False)

options = {
    "target_metadata": Base.metadata,  # the bound mixins put sqlq's tables here
    "compare_type": True,
    "render_as_batch": True,  # how SQLite alters tables; plain ALTERs elsewhere
}


if context.is_offline_mode():
    context.configure(url=DATABASE_URL, literal_binds=True, **options)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = make_engine(DATABASE_URL, poolclass=NullPool)
    try:
        # safe_migration: one transaction; on SQLite foreign keys OFF around it, so a
        # table rebuild cannot cascade, and PRAGMA foreign_key_check before commit.
        with engine.connect() as connection, safe_migration(connection):
            context.configure(connection=connection, **options)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()
