"""A pipeline as a whole: parsed once, stage by stage through the registry, with MongoDB's position
rules and error codes; run as a chain of generators over the first read of the collection (what
the leading stages push down) or over what a leading $documents makes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ebbdb.storage.aggregate.filtering import Match
from ebbdb.storage.aggregate.pushdown import plan_read
from ebbdb.storage.aggregate.source import Documents
from ebbdb.storage.aggregate.stage import (
    ANYWHERE,
    STAGES,
    Context,
    Doc,
    Placement,
    Source,
    Stage,
    StageKind,
    Variables,
    error,
)
from ebbdb.storage.core.collation import Collation
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.interrupt import current

# Stages MongoDB has and ebbdb does not run, with where MongoDB allows them: a pipeline that puts
# one in a wrong place gets MongoDB's position error, not NotImplemented.
STAGES.unsupported(
    Placement(first=True, in_facet=False),
    *"$search $searchMeta $vectorSearch $planCacheStats".split(),
)
STAGES.unsupported(
    Placement(first=True),
    *"$currentOp $listSessions $listLocalSessions $listSearchIndexes $shardedDataDistribution"
    " $querySettings".split(),
)
STAGES.unsupported(
    ANYWHERE,
    "$changeStreamSplitLargeEvent",
)


@dataclass(frozen=True)
class Pipeline:
    """A parsed pipeline: its stages, in order."""

    stages: tuple[Stage, ...]

    @property
    def collectionless(self) -> bool:
        """Whether it starts with $documents (and so reads no collection)."""
        return bool(self.stages) and isinstance(self.stages[0], Documents)


# -- parsing -----------------------------------------------------------------------------------------


def parse_pipeline(stages: list[Any], defined: frozenset[str] = frozenset()) -> Pipeline:
    """Parse and validate a pipeline. `defined` names the user variables in scope (the command's
    `let`). Raises QueryError with MongoDB's codeName (or `Location<code>`) for a malformed stage,
    a stage in a place it may not be, and NotImplemented for stages ebbdb does not run."""
    return parse_stages(stages, defined, None)


def pipeline_array(value: Any) -> list[Mapping[str, Any]]:
    """A pipeline's array of stage documents, with MongoDB's type checks."""
    if not isinstance(value, list):
        raise QueryError("TypeMismatch", "'pipeline' option must be specified as an array")
    for element in value:
        if not isinstance(element, Mapping):
            raise QueryError(
                "TypeMismatch", "Each element of the 'pipeline' array must be an object"
            )
    return value


def stage_kind(spec: Mapping[str, Any]) -> tuple[StageKind, Any]:
    """A stage document's kind and argument, with MongoDB's errors for a malformed one."""
    if len(spec) != 1:
        raise error(40323, "A pipeline stage specification object must contain exactly one field.")
    name, arg = next(iter(spec.items()))
    kind = STAGES.lookup(name)
    if kind is None:
        raise error(40324, f"Unrecognized pipeline stage name: '{name}'")
    return kind, arg


def parse_stages(raw: Any, defined: frozenset[str], within: str | None) -> Pipeline:
    """Parse a pipeline; `within` names the enclosing stage of a sub-pipeline ($facet, $lookup,
    $unionWith), which restricts what it may hold."""
    specs = pipeline_array(raw)
    kinds: list[StageKind] = []
    stages: list[Stage | None] = []
    for spec in specs:
        kind, arg = stage_kind(spec)
        kinds.append(kind)
        # A stage ebbdb does not run is reported once the pipeline's shape is known to be valid.
        stages.append(kind.parser(arg, defined) if kind.parser is not None else None)
    # MongoDB checks positions after parsing every stage, then what a sub-pipeline may hold.
    for i, kind in enumerate(kinds):
        if kind.placement.first and i != 0:
            code, message = kind.placement.not_first or (
                40602,
                f"{kind.name} is only valid as the first stage in a pipeline",
            )
            raise error(code, message)
        if kind.placement.last and i != len(kinds) - 1:
            raise error(40601, f"{kind.name} can only be the final stage in the pipeline")
    for i, stage in enumerate(stages):
        # A $text is read through the collection's text index: only the first read can.
        if (i != 0 or within == "$facet") and isinstance(stage, Match) and stage.has_text:
            raise error(17313, "$match with $text is only allowed as the first pipeline stage")
    for kind in kinds:
        if within == "$facet" and not kind.placement.in_facet:
            raise error(40600, f"{kind.name} is not allowed to be used within a $facet stage")
        if within == "$lookup" and not kind.placement.in_subpipeline:
            raise error(51047, f"{kind.name} is not allowed within a $lookup's sub-pipeline")
        if within == "$unionWith" and not kind.placement.in_subpipeline:
            raise error(31441, f"{kind.name} is not allowed within a $unionWith's sub-pipeline")
    for kind, stage in zip(kinds, stages):
        if stage is None:
            raise QueryError("NotImplemented", f"the {kind.name} stage is not supported")
    return Pipeline(tuple(s for s in stages if s is not None))


# -- running -----------------------------------------------------------------------------------------


def run_pipeline(
    pipeline: Pipeline,
    source: Source,
    collection: str | None,
    variables: Mapping[str, Any],
    collation: Collation | None = None,
    hint: Any = None,
) -> Iterator[dict[str, Any]]:
    """The pipeline's results, lazily. `collection` None runs a collection-less pipeline (one that
    starts with $documents). `variables` maps user variable names (the command's `let`, "NOW") to
    values. Raises QueryError (InvalidNamespace) for a pipeline that does not fit `collection`, and,
    while iterating, for errors MongoDB raises at run time. `collation` is the one its stages
    compare strings under (None: simple); the source reads under it too. `hint` picks the index
    of the first read of `collection` (None: the planner's choice)."""
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
    return run_stages(stages, source, collection, variables, collation, hint)


def run_stages(
    stages: tuple[Stage, ...],
    source: Source,
    collection: str | None,
    variables: Variables,
    collation: Collation | None = None,
    hint: Any = None,
) -> Iterator[Doc]:
    """Chain the stages over their input: nothing for a pipeline that starts with a stage that
    makes its own ($documents, $collStats, $indexStats), else a read of `collection` with what the
    leading stages push down."""
    docs: Iterator[Doc]
    if stages and stages[0].makes_input:
        docs = iter(())
    elif collection is None:
        raise QueryError(
            "FailedToParse", "a pipeline without a collection must start with $documents"
        )
    else:
        view = source.view(collection)
        if view is not None:
            # A view (read first, or joined): its pipeline in front, over what it reads.
            collection = view[0]
            stages = parse_stages(view[1], frozenset(), None).stages + stages
        read, stages = plan_read(stages, variables)
        if hint is not None:
            read = replace(read, hint=hint)
        docs = iter(()) if read.empty else source.documents(collection, read)
    ctx = Context(source, variables, collection, collation)
    for stage in stages:
        docs = _checked(stage.run(docs, ctx))
    return docs


def _checked(docs: Iterator[Doc]) -> Iterator[Doc]:
    """A stage's output, checked against the running operation's interruption token at every
    document (a stage may spend long on one; the generators outlive the request that started
    them: each step reads the current token)."""
    for doc in docs:
        current.get().check()
        yield doc
