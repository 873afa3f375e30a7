"""Query execution: choose a plan, then produce matching documents a bounded chunk at a time.

A QueryRun keeps only a resume position between chunks (never an open transaction), so a cursor can
be served in batches across any number of requests while other clients write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import bson

from storage.catalog import CollectionInfo
from storage.engine import CODEC, Engine, Reader
from storage.errors import QueryError
from storage.query.match import Predicate, compile_filter
from storage.query.projection import Projection, parse_projection
from storage.query.sort import SortSpec, parse_sort, sort_documents

#: How many records one chunk may examine before handing control back to the caller.
DEFAULT_BUDGET = 2000


@dataclass(frozen=True)
class QuerySpec:
    """A validated find: filter, projection and sort parsed; skip >= 0; limit 0 means none."""

    filter: dict[str, Any]
    predicate: Predicate
    projection: Projection | None
    sort: SortSpec | None
    skip: int = 0
    limit: int = 0

    @classmethod
    def parse(
        cls,
        filter: dict[str, Any] | None = None,
        projection: dict[str, Any] | None = None,
        sort: dict[str, Any] | None = None,
        skip: int = 0,
        limit: int = 0,
    ) -> QuerySpec:
        """Raises QueryError for a malformed filter, projection, sort, skip or limit."""
        if skip < 0:
            raise QueryError("BadValue", f"skip value must be non-negative, but received: {skip}")
        if limit < 0:
            raise QueryError("BadValue", "limit value must be non-negative")
        flt = filter or {}
        return cls(
            flt, compile_filter(flt), parse_projection(projection), parse_sort(sort), skip, limit
        )


@dataclass(frozen=True)
class IdLookup:
    """Point read through the `_id_` index."""

    value: Any


@dataclass(frozen=True)
class CollScan:
    reverse: bool = False


Plan = IdLookup | CollScan


def _plain_value(v: Any) -> bool:
    if isinstance(v, dict):
        return not any(k.startswith("$") for k in v)
    return not isinstance(v, (list, bson.Regex))


def choose_plan(spec: QuerySpec) -> Plan:
    """`_id` equality reads one record; everything else scans. (The query issue brings indexes.)"""
    if "_id" in spec.filter:
        v = spec.filter["_id"]
        if _plain_value(v):
            return IdLookup(v)
        if isinstance(v, dict) and len(v) == 1 and "$eq" in v and _plain_value(v["$eq"]):
            return IdLookup(v["$eq"])
    reverse = bool(spec.sort and not spec.sort.keys and spec.sort.natural < 0)
    return CollScan(reverse)


class QueryRun:
    """The state of one query between chunks: a resume record id and the skip/limit counts left.

    Mutable on purpose: it is the one object a cursor owns and advances."""

    def __init__(self, coll: CollectionInfo, spec: QuerySpec) -> None:
        self.coll = coll
        self.spec = spec
        self.plan = choose_plan(spec)
        self.exhausted = False
        self.size_limited = False
        self.examined = 0
        self.returned = 0
        self._after: int | None = None
        self._skip_left = spec.skip
        self._sorting = spec.sort is not None and bool(spec.sort.keys)
        self._collected: list[tuple[dict[str, Any], bytes]] = []
        # Whole stored documents in record order: no decoding at all.
        self._plain = (
            isinstance(self.plan, CollScan)
            and not spec.filter
            and spec.projection is None
            and not self._sorting
        )
        self._sorted: list[bytes] | None = None

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
    ) -> list[bytes]:
        """Up to `max_docs` documents under `max_bytes` together (but at least one, if any remain
        and `first` says this starts a batch), examining at most about `budget` records.
        Afterwards `size_limited` tells whether a document was held back for size; fewer documents
        than asked with neither that nor `exhausted` means "call again": the budget ran out."""
        self.size_limited = False
        if self.exhausted:
            return []
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

    def _candidates(self, reader: Reader, budget: int) -> tuple[list[tuple[int, bytes]], bool]:
        """A slice of candidate records after the resume point, and whether the source is done."""
        if isinstance(self.plan, IdLookup):
            rid = reader.find_unique(self.coll.id_index, self.plan.value)
            if rid is None or (self._after is not None and rid <= self._after):
                return [], True  # absent, or already returned
            raw = reader.record(self.coll, rid)
            return ([] if raw is None else [(rid, raw)]), True
        out = []
        for item in reader.scan(self.coll, self._after, self.plan.reverse):
            out.append(item)
            if len(out) >= budget:
                return out, False
        return out, True

    def _matches(self, raw: bytes) -> tuple[bool, dict[str, Any] | None]:
        if not self.spec.filter and self.spec.projection is None and not self._sorting:
            return True, None
        doc = bson.decode(raw, CODEC)
        return self.spec.predicate(doc), doc

    def _scan(
        self, reader: Reader, max_docs: int, max_bytes: int, budget: int, first: bool
    ) -> list[bytes]:
        if self._plain and not self._skip_left:
            assert isinstance(self.plan, CollScan)
            out, self._after, self.exhausted, self.size_limited = reader.scan_batch(
                self.coll, self._after, self.plan.reverse, min(max_docs, budget), max_bytes, first
            )
            self.examined += len(out)
            return out
        out = []
        size = 0
        examined = 0
        while True:
            items, done = self._candidates(reader, budget - examined)
            for rid, raw in items:
                self._after = rid
                examined += 1
                ok, doc = self._matches(raw)
                if not ok:
                    continue
                if self._skip_left:
                    self._skip_left -= 1
                    continue
                if self.spec.projection is not None:
                    raw = bson.encode(self.spec.projection.apply(doc or {}), codec_options=CODEC)
                if (out or not first) and size + len(raw) > max_bytes:
                    # Leave it for the next batch: resume just before this record.
                    self.size_limited = True
                    self._after = rid - 1 if not self.plan_reverse else rid + 1
                    self.examined += examined
                    return out
                out.append(raw)
                size += len(raw)
                if len(out) >= max_docs:
                    self.examined += examined
                    if done and rid == items[-1][0]:
                        self.exhausted = True
                    return out
            if done:
                self.exhausted = True
                break
            if examined >= budget:
                break
        self.examined += examined
        return out

    @property
    def plan_reverse(self) -> bool:
        return isinstance(self.plan, CollScan) and self.plan.reverse

    def _collect(self, reader: Reader, budget: int) -> None:
        items, done = self._candidates(reader, budget)
        for rid, raw in items:
            self._after = rid
            self.examined += 1
            doc = bson.decode(raw, CODEC)
            if self.spec.predicate(doc):
                self._collected.append((doc, raw))
        if done:
            assert self.spec.sort is not None
            ordered = sort_documents(self._collected, self.spec.sort)
            self._collected = []
            self._sorted = ordered[self.spec.skip :]
            self._skip_left = 0

    def _take_sorted(self, max_docs: int, max_bytes: int, first: bool) -> list[bytes]:
        assert self._sorted is not None
        out: list[bytes] = []
        size = 0
        pending = self._sorted
        i = 0
        while i < len(pending) and len(out) < max_docs:
            raw = pending[i]
            if self.spec.projection is not None:
                raw = bson.encode(
                    self.spec.projection.apply(bson.decode(raw, CODEC)), codec_options=CODEC
                )
            if (out or not first) and size + len(raw) > max_bytes:
                self.size_limited = True
                break
            out.append(raw)
            size += len(raw)
            i += 1
        self._sorted = pending[i:]
        if not self._sorted:
            self.exhausted = True
        return out


def count_documents(engine: Engine, coll: CollectionInfo) -> int:
    with engine.read() as r:
        return r.stats(coll)[0]


__all__ = ["CollScan", "IdLookup", "QueryRun", "QuerySpec", "choose_plan", "parse_projection"]
