"""Where the documentation explains what the command line and the dashboard show.

The one place their addresses live: ``sqlq`` names :data:`ERROR_CODES_PAGE` beside an
error code or a refusal, and the dashboard links to it. Each is a page of the docs site
(``docs/`` in the repository, built by ``python3 tasks.py docs``);
``tests/docs/test_doc_links.py`` checks that every page named here exists.
"""

from __future__ import annotations

DOCS_URL = "https://github.com/sqlq-orm/sqlq_orm/blob/main/docs/"
"""The docs site's sources as the repository shows them (Markdown pages)."""

ERROR_CODES_PAGE = DOCS_URL + "reference/error-codes.md"
"""Every error code the queue records, and every refusal (exception) it raises."""

DASHBOARD_AUTH_PAGE = DOCS_URL + "howto/dashboard-auth.md"
"""Who the dashboard lets in, and how to plug in your own authorisation."""

RETENTION_PAGE = DOCS_URL + "howto/retention.md"
"""Retention, and what an app's foreign keys into the job table let prune do."""

PAGES = (ERROR_CODES_PAGE, DASHBOARD_AUTH_PAGE, RETENTION_PAGE)
