"""Run sqlq_orm's Alembic environment, which lives (once) in the package.

See ``sqlq_orm/migrations/env.py`` for where the database URL comes from.
"""

import runpy

from sqlq_orm.migrations import ENV_SCRIPT

runpy.run_path(str(ENV_SCRIPT), run_name="sqlq_orm_alembic_env")
