"""Stages that order and cut the stream: $sort, $skip, $limit and $sample."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bson import Decimal128

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg
from ebbdb.storage.aggregate.fields import field_path
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, error
from ebbdb.storage.core.footprint import LIST_SLOT, footprint
from ebbdb.storage.core.interrupt import current
from ebbdb.storage.core.values import INT64_MAX, INT64_MIN, is_number
from ebbdb.storage.execution.spill import Sorter, dump_document, load_document
from ebbdb.storage.query.compare import is_nan, number_value
from ebbdb.storage.query.metadata import check_keyword
from ebbdb.storage.query.projection import render_value as render
from ebbdb.storage.query.sort import SortSpec, parse_sort, sort_key

# -- $sort ------------------------------------------------------------------------------------------


class Sort(Stage, name="$sort"):
    keys: dict[str, Any]  # path -> 1 or -1, what a read's sort takes
    spec: SortSpec

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        yield from sort_docs(docs, self.spec, ctx)


def sort_docs(
    docs: Iterator[Doc],
    spec: SortSpec,
    ctx: Context,
    what: str = "$sort",
    size: Callable[[Doc], int] | None = None,
) -> Iterator[Doc]:
    """`docs` in `spec`'s order, stably, under the operation's memory limit for a blocking sort
    (past it: spilled to disk, or 292 without disk use); what it holds (`size(doc)`, by default
    its footprint) is charged to a tracker of the operation's named `what`."""
    limits = ctx.limits
    sorter: Sorter[Doc] = Sorter(
        sort_key(spec, ctx.collation),
        limits,
        dump_document,
        load_document,
        what=what,
        keys_in_payload=ctx.collation is None,
    )
    try:
        for doc in docs:
            sorter.add(doc, doc, footprint(doc, limits.sort_bytes) if size is None else size(doc))
    except BaseException:
        sorter.close()
        raise
    return sorter.result()


@STAGES.stage("$sort", document=(15973, "the $sort key specification must be an object"))
def _parse_sort(spec: Any, defined: frozenset[str]) -> Stage:
    if not spec:
        raise error(15976, "$sort stage must have at least one sort key")
    keys: dict[str, Any] = {}
    for path, direction in spec.items():
        field_path(path)
        if isinstance(direction, Mapping):
            if len(direction) != 1 or "$meta" not in direction:
                raise error(17312, "$meta is the only expression supported by $sort right now")
            check_keyword(direction["$meta"])
            keys[path] = {"$meta": direction["$meta"]}  # the read's sort takes it as it is
            continue
        if not is_number(direction):
            raise error(15974, f"Illegal key in $sort specification: {path}: {render(direction)}")
        if is_nan(direction) or number_value(direction) not in (1, -1):
            raise error(
                15975, "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
            )
        keys[path] = int(number_value(direction))
    parsed = parse_sort(keys)
    assert parsed is not None
    return Sort(keys, parsed)


# -- $skip, $limit -----------------------------------------------------------------------------------


class Skip(Stage, name="$skip"):
    count: int

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        return itertools.islice(docs, self.count, None)


class Limit(Stage, name="$limit"):
    count: int

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        return itertools.islice(docs, self.count)


@STAGES.stage("$skip")
def _parse_skip(spec: Any, defined: frozenset[str]) -> Stage:
    return Skip(_integer_argument("$skip", spec, 5107200))


@STAGES.stage("$limit")
def _parse_limit(spec: Any, defined: frozenset[str]) -> Stage:
    count = _integer_argument("$limit", spec, 5107201)
    if count == 0:
        raise error(15958, "the limit must be positive")
    return Limit(count)


def _integer_argument(stage: str, value: Any, code: int) -> int:
    """$skip's and $limit's argument: a non-negative whole number of any numeric type."""
    shown = f"{stage}: {render(value)}"
    if not is_number(value):
        raise error(code, f"invalid argument to {stage} stage: Expected a number in: {shown}")
    if is_nan(value):
        raise error(
            code,
            f"invalid argument to {stage} stage: Expected an integer, but found NaN in: {shown}",
        )
    number = number_value(value)
    try:
        whole = int(number)
    except (OverflowError, ValueError):  # infinities
        whole = None
    if whole is None or not INT64_MIN <= whole <= INT64_MAX:
        raise error(
            code,
            f"invalid argument to {stage} stage: Cannot represent as a 64-bit integer: {shown}",
        )
    if number != whole:
        reason = (
            "Cannot represent as a 64-bit integer"
            if isinstance(value, Decimal128)
            else "Expected an integer"
        )
        raise error(code, f"invalid argument to {stage} stage: {reason}: {shown}")
    if whole < 0:
        raise error(
            code, f"invalid argument to {stage} stage: Expected a non-negative number in: {shown}"
        )
    return whole


# -- $sample -----------------------------------------------------------------------------------------


class _Sample(Stage, name="$sample"):
    size: int

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        # A reservoir: only `size` documents are ever held (counted), whatever the input.
        size = self.size
        kept: list[Doc] = []
        held: list[int] = []  # what each kept document holds
        tracker = current.get().memory.child("$sample")
        try:
            for seen, doc in enumerate(docs):
                if seen < size:
                    at = len(kept)
                    kept.append(doc)
                    held.append(0)
                else:
                    at = random.randrange(seen + 1)
                    if at >= size:
                        continue
                    kept[at] = doc
                    tracker.release(held[at])
                n = footprint(doc) + LIST_SLOT
                tracker.charge(n)
                held[at] = n
            random.shuffle(kept)
            yield from kept
        finally:
            tracker.close()


def _sample_size(value: Any, defined: frozenset[str]) -> int:
    number = number_value(value)
    if is_nan(value) or number < 0:
        raise error(28747, "size argument to $sample must not be negative")
    return int(number)


class _SampleArgs(
    Arguments,
    not_document=Refusal(28745, "the $sample stage specification must be an object"),
    unknown=Refusal(28748, "unrecognized option to $sample: {name}"),
    missing=Refusal(28749, "$sample stage must specify a size"),
):
    size: int = arg(
        "size",
        Kind.NUMBER,
        required=True,
        mismatch=Refusal(28746, "size argument to $sample must be a number"),
        parse=_sample_size,
    )


@STAGES.stage("$sample", arguments=_SampleArgs)
def _parse_sample(a: _SampleArgs, defined: frozenset[str]) -> Stage:
    return _Sample(a.size)
