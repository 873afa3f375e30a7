"""The aggregation pipeline: stages parsed once with MongoDB 7.0's checks and error codes, then run
as generators over decoded documents, reading collections through a Source. EngineSource reads via
the query engine, so expired documents never enter a pipeline, whether read first or joined.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

import bson
from bson import Decimal128, Int64, Regex

from storage.documents import CODEC
from storage.engine import Engine
from storage.errors import QueryError
from storage.execute import QueryRun, QuerySpec
from storage.planner import Plan
from storage.query.compare import (
    RANK_BINDATA,
    RANK_BOOL,
    RANK_DATE,
    RANK_NUMBER,
    RANK_OBJECTID,
    RANK_STRING,
    RANK_TIMESTAMP,
    compare,
    date_ms,
    is_nan,
    number_value,
    rank,
)
from storage.query.expressions import (
    Accumulator,
    Expression,
    compile_accumulator,
    compile_expression,
)
from storage.query.match import Predicate, compile_filter
from storage.query.paths import MISSING

# The projection module already prints values and type names exactly as MongoDB's messages do.
from storage.query.projection import EXCLUDE, INCLUDE, field_path, type_name
from storage.query.projection import render_value as render
from storage.query.sort import SortSpec, parse_sort, sort_documents

Doc = dict[str, Any]
Variables = Mapping[str, Any]

#: Documents one engine read returns per chunk (each chunk is one short read transaction).
READ_CHUNK = 256
_NO_BYTE_LIMIT = 1 << 62

# FieldPath accepts these `$` names (DBRef parts); any other `$` field name is invalid.
_DOLLAR_FIELDS = frozenset(("$id", "$ref", "$db"))

# $redact's system variables and the values they stand for.
_REDACT_VARIABLES = {"DESCEND": "descend", "PRUNE": "prune", "KEEP": "keep"}


def _error(code: int, message: str) -> QueryError:
    return QueryError(f"Location{code}", message)


# -- reading collections -----------------------------------------------------------------------------


class Source(Protocol):
    """How stages read collections. `documents` yields the documents of `collection` (none if it does
    not exist) that match `filter`, in `sort` order, after `skip`, at most `limit` (0: no limit).
    Raises QueryError for a malformed filter or sort."""

    def documents(
        self,
        collection: str,
        filter: dict[str, Any] | None = None,
        sort: dict[str, Any] | None = None,
        skip: int = 0,
        limit: int = 0,
    ) -> Iterator[dict[str, Any]]: ...


class EngineSource:
    """A Source over the engine: reads through QueryRun, so the planner picks an index for the
    pushed-down filter and sort, and documents expired at `now_ms` never appear. Each chunk is read
    in its own short transaction, so a pipeline consumed over many batches never holds one open;
    `now_ms` may be moved between batches (the cursor does, as it does for find).

    `plans` keeps the plan of the latest read of each collection and `docs_examined` /
    `keys_examined` add up over all reads (for explain and tests)."""

    def __init__(self, engine: Engine, db: str, now_ms: int) -> None:
        self.engine = engine
        self.db = db
        self.now_ms = now_ms
        self.plans: dict[str, Plan] = {}
        self.docs_examined = 0
        self.keys_examined = 0

    def documents(
        self,
        collection: str,
        filter: dict[str, Any] | None = None,
        sort: dict[str, Any] | None = None,
        skip: int = 0,
        limit: int = 0,
    ) -> Iterator[dict[str, Any]]:
        # Parsed here, not in the generator, so a bad filter fails when the read is set up.
        spec = QuerySpec.parse(filter, None, sort, skip, limit)
        return self._read(collection, spec)

    def _read(self, collection: str, spec: QuerySpec) -> Iterator[dict[str, Any]]:
        coll = self.engine.collection(self.db, collection)
        if coll is None:
            return
        run = QueryRun(coll, spec)
        self.plans[collection] = run.plan
        buffered: deque[Doc] = deque()
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
                buffered.extend(bson.decode(raw, CODEC) for raw in chunk)
            elif self.now_ms != read_at:
                # The clock moved (a new batch) while documents read earlier wait here: keep only
                # those still not expired, so each batch hides what expired before it, as find's.
                read_at = self.now_ms
                buffered = deque(self._alive(collection, list(buffered)))
            else:
                yield buffered.popleft()

    def _alive(self, collection: str, docs: list[Doc]) -> list[Doc]:
        """The documents among `docs` still stored and not expired at `now_ms` (looked up by
        `_id`, in their original order)."""
        coll = self.engine.collection(self.db, collection)
        if coll is None:
            return []
        spec = QuerySpec.parse({"_id": {"$in": [d["_id"] for d in docs]}})
        run = QueryRun(coll, spec)
        alive: set[Any] = set()
        while not run.exhausted:
            for raw in run.next_chunk(self.engine, READ_CHUNK, _NO_BYTE_LIMIT, now_ms=self.now_ms):
                alive.add(_group_key(bson.decode(raw, CODEC)["_id"]))
        return [d for d in docs if _group_key(d["_id"]) in alive]


# -- the parsed pipeline -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    source: Source
    variables: Variables


class Stage:
    """One parsed stage: `run` turns the stream of documents before it into the stream after it."""

    name: ClassVar[str] = ""

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        raise NotImplementedError


@dataclass(frozen=True)
class Pipeline:
    """A parsed pipeline: its stages, in order."""

    stages: tuple[Stage, ...]

    @property
    def collectionless(self) -> bool:
        """Whether it starts with $documents (and so reads no collection)."""
        return bool(self.stages) and isinstance(self.stages[0], _Documents)


def run_pipeline(
    pipeline: Pipeline, source: Source, collection: str | None, variables: Mapping[str, Any]
) -> Iterator[dict[str, Any]]:
    """The pipeline's results, lazily. `collection` None runs a collection-less pipeline (one that
    starts with $documents). `variables` maps user variable names (the command's `let`, "NOW") to
    values. Raises QueryError (InvalidNamespace) for a pipeline that does not fit `collection`, and,
    while iterating, for errors MongoDB raises at run time."""
    stages = pipeline.stages
    if collection is None:
        if not stages:
            raise QueryError(
                "InvalidNamespace", "{aggregate: 1} is not valid for an empty pipeline."
            )
        if not pipeline.collectionless:
            raise QueryError(
                "InvalidNamespace",
                f"{{aggregate: 1}} is not valid for '{stages[0].name}'; a collection is required.",
            )
    elif pipeline.collectionless:
        raise QueryError("InvalidNamespace", "'$documents' can only be run with {aggregate: 1}")
    return _run(stages, source, collection, variables)


def _run(
    stages: tuple[Stage, ...], source: Source, collection: str | None, variables: Variables
) -> Iterator[Doc]:
    """Chain the stages over their input: nothing for a pipeline that starts with $documents (which
    makes its own), else a read of `collection` with what the leading stages push down."""
    ctx = _Context(source, variables)
    docs: Iterator[Doc]
    if stages and isinstance(stages[0], _Documents):
        docs = iter(())
    elif collection is None:
        raise QueryError(
            "FailedToParse", "a pipeline without a collection must start with $documents"
        )
    else:
        read, stages = _plan_read(stages, variables)
        if read.empty:
            docs = iter(())
        else:
            docs = source.documents(collection, read.filter, read.sort, read.skip, read.limit)
    for stage in stages:
        docs = stage.run(docs, ctx)
    return docs


# -- push-down ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Read:
    filter: dict[str, Any] | None = None
    sort: dict[str, Any] | None = None
    skip: int = 0
    limit: int = 0
    empty: bool = False  # a $limit/$skip combination that leaves nothing


def _plan_read(stages: tuple[Stage, ...], variables: Variables) -> tuple[_Read, tuple[Stage, ...]]:
    """What of the leading stages the first read can do, and the stages left to run here: leading
    $match filters and one $sort among them (filtering commutes with sorting), then the $skip and
    $limit right after. The read's filter and sort go to the planner, so an index serves them."""
    clauses: list[dict[str, Any]] = []
    sort: dict[str, Any] | None = None
    i = 0
    while i < len(stages):
        stage = stages[i]
        if isinstance(stage, _Match):
            if stage.predicate is None:
                # $expr depends on the variables and is checked here; its equalities with values
                # the variables fix ({$eq: ["$f", "$$v"]}, the usual $lookup join) still narrow the
                # read. Sorting first is still right: filtering keeps the order.
                narrowing = _narrowing(stage.filter, variables)
                return _Read(_conjunction(clauses + narrowing), sort), stages[i:]
            if stage.filter:
                clauses.append(stage.filter)
        elif isinstance(stage, _Sort) and sort is None:
            sort = stage.keys
        else:
            break
        i += 1
    skip = 0
    limit: int | None = None
    while i < len(stages):
        stage = stages[i]
        if isinstance(stage, _Skip):
            skip += stage.count
            if limit is not None:
                limit = max(limit - stage.count, 0)
        elif isinstance(stage, _Limit):
            limit = stage.count if limit is None else min(limit, stage.count)
        else:
            break
        i += 1
    read = _Read(_conjunction(clauses), sort, skip, limit or 0, empty=limit == 0)
    return read, stages[i:]


def _conjunction(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _contains_expr(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(k == "$expr" or _contains_expr(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_contains_expr(v) for v in value)
    return False


def _narrowing(flt: Mapping[str, Any], variables: Variables) -> list[dict[str, Any]]:
    """Filters every document matching `flt` also matches (a superset, so the $match stays): its
    plain top-level conditions and the equalities its $expr states with fixed values."""
    out: list[dict[str, Any]] = []
    for key, value in flt.items():
        if key == "$expr":
            out += _expr_equalities(value, variables)
        elif not _contains_expr({key: value}):
            out.append({key: value})
    return out


def _expr_equalities(spec: Any, variables: Variables) -> list[dict[str, Any]]:
    if not isinstance(spec, Mapping) or len(spec) != 1:
        return []
    op, arg = next(iter(spec.items()))
    if op == "$and" and isinstance(arg, list):
        return [c for a in arg for c in _expr_equalities(a, variables)]
    if op != "$eq" or not isinstance(arg, list) or len(arg) != 2:
        return []
    for path, other in (arg, arg[::-1]):
        if not (isinstance(path, str) and path.startswith("$") and not path.startswith("$$")):
            continue
        value = _fixed_value(other, variables)
        # Only scalars: for them {$expr: {$eq: ["$f", v]}} implies the matcher's {f: v} (an array or
        # a path through arrays gives an array in $expr, never equal to a scalar), while null,
        # arrays, documents and regexes mean other things to the matcher.
        if value is not MISSING and rank(value) in _NARROWING_RANKS and not is_nan(value):
            return [{path[1:]: {"$eq": value}}]
    return []


_NARROWING_RANKS = frozenset(
    (RANK_NUMBER, RANK_STRING, RANK_OBJECTID, RANK_BOOL, RANK_DATE, RANK_BINDATA, RANK_TIMESTAMP)
)


def _fixed_value(spec: Any, variables: Variables) -> Any:
    """The value of an expression that does not depend on the document, or MISSING."""
    if isinstance(spec, str) and spec.startswith("$$"):
        name = spec[2:].partition(".")[0]
        if name in ("ROOT", "CURRENT") or name not in variables:
            return MISSING
        try:
            return compile_expression(spec, frozenset(variables))({}, variables)
        except QueryError:
            return MISSING
    if isinstance(spec, str):
        return MISSING if spec.startswith("$") else spec
    if isinstance(spec, (Mapping, list)) or spec is None:
        return MISSING
    return spec


# -- parsing -------------------------------------------------------------------------------------


def parse_pipeline(stages: list[Any], defined: frozenset[str] = frozenset()) -> Pipeline:
    """Parse and validate a pipeline. `defined` names the user variables in scope (the command's
    `let`). Raises QueryError with MongoDB's codeName (or `Location<code>`) for a malformed stage,
    a stage in a place it may not be, and NotImplemented for stages ebbdb does not run."""
    return _parse(stages, defined, None)


def _pipeline_array(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        raise QueryError("TypeMismatch", "'pipeline' option must be specified as an array")
    for element in value:
        if not isinstance(element, Mapping):
            raise QueryError(
                "TypeMismatch", "Each element of the 'pipeline' array must be an object"
            )
    return value


# Stages that must come first / last, and where sub-pipelines may not hold a stage.
_FIRST_ONLY = frozenset(
    "$documents $geoNear $changeStream $collStats $indexStats $currentOp $listSessions"
    " $listLocalSessions $search $searchMeta $vectorSearch $planCacheStats $listSearchIndexes"
    " $shardedDataDistribution $querySettings".split()
)
_LAST_ONLY = frozenset(("$out", "$merge"))
_NOT_IN_FACET = frozenset(
    "$out $merge $facet $geoNear $collStats $indexStats $changeStream $search $searchMeta"
    " $vectorSearch $planCacheStats $documents".split()
)
_NOT_IN_SUBPIPELINE = frozenset(("$out", "$merge", "$changeStream"))
_NOT_IMPLEMENTED = frozenset(
    "$out $merge $geoNear $changeStream $collStats $indexStats $currentOp $listSessions"
    " $listLocalSessions $search $searchMeta $vectorSearch $planCacheStats $graphLookup"
    " $setWindowFields $densify $fill $bucketAuto $listSearchIndexes $shardedDataDistribution"
    " $querySettings $changeStreamSplitLargeEvent".split()
)


def _parse(raw: Any, defined: frozenset[str], within: str | None) -> Pipeline:
    """Parse a pipeline; `within` names the enclosing stage of a sub-pipeline ($facet, $lookup,
    $unionWith), which restricts what it may hold."""
    specs = _pipeline_array(raw)
    names: list[str] = []
    stages: list[Stage | None] = []
    for spec in specs:
        if len(spec) != 1:
            raise _error(
                40323, "A pipeline stage specification object must contain exactly one field."
            )
        name, arg = next(iter(spec.items()))
        if name in _NOT_IMPLEMENTED:
            names.append(name)
            stages.append(None)  # reported once the pipeline's shape is known to be valid
            continue
        parser = _PARSERS.get(name)
        if parser is None:
            raise _error(40324, f"Unrecognized pipeline stage name: '{name}'")
        names.append(name)
        stages.append(parser(arg, defined))
    # MongoDB checks positions after parsing every stage, then what a sub-pipeline may hold.
    for i, name in enumerate(names):
        if name in _FIRST_ONLY and i != 0:
            raise _error(40602, f"{name} is only valid as the first stage in a pipeline")
        if name in _LAST_ONLY and i != len(names) - 1:
            raise _error(40601, f"{name} can only be the final stage in the pipeline")
    for name in names:
        if within == "$facet" and name in _NOT_IN_FACET:
            raise _error(40600, f"{name} is not allowed to be used within a $facet stage")
        if within == "$lookup" and name in _NOT_IN_SUBPIPELINE:
            raise _error(51047, f"{name} is not allowed within a $lookup's sub-pipeline")
        if within == "$unionWith" and name in _NOT_IN_SUBPIPELINE:
            raise _error(31441, f"{name} is not allowed within a $unionWith's sub-pipeline")
    for name, stage in zip(names, stages):
        if stage is None:
            raise QueryError("NotImplemented", f"the {name} stage is not supported")
    return Pipeline(tuple(s for s in stages if s is not None))


def _field_path(path: str, fail: Callable[[int, str], QueryError] = _error) -> tuple[str, ...]:
    """MongoDB's FieldPath checks, with its codes (the projection's, with the `$` names a
    pipeline accepts)."""
    return field_path(path, fail, _DOLLAR_FIELDS)


def _dollar_path(path: str) -> tuple[str, ...]:
    """The parts of a `$`-prefixed field path such as $unwind's."""
    return _field_path(path[1:])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal128)) and not isinstance(value, bool)


def _is_constant(value: Any) -> bool:
    """A literal with no field path and no operator inside (what $bucket accepts as constant)."""
    if isinstance(value, str):
        return not value.startswith("$")
    if isinstance(value, list):
        return all(_is_constant(v) for v in value)
    if isinstance(value, Mapping):
        return all(not k.startswith("$") and _is_constant(v) for k, v in value.items())
    return True


def _integer_argument(stage: str, value: Any, code: int) -> int:
    """$skip's and $limit's argument: a non-negative whole number of any numeric type."""
    shown = f"{stage}: {render(value)}"
    if not _is_number(value):
        raise _error(code, f"invalid argument to {stage} stage: Expected a number in: {shown}")
    if is_nan(value):
        raise _error(
            code,
            f"invalid argument to {stage} stage: Expected an integer, but found NaN in: {shown}",
        )
    number = number_value(value)
    try:
        whole = int(number)
    except (OverflowError, ValueError):  # infinities
        whole = None
    if whole is None or not -(2**63) <= whole < 2**63:
        raise _error(
            code,
            f"invalid argument to {stage} stage: Cannot represent as a 64-bit integer: {shown}",
        )
    if number != whole:
        reason = (
            "Cannot represent as a 64-bit integer"
            if isinstance(value, Decimal128)
            else "Expected an integer"
        )
        raise _error(code, f"invalid argument to {stage} stage: {reason}: {shown}")
    if whole < 0:
        raise _error(
            code, f"invalid argument to {stage} stage: Expected a non-negative number in: {shown}"
        )
    return whole


# -- path helpers (aggregation semantics: no traversal of arrays) ------------------------------------


def _get_path(doc: Any, parts: tuple[str, ...]) -> Any:
    for part in parts:
        if not isinstance(doc, dict):
            return MISSING
        doc = doc.get(part, MISSING)
        if doc is MISSING:
            return MISSING
    return doc


def _with_path(doc: Doc, parts: tuple[str, ...], value: Any) -> Doc:
    """A copy of `doc` with `value` at `parts`; what is in the way (a scalar, an array) is replaced
    by documents, as MongoDB's setNestedField does."""
    out = dict(doc)
    head = parts[0]
    if len(parts) == 1:
        out[head] = value
    else:
        child = doc.get(head)
        out[head] = _with_path(child if isinstance(child, dict) else {}, parts[1:], value)
    return out


def _without_path(doc: Doc, parts: tuple[str, ...]) -> Doc:
    head = parts[0]
    if head not in doc:
        return doc
    out = dict(doc)
    if len(parts) == 1:
        del out[head]
    elif isinstance(doc[head], dict):
        out[head] = _without_path(doc[head], parts[1:])
    return out


# -- $match --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Match(Stage):
    filter: dict[str, Any]
    # None when the filter uses $expr: it is compiled per run, with that run's variables.
    predicate: Predicate | None
    name = "$match"

    @classmethod
    def of(cls, flt: dict[str, Any], defined: frozenset[str] = frozenset()) -> _Match:
        if _contains_expr(flt):
            # Compiled now only to report a malformed $expr at parse time, as MongoDB does.
            compile_filter(flt, dict.fromkeys(defined))
            return cls(flt, None)
        return cls(flt, compile_filter(flt))

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        predicate = self.predicate or compile_filter(self.filter, ctx.variables)
        return (d for d in docs if predicate(d))


def _parse_match(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise _error(15959, "the match filter must be an expression in an object")
    return _Match.of(dict(spec), defined)


# -- $project, $addFields / $set, $unset ---------------------------------------------------------


class _Tree:
    """A projection or $addFields spec as a tree: each child is _INCLUDE, _EXCLUDE, a _Computed
    field or a sub-tree, in the order the spec names them."""

    __slots__ = ("children", "computed")

    def __init__(self) -> None:
        self.children: dict[str, Any] = {}
        self.computed = False  # whether the subtree holds computed fields


# A field of a $project/$addFields tree included or excluded whole (the projection's own markers).
_INCLUDE = INCLUDE
_EXCLUDE = EXCLUDE


@dataclass(frozen=True)
class _Computed:
    expr: Expression


def _mark_computed(tree: _Tree) -> bool:
    found = False
    for child in tree.children.values():
        if isinstance(child, _Tree):
            found = _mark_computed(child) or found
        elif isinstance(child, _Computed):
            found = True
    tree.computed = found
    return found


class _TreeParser:
    """Parses $project, $addFields and $unset specs into a _Tree, with MongoDB's projection checks
    (the mode is decided by the first inclusion, exclusion or computed field)."""

    def __init__(self, stage: str, defined: frozenset[str], computed_only: bool) -> None:
        self.stage = stage
        self.defined = defined
        self.computed_only = computed_only  # $addFields: every leaf is an expression
        self.root = _Tree()
        self.inclusion: bool | None = None
        self.id_flag: bool | None = None
        self.id_specified = False

    def fail(self, code: int, message: str) -> QueryError:
        return _error(code, f"Invalid {self.stage} :: caused by :: {message}")

    def element(self, prefix: tuple[str, ...], name: str, value: Any) -> None:
        path = prefix + _field_path(name, self.fail)
        if not prefix and path[0] == "_id":
            self.id_specified = True
        if isinstance(value, Mapping) and value:
            if next(iter(value)).startswith("$"):
                self.computed(path, value)
            else:
                for child_name, child_value in value.items():
                    self.element(path, child_name, child_value)
        elif isinstance(value, Mapping) and not self.computed_only:
            raise self.fail(
                51270, "An empty sub-projection is not a valid value. Found empty object at path"
            )
        elif not self.computed_only and (isinstance(value, bool) or _is_number(value)):
            self.flag(path, _truthy_flag(value))
        else:
            self.computed(path, value)

    def flag(self, path: tuple[str, ...], include: bool) -> None:
        if path == ("_id",):
            self.id_flag = include
            self.place(path, _INCLUDE if include else _EXCLUDE)
            return
        shown = ".".join(path)
        if include:
            if self.inclusion is False:
                raise self.fail(
                    31253, f"Cannot do inclusion on field {shown} in exclusion projection"
                )
            self.inclusion = True
            self.place(path, _INCLUDE)
        else:
            if self.inclusion is True:
                raise self.fail(
                    31254, f"Cannot do exclusion on field {shown} in inclusion projection"
                )
            self.inclusion = False
            self.place(path, _EXCLUDE)

    def computed(self, path: tuple[str, ...], spec: Any) -> None:
        if self.inclusion is False:
            raise self.fail(31252, "Cannot use expression other than $meta in exclusion projection")
        if not self.computed_only:
            self.inclusion = True
        self.place(path, _Computed(compile_expression(spec, self.defined)))

    def place(self, path: tuple[str, ...], entry: Any) -> None:
        node = self.root
        for i, part in enumerate(path):
            child = node.children.get(part)
            if i == len(path) - 1:
                if child is not None:
                    raise self.fail(31250, f"Path collision at {'.'.join(path)}")
                node.children[part] = entry
                return
            if child is None:
                child = node.children[part] = _Tree()
            elif not isinstance(child, _Tree):
                raise self.fail(
                    31249,
                    f"Path collision at {'.'.join(path)} remaining portion {'.'.join(path[1:])}",
                )
            node = child


def _truthy_flag(value: Any) -> bool:
    if isinstance(value, Decimal128):
        return not value.to_decimal().is_zero()
    return bool(value)


def _include_doc(doc: Doc, tree: _Tree) -> Doc:
    """The included fields of `doc`, in the document's order."""
    out: Doc = {}
    for key, value in doc.items():
        entry = tree.children.get(key)
        if entry is _INCLUDE:
            out[key] = value
        elif isinstance(entry, _Tree):
            sub = _include_value(value, entry)
            if sub is not MISSING:
                out[key] = sub
    return out


def _include_value(value: Any, tree: _Tree) -> Any:
    # Inclusion below a scalar keeps nothing; arrays keep their documents (and nested arrays).
    if isinstance(value, dict):
        return _include_doc(value, tree)
    if isinstance(value, list):
        kept = (_include_value(v, tree) for v in value)
        return [v for v in kept if v is not MISSING]
    return MISSING


def _exclude_doc(doc: Doc, tree: _Tree) -> Doc:
    out: Doc = {}
    for key, value in doc.items():
        entry = tree.children.get(key)
        if entry is _EXCLUDE:
            continue
        out[key] = _exclude_value(value, entry) if isinstance(entry, _Tree) else value
    return out


def _exclude_value(value: Any, tree: _Tree) -> Any:
    if isinstance(value, dict):
        return _exclude_doc(value, tree)
    if isinstance(value, list):
        return [_exclude_value(v, tree) for v in value]
    return value


def _add_computed(out: Doc, tree: _Tree, root: Doc, variables: Variables) -> None:
    """Set the tree's computed fields in `out` (a document this stage owns), in spec order: an
    existing field keeps its place, a new one goes last, and one that evaluates to missing goes."""
    for key, entry in tree.children.items():
        if isinstance(entry, _Computed):
            value = entry.expr(root, variables)
            if value is MISSING:
                out.pop(key, None)
            else:
                out[key] = value
        elif isinstance(entry, _Tree) and entry.computed:
            out[key] = _computed_value(out.get(key, MISSING), entry, root, variables)


def _computed_value(value: Any, tree: _Tree, root: Doc, variables: Variables) -> Any:
    # Computed subfields go into each element of an array; a scalar (or nothing) is replaced by a
    # document of the computed fields, as {"a.b": {$literal: 1}} turns {a: 1} into {a: {b: 1}}.
    if isinstance(value, list):
        return [_computed_value(v, tree, root, variables) for v in value]
    out = dict(value) if isinstance(value, dict) else {}
    _add_computed(out, tree, root, variables)
    return out


@dataclass(frozen=True)
class _Project(Stage):
    inclusion: bool
    tree: _Tree
    name = "$project"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        tree, variables = self.tree, ctx.variables
        if not self.inclusion:
            return (_exclude_doc(d, tree) for d in docs)
        if not tree.computed:
            return (_include_doc(d, tree) for d in docs)
        return (self._inclusion(d, variables) for d in docs)

    def _inclusion(self, doc: Doc, variables: Variables) -> Doc:
        out = _include_doc(doc, self.tree)
        _add_computed(out, self.tree, doc, variables)
        return out


def _parse_project(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise _error(15969, "$project specification must be an object")
    parser = _TreeParser("$project", defined, computed_only=False)
    if not spec:
        raise parser.fail(51272, "projection specification must have at least one field")
    for name, value in spec.items():
        parser.element((), name, value)
    inclusion = parser.inclusion
    if inclusion is None:
        inclusion = bool(parser.id_flag)  # only _id named: its flag decides
    if inclusion and not parser.id_specified:
        parser.root.children = {"_id": _INCLUDE, **parser.root.children}
    _mark_computed(parser.root)
    return _Project(inclusion, parser.root)


@dataclass(frozen=True)
class _AddFields(Stage):
    tree: _Tree
    stage_name: str
    name = "$addFields"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        return (self._apply(d, ctx.variables) for d in docs)

    def _apply(self, doc: Doc, variables: Variables) -> Doc:
        out = dict(doc)
        _add_computed(out, self.tree, doc, variables)
        return out


def _add_fields_parser(stage: str) -> Callable[[Any, frozenset[str]], Stage]:
    def parse(spec: Any, defined: frozenset[str]) -> Stage:
        if not isinstance(spec, Mapping):
            raise _error(
                40272, f"{stage} specification stage must be an object, got {type_name(spec)}"
            )
        parser = _TreeParser(stage, defined, computed_only=True)
        for name, value in spec.items():
            parser.element((), name, value)
        _mark_computed(parser.root)
        return _AddFields(parser.root, stage)

    return parse


def _parse_unset(spec: Any, defined: frozenset[str]) -> Stage:
    if isinstance(spec, str):
        spec = [spec]
    if not isinstance(spec, list):
        raise _error(31002, "$unset specification must be a string or an array")
    if not spec:
        raise _error(
            31119, "$unset specification must be a string or an array with at least one field"
        )
    if not all(isinstance(p, str) for p in spec):
        raise _error(
            31120, "$unset specification must be a string or an array containing only string values"
        )
    parser = _TreeParser("$unset", defined, computed_only=False)
    for path in spec:
        parser.place(_field_path(path, parser.fail), _EXCLUDE)
    return _Project(False, parser.root)


# -- $sort, $skip, $limit, $count, $sample -------------------------------------------------------


@dataclass(frozen=True)
class _Sort(Stage):
    keys: dict[str, Any]  # path -> 1 or -1, what a read's sort takes
    spec: SortSpec
    name = "$sort"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        rows = [(d, d) for d in docs]
        return iter(sort_documents(rows, self.spec))


def _parse_sort(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise _error(15973, "the $sort key specification must be an object")
    if not spec:
        raise _error(15976, "$sort stage must have at least one sort key")
    keys: dict[str, Any] = {}
    for path, direction in spec.items():
        _field_path(path)
        if isinstance(direction, Mapping):
            if direction.get("$meta") in ("textScore", "searchScore", "vectorSearchScore"):
                raise QueryError("NotImplemented", "sorting by $meta is not supported")
            raise _error(17312, "$meta is the only expression supported by $sort right now")
        if not _is_number(direction):
            raise _error(15974, f"Illegal key in $sort specification: {path}: {render(direction)}")
        if is_nan(direction) or number_value(direction) not in (1, -1):
            raise _error(
                15975, "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
            )
        keys[path] = int(number_value(direction))
    parsed = parse_sort(keys)
    assert parsed is not None
    return _Sort(keys, parsed)


@dataclass(frozen=True)
class _Skip(Stage):
    count: int
    name = "$skip"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        return itertools.islice(docs, self.count, None)


@dataclass(frozen=True)
class _Limit(Stage):
    count: int
    name = "$limit"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        return itertools.islice(docs, self.count)


def _parse_skip(spec: Any, defined: frozenset[str]) -> Stage:
    return _Skip(_integer_argument("$skip", spec, 5107200))


def _parse_limit(spec: Any, defined: frozenset[str]) -> Stage:
    count = _integer_argument("$limit", spec, 5107201)
    if count == 0:
        raise _error(15958, "the limit must be positive")
    return _Limit(count)


@dataclass(frozen=True)
class _Count(Stage):
    field: str
    name = "$count"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        n = sum(1 for _ in docs)
        if n:  # like $group, nothing in means nothing out
            yield {self.field: n}


def _parse_count(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, str):
        raise _error(40156, "the count field must be a non-empty string")
    if not spec:
        raise _error(40157, "the count field must be a non-empty string")
    if spec.startswith("$"):
        raise _error(40158, "the count field cannot be a $-prefixed path")
    if "\0" in spec:
        raise _error(40159, "the count field cannot contain a null byte")
    if "." in spec:
        raise _error(40160, "the count field cannot contain '.'")
    return _Count(spec)


@dataclass(frozen=True)
class _Sample(Stage):
    size: int
    name = "$sample"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        rows = list(docs)
        return iter(random.sample(rows, min(self.size, len(rows))))


def _parse_sample(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise _error(28745, "the $sample stage specification must be an object")
    size: int | None = None
    for name, value in spec.items():
        if name != "size":
            raise _error(28748, f"unrecognized option to $sample: {name}")
        if not _is_number(value):
            raise _error(28746, "size argument to $sample must be a number")
        number = number_value(value)
        if is_nan(value) or number < 0:
            raise _error(28747, "size argument to $sample must not be negative")
        size = int(number)
    if size is None:
        raise _error(28749, "$sample stage must specify a size")
    return _Sample(size)


# -- $group, $sortByCount, $bucket ---------------------------------------------------------------


def _group_key(value: Any) -> Any:
    """A hashable stand-in for a value, equal for values MongoDB groups together (1, 1.0 and
    NumberLong(1); documents and arrays of such)."""
    r = rank(value)
    if r == RANK_NUMBER:
        # Python's int, float and Decimal hash alike when equal; NaNs all group together.
        return (r, "NaN") if is_nan(value) else (r, number_value(value))
    if r == RANK_STRING:
        return (r, value)
    if isinstance(value, dict):
        return (r, tuple((k, _group_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return (r, tuple(_group_key(v) for v in value))
    if r == RANK_DATE:
        return (r, date_ms(value))
    try:
        return (r, bson.encode({"": value}, codec_options=CODEC))
    except Exception:  # a value bson cannot encode (undefined): its text is as good
        return (r, repr(value))


Accumulators = tuple[tuple[str, Callable[[], Accumulator]], ...]


def _parse_accumulators(
    spec: Mapping[str, Any], defined: frozenset[str], skip_id: bool
) -> Accumulators:
    fields: list[tuple[str, Callable[[], Accumulator]]] = []
    for name, value in spec.items():
        if skip_id and name == "_id":
            continue
        if not (isinstance(value, Mapping) and value and str(next(iter(value))).startswith("$")):
            raise _error(40234, f"The field '{name}' must be an accumulator object")
        if "." in name:
            raise _error(40235, f"The field name '{name}' cannot contain '.'")
        if name.startswith("$"):
            raise _error(40236, f"The field name '{name}' cannot be an operator name")
        if len(value) != 1:
            raise _error(40238, f"The field '{name}' must specify one accumulator")
        op, arg = next(iter(value.items()))
        if isinstance(arg, list):
            raise _error(40237, f"The {op} accumulator is a unary operator")
        fields.append((name, compile_accumulator(op, arg, defined)))
    return tuple(fields)


def _accumulate(
    groups: dict[Any, tuple[Any, list[Accumulator]]],
    key_value: Any,
    doc: Doc,
    fields: Accumulators,
    variables: Variables,
) -> None:
    key = _group_key(key_value)
    group = groups.get(key)
    if group is None:
        group = groups[key] = (key_value, [factory() for _, factory in fields])
    for acc in group[1]:
        acc.add(doc, variables)


def _group_output(key_value: Any, accs: list[Accumulator], fields: Accumulators) -> Doc:
    out: Doc = {"_id": key_value}
    for (name, _), acc in zip(fields, accs):
        value = acc.result()
        # MongoDB reports an accumulator that saw only missing values as null, "so return objects
        # are predictable".
        out[name] = None if value is MISSING else value
    return out


@dataclass(frozen=True)
class _Group(Stage):
    id_expr: Expression
    fields: Accumulators
    name = "$group"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        variables = ctx.variables
        groups: dict[Any, tuple[Any, list[Accumulator]]] = {}
        for doc in docs:
            key_value = self.id_expr(doc, variables)
            # A missing _id groups with null and is reported as null.
            _accumulate(
                groups, None if key_value is MISSING else key_value, doc, self.fields, variables
            )
        for key_value, accs in groups.values():
            yield _group_output(key_value, accs, self.fields)


def _parse_group(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise _error(15947, "a group's fields must be specified in an object")
    if "_id" not in spec:
        raise _error(15955, "a group specification must include an _id")
    id_expr = compile_expression(spec["_id"], defined)
    return _Group(id_expr, _parse_accumulators(spec, defined, skip_id=True))


@dataclass(frozen=True)
class _SortByCount(Stage):
    expr: Expression
    name = "$sortByCount"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        counts: dict[Any, list[Any]] = {}
        for doc in docs:
            value = self.expr(doc, ctx.variables)
            value = None if value is MISSING else value
            entry = counts.setdefault(_group_key(value), [value, 0])
            entry[1] += 1
        ordered = sorted(counts.values(), key=lambda e: -cast(int, e[1]))
        return iter([{"_id": value, "count": n} for value, n in ordered])


def _parse_sort_by_count(spec: Any, defined: frozenset[str]) -> Stage:
    if isinstance(spec, Mapping):
        if not spec or not str(next(iter(spec))).startswith("$"):
            raise _error(
                40147,
                "the sortByCount field must be defined as a $-prefixed path or an expression"
                " inside an object",
            )
    elif isinstance(spec, str):
        if not spec.startswith("$"):
            raise _error(
                40148, "the sortByCount field must be defined as a $-prefixed path or an expression"
            )
    else:
        raise _error(40149, "the sortByCount field must be specified as a string or as an object")
    return _SortByCount(compile_expression(spec, defined))


_NO_DEFAULT: Any = object()


@dataclass(frozen=True)
class _Bucket(Stage):
    group_by: Expression
    boundaries: tuple[Any, ...]
    default: Any  # _NO_DEFAULT when there is none
    fields: Accumulators | None  # None: {count: {$sum: 1}}
    name = "$bucket"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        fields = self.fields or ()
        groups: dict[Any, tuple[Any, list[Accumulator]]] = {}
        counts: dict[Any, int] = {}
        for doc in docs:
            bucket = self._bucket_of(self.group_by(doc, ctx.variables))
            if self.fields is None:
                key = _group_key(bucket)
                counts[key] = counts.get(key, 0) + 1
                groups.setdefault(key, (bucket, []))
            else:
                _accumulate(groups, bucket, doc, fields, ctx.variables)
        rows = []
        for key, (bucket, accs) in groups.items():
            if self.fields is None:
                rows.append({"_id": bucket, "count": counts[key]})
            else:
                rows.append(_group_output(bucket, accs, fields))
        # $bucket is a $group on the bucket's lower bound followed by a $sort on _id.
        spec = parse_sort({"_id": 1})
        assert spec is not None
        return iter(sort_documents([(r, r) for r in rows], spec))

    def _bucket_of(self, value: Any) -> Any:
        value = None if value is MISSING else value
        bounds = self.boundaries
        for lower, upper in zip(bounds, bounds[1:]):
            if compare(value, lower) >= 0 and compare(value, upper) < 0:
                return lower
        if self.default is _NO_DEFAULT:
            raise _error(
                40066,
                "$switch could not find a matching branch for an input, and no default was"
                " specified.",
            )
        return self.default


def _parse_bucket(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise _error(
            40201,
            f"Argument to $bucket stage must be an object, but found type: {type_name(spec)}.",
        )
    group_by: Expression | None = None
    boundaries: list[Any] | None = None
    default: Any = _NO_DEFAULT
    fields: Accumulators | None = None
    for name, value in spec.items():
        if name == "groupBy":
            is_expr = (
                isinstance(value, Mapping) and value and str(next(iter(value))).startswith("$")
            )
            if not (is_expr or (isinstance(value, str) and value.startswith("$"))):
                raise _error(
                    40202,
                    "The $bucket 'groupBy' field must be defined as a $-prefixed path or an"
                    f" expression, but found: {render(value)}.",
                )
            group_by = compile_expression(value, defined)
        elif name == "boundaries":
            boundaries = _bucket_boundaries(value)
        elif name == "default":
            if not _is_constant(value):
                raise _error(
                    40195,
                    "The $bucket 'default' field must be a constant expression, but found:"
                    f" {render(value)}.",
                )
            default = value
        elif name == "output":
            if not isinstance(value, Mapping):
                raise _error(
                    40196,
                    f"The $bucket 'output' field must be an object, but found type: {type_name(value)}.",
                )
            fields = _parse_accumulators(value, defined, skip_id=False)
        else:
            raise _error(40197, f"Unrecognized option to $bucket: {name}.")
    if group_by is None or boundaries is None:
        raise _error(40198, "$bucket requires 'groupBy' and 'boundaries' to be specified.")
    if default is not _NO_DEFAULT and rank(default) == rank(boundaries[0]):
        if compare(default, boundaries[0]) >= 0 and compare(default, boundaries[-1]) < 0:
            raise _error(
                40199,
                "The $bucket 'default' field must be less than the lowest boundary or greater than"
                " or equal to the highest boundary.",
            )
    return _Bucket(group_by, tuple(boundaries), default, fields)


def _bucket_boundaries(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _error(
            40200,
            f"The $bucket 'boundaries' field must be an array, but found type: {type_name(value)}.",
        )
    for b in value:
        if not _is_constant(b):
            raise _error(
                40191,
                "The $bucket 'boundaries' field must be an array of constant values, but found"
                f" value: {render(b)}.",
            )
    if len(value) < 2:
        raise _error(
            40192,
            "The $bucket 'boundaries' field must have at least 2 values, but found"
            f" {len(value)} value(s).",
        )
    for i in range(1, len(value)):
        lower, upper = value[i - 1], value[i]
        if rank(lower) != rank(upper):
            raise _error(
                40193,
                "All values in the the 'boundaries' option to $bucket must have the same type."
                f" Found conflicting types {type_name(lower)} and {type_name(upper)}.",
            )
        if compare(lower, upper) >= 0:
            raise _error(
                40194,
                f"The 'boundaries' option to $bucket must be sorted, but elements {i - 1} and {i}"
                f" are not in ascending order ({render(lower)} is not less than {render(upper)}).",
            )
    return value


# -- $unwind -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Unwind(Stage):
    path: tuple[str, ...]
    index_path: tuple[str, ...] | None
    preserve: bool
    name = "$unwind"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        path, index = self.path, self.index_path
        for doc in docs:
            value = _get_path(doc, path)
            if isinstance(value, list) and value:
                for i, element in enumerate(value):
                    out = _with_path(doc, path, element)
                    # MongoDB reports the index as a long.
                    yield out if index is None else _with_path(out, index, Int64(i))
            elif isinstance(value, list):
                if self.preserve:  # an empty array is kept as if the field were missing
                    out = _without_path(doc, path)
                    yield out if index is None else _with_path(out, index, None)
            elif value is MISSING or value is None:
                if self.preserve:
                    yield doc if index is None else _with_path(doc, index, None)
            else:  # a scalar unwinds to itself
                yield doc if index is None else _with_path(doc, index, None)


def _parse_unwind(spec: Any, defined: frozenset[str]) -> Stage:
    path = ""
    preserve = False
    index: str | None = None
    if isinstance(spec, Mapping):
        for name, value in spec.items():
            if name == "path":
                if not isinstance(value, str):
                    raise _error(
                        28808,
                        f"expected a string as the path for $unwind stage, got {type_name(value)}",
                    )
                path = value
            elif name == "preserveNullAndEmptyArrays":
                if not isinstance(value, bool):
                    raise _error(
                        28809,
                        "expected a boolean for the preserveNullAndEmptyArrays option to $unwind"
                        f" stage, got {type_name(value)}",
                    )
                preserve = value
            elif name == "includeArrayIndex":
                if not isinstance(value, str) or not value:
                    raise _error(
                        28810,
                        "expected a non-empty string for the includeArrayIndex  option to $unwind"
                        f" stage, got {type_name(value)}",
                    )
                if value.startswith("$"):
                    raise _error(
                        28822,
                        "includeArrayIndex option to $unwind stage should not be prefixed with a"
                        f" '$': {value}",
                    )
                index = value
            else:
                raise _error(28811, f"unrecognized option to $unwind stage: {name}")
    elif isinstance(spec, str):
        path = spec
    else:
        raise _error(
            15981,
            "expected either a string or an object as specification for $unwind stage, got"
            f" {type_name(spec)}",
        )
    if not path:
        raise _error(28812, "no path specified to $unwind stage")
    if not path.startswith("$"):
        raise _error(28818, f"path option to $unwind stage should be prefixed with a '$': {path}")
    return _Unwind(_dollar_path(path), _field_path(index) if index is not None else None, preserve)


# -- $lookup, $unionWith, $facet -----------------------------------------------------------------


def _check_variable_name(name: str) -> None:
    """MongoDB's rules for a user variable name ($lookup's `let`); CURRENT may be rebound."""
    if name == "CURRENT":
        return
    if not name:
        raise _error(16866, "empty variable names are not allowed")
    first = name[0]
    if not (first.islower() and first.isascii()) and first.isascii():
        raise _error(16867, f"'{name}' starts with an invalid character for a user variable name")
    for c in name:
        if c.isascii() and not (c.isalnum() or c == "_"):
            raise _error(
                16868, f"'{name}' contains an invalid character for a variable name: '{c}'"
            )


def _local_values(doc: Any, parts: tuple[str, ...], i: int = 0) -> list[Any]:
    """The values $lookup joins on: arrays along the path are searched element by element (their
    documents only), and an array at the end contributes its elements."""
    if not isinstance(doc, dict):
        return []
    value = doc.get(parts[i], MISSING)
    if value is MISSING:
        return []
    if i == len(parts) - 1:
        return list(value) if isinstance(value, list) else [value]
    if isinstance(value, dict):
        return _local_values(value, parts, i + 1)
    if isinstance(value, list):
        return [v for e in value if isinstance(e, dict) for v in _local_values(e, parts, i + 1)]
    return []


def _join_filter(values: list[Any], foreign: str) -> dict[str, Any]:
    """The foreign filter for one local document: missing joins as null; several values join as
    $in, except that $in would match a regex as a pattern, so then an $or of equalities."""
    if not values:
        values = [None]
    if len(values) == 1:
        return {foreign: {"$eq": values[0]}}
    if any(isinstance(v, Regex) or type(v).__name__ == "Pattern" for v in values):
        return {"$or": [{foreign: {"$eq": v}} for v in values]}
    return {foreign: {"$in": values}}


@dataclass(frozen=True)
class _Lookup(Stage):
    collection: str | None
    as_path: tuple[str, ...]
    local: tuple[str, ...] | None
    foreign: str | None
    let: tuple[tuple[str, Expression], ...]
    pipeline: Pipeline | None
    name = "$lookup"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        for doc in docs:
            variables = ctx.variables
            if self.let:
                variables = {**variables, **{n: e(doc, ctx.variables) for n, e in self.let}}
            stages = self.pipeline.stages if self.pipeline is not None else ()
            if self.local is not None and self.foreign is not None:
                match = _Match.of(_join_filter(_local_values(doc, self.local), self.foreign))
                # The join's $match goes first, or right after a $documents that makes the input.
                at = 1 if stages and isinstance(stages[0], _Documents) else 0
                stages = (*stages[:at], match, *stages[at:])
            joined = list(_run(stages, ctx.source, self.collection, variables))
            yield _with_path(doc, self.as_path, joined)


def _parse_lookup(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise QueryError(
            "FailedToParse",
            f"the $lookup stage specification must be an object, but found {type_name(spec)}",
        )
    collection: str | None = None
    as_field = local = foreign = ""
    let: Mapping[str, Any] | None = None
    raw_pipeline: list[Mapping[str, Any]] | None = None
    for name, value in spec.items():
        if name == "pipeline":
            raw_pipeline = _pipeline_array(value)
            continue
        if name == "let":
            if not isinstance(value, Mapping):
                raise QueryError(
                    "FailedToParse",
                    f"$lookup argument 'let: {render(value)}' must be an object, is type"
                    f" {type_name(value)}",
                )
            let = value
            continue
        if name == "from":
            if not isinstance(value, str):
                raise QueryError(
                    "FailedToParse",
                    f"$lookup 'from' field must be a string, but found {type_name(value)}",
                )
            collection = value
            continue
        if not isinstance(value, str):
            raise QueryError(
                "FailedToParse",
                f"$lookup argument '{name}: {render(value)}' must be a string, found"
                f" {name}: {render(value)}: {type_name(value)}",
            )
        if name == "as":
            as_field = value
        elif name == "localField":
            local = value
        elif name == "foreignField":
            foreign = value
        else:
            raise QueryError("FailedToParse", f"unknown argument to $lookup: {name}")
    if collection is None:
        if raw_pipeline is None:
            raise QueryError("FailedToParse", "must specify 'pipeline' when 'from' is empty")
        if not raw_pipeline or "$documents" not in raw_pipeline[0]:
            raise QueryError(
                "FailedToParse",
                "$lookup stage without explicit collection must have a pipeline with $documents as"
                " first stage",
            )
    elif not collection:
        raise QueryError("InvalidNamespace", "invalid $lookup namespace: empty collection name")
    if not as_field:
        raise QueryError("FailedToParse", "must specify 'as' field for a $lookup")
    if raw_pipeline is not None:
        if bool(local) != bool(foreign):
            raise QueryError(
                "FailedToParse",
                "$lookup requires both or neither of 'localField' and 'foreignField' to be"
                " specified",
            )
    else:
        if not local or not foreign:
            raise QueryError(
                "FailedToParse",
                "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be"
                " specified",
            )
        if let is not None:
            raise QueryError(
                "FailedToParse", "$lookup with a 'let' argument must also specify 'pipeline'"
            )
    lets: list[tuple[str, Expression]] = []
    for name, expr in (let or {}).items():
        _check_variable_name(name)
        lets.append((name, compile_expression(expr, defined)))
    pipeline = None
    if raw_pipeline is not None:
        pipeline = _parse(raw_pipeline, defined | {n for n, _ in lets}, "$lookup")
    return _Lookup(
        collection,
        _field_path(as_field),
        _field_path(local) if local else None,
        ".".join(_field_path(foreign)) if foreign else None,
        tuple(lets),
        pipeline,
    )


@dataclass(frozen=True)
class _UnionWith(Stage):
    collection: str | None
    pipeline: Pipeline
    name = "$unionWith"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        yield from docs
        yield from _run(self.pipeline.stages, ctx.source, self.collection, ctx.variables)


def _parse_union_with(spec: Any, defined: frozenset[str]) -> Stage:
    if isinstance(spec, str):
        return _UnionWith(spec, Pipeline(()))
    if not isinstance(spec, Mapping):
        raise QueryError(
            "FailedToParse",
            "the $unionWith stage specification must be an object or string, but found"
            f" {type_name(spec)}",
        )
    collection: str | None = None
    raw: list[Mapping[str, Any]] = []
    for name, value in spec.items():
        if name == "coll":
            if not isinstance(value, str):
                raise QueryError(
                    "TypeMismatch",
                    f"BSON field '$unionWith.coll' is the wrong type '{type_name(value)}', expected"
                    " type 'string'",
                )
            collection = value
        elif name == "pipeline":
            if not isinstance(value, list):
                raise QueryError(
                    "TypeMismatch",
                    f"BSON field '$unionWith.pipeline' is the wrong type '{type_name(value)}',"
                    " expected type 'array'",
                )
            raw = _pipeline_array(value)
        else:
            raise _error(40415, f"BSON field '$unionWith.{name}' is an unknown field.")
    if collection is None and not (raw and "$documents" in raw[0]):
        raise QueryError(
            "FailedToParse",
            "$unionWith stage without explicit collection must have a pipeline with $documents as"
            " first stage",
        )
    return _UnionWith(collection, _parse(raw, defined, "$unionWith"))


@dataclass(frozen=True)
class _Facet(Stage):
    facets: tuple[tuple[str, Pipeline], ...]
    name = "$facet"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        rows = list(docs)
        out: Doc = {}
        for name, pipeline in self.facets:
            results: Iterator[Doc] = iter(rows)
            for stage in pipeline.stages:
                results = stage.run(results, ctx)
            out[name] = list(results)
        yield out


def _parse_facet(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping) or not spec:
        raise _error(
            40169,
            f"the $facet specification must be a non-empty object, but found: $facet: {render(spec)}",
        )
    facets = []
    for name, raw in spec.items():
        _field_path(name)
        if not isinstance(raw, list):
            raise _error(
                40170, f"arguments to $facet must be arrays, {name} is type {type_name(raw)}"
            )
        for element in raw:
            if not isinstance(element, Mapping) or not element:
                raise _error(
                    40171,
                    "elements of arrays in $facet spec must be non-empty objects, "
                    f"{name} argument contained an element of type {type_name(element)}:"
                    f" {render(element)}",
                )
        facets.append((name, _parse(raw, defined, "$facet")))
    return _Facet(tuple(facets))


# -- $replaceRoot / $replaceWith, $documents, $redact ----------------------------------------------


@dataclass(frozen=True)
class _ReplaceRoot(Stage):
    expr: Expression
    what: str  # how MongoDB's message names the expression
    name = "$replaceRoot"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        for doc in docs:
            value = self.expr(doc, ctx.variables)
            if not isinstance(value, dict):
                raise _not_a_document(self.what, value, doc)
            yield value


def _not_a_document(what: str, value: Any, doc: Doc) -> QueryError:
    shown, kind = ("MISSING", "missing") if value is MISSING else (render(value), type_name(value))
    # MongoDB's message has the double space.
    return _error(
        40228,
        f"{what}  must evaluate to an object, but resulting value was: {shown}. Type of resulting"
        f" value: '{kind}'. Input document: {render(doc)}",
    )


def _parse_replace_root(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise _error(
            40229,
            f"expected an object as specification for $replaceRoot stage, got {type_name(spec)}",
        )
    for name in spec:
        if name != "newRoot":
            raise _error(40415, f"BSON field '$replaceRoot.{name}' is an unknown field.")
    if "newRoot" not in spec:
        raise _error(40414, "BSON field '$replaceRoot.newRoot' is missing but a required field")
    return _ReplaceRoot(compile_expression(spec["newRoot"], defined), "'newRoot' expression")


def _parse_replace_with(spec: Any, defined: frozenset[str]) -> Stage:
    return _ReplaceRoot(compile_expression(spec, defined), "'replacement document'")


@dataclass(frozen=True)
class _Documents(Stage):
    expr: Expression
    name = "$documents"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        value = self.expr({}, ctx.variables)
        if not isinstance(value, list):
            raise _error(5858203, "an array is expected")
        for element in value:
            if not isinstance(element, dict):
                raise _not_a_document("'newRoot' expression", element, {})
            yield element


def _parse_documents(spec: Any, defined: frozenset[str]) -> Stage:
    return _Documents(compile_expression(spec, defined))


@dataclass(frozen=True)
class _Redact(Stage):
    expr: Expression
    name = "$redact"

    def run(self, docs: Iterator[Doc], ctx: _Context) -> Iterator[Doc]:
        variables = {**ctx.variables, **_REDACT_VARIABLES}
        for doc in docs:
            out = self._redact(doc, variables)
            if out is not None:
                yield out

    def _redact(self, doc: Doc, variables: Variables) -> Doc | None:
        # TODO: $$ROOT below the top level is the sub-document here, not the whole document (the
        # expression interface has one document argument for both).
        verdict = self.expr(doc, variables)
        if isinstance(verdict, str) and verdict == "keep":
            return doc
        if isinstance(verdict, str) and verdict == "prune":
            return None
        if not (isinstance(verdict, str) and verdict == "descend"):
            raise _error(
                17053,
                "$redact's expression should not return anything aside from the variables $$KEEP,"
                f" $$DESCEND, and $$PRUNE, but returned {render(verdict)}",
            )
        out: Doc = {}
        for key, value in doc.items():
            if isinstance(value, dict):
                sub = self._redact(value, variables)
                if sub is not None:
                    out[key] = sub
            elif isinstance(value, list):
                out[key] = self._redact_list(value, variables)
            else:
                out[key] = value
        return out

    def _redact_list(self, values: list[Any], variables: Variables) -> list[Any]:
        out: list[Any] = []
        for value in values:
            if isinstance(value, dict):
                sub = self._redact(value, variables)
                if sub is not None:
                    out.append(sub)
            elif isinstance(value, list):
                out.append(self._redact_list(value, variables))
            else:
                out.append(value)
        return out


def _parse_redact(spec: Any, defined: frozenset[str]) -> Stage:
    return _Redact(compile_expression(spec, defined | frozenset(_REDACT_VARIABLES)))


_PARSERS: dict[str, Callable[[Any, frozenset[str]], Stage]] = {
    "$match": _parse_match,
    "$project": _parse_project,
    "$addFields": _add_fields_parser("$addFields"),
    "$set": _add_fields_parser("$set"),
    "$unset": _parse_unset,
    "$sort": _parse_sort,
    "$skip": _parse_skip,
    "$limit": _parse_limit,
    "$count": _parse_count,
    "$group": _parse_group,
    "$unwind": _parse_unwind,
    "$lookup": _parse_lookup,
    "$unionWith": _parse_union_with,
    "$replaceRoot": _parse_replace_root,
    "$replaceWith": _parse_replace_with,
    "$sortByCount": _parse_sort_by_count,
    "$facet": _parse_facet,
    "$sample": _parse_sample,
    "$documents": _parse_documents,
    "$bucket": _parse_bucket,
    "$redact": _parse_redact,
}


__all__ = [
    "READ_CHUNK",
    "EngineSource",
    "Pipeline",
    "Source",
    "Stage",
    "parse_pipeline",
    "run_pipeline",
]
