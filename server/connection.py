"""One client connection: an asyncio.Protocol that frames bytes, runs requests one after another in
arrival order, each in a Task of its own, and writes replies. Broken framing closes only this
connection."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import sys
from collections.abc import Coroutine
from typing import Any, Protocol

from protocol import FrameDecoder, ProtocolError
from server.context import Client
from server.dispatch import Dispatcher

log = logging.getLogger("ebbdb.network")

_CONNECTION_IDS = itertools.count(1)
#: Stop reading from a client that has this many requests queued behind the running one.
_MAX_QUEUED = 64

_Request = Coroutine[Any, Any, bytes | None]


def _start(loop: asyncio.AbstractEventLoop, request: _Request) -> asyncio.Task[bytes | None]:
    """A Task for one request. Where asyncio can (3.12+), the Task starts eagerly: it runs at once,
    so a request that never waits (a ping, a find_one answered from one chunk) is answered
    without waiting for the next turn of the loop; before 3.12 it starts on that turn."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(request, loop=loop, eager_start=True)
    return loop.create_task(request)


class Owner(Protocol):
    """What a connection tells the server it belongs to."""

    def connection_opened(self, conn: Connection) -> None: ...

    def connection_closed(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """Requests run one at a time, each in its own Task (so `asyncio.timeout()` and cancellation
    work in every handler); later requests from this client queue behind the running one."""

    def __init__(self, dispatcher: Dispatcher, owner: Owner) -> None:
        self._dispatcher = dispatcher
        self._owner = owner
        self.client = Client(next(_CONNECTION_IDS))
        self.id = self.client.id
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._queue: collections.deque[bytes] = collections.deque()
        self._task: asyncio.Task[bytes | None] | None = None
        self._write_paused = False
        self._read_paused = False
        self.closed = asyncio.Event()
        #: Set while no request runs (cleared before one starts; shutdown waits on it).
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def peer(self) -> str:
        return self.client.peer

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.client.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        self._owner.connection_opened(self)
        log.info("[conn%d] connection accepted from %s", self.id, self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._queue.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._owner.connection_closed(self)
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
        """Start the next queued request unless one runs, the client stops reading our replies,
        or the queue is empty (an eager Task that finished at once lets the next one start)."""
        loop = asyncio.get_running_loop()
        while self._queue and self._task is None and not self._write_paused:
            if self._transport is None:
                break
            frame = self._queue.popleft()
            self._idle.clear()
            task = _start(loop, self._dispatcher.handle_frame(self.client, frame))
            if task.done():
                if not self._finished(task):
                    break
                continue
            self._task = task
            task.add_done_callback(self._request_done)
        if self._task is None:
            self._idle.set()
        if self._read_paused and len(self._queue) <= _MAX_QUEUED // 2 and self._transport:
            self._read_paused = False
            self._transport.resume_reading()

    def _request_done(self, task: asyncio.Task[bytes | None]) -> None:
        self._task = None
        if self._finished(task):
            self._pump()
        else:
            self._idle.set()

    def _finished(self, task: asyncio.Task[bytes | None]) -> bool:
        """Send a finished request's reply; False if the connection cannot go on."""
        if task.cancelled():
            return False
        exc = task.exception()
        if isinstance(exc, ProtocolError):
            self.abort(f"bad message: {exc}")
            return False
        if exc is not None:  # the dispatcher turns handler errors into replies; this is a bug
            log.error("[conn%d] request failed outside the dispatcher", self.id, exc_info=exc)
            self.abort("internal error")
            return False
        reply = task.result()
        if reply is not None and self._transport is not None:
            self._transport.write(reply)
        return True

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

    async def wait_idle(self) -> None:
        """Return once no request of this connection runs (those queued run first)."""
        await self._idle.wait()

    @property
    def busy(self) -> bool:
        """A request of this connection is running."""
        return not self._idle.is_set()
