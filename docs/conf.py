"""Sphinx configuration for the sqlq_orm docs site (``python3 tasks.py docs``)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

# autodoc reads the mixins' declared attributes on the unmapped classes, which SQLAlchemy
# warns about; reading them is all it does.
warnings.filterwarnings("ignore", message="Unmanaged access of declarative attribute")

project = "sqlq_orm"
author = "the sqlq_orm authors"
copyright = "sqlq_orm authors, MIT licence"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "sqlq_cli",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_inventories", "README.md"]

# MyST: headings get anchors down to ###, so a page links to a section as page.md#name.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]

# The API reference reads the docstrings. Signatures stay on one line per parameter in
# the description, where they are readable at 390 px too.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_class_signature = "separated"
autodoc_preserve_defaults = True
python_use_unqualified_type_names = True

# Each project's inventory comes from its site; a build without network (CI) uses the
# fallback written by docs/_inventories/make_inventories.py (intersphinx logs, not warns,
# when a fallback answers).
intersphinx_mapping = {
    "python": ("https://docs.python.org/3/", (None, "_inventories/python.inv")),
    "sqlalchemy": ("https://docs.sqlalchemy.org/en/20/", (None, "_inventories/sqlalchemy.inv")),
    "alembic": ("https://alembic.sqlalchemy.org/en/latest/", (None, "_inventories/alembic.inv")),
}
intersphinx_timeout = 5

html_theme = "furo"
html_title = "sqlq_orm"
html_static_path: list[str] = []
html_theme_options = {
    "source_repository": "https://github.com/sqlq-orm/sqlq_orm/",
    "source_branch": "main",
    "source_directory": "docs/",
}
pygments_style = "friendly"
pygments_dark_style = "monokai"
