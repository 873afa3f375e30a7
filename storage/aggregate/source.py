"""Where a pipeline's documents come from: EngineSource reads collections through the query engine
(so expired documents never enter a pipeline, whether read first or joined), and $documents makes
them from an expression, for a pipeline that reads no collection. ServerFacts is what the server
tells the stages that report on it ($collStats, $indexStats).
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import bson
from bson import Int64
from bson.raw_bson import RawBSONDocument

from ebbdb.storage.aggregate.fields import group_key
from ebbdb.storage.aggregate.reshaping import not_a_document
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Placement, Read, Stage, error
from ebbdb.storage.core.collation import Collation
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.limits import DEFAULT_LIMITS, MemoryLimits
from ebbdb.storage.core.passes import PASS_BYTES, decode_in_passes
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution import views
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.indexes.planner import Plan
from ebbdb.storage.indexes.text_plan import check_no_collection
from ebbdb.storage.query.expressions import Expression, compile_expression

#: Documents one engine read returns per chunk (each chunk is one short read transaction).
READ_CHUNK = 256
_NO_BYTE_LIMIT = 1 << 62


class ServerFacts(Protocol):
    """What $collStats and $indexStats report that storage does not know: the server's address
    and the latency of each namespace's operations (MongoDB's Top)."""

    @property
    def host(self) -> str:
        """`hostname:port`."""
        ...

    def latency_stats(self, ns: str, histograms: bool) -> dict[str, Any]:
        """MongoDB's `latencyStats` document for the namespace (with `histogram` arrays)."""
        ...


class _NoServer:
    """The facts of a pipeline run without a server (storage tests): this machine's name and no
    operations timed."""

    @property
    def host(self) -> str:
        return socket.gethostname()

    def latency_stats(self, ns: str, histograms: bool) -> dict[str, Any]:
        none: dict[str, Any] = {"histogram": []} if histograms else {}
        return {
            kind: {**none, "latency": Int64(0), "ops": Int64(0)}
            for kind in ("reads", "writes", "commands", "transactions")
        }


def _decoded(raw: bytes) -> Doc:
    """A stored document, decoded. A large one is decoded a pass at a time: one C call on a 1 MB
    document of 30,000 small sub-documents held the interpreter (and so the event loop) 60 ms."""
    if len(raw) <= PASS_BYTES:
        return bson.decode(raw, CODEC)
    return decode_in_passes(raw)


class EngineSource:
    """A Source over the engine: reads through QueryRun, so the planner picks an index for the
    pushed-down filter and sort, and documents expired at `now_ms` never appear. Each chunk is read
    in its own short transaction, so a pipeline consumed over many batches never holds one open;
    `now_ms` may be moved between batches (the cursor does, as it does for find).

    `plans` keeps the plan of the latest read of each collection and `docs_examined` /
    `keys_examined` add up over all reads (for explain and tests). `server` tells what only the
    server knows (none: a pipeline run without one)."""

    def __init__(
        self,
        engine: Engine,
        db: str,
        now_ms: int,
        server: ServerFacts | None = None,
        collation: Collation | None = None,
        limits: MemoryLimits = DEFAULT_LIMITS,
    ) -> None:
        self.engine = engine
        self.limits = limits  # what blocking stages and sorted reads may hold in memory
        self.db = db
        self.now_ms = now_ms
        self.server: ServerFacts = server if server is not None else _NoServer()
        self.collation = collation  # what the reads' filters and sorts compare strings under
        self.plans: dict[str, Plan] = {}
        self.docs_examined = 0
        self.keys_examined = 0

    def documents(self, collection: str, read: Read) -> Iterator[Doc]:
        # Parsed here, not in the generator, so a bad filter fails when the read is set up.
        spec = QuerySpec.parse(
            read.filter, None, read.sort, read.skip, read.limit, read.hint, collation=self.collation
        )
        return self._read(collection, spec)

    def view(self, collection: str) -> tuple[str, list[Mapping[str, Any]]] | None:
        resolved = views.resolve(self.engine, self.db, collection)
        if resolved is None:
            return None
        return resolved.collection, list(resolved.pipeline)

    def _read(self, collection: str, spec: QuerySpec) -> Iterator[Doc]:
        coll = self.engine.collection(self.db, collection)
        if coll is None:
            check_no_collection(spec.query, f"{self.db}.{collection}")
            return
        run = QueryRun(coll, spec, limits=self.limits)
        self.plans[collection] = run.plan
        # Kept as read, each decoded only when the pipeline asks for it: a chunk of large
        # documents decoded at once (ten 1 MB trees, 100+ MB of objects) made every full garbage
        # collection meanwhile walk them all, holding the interpreter 80-230 ms.
        buffered: deque[bytes] = deque()
        read_at = self.now_ms
        while True:
            if not buffered:
                if run.exhausted:
                    return
                read_at = self.now_ms
                docs, keys = run.docs_examined, run.keys_examined
                chunk = run.next_chunk(self.engine, READ_CHUNK, _NO_BYTE_LIMIT, now_ms=read_at)
                self.docs_examined += run.docs_examined - docs
                self.keys_examined += run.keys_examined - keys
                buffered.extend(chunk)
            elif self.now_ms != read_at:
                # The clock moved (a new batch) while documents read earlier wait here: keep only
                # those still not expired, so each batch hides what expired before it, as find's.
                read_at = self.now_ms
                buffered = deque(self._alive(collection, list(buffered)))
            else:
                yield run.with_metadata(_decoded(buffered.popleft()))

    def _alive(self, collection: str, raws: list[bytes]) -> list[bytes]:
        """The stored documents among `raws` still stored and not expired at `now_ms` (looked
        up by `_id`, in their original order)."""
        coll = self.engine.collection(self.db, collection)
        if coll is None:
            return []
        ids = [_id_of(raw) for raw in raws]
        spec = QuerySpec.parse({"_id": {"$in": ids}})
        run = QueryRun(coll, spec)
        alive: set[Any] = set()
        while not run.exhausted:
            for raw in run.next_chunk(self.engine, READ_CHUNK, _NO_BYTE_LIMIT, now_ms=self.now_ms):
                alive.add(group_key(_id_of(raw)))
        return [raw for raw, _id in zip(raws, ids) if group_key(_id) in alive]


#: Top-level fields only: a stored document's `_id` without decoding the rest of it.
_SHALLOW = CODEC.with_options(document_class=RawBSONDocument)


def _id_of(raw: bytes) -> Any:
    """A stored document's `_id`, decoded as the whole document would decode it."""
    value = RawBSONDocument(raw, _SHALLOW)["_id"]
    return bson.decode(value.raw, CODEC) if isinstance(value, RawBSONDocument) else value


# -- $documents --------------------------------------------------------------------------------------


class Documents(Stage, name="$documents"):
    """$documents: the documents its expression evaluates to (the pipeline reads no collection)."""

    makes_input = True
    expr: Expression

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        value = self.expr({}, ctx.variables)
        if not isinstance(value, list):
            raise error(5858203, "an array is expected")
        for element in value:
            if not isinstance(element, dict):
                raise not_a_document("'newRoot' expression", element, {})
            yield element


@STAGES.stage("$documents", Placement(first=True, in_facet=False))
def _parse_documents(spec: Any, defined: frozenset[str]) -> Stage:
    return Documents(compile_expression(spec, defined))
