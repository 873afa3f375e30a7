"""The express path (MongoDB 8.0's, for `_id` point operations): an insert of one document; find,
update, delete by `_id` equality alone; getMore of a plain cursor. It answers exactly as the
general path (server/dispatch.py's `run`, the handlers, the planner), which stays the definition.

`route` decides, cheaply and without a side effect, whether a decoded request may take it: only
the fields a driver sends for such a request, a plain collection (no default collation, not a view,
time series, clustered or capped), an `_id` value whose index equality is the query's, a
standalone server without auth, no fail point, no profiling, no transaction fields, no
maxTimeMS, no write concern. Anything else (and every doubt) returns None: the general path runs.
The dispatcher does the common work (`Dispatcher.run_express`, `_run_now`); a route's handler
does the rest, reusing the general path's storage helpers (storage/execution/point.py imports
storage/execution/writes.py's) and reply builders.
"""

from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import bson
from bson import Int64, ObjectId

from ebbdb.server.arguments import DocSequence
from ebbdb.server.commands.reads import next_batch
from ebbdb.server.commands.replies import first_batch_body
from ebbdb.server.commands.writes import find_and_modify_reply, insert_reply
from ebbdb.server.context import CommandContext, Services
from ebbdb.server.errors import write_error
from ebbdb.server.sessions import check_get_more
from ebbdb.storage.catalog.info import CollectionInfo, validate_collection_name
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import StorageError
from ebbdb.storage.execution import point
from ebbdb.storage.execution.execute import QueryRun
from ebbdb.storage.execution.writes import DeleteResult, UpdateResult
from ebbdb.storage.query.update import Update, parse_update

T = TypeVar("T")
#: A reply: the document, or its BSON (laid out from a template).
Reply = dict[str, Any] | bytes
Handler = Callable[[CommandContext], Awaitable[Reply]]
#: A route's answer at once, without waiting: the reply, or None having done nothing (its write
#: would wait for the writer: `handler` then answers).
Now = Callable[[CommandContext], Reply | None]

#: Fields every express request may carry besides its own: accepted and ignored by the general
#: path too (the session's `lsid` is touched by the dispatcher, as there).
_COMMON = frozenset({"$db", "lsid", "$clusterTime", "$readPreference"})
_FIND_FIELDS = _COMMON | {"find", "filter", "limit", "singleBatch"}
_INSERT_FIELDS = _COMMON | {"insert", "documents", "ordered", "bypassDocumentValidation"}
_UPDATE_FIELDS = _COMMON | {"update", "updates", "ordered", "bypassDocumentValidation"}
_DELETE_FIELDS = _COMMON | {"delete", "deletes", "ordered"}
_GET_MORE_FIELDS = _COMMON | {"getMore", "collection", "batchSize"}
_FIND_AND_MODIFY_FIELDS = _COMMON | {
    "findAndModify",
    "query",
    "update",
    "remove",
    "new",
    "bypassDocumentValidation",
}
_UPDATE_STATEMENT = frozenset({"q", "u", "upsert", "multi"})
_DELETE_STATEMENT = frozenset({"q", "limit"})
#: Collection options under which the general path answers otherwise (or may).
_SPECIAL = ("collation", "timeseries", "clusteredIndex", "capped")
_INTERNAL_DBS = frozenset({"admin", "local", "config"})
#: Types of `_id` values whose `_id` index key equality is the query's equality, as stored.
_POINT_TYPES = frozenset({ObjectId, str, int, Int64, datetime.datetime})
#: A longer string `_id` might not fit an index key whole (keys past LMDB's 511 bytes are
#: truncated and re-checked): 64 characters are 256 bytes of UTF-8 at most.
_MAX_STRING_ID = 64
#: An insert this large is not a small write (server/commands/writes.py's SMALL_BYTES).
_SMALL_INSERT_BYTES = 256 * 1024
#: Statements at most in an express update (MongoDB's maxWriteBatchSize).
_MAX_STATEMENTS = 100_000


class Route:
    """A request the express path takes: its command's canonical name, its database, the handler
    that answers it (given the command's context) and, for one that may be answered without
    waiting, `now` (Dispatcher.start tries it first, in the connection's turn; a route without
    a handler never waits: `now` is its handler). Made per request: a plain slotted class."""

    __slots__ = ("db", "handler", "name", "now")

    def __init__(self, name: str, db: str, handler: Handler | None, now: Now | None = None) -> None:
        self.name = name
        self.db = db
        self.handler = handler
        self.now = now

    async def answer(self, ctx: CommandContext) -> Reply:
        """The reply, by the handler (or `now`, which then answers without waiting)."""
        if self.handler is not None:
            return await self.handler(ctx)
        assert self.now is not None
        reply = self.now(ctx)
        assert reply is not None
        return reply


def _done(outcome: tuple[bool, Any]) -> Any:
    """The value of a write job run at once (Gateway.try_now), or what it raised."""
    ok, value = outcome
    if not ok:
        raise value
    return value


def _point(value: Any) -> bool:
    """An `_id` value the express path may look up by its index key."""
    kind = type(value)
    if kind not in _POINT_TYPES and kind is not float:
        return False
    if kind is str:
        return len(value) <= _MAX_STRING_ID
    if kind is float:
        return math.isfinite(value)
    return True


def _id_of(q: Any) -> tuple[bool, Any]:
    """(True, value) for a filter that is `{_id: value}` with a point value."""
    if type(q) is not dict or len(q) != 1:
        return False, None
    value = q.get("_id", q)
    if value is q or not _point(value):
        return False, None
    return True, value


class Express:
    """Decides, per request, whether the express path takes it, and answers it there. Counts the
    requests it answered by command in ServerStats.express (serverStatus' `ebbdb.expressPath`,
    what the differential test reads to know the path was taken)."""

    def __init__(self, services: Services, authorizing: bool) -> None:
        self._services = services
        self._engine = services.gateway.engine
        self._authorizing = authorizing
        self._taken = services.stats.express

    def route(self, body: dict[str, Any]) -> Route | None:
        """The route of a decoded request (its document sequences merged), or None: the general
        path runs it. No side effect."""
        services = self._services
        if (
            self._authorizing
            or services.replica_set is not None
            or services.fail_command.active
            or services.operations.closing is not None
            or services.profiler.threshold < 0
            or not services.parameters.get("ebbdbExpressPath")
        ):
            return None
        name = next(iter(body), "")
        db = body.get("$db")
        if type(db) is not str or db in _INTERNAL_DBS:
            return None
        if name == "find":
            return self._find(body, db)
        if name == "insert":
            return self._insert(body, db)
        if name == "update":
            return self._update(body, db)
        if name == "delete":
            return self._delete(body, db)
        if name == "getMore":
            return self._get_more(body, db)
        if name == "findAndModify":
            return self._find_and_modify(body, db)
        return None

    def _plain(self, db: str, name: Any) -> CollectionInfo | None:
        """The catalog entry of a plain collection `name` of `db` (None: anything else)."""
        if type(name) is not str or name.startswith("system."):
            return None
        try:
            validate_collection_name(db, name)
        except StorageError:
            return None
        coll = self._engine.collection(db, name)
        if coll is None:
            return None
        options = coll.options
        if options and any(key in options for key in _SPECIAL):
            return None
        # (Every collection but a clustered one, refused above, has an `_id` index.)
        if coll.id_index.collation is not None:
            return None
        return coll

    def _took(self, name: str) -> None:
        self._taken[name] = self._taken.get(name, 0) + 1

    # -- find ------------------------------------------------------------------------------------

    def _find(self, body: dict[str, Any], db: str) -> Route | None:
        if not _FIND_FIELDS.issuperset(body):
            return None
        ok, value = _id_of(body.get("filter"))
        limit = body.get("limit", 0)
        single = body.get("singleBatch", False)
        if not ok or type(limit) is not int or type(single) is not bool:
            return None
        coll = self._plain(db, body["find"])
        if coll is None:
            return None
        # Without batchSize the first batch has room for the one document there can be, and
        # the general path's run ends (exhausted) with it: no cursor whatever the limit.

        def find(ctx: CommandContext) -> Reply:
            raw = point.read(self._engine, coll, value, ctx.now())
            self._took("find")
            ctx.stats.count_point_read(raw is not None)
            return first_batch_body(coll.ns, raw)

        return Route("find", db, None, find)

    # -- insert ----------------------------------------------------------------------------------

    def _insert(self, body: dict[str, Any], db: str) -> Route | None:
        if not _INSERT_FIELDS.issuperset(body):
            return None
        docs = body.get("documents")
        ordered = body.get("ordered", True)
        bypass = body.get("bypassDocumentValidation", False)
        if (
            type(docs) is not DocSequence
            or len(docs) != 1
            or len(docs[0]) > _SMALL_INSERT_BYTES
            or type(ordered) is not bool
            or type(bypass) is not bool
        ):
            return None
        coll = self._plain(db, body["insert"])
        if coll is None:
            return None
        documents = (bytes(docs[0]),)

        write = functools.partial(
            self._engine.insert, db, coll.name, documents, ordered, bypass=bypass
        )
        return self._write_route("insert", db, write, insert_reply)

    # -- update ----------------------------------------------------------------------------------

    def _update(self, body: dict[str, Any], db: str) -> Route | None:
        if not _UPDATE_FIELDS.issuperset(body):
            return None
        statements: Any = body.get("updates")
        ordered = body.get("ordered", True)
        bypass = body.get("bypassDocumentValidation", False)
        if (
            type(statements) not in (DocSequence, list)
            or not statements
            or len(statements) > _MAX_STATEMENTS
            or type(ordered) is not bool
            or type(bypass) is not bool
        ):
            return None
        coll = self._plain(db, body["update"])
        if coll is None:
            return None
        changes: list[tuple[Any, dict[str, Any]]] = []
        for s in statements:
            change = _update_statement(s)
            if change is None:
                return None
            changes.append(change)
        small = len(changes) <= 16

        write = functools.partial(
            point.update, self._engine, coll, changes, bypass=bypass, ordered=ordered
        )
        return self._write_route("update", db, write, _update_reply, small)

    # -- delete ----------------------------------------------------------------------------------

    def _delete(self, body: dict[str, Any], db: str) -> Route | None:
        if not _DELETE_FIELDS.issuperset(body):
            return None
        statements: Any = body.get("deletes")
        ordered = body.get("ordered", True)
        if type(statements) not in (DocSequence, list) or len(statements) != 1:
            return None
        s = statements[0]
        if type(s) is bytes:
            s = bson.decode(s, CODEC)
        if type(ordered) is not bool or type(s) is not dict or not _DELETE_STATEMENT.issuperset(s):
            return None
        ok, value = _id_of(s.get("q"))
        if not ok or s.get("limit") not in (0, 1) or type(s.get("limit")) is not int:
            return None
        coll = self._plain(db, body["delete"])
        if coll is None:
            return None

        write = functools.partial(point.delete, self._engine, coll, value)
        return self._write_route("delete", db, write, _delete_reply)

    # -- findAndModify --------------------------------------------------------------------------

    def _find_and_modify(self, body: dict[str, Any], db: str) -> Route | None:
        if not _FIND_AND_MODIFY_FIELDS.issuperset(body):
            return None
        ok, value = _id_of(body.get("query"))
        remove = body.get("remove", False)
        new = body.get("new", False)
        bypass = body.get("bypassDocumentValidation", False)
        if not ok or type(remove) is not bool or type(new) is not bool or type(bypass) is not bool:
            return None
        change: Update | None = None
        if remove:
            if new or "update" in body:
                return None  # refused: the general path words it
        else:
            u = _operators(body.get("update"))
            if u is None:
                return None
            try:
                change = parse_update(u)
            except StorageError:
                return None
        coll = self._plain(db, body["findAndModify"])
        if coll is None:
            return None
        write = functools.partial(
            point.find_and_modify, self._engine, coll, value, change, new, bypass=bypass
        )
        return self._write_route(
            "findAndModify", db, write, lambda _ctx, result: find_and_modify_reply(result, remove)
        )

    # -- getMore ---------------------------------------------------------------------------------

    def _get_more(self, body: dict[str, Any], db: str) -> Route | None:
        if not _GET_MORE_FIELDS.issuperset(body):
            return None
        cid = body["getMore"]
        name = body.get("collection")
        batch_size = body.get("batchSize")
        if type(cid) is not Int64 or type(name) is not str:
            return None
        if batch_size is not None and (type(batch_size) is not int or batch_size < 0):
            return None
        cursor = self._services.cursors.peek(int(cid))
        if (
            cursor is None
            or cursor.ns != f"{db}.{name}"
            or cursor.in_use
            or cursor.tail is not None
            or cursor.time_left is not None
            or cursor.txn_number is not None
            or type(cursor.run) is not QueryRun
            or cursor.run.offload
        ):
            return None

        async def get_more(ctx: CommandContext) -> dict[str, Any]:
            # server/commands/reads.py's get_more for a plain cursor, the checks before the
            # session's made above (a cursor it cannot find, of another namespace, in use or with
            # maxTimeMS goes there).
            ctx.cursors.get(cursor.id)  # marks it used now
            check_get_more(cursor.id, cursor.session, ctx.client.session)
            self._took("getMore")
            return await next_batch(ctx, cursor, batch_size or None, None)

        return Route("getMore", db, get_more)

    # -- the writes' common part -----------------------------------------------------------------

    def _write_route(
        self,
        name: str,
        db: str,
        write: Callable[..., T],
        replied: Callable[[CommandContext, T], dict[str, Any]],
        small: bool = True,
    ) -> Route:
        """The route of a write: `write(now_ms=...)` run at once when the writer is free (`now`),
        else as a small write (or, not `small`, sliced), then `replied`."""

        def answer(ctx: CommandContext, result: T) -> dict[str, Any]:
            self._took(name)
            return replied(ctx, result)

        def now(ctx: CommandContext) -> dict[str, Any] | None:
            gateway = ctx.gateway
            outcome = gateway.try_now(lambda: write(now_ms=gateway.clock_ms()))
            return None if outcome is None else answer(ctx, _done(outcome))

        async def handler(ctx: CommandContext) -> dict[str, Any]:
            gateway = ctx.gateway
            if small:
                return answer(ctx, await gateway.write_small(write))
            # Many statements: in slices, as the general path runs them (Gateway.write_sliced).
            return answer(ctx, await gateway.write_sliced(write))

        return Route(name, db, handler, now if small else None)


def _update_reply(ctx: CommandContext, results: list[UpdateResult]) -> dict[str, Any]:
    """An update's reply from its statements' results, as the general path's."""
    n = modified = 0
    errors = []
    for i, result in enumerate(results):
        n += result.matched
        modified += result.modified
        if result.error is not None:
            errors.append(write_error(i, result.error))
    ctx.stats.count_documents("update", modified)
    reply: dict[str, Any] = {"n": n, "nModified": modified}
    if errors:
        reply["writeErrors"] = errors
    reply["ok"] = 1.0
    return reply


def _delete_reply(ctx: CommandContext, result: DeleteResult) -> dict[str, Any]:
    ctx.stats.count_documents("delete", result.deleted)
    return {"n": result.deleted, "ok": 1.0}


def _operators(u: Any) -> dict[str, Any] | None:
    """An update document of operators without positional paths (a replacement, a pipeline or
    a positional update is the general path's)."""
    if type(u) is not dict or not u:
        return None
    for op, fields in u.items():
        if type(op) is not str or not op.startswith("$") or type(fields) is not dict:
            return None
        for path in fields:
            if "$" in path:
                return None
    return u


def _update_statement(s: Any) -> tuple[Any, dict[str, Any]] | None:
    """(`_id` value, update document) of an update statement the express path can run: a filter
    `{_id: value}`, an update document of operators (parsed in the write job, as the general
    path's) without positional paths, no upsert, no multi; None otherwise."""
    if type(s) is bytes:  # a document sequence's
        s = bson.decode(s, CODEC)
    if type(s) is not dict or not _UPDATE_STATEMENT.issuperset(s):
        return None
    if s.get("upsert", False) is not False or s.get("multi", False) is not False:
        return None
    ok, value = _id_of(s.get("q"))
    u = _operators(s.get("u"))
    if not ok or u is None:
        return None
    return value, u


__all__ = ["Express", "Route"]
