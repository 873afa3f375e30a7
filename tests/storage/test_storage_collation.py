"""storage/core/collation.py without a server: parsing with MongoDB's codes and normalised document,
sort keys, collated values, filters parsed under a collation, sorts, index keys and plans."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Regex

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.collation import VERSION, has_string, normalise, parse_collation, resolve
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.indexes.entries import ID_INDEX_KEY, index_bodies
from ebbdb.storage.indexes.planner import CollScan, IndexScan, plan_query
from ebbdb.storage.query import match_tree as t
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.sort import parse_sort, sort_documents


def en(**options: Any) -> Any:
    c = parse_collation({"locale": "en", **options})
    assert c is not None
    return c


def test_the_simple_collation_is_none() -> None:
    assert parse_collation({"locale": "simple"}) is None
    assert normalise({"locale": "simple"}) is None


def test_the_normalised_document_takes_the_locale_defaults() -> None:
    assert normalise({"locale": "da"}) == {
        "locale": "da",
        "caseLevel": False,
        "caseFirst": "upper",  # Danish sorts upper case first
        "strength": 3,
        "numericOrdering": False,
        "alternate": "non-ignorable",
        "maxVariable": "punct",
        "normalization": False,
        "backwards": False,
        "version": VERSION,
    }
    assert parse_collation({"locale": "en", "version": VERSION}) == en()


@pytest.mark.parametrize(
    ("spec", "code_name"),
    [
        ({}, "NoSuchKey"),
        ({"locale": None}, "TypeMismatch"),
        ({"locale": ""}, "BadValue"),
        ({"locale": "a\x00b"}, "BadValue"),
        ({"locale": "zz_QQ"}, "BadValue"),
        ({"locale": "en", "strength": "2"}, "TypeMismatch"),
        ({"locale": "en", "strength": 2.5}, "BadValue"),
        ({"locale": "en", "strength": 0}, "FailedToParse"),
        ({"locale": "en", "caseFirst": 1}, "TypeMismatch"),
        ({"locale": "en", "caseFirst": "UPPER"}, "FailedToParse"),
        ({"locale": "en", "alternate": "ignorable"}, "FailedToParse"),
        ({"locale": "en", "maxVariable": "symbol"}, "FailedToParse"),
        ({"locale": "en", "normalization": 1}, "TypeMismatch"),
        ({"locale": "en", "backwards": "yes"}, "TypeMismatch"),
        ({"locale": "en", "version": 57.1}, "TypeMismatch"),
        ({"locale": "en", "version": "72.1"}, "IncompatibleCollationVersion"),
        ({"locale": "en", "x": 1}, "FailedToParse"),
        ({"locale": "en", "strength": 2, "caseFirst": "lower"}, "BadValue"),
        ({"locale": "en", "strength": 1, "backwards": True}, "BadValue"),
    ],
)
def test_bad_documents(spec: dict[str, Any], code_name: str) -> None:
    with pytest.raises(QueryError) as info:
        parse_collation(spec)
    assert info.value.code_name == code_name


def test_strength_accepts_whole_numbers_of_any_type() -> None:
    assert en(strength=2.0).strength == 2
    assert en(strength=2, caseLevel=True, caseFirst="lower").case_first == "lower"


def test_keys_order_and_equal_strings_as_the_collation_says() -> None:
    c2 = en(strength=2)
    assert c2.key("A") == c2.key("a") != c2.key("b")
    assert c2.key("a") < c2.key("B") < c2.key("c")
    assert en(strength=1).key("é") == en(strength=1).key("E")
    assert en(strength=2).key("é") != en(strength=2).key("e")
    numeric = en(numericOrdering=True)
    assert numeric.key("9") < numeric.key("10")
    assert en().key("10") < en().key("9")


def test_collate_reaches_into_documents_and_arrays_not_field_names() -> None:
    c = en(strength=2)
    value = {"A": ["X", {"B": "y"}], "n": 1}
    assert c.collate(value) == {"A": [c.key("X"), {"B": c.key("y")}], "n": 1}
    assert has_string(value) and not has_string({"n": [1, 2.5]})


def test_resolve_prefers_the_given_collation_over_the_default() -> None:
    coll = CollectionInfo(1, "d", "c", {"collation": normalise({"locale": "en"})}, ())
    assert resolve(None, coll) == en()
    assert resolve({}, coll) == en()
    assert resolve({"locale": "simple"}, coll) is None
    assert resolve({"locale": "en", "strength": 1}, coll) == en(strength=1)
    assert resolve(None, None) is None


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"s": "BOB"}, [1, 2]),
        ({"s": {"$ne": "bob"}}, [3, 4]),
        ({"s": {"$in": ["BOB", Regex("^c")]}}, [1, 2, 4]),
        ({"s": {"$nin": ["BOB"]}}, [3, 4]),
        ({"s": {"$gte": "C"}}, [4]),
        ({"s": {"$all": ["BOB"]}}, [1, 2]),
        ({"a": {"$elemMatch": {"$eq": "X"}}}, [3]),
        ({"a": {"$elemMatch": {"k": "X"}}}, [4]),
        ({"s": {"$regex": "^B"}}, [2]),
        ({"n": 1}, [1]),
    ],
)
def test_collated_filters(flt: dict[str, Any], expected: list[int]) -> None:
    docs = [
        {"_id": 1, "s": "bob", "n": 1},
        {"_id": 2, "s": "Bob"},
        {"_id": 3, "s": "alice", "a": ["x"]},
        {"_id": 4, "s": "carl", "a": [{"k": "x"}]},
    ]
    parsed = parse_filter(flt, collation=en(strength=2))
    assert [d["_id"] for d in docs if parsed.predicate(d)] == expected


def test_a_filter_is_collated_as_it_is_parsed() -> None:
    c = en(strength=2)
    flt = {"s": "bob", "a": {"$elemMatch": {"k": {"$in": ["X"]}}}, "n": {"$gt": 1}}
    parsed = parse_filter(flt, collation=c)
    plain = parse_filter(flt)
    assert parsed.collation is c and plain.collation is None
    # The tree keeps the values as written (what the planner and upsert seeding read) ...
    assert parsed.tree == plain.tree
    s, a, n = parsed.tree.children  # type: ignore[union-attr]
    assert isinstance(s, t.Compare) and s.value == "bob"
    # ... and its leaves' own tests are the collation's, not rebuilt after the parse.
    assert s.test("BOB") and not plain.tree.children[0].test("BOB")  # type: ignore[union-attr]
    assert isinstance(a, t.ElemMatchObject) and a.test([{"k": "x"}])
    assert isinstance(n, t.Compare) and n.test(2) and not n.test(1)
    assert parsed.predicate({"s": "Bob", "a": [{"k": "x"}], "n": 2})
    assert not plain.predicate({"s": "Bob", "a": [{"k": "x"}], "n": 2})


def test_sorting_under_a_collation() -> None:
    rows = [({"s": s}, s) for s in ["b", "B", "a", "10", "9"]]
    spec = parse_sort({"s": 1})
    assert spec is not None
    assert sort_documents(rows, spec) == ["10", "9", "B", "a", "b"]
    assert sort_documents(rows, spec, en(numericOrdering=True)) == ["9", "10", "a", "b", "B"]


def test_collated_index_keys() -> None:
    options = {"collation": normalise({"locale": "en", "strength": 2})}
    ix = IndexInfo(5, "s_1", (("s", 1),), options)
    ((upper, _),) = index_bodies(ix, {"s": "A"})[0]
    ((lower, _),) = index_bodies(ix, {"s": "a"})[0]
    assert upper == lower
    plain = IndexInfo(6, "s_1", (("s", 1),))
    assert index_bodies(plain, {"s": "A"})[0] != index_bodies(plain, {"s": "a"})[0]
    id_ix = IndexInfo(7, "_id_", ID_INDEX_KEY, options)
    assert index_bodies(id_ix, {"_id": "X"})[0][0][0] == index_bodies(id_ix, {"_id": "x"})[0][0][0]


def test_the_planner_matches_collations() -> None:
    options = {"collation": normalise({"locale": "en", "strength": 2})}
    coll = CollectionInfo(
        1,
        "d",
        "c",
        {},
        (IndexInfo(2, "_id_", ID_INDEX_KEY), IndexInfo(3, "s_1", (("s", 1),), options)),
    )
    c2 = en(strength=2)
    collated = plan_query(coll, parse_filter({"s": "a"}), collation=c2)
    assert isinstance(collated, IndexScan) and collated.index.name == "s_1"
    assert isinstance(plan_query(coll, parse_filter({"s": "a"})), CollScan)
    assert isinstance(plan_query(coll, parse_filter({"s": "a"}), collation=en()), CollScan)
    numbers = plan_query(coll, parse_filter({"s": 5}))
    assert isinstance(numbers, IndexScan) and numbers.index.name == "s_1"
    # The `_id` index is simple here: a string `_id` under a collation is not looked up by key.
    assert isinstance(plan_query(coll, parse_filter({"_id": "a"}), collation=c2), CollScan)
    by_id = plan_query(coll, parse_filter({"_id": 1}), collation=c2)
    assert isinstance(by_id, IndexScan) and by_id.point is not None
