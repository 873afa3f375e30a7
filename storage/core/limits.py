"""MongoDB's limits on memory and nesting, in one place: the per-operation memory limits blocking
stages run under (MemoryLimits), the approximate size of a value as MongoDB's
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

#: mongod's default for the blocking sort, $group and the accumulators' memory (100 MB).
DEFAULT_MEMORY_BYTES = 104_857_600
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
    spill to files in `spill_dir` beyond it (None: the system's temporary directory)."""

    sort_bytes: int = DEFAULT_MEMORY_BYTES
    group_bytes: int = DEFAULT_MEMORY_BYTES
    allow_disk: bool = True
    spill_dir: str | None = None


DEFAULT_LIMITS = MemoryLimits()


def exceeded_no_disk(message: str) -> QueryError:
    """292 QueryExceededMemoryLimitNoDiskUseAllowed, for a stage past its limit without disk."""
    return QueryError("QueryExceededMemoryLimitNoDiskUseAllowed", message)


def sort_exceeded(limit: int) -> QueryError:
    return exceeded_no_disk(
        f"Sort exceeded memory limit of {limit} bytes, but did not opt in to external sorting."
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
    """The memory an accumulator ($push, $addToSet) holds, against mongod's 100 MB limit for it
    (internalQueryMaxPushBytes, internalQueryMaxAddToSetBytes): 146 ExceededMemoryLimit past it."""

    __slots__ = ("bytes", "op")

    def __init__(self, op: str) -> None:
        self.op = op
        self.bytes = 0

    def add(self, value: Any) -> None:
        self.bytes += approximate_size(value, DEFAULT_MEMORY_BYTES)
        if self.bytes >= DEFAULT_MEMORY_BYTES:
            raise QueryError(
                "ExceededMemoryLimit",
                f"{self.op} used too much memory and cannot spill to disk. "
                f"Memory limit: {DEFAULT_MEMORY_BYTES} bytes",
            )


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
