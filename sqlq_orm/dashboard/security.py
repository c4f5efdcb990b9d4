"""Who may see the dashboard and who may change jobs through it.

- **Authorisation:** the host plugs in ``authorize(request) -> bool``, asked on every
  request. Without one, only clients on a loopback address are let in
  (:func:`loopback_only`), and :func:`require_safe_bind` refuses to serve on a
  non-loopback address at all.
- **CSRF:** every write carries a token tied to a random per-browser cookie by an HMAC
  under the app's secret (:class:`CsrfTokens`). A page on another site can make the
  browser send the cookie, but cannot read it or compute the token, so its forged
  POST is refused. Writes that a browser marks as cross-site (``Sec-Fetch-Site``) or
  from another origin (``Origin``) are refused before the token is even looked at
  (:func:`cross_site_write`).
- **Host names:** a request whose ``Host`` is not on the allow-list is refused
  (:class:`HostAllowList`; loopback names by default). Without it a DNS-rebinding page
  (``evil.example`` re-pointed at 127.0.0.1) would be same-origin with the dashboard
  and could read it, and act through it.
- **Loopback default, forwarded requests:** :func:`loopback_only` refuses a request
  carrying ``Forwarded``/``X-Forwarded-For``/``X-Real-IP``: a reverse proxy on this
  machine connects from loopback on behalf of a client somewhere else.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Callable, Iterable

from starlette.requests import Request

from sqlq_orm.errors import InvalidInput, SqlqError

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


FORWARDING_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
"""Headers a proxy adds for the client it speaks for (lower case, as ASGI gives them)."""


def loopback_only(request: Request) -> bool:
    """The default authorisation: the client connects from this machine, itself.

    A request a proxy forwarded (it carries one of :data:`FORWARDING_HEADERS`) is
    refused even though its connection comes from loopback: the proxy speaks for
    someone else. A plain TCP forwarder adds no header and cannot be told apart from
    a local client: put the dashboard behind it only with an ``authorize`` hook.
    """
    if any(name in request.headers for name in FORWARDING_HEADERS):
        return False
    return is_loopback(request.client.host if request.client else None)


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The ``Host`` names allowed when the app is given no ``allowed_hosts``."""


def host_name(header: str) -> str:
    """The name part of a ``Host`` header, lower case, without port or IPv6 brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header[1:]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostAllowList:
    """Which ``Host`` headers the dashboard answers.

    Entries are host names (``jobs.example.com``), IP addresses, a leading-dot suffix
    (``.example.com``: the domain and every subdomain), or ``*`` (any host: only when
    something in front, the host app or a proxy, checks it already). Ports are ignored.
    """

    def __init__(self, allowed: Iterable[str] | None = None) -> None:
        if isinstance(allowed, str | bytes):
            raise InvalidInput(f"allowed_hosts must be a list of host names, got {allowed!r}")
        entries = list(LOOPBACK_NAMES if allowed is None else allowed)
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                raise InvalidInput(f"allowed_hosts entries must be host names, got {entry!r}")
        self.any = "*" in entries
        names = [host_name(e) if not e.startswith(".") else e.lower() for e in entries]
        self.exact = frozenset(n for n in names if not n.startswith("."))
        self.suffixes = tuple(n for n in names if n.startswith("."))

    def allows(self, header: str | None) -> bool:
        """True when the request's ``Host`` header names an allowed host."""
        if self.any:
            return True
        if not header:
            return False
        name = host_name(header)
        if name in self.exact:
            return True
        return any(name.endswith(s) or name == s[1:] for s in self.suffixes)


def cross_site_write(request: Request) -> str | None:
    """Why a write must be refused as coming from another site, or None when it may go on.

    Browsers send ``Sec-Fetch-Site`` (Chromium, Firefox, Safari) and ``Origin`` on a
    POST; a form on another site says ``cross-site``/``same-site`` or names its own
    origin. A client that sends neither (curl, a script) is not a browser being
    tricked, and still needs the CSRF token.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"the browser says this form was sent from another site ({fetch_site})"
    origin = request.headers.get("origin")
    if origin is not None:
        # Host part only: behind a TLS-terminating proxy the app sees http while the
        # browser's origin says https.
        host = (request.headers.get("host") or "").lower()
        if origin.lower().partition("://")[2] != host:
            return f"the form was sent from another origin ({origin!r}, this is {host!r})"
    return None


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
