"""One client connection: an asyncio.Protocol that frames bytes, runs requests one after another in
arrival order inside the connection's own Task, and writes replies. Broken framing closes only this
connection, once the requests that came whole before it are answered."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import itertools
import logging
import sys
from collections.abc import Coroutine, Iterator
from typing import Any, Protocol, TypeGuard, cast

from ebbdb.protocol import FrameDecoder, ProtocolError
from ebbdb.server.context import Client
from ebbdb.server.dispatch import Dispatcher
from ebbdb.server.failpoints import CloseConnection
from ebbdb.server.listener import InputBudget, peer_text
from ebbdb.server.log import log_event
from ebbdb.server.profiler import app_name
from ebbdb.server.raw_reply import TURN_BYTES, slices

log = logging.getLogger("ebbdb.network")

#: mongod's connection lines.
CONNECTION_REFUSED_ID = 22942
CONNECTION_ACCEPTED_ID = 22943
CONNECTION_ENDED_ID = 22944

_CONNECTION_IDS = itertools.count(1)
#: Stop reading from a client that has this many requests queued behind the running one.
_MAX_QUEUED = 64
#: Received, not yet run bytes a connection holds without reserving them from the input budget
#: (every ordinary request is smaller: only large messages pay for the accounting).
_FREE_INPUT = 64 * 1024

_Reply = bytes | list[bytes] | None
_Request = Coroutine[Any, Any, _Reply]


if sys.version_info >= (3, 12):
    #: asyncio.Task's eager_start (3.12+): a task's first step runs at once, in its creator's turn.
    _EAGER_TASKS = True

    def _eager_task(
        request: _Request, loop: asyncio.AbstractEventLoop, context: contextvars.Context
    ) -> asyncio.Task[_Reply]:
        return asyncio.Task(request, loop=loop, context=context, eager_start=True)

else:
    _EAGER_TASKS = False

    def _eager_task(
        request: _Request, loop: asyncio.AbstractEventLoop, context: contextvars.Context
    ) -> asyncio.Task[_Reply]:
        raise NotImplementedError("eager tasks are 3.12+")


def _answered(request: _Reply | _Request) -> TypeGuard[_Reply]:
    """A request begun is already answered: its reply frame (or None: no reply), not the
    coroutine that answers it (checked by type: cheaper than an ABC's isinstance)."""
    return request is None or type(request) is bytes or type(request) is list


class Owner(Protocol):
    """What a connection tells the server it belongs to."""

    def connection_opened(self, conn: Connection) -> bool:
        """Count a new connection in; False refuses it (net.maxIncomingConnections reached)."""
        ...

    def connection_closed(self, conn: Connection) -> None: ...

    @property
    def open_connections(self) -> int:
        """Connections counted in and not closed yet."""
        ...

    @property
    def input_budget(self) -> InputBudget:
        """The bytes of received requests every connection shares."""
        ...

    def message_timeout(self) -> float:
        """Seconds a message may take to arrive whole, from its first byte."""
        ...


class Connection(asyncio.Protocol):
    """Every request runs inside a Task, so `asyncio.timeout()` and cancellation work in every
    handler. On Python 3.12+ a request starts at once as an eager task of its own, in
    data_received: one that never waits (a ping, a find_one answered from one chunk) is answered
    there and then; one that waits is handed to the connection's Task (`_runner`) to await, and
    later requests queue behind it. On 3.11 (no eager tasks) the connection's Task runs each
    request from its start, a turn of the loop later."""

    def __init__(self, dispatcher: Dispatcher, owner: Owner) -> None:
        self._dispatcher = dispatcher
        self._owner = owner
        self._stats = dispatcher.services.stats  # serverStatus' network counters
        self.client = Client(next(_CONNECTION_IDS))
        self.id = self.client.id
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._queue: collections.deque[bytes] = collections.deque()
        self._runner: asyncio.Task[None] | None = None
        self._context = contextvars.Context()
        #: A request for the connection's Task: one to start, or (3.12+) its eager task.
        self._handoff: asyncio.Future[_Request | asyncio.Task[_Reply]] | None = None
        self._write_paused = False
        #: The slices of a large reply still to write (server/raw_reply.py); no other reply is
        #: sent, and no request starts, until it is all written.
        self._outgoing: Iterator[bytes] | None = None
        self._read_paused = False  # too many requests queued
        self._budget_blocked = False  # waiting for the input budget
        self._reading_stopped = False  # the transport's reading is paused (for either)
        self._queued_bytes = 0
        self._running_bytes = 0  # the request that runs: its frame is held until it answers
        self._reserved = 0  # bytes reserved from the input budget
        self._message_timer: asyncio.TimerHandle | None = None
        self._stopping = False  # close() was called: the server stops
        #: Why the connection closes once the requests before it are answered (broken framing,
        #: or the client's end of the stream: ""); None while it goes on.
        self._broken: str | None = None
        self.closed = asyncio.Event()
        #: Set while no request runs (cleared before one starts; shutdown waits on it).
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def peer(self) -> str:
        return self.client.peer

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client.peer = peer_text(transport.get_extra_info("peername"))
        if not self._owner.connection_opened(self):
            # As mongod: the connection is accepted, then closed at once, and nothing is read.
            count = self._owner.open_connections
            log_event(
                log,
                logging.INFO,
                CONNECTION_REFUSED_ID,
                "Connection refused because there are too many open connections",
                {"remote": self.client.peer, "connectionCount": count},
                ctx="listener",
                text=f"connection refused from {self.peer}: too many open connections ({count})",
            )
            transport.abort()  # type: ignore[attr-defined]  # a stream transport
            return
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        loop = asyncio.get_running_loop()
        self._handoff = loop.create_future()
        # The Task runs in a context of its own, and so does each request's eager task (see
        # _pump): every step of a request sees the same context variables (the operation's
        # interruption token).
        self._context = contextvars.copy_context()
        self._runner = loop.create_task(self._run(), context=self._context)
        count = self._owner.open_connections
        log_event(
            log,
            logging.INFO,
            CONNECTION_ACCEPTED_ID,
            "Connection accepted",
            {"remote": self.peer, "connectionId": self.id, "connectionCount": count},
            ctx="listener",
            text=f"[conn{self.id}] connection accepted from {self.peer} "
            f"({count} {'connection' if count == 1 else 'connections'} now open)",
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if self._runner is None:  # refused in connection_made: never counted in
            self.closed.set()
            return
        # As mongod, which reads and runs each message before it reads the end of the stream:
        # the requests received whole still run, in order, to completion (unacknowledged writes
        # sent just before a close are applied), and their replies are dropped. That includes
        # a long read whose client has gone: mongod interrupts such a read when it next checks
        # that its client is there, but this layer does not know which requests only read (the
        # dispatcher does), and a write with a reply (w:1) must run as a w:0 one does; a read is
        # bounded by its maxTimeMS, and killOp and shutdown stop it. A partial message is dropped.
        self._transport = None
        self._outgoing = None
        self._write_paused = False  # nothing is written any more: nothing holds the queue back
        self._decoder.clear()
        self._stop_message_timer()
        if self._stopping:  # the server's shutdown closed it: what it has queued does not run
            self._end()
            return
        if self._reserved:
            self._account()  # the partial message's announced length goes back
        self._pump()
        if self._idle.is_set():  # nothing to run (or it ran at once): the connection ends now
            self._end()
        # Otherwise the connection's Task ends it once the queue is drained.

    def _end(self) -> None:
        """The connection is over and its requests have run (or shutdown stopped them): count it
        out, give its input budget back, set `closed` and log the end."""
        runner = self._runner
        if runner is None or self.closed.is_set():
            return
        self._queue.clear()
        self._queued_bytes = self._running_bytes = 0
        reserved, self._reserved = self._reserved, 0
        self._owner.input_budget.give_back(reserved)  # also lets a queued wait of ours go
        if runner is not asyncio.current_task():
            runner.cancel()  # it waits for a request that will not come (or shutdown stops it)
        self._idle.set()
        self._owner.connection_closed(self)
        self.closed.set()
        count = self._owner.open_connections
        who = ""
        metadata = self.client.metadata
        if metadata:
            driver = metadata.get("driver")
            if isinstance(driver, dict):
                who = f"{driver.get('name', '?')} {driver.get('version', '?')}"
            app = app_name(metadata)
            if app:
                who = f"{who}, appName {app!r}" if who else f"appName {app!r}"
        log_event(
            log,
            logging.INFO,
            CONNECTION_ENDED_ID,
            "Connection ended",
            {"remote": self.peer, "connectionId": self.id, "connectionCount": count},
            ctx=f"conn{self.id}",
            text=f"[conn{self.id}] end connection {self.peer}"
            + (f" ({who})" if who else "")
            + f" ({count} {'connection' if count == 1 else 'connections'} now open)",
        )

    def data_received(self, data: bytes) -> None:
        self._stats.bytes_in += len(data)
        if self._broken is not None:
            return  # read after the break (a last chunk the transport had): not looked at
        broken = None
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            # As mongod, which reads a message, answers it, then reads the next: the messages
            # that came whole before the broken one are answered, then the connection closes.
            frames, broken = exc.frames, f"bad frame: {exc}"
            self._decoder.clear()
        if frames:
            self._queue.extend(frames)
            self._queued_bytes += sum(map(len, frames))
            if len(self._queue) > _MAX_QUEUED and not self._read_paused:
                self._read_paused = True
                self._update_reading()
        if self._reserved or self._held_bytes() > _FREE_INPUT:
            self._account()
        if broken is not None:
            self._stop_message_timer()
            self._break(broken)
        elif self._decoder.pending:
            if frames:  # a message came whole: the clock starts again for the next one
                self._stop_message_timer()
            self._start_message_timer()
        elif self._message_timer is not None:
            self._stop_message_timer()
        self._pump()

    # -- input limits ----------------------------------------------------------------------------

    def _account(self) -> None:
        """Hold a reservation from the input budget for the requests queued and the message
        being received (its announced length), or give back what is no longer needed. When the
        budget cannot cover a larger one, reading stops until it can."""
        want = self._held_bytes()
        if want <= _FREE_INPUT:
            want = 0
        budget = self._owner.input_budget
        if want <= self._reserved:
            extra, self._reserved = self._reserved - want, want
            budget.give_back(extra)
        elif not self._budget_blocked:
            if budget.take(want - self._reserved):
                self._reserved = want
            else:
                self._budget_blocked = True
                self._update_reading()
                budget.wait(self._budget_freed)

    def _held_bytes(self) -> int:
        return self._queued_bytes + self._running_bytes + self._decoder.incomplete_length

    def _request_done(self) -> None:
        """No request runs any more: its frame's bytes go back to the budget."""
        self._running_bytes = 0
        if self._reserved:
            self._account()

    def _budget_freed(self) -> bool:
        """The input budget's call when bytes come back: True once this connection has its
        reservation (or is gone), False to stay first in line."""
        if self._transport is None:
            self._budget_blocked = False
            return True
        want = self._held_bytes()
        extra = want - self._reserved
        if extra > 0:
            if not self._owner.input_budget.first_in_line(extra):
                return False
            self._reserved = want
        self._budget_blocked = False
        self._update_reading()
        return True

    def _update_reading(self) -> None:
        """Pause the transport's reading while requests pile up or the budget is short; resume
        it when neither holds."""
        stop = self._read_paused or self._budget_blocked or self._broken is not None
        if stop == self._reading_stopped or self._transport is None:
            return
        self._reading_stopped = stop
        if stop:
            self._transport.pause_reading()
            self._stop_message_timer()  # time we do not read is not the client's
        else:
            self._transport.resume_reading()
            if self._decoder.pending:
                self._start_message_timer()

    def _start_message_timer(self) -> None:
        if self._message_timer is None and not self._reading_stopped:
            timeout = self._owner.message_timeout()
            loop = asyncio.get_running_loop()
            self._message_timer = loop.call_later(timeout, self._message_timed_out, timeout)

    def _stop_message_timer(self) -> None:
        if self._message_timer is not None:
            self._message_timer.cancel()
            self._message_timer = None

    def _message_timed_out(self, timeout: float) -> None:
        self._message_timer = None
        self.abort(
            f"{self._decoder.pending} bytes of a {self._decoder.incomplete_length}-byte message "
            f"arrived in {timeout:g} s (incomingMessageTimeoutSecs), not all of it"
        )

    def eof_received(self) -> bool | None:
        if self._decoder.pending:
            log.warning(
                "[conn%d] client closed with %d bytes of an incomplete message",
                self.id,
                self._decoder.pending,
            )
        tls = self._transport is not None and self._transport.get_extra_info("ssl_object")
        if not tls and (self._queue or not self._idle.is_set() or self._outgoing is not None):
            # The client shut its side of the stream only (or closed it): the requests it sent
            # whole are answered, then the connection closes (a closed client resets the writes).
            self._decoder.clear()
            self._stop_message_timer()
            self._break("")
            return True
        return None

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._outgoing is not None:
            self._write_out()
        self._pump()

    @property
    def _writing_blocked(self) -> bool:
        """The client is not reading our replies fast enough, or a large reply is still going out."""
        return self._write_paused or self._outgoing is not None

    # -- requests --------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Start queued requests in order until one has to wait (the connection's Task then
        finishes it and serves the rest), the client stops reading our replies, or the queue is
        empty."""
        runner, handoff = self._runner, self._handoff
        if not self._idle.is_set() or runner is None or runner.done():
            return  # a request runs (the Task serves the queue after it), or the Task is gone
        if handoff is None or handoff.done():
            return  # the Task has a request it has not taken yet
        loop = asyncio.get_running_loop()
        while self._queue and not self._writing_blocked:
            self._idle.clear()
            try:
                begun = self._next_request()
            except ProtocolError as exc:
                self._break(f"bad message: {exc}", drop_queued=True)
                break
            except Exception as exc:
                self._failed(exc)
                break
            if _answered(begun):
                # Answered at once (the express path, server/express.py): no task at all.
                self._send(begun)
                self._running_bytes = 0
                continue
            request = cast(_Request, begun)
            if not _EAGER_TASKS or asyncio.current_task(loop) is not None:
                # Without eager tasks (3.11), or called from inside some task (not a transport
                # callback): the connection's Task starts the request on its next step.
                handoff.set_result(request)
                return
            # An eager task runs its first step now, so that a request that never waits is
            # answered without waiting for another turn of the loop.
            task = _eager_task(request, loop, self._context)
            if not task.done():
                handoff.set_result(task)
                return
            try:
                self._send(task.result())
            except ProtocolError as exc:
                self._break(f"bad message: {exc}", drop_queued=True)
                break
            except CloseConnection:
                self.abort("the failCommand fail point closes it")
                break
            except asyncio.CancelledError:
                self.abort("request cancelled")
                break
            except Exception as exc:
                self._failed(exc)
                break
        self._idle.set()
        self._request_done()
        self._resume_reading()
        self._close_if_broken()

    def _next_request(self) -> _Reply | _Request:
        """The next queued request begun: its reply when answered at once, else the coroutine
        that answers it. Raises ProtocolError for a frame that cannot be parsed."""
        frame = self._queue.popleft()
        self._stats.requests += 1
        self._queued_bytes -= len(frame)
        self._running_bytes = len(frame)
        if self._reserved:
            self._account()
        return self._dispatcher.start(self.client, frame)

    async def _run(self) -> None:
        """The connection's Task: it finishes each request that had to wait, then serves the
        requests that queued meanwhile, and waits for the next one handed over."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                handoff = self._handoff
                assert handoff is not None
                try:
                    work = await handoff
                except asyncio.CancelledError:
                    if handoff.done() and not handoff.cancelled():
                        # The server stops as a request was handed over: it is cancelled too,
                        # and its own clean-up awaited.
                        work = handoff.result()
                        if isinstance(work, asyncio.Task):
                            work.cancel()
                            await asyncio.wait((work,))
                        else:
                            work.close()
                    raise
                self._handoff = loop.create_future()
                try:
                    self._send(await work)
                    while self._queue and not self._writing_blocked:
                        begun = self._next_request()
                        self._send(begun if _answered(begun) else await cast(_Request, begun))
                except ProtocolError as exc:
                    self._break(f"bad message: {exc}", drop_queued=True)
                except CloseConnection:
                    self.abort("the failCommand fail point closes it")
                except asyncio.CancelledError:
                    if not self._stopping:  # not the server's shutdown: a bug
                        self.abort("request cancelled")
                    raise
                except Exception as exc:
                    self._failed(exc)
                self._idle.set()
                self._request_done()
                self._resume_reading()
                self._close_if_broken()
                if self._transport is None:
                    return  # the connection ended and the requests it left have run
        finally:
            self._idle.set()
            if self._transport is None:
                self._end()

    def _break(self, reason: str, drop_queued: bool = False) -> None:
        """Read no more from this client (`reason` says why: broken framing, a message that does
        not parse, or "" for the end of its stream) and close once the requests before the break
        are answered; `drop_queued`: those queued after a broken message are not run."""
        if self._broken is None:
            self._broken = reason
        if drop_queued:
            self._queue.clear()
            self._queued_bytes = 0
        self._update_reading()
        self._close_if_broken()

    def _close_if_broken(self) -> None:
        """Close a broken connection gracefully (what is written still goes out) once no request
        is queued or running and no large reply is still being written."""
        reason = self._broken
        if reason is None or self._transport is None or self._transport.is_closing():
            return
        if self._queue or not self._idle.is_set() or self._outgoing is not None:
            return
        if reason:
            log.warning("[conn%d] closing connection from %s: %s", self.id, self.peer, reason)
        self._transport.close()

    def _resume_reading(self) -> None:
        if self._read_paused and len(self._queue) <= _MAX_QUEUED // 2:
            self._read_paused = False
            self._update_reading()

    def _send(self, reply: bytes | list[bytes] | None) -> None:
        if reply is None or self._transport is None:
            return
        if isinstance(reply, bytes):
            self._stats.bytes_out += len(reply)
            self._transport.write(reply)
            return
        self._stats.bytes_out += sum(map(len, reply))
        # A large reply, in parts: written a slice at a time as the socket takes them.
        self._outgoing = slices(reply)
        self._write_out()

    def _write_out(self) -> None:
        """Write slices of the large reply until the transport asks us to pause (resume_writing
        calls back) or TURN_BYTES went out in this turn of the loop (the rest goes on the next
        turn, after other connections had theirs)."""
        outgoing = self._outgoing
        written = 0
        while outgoing is not None and not self._write_paused and self._transport is not None:
            piece = next(outgoing, None)
            if piece is None:
                self._outgoing = None
                self._pump()  # the requests that queued behind the reply
                self._close_if_broken()
                return
            self._transport.write(piece)
            written += len(piece)
            if written >= TURN_BYTES:
                asyncio.get_running_loop().call_soon(self._write_more)
                return
        if self._transport is None:
            self._outgoing = None

    def _write_more(self) -> None:
        if self._outgoing is not None and not self._write_paused:
            self._write_out()

    def _failed(self, exc: BaseException) -> None:
        """A request raised past the dispatcher (which turns handler errors into replies): a bug."""
        log.error("[conn%d] request failed outside the dispatcher", self.id, exc_info=exc)
        self.abort("internal error")

    def abort(self, reason: str) -> None:
        """Drop this connection (framing is lost, so nothing more can be read from it) and the
        requests it has queued, also those an ended connection has left to run."""
        if self._transport is None and not self._queue:
            return
        log.warning("[conn%d] closing connection from %s: %s", self.id, self.peer, reason)
        self._queue.clear()
        self._queued_bytes = 0
        self._outgoing = None  # the rest of a large reply: nobody will read it
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """The server's shutdown: close gracefully (pending replies are flushed first). The
        requests still queued when it ends do not run, nor do those left by a connection its
        client ended (their Task is cancelled)."""
        self._stopping = True
        if self._transport is None:
            if self._runner is not None and not self.closed.is_set():
                self._runner.cancel()
        else:
            if self._outgoing is not None:  # the rest of a large reply, in the transport's buffer
                for piece in self._outgoing:
                    self._transport.write(piece)
                self._outgoing = None
            self._transport.close()

    async def wait_idle(self) -> None:
        """Return once no request of this connection runs (those queued run first)."""
        await self._idle.wait()

    @property
    def busy(self) -> bool:
        """A request of this connection is running."""
        return not self._idle.is_set()
