"""What expressions hold while they run: the large values they build, charged to the operation's
memory (storage/core/memory.py) so that the server-wide cap stops a runaway with 146 for the
operation asking, and the helpers that let a loop over a huge value check for interruption.

One evaluation of a top-level expression (one document's) is a `Scope`: an operator that builds
a large value charges it there, and the scope gives everything back when the evaluation ends,
since what it returns is then the document's, which the stages holding documents count. Within
the evaluation an operator's result replaces what its arguments held (`settle`): once `$map`
returns, the `$range` it read is garbage, and a `$reduce` step's result replaces the step before.
Values under `THRESHOLD` are not charged at all: the hot path for small values is one
contextvar read per top-level evaluation.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ebbdb.storage.core import interrupt, limits
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.footprint import LIST_SLOT, footprint
from ebbdb.storage.core.memory import Tracker

Expression = Callable[[dict[str, Any], Mapping[str, Any]], Any]

#: Values smaller than this are not charged (a scope costs nothing until one is built).
THRESHOLD = 1 << 20
#: Elements a loop that builds an array takes between two measures of what it built.
CHUNK = 4096
#: Items copied by one C-level pass: about 1 ms of work, so that a copy of millions of items
#: checks for interruption between passes and lets other threads in.
PASS = 1 << 16
#: Elements sampled to estimate a large array's size.
_SAMPLE = 64

_getsizeof = sys.getsizeof


class Scope:
    """What one evaluation of a top-level expression holds: `held` bytes charged to the
    operation's memory (a tracker made at the first charge)."""

    __slots__ = ("held", "tracker")

    def __init__(self) -> None:
        self.held = 0
        self.tracker: Tracker | None = None

    def charge(self, op: str, n: int) -> None:
        """Count `n` more bytes held by what `op` built; 146 past the server's cap."""
        tracker = self.tracker
        if tracker is None:
            tracker = self.tracker = interrupt.current.get().memory.child("expression")
        # A child named for the operator, so that 146 names it; released through `tracker`.
        tracker.child(op).charge(n)
        self.held += n

    def settle(self, op: str, mark: int, n: int) -> None:
        """What was charged since `held` was `mark` is now `n` bytes (an operator's result in
        place of what its arguments and its earlier steps held)."""
        want = mark + n
        if want > self.held:
            self.charge(op, want - self.held)
        elif want < self.held and self.tracker is not None:
            self.tracker.release(self.held - want)
            self.held = want

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None
        self.held = 0


#: The scope of the top-level evaluation running in this context (None: none is).
SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "ebbdb_expression_scope", default=None
)


def scoped(expr: Expression) -> Expression:
    """`expr` as a top-level evaluation: in a scope of its own unless one is running already
    (an expression evaluated inside another one's evaluation belongs to that one's scope)."""

    def evaluate(doc: dict[str, Any], variables: Mapping[str, Any]) -> Any:
        if SCOPE.get() is not None:
            return expr(doc, variables)
        scope = Scope()
        token = SCOPE.set(scope)
        try:
            return expr(doc, variables)
        finally:
            SCOPE.reset(token)
            if scope.tracker is not None:
                scope.close()

    return evaluate


def estimate(value: Any) -> int:
    """About what CPython holds for `value` (footprint's count), cheaply: a long array is
    measured on a sample of its elements."""
    t = type(value)
    if t is str or t is bytes:
        return _getsizeof(value)
    if t is list and len(value) > 4 * _SAMPLE:
        n = len(value)
        step = n // _SAMPLE
        sample = value[::step][:_SAMPLE]
        per = footprint(sample) - _getsizeof(sample)
        return _getsizeof(value) + per * n // len(sample)
    if t is list or t is dict:
        return footprint(value)
    return 0


def guarded(op: str, expr: Expression, growing: bool) -> Expression:
    """`expr` compiled for operator `op`, whose result replaces, in the running scope, what its
    evaluation charged (its arguments, its steps), and is charged itself when large. `growing`:
    the result is held to MongoDB's limits on built values too (limits.check_built)."""

    def evaluate(doc: dict[str, Any], variables: Mapping[str, Any]) -> Any:
        scope = SCOPE.get()
        if scope is None:
            value = expr(doc, variables)
            return limits.check_built(op, value) if growing else value
        mark = scope.held
        value = expr(doc, variables)
        if growing:
            limits.check_built(op, value)
        t = type(value)
        if scope.held != mark:
            size = estimate(value)
            scope.settle(op, mark, size if size >= THRESHOLD else 0)
        elif (t is str or t is bytes) and len(value) >= _LONG_STRING:
            size = _getsizeof(value)
            if size >= THRESHOLD:
                scope.charge(op, size)
        elif (t is list or t is dict) and len(value) >= _LONG_ARRAY:
            # Shorter ones built of values nobody charged hold no more than their input did.
            size = estimate(value)
            if size >= THRESHOLD:
                scope.charge(op, size)
        return value

    return evaluate


#: The shortest string, and array or document, that may take THRESHOLD bytes: shorter ones need
#: no measuring (a value inside them that large was charged when it was built).
_LONG_STRING = THRESHOLD // 4
_LONG_ARRAY = 1024


def building(op: str, x: list[Any], out: list[Any]) -> Iterator[Any]:
    """The elements of `x` for a loop that appends what it builds to `out` ($map, $filter): a
    tick for each, and `out` measured (Built) after every CHUNK of them when `x` is longer than
    one. A loop that stops early just stops taking elements."""
    tick = interrupt.current.get().tick
    n = len(x)
    if n <= CHUNK:
        for element in x:
            tick()
            yield element
        return
    built = Built(op, out)
    for start in range(0, n, CHUNK):
        for element in x[start : start + CHUNK]:
            tick()
            yield element
        built.measure()


class Built:
    """An array a loop builds element by element ($map, $filter, ...), measured every CHUNK
    elements: its size is charged to the running scope in place of what the elements' own
    evaluation charged, and mongod's limit on a built value (limits.MAX_BUILT_BYTES, measured as
    mongod measures: approximate_size) is held as it grows, not once it is whole."""

    __slots__ = ("approx", "bytes", "done", "mark", "op", "out", "scope")

    def __init__(self, op: str, out: list[Any]) -> None:
        self.op = op
        self.out = out
        self.scope = SCOPE.get()
        self.mark = self.scope.held if self.scope is not None else 0
        self.done = 0  # elements measured
        self.bytes = 0  # what CPython holds for them
        self.approx = 0  # what mongod would count for them

    def measure(self) -> None:
        """Measure the elements added since the last measure."""
        out = self.out
        chunk = out[self.done :]
        if not chunk:
            return
        self.done = len(out)
        self.approx += limits.approximate_size(chunk, limits.MAX_BUILT_BYTES) - 40
        if self.approx + 40 >= limits.MAX_BUILT_BYTES:
            raise too_large(self.op, self.approx + 40)
        self.bytes += footprint(chunk) - _getsizeof(chunk) + LIST_SLOT * len(chunk)
        scope = self.scope
        if scope is not None and (self.bytes >= THRESHOLD or scope.held != self.mark):
            scope.settle(self.op, self.mark, self.bytes if self.bytes >= THRESHOLD else 0)


def copy(out: list[Any], items: list[Any]) -> None:
    """`out.extend(items)`, a PASS at a time with a check for interruption between passes."""
    n = len(items)
    if n <= PASS:
        out.extend(items)
        return
    check = interrupt.current.get().check
    for i in range(0, n, PASS):
        check()
        out.extend(items[i : i + PASS])


def too_large(op: str, size: int) -> QueryError:
    """146, in the words of mongod's $range (and of limits.check_built), for a value of `size`
    bytes (as mongod measures them) that `op` would build past limits.MAX_BUILT_BYTES."""
    return QueryError(
        "ExceededMemoryLimit",
        f"{op} would use too much memory ({size} bytes) and cannot spill to disk. "
        f"Memory limit: {limits.MAX_BUILT_BYTES} bytes",
    )


def check_string_length(chars: int) -> None:
    """16493 before a string of `chars` characters is built, when it would reach 16 MB (its
    UTF-8 bytes are at least its characters: limits.check_built measures the rest once built)."""
    if chars >= limits.MAX_STRING_BYTES:
        raise QueryError(
            "Location16493",
            f"Tried to create string longer than {limits.MAX_STRING_BYTES // (1024 * 1024)}MB",
        )


def charge_up_front(op: str, n: int) -> None:
    """Charge `n` bytes an operator is about to build to the running scope (146 before a byte is
    built when they would take the server past its cap)."""
    scope = SCOPE.get()
    if scope is not None and n >= THRESHOLD:
        scope.charge(op, n)


__all__ = [
    "CHUNK",
    "PASS",
    "SCOPE",
    "THRESHOLD",
    "Built",
    "Scope",
    "charge_up_front",
    "check_string_length",
    "copy",
    "estimate",
    "guarded",
    "scoped",
    "too_large",
]
