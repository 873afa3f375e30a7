"""The stages that write a pipeline's results: $out (replace a collection's contents) and $merge
(fold them into a collection), parsed with MongoDB 7.0's checks and codes. Run, they pass their
input through unchanged: the server writes what reaches them (storage/aggregate/writing.py), so an explain
or a reader of the stream never writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from ebbdb.storage.aggregate.arguments import Arguments, Kind, arg, extract
from ebbdb.storage.aggregate.fields import field_path
from ebbdb.storage.aggregate.pipeline import Pipeline, parse_stages
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Placement, Stage, error
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import type_name
from ebbdb.storage.query.expressions import Expression, compile_expression
from ebbdb.storage.query.expressions.core import check_variable_name

#: Where MongoDB allows a writing stage: last, and never inside $facet, $lookup or $unionWith.
_WRITER = Placement(last=True, in_facet=False, in_subpipeline=False)
WHEN_MATCHED = ("replace", "keepExisting", "merge", "fail")
WHEN_NOT_MATCHED = ("insert", "discard", "fail")
#: The (whenMatched, whenNotMatched) pairs MongoDB supports ("pipeline": a whenMatched pipeline).
_SUPPORTED = frozenset(
    {
        ("replace", "insert"),
        ("replace", "fail"),
        ("replace", "discard"),
        ("merge", "insert"),
        ("merge", "fail"),
        ("merge", "discard"),
        ("keepExisting", "insert"),
        ("fail", "insert"),
        ("pipeline", "insert"),
        ("pipeline", "fail"),
        ("pipeline", "discard"),
    }
)
#: The stages a whenMatched pipeline may hold (those of a pipeline-style update).
_UPDATE_STAGES = frozenset(
    {"$addFields", "$set", "$project", "$unset", "$replaceRoot", "$replaceWith"}
)


class Out(Stage, name="$out"):
    """$out: the results replace the contents of `db.coll` (`db` None: the command's database)."""

    db: str | None
    coll: str

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        return docs


class Merge(Stage, name="$merge"):
    """$merge: each result is matched to a document of `db.coll` by the `on` fields (None: `_id`,
    with no index check) and handled as `when_matched` says ("pipeline": `pipeline` runs on the
    matched document, with `let` evaluated against the result and `$$new` bound to it) or, when
    none matches, as `when_not_matched` says."""

    db: str | None
    coll: str
    on: tuple[str, ...] | None
    when_matched: str
    when_not_matched: str
    pipeline: Pipeline | None
    let: tuple[tuple[str, Expression], ...]

    @property
    def on_fields(self) -> tuple[str, ...]:
        return self.on if self.on is not None else ("_id",)

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        return docs


#: The stages that write their input somewhere.
WRITERS = (Out, Merge)


def writer_of(pipeline: Pipeline) -> Out | Merge | None:
    """The pipeline's writing stage (always its last), or None."""
    last = pipeline.stages[-1] if pipeline.stages else None
    return last if isinstance(last, WRITERS) else None


# -- $out --------------------------------------------------------------------------------------------


def _no_timeseries(value: Any, defined: frozenset[str]) -> NoReturn:
    raise QueryError(
        "NotImplemented",
        "$out with 'timeseries' (a new time series collection) is not supported; create the time"
        " series collection and use $merge",
    )


class _OutArgs(Arguments):
    coll: str = arg("coll", Kind.STRING, required=True)  # reported missing before db
    db: str = arg("db", Kind.STRING, required=True)
    timeseries: None = arg("timeseries", parse=_no_timeseries)


@STAGES.stage("$out", _WRITER)
def _parse_out(spec: Any, defined: frozenset[str]) -> Stage:
    if isinstance(spec, str):
        return Out(None, spec)
    if not isinstance(spec, Mapping):
        raise error(
            16990, f"$out only supports a string or object argument, but found {type_name(spec)}"
        )
    a = extract(_OutArgs, "$out", spec)
    return Out(a.db, a.coll)


# -- $merge ------------------------------------------------------------------------------------------


class _IntoArgs(Arguments):
    db: str | None = arg("db", Kind.STRING)
    coll: str = arg("coll", Kind.STRING, "")


def _into(value: Any, defined: frozenset[str]) -> tuple[str | None, str]:
    if isinstance(value, str):
        return None, value
    if not isinstance(value, Mapping):
        raise error(
            51178,
            "$merge 'into' field  must be either a string or an object, but found"
            f" {type_name(value)}",
        )
    into = extract(_IntoArgs, "into", value)
    return into.db, into.coll


def _on(value: Any, defined: frozenset[str]) -> tuple[str, ...]:
    if not isinstance(value, str | list):
        raise error(
            51186,
            "$merge 'on' field  must be either a string or an array of strings, but found"
            f" {type_name(value)}",
        )
    names: list[Any] = [value] if isinstance(value, str) else value
    wrong = [v for v in names if not isinstance(v, str)]
    if wrong:
        raise error(
            51134, f"$merge 'on' array elements must be strings, but found {type_name(wrong[0])}"
        )
    if not names:
        raise error(51187, "If explicitly specifying $merge 'on', must include at least one field")
    seen: list[str] = []
    for name in names:
        path = ".".join(field_path(name))
        if path in seen:
            raise error(31465, f"Found a duplicate field '{name}'")
        seen.append(path)
    return tuple(seen)


def _enum(field: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise QueryError(
            "BadValue", f"Enumeration value '{value}' for field '{field}' is not a valid value."
        )
    return value


def _when_matched(value: Any, defined: frozenset[str]) -> str | list[Any]:
    """A mode, or a pipeline (returned as it is, parsed once the command's variables are known)."""
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return _enum("whenMatched", value, WHEN_MATCHED)
    raise error(
        51191,
        "$merge 'whenMatched' field  must be either a string or an array, but found"
        f" {type_name(value)}",
    )


class _MergeArgs(Arguments):
    into: tuple[str | None, str] = arg("into", required=True, parse=_into)
    on: tuple[str, ...] | None = arg("on", parse=_on)
    when_matched: str | list[Any] = arg("whenMatched", default="merge", parse=_when_matched)
    when_not_matched: str = arg(
        "whenNotMatched",
        Kind.STRING,
        "insert",
        parse=lambda value, _: _enum("whenNotMatched", value, WHEN_NOT_MATCHED),
    )
    let: Mapping[str, Any] | None = arg("let", Kind.OBJECT)


def _update_pipeline(raw: list[Any], defined: frozenset[str]) -> Pipeline:
    for stage in raw:
        name = next(iter(stage), "") if isinstance(stage, Mapping) and len(stage) == 1 else ""
        if name.startswith("$") and name not in _UPDATE_STAGES and STAGES.lookup(name):
            raise QueryError("InvalidOptions", f"{name} is not allowed to be used within an update")
    return parse_stages(raw, defined, "$merge")


@STAGES.stage("$merge", _WRITER)
def _parse_merge(spec: Any, defined: frozenset[str]) -> Stage:
    if isinstance(spec, str):
        return Merge(None, spec, None, "merge", "insert", None, ())
    if not isinstance(spec, Mapping):
        raise QueryError(
            "TypeMismatch",
            f"$merge requires a string or object argument, but found {type_name(spec)}",
        )
    a = extract(_MergeArgs, "$merge", spec)
    let, when_not_matched = a.let, a.when_not_matched
    raw_pipeline = a.when_matched if isinstance(a.when_matched, list) else None
    when_matched = "pipeline" if isinstance(a.when_matched, list) else a.when_matched
    if (when_matched, when_not_matched) not in _SUPPORTED:
        raise error(
            51181,
            f"Combination of $merge modes 'whenMatched: {when_matched}' and 'whenNotMatched:"
            f" {when_not_matched}' is not supported",
        )
    lets: list[tuple[str, Expression]] = []
    if raw_pipeline is None:
        if let is not None:
            raise error(
                51199, f"Cannot use 'let' variables with 'whenMatched: {when_matched}' mode"
            )
        pipeline = None
    else:
        # `new` is the result being merged ($$ROOT where the let is evaluated); a let may only
        # name it as that.
        if let is None:
            let = {"new": "$$ROOT"}
        if "new" in let and let["new"] != "$$ROOT":
            raise error(
                51273,
                "'let' may not define a value for the reserved 'new' variable other than '$$ROOT'",
            )
        if "new" not in let and when_not_matched == "insert":
            let = {**let, "new": "$$ROOT"}
        for name, expr in let.items():
            check_variable_name(name, write=True)
            lets.append((name, compile_expression(expr, defined)))
        pipeline = _update_pipeline(raw_pipeline, defined | {n for n, _ in lets})
    db, coll = a.into
    return Merge(db, coll, a.on, when_matched, when_not_matched, pipeline, tuple(lets))
