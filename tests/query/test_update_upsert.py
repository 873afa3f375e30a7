"""Upserts: the seed document MongoDB builds from a query's equality conditions (which conditions
count, dotted paths, order, conflicts), and updates applied to it as the insert
($setOnInsert, `_id` rules, positional paths, replacements)."""

from __future__ import annotations

from typing import Any

import bson
from bson import ObjectId, Regex
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.update import parse_update
from ebbdb.storage.query.update import upsert_seed as seed_of_parsed
from tests.case_tables import load_cases
from tests.helpers import cases, errors_test, query_error

Doc = dict[str, Any]
NOW = 1_700_000_000_123


def upsert_seed(query: Doc, *, replacement: bool = False) -> Doc:
    """The seed of a query as a write parses it: once, then the seed reads its tree."""
    return seed_of_parsed(parse_filter(query), replacement=replacement)


OID = ObjectId("65a000000000000000000001")

# (id, query, seed)
SEEDS = [tuple(case.values()) for case in load_cases("upsert_seeds")] + [
    ("_id first", {"a": 1, "_id": OID}, {"_id": OID, "a": 1}),
    ("one-regex $in", {"a": {"$in": [Regex("x")]}}, {}),
    ("regex", {"a": Regex("^x")}, {}),
]


@cases(("query", "seed"), SEEDS)
def test_seed(query: Doc, seed: Doc) -> None:
    out = upsert_seed(query)
    assert out == seed
    assert bson.encode(out, codec_options=CODEC) == bson.encode(seed, codec_options=CODEC)


# (id, query, codeName, message)
SEED_ERRORS = [tuple(case.values()) for case in load_cases("upsert_seed_errors")]


test_seed_error = errors_test(upsert_seed, SEED_ERRORS)


def test_seed_for_a_replacement_takes_only_id() -> None:
    assert upsert_seed({"_id": 1, "a": 2}, replacement=True) == {"_id": 1}
    # Conflicts away from _id do not matter to a replacement.
    assert upsert_seed({"a": 1, "a.b": 2, "_id": 3}, replacement=True) == {"_id": 3}
    assert query_error(upsert_seed, {"_id.x": 1}, replacement=True) == (
        "NotExactValueField",
        "field at '_id' must be exactly specified, field at sub-path '_id.x'found",
    )


def test_seed_copies_query_values() -> None:
    query = {"a": {"b": [1]}}
    seed = upsert_seed(query)
    seed["a"]["b"].append(2)
    assert query == {"a": {"b": [1]}}


# -- applying to the seed ---------------------------------------------------------------------------

# (id, query, update, inserted document)
INSERTS = [tuple(case.values()) for case in load_cases("upsert_inserts")] + [
    (
        "$setOnInsert _id",
        {"a": 1},
        {"$setOnInsert": {"_id": OID}},
        {"_id": OID, "a": 1},
    ),
    ("$currentDate", {"_id": 1}, {"$currentDate": {"at": True}}, {"_id": 1, "at": DatetimeMS(NOW)}),
]


@cases(("query", "spec", "expected"), INSERTS)
def test_insert(query: Doc, spec: Doc, expected: Doc) -> None:
    parsed = parse_filter(query)
    out = parse_update(spec).apply(seed_of_parsed(parsed), now_ms=NOW, inserting=True, query=parsed)
    assert out == expected
    assert list(out) == list(expected)


# (id, query, update, codeName, message)
INSERT_ERRORS = [tuple(case.values()) for case in load_cases("upsert_insert_errors")]


@cases(("query", "spec", "code", "message"), INSERT_ERRORS)
def test_insert_error(query: Doc, spec: Doc, code: str, message: str) -> None:
    update = parse_update(spec)
    seed = upsert_seed(query, replacement=update.replacement)
    assert query_error(
        update.apply, seed, now_ms=NOW, inserting=True, query=parse_filter(query)
    ) == (
        code,
        message,
    )


def test_replacement_upsert_keeps_the_query_id() -> None:
    update = parse_update({"b": 1})
    seed = upsert_seed({"_id": 7, "a": 1}, replacement=True)
    assert update.apply(seed, now_ms=NOW, inserting=True) == {"_id": 7, "b": 1}
    same = parse_update({"b": 1, "_id": 7})
    assert list(same.apply(seed, now_ms=NOW, inserting=True)) == ["_id", "b"]
