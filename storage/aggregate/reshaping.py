"""Stages that reshape each document: $project, $addFields / $set and $unset (one field tree, with
MongoDB's projection checks), $replaceRoot / $replaceWith, and $unwind (one document per element).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bson import Decimal128, Int64

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg, extract
from ebbdb.storage.aggregate.fields import field_path, get_path, with_path, without_path
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, Variables, error
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, type_name
from ebbdb.storage.query.expressions import Expression, compile_expression
from ebbdb.storage.query.metadata import keep_metadata
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.projection import EXCLUDE, INCLUDE
from ebbdb.storage.query.projection import render_value as render

# -- $project, $addFields / $set, $unset ------------------------------------------------------------


class _Tree:
    """A projection or $addFields spec as a tree: each child is INCLUDE or EXCLUDE (the
    projection's markers for a field kept or dropped whole), a _Computed field or a sub-tree, in
    the order the spec names them."""

    __slots__ = ("children", "computed")

    def __init__(self) -> None:
        self.children: dict[str, Any] = {}
        self.computed = False  # whether the subtree holds computed fields


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
        return error(code, f"Invalid {self.stage} :: caused by :: {message}")

    def element(self, prefix: tuple[str, ...], name: str, value: Any) -> None:
        path = prefix + field_path(name, self.fail)
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
        elif not self.computed_only and (isinstance(value, bool) or is_number(value)):
            self.flag(path, _truthy_flag(value))
        else:
            self.computed(path, value)

    def flag(self, path: tuple[str, ...], include: bool) -> None:
        if path == ("_id",):
            self.id_flag = include
            self.place(path, INCLUDE if include else EXCLUDE)
            return
        shown = ".".join(path)
        if include:
            if self.inclusion is False:
                raise self.fail(
                    31253, f"Cannot do inclusion on field {shown} in exclusion projection"
                )
            self.inclusion = True
            self.place(path, INCLUDE)
        else:
            if self.inclusion is True:
                raise self.fail(
                    31254, f"Cannot do exclusion on field {shown} in inclusion projection"
                )
            self.inclusion = False
            self.place(path, EXCLUDE)

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
        if entry is INCLUDE:
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
        if entry is EXCLUDE:
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


class _Project(Stage, name="$project"):
    inclusion: bool
    tree: _Tree

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        tree, variables = self.tree, ctx.variables
        # The documents keep their metadata (a $text score), as MongoDB's do.
        if not self.inclusion:
            return (keep_metadata(d, _exclude_doc(d, tree)) for d in docs)
        if not tree.computed:
            return (keep_metadata(d, _include_doc(d, tree)) for d in docs)
        return (keep_metadata(d, self._inclusion(d, variables)) for d in docs)

    def _inclusion(self, doc: Doc, variables: Variables) -> Doc:
        out = _include_doc(doc, self.tree)
        _add_computed(out, self.tree, doc, variables)
        return out


@STAGES.stage("$project", document=(15969, "$project specification must be an object"))
def _parse_project(spec: Any, defined: frozenset[str]) -> Stage:
    parser = _TreeParser("$project", defined, computed_only=False)
    if not spec:
        raise parser.fail(51272, "projection specification must have at least one field")
    for name, value in spec.items():
        parser.element((), name, value)
    inclusion = parser.inclusion
    if inclusion is None:
        inclusion = bool(parser.id_flag)  # only _id named: its flag decides
    if inclusion and not parser.id_specified:
        parser.root.children = {"_id": INCLUDE, **parser.root.children}
    _mark_computed(parser.root)
    return _Project(inclusion, parser.root)


class _AddFields(Stage, name="$addFields"):
    tree: _Tree
    stage_name: str

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        return (self._apply(d, ctx.variables) for d in docs)

    def _apply(self, doc: Doc, variables: Variables) -> Doc:
        out = dict(doc)
        _add_computed(out, self.tree, doc, variables)
        return keep_metadata(doc, out)


def _parse_add_fields(stage: str, spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise error(40272, f"{stage} specification stage must be an object, got {type_name(spec)}")
    parser = _TreeParser(stage, defined, computed_only=True)
    for name, value in spec.items():
        parser.element((), name, value)
    _mark_computed(parser.root)
    return _AddFields(parser.root, stage)


@STAGES.stage("$addFields")
def _parse_add_fields_stage(spec: Any, defined: frozenset[str]) -> Stage:
    return _parse_add_fields("$addFields", spec, defined)


@STAGES.stage("$set")
def _parse_set(spec: Any, defined: frozenset[str]) -> Stage:
    return _parse_add_fields("$set", spec, defined)


@STAGES.stage("$unset")
def _parse_unset(spec: Any, defined: frozenset[str]) -> Stage:
    if isinstance(spec, str):
        spec = [spec]
    if not isinstance(spec, list):
        raise error(31002, "$unset specification must be a string or an array")
    if not spec:
        raise error(
            31119, "$unset specification must be a string or an array with at least one field"
        )
    if not all(isinstance(p, str) for p in spec):
        raise error(
            31120, "$unset specification must be a string or an array containing only string values"
        )
    parser = _TreeParser("$unset", defined, computed_only=False)
    for path in spec:
        parser.place(field_path(path, parser.fail), EXCLUDE)
    return _Project(False, parser.root)


# -- $replaceRoot / $replaceWith ---------------------------------------------------------------------


class _ReplaceRoot(Stage, name="$replaceRoot"):
    expr: Expression
    what: str  # how MongoDB's message names the expression

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        for doc in docs:
            value = self.expr(doc, ctx.variables)
            if not isinstance(value, dict):
                raise not_a_document(self.what, value, doc)
            yield value


def not_a_document(what: str, value: Any, doc: Doc) -> QueryError:
    """MongoDB's error for a new root ($replaceRoot, $replaceWith, $documents) that is not a
    document; `what` names the expression as the message does."""
    shown, kind = ("MISSING", "missing") if value is MISSING else (render(value), type_name(value))
    # MongoDB's message has the double space.
    return error(
        40228,
        f"{what}  must evaluate to an object, but resulting value was: {shown}. Type of resulting"
        f" value: '{kind}'. Input document: {render(doc)}",
    )


class _ReplaceRootArgs(
    Arguments,
    not_document=Refusal(
        40229, "expected an object as specification for $replaceRoot stage, got {type}"
    ),
):
    new_root: Any = arg("newRoot", required=True)


@STAGES.stage("$replaceRoot", arguments=_ReplaceRootArgs)
def _parse_replace_root(a: _ReplaceRootArgs, defined: frozenset[str]) -> Stage:
    return _ReplaceRoot(compile_expression(a.new_root, defined), "'newRoot' expression")


@STAGES.stage("$replaceWith")
def _parse_replace_with(spec: Any, defined: frozenset[str]) -> Stage:
    return _ReplaceRoot(compile_expression(spec, defined), "'replacement document'")


# -- $unwind -----------------------------------------------------------------------------------------


class _Unwind(Stage, name="$unwind"):
    path: tuple[str, ...]
    index_path: tuple[str, ...] | None
    preserve: bool

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        path, index = self.path, self.index_path
        for doc in docs:
            value = get_path(doc, path)
            if isinstance(value, list) and value:
                for i, element in enumerate(value):
                    out = with_path(doc, path, element)
                    # MongoDB reports the index as a long.
                    yield out if index is None else with_path(out, index, Int64(i))
            elif isinstance(value, list):
                if self.preserve:  # an empty array is kept as if the field were missing
                    out = without_path(doc, path)
                    yield out if index is None else with_path(out, index, None)
            elif value is MISSING or value is None:
                if self.preserve:
                    yield doc if index is None else with_path(doc, index, None)
            else:  # a scalar unwinds to itself
                yield doc if index is None else with_path(doc, index, None)


_INDEX_NOT_STRING = Refusal(
    28810,
    "expected a non-empty string for the includeArrayIndex  option to $unwind stage, got {type}",
)


def _array_index(value: str, defined: frozenset[str]) -> str:
    if not value:
        raise _INDEX_NOT_STRING.error(type=type_name(value))
    if value.startswith("$"):
        raise error(
            28822,
            f"includeArrayIndex option to $unwind stage should not be prefixed with a '$': {value}",
        )
    return value


class _UnwindArgs(
    Arguments, unknown=Refusal(28811, "unrecognized option to $unwind stage: {name}")
):
    path: str = arg(
        "path",
        Kind.STRING,
        "",
        mismatch=Refusal(28808, "expected a string as the path for $unwind stage, got {type}"),
    )
    preserve: bool = arg(
        "preserveNullAndEmptyArrays",
        Kind.BOOL,
        False,
        mismatch=Refusal(
            28809,
            "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got"
            " {type}",
        ),
    )
    index: str | None = arg(
        "includeArrayIndex", Kind.STRING, mismatch=_INDEX_NOT_STRING, parse=_array_index
    )


@STAGES.stage("$unwind")
def _parse_unwind(spec: Any, defined: frozenset[str]) -> Stage:
    if isinstance(spec, Mapping):
        a = extract(_UnwindArgs, "$unwind", spec)
        path, preserve, index = a.path, a.preserve, a.index
    elif isinstance(spec, str):
        path, preserve, index = spec, False, None
    else:
        raise error(
            15981,
            "expected either a string or an object as specification for $unwind stage, got"
            f" {type_name(spec)}",
        )
    if not path:
        raise error(28812, "no path specified to $unwind stage")
    if not path.startswith("$"):
        raise error(28818, f"path option to $unwind stage should be prefixed with a '$': {path}")
    return _Unwind(field_path(path[1:]), field_path(index) if index is not None else None, preserve)
