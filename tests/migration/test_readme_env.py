"""The docs' complete host ``env.py`` (docs/howto/alembic.md), run as written: online, and
``--sql`` mode."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy

from tests.migration.test_host_migrations import ONE_HEAD_REVISION
from tests.support.alembic_projects import HOST_MODELS, REPO_ROOT, run_alembic

ALEMBIC_INI = """\
[alembic]
script_location = %(here)s/migrations
prepend_sys_path = %(here)s

[loggers]
keys = root,alembic

[handlers]
keys = console

[formatters]
keys = generic

[logger_root]
level = WARNING
handlers = console
qualname =

[logger_alembic]
level = INFO
handlers =
qualname = alembic

[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = NOTSET
formatter = generic

[formatter_generic]
format = %(levelname)-5.5s [%(name)s] %(message)s
"""


def readme_env_py() -> str:
    page = (REPO_ROOT / "docs" / "howto" / "alembic.md").read_text()
    block = re.search(r"```python\n(# migrations/env.py \(complete.*?)```", page, re.S)
    assert block is not None, "the docs' complete env.py (docs/howto/alembic.md) is gone"
    return block.group(1).replace("from myapp.models import Base", "from host_models import Base")


def project(root: Path) -> None:
    (root / "migrations" / "versions").mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(readme_env_py())
    template = REPO_ROOT / "examples" / "hostapp" / "migrations" / "script.py.mako"
    (root / "migrations" / "script.py.mako").write_text(template.read_text())
    (root / "migrations" / "versions" / "b1_first.py").write_text(ONE_HEAD_REVISION)
    (root / "host_models.py").write_text(HOST_MODELS)
    (root / "alembic.ini").write_text(ALEMBIC_INI)


def test_the_readmes_env_py_runs_online_and_prints_sql_offline(db_url, tmp_path):
    project(tmp_path)

    offline = run_alembic(tmp_path, "upgrade", "head", "--sql", DATABASE_URL=db_url)
    online = run_alembic(tmp_path, "upgrade", "head", DATABASE_URL=db_url)

    assert re.search(r"CREATE TABLE [`\"]?sqlq_jobs", offline.stdout)
    assert "Running upgrade  -> b1_first" in online.stderr  # alembic.ini's logging
    engine = sqlalchemy.create_engine(db_url)
    assert "sqlq_jobs" in sqlalchemy.inspect(engine).get_table_names()
    engine.dispose()
