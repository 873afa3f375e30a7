"""Accepting connections, and bounding what clients may make the server hold.

`Listener` runs one accept loop per address instead of asyncio's own: running out of file
descriptors (EMFILE and its kin) is logged at most once a second and the loop keeps trying, so
the server serves again as soon as descriptors are free (asyncio's loop logs a traceback for every
failed accept, tens of thousands a second). With TLS in allowTLS or preferTLS mode it peeks at
each socket's first bytes to tell TLS clients from plain ones on the same port. A Listener on a
Unix domain socket (mongod's net.unixDomainSocket) removes its socket file when it closes.

`InputBudget` bounds the bytes of requests received and not yet run, over all connections: a
connection reserves the announced length of the message it is receiving before the rest of it
is read, and reading from it pauses while the budget cannot cover it, so many clients sending
48 MB messages at once make the server wait, not grow."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from ebbdb.server.log import log_event
from ebbdb.server.tls import HANDSHAKE_TIMEOUT, opens_tls
from ebbdb.storage.core import portability

log = logging.getLogger("ebbdb.network")

#: mongod's "Error accepting new connection" line.
ACCEPT_ERROR_ID = 23023
#: accept() errors that mean "out of resources for now": wait and try again.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: How long the accept loop waits after running out of descriptors before it tries again.
RETRY_DELAY = 0.1
#: At most one log line per this many seconds about failed accepts.
LOG_INTERVAL = 1.0
#: Bytes of received, not yet run requests the server holds over all its connections.
DEFAULT_INPUT_BUDGET = 256 * 1024 * 1024
#: Connections waiting to be accepted, per listening socket.
BACKLOG = 512
#: mongod's "Listening on" and "removing socket file" lines.
LISTENING_ON_ID = 23015
REMOVING_SOCKET_ID = 23017
UNABLE_TO_REMOVE_SOCKET_ID = 23022
#: How mongod names a client of a Unix domain socket (the socket has no address of its own).
UNIX_SOCKET_PEER = "anonymous unix socket"


def peer_text(peername: Any) -> str:
    """A connection's peer as the log, currentOp and whatsmyuri name it: `host:port` over TCP;
    over a Unix domain socket, as mongod names it: the path a client bound its end to, or
    (nearly always: clients bind none) "anonymous unix socket"."""
    if isinstance(peername, tuple):
        return f"{peername[0]}:{peername[1]}"
    if isinstance(peername, str) and peername.startswith("/"):
        return peername
    return UNIX_SOCKET_PEER


def is_unix_socket_peer(peer: str) -> bool:
    """Whether `peer` (peer_text's) came through a Unix domain socket: on this machine."""
    return peer.startswith(("/", UNIX_SOCKET_PEER))


class InputBudget:
    """Bytes reserved by connections for requests received but not yet run. A reservation that
    does not fit waits, first come first served, until others give bytes back; one connection
    alone may always reserve (a single message larger than the budget still gets through)."""

    def __init__(self, limit: int = DEFAULT_INPUT_BUDGET) -> None:
        self.limit = limit
        self.used = 0
        self._waiting: collections.deque[Callable[[], bool]] = collections.deque()

    def take(self, n: int) -> bool:
        if self._waiting or (self.used and self.used + n > self.limit):
            return False
        self.used += n
        return True

    def give_back(self, n: int) -> None:
        self.used -= n
        while self._waiting and self.used < self.limit:
            if not self._waiting[0]():
                break
            self._waiting.popleft()

    def wait(self, retry: Callable[[], bool]) -> None:
        """Call `retry` once bytes come back; it returns False to keep its place in the queue,
        True when it has what it needs (or wants nothing any more)."""
        self._waiting.append(retry)

    def first_in_line(self, n: int) -> bool:
        """`take` for the head of the queue (the waiters behind it do not block it)."""
        if self.used and self.used + n > self.limit:
            return False
        self.used += n
        return True


class _RateLimitedLog:
    """Accept errors, logged at most once per LOG_INTERVAL with a count of the ones in between."""

    def __init__(self) -> None:
        self._last = -LOG_INTERVAL
        self._skipped = 0

    def error(self, exc: OSError) -> None:
        now = time.monotonic()
        if now - self._last < LOG_INTERVAL:
            self._skipped += 1
            return
        skipped, self._skipped, self._last = self._skipped, 0, now
        attr: dict[str, Any] = {
            "error": f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}"
        }
        more = ""
        if skipped:
            attr["suppressed"] = skipped
            more = f" ({skipped} more since the last report)"
        log_event(
            log,
            logging.WARNING,
            ACCEPT_ERROR_ID,
            "Error accepting new connection",
            attr,
            ctx="listener",
            text=f"cannot accept new connections: {exc.strerror}{more}; retrying",
        )


class Listener:
    """One listening socket and its accept loop; it answers to what App.stop asks of an
    asyncio.Server (`sockets`, `close`, `wait_closed`)."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        tls: ssl.SSLContext | None,
        tls_only: bool,
        unix_file: tuple[str, int] | None = None,
    ) -> None:
        """`unix_file`: the path and inode of a Unix domain socket's file, removed on close."""
        self.sockets = [sock]
        self.unix_file = unix_file
        self._factory = factory
        self._tls = tls
        self._tls_only = tls_only
        self._pending: set[asyncio.Task[None]] = set()
        self._errors = _RateLimitedLog()
        self._accepting = asyncio.get_running_loop().create_task(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        (listener,) = self.sockets
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._errors.error(exc)
                    await asyncio.sleep(RETRY_DELAY)
                # Otherwise a client gone before we took it (ECONNABORTED): the next one.
                continue
            if self._tls is None or self._tls_only:
                self._serve(conn, self._tls)
            else:
                task = loop.create_task(self._sniff(conn))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    def _serve(self, conn: socket.socket, tls: ssl.SSLContext | None) -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._connect(loop, conn, tls))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, conn: socket.socket, tls: ssl.SSLContext | None
    ) -> None:
        try:
            await loop.connect_accepted_socket(
                self._factory,
                conn,
                ssl=tls,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT if tls is not None else None,
            )
        except (OSError, asyncio.CancelledError, TimeoutError):
            conn.close()

    async def _sniff(self, conn: socket.socket) -> None:
        """allowTLS/preferTLS: wait for the client's first four bytes (without reading them),
        then serve the socket in TLS or plain."""
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        try:
            head = b""
            while len(head) < 4:
                await _readable(loop, conn)
                before, head = head, conn.recv(4, socket.MSG_PEEK)
                if len(head) == len(before):  # the client hung up
                    conn.close()
                    return
        except (OSError, asyncio.CancelledError):
            conn.close()
            return
        await self._connect(loop, conn, self._tls if opens_tls(head) else None)

    def close(self) -> None:
        # Stop watching the listening sockets first: an accept the loop has already queued (a
        # connection it saw arrive) is called off with them. Cancelling the accept task alone
        # leaves that callback to run on a cancelled future (InvalidStateError, and the
        # connection it took is lost).
        loop = asyncio.get_running_loop()
        for sock in self.sockets:
            loop.remove_reader(sock.fileno())
        self._accepting.cancel()
        for task in list(self._pending):
            task.cancel()
        for sock in self.sockets:
            sock.close()
        if self.unix_file is not None:
            self._remove_socket_file(*self.unix_file)
            self.unix_file = None

    @staticmethod
    def _remove_socket_file(path: str, inode: int) -> None:
        """As mongod at shutdown; a file another server has put there since is left alone."""
        try:
            removed = portability.remove_unix_socket(path, inode)
        except OSError as exc:
            log_event(
                log,
                logging.WARNING,
                UNABLE_TO_REMOVE_SOCKET_ID,
                "Unable to remove UNIX socket",
                {"path": path, "error": exc.strerror or str(exc)},
                ctx="listener",
                text=f"cannot remove the socket file {path}: {exc.strerror or exc}",
            )
            return
        if removed:
            log_event(
                log,
                logging.INFO,
                REMOVING_SOCKET_ID,
                "removing socket file",
                {"path": path},
                ctx="listener",
                text=f"removed the socket file {path}",
            )

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._accepting


async def _readable(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    """Wait until `conn` has bytes to read (or has been closed by its peer)."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())


async def listen(
    factory: Callable[[], asyncio.Protocol],
    host: str,
    port: int,
    tls: ssl.SSLContext | None,
    tls_only: bool,
) -> Listener:
    """Listen on host:port. `tls` None: plain connections; with `tls_only`, TLS ones only;
    otherwise both."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sock = socket.create_server((host, port), family=infos[0][0], backlog=BACKLOG)
    sock.setblocking(False)
    return Listener(sock, factory, tls, tls_only)


def listen_unix(
    factory: Callable[[], asyncio.Protocol],
    path: str,
    mode: int,
    tls: ssl.SSLContext | None,
    tls_only: bool,
) -> Listener:
    """Listen on the Unix domain socket `path` (file permissions `mode`), as mongod does: a file
    already there (a killed server's socket) is replaced, and the file is removed on close.
    Raises OSError. Only where portability.unix_sockets()."""
    sock, inode = portability.listen_unix(path, mode, BACKLOG)
    sock.setblocking(False)
    log_event(
        log,
        logging.INFO,
        LISTENING_ON_ID,
        "Listening on",
        {"address": path},
        ctx="listener",
        text=f"accepting connections on the Unix domain socket {path} (mode {mode:04o})",
    )
    return Listener(sock, factory, tls, tls_only, (path, inode))
