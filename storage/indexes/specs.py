"""Index specifications: parsing and validating what a client asks createIndexes for, MongoDB's
generated names, and how a new index compares with the ones a collection already has."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.storage.catalog.info import EXPIRE_AFTER, IndexInfo, kind_name
from ebbdb.storage.core.collation import normalise
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, render, to_float, type_name
from ebbdb.storage.expiry import expire_after
from ebbdb.storage.indexes import index_kinds

#: MongoDB's limit on indexes per collection, `_id_` included.
MAX_INDEXES = 64
_SPECIAL_TYPES = frozenset(
    {
        "text",
        "2d",
        "2dsphere",
        "2dsphere_bucket",
        "hashed",
        "geoHaystack",
        "columnstore",
        "wildcard",
    }
)
_OPTIONS = frozenset(
    {"unique", "sparse", "partialFilterExpression", "hidden", "expireAfterSeconds", "collation"}
)
#: Public, for the README's compatibility table (server/compat.py).
UNSUPPORTED_TYPES = _SPECIAL_TYPES - index_kinds.registered()
OPTIONS = _OPTIONS
#: Options of the special kinds (storage/index_kinds); those of a registered kind are its own.
_KIND_OPTIONS = frozenset(
    {
        "weights",
        "default_language",
        "language_override",
        "textIndexVersion",
        "2dsphereIndexVersion",
        "bits",
        "min",
        "max",
        "bucketSize",
        "wildcardProjection",
    }
)
_IGNORED = frozenset({"v", "background", "ns", "storageEngine", "dropDups"})
#: Options that make two indexes on the same key pattern different indexes rather than a conflict.
_DISTINGUISHING = ("partialFilterExpression", "collation")
#: Options whose difference on an otherwise identical index is an IndexOptionsConflict.
_IDENTIFYING = ("unique", "sparse", "partialFilterExpression", "collation")


@dataclass(frozen=True)
class IndexSpec:
    """A validated index request: what listIndexes will show (`v` aside)."""

    name: str
    key: tuple[tuple[str, Any], ...]
    options: dict[str, Any]
    #: No collation given: the index takes the collection's default (with_default_collation).
    inherits_collation: bool = False

    def with_default_collation(self, default: dict[str, Any] | None) -> IndexSpec:
        """The spec on a collection whose default collation is `default` (None: simple). A kind
        that compares by bytes alone (text, 2d) is refused: MongoDB asks for an explicit
        `collation: {locale: "simple"}` on such a collection."""
        if not self.inherits_collation or not default:
            return self
        kind = kind_name(self.key)
        if kind is not None:
            _check_collation_kind(kind, default)
        return IndexSpec(self.name, self.key, {**self.options, "collation": default})

    @property
    def key_doc(self) -> dict[str, Any]:
        return dict(self.key)


#: Index kinds that compare by bytes alone: MongoDB refuses them a collation other than simple.
_BINARY_KINDS = frozenset({"text", "2d"})


def _check_collation_kind(kind: str, collation: Mapping[str, Any]) -> None:
    if kind in _BINARY_KINDS:
        raise QueryError(
            "CannotCreateIndex",
            f"Index type '{kind}' does not support collation: {render(dict(collation))}",
        )


def _direction_name(v: Any) -> str:
    if isinstance(v, str):
        return v
    f = to_float(v)
    return str(int(f)) if f == int(f) else repr(f)


def default_name(key: tuple[tuple[str, Any], ...]) -> str:
    """MongoDB's generated index name: `a_1_b_-1`."""
    return "_".join(f"{field}_{_direction_name(d)}" for field, d in key)


def _truthy(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if is_number(v):
        return to_float(v) != 0
    return v is not None


def _check_key(key: Any) -> tuple[tuple[str, Any], ...]:
    if not isinstance(key, Mapping) or not key:
        raise QueryError("CannotCreateIndex", "Index keys cannot be empty.")
    out = []
    for field, d in key.items():
        if not field:
            raise QueryError("CannotCreateIndex", "Index keys cannot be an empty field.")
        wildcard = field == "$**" or field.endswith(".$**")
        if wildcard and (
            index_kinds.kind_named("wildcard") is not None
            or (isinstance(d, str) and index_kinds.kind_named(d) is not None)
        ):
            pass  # the kind checks the rest of the pattern ({"$**": "text"} is text's)
        elif field.startswith("$") or field.endswith("$**"):
            raise QueryError(
                "NotImplemented", f"index key '{field}' (wildcard or $-prefixed) is not supported"
            )
        if "" in field.split("."):
            raise QueryError(
                "CannotCreateIndex", f"Index key contains an illegal field name: '{field}'"
            )
        if type(d) is str:  # (Code, a str subclass, is neither a kind nor a direction)
            if index_kinds.kind_named(d) is not None:
                out.append((field, d))
                continue
            if d in _SPECIAL_TYPES:
                raise QueryError("NotImplemented", f"'{d}' indexes are not supported")
            raise QueryError("CannotCreateIndex", f"Unknown index plugin '{d}'")
        if wildcard:
            out.append((field, d))  # its direction is the kind's to check
            continue
        if not is_number(d):
            raise QueryError(
                "CannotCreateIndex",
                f"Values in v:2 index key pattern cannot be of type {type(d).__name__}. Only "
                "numbers > 0, numbers < 0, and strings are allowed.",
            )
        f = to_float(d)
        if f == 0 or math.isnan(f):
            raise QueryError(
                "CannotCreateIndex", "Values in the index key pattern can't be 0 or NaN."
            )
        out.append((field, d))
    return tuple(out)


def parse_index_spec(doc: Mapping[str, Any]) -> IndexSpec:
    """Validate one entry of createIndexes' `indexes`. Raises QueryError with MongoDB's codeNames
    (CannotCreateIndex, InvalidIndexSpecificationOption, NotImplemented, BadValue)."""
    if "key" not in doc:
        raise QueryError(
            "FailedToParse", "The 'key' field is a required property of an index specification"
        )
    key = _check_key(doc["key"])
    kind = (
        None if (name_of_kind := kind_name(key)) is None else index_kinds.kind_named(name_of_kind)
    )
    inherits = True
    # ({_id: "hashed"} is an index like any other, not the _id index.)
    is_id = len(key) == 1 and key[0][0] == "_id" and not isinstance(key[0][1], str)
    options: dict[str, Any] = {}
    for field, value in doc.items():
        if field in ("key", "name") or field in _IGNORED:
            continue
        if field not in _OPTIONS:
            if field in _KIND_OPTIONS and kind is not None and field in kind.options:
                continue  # the kind checks it, below
            if field == "wildcardProjection" and field in index_kinds.kind_options():
                raise QueryError(
                    "BadValue",
                    "The field 'wildcardProjection' is only allowed in an 'wildcard' index",
                )
            if field == "clustered" or (
                field in _KIND_OPTIONS and field not in index_kinds.kind_options()
            ):
                raise QueryError("NotImplemented", f"index option '{field}' is not supported")
            raise QueryError(
                "InvalidIndexSpecificationOption",
                f"The field '{field}' is not valid for an index specification.",
            )
        if field == "collation":
            if not isinstance(value, Mapping):
                raise QueryError(
                    "TypeMismatch",
                    f"The field 'collation' must be an object, but got {type_name(value)}",
                )
            if value:  # an empty document gives none: the collection's default
                inherits = False
                normalised = normalise(value)
                if normalised is not None:  # the simple collation is not listed
                    options[field] = normalised
            continue
        if field == EXPIRE_AFTER:
            expire = expire_after.parse(value, expire_after.Setting.NEW_INDEX, key)
            options[field] = expire.seconds
        elif field == "partialFilterExpression":
            if not isinstance(value, Mapping):
                raise QueryError("TypeMismatch", "partialFilterExpression must be an object")
            # The query language, imported only here.
            from ebbdb.storage.query.match import parse_filter
            from ebbdb.storage.query.match_tree import uses_expr

            parsed = parse_filter(dict(value))  # raises for an invalid filter
            # An index entry cannot depend on an aggregation expression, or on another index
            # ($text).
            for op, used in (("$expr", uses_expr(parsed.tree)), ("$text", parsed.text)):
                if used:
                    raise QueryError(
                        "CannotCreateIndex", f"Expression not supported in partial index: {op}"
                    )
            options[field] = dict(value)
        else:
            if is_id and field in ("unique", "sparse", "hidden"):
                raise QueryError(
                    "InvalidIndexSpecificationOption",
                    f"The field '{field}' is not valid for an _id index specification.",
                )
            if _truthy(value):
                options[field] = True
    if options.get("sparse") and "partialFilterExpression" in options:
        raise QueryError(
            "CannotCreateIndex", 'cannot mix "partialFilterExpression" and "sparse" options'
        )
    requested = key
    if kind is not None:
        # The kind sees every option (it may refuse a common one) and returns its own to store;
        # the collation only as normalised (the simple one, asked for by name, is none).
        raw = {k: v for k, v in doc.items() if k != "collation"}
        options.update(kind.check(key, {**raw, **options}))
        if "collation" in options:
            _check_collation_kind(kind.name, options["collation"])
        if kind.stored_key is not None:
            key = kind.stored_key(key)
    name = doc.get("name")
    if name is None:
        name = default_name(requested)
    if type(name) is not str:  # nor is JavaScript code (pymongo's Code is a str subclass)
        raise QueryError("TypeMismatch", "The field 'name' must be a string")
    if not name or name == "*":
        raise QueryError("CannotCreateIndex", f"The index name '{name}' is not valid")
    if is_id and name != "_id_":
        raise QueryError("BadValue", "The _id index must be named _id_")
    return IndexSpec(name, key, options, inherits)


def _same_key(a: tuple[tuple[str, Any], ...], b: tuple[tuple[str, Any], ...]) -> bool:
    return len(a) == len(b) and all(
        fa == fb and (to_float(da) == to_float(db) if is_number(da) and is_number(db) else da == db)
        for (fa, da), (fb, db) in zip(a, b)
    )


def conflict(spec: IndexSpec, existing: IndexInfo) -> str | None:
    """How `spec` relates to an index the collection has: "same" (already exists), "distinct"
    (may coexist), or raises QueryError for MongoDB's conflicts (85 / 86)."""
    same_key = _same_key(spec.key, existing.key)
    same_name = spec.name == existing.name
    if not same_name and existing.kind == "text" and kind_name(spec.key) == "text":
        if not (same_key and spec.options == existing.options):
            raise QueryError(
                "CannotCreateIndex",
                f"only one text index per collection allowed, found existing text index "
                f'"{existing.name}"',
            )
    if not same_key and not same_name:
        return "distinct"
    ident_equal = all(spec.options.get(o) == existing.options.get(o) for o in _IDENTIFYING)
    if same_name and same_key and spec.options == existing.options:
        return "same"
    if same_name and (not same_key or not ident_equal):
        raise QueryError(
            "IndexKeySpecsConflict",
            f"An existing index has the same name as the requested index. When index names are "
            f"not specified, they are auto generated and can cause conflicts. Please refer to our "
            f'documentation. Requested index: {{ v: 2, key: {spec.key_doc}, name: "{spec.name}" }}, '
            f'existing index: {{ v: 2, key: {dict(existing.key)}, name: "{existing.name}" }}',
        )
    if same_name:
        raise QueryError(
            "IndexOptionsConflict",
            f"An equivalent index already exists with the same name but different options. "
            f"Requested index: {spec.name}, existing index: {existing.name}",
        )
    # Same key pattern, different name.
    if any(spec.options.get(o) != existing.options.get(o) for o in _DISTINGUISHING):
        return "distinct"
    raise QueryError(
        "IndexOptionsConflict",
        f"Index already exists with a different name: {existing.name}",
    )
