"""Who may see the dashboard and who may change jobs through it.

- **Authorisation:** the host plugs in ``authorize(request) -> bool``, asked on every
  request. Without one, only clients on a loopback address are let in
  (:func:`loopback_only`), and :func:`require_safe_bind` refuses to serve on a
  non-loopback address at all.
- **CSRF:** every write carries a token tied to a random per-browser cookie by an HMAC
  under the app's secret (:class:`CsrfTokens`). A page on another site can make the
  browser send the cookie, but cannot read it or compute the token, so its forged
  POST is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Callable

from starlette.requests import Request

from sqlq_orm.errors import SqlqError

Authorize = Callable[[Request], bool]
"""The host's check: True lets the request in, False answers 403."""

CSRF_COOKIE = "sqlq_csrf"
CSRF_FIELD = "csrf_token"


class DashboardRefused(SqlqError):
    """The dashboard will not start as configured (the message says why and what to do)."""


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for anything else or None."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_only(request: Request) -> bool:
    """The default authorisation: the client connects from this machine."""
    return is_loopback(request.client.host if request.client else None)


def require_safe_bind(host: str, authorize: Authorize | None) -> None:
    """Refuse to serve on a non-loopback ``host`` when no authorisation hook is set."""
    if authorize is None and not is_loopback(host):
        raise DashboardRefused(
            f"refusing to serve the dashboard on {host!r} without an authorisation hook: "
            "anyone who can reach that address could read every job (and act on them with "
            "actions enabled); bind to 127.0.0.1, or pass authorize= (--authorize "
            "module:function) to decide who gets in"
        )


class CsrfTokens:
    """Double-submit tokens signed with the app's secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        # A secret made per process is enough: tokens only need to outlive a page view,
        # and a restart merely asks the operator to reload the form.
        self._secret = secret or secrets.token_bytes(32)

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(24)

    def token_for(self, nonce: str) -> str:
        return hmac.new(self._secret, nonce.encode(), hashlib.sha256).hexdigest()

    def verify(self, nonce: str | None, token: str | None) -> bool:
        """True when ``token`` was made for the browser holding cookie ``nonce``."""
        if not nonce or not token:
            return False
        return hmac.compare_digest(self.token_for(nonce), token)
