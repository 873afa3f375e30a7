"""MongoDB's limits on memory and nesting, in one place: the per-operation limits blocking and
generating stages run under (MemoryLimits), the approximate size of a value as MongoDB's
Value::getApproximateSize counts it, the guard on values expressions build, and the nesting
depth checks (200 levels for any BSON the server takes, 180 for a document it stores).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import bson
from bson.codec_options import CodecOptions, DatetimeConversion

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.footprint import LIST_SLOT, footprint
from ebbdb.storage.core.memory import CHARGED

#: mongod's default for the blocking sort, $group and the accumulators' memory (100 MB).
DEFAULT_MEMORY_BYTES = 104_857_600
#: The $lookup results one document may take: BSONObjMaxInternalSize (16 MB and 16 KB), the value
#: MongoDB Atlas runs internalLookupStageIntermediateDocumentMaxSizeBytes with (a self-managed
#: mongod's default is 100 MB): results past it could never be returned in one document.
LOOKUP_BYTES = 16 * 1024 * 1024 + 16 * 1024
#: internalQueryMaxAllowedDensifyDocs's default: the documents one $densify may generate.
DENSIFY_DOCS = 500_000
#: BSONDepth::kDefaultMaxAllowableDepth: no BSON the server takes may nest deeper.
MAX_BSON_DEPTH = 200
#: BSONDepth::getMaxDepthForUserStorage(): 20 levels fewer, kept for what the server wraps a
#: stored document in (command replies, the oplog).
MAX_STORAGE_DEPTH = MAX_BSON_DEPTH - 20
#: RCString's limit: no string value may reach BSONObjMaxUserSize.
MAX_STRING_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class MemoryLimits:
    """What one operation's blocking stages may hold in memory (bytes), and whether they may
    spill to files in `spill_dir` beyond it (None: the system's temporary directory); and what
    a $densify may generate."""

    sort_bytes: int = DEFAULT_MEMORY_BYTES
    group_bytes: int = DEFAULT_MEMORY_BYTES
    allow_disk: bool = True
    spill_dir: str | None = None
    #: What one document's $lookup results may take (internalLookupStageIntermediateDocument-
    #: MaxSizeBytes, measured as mongod measures it: `approximate_size`).
    lookup_bytes: int = LOOKUP_BYTES
    #: What a $setWindowFields partition may hold (internalDocumentSourceSetWindowFieldsMax-
    #: MemoryBytes); what a $facet holds of its input (internalQueryFacetBufferSizeBytes).
    window_bytes: int = DEFAULT_MEMORY_BYTES
    facet_bytes: int = DEFAULT_MEMORY_BYTES
    #: The documents one $densify may generate (internalQueryMaxAllowedDensifyDocs), and what
    #: its partitions' state may hold (internalDocumentSourceDensifyMaxMemoryBytes): neither
    #: spills, so disk use does not matter.
    densify_docs: int = DENSIFY_DOCS
    densify_bytes: int = DEFAULT_MEMORY_BYTES


DEFAULT_LIMITS = MemoryLimits()


def exceeded_no_disk(message: str) -> QueryError:
    """292 QueryExceededMemoryLimitNoDiskUseAllowed, for a stage past its limit without disk."""
    return QueryError("QueryExceededMemoryLimitNoDiskUseAllowed", message)


def sort_exceeded(limit: int) -> QueryError:
    return exceeded_no_disk(
        f"Sort exceeded memory limit of {limit} bytes, but did not opt in to external sorting."
    )


def lookup_exceeded(collection: str | None, limit: int) -> QueryError:
    """4568, mongod's words for a document's $lookup results past their limit."""
    return QueryError(
        "Location4568",
        f"Total size of documents in {collection or ''} matching pipeline's $lookup stage"
        f" exceeds {limit} bytes",
    )


def window_exceeded(used: int, limit: int) -> QueryError:
    """5414201, mongod's words for a $setWindowFields partition past its limit."""
    return QueryError(
        "Location5414201",
        f"Exceeded memory limit in DocumentSourceSetWindowFields, used {used} bytes but max"
        f" allowed is {limit}",
    )


def group_exceeded() -> QueryError:
    return exceeded_no_disk(
        "Exceeded memory limit for $group, but didn't allow external sort."
        " Pass allowDiskUse:true to opt in."
    )


# -- approximate sizes -------------------------------------------------------------------------------

#: sizeof(Value): what any value costs before what it points to.
VALUE_BYTES = 16
_ARRAY_BYTES = 24  # the vector behind an array
_DOCUMENT_BYTES = 32  # a document's own storage before its fields
_SIZED = frozenset((str, bytes, list, dict))


def approximate_size(value: Any, cap: int = sys.maxsize) -> int:
    """About what MongoDB's Value::getApproximateSize says `value` takes: 16 bytes a value, plus a
    string's bytes and the contents of arrays and documents. Shared sub-values count each time
    they appear (as they would once copied into BSON) but are walked once, and counting stops
    early once past `cap`, so a value built to be huge costs little to measure."""
    return _size(value, cap, {})


#: Items looked at per C-level pass: a pass holds the interpreter lock (~2 ms for this many), and
#: between passes other threads (the event loop) get their turn.
_PASS = 65_536


def _only_scalars(items: Any) -> bool:
    if type(items) is not list or len(items) <= _PASS:
        return _SIZED.isdisjoint(map(type, items))
    return all(
        _SIZED.isdisjoint(map(type, items[i : i + _PASS])) for i in range(0, len(items), _PASS)
    )


def _size(value: Any, cap: int, seen: dict[int, int]) -> int:
    t = type(value)
    if t is str or t is bytes:
        return VALUE_BYTES + len(value)
    if t is list:
        items = value
        total = VALUE_BYTES + _ARRAY_BYTES + VALUE_BYTES * len(items)
    elif t is dict or isinstance(value, Mapping):
        items = value.values()
        total = VALUE_BYTES + _DOCUMENT_BYTES + VALUE_BYTES * len(value) + sum(map(len, value))
    else:
        return VALUE_BYTES
    if total > cap or _only_scalars(items):
        return total  # the common case: only scalars inside, measured in C-level passes
    known = seen.get(id(value))
    if known is not None:
        return known
    for item in items:
        if type(item) in _SIZED:
            total += _size(item, cap, seen) - VALUE_BYTES
            if total > cap:
                break
    seen[id(value)] = total
    return total


# -- values built by expressions ---------------------------------------------------------------------

#: What a value an expression builds may take (mongod's internalQueryMaxRangeBytes default,
#: which ebbdb applies to every operator that grows an array, not only $range).
MAX_BUILT_BYTES = DEFAULT_MEMORY_BYTES

#: The operators that can build a value larger than their operands: their results are measured.
GROWING = frozenset(
    "$concatArrays $concat $replaceAll $replaceOne $map $reduce $zip $setUnion $reverseArray"
    " $objectToArray $arrayToObject $mergeObjects $split".split()
)

Expression = Callable[[dict[str, Any], Mapping[str, Any]], Any]


def string_bytes(s: str) -> int:
    """A string's UTF-8 length (its character count when ASCII, which CPython knows at once)."""
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


def check_built(op: str, value: Any) -> Any:
    """`value` as operator `op` built it, or MongoDB's error when it is past a limit: 16493 for
    a string of 16 MB or more, 146 ExceededMemoryLimit for an array or document measured at
    `MAX_BUILT_BYTES` or more (the words of $range's own check)."""
    t = type(value)
    if t is str:
        if len(value) * 4 >= MAX_STRING_BYTES and string_bytes(value) >= MAX_STRING_BYTES:
            raise QueryError(
                "Location16493",
                f"Tried to create string longer than {MAX_STRING_BYTES // (1024 * 1024)}MB",
            )
    elif t is list or t is dict:
        size = approximate_size(value, MAX_BUILT_BYTES)
        if size >= MAX_BUILT_BYTES:
            raise _built_too_large(op, size)
    return value


def _built_too_large(op: str, size: int) -> QueryError:
    return QueryError(
        "ExceededMemoryLimit",
        f"{op} would use too much memory ({size} bytes) and cannot spill to disk. "
        f"Memory limit: {MAX_BUILT_BYTES} bytes",
    )


def check_array_length(op: str, length: int) -> None:
    """146 before an array of `length` values is built, when even scalars alone would take
    `MAX_BUILT_BYTES` (what check_built would answer after building it: refusing first keeps a
    doubling `$reduce` from copying hundreds of megabytes while holding the interpreter)."""
    size = VALUE_BYTES + _ARRAY_BYTES + VALUE_BYTES * length
    if size >= MAX_BUILT_BYTES:
        raise _built_too_large(op, size)


def guarded(op: str, expr: Expression) -> Expression:
    """`expr` compiled for operator `op`, its result checked by `check_built` when `op` is one
    that can grow values (other operators' expressions come back unchanged)."""
    if op not in GROWING:
        return expr

    def evaluate(doc: dict[str, Any], variables: Mapping[str, Any]) -> Any:
        return check_built(op, expr(doc, variables))

    return evaluate


class Tracked:
    """The values one accumulator holds ($push, $addToSet, $first, ...), counted as CPython holds
    them (storage/core/footprint.py) and charged to the stage that made the accumulator (the
    tracker `memory.bound` named then; none for an accumulator used as an expression). `limit`
    (0: none) is mongod's own limit for the accumulator (internalQueryMaxPushBytes,
    internalQueryMaxAddToSetBytes: 100 MB): 146 ExceededMemoryLimit past it.

    The one call an accumulator makes for each value it keeps: `held.add(value)`; `drop(value)`
    when it lets one go (a $last replaced)."""

    __slots__ = ("bytes", "limit", "op", "tracker")

    def __init__(self, op: str, limit: int = DEFAULT_MEMORY_BYTES) -> None:
        self.op = op
        self.limit = limit
        self.bytes = 0
        self.tracker = CHARGED.get()

    def add(self, value: Any, extra: int = LIST_SLOT) -> None:
        """Count `value` held (and `extra` bytes for the slot that holds it)."""
        self._charge(footprint(value, self.limit or sys.maxsize) + extra)

    def recount(self, values: Iterable[Any], extra: int = LIST_SLOT) -> None:
        """Count exactly `values` (each with `extra`) as what is held now (after a trim)."""
        n = sum(footprint(v) + extra for v in values)
        if self.tracker is not None:
            self.tracker.charge(n) if n > self.bytes else self.tracker.release(self.bytes - n)
        self.bytes = n

    def swap(self, old: Any, new: Any) -> None:
        """Count `new` held instead of `old` (a $last, $min or $max replaced): one charge or
        release of the difference, none for values of the same size."""
        self.grow(footprint(new) - footprint(old))

    def grow(self, n: int) -> None:
        """Count `n` bytes more held (fewer, when negative)."""
        if n > 0:
            self._charge(n)
        elif n < 0:
            n = min(-n, self.bytes)
            self.bytes -= n
            if self.tracker is not None:
                self.tracker.release(n)

    def _charge(self, n: int) -> None:
        self.bytes += n
        if self.limit and self.bytes >= self.limit:
            raise self._exceeded()
        if self.tracker is not None:
            self.tracker.charge(n)

    def _exceeded(self) -> QueryError:
        return QueryError(
            "ExceededMemoryLimit",
            f"{self.op} used too much memory and cannot spill to disk. "
            f"Memory limit: {self.limit} bytes",
        )

    def drop(self, value: Any, extra: int = LIST_SLOT) -> None:
        """Count `value` (and its slot) no longer held."""
        n = min(footprint(value) + extra, self.bytes)
        self.bytes -= n
        if self.tracker is not None:
            self.tracker.release(n)


# -- nesting -----------------------------------------------------------------------------------------

_NESTED = (dict, list)


def nesting_exceeds(doc: Any, limit: int) -> bool:
    """Whether `doc` nests non-empty documents or arrays more than `limit` levels deep (the
    document itself is level 1; empty ones do not count, as in MongoDB). Level by level, without
    recursion, so any depth is measured safely."""
    level = [doc]
    depth = 1
    while level:
        deeper: list[Any] = []
        for container in level:
            values = container.values() if isinstance(container, Mapping) else container
            deeper.extend(v for v in values if isinstance(v, _NESTED) and v)
        if deeper and depth >= limit:
            return True
        level = deeper
        depth += 1
    return False


def check_bson_depth(doc: Any) -> None:
    """15 Overflow for BSON nested past MAX_BSON_DEPTH, as mongod refuses such a message."""
    if nesting_exceeds(doc, MAX_BSON_DEPTH):
        raise QueryError(
            "Overflow", f"BSONObj exceeded maximum nested object depth: {MAX_BSON_DEPTH}"
        )


#: The fewest bytes a level of nesting takes in BSON (type, empty name, length, terminator).
_LEVEL_BYTES = 7
#: Decoding only to measure depth: any date decodes (storage/core/documents.py's CODEC imports this).
_ANY_DATE: CodecOptions[dict[str, Any]] = CodecOptions(
    datetime_conversion=DatetimeConversion.DATETIME_MS
)


def may_nest_too_deep(size: int, limit: int = MAX_BSON_DEPTH) -> bool:
    """Whether BSON of `size` bytes is long enough to nest past `limit` levels at all (every
    level takes at least _LEVEL_BYTES): shorter BSON needs no look."""
    return size > _LEVEL_BYTES * limit


def check_sequence_depth(raws: Iterable[bytes]) -> None:
    """check_bson_depth for raw BSON documents (a document sequence's); those too short to nest
    past the limit are not decoded."""
    for raw in raws:
        if may_nest_too_deep(len(raw)):
            try:
                doc = bson.decode(raw, _ANY_DATE)
            except Exception:  # the command reports invalid BSON where it reads it
                continue
            check_bson_depth(doc)


def check_insert_depth(doc: Any) -> None:
    """15 Overflow for a document to insert nested past MAX_STORAGE_DEPTH."""
    if nesting_exceeds(doc, MAX_STORAGE_DEPTH):
        raise QueryError(
            "Overflow",
            f"cannot insert document because it exceeds {MAX_STORAGE_DEPTH} levels of nesting",
        )


def check_update_depth(doc: Any) -> None:
    """15 Overflow for an update's result nested past MAX_STORAGE_DEPTH."""
    if nesting_exceeds(doc, MAX_STORAGE_DEPTH):
        raise QueryError(
            "Overflow", f"Document exceeds maximum nesting depth of {MAX_STORAGE_DEPTH}"
        )


def too_deep() -> QueryError:
    """What an operation gets when a value is nested too deeply for ebbdb to walk (documents
    stored before the depth checks, values built deeper than any stored one): 15 Overflow, never
    a RecursionError."""
    return QueryError("Overflow", "exceeded maximum nesting depth while processing a value")
