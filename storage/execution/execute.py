"""Query execution: plan, then produce matching documents a bounded chunk at a time.

A QueryRun keeps only a resume position between chunks (never an open transaction), so a cursor can
be served in batches across any number of requests while other clients write.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import bson
from bson import Int64

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core import interrupt
from ebbdb.storage.core.collation import Collation
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.limits import DEFAULT_LIMITS, MemoryLimits
from ebbdb.storage.engine import layout
from ebbdb.storage.engine.store import CODEC, Engine, Reader
from ebbdb.storage.execution.spill import Sorter
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.entries import index_bodies
from ebbdb.storage.indexes.planner import CollScan, IndexScan, Plan, id_hack, plan_query
from ebbdb.storage.indexes.text_plan import plan_text
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.match_tree import Compare, ParsedFilter, Predicate, unbounded
from ebbdb.storage.query.metadata import with_text_score
from ebbdb.storage.query.projection import Projection, parse_projection
from ebbdb.storage.query.sort import SortSpec, parse_sort, sort_documents, sort_key

#: How many records (or index entries) one chunk may examine before handing control back. A
#: chunk of a cheap filter runs on the event loop: 2,000 records held it 20-35 ms on this machine
#: (10-15 µs a record, decoded and matched); 500 keep it near the ~10 ms issue 13 allows, and
#: the scan's own time did not change (3,000 records five times: 0.25 s either way).
DEFAULT_BUDGET = 500
#: A plain scan (no filter, projection or sort: the stored records as they are, at C speed,
#: about a microsecond each) examines this many times the budget: 2,000 records of 100 bytes
#: took 1.7 ms here (median of 30), of 1 KB 2.9 ms, and a 10,000-document find needs 5 chunks,
#: not 20. Large records stop a chunk sooner: it reads no further than its bytes allow.
PLAIN_SCALE = 4

# A resume position: after this record id (collection scan) or after this entry key within this
# interval (index scan).
Position = int | tuple[int, bytes] | None


@dataclass(frozen=True)
class QuerySpec:
    """A validated find: the filter parsed once (its tree for the planner and a positional
    projection, its predicate for every candidate), projection and sort parsed; skip >= 0; limit 0
    means none."""

    query: ParsedFilter
    projection: Projection | None
    sort: SortSpec | None
    skip: int = 0
    limit: int = 0
    hint: Any = None
    #: The collation strings compare under (None: the simple one); the predicate already has it.
    collation: Collation | None = None
    #: find's `min` and `max`: bounds on the hinted index (see plan_query).
    min_key: Mapping[str, Any] | None = None
    max_key: Mapping[str, Any] | None = None
    #: find's `returnKey` (each result is the index key that found it) and `showRecordId`.
    return_key: bool = False
    show_record_id: bool = False

    @property
    def filter(self) -> Mapping[str, Any]:
        """The filter as the client wrote it."""
        return self.query.filter

    @property
    def predicate(self) -> Predicate:
        return self.query.predicate

    @classmethod
    def parse(
        cls,
        filter: dict[str, Any] | None = None,
        projection: dict[str, Any] | None = None,
        sort: dict[str, Any] | None = None,
        skip: int = 0,
        limit: int = 0,
        hint: Any = None,
        variables: Mapping[str, Any] | None = None,
        collation: Collation | None = None,
        *,
        min_key: Mapping[str, Any] | None = None,
        max_key: Mapping[str, Any] | None = None,
        return_key: bool = False,
        show_record_id: bool = False,
    ) -> QuerySpec:
        """Raises QueryError for a malformed filter, projection, sort, skip or limit.
        `variables` are the command's `let` (for `$expr`); `collation` is the one strings
        compare under (None: the simple one, and nothing here changes). The keywords are find's
        options of the same names."""
        if skip < 0:
            raise QueryError("BadValue", f"skip value must be non-negative, but received: {skip}")
        if limit < 0:
            raise QueryError("BadValue", "limit value must be non-negative")
        query = parse_filter(filter, variables, collation=collation)
        shape = parse_projection(projection, filter=query)
        order = parse_sort(sort)
        if (
            (shape is not None and shape.uses_text_score)
            or (order is not None and order.uses_text_score)
        ) and query.text is None:
            raise QueryError(
                "Location40218", "query requires text score metadata, but it is not available"
            )
        return cls(
            query,
            shape,
            order,
            skip,
            limit,
            hint,
            collation,
            min_key,
            max_key,
            return_key,
            show_record_id,
        )


def choose_plan(coll: CollectionInfo, spec: QuerySpec) -> Plan:
    if type(spec.query.tree) is Compare and not (spec.min_key or spec.max_key):
        # A filter of one equality, as `_id` alone (find_one, update_one and delete_one by
        # `_id`), has no $text and no geo operator for the kinds' planners to look for.
        scan = id_hack(coll, spec.query, spec.sort, spec.hint, spec.collation)
        if scan is not None:
            return scan
    text = plan_text(coll, spec.query, spec.sort, spec.hint, spec.collation)
    if text is not None:
        return text  # a $text is read through the text index, whatever else the filter says
    return plan_query(
        coll, spec.query, spec.sort, spec.hint, spec.collation, spec.min_key, spec.max_key
    )


class QueryRun:
    """The state of one query between chunks: a resume position and the skip/limit counts left.

    Mutable on purpose: it is the one object a cursor owns and advances. `limits` bound the
    memory a blocking sort may hold (storage/execution/spill.py sorts past them, or refuses)."""

    def __init__(
        self,
        coll: CollectionInfo,
        spec: QuerySpec,
        plan: Plan | None = None,
        limits: MemoryLimits = DEFAULT_LIMITS,
    ) -> None:
        self.coll = coll
        self.limits = limits
        self.spec = spec
        self._predicate = spec.query.predicate
        self.plan = plan if plan is not None else choose_plan(coll, spec)
        text = spec.query.text
        #: The `$text` of the filter (bound by the plan): matching documents carry its score.
        self._text = text.node.binding if text is not None else None
        self.exhausted = False
        self.size_limited = False
        self._counted = False
        self.docs_examined = 0
        self.keys_examined = 0
        self.returned = 0
        self._pos: Position = None
        self._rules = ttl.NO_RULES
        self._now = 0
        self._skip_left = spec.skip
        #: A proximity plan: documents by distance (out of its bounds: left out).
        self._near = self.plan.near if isinstance(self.plan, IndexScan) else None
        self._sorting = self._near is not None or (
            spec.sort is not None
            and bool(spec.sort.keys)
            and not (isinstance(self.plan, IndexScan) and self.plan.provides_sort)
        )
        self._sorter: Sorter[bytes] | None = None
        self._sorted: Iterator[bytes] | None = None
        self._held: bytes | None = None  # the next sorted document, read ahead
        # Records already returned through a multikey index (a document has several entries).
        self._seen: set[int] | None = (
            set() if isinstance(self.plan, IndexScan) and self.plan.index.multikey else None
        )
        #: Its chunks may take long: each document may cost much (regular expressions, $expr),
        #: or all are sorted in memory. The server runs such chunks off its event loop.
        self.offload = self._sorting or unbounded(spec.query.tree)
        # returnKey and showRecordId reshape every result (and need the document to).
        self._extras = spec.return_key or spec.show_record_id
        # Sorted results shaped as they are collected: what the index found them by, and the
        # metadata a projection shows, are known only then.
        self._shape_early = self._extras or (self._text is not None and spec.projection is not None)
        # Whole stored documents in record order: no decoding at all.
        self._plain = (
            isinstance(self.plan, CollScan)
            and not spec.filter
            and spec.projection is None
            and not self._sorting
            and not self._extras
        )

    @property
    def examined(self) -> int:
        return self.docs_examined

    def _count_use(self, engine: Engine) -> None:
        """Count this query, once, in the engine's usage: an access to the index it runs on, or a
        collection scan ($indexStats, $collStats' queryExecStats)."""
        if self._counted:
            return
        self._counted = True
        if isinstance(self.plan, IndexScan):
            engine.usage.index_used(self.plan.index.id)
        else:
            engine.usage.collection_scanned(self.coll.id)

    @property
    def limit_left(self) -> int | None:
        return None if not self.spec.limit else self.spec.limit - self.returned

    def next_chunk(
        self,
        engine: Engine,
        max_docs: int,
        max_bytes: int,
        budget: int = DEFAULT_BUDGET,
        first: bool = True,
        now_ms: int | None = None,
    ) -> list[bytes]:
        """Up to `max_docs` documents under `max_bytes` together (but at least one, if any remain
        and `first` says this starts a batch), examining at most about `budget` records, leaving
        out documents expired at `now_ms` (default: the real time) under the collection's current
        TTL rules. Afterwards `size_limited` tells whether a document was held back for size;
        fewer documents than asked with neither that nor `exhausted` means "call again"."""
        self.size_limited = False
        if self.exhausted:
            return []
        current = engine.collection(self.coll.db, self.coll.name)
        if current is None or current.id != self.coll.id:
            self.exhausted = True  # dropped since the last batch
            return []
        self._rules = ttl.rules_for(current)
        self._now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        self._count_use(engine)
        left = self.limit_left
        if left is not None:
            max_docs = min(max_docs, left)
        if max_docs <= 0:
            self.exhausted = left is not None and left <= 0
            return []
        if self._sorting and self._sorted is None:
            with engine.read() as reader:
                self._collect(reader, budget)
            if self._sorted is None:
                return []
        if self._sorted is not None:
            out = self._take_sorted(max_docs, max_bytes, first)
        else:
            with engine.read() as reader:
                out = self._scan(reader, max_docs, max_bytes, budget, first)
        self.returned += len(out)
        if self.limit_left is not None and self.limit_left <= 0:
            self.exhausted = True
        return out

    # -- candidates ------------------------------------------------------------------------------

    def _candidates(self, reader: Reader) -> Iterator[tuple[Position, int, bytes]]:
        """(position after it, record id, stored BSON) of each candidate after the resume point."""
        plan = self.plan
        rules, now = self._rules, self._now
        token = interrupt.current.get()
        # A filter whose cost per document has no small bound (regex, $expr) looks at the clock
        # for every candidate; a cheap one every CHECK_EVERY candidates.
        tick = token.check if self.offload else token.tick
        if isinstance(plan, CollScan):
            after_rid = self._pos if isinstance(self._pos, int) else None
            for rid, value in reader.scan(self.coll, after_rid, plan.reverse):
                tick()
                if rules.active and ttl.expired_value(value, rules, now):
                    self._pos = rid
                    continue
                yield rid, rid, ttl.body(value)
            return
        if plan.point is not None:
            # IDHACK: one candidate at most, read by its key. Once passed (returned, skipped,
            # rejected or expired: the position is set), nothing remains.
            found = reader.unique_entry(plan.index, plan.point) if self._pos is None else None
            if found is None:
                return
            key, rid = found
            self.keys_examined += 1
            stored = reader.record(self.coll, rid)
            if stored is None:
                return
            if rules.active and ttl.expired_value(stored, rules, now):
                self._pos = (0, key)
                return
            yield (0, key), rid, ttl.body(stored)
            return
        resume: tuple[int, bytes] | None = self._pos if isinstance(self._pos, tuple) else None
        order = range(len(plan.intervals))
        if plan.reverse:
            order = range(len(plan.intervals) - 1, -1, -1)
        for i in order:
            after_key: bytes | None = None
            if resume is not None:
                if i != resume[0]:
                    continue  # an interval finished before the resume point
                after_key, resume = resume[1], None
            iv = plan.intervals[i]
            hi = iv.hi if iv.hi is not None else b"\xff" * 9
            for key, rid in reader.index_entries(plan.index, iv.lo, hi, plan.reverse, after_key):
                tick()
                self.keys_examined += 1
                if self._seen is not None and rid in self._seen:
                    continue
                stored = reader.record(self.coll, rid)
                if stored is None:
                    continue
                if rules.active and ttl.expired_value(stored, rules, now):
                    self._pos = (i, key)
                    continue
                yield (i, key), rid, ttl.body(stored)

    def record_ids(
        self, engine: Engine, now_ms: int, limit: int = 0, match: bool = True
    ) -> list[int]:
        """Record ids of the matching documents not expired at `now_ms`, in sort order (or the
        plan's), after `skip`, at most `limit` (0: all). Reads in one transaction: for the write
        commands, which re-check each record inside their write transaction. Documents are kept
        in memory only when they must be sorted. `match=False` (a filter that matches every
        document, and a caller that re-checks each): the candidates, never decoded, unless a
        sort or a proximity orders them."""
        current = engine.collection(self.coll.db, self.coll.name)
        if current is None or current.id != self.coll.id:
            return []
        self._rules = ttl.rules_for(current)
        self._now = now_ms
        self._count_use(engine)
        sorting = self._sorting
        want = limit + self.spec.skip if limit and not sorting else 0
        found: list[int] = []
        to_sort: list[tuple[dict[str, Any], int]] = []
        seen: set[int] = set()
        with engine.read() as reader:
            for _pos, rid, raw in self._candidates(reader):
                if rid in seen:
                    continue  # a multikey index lists a document once per key
                seen.add(rid)
                self.docs_examined += 1
                if not match and not sorting:
                    found.append(rid)
                    continue
                ok, doc = self._decode_and_match(raw)
                if not ok or doc is None:
                    continue
                if sorting:
                    to_sort.append((doc, rid))
                    continue
                found.append(rid)
                if want and len(found) >= want:
                    break
        if sorting and self._near is not None and not (self.spec.sort and self.spec.sort.keys):
            key = self._order_key()
            found = [rid for _, rid in sorted(to_sort, key=lambda pair: key(pair[0]))]
        elif sorting:
            assert self.spec.sort is not None
            found = sort_documents(to_sort, self.spec.sort, self.spec.collation)
        found = found[self.spec.skip :]
        return found[:limit] if limit else found

    def _decode_and_match(self, raw: bytes) -> tuple[bool, dict[str, Any] | None]:
        doc = bson.decode(raw, CODEC)
        if self._near is not None and self._near.distance(doc) is None:
            return False, doc
        ok = self._predicate(doc)
        if ok and self._text is not None:
            doc = with_text_score(doc, self._text.score(doc))
        return ok, doc

    def with_metadata(self, doc: dict[str, Any]) -> dict[str, Any]:
        """A matching document, decoded again, with its metadata (the text score of a `$text`
        query), for the pipeline stages after the read."""
        if self._text is None:
            return doc
        return with_text_score(doc, self._text.score(doc))

    def _order_key(self) -> Callable[[Any], Any]:
        """The blocking sort's key: the query's sort, else a proximity plan's distance."""
        spec = self.spec
        if spec.sort is not None and spec.sort.keys:
            return sort_key(spec.sort, spec.collation)
        assert self._near is not None
        distance = self._near.distance

        def by_distance(doc: dict[str, Any]) -> float:
            d = distance(doc)
            return d if d is not None else math.inf

        return by_distance

    def _scan(
        self, reader: Reader, max_docs: int, max_bytes: int, budget: int, first: bool
    ) -> list[bytes]:
        if self._plain and not self._skip_left:
            assert isinstance(self.plan, CollScan)
            interrupt.current.get().check()
            after = self._pos if isinstance(self._pos, int) else None
            out, self._pos, self.exhausted, self.size_limited = reader.scan_batch(
                self.coll,
                after,
                self.plan.reverse,
                min(max_docs, budget * PLAIN_SCALE),
                max_bytes,
                first,
                self._rules,
                self._now,
            )
            self.docs_examined += len(out)
            return out
        out = []
        size = 0
        examined = 0
        needs_doc = bool(self.spec.filter) or self.spec.projection is not None or self._extras
        for pos, rid, raw in self._candidates(reader):
            examined += 1
            self.docs_examined += 1
            doc = None
            if needs_doc:
                ok, doc = self._decode_and_match(raw)
                if not ok:
                    self._pos = pos
                    if examined >= budget:
                        return out
                    continue
            if self._skip_left:
                self._skip_left -= 1
                self._consume(pos, rid)
                continue
            if self._extras:
                raw = self._shape(doc or {}, pos, rid)
            elif self.spec.projection is not None:
                raw = bson.encode(self.spec.projection.apply(doc or {}), codec_options=CODEC)
            if (out or not first) and size + len(raw) > max_bytes:
                self.size_limited = True  # leave it for the next batch
                return out
            self._consume(pos, rid)
            out.append(raw)
            size += len(raw)
            if len(out) >= max_docs or examined >= budget:
                return out
        self.exhausted = True
        return out

    def _shape(self, doc: dict[str, Any], pos: Position, rid: int) -> bytes:
        """A result under returnKey (the index key that found it alone: {} from a collection
        scan, and no `$recordId` even with showRecordId, as mongod's returnKey stage drops the
        record id), or else under showRecordId (`$recordId`, a long, last) the projection."""
        out: dict[str, Any]
        if self.spec.return_key:
            out = self._index_key(doc, pos)
        else:
            out = doc if self.spec.projection is None else self.spec.projection.apply(doc)
            if self.spec.show_record_id:
                out = {**out, "$recordId": Int64(rid)}
        # Encoded as a value, so `_id` stays where the index key has it (a top-level encode
        # would move it first): the element's header is 7 bytes, its value ends before the NUL.
        return bson.encode({"k": out}, codec_options=CODEC)[7:-1]

    def _index_key(self, doc: dict[str, Any], pos: Position) -> dict[str, Any]:
        plan = self.plan
        if not isinstance(plan, IndexScan) or not isinstance(pos, tuple):
            return {}
        ix = plan.index
        entries, _ = index_bodies(ix, doc)
        # The entry key is the index's prefix, the key body (shortened if long), a record id.
        found = pos[1][len(layout.index_prefix(ix.id)) :]
        values = next(
            (v for body, v in entries if found.startswith(body[: keys.BODY_KEEP])),
            entries[0][1] if entries else {},
        )
        return {path: values.get(path) for path in ix.fields}

    def _consume(self, pos: Position, rid: int) -> None:
        self._pos = pos
        if self._seen is not None:
            self._seen.add(rid)

    def _collect(self, reader: Reader, budget: int) -> None:
        spec = self.spec
        if self._sorter is None:
            keep = spec.skip + spec.limit if spec.limit else 0
            self._sorter = Sorter(self._order_key(), self.limits, _same, _decoded, keep)
        examined = 0
        for pos, rid, raw in self._candidates(reader):
            examined += 1
            self.docs_examined += 1
            self._consume(pos, rid)
            ok, doc = self._decode_and_match(raw)
            if ok and doc is not None:
                # What the index found a document by is known only now: shape it here (the
                # sort key is the document's; the stored BSON's size is cheap, and close).
                shaped = self._shape(doc, pos, rid) if self._shape_early else raw
                self._sorter.add(doc, shaped, len(raw))
            if examined >= budget:
                return
        ordered = self._sorter.result()
        self._sorter = None
        self._sorted = itertools.islice(ordered, spec.skip, None)
        self._skip_left = 0

    def _take_sorted(self, max_docs: int, max_bytes: int, first: bool) -> list[bytes]:
        assert self._sorted is not None
        out: list[bytes] = []
        size = 0
        while len(out) < max_docs:
            stored = self._held if self._held is not None else next(self._sorted, None)
            self._held = None
            if stored is None:
                self.exhausted = True
                return out
            raw = stored
            if self.spec.projection is not None and not self._shape_early:
                doc = bson.decode(raw, CODEC)
                raw = bson.encode(self.spec.projection.apply(doc), codec_options=CODEC)
            if (out or not first) and size + len(raw) > max_bytes:
                self.size_limited = True
                self._held = stored
                return out
            out.append(raw)
            size += len(raw)
        # Read one ahead, so a batch that takes the last document says the cursor is done.
        self._held = next(self._sorted, None)
        if self._held is None:
            self.exhausted = True
        return out


def _same(raw: bytes) -> bytes:
    return raw


def _decoded(raw: bytes) -> tuple[dict[str, Any], bytes]:
    return bson.decode(raw, CODEC), raw


def count_documents(engine: Engine, coll: CollectionInfo, now_ms: int | None = None) -> int:
    """The collection's document count without expired ones: its statistics less what the expiry
    index says is expired at `now_ms` (no scan of live documents)."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    with engine.read() as r:
        total = r.stats(coll)[0]
    return total - engine.count_expired(coll, now)


__all__ = ["QueryRun", "QuerySpec", "choose_plan", "count_documents"]
