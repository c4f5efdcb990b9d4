"""A fault-injecting TCP proxy for tests: a database link that misbehaves on demand.

:class:`NetProxy` listens on 127.0.0.1 (a free port), forwards every connection to a
server (PostgreSQL, PgBouncer, MariaDB), and runs its asyncio loop on a thread of its
own. Its mode is switched at run time from the test's thread:

- ``pass``: bytes go through as they come.
- ``blackhole``: nothing is read and nothing forwarded, either way, until the mode
  changes (bytes already read wait, in order). The kernel still accepts what fits in
  its buffers; a client that sends more than that meets a zero window, which is what
  its ``tcp_user_timeout`` bounds. A reply lost after a small statement looks like a
  server that stopped answering: only a client read timeout (or the server's own)
  bounds it.
- ``delay``: each chunk waits ``delay`` seconds before it is forwarded.
- ``reset``: every open connection is closed with an RST (``SO_LINGER`` 0), and so is
  every new one, until the mode changes.
- ``hold_commit``: the client-to-server stream of a connection stops at the first chunk
  that holds ``COMMIT`` (with ``after=b"..."``: the first after those bytes went by on
  that connection, so a test picks the transaction it means), until
  :meth:`NetProxy.release` (forward it) or :meth:`NetProxy.release_and_reset` (forward
  it, then drop the server's answer and reset the client: the COMMIT landed but its
  reply was lost).

The proxy stops by itself after ``lifetime`` seconds (a test that forgets it cannot
leave a thread behind for long); use it as a context manager to stop it at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy

MODES = ("pass", "blackhole", "delay", "reset", "hold_commit")

_CHUNK = 65536
_SMALL_BUFFER = 16384
"""Receive buffer of the proxy's sockets: small, so a black hole shows a zero window soon."""


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close a connection with an RST instead of a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """One client connection and its connection to the server."""

    def __init__(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.client_reader, self.client_writer = client
        self.server_reader, self.server_writer = server
        self.doomed = False  # the server's next answer is dropped and the client reset
        self.marked = False  # the hold_commit marker went by on this connection
        self.held: bytes | None = None
        self.closed = False

    def reset(self) -> None:
        if self.closed:
            return
        self.closed = True
        _reset(self.client_writer)
        self.server_writer.transport.abort()


class NetProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target_host:target_port``; see the module."""

    def __init__(self, target_host: str, target_port: int, *, lifetime: float = 60.0) -> None:
        self.target = (target_host, target_port)
        self.lifetime = lifetime
        self.mode = "pass"
        self.delay = 0.0
        self.after: bytes | None = None
        self.port = 0
        self.commit_seen = threading.Event()
        """Set when a ``hold_commit`` proxy has stopped a stream at a COMMIT."""
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._changed: asyncio.Event | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._run, name="netproxy", daemon=True)
        self._ready = threading.Event()

    # -- control, from the test's thread ------------------------------------------

    @classmethod
    def in_front_of(cls, url: str, **kwargs: Any) -> NetProxy:
        """A started proxy in front of the server a database URL names."""
        parsed = sqlalchemy.make_url(url)
        default_port = 3306 if parsed.get_backend_name() in ("mysql", "mariadb") else 5432
        return cls(parsed.host or "127.0.0.1", parsed.port or default_port, **kwargs).start()

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parsed = sqlalchemy.make_url(url).set(host="127.0.0.1", port=self.port)
        return parsed.render_as_string(hide_password=False)

    def start(self) -> NetProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start within 10 s")
        return self

    def set_mode(self, mode: str, *, delay: float = 0.0, after: bytes | None = None) -> None:
        """Switch to ``mode`` (one of :data:`MODES`); ``delay`` is for ``delay``,
        ``after`` for ``hold_commit``."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self._call(self._set_mode, mode, delay, after)

    def release(self) -> None:
        """Forward the COMMITs held by ``hold_commit`` and pass bytes again."""
        self._call(self._release, False)

    def release_and_reset(self) -> None:
        """Forward the held COMMITs, drop the server's answers and reset the clients."""
        self._call(self._release, True)

    def stop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> NetProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, function: Callable[..., Any], *args: Any) -> None:
        done = threading.Event()

        def call() -> None:
            try:
                function(*args)
            finally:
                done.set()

        self._loop.call_soon_threadsafe(call)
        if not done.wait(10):
            raise RuntimeError("the proxy's loop did not answer within 10 s")

    # -- the loop's side ----------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._loop.call_later(self.lifetime, self._loop.stop)
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            for link in list(self._links):
                link.reset()
            if self._server is not None:
                self._server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _start(self) -> None:
        self._changed = asyncio.Event()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SMALL_BUFFER)  # accepted inherit
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._serve, sock=sock, limit=_CHUNK)

    def _set_mode(self, mode: str, delay: float, after: bytes | None) -> None:
        self.mode, self.delay, self.after = mode, delay, after
        for link in self._links:
            link.marked = False
        if mode == "reset":
            for link in list(self._links):
                link.reset()
        self._wake()

    def _release(self, then_reset: bool) -> None:
        for link in self._links:
            if link.held is not None and then_reset:
                link.doomed = True
        self.mode = "pass"
        self._wake()

    def _wake(self) -> None:
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    async def _blocked(self, link: _Link, upstream: bool) -> None:
        """Wait while this direction of ``link`` may not move."""
        while not link.closed:
            stopped = self.mode == "blackhole" or (
                upstream and self.mode == "hold_commit" and link.held is not None
            )
            if not stopped:
                return
            assert self._changed is not None
            await self._changed.wait()

    def _holds(self, link: _Link, chunk: bytes) -> bool:
        """Whether ``chunk``, going to the server, is a COMMIT to hold."""
        if self.after is not None and not link.marked:
            link.marked = self.after in chunk
            return False
        return b"COMMIT" in chunk.upper()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "reset":
            _reset(writer)
            return
        try:
            server = await asyncio.open_connection(*self.target, limit=_CHUNK)
        except OSError:
            _reset(writer)
            return
        link = _Link((reader, writer), server)
        self._links.add(link)
        try:
            await asyncio.gather(self._pump(link, upstream=True), self._pump(link, upstream=False))
        except asyncio.CancelledError:
            pass  # the proxy is stopping: its connections are reset below
        finally:
            self._links.discard(link)
            link.reset()

    async def _pump(self, link: _Link, *, upstream: bool) -> None:
        reader = link.client_reader if upstream else link.server_reader
        writer = link.server_writer if upstream else link.client_writer
        try:
            while not link.closed:
                await self._blocked(link, upstream)
                chunk = await reader.read(_CHUNK)
                if not chunk:
                    break
                if upstream and self.mode == "hold_commit" and self._holds(link, chunk):
                    link.held = chunk
                    self.commit_seen.set()
                    await self._blocked(link, upstream)
                    link.held = None
                if not upstream and link.doomed:
                    link.reset()  # the answer to the COMMIT is lost with the connection
                    break
                await self._blocked(link, upstream)
                if self.mode == "delay" and self.delay > 0:
                    await asyncio.sleep(self.delay)
                if link.closed:
                    break
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            link.reset()
