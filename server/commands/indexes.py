"""Indexes: createIndexes (a bulk build over a collection's documents runs as mongod's do: its
collection scan off the event loop and the writer, its keys appended in bounded write jobs, its
progress logged and shown by currentOp), listIndexes, dropIndexes."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server.arguments import COMMAND_VALUE, TERSE_MISMATCH, Kind, arg
from ebbdb.server.commands import collection_kinds
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.gateway import Gateway
from ebbdb.server.log import log_event
from ebbdb.server.operations import Operation
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.catalog.info import validate_collection_name
from ebbdb.storage.core import interrupt
from ebbdb.storage.engine.ddl import BuildSuperseded, CreateIndexesResult
from ebbdb.storage.engine.index_build import INSERTING, IndexBuild
from ebbdb.storage.engine.writer import TRANSACTION
from ebbdb.storage.indexes.specs import parse_index_spec

log = logging.getLogger("ebbdb.index")
#: mongod's log ids for an index build's lines.
STARTING_ID, PROGRESS_ID, SCAN_DONE_ID, KEYS_INSERTED_ID, DONE_ID, FAILED_ID = (
    20384,
    51773,
    20391,
    20685,
    20663,
    20649,
)
#: A progress meter logs at most this often (mongod's ProgressMeter), and at a phase's end.
PROGRESS_SECONDS = 3.0


class HangBeforeCommit:
    """mongod's `hangIndexBuildBeforeCommit` fail point (tests, with enableTestCommands=1): while
    on, a bulk build waits with its keys in, before its last step, as currentOp shows it."""

    NAME = "hangIndexBuildBeforeCommit"
    on = False
    hits = 0

    @classmethod
    def configure(cls, mode: Any) -> dict[str, Any]:
        """mode "alwaysOn" or "off" (mongod's); replies with the times it held a build."""
        if mode not in ("alwaysOn", "off"):
            raise CommandError(ErrorCode.BadValue, f"{cls.NAME} takes mode alwaysOn or off")
        count, cls.on = cls.hits, mode == "alwaysOn"
        return {"count": count, "ok": 1.0}

    @classmethod
    async def wait(cls) -> None:
        if cls.on:
            cls.hits += 1
        token = interrupt.current.get()
        while cls.on:  # a test's fail point: a poll keeps it free of any one event loop
            token.check()
            await asyncio.sleep(0.01)


@dataclass(frozen=True)
class CreateIndexesParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    indexes: tuple[dict[str, Any], ...] = arg("indexes", Kind.DOCS, required=True)
    commit_quorum: Any = arg("commitQuorum", Kind.ANY)


@REGISTRY.command("createIndexes", params=CreateIndexesParams, writes=True)
async def create_indexes(ctx: CommandContext, p: CreateIndexesParams) -> dict[str, Any]:
    """Create indexes, building them over the existing documents."""
    validate_collection_name(ctx.db, p.collection)
    if not p.indexes:
        raise CommandError(ErrorCode.BadValue, "Must specify at least one index to create")
    specs = [parse_index_spec(doc) for doc in p.indexes]
    ns = ctx.ns(p.collection)
    meter = Meter(ns, interrupt.current.get())
    in_transaction = TRANSACTION.get() is not None
    begin = ctx.gateway.engine.index_builds.begin
    while True:
        outcome = await ctx.gateway.write(
            begin, ctx.db, p.collection, specs, meter.progress, in_transaction
        )
        if not isinstance(outcome, IndexBuild):
            result = outcome
            break
        try:
            result = await run_build(ctx.gateway, outcome, meter)
            break
        except BuildSuperseded:
            continue  # from the start, after what changed the collection (undone already)
    reply: dict[str, Any] = {
        "numIndexesBefore": result.before,
        "numIndexesAfter": result.after,
    }
    if result.note is not None:
        reply["note"] = result.note
    else:
        reply["createdCollectionAutomatically"] = result.created_collection
    reply["ok"] = 1.0
    return reply


class Meter:
    """An index build's progress: mongod's "progress meter" log lines (at most every
    PROGRESS_SECONDS, and when a phase ends) and what currentOp shows of the operation. Told
    from any thread."""

    def __init__(self, ns: str, op: interrupt.OpToken) -> None:
        self.ns = ns
        self._op = op if isinstance(op, Operation) else None
        self._logged: dict[str, float] = {}

    def progress(self, phase: str, done: int, total: int) -> None:
        if self._op is not None:
            self._op.progress = (phase, done, total)
        now = time.monotonic()
        last = self._logged.setdefault(phase, now)
        if done and (done >= total or now - last >= PROGRESS_SECONDS):
            self._logged[phase] = now
            percent = done * 100 // total if total else 100
            log_event(
                log,
                logging.INFO,
                PROGRESS_ID,
                "progress meter",
                {"name": phase, "done": done, "total": total, "percent": percent},
                ctx="IndexBuildsCoordinatorMongod-0",
                text=f"{phase}: {done}/{total} {percent}%",
            )

    def done(self) -> None:
        if self._op is not None:
            self._op.progress = None


async def run_build(gateway: Gateway, build: IndexBuild, meter: Meter) -> CreateIndexesResult:
    """A bulk build begun by the engine: the collection scan on a thread of its own, the keys
    in bounded write jobs (other writes go between), the last job publishing the index. A
    failure (a duplicate key, a kill, maxTimeMS) undoes what it wrote."""
    ns = meter.ns
    uuid = build.coll.uuid
    names = [ix.name for ix in build.indexes]
    log_event(
        log,
        logging.INFO,
        STARTING_ID,
        "Index build: starting",
        {"namespace": ns, "collectionUUID": uuid, "indexes": names, "method": "Hybrid"},
        ctx="IndexBuildsCoordinatorMongod-0",
        text=f"Index build: starting on {ns}: {', '.join(names)}",
    )
    try:
        await asyncio.to_thread(build.scan)
        log_event(
            log,
            logging.INFO,
            SCAN_DONE_ID,
            "Index build: collection scan done",
            {
                "namespace": ns,
                "collectionUUID": uuid,
                "totalRecords": build.scanned,
                "readSource": "kNoTimestamp",
                "durationMillis": int(build.scan_seconds * 1000),
            },
            ctx="IndexBuildsCoordinatorMongod-0",
        )
        meter.progress(INSERTING, 0, build.keys_total)
        while not await gateway.write(build.write_step):
            pass
        await HangBeforeCommit.wait()
        result = await gateway.write(build.finish)
    except BaseException as exc:
        meter.done()
        # Undone even though the operation was killed (its token would refuse the job).
        reset = interrupt.current.set(interrupt.NEVER)
        try:
            await asyncio.shield(gateway.write(build.abort))
        finally:
            interrupt.current.reset(reset)
        log_event(
            log,
            logging.INFO,
            FAILED_ID,
            "Index build: failed",
            {"namespace": ns, "collectionUUID": uuid, "error": str(exc)},
            ctx="IndexBuildsCoordinatorMongod-0",
        )
        raise
    meter.done()
    for ix in build.indexes:
        log_event(
            log,
            logging.INFO,
            KEYS_INSERTED_ID,
            "Index build: inserted keys from external sorter into index",
            {
                "namespace": ns,
                "index": ix.name,
                "keysInserted": build.keys_inserted_for(ix.id),
                "durationMillis": int(build.insert_seconds * 1000),
            },
            ctx="IndexBuildsCoordinatorMongod-0",
        )
    log_event(
        log,
        logging.INFO,
        DONE_ID,
        "Index build: completed successfully",
        {
            "namespace": ns,
            "collectionUUID": uuid,
            "indexesBuilt": names,
            "numIndexesBefore": result.before,
            "numIndexesAfter": result.after,
        },
        ctx="IndexBuildsCoordinatorMongod-0",
    )
    return result


@dataclass(frozen=True)
class ListIndexesParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    cursor: dict[str, Any] | None = arg("cursor", Kind.DOC)


@REGISTRY.command("listIndexes", params=ListIndexesParams)
async def list_indexes(ctx: CommandContext, p: ListIndexesParams) -> dict[str, Any]:
    """The indexes of a collection, as a cursor."""
    validate_collection_name(ctx.db, p.collection)
    info = ctx.collection(p.collection)
    if info is None:
        raise CommandError(
            ErrorCode.NamespaceNotFound, f"ns does not exist: {ctx.ns(p.collection)}"
        )
    return {
        "cursor": {
            "id": Int64(0),
            "ns": ctx.ns(p.collection),
            "firstBatch": collection_kinds.index_specs(info),
        },
        "ok": 1.0,
    }


@dataclass(frozen=True)
class DropIndexesParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    index: str | dict[str, Any] | list[str] = arg(
        "index", Kind.STRING_OR_DOC_OR_STRINGS, required=True, mismatch=TERSE_MISMATCH
    )


@REGISTRY.command("dropIndexes", "deleteIndexes", params=DropIndexesParams, writes=True)
async def drop_indexes(ctx: CommandContext, p: DropIndexesParams) -> dict[str, Any]:
    """Drop indexes by name, key pattern, a list of names, or "*" (all but _id_)."""
    validate_collection_name(ctx.db, p.collection)
    which = p.index
    was = await ctx.gateway.write(ctx.gateway.engine.drop_indexes, ctx.db, p.collection, which)
    return {"nIndexesWas": was, "ok": 1.0}
