# migrations/env.py (complete: logging from alembic.ini, --sql mode, safe_migration)
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.pool import NullPool

import sqlq_orm
from sqlq_orm.migrations import safe_migration

from myapp.models import Base

if context.config.config_file_name is not None:
    fileConfig(context.config.config_file_name, disable_existing_loggers=False)

url = os.environ["DATABASE_URL"]
options = {
    "target_metadata": Base.metadata,
    "compare_type": True,
    "render_as_batch": True,  # how SQLite alters tables; plain ALTERs elsewhere
}

if context.is_offline_mode():  # alembic upgrade head --sql: print the SQL, run nothing
    context.configure(url=url, literal_binds=True, **options)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = sqlq_orm.create_engine(url, poolclass=NullPool)  # or yours + configure_engine
    with engine.connect() as connection, safe_migration(connection):
        context.configure(connection=connection, **options)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
