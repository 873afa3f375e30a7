"""One client connection: an asyncio.Protocol that frames bytes, runs requests one after another in
arrival order, and writes replies. Broken framing closes only this connection."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import types
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any

from protocol import FrameDecoder, ProtocolError
from server.context import CommandContext

if TYPE_CHECKING:
    from server.app import App

log = logging.getLogger("ebbdb.network")

_CONNECTION_IDS = itertools.count(1)
#: Stop reading from a client that has this many requests queued behind the running one.
_MAX_QUEUED = 64
#: Handler contexts a connection keeps (see Connection.context).
_MAX_CONTEXTS = 64


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], pending: Any) -> Generator[Any, Any, Any]:
    """Continue a coroutine that was started synchronously and suspended on `pending`, inside a Task.
    Exceptions the Task throws in (cancellation) are passed on to the coroutine."""
    while True:
        thrown: BaseException | None = None
        try:
            yield pending
        except BaseException as exc:  # noqa: BLE001 - forwarded, not handled
            thrown = exc
        try:
            pending = coro.send(None) if thrown is None else coro.throw(thrown)
        except StopIteration as stop:
            return stop.value


async def _finish(coro: Coroutine[Any, Any, Any], pending: Any) -> Any:
    return await _resume(coro, pending)


class Connection(asyncio.Protocol):
    """Requests run eagerly: a request whose handler never waits (a ping, a find answered from one
    chunk) is answered inside data_received without creating a Task; one that waits (a write, a long
    scan) continues in a Task while later requests from this client queue behind it."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.id = next(_CONNECTION_IDS)
        self.peer = ""
        self.client_metadata: dict[str, Any] | None = None
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._queue: collections.deque[bytes] = collections.deque()
        self._task: asyncio.Task[Any] | None = None
        self._write_paused = False
        self._read_paused = False
        self.closed = asyncio.Event()
        #: Handler contexts by (database, command name). A context is immutable, so one is made
        #: per pair rather than per request; see context().
        self.contexts: dict[tuple[str, str], CommandContext] = {}

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        self.app.connection_opened(self)
        log.info("[conn%d] connection accepted from %s", self.id, self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._queue.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self.app.connection_closed(self)
        self.closed.set()
        log.info("[conn%d] end connection %s", self.id, self.peer)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            self.abort(f"bad frame: {exc}")
            return
        self._queue.extend(frames)
        if len(self._queue) > _MAX_QUEUED and not self._read_paused and self._transport:
            self._read_paused = True
            self._transport.pause_reading()
        self._pump()

    def eof_received(self) -> bool | None:
        if self._decoder.pending:
            log.warning(
                "[conn%d] client closed with %d bytes of an incomplete message",
                self.id,
                self._decoder.pending,
            )
        return None

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._pump()

    # -- requests --------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Run queued requests in order until one has to wait, the client stops reading our replies,
        or the queue is empty."""
        while self._queue and self._task is None and not self._write_paused:
            if self._transport is None:
                return
            frame = self._queue.popleft()
            coro = self.app.dispatcher.handle_frame(self, frame)
            try:
                pending = coro.send(None)
            except StopIteration as stop:
                self._send(stop.value)
                continue
            except ProtocolError as exc:
                self.abort(f"bad message: {exc}")
                return
            self._task = asyncio.get_running_loop().create_task(_finish(coro, pending))
            self._task.add_done_callback(self._request_done)
        if self._read_paused and len(self._queue) <= _MAX_QUEUED // 2 and self._transport:
            self._read_paused = False
            self._transport.resume_reading()

    def _request_done(self, task: asyncio.Task[Any]) -> None:
        self._task = None
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, ProtocolError):
            self.abort(f"bad message: {exc}")
            return
        if exc is not None:  # the dispatcher turns handler errors into replies; this is a bug
            log.error("[conn%d] request failed outside the dispatcher", self.id, exc_info=exc)
            self.abort("internal error")
            return
        self._send(task.result())
        self._pump()

    def _send(self, reply: bytes | None) -> None:
        if reply is not None and self._transport is not None:
            self._transport.write(reply)

    def abort(self, reason: str) -> None:
        """Drop this connection (framing is lost, so nothing more can be read from it)."""
        if self._transport is None:
            return
        log.warning("[conn%d] closing connection from %s: %s", self.id, self.peer, reason)
        self._queue.clear()
        self._transport.abort()

    def close(self) -> None:
        """Close gracefully: pending replies are flushed first."""
        if self._transport is not None:
            self._transport.close()

    def context(self, db: str, command: str) -> CommandContext:
        """The context a handler of `command` on `db` gets from this connection (kept for the next
        request; a client naming ever new databases only empties the table now and then)."""
        if len(self.contexts) >= _MAX_CONTEXTS:
            self.contexts.clear()
        ctx = self.contexts[db, command] = CommandContext(self.app, self, db, command)
        return ctx

    @property
    def busy(self) -> bool:
        return self._task is not None
