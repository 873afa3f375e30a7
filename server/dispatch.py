"""The dispatcher: one frame in, one reply frame out. It does every command's common work once:
decode, merge document sequences, find the handler, check `$db`, extract parameters, call, and turn
any exception into an error reply."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import bson

from ebbdb.protocol import Msg, Query, Reply, decode_message, encode_msg, encode_reply, msg_prefix
from ebbdb.server import read_concern, view_guard, write_concern
from ebbdb.server.arguments import DocSequence, extract, extract_lenient
from ebbdb.server.context import Client, CommandContext, Services
from ebbdb.server.errors import CommandError, ErrorCode, error_reply
from ebbdb.server.failpoints import Action, CloseConnection, SpinIgnoringInterrupts
from ebbdb.server.large_messages import (
    LARGE_BODY,
    LARGE_FRAME,
    LargeReply,
    decode_body,
    defer_full_collections,
    encode_large,
    parse_frame,
)
from ebbdb.server.log import debug_level, log_event
from ebbdb.server.operations import Operation, parse_max_time_ms
from ebbdb.server.profiler import MAX_LOGGED_COMMAND, Finished, app_name, loggable_command
from ebbdb.server.raw_reply import encode_parts, small_body
from ebbdb.server.registry import REGISTRY, Registry
from ebbdb.server.sessions import CURRENT_SESSION, label_reply, txn_fields
from ebbdb.server.transactions import Statement, in_transaction, refuse_transaction_fields
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.interrupt import Interrupted
from ebbdb.storage.core.interrupt import current as current_op
from ebbdb.storage.core.limits import check_bson_depth, check_sequence_depth, may_nest_too_deep
from ebbdb.storage.core.values import type_name

if TYPE_CHECKING:
    from ebbdb.server.express import Express, Route

log = logging.getLogger("ebbdb.command")
network_log = logging.getLogger("ebbdb.network")

#: mongod's lines: a command that failed (at debug level 1), and a driver's handshake metadata.
COMMAND_FAILED_ID = 24069
CLIENT_METADATA_ID = 51800
_D1 = debug_level(1)

_REQUEST_IDS = itertools.count(1)
#: The commands a legacy OP_QUERY may carry: the first handshake of drivers that predate OP_MSG.
_OP_QUERY_COMMANDS = frozenset({"hello", "isMaster", "ismaster"})
_RESULT_FLAG_QUERY_FAILURE = 2


#: A reply frame: whole, in parts (server/raw_reply.py), or None (the client asked for none).
_Frame = bytes | list[bytes] | None

#: The commands the express path may take (server/express.py, loaded with the first of them).
_EXPRESS_COMMANDS = frozenset({"find", "insert", "update", "delete", "findAndModify", "getMore"})

#: Handler contexts a client keeps (see Dispatcher.run).
_MAX_CONTEXTS = 64


class Dispatcher:
    """Runs commands for clients: `handle_frame` for a request frame, `run` for a command
    document. It needs no socket: a test drives it with a Client and documents."""

    def __init__(self, services: Services, registry: Registry = REGISTRY) -> None:
        self.services = services
        self.registry = registry
        self._profiler = services.profiler
        self._operations = services.operations
        #: The access check (server/auth/check.py), loaded only by a server run with --auth.
        self._authorize: Callable[..., Awaitable[None]] | None = None
        if services.config.auth:
            from ebbdb.server.auth.check import authorize

            self._authorize = authorize
        #: The express path (server/express.py): requests it routes skip `run`'s general work.
        #: Loaded (on a worker thread, as a command module is) by the first command it may
        #: take, which the general path runs: start-up imports none of what it needs.
        self.express: Express | None = None

    async def handle_frame(self, client: Client, frame: bytes) -> bytes | list[bytes] | None:
        """The reply frame for one request frame (a large one as the list of its parts, see
        server/raw_reply.py), or None when the client asked for no reply. Raises ProtocolError for
        a frame that cannot be parsed (the connection must be dropped)."""
        work = self.start(client, frame)
        if isinstance(work, Coroutine):
            return await work
        return work

    def start(self, client: Client, frame: bytes) -> _Frame | Coroutine[Any, Any, _Frame]:
        """handle_frame's work, begun now: the reply frame itself when the express path answered
        at once (server/express.py: a request that never waits), else the coroutine that
        answers. Raises ProtocolError for a frame that cannot be parsed."""
        if len(frame) >= LARGE_FRAME:
            return self._handle_large(client, frame)
        msg = decode_message(frame)
        if isinstance(msg, Query):
            return self._handle_query(client, msg)
        # OP_MSG, every request but a legacy driver's first.
        try:
            body = bson.decode(msg.body, CODEC)
        except Exception as exc:  # bson raises several types for corrupt input
            return self._reply(msg, _invalid_body(client, msg, exc))
        refused = _merge_sequences(msg, body)
        if refused is not None:
            return self._reply(msg, refused)
        express = self.express
        route = None if express is None else express.route(body)
        if route is None:
            return self._handle_msg(client, msg, body, None)
        if route.now is not None:
            reply = self._run_now(client, body, route, len(msg.body))
            if reply is not None:
                return self._frame(msg, reply)
        return self._handle_msg(client, msg, body, route)

    async def _reply(self, msg: Msg, reply: dict[str, Any]) -> _Frame:
        return self._frame(msg, reply)

    async def _handle_large(self, client: Client, frame: bytes) -> _Frame:
        """A frame of LARGE_FRAME bytes or more (server/large_messages.py): parsed, and its body
        decoded, off the loop a pass at a time; no full garbage collection starts meanwhile
        (its hundreds of thousands of values would be walked, every thread waiting); always
        the general path."""
        defer_full_collections(True)
        try:
            gateway = self.services.gateway
            msg = await parse_frame(gateway, frame)
            if isinstance(msg, Query):
                return await self._handle_query(client, msg)
            size: int | None = len(msg.body)
            try:
                if len(msg.body) >= LARGE_BODY:
                    body, size = await decode_body(gateway, msg.body)
                else:
                    body = bson.decode(msg.body, CODEC)
            except Exception as exc:  # bson raises several types for corrupt input
                return self._frame(msg, _invalid_body(client, msg, exc))
            refused = _merge_sequences(msg, body)
            if refused is not None:
                return self._frame(msg, refused)
            reply = await self.run(client, body, msg.request_id, size)
            if type(reply) is LargeReply:
                return await self._large_frame(msg, reply)
            return self._frame(msg, reply)
        finally:
            defer_full_collections(False)

    async def _large_frame(self, msg: Msg, reply: dict[str, Any]) -> _Frame:
        """The reply frame to `msg` for a LargeReply, encoded a pass at a time."""
        if msg.more_to_come:
            return None
        parts = await encode_large(reply)
        return [msg_prefix(next(_REQUEST_IDS), msg.request_id, sum(map(len, parts))), *parts]

    async def _handle_msg(
        self, client: Client, msg: Msg, body: dict[str, Any], route: Route | None
    ) -> _Frame:
        # A coroutine of its own only where it must wait: each awaited layer costs.
        reply: dict[str, Any] | bytes
        if route is None:
            reply = await self.run(client, body, msg.request_id, len(msg.body))
        else:
            reply = await self.run_express(client, body, route, msg.request_id, len(msg.body))
        if type(reply) is LargeReply:  # many writeErrors or cursor ids (server/large_messages.py)
            return await self._large_frame(msg, reply)
        return self._frame(msg, reply)

    def _frame(self, msg: Msg, reply: dict[str, Any] | bytes) -> _Frame:
        """The reply frame to `msg` (None: the client asked for none); `reply` is the reply
        document, or (the express path's) its BSON."""
        if msg.more_to_come:
            return None
        if isinstance(reply, bytes):
            return msg_prefix(next(_REQUEST_IDS), msg.request_id, len(reply)) + reply
        body = small_body(reply)
        if body is not None:
            return msg_prefix(next(_REQUEST_IDS), msg.request_id, len(body)) + body
        parts = encode_parts(reply, CODEC)
        if parts is not None:
            size = sum(map(len, parts))
            return [msg_prefix(next(_REQUEST_IDS), msg.request_id, size), *parts]
        return encode_msg(next(_REQUEST_IDS), msg.request_id, self._encode(reply))

    async def _handle_query(self, client: Client, query: Query) -> bytes:
        try:
            doc = bson.decode(query.query, CODEC)
        except Exception as exc:
            log.warning("[conn%d] OP_QUERY body is not valid BSON: %s", client.id, exc)
            reply = error_reply(
                CommandError(ErrorCode.InvalidBSON, f"query is not valid BSON: {exc}")
            )
            return self._op_reply(query, reply, _RESULT_FLAG_QUERY_FAILURE)
        # Drivers wrap the command when they add a read preference: {$query: {...}, $readPreference}.
        if "$query" in doc and isinstance(doc["$query"], Mapping):
            doc = dict(doc["$query"])
        db, _, coll = query.full_collection_name.partition(".")
        name = next(iter(doc), "")
        if coll != "$cmd" or name not in _OP_QUERY_COMMANDS:
            what = name if coll == "$cmd" else f"find on {query.full_collection_name}"
            reply = error_reply(
                CommandError(
                    ErrorCode.UnsupportedOpQueryCommand,
                    f"Unsupported OP_QUERY command: {what}. The client driver may require an upgrade.",
                )
            )
            return self._op_reply(query, reply, _RESULT_FLAG_QUERY_FAILURE)
        doc["$db"] = db
        reply = await self.run(client, doc, query.request_id)
        return self._op_reply(query, reply, 0)

    def _op_reply(self, query: Query, reply: dict[str, Any], flags: int) -> bytes:
        if flags & _RESULT_FLAG_QUERY_FAILURE:
            reply = {"$err": reply.get("errmsg", ""), **reply}
        return encode_reply(
            Reply(next(_REQUEST_IDS), query.request_id, flags, 0, 0, (self._encode(reply),))
        )

    def _encode(self, reply: dict[str, Any]) -> bytes:
        try:
            return bson.encode(reply, codec_options=CODEC)
        except Exception as exc:
            log.error("reply could not be encoded", exc_info=exc)
            return bson.encode(error_reply(exc))

    async def run(
        self,
        client: Client,
        body: dict[str, Any],
        request_id: int = 0,
        size: int | None = None,
    ) -> dict[str, Any]:
        """Run one command document and return its reply document (never raises). A command
        slower than the profiler's threshold is handed to the profiler afterwards. `size` is the
        body's BSON length when known (a short body cannot nest too deep: not walked)."""
        name = next(iter(body), "")
        started = time.perf_counter_ns()
        statement: Statement | None = None
        checked_out: asyncio.Lock | None = None
        client.op_run = None
        peak = 0  # the operation's peak tracked memory, for the profiler
        op: Operation | None = None
        db: Any = body.get("$db")
        try:
            _check_depth(body, size)
            if self.registry.unloaded_module(name) is not None:
                # The first request naming a command imports its module (server/registry.py),
                # once per server: on a worker thread, as the event loop never waits on a disk
                # or a long computation, and not counted as the operation's time (its latency,
                # the slow-query log).
                await asyncio.to_thread(self.registry.lookup, name)
                started = time.perf_counter_ns()
            if self.express is None and name in _EXPRESS_COMMANDS:
                self.express = await asyncio.to_thread(self._load_express)
                started = time.perf_counter_ns()
            cmd = self.registry.lookup(name)
            if cmd is None or (cmd.test_only and not self.services.test_commands_enabled()):
                raise CommandError(ErrorCode.CommandNotFound, f"no such command: '{name}'")
            # Counted as mongod counts it (metrics.commands' total): every run of a known
            # command, whatever stops it later (its $db, arguments, authorization), so that
            # failed is never more than total.
            self.services.stats.count_command(cmd.name)
            if type(db) is not str:
                raise _bad_db(db)
            if cmd.admin_only and db != "admin":
                raise CommandError(
                    ErrorCode.Unauthorized, f"{name} may only be run against the admin database."
                )
            if self._authorize is not None:
                services = self.services
                await self._authorize(
                    services.users, services.gateway, client.auth, client.peer, cmd.name, db, body
                )
            if self.services.replica_set is None:
                refuse_transaction_fields(body)
            elif "txnNumber" in body:
                txn_fields(body)  # a retryable write's, or a transaction's, checked as mongod
            # The command's logical session (mongod checks the lsid of every command).
            lsid = body.get("lsid")
            client.session = (
                None if lsid is None else self.services.sessions.touch_for(client, lsid)
            )
            if client.session is not None and "txnNumber" in body:
                # A command of a session's transaction or retryable write has the session to
                # itself until it answers, as mongod checks a session out: two at once (a
                # driver's concurrent statements) would each see the other's state half-made.
                await client.session.lock.acquire()
                checked_out = client.session.lock
            if self.services.transactions is not None and in_transaction(body):
                statement = await self.services.transactions.enter(
                    client.session, cmd.name, db, body
                )
            limit = body.get("maxTimeMS")
            max_time_ms = 0 if limit is None else parse_max_time_ms(limit)
            action: Action | None = None
            if self.services.fail_command.active:
                action = self.services.fail_command.check(cmd.name, app_name(client.metadata))
                if action is not None:
                    await self._fail(action)
            refused = view_guard.guard(self.services.gateway.engine, cmd.name, db, body)
            params: Any = None
            if refused is None:
                params = (extract_lenient if cmd.lenient else extract)(cmd.params, name, body)
            replica_set = self.services.replica_set
            concern = write_concern.parse(
                name,
                body.get("writeConcern"),
                cmd.takes_write_concern(body),
                replica_set is not None,
            )
            read = None
            if replica_set is not None and "readConcern" in body and "autocommit" not in body:
                # (A transaction's statements follow the transaction's rules.)
                read = read_concern.parse(cmd.name, body["readConcern"])
            ctx = client.contexts.get((db, name))
            if ctx is None:
                ctx = self._context(client, db, name)
            # The operation currentOp shows and killOp, maxTimeMS and shutdown interrupt: its
            # token is the current one for every storage loop the handler drives.
            op = client.op = self._operations.start(client, db, cmd.name, body, max_time_ms)
            token = current_op.set(op)
            session_token = CURRENT_SESSION.set(client.session)
            try:
                if SpinIgnoringInterrupts.on:  # a test's fail point, as an operation (currentOp)
                    await SpinIgnoringInterrupts.run(cmd.name, self.services.gateway.read)
                if read is not None and replica_set is not None:
                    await replica_set.before_read(read, self.services.gateway)
                if refused is not None:
                    reply = refused  # a write command on a view: its write errors
                elif cmd.name == "hello" and client.metadata is None:
                    reply = await cmd.handler(ctx, params)
                    if client.metadata is not None:
                        _log_client_metadata(client)
                elif statement is not None:
                    # A statement of a multi-document transaction (server/transactions.py).
                    reply = await statement.run(lambda: cmd.handler(ctx, params))
                else:
                    reply = await cmd.handler(ctx, params)
            finally:
                CURRENT_SESSION.reset(session_token)
                current_op.reset(token)
                self._operations.finish(op)
                peak = op.peak_memory
                client.op = None
                self.services.stats.latency.record(cmd.name, db, body, started)
                if cmd.writes and db == "admin":
                    # A write to admin may have changed admin.system.users by hand.
                    self.services.users.invalidate()
            if replica_set is not None and (concern.journal or concern.unsatisfiable):
                # A replica set's: majority within wtimeout, and what one member cannot satisfy
                # answered after the write, as mongod does.
                failed = await replica_set.wait_for(concern, self.services.gateway)
                if failed is not None:
                    reply["writeConcernError"] = failed
            elif concern.journal:
                # j, fsync or majority: answer once a sync covers this write (shared with every
                # other waiter of that sync).
                await self.services.gateway.wait_durable()
            if read is not None and replica_set is not None:
                replica_set.after_read(read, reply)
            if action is not None:
                reply = action.finish(reply)
        except CloseConnection:
            if checked_out is not None:
                checked_out.release()
            raise
        except (Exception, Interrupted) as exc:
            if op is not None:
                op.release_memory()  # a failed operation keeps no cursor: nothing it held is held
            reply = self._failed(client, request_id, name, db, body, exc)
        except BaseException:  # cancelled (the connection closed): the session goes back
            if checked_out is not None:
                checked_out.release()
            raise
        else:
            if "ok" not in reply:
                reply["ok"] = 1.0
        if statement is not None and not reply.get("ok"):
            statement.failed(reply)  # the transaction's rules for a failed statement
        if checked_out is not None:
            checked_out.release()
        if self.services.replica_set is not None:
            self.services.replica_set.stamp(reply, name)
            # RetryableWriteError and topologyVersion, for a driver's retry
            label_reply(reply, body, self.services.replica_set.topology_version)
        self._after(client, name, db, body, reply, started, peak)
        return reply

    def _load_express(self) -> Express:
        from ebbdb.server.express import Express

        return Express(self.services, self._authorize is not None)

    def _run_now(
        self, client: Client, body: dict[str, Any], route: Route, size: int
    ) -> dict[str, Any] | bytes | None:
        """An express request answered at once, without waiting (`route.now`), with the common
        work of `run_express` around it; None, having done nothing, when it cannot be answered
        at once (its write would wait for the writer) or a check the general path words fails."""
        started = time.perf_counter_ns()
        name, db = route.name, route.db
        assert route.now is not None
        try:
            _check_depth(body, size)
            lsid = body.get("lsid")
            session = None if lsid is None else self.services.sessions.touch_for(client, lsid)
        except (Exception, Interrupted):
            return None  # the general path words the failure
        ctx = client.contexts.get((db, name))
        if ctx is None:
            ctx = self._context(client, db, name)
        client.op_run = None
        client.session = session
        try:
            reply = route.now(ctx)
        except (Exception, Interrupted) as exc:
            self.services.stats.count_command(name)  # a run, as the general path counts it
            reply = self._failed(client, 0, name, db, body, exc)
        else:
            if reply is None:
                return None
            # What the general path does around a command that does not wait, in effect:
            # counted, an operation (its id taken), its latency, the slow-operation log.
            self.services.stats.count_command(name)
        self._operations.ran()
        self.services.stats.latency.record(name, db, body, started)
        self._after(client, name, db, body, reply, started)
        return reply

    async def run_express(
        self, client: Client, body: dict[str, Any], route: Route, request_id: int, size: int
    ) -> dict[str, Any] | bytes:
        """`run` for a request the express path routed: the common work its checks left (the
        nesting depth, the session, the counters, the operation currentOp and killOp see, the
        latency, the slow-operation log), then its handler. Never raises."""
        name, db = route.name, route.db
        started = time.perf_counter_ns()
        client.op_run = None
        try:
            _check_depth(body, size)
            self.services.stats.count_command(name)  # where the general path counts it
            lsid = body.get("lsid")
            client.session = (
                None if lsid is None else self.services.sessions.touch_for(client, lsid)
            )
            ctx = client.contexts.get((db, name))
            if ctx is None:
                ctx = self._context(client, db, name)
            op = client.op = self._operations.start(client, db, name, body)
            token = current_op.set(op)
            session_token = CURRENT_SESSION.set(client.session)
            try:
                reply = await route.answer(ctx)
            finally:
                CURRENT_SESSION.reset(session_token)
                current_op.reset(token)
                self._operations.finish(op)
                client.op = None
                self.services.stats.latency.record(name, db, body, started)
        except (Exception, Interrupted) as exc:
            reply = self._failed(client, request_id, name, db, body, exc)
        self._after(client, name, db, body, reply, started)
        return reply

    def _failed(
        self,
        client: Client,
        request_id: int,
        name: str,
        db: Any,
        body: dict[str, Any],
        exc: BaseException,
    ) -> dict[str, Any]:
        """The reply to a command that raised `exc` (an unexpected error is logged whole)."""
        if not isinstance(exc, CommandError) and getattr(exc, "code_name", None) is None:
            log.error(
                "[conn%d] request %d: %s raised an unexpected error",
                client.id,
                request_id,
                name,
                exc_info=exc,
            )
        reply = error_reply(exc)
        self.services.stats.count_failure(name, reply.get("code"))
        _log_failure(client, name, db, body, reply)
        return reply

    def _after(
        self,
        client: Client,
        name: str,
        db: Any,
        body: dict[str, Any],
        reply: dict[str, Any] | bytes,
        started: int,
        peak: int = 0,
    ) -> None:
        """Hand a command slower than the profiler's threshold to the profiler (`reply` the
        reply document or its BSON; `peak` the most memory its operation held, tracked)."""
        self.services.stats.count_reply(reply, client.op_run, body, client.session)
        seconds = (time.perf_counter_ns() - started) / 1e9
        # (An awaitable hello waits by design: not a slow operation, as mongod does not log it.)
        awaited_hello = name in _OP_QUERY_COMMANDS and "maxAwaitTimeMS" in body
        if seconds > self._profiler.threshold and not awaited_hello:
            if type(reply) is bytes:
                reply = bson.decode(reply, CODEC)
            assert not isinstance(reply, bytes)
            self._profiler.finished(
                Finished(
                    db if type(db) is str else "",
                    name,
                    body,
                    reply,
                    seconds,
                    client.peer,
                    client.metadata,
                    client.op_run,
                    f"conn{client.id}",
                    peak,
                )
            )

    async def _fail(self, action: Action) -> None:
        """What the failCommand fail point does before a command it matched runs: wait, then
        close the connection or fail the command (or let it run, for a write concern error)."""
        if action.block_ms:
            await asyncio.sleep(action.block_ms / 1000)
        if action.close_connection:
            raise CloseConnection("closeConnection fail point")
        if action.error_code is not None:
            raise action.error()

    def _context(self, client: Client, db: str, command: str) -> CommandContext:
        """The context a handler of `command` on `db` gets for `client`, kept for its next request
        (a client naming ever new databases only empties its table now and then)."""
        if len(client.contexts) >= _MAX_CONTEXTS:
            client.contexts.clear()
        ctx = CommandContext.of(self.services, client, db, command)
        client.contexts[db, command] = ctx
        return ctx


def _invalid_body(client: Client, msg: Msg, exc: Exception) -> dict[str, Any]:
    """The reply to a request whose body is not valid BSON (logged)."""
    log.warning("[conn%d] request %d: body is not valid BSON: %s", client.id, msg.request_id, exc)
    return error_reply(
        CommandError(ErrorCode.InvalidBSON, f"command body is not valid BSON: {exc}")
    )


def _bad_db(db: Any) -> CommandError:
    """mongod's refusal of a missing `$db` (40571), or of one that is not a string (13111, as
    its BSONElement::chk words it, with the BSON type numbers; Code is not a string here
    though pymongo's Code is a str subclass)."""
    if db is None:
        return CommandError(ErrorCode.Location40571, "OP_MSG requests require a $db argument")
    from ebbdb.storage.query.compare import BSON_TYPE_CODES  # (start-up loads no query language)

    found = BSON_TYPE_CODES.get(type_name(db), 0)
    return CommandError(ErrorCode.Location13111, f"wrong type for field ($db) {found} != 2")


def _merge_sequences(msg: Msg, body: dict[str, Any]) -> dict[str, Any] | None:
    """Merge the document sequences into the body; the error reply for a field given both
    ways, else None."""
    for ident, docs in msg.sequences:
        if ident in body:
            return error_reply(
                CommandError(
                    ErrorCode.InvalidOptions,
                    f"'{ident}' is given both in the command and as a document sequence",
                )
            )
        body[ident] = DocSequence(docs)
    return None


def _check_depth(body: dict[str, Any], size: int | None) -> None:
    """15 Overflow for a message nested past 200 levels, as mongod refuses one: the body (unless
    its BSON, `size` bytes, is too short to), and the statements of its document sequences
    (inserted documents are checked as they are prepared, against the lower limit for
    storage)."""
    if size is None or may_nest_too_deep(size):
        check_bson_depth(body)
    for ident, value in body.items():
        if type(value) is DocSequence and ident != "documents":
            check_sequence_depth(value)


def _log_failure(
    client: Client, name: str, db: Any, body: Mapping[str, Any], reply: Mapping[str, Any]
) -> None:
    """mongod's "Assertion while executing command", at debug level 1 (seen with -v)."""
    if not log.isEnabledFor(_D1):
        return
    error = f"{reply.get('codeName')}: {reply.get('errmsg')}"
    log_event(
        log,
        _D1,
        COMMAND_FAILED_ID,
        "Assertion while executing command",
        {
            "command": name,
            "db": db if type(db) is str else "",
            "body": loggable_command(body, MAX_LOGGED_COMMAND),
            "error": error,
        },
        ctx=f"conn{client.id}",
        text=f"[conn{client.id}] Assertion while executing command '{name}' on database "
        f"'{db}': {error}",
    )


def _log_client_metadata(client: Client) -> None:
    """mongod's "client metadata" line, once per connection: the driver, its version and the
    application name from the first hello's `client` document."""
    doc = client.metadata or {}
    driver = doc.get("driver")
    driver_text = ""
    if isinstance(driver, Mapping):
        driver_text = f"{driver.get('name', '?')} {driver.get('version', '?')}"
    app = app_name(doc)
    ctx = f"conn{client.id}"
    log_event(
        network_log,
        logging.INFO,
        CLIENT_METADATA_ID,
        "client metadata",
        {"remote": client.peer, "client": ctx, "negotiatedCompressors": [], "doc": doc},
        ctx=ctx,
        text=f"[{ctx}] client metadata from {client.peer}: driver {driver_text or 'unknown'}"
        + (f", appName {app!r}" if app else ""),
    )


__all__ = ["Dispatcher"]
