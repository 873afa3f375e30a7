"""Pipeline-style updates: an update whose `u` is an array of stages ($set/$addFields, $project,
$unset, $replaceRoot/$replaceWith), each parsed by its own stage parser and run over the one
document being updated or upserted, as MongoDB's PipelineExecutor does."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ebbdb.storage.aggregate.pipeline import pipeline_array, stage_kind
from ebbdb.storage.aggregate.stage import Context, Doc, Read, Stage
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.limits import DEFAULT_LIMITS
from ebbdb.storage.query.expressions.core import check_variable_name
from ebbdb.storage.query.update import Update

#: The stages MongoDB allows in an update (isAllowedWithinUpdatePipeline).
UPDATE_STAGES = frozenset(
    ("$addFields", "$set", "$project", "$unset", "$replaceRoot", "$replaceWith")
)


class _NoCollections:
    """The Source of an update's stages: none of them reads a collection (nor holds more than
    one document)."""

    limits = DEFAULT_LIMITS

    def documents(self, collection: str, read: Read) -> Iterator[Doc]:
        raise QueryError("InvalidOptions", "an update pipeline reads no collection")

    def view(self, collection: str) -> tuple[str, list[Mapping[str, Any]]] | None:
        return None


def parse_pipeline_update(
    spec: Any,
    variables: Mapping[str, Any],
    constants: Mapping[str, Any] | None = None,
    array_filters: list[Any] | None = None,
) -> Update:
    """The Update an update pipeline makes. `variables` are the command's (its `let`, evaluated,
    and NOW); `constants` the statement's `c`, values taken as they are. Raises QueryError with
    MongoDB's code: FailedToParse for arrayFilters with a pipeline, a stage's own parse error,
    InvalidOptions for a stage not allowed in an update."""
    if array_filters:
        raise QueryError(
            "FailedToParse", "arrayFilters may not be specified for pipeline-style updates"
        )
    scope = dict(variables)
    for name, value in (constants or {}).items():
        check_variable_name(name, write=False)
        scope[name] = value
    defined = frozenset(name for name in scope if name != "NOW")
    stages: list[Stage] = []
    refused: str | None = None
    for stage_spec in pipeline_array(spec):
        kind, arg = stage_kind(stage_spec)
        name = kind.name
        # MongoDB parses the whole pipeline before it looks at which stages an update may hold.
        stage = kind.parser(arg, defined) if kind.parser is not None else None
        if name not in UPDATE_STAGES:
            refused = refused or name
        elif stage is not None:
            stages.append(stage)
    if refused is not None:
        raise QueryError("InvalidOptions", f"{refused} is not allowed to be used within an update")
    ctx = Context(_NoCollections(), scope)

    def run(doc: dict[str, Any]) -> dict[str, Any]:
        docs: Iterator[Doc] = iter((doc,))
        for stage in stages:
            docs = stage.run(docs, ctx)
        return next(docs)

    return Update(False, _pipeline=run)


__all__ = ["UPDATE_STAGES", "parse_pipeline_update"]
