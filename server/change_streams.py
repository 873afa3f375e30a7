"""Change streams over the oplog: `aggregate` with `$changeStream` first opens one (on a
collection, a database, or the deployment), getMore reads the events committed since, waiting on
the event loop (never blocking it) for the next oplog commit up to maxAwaitTimeMS, and every
batch carries its postBatchResumeToken. The events themselves are made in
storage/aggregate/change_stream/; here are the reads, the look-ups (updateLookup, pre- and
post-images) and the stages after `$changeStream`."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import bson
from bson import Timestamp
from bson.raw_bson import RawBSONDocument

from ebbdb.server.context import CommandContext
from ebbdb.server.cursors import MAX_BATCH_BYTES, Cursor, PipelineRun, Tailing
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.storage.aggregate import EngineSource, parse_pipeline
from ebbdb.storage.aggregate.change_stream.events import Event, apply_diff, events_of
from ebbdb.storage.aggregate.change_stream.spec import (
    Scope,
    StreamSpec,
    check_after,
    legal,
    parse_spec,
)
from ebbdb.storage.aggregate.change_stream.tokens import (
    HIGH_WATER_MARK,
    Position,
    TokenData,
    high_water_mark,
    parse,
    ts_key,
)
from ebbdb.storage.aggregate.stage import Context, Read, Stage
from ebbdb.storage.core.documents import CODEC, MAX_DOCUMENT_SIZE
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import render, render_value
from ebbdb.storage.engine.oplog import OpLog
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution import views as storage_views
from ebbdb.storage.query.expressions import command_variables

#: How long a getMore waits for an event when the driver gives no maxAwaitTimeMS (mongod's 1 s).
DEFAULT_AWAIT_MS = 1000
#: Oplog entries read at a time (one short read transaction each).
_READ = 64
#: How long a batch works on the loop before it lets other clients in (seconds).
_SLICE = 0.001


def opens_stream(pipeline: list[Any]) -> bool:
    """Whether an aggregate's pipeline starts with $changeStream (the stream's hook)."""
    return bool(pipeline) and isinstance(pipeline[0], Mapping) and "$changeStream" in pipeline[0]


# -- waiting for commits ----------------------------------------------------------------------------


class CommitWatch:
    """Wakes getMores waiting for oplog entries: the oplog tells it (on the writer thread) after
    each commit that wrote entries; the waiters' futures resolve on the event loop."""

    def __init__(self, oplog: OpLog) -> None:
        self._waiters: set[asyncio.Future[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        oplog.on_commit(self._committed)

    @contextmanager
    def waiting(self) -> Iterator[asyncio.Future[None]]:
        """A future resolved by the next commit that writes oplog entries. Register it BEFORE
        the last look: an entry committed after the look wakes it, one before is seen by it."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.add(fut)
        try:
            yield fut
        finally:
            self._waiters.discard(fut)

    def _committed(self, last: Timestamp) -> None:
        loop = self._loop
        if loop is None or not self._waiters:
            return
        try:
            loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _wake(self) -> None:
        for fut in list(self._waiters):
            if not fut.done():
                fut.set_result(None)


_WATCHES: weakref.WeakKeyDictionary[Engine, CommitWatch] = weakref.WeakKeyDictionary()


def commit_watch(engine: Engine) -> CommitWatch:
    watch = _WATCHES.get(engine)
    if watch is None:
        watch = _WATCHES[engine] = CommitWatch(engine.oplog)
    return watch


# -- the stream -------------------------------------------------------------------------------------


def _before(ts: Timestamp) -> Timestamp:
    """The timestamp just before `ts` (reads after it include the entry at `ts`)."""
    key = ts_key(ts) - 1
    return Timestamp(max(key, 0) >> 32, max(key, 0) & 0xFFFFFFFF)


def _after_all_of(ts: Timestamp) -> Position:
    """The position after every event at `ts`."""
    return Position(ts_key(ts), 1 << 62, 1)


class ChangeStreamRun(PipelineRun):
    """A change stream's cursor state: the position of the last event it passed (events after
    it come next), the events of entries read but not yet returned, and the stages after
    $changeStream. `exhausted` once it returned an invalidate."""

    def __init__(
        self,
        engine: Engine,
        db: str,
        scope: Scope,
        spec: StreamSpec,
        stages: tuple[Stage, ...],
        after: Position,
        scan_ts: Timestamp,
        floor: Timestamp,
        resume: TokenData | None = None,
        resume_doc: Mapping[str, Any] | None = None,
        anchored: bool = False,
    ) -> None:
        super().__init__(iter(()), lambda now_ms: None, lambda *a: None)
        self.engine = engine
        self.db = db
        self.scope = scope
        self.spec = spec
        self.stages = stages
        self.after = after
        self.scan_ts = scan_ts
        #: `scan_ts` is an entry's time, read again with the next ones to know it is still
        #: there: when the oplog has rolled over it, the events since are lost (286).
        self.anchored = anchored
        self.pending: deque[Event] = deque()
        #: The token of the last event returned (or resumed after), and its time.
        self.last_token = None if resume_doc is None else dict(resume_doc)
        self.last_ts = None if resume is None else resume.cluster_time
        #: The event a resume token names, until the stream has seen it (mongod: 280 when an
        #: event after it comes first).
        self.resume = resume
        #: The stream's start: no high-water mark before it (a new stream starts just after the
        #: newest entry, as mongod's does).
        self.floor = floor

    def post_batch_token(self) -> dict[str, Any]:
        """postBatchResumeToken, as mongod computes it: the last event's token, unless the scan
        went past its time (then a high-water mark at the newest entry scanned: events at that
        time and after are still to come, and none of the entry scanned there is this stream's)."""
        if self.last_token is not None and self.last_ts is not None:
            if self.pending or self.exhausted or ts_key(self.scan_ts) <= ts_key(self.last_ts):
                return self.last_token
        if ts_key(self.scan_ts) < ts_key(self.floor):
            return high_water_mark(self.floor)
        return high_water_mark(self.scan_ts)

    def pull(self, max_docs: int, now_ms: int) -> tuple[list[bytes], bool]:
        """Up to `max_docs` events (as BSON) from what the oplog holds now; the flag says whether
        it stopped short of the oplog's end because its slice of the loop's time was up (call
        again, after letting other clients in)."""
        out: list[bytes] = []
        size = 0
        began = time.perf_counter()
        source = EngineSource(self.engine, self.db, now_ms)
        context = Context(source, command_variables(None, now_ms), None, None)
        while len(out) < max_docs and not self.exhausted:
            if time.perf_counter() - began > _SLICE:
                return out, True
            if not self.pending:
                entries = self._next_entries()
                if not entries:
                    break
                for ts, raw in entries:
                    entry = bson.decode(raw, CODEC)
                    for event in events_of(entry, self.scope, self.spec.show_expanded):
                        if event.position > self.after and self._past_resume_point(event):
                            self.pending.append(event)
                    self.scan_ts = ts
                continue
            event = self.pending[0]
            doc = self._complete(event, now_ms)
            for result in self._staged(doc, context):
                raw = bson.encode(result, codec_options=CODEC)
                if len(raw) > MAX_DOCUMENT_SIZE:  # mongod: an event must fit in one document
                    raise QueryError(
                        "BSONObjectTooLarge",
                        f"BSONObj size: {len(raw)} (0x{len(raw):X}) is invalid. Size must be "
                        f"between 0 and {MAX_DOCUMENT_SIZE}(16MB) First element: _id: "
                        + render(result.get("_id")),
                    )
                if out and size + len(raw) > MAX_BATCH_BYTES:
                    return out, False  # the event stays pending for the next batch
                out.append(raw)
                size += len(raw)
            self.pending.popleft()
            self.after = event.position
            self.last_token = event.doc["_id"]
            self.last_ts = event.position.ts
            if event.ends:
                self.exhausted = True
        return out, False

    def _next_entries(self) -> list[tuple[Timestamp, bytes]]:
        """The next oplog entries after `scan_ts`; 286 when the oplog no longer holds the
        entry at `scan_ts` (it rolled over entries this stream had not read yet)."""
        oplog = self.engine.oplog
        if not self.anchored:
            entries = oplog.read_after(self.scan_ts, _READ)
            self.anchored = bool(entries)
            return entries
        entries = oplog.read_after(_before(self.scan_ts), _READ + 1)
        if not entries or entries[0][0] != self.scan_ts:
            raise CommandError(
                ErrorCode.ChangeStreamHistoryLost,
                "Resume of change stream was not possible, as the resume point may no longer be "
                "in the oplog.",
                errorLabels=["NonResumableChangeStreamError"],
            )
        return entries[1:]

    def _past_resume_point(self, event: Event) -> bool:
        """Whether `event` is after the resumed token's event: the token's own event is passed
        over (once seen); any other event at or past its place, before it was seen, means the
        token names no event of this stream (280, naming that event, as mongod)."""
        token = self.resume
        if token is None:
            return True
        here = token.position
        if event.position < here:
            return False
        if event.position == here and parse(event.doc["_id"], "resumeAfter") == token:
            self.resume = None
            self.after = event.position
            return False
        raise fatal(
            "cannot resume stream; the resume token was not found. "
            + render_value(event.doc["_id"])
        )

    def _staged(self, doc: dict[str, Any], context: Context) -> list[dict[str, Any]]:
        docs: Iterator[dict[str, Any]] = iter((doc,))
        for stage in self.stages:
            docs = stage.run(docs, context)
        results = list(docs)
        for result in results:
            if result.get("_id") != doc["_id"]:
                raise fatal(
                    "Encountered an event whose _id field, which contains the resume token, was "
                    "modified by the pipeline. Modifying the _id field of an event makes it "
                    "impossible to resume the stream from that point. Only transformations that "
                    "retain the unmodified _id field are allowed.",
                )
        return results

    # -- look-ups ------------------------------------------------------------------------------

    def _complete(self, event: Event, now_ms: int) -> dict[str, Any]:
        """The event with what its stream asks to be looked up, in mongod's order: the pre-image
        (fullDocumentBeforeChange), then for an update the document now (updateLookup) or the
        post-image (whenAvailable, required: the pre-image with the update's diff applied)."""
        doc = dict(event.doc)
        spec = self.spec
        pre: dict[str, Any] | None = None
        looked = False
        if spec.before_change != "off" and event.op in ("update", "replace", "delete"):
            pre, looked = self._pre_image(event, now_ms), True
            if pre is None and spec.before_change == "required":
                raise _missing(
                    "a pre-image for all update, delete and replace events, but the pre-image",
                    doc,
                )
            doc["fullDocumentBeforeChange"] = pre
        if event.op == "update" and spec.full_document != "default":
            if spec.full_document == "updateLookup":
                post = self._lookup(event, now_ms)
            else:
                if not looked:
                    pre = self._pre_image(event, now_ms)
                post = apply_diff(pre, event.diff or {}) if pre is not None else None
                if post is None and spec.full_document == "required":
                    raise _missing("a post-image for all update events, but the post-image", doc)
            doc = _with_full_document(doc, post)
        return doc

    def _lookup(self, event: Event, now_ms: int) -> dict[str, Any] | None:
        if event.ns is None or event.document_key is None:
            return None
        db, coll = event.ns
        info = self.engine.collection(db, coll)
        if info is None or (event.ui is not None and info.uuid != event.ui):
            return None  # dropped, or another collection of that name since
        source = EngineSource(self.engine, db, now_ms)
        return next(iter(source.documents(coll, Read(filter=dict(event.document_key)))), None)

    def _pre_image(self, event: Event, now_ms: int) -> dict[str, Any] | None:
        if event.ui is None:
            return None
        key = {
            "nsUUID": event.ui,
            "ts": event.position.ts,
            "applyOpsIndex": bson.Int64(event.position.index),
        }
        source = EngineSource(self.engine, "config", now_ms)
        found = next(iter(source.documents("system.preimages", Read(filter={"_id": key}))), None)
        return None if found is None else dict(found["preImage"])

    async def fill(self, max_docs: int | None, now_ms: int) -> list[bytes]:
        want = max_docs if max_docs is not None else 1 << 31
        out: list[bytes] = []
        while True:
            docs, more = self.pull(want - len(out), now_ms)
            out += docs
            if not more or len(out) >= want:
                return out
            await asyncio.sleep(0)  # a long stretch of other namespaces' entries: let others in


def _with_full_document(doc: dict[str, Any], value: dict[str, Any] | None) -> dict[str, Any]:
    """An update event with its fullDocument where mongod's event keeps a place for it: after
    wallTime, before ns."""
    out: dict[str, Any] = {}
    for name, item in doc.items():
        if name == "ns":
            out["fullDocument"] = value
        out[name] = item
    return out


def _missing(what: str, doc: dict[str, Any]) -> QueryError:
    """47 NoMatchingDocument for a required image not found, naming the event as mongod does."""
    named = {k: doc[k] for k in ("operationType", "ns", "clusterTime", "txnNumber") if k in doc}
    return QueryError(
        "NoMatchingDocument",
        f"Change stream was configured to require {what} was not found for event: "
        + render_value(named),
    )


# -- opening ----------------------------------------------------------------------------------------


def fatal(message: str) -> CommandError:
    """A change stream's error that resuming cannot cure (mongod labels it so for drivers)."""
    return CommandError(
        ErrorCode.ChangeStreamFatalError, message, errorLabels=["NonResumableChangeStreamError"]
    )


@dataclass(frozen=True)
class _Start:
    after: Position
    scan_ts: Timestamp
    floor: Timestamp


def _start(engine: Engine, spec: StreamSpec, token: TokenData | None) -> _Start:
    """Where a new stream starts: the position events must come after, the oplog time to read
    after, and the time before which it gives no high-water mark. A resume point must still be
    in the oplog (286)."""
    oplog = engine.oplog
    if token is None and spec.start_at is None:
        # As mongod: one tick after the newest entry, so the stream does not return it.
        last = oplog.last_committed
        return _Start(_after_all_of(last), last, Timestamp(last.time, last.inc + 1))
    point = token.cluster_time if token is not None else spec.start_at
    assert point is not None
    first = oplog.first_ts()
    if first is None or point < first:
        raise CommandError(
            ErrorCode.ChangeStreamHistoryLost,
            "Resume of change stream was not possible, as the resume point may no longer be in "
            "the oplog.",
            errorLabels=["NonResumableChangeStreamError"],
        )
    # From a time (startAtOperationTime, a high-water mark): its events and those after; from an
    # event's token: that event, which the run checks and passes over, and those after.
    return _Start(Position(ts_key(point) - 1, 1 << 62, 1), _before(point), point)


async def open_stream(
    ctx: CommandContext,
    collection: str | None,
    pipeline: list[Any],
    first: int,
) -> dict[str, Any]:
    """aggregate with $changeStream first: the stream's cursor and its first batch of at most
    `first` events (what the oplog holds after the start point now; it never waits)."""
    if len(pipeline[0]) != 1:
        raise QueryError(
            "Location40323", "A pipeline stage specification object must contain exactly one field."
        )
    spec = parse_spec(pipeline[0]["$changeStream"])
    if ctx.replica_set is None:
        raise QueryError(
            "Location40573", "The $changeStream stage is only supported on replica sets"
        )
    scope, token = legal(ctx.db, collection, spec)
    if collection is not None and storage_views.lookup(ctx.gateway.engine, ctx.db, collection):
        raise CommandError(
            ErrorCode.CommandNotSupportedOnView,
            f"Namespace {ctx.ns(collection)} is a view, not a collection",
        )
    rest = list(pipeline[1:])
    check_after(rest)
    stages = parse_pipeline(rest).stages
    engine = ctx.gateway.engine
    commit_watch(engine)
    start = _start(engine, spec, token)
    event_token = token if token is not None and token.token_type != HIGH_WATER_MARK else None
    run = ChangeStreamRun(
        engine,
        ctx.db,
        scope,
        spec,
        stages,
        start.after,
        start.scan_ts,
        start.floor,
        event_token,
        spec.resume_after or spec.start_after if event_token is not None else None,
        anchored=token is None and spec.start_at is None,
    )
    docs = await run.fill(first, ctx.now()) if first else []
    ns = ctx.ns(collection if collection is not None else "$cmd.aggregate")
    cid = 0
    if not run.exhausted:
        cid = ctx.cursors.open(ns, run, tail=Tailing(await_data=True)).id
    return reply(ns, cid, "firstBatch", docs, run.post_batch_token())


def reply(
    ns: str, cid: int, batch_field: str, docs: list[bytes], token: dict[str, Any]
) -> dict[str, Any]:
    """A change stream's cursor reply: the batch, then postBatchResumeToken, id and ns."""
    return {
        "cursor": {
            batch_field: [RawBSONDocument(raw) for raw in docs],
            "postBatchResumeToken": token,
            "id": bson.Int64(cid),
            "ns": ns,
        },
        "ok": 1.0,
    }


# -- getMore ----------------------------------------------------------------------------------------


async def get_more(
    ctx: CommandContext, cursor: Cursor, batch_size: int | None, max_time_ms: int | None
) -> dict[str, Any]:
    """The next batch of a change stream: the events committed since the last one; with none,
    wait (on the loop) for the next oplog commit, until maxTimeMS (the driver's maxAwaitTimeMS;
    1 s without) is up, then answer an empty batch with a high-water mark."""
    run = cursor.run
    assert isinstance(run, ChangeStreamRun)
    cursor.in_use = True
    ctx.client.op_run = run
    watch = commit_watch(run.engine)
    try:
        docs = await run.fill(batch_size, ctx.now())
        if not docs and not run.exhausted:
            loop = asyncio.get_running_loop()
            wait_ms = DEFAULT_AWAIT_MS if max_time_ms is None else max_time_ms
            deadline = loop.time() + wait_ms / 1000
            while not cursor.killed:
                with watch.waiting() as committed:
                    docs = await run.fill(batch_size, ctx.now())
                    left = deadline - loop.time()
                    if docs or run.exhausted or left <= 0:
                        break
                    cursor.waiting = committed  # killCursors wakes it too
                    try:
                        async with asyncio.timeout(left):
                            await committed
                    except TimeoutError:
                        docs = await run.fill(batch_size, ctx.now())
                        break
                    finally:
                        cursor.waiting = None
    except BaseException:
        ctx.cursors.close(cursor.id)  # as mongod: a failed getMore ends its cursor
        raise
    finally:
        cursor.in_use = False
    if cursor.killed:
        raise CommandError(ErrorCode.CursorKilled, f"cursor id {cursor.id} was killed")
    cid = cursor.id
    if run.exhausted:
        ctx.cursors.close(cid)
        cid = 0
    return reply(cursor.ns, cid, "nextBatch", docs, run.post_batch_token())
