"""Reading and writing documents: insert, find, getMore, killCursors."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import Any

from bson import Int64

from server.commands.handshake import WRITE_BATCH
from server.context import CommandContext
from server.cursors import DEFAULT_FIRST_BATCH, fill_batch
from server.errors import CommandError, ErrorCode, write_error
from server.params import (
    COMMAND_VALUE,
    TERSE_MISMATCH,
    Kind,
    NonNegative,
    RefusedUnlessDefault,
    arg,
)
from server.registry import REGISTRY
from storage.catalog import CollectionInfo, validate_collection_name
from storage.execute import QueryRun, QuerySpec
from storage.query.expressions import command_variables

#: An insert this small is a bounded write (see Gateway.write_small).
SMALL_INSERT_DOCS = 16
SMALL_BYTES = 256 * 1024


@dataclass(frozen=True)
class InsertParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    documents: tuple[bytes, ...] = arg("documents", Kind.RAW_DOCS, required=True, check=WRITE_BATCH)
    ordered: bool = arg("ordered", Kind.BOOL, True)


@REGISTRY.command("insert", params=InsertParams, writes=True)
async def insert(ctx: CommandContext, p: InsertParams) -> dict[str, Any]:
    """Insert documents; per-document failures are reported in writeErrors."""
    gateway = ctx.app.gateway
    small = len(p.documents) <= SMALL_INSERT_DOCS and sum(map(len, p.documents)) <= SMALL_BYTES
    result = await (gateway.write_small if small else gateway.write_now)(
        ctx.app.engine.insert, ctx.db, p.collection, p.documents, p.ordered
    )
    ctx.app.stats.count_documents("insert", result.inserted)
    reply: dict[str, Any] = {"n": result.inserted}
    if result.errors:
        reply["writeErrors"] = [write_error(i, exc) for i, exc in result.errors]
    reply["ok"] = 1.0
    return reply


#: The find options ebbdb does not implement, accepted only with their default value.
_FIND_UNSUPPORTED = RefusedUnlessDefault("find option '{field}' is not supported")
_BATCH_SIZE = NonNegative("BatchSize value must be non-negative, but received: {value}")


@dataclass(frozen=True)
class FindParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    filter: dict[str, Any] | None = arg("filter", Kind.DOC)
    projection: dict[str, Any] | None = arg("projection", Kind.DOC)
    sort: dict[str, Any] | None = arg("sort", Kind.DOC)
    limit: int = arg("limit", Kind.INT, 0)
    single_batch: bool = arg("singleBatch", Kind.BOOL, False)
    no_cursor_timeout: bool = arg("noCursorTimeout", Kind.BOOL, False)
    hint: Any = arg("hint", Kind.STRING_OR_DOC)
    allow_disk_use: bool = arg("allowDiskUse", Kind.BOOL, True)
    let: dict[str, Any] | None = arg("let", Kind.DOC)
    allow_partial_results: bool = arg("allowPartialResults", Kind.BOOL, False)
    # Checked in this order, the one a find with several of these faults is answered by.
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)
    tailable: bool = arg("tailable", Kind.BOOL, False, check=_FIND_UNSUPPORTED)
    await_data: bool = arg("awaitData", Kind.BOOL, False, check=_FIND_UNSUPPORTED)
    return_key: bool = arg("returnKey", Kind.BOOL, False, check=_FIND_UNSUPPORTED)
    show_record_id: bool = arg("showRecordId", Kind.BOOL, False, check=_FIND_UNSUPPORTED)
    min: dict[str, Any] | None = arg("min", Kind.DOC, check=_FIND_UNSUPPORTED)
    max: dict[str, Any] | None = arg("max", Kind.DOC, check=_FIND_UNSUPPORTED)
    batch_size: int | None = arg("batchSize", Kind.INT, check=_BATCH_SIZE)
    skip: int = arg(
        "skip",
        Kind.INT,
        0,
        check=NonNegative("Skip value must be non-negative, but received: {value}"),
    )


class RawDoc:
    """Stored BSON that goes out unchanged. pymongo's encoder copies the bytes of any object whose
    `_type_marker` is RawBSONDocument's (101); this class skips RawBSONDocument's own validation,
    which the stored bytes passed on the way in."""

    __slots__ = ("raw",)
    _type_marker = 101

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


#: BSON element headers of an array's items: type 3 (document) and the decimal index as name.
_ITEM_HEADS = [b"\x03%d\x00" % i for i in range(1024)]
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")


def _item_heads(n: int) -> list[bytes]:
    while len(_ITEM_HEADS) < n:
        _ITEM_HEADS.extend(b"\x03%d\x00" % i for i in range(len(_ITEM_HEADS), 2 * len(_ITEM_HEADS)))
    return _ITEM_HEADS


def cursor_reply(ns: str, cid: int, batch_field: str, docs: list[bytes]) -> dict[str, Any]:
    """A cursor reply whose batch is the stored BSON, copied once into the reply (the batch's
    array is laid out here, not encoded document by document): the cursor document is
    {<batch_field>: [docs], id: <cid as a long>, ns: <ns>}."""
    if len(docs) == 1:
        body = b"\x030\x00" + docs[0]  # a find_one's batch
    else:
        body = b"".join(itertools.chain.from_iterable(zip(_item_heads(len(docs)), docs)))
    nsb = ns.encode()
    cursor = b"".join(
        (
            b"\x04",  # the batch: an array
            batch_field.encode(),
            b"\x00",
            _INT32.pack(len(body) + 5),
            body,
            b"\x00\x12id\x00",  # the id: an int64
            _INT64.pack(cid),
            b"\x02ns\x00",  # the namespace: a string
            _INT32.pack(len(nsb) + 1),
            nsb,
            b"\x00",
        )
    )
    return {"cursor": RawDoc(_INT32.pack(len(cursor) + 5) + cursor + b"\x00"), "ok": 1.0}


@dataclass(frozen=True)
class PreparedFind:
    ns: str
    coll: CollectionInfo | None
    spec: QuerySpec
    single_batch: bool
    limit: int
    now_ms: int  # the command's time: $$NOW, and what the first batch hides as expired


def prepare_find(ctx: CommandContext, p: FindParams) -> PreparedFind:
    """Validate a find and parse its filter, projection, sort and hint (shared with explain)."""
    validate_collection_name(ctx.db, p.collection)
    limit = abs(p.limit)
    now = ctx.app.clock.now_ms()
    variables = command_variables(p.let, now)
    spec = QuerySpec.parse(p.filter, p.projection, p.sort, p.skip, limit, p.hint, variables)
    coll = ctx.app.engine.collection(ctx.db, p.collection)
    return PreparedFind(ctx.ns(p.collection), coll, spec, p.single_batch or p.limit < 0, limit, now)


@REGISTRY.command("find", params=FindParams)
async def find(ctx: CommandContext, p: FindParams) -> dict[str, Any]:
    """Query a collection; returns the first batch and a cursor id for the rest."""
    q = prepare_find(ctx, p)
    ns, coll, spec, single_batch, limit = q.ns, q.coll, q.spec, q.single_batch, q.limit
    if coll is None:
        return cursor_reply(ns, 0, "firstBatch", [])
    run = QueryRun(coll, spec)
    first = p.batch_size if p.batch_size is not None else DEFAULT_FIRST_BATCH
    if single_batch and p.batch_size is None:
        first = limit or DEFAULT_FIRST_BATCH
    docs = await fill_batch(ctx.app.engine, run, first, q.now_ms) if first else []
    cid = 0
    if not run.exhausted and not single_batch:
        cid = ctx.app.cursors.open(ns, run, p.no_cursor_timeout).id
    return cursor_reply(ns, cid, "firstBatch", docs)


@dataclass(frozen=True)
class GetMoreParams:
    cursor_id: Int64 = arg(COMMAND_VALUE, Kind.CURSOR_ID, required=True, mismatch=TERSE_MISMATCH)
    collection: str = arg("collection", Kind.STRING, required=True)
    batch_size: int | None = arg("batchSize", Kind.INT, check=_BATCH_SIZE)
    max_time_ms: int | None = arg("maxTimeMS", Kind.INT)


@REGISTRY.command("getMore", params=GetMoreParams)
async def get_more(ctx: CommandContext, p: GetMoreParams) -> dict[str, Any]:
    """The next batch of an open cursor."""
    ns = ctx.ns(p.collection)
    cursor = ctx.app.cursors.get(int(p.cursor_id))
    if cursor is None:
        raise CommandError(ErrorCode.CursorNotFound, f"cursor id {int(p.cursor_id)} not found")
    if cursor.ns != ns:
        raise CommandError(
            ErrorCode.Unauthorized,
            f"Requested getMore on namespace '{ns}', but cursor belongs to a different namespace "
            f"{cursor.ns}",
        )
    if cursor.in_use:
        raise CommandError(
            ErrorCode.CursorInUse, f"Cursor already in use (namespace: '{ns}', id: {cursor.id})."
        )
    cursor.in_use = True
    try:
        docs = await fill_batch(
            ctx.app.engine, cursor.run, p.batch_size or None, ctx.app.clock.now_ms()
        )
    except BaseException:
        ctx.app.cursors.close(cursor.id)  # as MongoDB: a failed getMore ends its cursor
        raise
    finally:
        cursor.in_use = False
    if cursor.killed:
        raise CommandError(ErrorCode.CursorKilled, f"cursor id {cursor.id} was killed")
    cid = cursor.id
    if cursor.run.exhausted:
        ctx.app.cursors.close(cid)
        cid = 0
    return cursor_reply(ns, cid, "nextBatch", docs)


@dataclass(frozen=True)
class KillCursorsParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    cursors: list[Int64] = arg("cursors", Kind.CURSOR_IDS, required=True)


@REGISTRY.command("killCursors", params=KillCursorsParams)
async def kill_cursors(ctx: CommandContext, p: KillCursorsParams) -> dict[str, Any]:
    """Close cursors by id."""
    killed: list[Int64] = []
    not_found: list[Int64] = []
    for cid in p.cursors:
        (killed if ctx.app.cursors.close(int(cid)) else not_found).append(cid)
    return {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": [],
        "cursorsUnknown": [],
        "ok": 1.0,
    }
