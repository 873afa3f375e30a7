"""Stages that group documents: $group with its accumulators, $sortByCount, $bucket (a $group on
boundaries) and $count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg
from ebbdb.storage.aggregate.fields import group_key
from ebbdb.storage.aggregate.ordering import sort_docs
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, error
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_constant, type_name
from ebbdb.storage.execution import spill
from ebbdb.storage.query.compare import compare, rank
from ebbdb.storage.query.expressions import (
    Accumulator,
    Expression,
    compile_accumulator,
    compile_expression,
)
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.projection import render_value as render
from ebbdb.storage.query.sort import SortSpec, parse_sort

# -- $group ------------------------------------------------------------------------------------------

#: A group's output fields: each name with a factory of its accumulator (one per group).
Accumulators = tuple[tuple[str, Callable[[], Accumulator]], ...]


def is_operator_object(value: Any) -> bool:
    """Whether `value` is a document whose first field names an operator (`{$sum: 1}`)."""
    return isinstance(value, Mapping) and bool(value) and str(next(iter(value))).startswith("$")


def _parse_accumulators(
    spec: Mapping[str, Any], defined: frozenset[str], skip_id: bool
) -> Accumulators:
    fields: list[tuple[str, Callable[[], Accumulator]]] = []
    for name, value in spec.items():
        if skip_id and name == "_id":
            continue
        if not is_operator_object(value):
            raise error(40234, f"The field '{name}' must be an accumulator object")
        if "." in name:
            raise error(40235, f"The field name '{name}' cannot contain '.'")
        if name.startswith("$"):
            raise error(40236, f"The field name '{name}' cannot be an operator name")
        if len(value) != 1:
            raise error(40238, f"The field '{name}' must specify one accumulator")
        op, arg = next(iter(value.items()))
        if isinstance(arg, list):
            raise error(40237, f"The {op} accumulator is a unary operator")
        fields.append((name, compile_accumulator(op, arg, defined)))
    return tuple(fields)


def _grouped(
    docs: Iterator[Doc],
    key_value_of: Callable[[Doc], Any],
    fields: Accumulators,
    ctx: Context,
    collate: bool = True,
    what: str = "$group",
) -> Iterator[Doc]:
    """The output of grouping `docs` by `key_value_of(doc)` with the accumulators `fields`, under
    the operation's memory limit for $group (storage/execution/spill.py)."""
    variables, collation = ctx.variables, ctx.collation if collate else None

    def key_of(doc: Doc) -> tuple[Any, Any]:
        key_value = key_value_of(doc)
        # Under a collation, keys it finds equal are one group, reported with the first key met.
        return group_key(
            key_value if collation is None else collation.collate(key_value)
        ), key_value

    def new_state() -> list[Accumulator]:
        return [factory() for _, factory in fields]

    def add(accs: list[Accumulator], doc: Doc) -> None:
        for acc in accs:
            acc.add(doc, variables)

    groups = spill.group(
        docs, key_of, new_state, add, ctx.limits, spill.dump_document, _decoded, what
    )
    for key_value, accs in groups:
        yield _group_output(key_value, accs, fields)


def _decoded(raw: bytes) -> Doc:
    return spill.load_document(raw)[0]


def _group_output(key_value: Any, accs: list[Accumulator], fields: Accumulators) -> Doc:
    out: Doc = {"_id": key_value}
    for (name, _), acc in zip(fields, accs):
        value = acc.result()
        # MongoDB reports an accumulator that saw only missing values as null, "so return objects
        # are predictable".
        out[name] = None if value is MISSING else value
    return out


class _Group(Stage, name="$group"):
    id_expr: Expression
    fields: Accumulators

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        def key_value_of(doc: Doc) -> Any:
            key_value = self.id_expr(doc, ctx.variables)
            return None if key_value is MISSING else key_value  # a missing _id groups as null

        yield from _grouped(docs, key_value_of, self.fields, ctx)


@STAGES.stage("$group", document=(15947, "a group's fields must be specified in an object"))
def _parse_group(spec: Any, defined: frozenset[str]) -> Stage:
    if "_id" not in spec:
        raise error(15955, "a group specification must include an _id")
    id_expr = compile_expression(spec["_id"], defined)
    return _Group(id_expr, _parse_accumulators(spec, defined, skip_id=True))


#: {count: {$sum: 1}}, the output of $sortByCount and of a $bucket without `output`.
_COUNT: Accumulators = (("count", compile_accumulator("$sum", 1)),)


def _sort_spec(spec: dict[str, Any]) -> SortSpec:
    parsed = parse_sort(spec)
    assert parsed is not None
    return parsed


_BY_COUNT = _sort_spec({"count": -1})
_BY_ID = _sort_spec({"_id": 1})


# -- $sortByCount ------------------------------------------------------------------------------------


class _SortByCount(Stage, name="$sortByCount"):
    expr: Expression

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        # MongoDB's own desugaring: {$group: {_id: expr, count: {$sum: 1}}}, {$sort: {count: -1}}.
        expr, variables = self.expr, ctx.variables

        def key_value_of(doc: Doc) -> Any:
            value = expr(doc, variables)
            return None if value is MISSING else value

        counted = _grouped(docs, key_value_of, _COUNT, ctx, False, "$sortByCount")
        yield from sort_docs(counted, _BY_COUNT, ctx)


@STAGES.stage("$sortByCount")
def _parse_sort_by_count(spec: Any, defined: frozenset[str]) -> Stage:
    if isinstance(spec, Mapping):
        if not spec or not str(next(iter(spec))).startswith("$"):
            raise error(
                40147,
                "the sortByCount field must be defined as a $-prefixed path or an expression"
                " inside an object",
            )
    elif isinstance(spec, str):
        if not spec.startswith("$"):
            raise error(
                40148, "the sortByCount field must be defined as a $-prefixed path or an expression"
            )
    else:
        raise error(40149, "the sortByCount field must be specified as a string or as an object")
    return _SortByCount(compile_expression(spec, defined))


# -- $bucket -----------------------------------------------------------------------------------------

_NO_DEFAULT: Any = object()


class _Bucket(Stage, name="$bucket"):
    group_by: Expression
    boundaries: tuple[Any, ...]
    default: Any  # _NO_DEFAULT when there is none
    fields: Accumulators | None  # None: {count: {$sum: 1}}

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        group_by, variables = self.group_by, ctx.variables

        def key_value_of(doc: Doc) -> Any:
            return self._bucket_of(group_by(doc, variables))

        # $bucket is a $group on the bucket's lower bound followed by a $sort on _id.
        rows = _grouped(docs, key_value_of, self.fields or _COUNT, ctx, False, "$bucket")
        yield from sort_docs(rows, _BY_ID, dataclasses.replace(ctx, collation=None))

    def _bucket_of(self, value: Any) -> Any:
        value = None if value is MISSING else value
        bounds = self.boundaries
        for lower, upper in zip(bounds, bounds[1:]):
            if compare(value, lower) >= 0 and compare(value, upper) < 0:
                return lower
        if self.default is _NO_DEFAULT:
            raise error(
                40066,
                "$switch could not find a matching branch for an input, and no default was"
                " specified.",
            )
        return self.default


def output_accumulators(spec: Mapping[str, Any], defined: frozenset[str]) -> Accumulators:
    """$bucket's and $bucketAuto's `output`: the accumulators of each bucket (no `_id` among them,
    unlike $group's)."""
    return _parse_accumulators(spec, defined, skip_id=False)


def _must(code: int, field: str, requirement: str) -> QueryError:
    """MongoDB's message for a $bucket option that breaks a rule."""
    return error(code, f"The $bucket '{field}' field must {requirement}.")


def _bucket_boundaries(value: list[Any], defined: frozenset[str]) -> list[Any]:
    for b in value:
        if not is_constant(b):
            raise _must(
                40191,
                "boundaries",
                f"be an array of constant values, but found value: {render(b)}",
            )
    if len(value) < 2:
        raise _must(40192, "boundaries", f"have at least 2 values, but found {len(value)} value(s)")
    for i in range(1, len(value)):
        lower, upper = value[i - 1], value[i]
        if rank(lower) != rank(upper):
            raise error(
                40193,
                "All values in the the 'boundaries' option to $bucket must have the same type."
                f" Found conflicting types {type_name(lower)} and {type_name(upper)}.",
            )
        if compare(lower, upper) >= 0:
            raise error(
                40194,
                f"The 'boundaries' option to $bucket must be sorted, but elements {i - 1} and {i}"
                f" are not in ascending order ({render(lower)} is not less than {render(upper)}).",
            )
    return value


def _bucket_group_by(value: Any, defined: frozenset[str]) -> Expression:
    if not (is_operator_object(value) or (isinstance(value, str) and value.startswith("$"))):
        raise _must(
            40202,
            "groupBy",
            f"be defined as a $-prefixed path or an expression, but found: {render(value)}",
        )
    return compile_expression(value, defined)


def _bucket_default(value: Any, defined: frozenset[str]) -> Any:
    if not is_constant(value):
        raise _must(40195, "default", f"be a constant expression, but found: {render(value)}")
    return value


class _BucketArgs(
    Arguments,
    not_document=Refusal(
        40201, "Argument to $bucket stage must be an object, but found type: {type}."
    ),
    unknown=Refusal(40197, "Unrecognized option to $bucket: {name}."),
    missing=Refusal(40198, "$bucket requires 'groupBy' and 'boundaries' to be specified."),
):
    group_by: Expression = arg("groupBy", required=True, parse=_bucket_group_by)
    boundaries: list[Any] = arg(
        "boundaries",
        Kind.ARRAY,
        required=True,
        mismatch=Refusal(
            40200, "The $bucket 'boundaries' field must be an array, but found type: {type}."
        ),
        parse=_bucket_boundaries,
    )
    default: Any = arg("default", default=_NO_DEFAULT, parse=_bucket_default)
    output: Accumulators | None = arg(
        "output",
        Kind.OBJECT,
        mismatch=Refusal(
            40196, "The $bucket 'output' field must be an object, but found type: {type}."
        ),
        parse=output_accumulators,
    )


@STAGES.stage("$bucket", arguments=_BucketArgs)
def _parse_bucket(a: _BucketArgs, defined: frozenset[str]) -> Stage:
    boundaries, default = a.boundaries, a.default
    if default is not _NO_DEFAULT and rank(default) == rank(boundaries[0]):
        if compare(default, boundaries[0]) >= 0 and compare(default, boundaries[-1]) < 0:
            raise _must(
                40199,
                "default",
                "be less than the lowest boundary or greater than or equal to the highest boundary",
            )
    return _Bucket(a.group_by, tuple(boundaries), default, a.output)


# -- $count ------------------------------------------------------------------------------------------


class _Count(Stage, name="$count"):
    field: str

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        n = sum(1 for _ in docs)
        if n:  # like $group, nothing in means nothing out
            yield {self.field: n}


@STAGES.stage("$count")
def _parse_count(spec: Any, defined: frozenset[str]) -> Stage:
    if type(spec) is not str or not spec:  # (not Code, a str subclass)
        code = 40157 if type(spec) is str else 40156
        raise error(code, "the count field must be a non-empty string")
    if spec.startswith("$"):
        raise error(40158, "the count field cannot be a $-prefixed path")
    if "\0" in spec:
        raise error(40159, "the count field cannot contain a null byte")
    if "." in spec:
        raise error(40160, "the count field cannot contain '.'")
    return _Count(spec)
