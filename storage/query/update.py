"""The update language as MongoDB 7.0 runs it: an update document (modifiers or a replacement) is
parsed once (storage/query/update_parse.py) into a tree of paths, then applied to decoded documents
(storage/query/update_apply.py); also the document an upsert starts from (the equalities of the
query's tree)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import bson
from bson.dbref import DBRef

from ebbdb.storage.core.documents import check_id
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import DBREF_FIELDS, render_element
from ebbdb.storage.query.match_leaves import is_regex
from ebbdb.storage.query.match_tree import (
    All,
    Compare,
    In,
    Node,
    Or,
    ParsedFilter,
    Predicate,
    conjuncts,
)
from ebbdb.storage.query.paths import split

# MongoDB records which array element a query matched the same way for updates as for find
# projections; projection.py owns that logic and the update reuses it rather than copying it.
from ebbdb.storage.query.projection import KeyLeaf, key_leaves, match_key
from ebbdb.storage.query.update_apply import (
    Ctx,
    apply_modifiers,
    apply_top_level,
    fill,
    index_of,
    put_past_end,
    replace,
)
from ebbdb.storage.query.update_parse import (
    DOLLAR_HINT,
    Leaf,
    ObjNode,
    copy_value,
    parse_array_filters,
    parse_modifiers,
)

#: Modifiers that replace (or remove) the value at their path, never changing it in place.
_REPLACING = frozenset(
    ("$set", "$setOnInsert", "$unset", "$inc", "$mul", "$min", "$max", "$currentDate")
)


@dataclass(frozen=True)
class Update:
    """A parsed update: a replacement document or a tree of modifiers. Built by parse_update."""

    replacement: bool  # True for a replacement document (no $-operators)
    _document: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    _root: ObjNode | None = field(default=None, repr=False, compare=False)
    _positional: bool = field(default=False, repr=False, compare=False)
    _filters: Mapping[str, Predicate] = field(default_factory=dict, repr=False, compare=False)
    #: A pipeline-style update: the document its stages make of the one they are given (built by
    #: storage/aggregate/updates.py, which owns the stages).
    _pipeline: Callable[[dict[str, Any]], dict[str, Any]] | None = field(
        default=None, repr=False, compare=False
    )
    # (query, its compiled positional conditions) for the query seen last: a multi-update calls
    # apply once per document with the same query. One tuple, so a reader never mixes two.
    _keys: list[tuple[object, tuple[KeyLeaf, ...]]] = field(
        default_factory=list, repr=False, compare=False
    )
    #: Every modifier is at a top-level field and replaces its value (never changing a container
    #: in place): a shallow copy of the document is all it needs.
    _flat: bool = field(default=False, init=False, repr=False, compare=False)
    #: No modifier names a `$`-prefixed top-level field: the result has the document's own.
    _dollar_free: bool = field(default=False, init=False, repr=False, compare=False)
    #: Every modifier puts a scalar at a top-level field (or removes one): the result nests no
    #: deeper than the document it is applied to.
    keeps_depth: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root = self._root
        if root is None or root.positional is not None:
            return
        names = root.children
        object.__setattr__(self, "_dollar_free", not any(n.startswith("$") for n in names))
        flat = all(isinstance(c, Leaf) and c.op in _REPLACING for c in names.values())
        object.__setattr__(self, "_flat", flat)
        scalars = flat and all(
            c.op in ("$unset", "$currentDate") or not isinstance(c.arg, dict | list)  # type: ignore[union-attr]
            for c in names.values()
        )
        object.__setattr__(self, "keeps_depth", scalars)

    def apply(
        self,
        doc: dict[str, Any],
        *,
        now_ms: int,
        inserting: bool = False,
        query: ParsedFilter | None = None,
    ) -> dict[str, Any]:
        """Return the updated document (a new dict; `doc` untouched), `_id` first.
        `inserting` is True for the document an upsert inserts (then $setOnInsert applies);
        `query` is the parsed filter that matched, which the positional `$` resolves against;
        `now_ms` is what $currentDate (and a replacement's empty timestamps) record.
        Raises QueryError (ImmutableField, PathNotViable, TypeMismatch, BadValue, ...) or
        InvalidIdField as MongoDB would for this document."""
        if self._pipeline is not None:
            # As MongoDB's PipelineExecutor: the stages' result replaces the document (its `_id`
            # kept when they dropped it, refused when they changed it; no timestamps filled in).
            out = replace(doc, self._pipeline(doc), now_ms, stamp=False)
        elif self._document is not None:
            out = replace(doc, self._document, now_ms)
        else:
            assert self._root is not None
            if self._flat:
                out = dict(doc)
                for name in self._root.children:
                    if type(out.get(name)) is DBRef:  # a modifier sees a plain subdocument
                        out[name] = copy_value(out[name])
            else:
                out = copy_value(doc)
            matched = None
            if self._positional and query is not None and not inserting:
                matched = self._matched_index(query, doc)
            ctx = Ctx(out, now_ms, inserting, matched, self._filters)
            (apply_top_level if self._flat else apply_modifiers)(self._root, ctx)
            if not inserting and not self._dollar_free:
                _check_top_level_dollars(doc, out)
        if "_id" in out:
            if inserting or self._document is not None or self._pipeline is not None:
                check_id(out["_id"])
            if next(iter(out)) != "_id":
                out = {"_id": out.pop("_id"), **out}
        return out

    def _matched_index(self, query: ParsedFilter, doc: dict[str, Any]) -> str | None:
        entry = self._keys[0] if self._keys else None
        if entry is None or entry[0] is not query:
            entry = (query, tuple(key_leaves(query.tree)))
            self._keys[:] = [entry]
        index = match_key(entry[1], doc)
        return None if index is None else str(index)


def _check_top_level_dollars(before: dict[str, Any], after: dict[str, Any]) -> None:
    """MongoDB 5.0+ keeps `$`-prefixed top-level fields, but an update operator may not create
    or change one (DollarPrefixedFieldName; a DBRef's $ref/$id/$db excepted); an upsert's insert
    may, as an insert may, and $unset and pipelines may remove or set them."""
    names = list(after)
    for i, name in enumerate(names):
        if not name.startswith("$") or (name in before and _same(before[name], after[name])):
            continue
        if name in DBREF_FIELDS and "$ref" in names:
            ref = names.index("$ref")
            if names[ref + 1 : ref + 2] == ["$id"] and i in (ref, ref + 1, ref + 2):
                continue
        raise QueryError(
            "DollarPrefixedFieldName",
            f"The dollar ($) prefixed field '{name}' in '{name}' {DOLLAR_HINT}",
        )


def _same(a: Any, b: Any) -> bool:
    """Whether two values are the same BSON (an update that leaves a field so is a no-op)."""
    return bson.encode({"": a}) == bson.encode({"": b})


def parse_update(spec: dict[str, Any], array_filters: list[Any] | None = None) -> Update:
    """Validate an update document once. A document whose first field starts with `$` is a
    modifier update, any other a replacement. Raises QueryError with MongoDB's code for a
    malformed update or array filter."""
    filters = parse_array_filters(array_filters or [])
    first = next(iter(spec), None)
    if first is None or not first.startswith("$"):
        for name in spec:
            # MongoDB finds these while applying; here they fail before any document is read.
            if name.startswith("$"):
                raise QueryError(
                    "DollarPrefixedFieldName",
                    f"The dollar ($) prefixed field '{name}' in '{name}' {DOLLAR_HINT}",
                )
        return Update(True, _document=copy_value(spec))
    root, positional = parse_modifiers(spec, filters)
    return Update(False, _root=root, _positional=positional, _filters=filters)


def upsert_seed(query: ParsedFilter, *, replacement: bool = False) -> dict[str, Any]:
    """The document an upsert starts from: the equality conditions of the parsed query's tree
    (`{a: 1}`, `$eq`, a one-value `$in`, `$all`'s values, inside `$and` or a one-clause `$or`),
    dotted paths expanded into nested documents, `_id` first. With `replacement`, only `_id` is
    taken, as MongoDB does for a replacement upsert. Raises QueryError NotSingleValueField for conflicting equalities
    ({a: 1, 'a.b': 2}), NotExactValueField for `_id.x` under a replacement, PathNotViable where
    the paths cannot be built."""
    found: list[tuple[str, Any]] = []
    for path, value in _equalities(query.tree):
        if replacement:
            if path != "_id" and not path.startswith("_id."):
                continue
            if path != "_id":
                raise QueryError(
                    "NotExactValueField",
                    f"field at '_id' must be exactly specified, field at sub-path '{path}'found",
                )
        parts = split(path)
        # Only an equality at this path or above it conflicts (MongoDB checks the longest).
        above = [seen for seen, _ in found if parts[: len(split(seen))] == split(seen)]
        if above:
            seen = max(above, key=len)
            raise QueryError(
                "NotSingleValueField",
                "cannot infer query fields to set, "
                + (
                    f"path '{path}' is matched twice"
                    if seen == path
                    else f"both paths '{path}' and '{seen}' are matched"
                ),
            )
        found.append((path, value))
    seed: dict[str, Any] = {}
    # MongoDB keeps the equalities in a map keyed by path and adds them in that order.
    for path, value in sorted(found, key=lambda item: item[0]):
        _seed_path(seed, split(path), copy_value(value))
    if "_id" in seed and next(iter(seed)) != "_id":
        seed = {"_id": seed.pop("_id"), **seed}
    return seed


def _equalities(tree: Node) -> Iterator[tuple[str, Any]]:
    """The (path, value) equality conditions MongoDB extracts from a query, in query order."""
    for node in conjuncts(tree):
        if isinstance(node, Compare):
            # Top-level `$ref`, `$id` and `$db` are DBRef conditions, not fields to set.
            if node.op == "$eq" and not node.path.startswith("$"):
                yield node.path, node.value
        elif isinstance(node, In):
            if len(node.values) == 1 and not is_regex(node.values[0]):
                yield node.path, node.values[0]  # a one-value $in is an equality
        elif isinstance(node, All):
            # $all is an And of equalities (regexes and $elemMatch aside).
            for child in node.children:
                if isinstance(child, Compare):
                    yield child.path, child.value
        elif isinstance(node, Or) and len(node.children) == 1:
            # A one-clause $or is optimized into its clause before extraction.
            yield from _equalities(node.children[0])


def _seed_path(seed: dict[str, Any], parts: tuple[str, ...], value: Any) -> None:
    """Set `value` at `parts`, building documents on the way (MongoDB's setElementAtPath)."""
    current: Any = seed
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if type(current) is dict:
            if part not in current:
                fill(current, list(parts[i:]), value)
                return
            if last:
                current[part] = value
                return
            current = current[part]
        elif type(current) is list and index_of(part) is not None:
            index = index_of(part)
            assert index is not None
            if index >= len(current):
                put_past_end(current, index, list(parts[i + 1 :]), value)
                return
            if last:
                current[index] = value
                return
            current = current[index]
        else:
            raise QueryError(
                "PathNotViable",
                f"cannot use the part ({parts[i - 1]} of {'.'.join(parts)}) to traverse the "
                f"element ({{{render_element(parts[i - 1], current)}}})",
            )


__all__ = ["Update", "parse_update", "upsert_seed"]
