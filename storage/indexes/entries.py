"""What a document contributes to an index: the encoded key bodies, with MongoDB's multikey,
sparse, partial and parallel-array rules, and how a key pattern names an index."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ebbdb.storage.catalog.info import IndexInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes import index_kinds, keys
from ebbdb.storage.query.compare import UNDEFINED, compare
from ebbdb.storage.query.paths import MISSING, leaves, split

ID_INDEX_KEY = (("_id", 1),)


def index_bodies(
    ix: IndexInfo, doc: dict[str, Any]
) -> tuple[list[tuple[bytes, dict[str, Any]]], bool]:
    """The encoded key bodies a document contributes to an index, each with the field values that
    make it (for duplicate-key reports), and whether an array made it multikey. An array gives one
    entry per element ([] is indexed as undefined, below null); missing fields index as null.
    Sparse indexes skip documents missing every indexed field; partial ones skip documents their
    filter rejects. Raises QueryError for two arrays in one compound key (MongoDB cannot index
    parallel arrays)."""
    if ix.key == ID_INDEX_KEY:
        value = doc["_id"]
        if ix.collation is not None:
            return [(keys.encode(ix.collation.collate(value)), {"_id": value})], False
        return [(keys.encode(value), {"_id": value})], False
    if ttl.is_cosmos_index(ix):
        return [], False  # it indexes the server-kept last-modified time: expiry entries only
    if ix.partial_predicate is not None and not ix.partial_predicate(doc):
        return [], False
    if ix.kind is not None:
        kind = index_kinds.kind_named(ix.kind)
        if kind is None:  # stored by a newer ebbdb: refuse rather than index it wrongly
            raise QueryError("CannotCreateIndex", f"Unknown index plugin '{ix.kind}'")
        if ix.collation is not None:
            doc = ix.collation.collate(doc)
        return kind.bodies(ix, doc, plain_bodies)
    if ix.collation is not None:
        # Its string keys are the collation's sort keys (a duplicate-key report shows them, as
        # MongoDB's does).
        return plain_bodies(ix, ix.collation.collate(doc))
    return plain_bodies(ix, doc)


def plain_bodies(
    ix: IndexInfo, doc: dict[str, Any], leaf: index_kinds.Leaf | None = None
) -> tuple[list[tuple[bytes, dict[str, Any]]], bool]:
    """The compound-key walk: one entry per combination of the fields' leaf values. `leaf`, when
    given, maps (field, value) to the value encoded in its place (a kind's transform, e.g. a hash);
    the entry's report values stay the document's own."""
    fields = ix.fields
    if leaf is None and len(fields) == 1 and "." not in fields[0]:
        # One top-level field that holds no array: one entry, as the general path below gives.
        value = doc.get(fields[0], MISSING)
        if type(value) is not list:
            if value is MISSING:
                if ix.sparse:
                    return [], False
                value = None
            asc = ix.directions[0] > 0
            body = keys.encode(value) if asc else keys.encode_descending(value)
            return [(body, {fields[0]: value})], False
    per_field: list[list[Any]] = []
    arrays = [path for path in ix.fields if _crosses_array(doc, split(path))]
    all_missing = True
    for path in ix.fields:
        values: list[Any] = []
        for v in leaves(doc, split(path)):
            if v is MISSING:
                values.append(None)
                continue
            all_missing = False
            if type(v) is list:
                values.extend(v) if v else values.append(UNDEFINED)
            else:
                values.append(v)
        per_field.append(values or [None])
    if ix.sparse and all_missing:
        return [], False
    if len(set(arrays)) > 1:
        raise QueryError(
            "CannotIndexParallelArrays",
            f"cannot index parallel arrays [{arrays[1]}] [{arrays[0]}]",
        )
    directions = ix.directions
    out: dict[bytes, dict[str, Any]] = {}
    for combo in _product(per_field):
        encoded = combo if leaf is None else [leaf(f, v) for f, v in zip(fields, combo)]
        body = keys.encode_compound(tuple(encoded), directions)
        out.setdefault(body, dict(zip(fields, combo)))
    return list(out.items()), bool(arrays)


def _crosses_array(doc: Any, parts: tuple[str, ...]) -> bool:
    """Whether the path meets an array anywhere, on the way or at its end (multikey)."""
    value = doc
    for part in parts:
        if type(value) is list:
            return True
        if not isinstance(value, dict):
            return False
        value = value.get(part, MISSING)
        if value is MISSING:
            return False
    return type(value) is list


def _product(lists: list[list[Any]]) -> Iterator[list[Any]]:
    if not lists:
        yield []
        return
    for head in lists[0]:
        for rest in _product(lists[1:]):
            yield [head, *rest]


def index_key_matches(ix: IndexInfo, pattern: dict[str, Any]) -> bool:
    """Whether a key pattern names this index ({a: 1} matches {a: 1.0}, not {a: -1})."""
    if len(pattern) != len(ix.key):
        return False
    for (f, d), (pf, pd) in zip(ix.key, pattern.items()):
        if f != pf or compare(d, pd) != 0:
            return False
    return True
