"""What a document gives a wildcard index (storage/indexes/index_kinds/wildcard.py), against mongod's
wildcard key generator golden outputs, with key roots and projections."""

from __future__ import annotations

from typing import Any

import pytest

from ebbdb.storage.catalog.info import IndexInfo
from ebbdb.storage.indexes.index_kinds.wildcard import covers, leaves
from ebbdb.storage.query.compare import UNDEFINED


def index(field: str = "$**", projection: dict[str, Any] | None = None) -> IndexInfo:
    options = {} if projection is None else {"wildcardProjection": projection}
    return IndexInfo(1, "w", ((field, 1),), options)


@pytest.mark.parametrize(
    ("doc", "expected", "multikey"),
    [
        ({"a": 1, "b": "hello", "c": True}, [("a", 1), ("b", "hello"), ("c", True)], False),
        ({"a": {"b": 1, "c": 2}}, [("a.b", 1), ("a.c", 2)], False),
        ({"a": [1, 2, 3]}, [("a", 1), ("a", 2), ("a", 3)], True),
        ({}, [], False),
        ({"a": None}, [("a", None)], False),
        ({"a": {}}, [("a", {})], False),
        ({"a": []}, [("a", UNDEFINED)], True),
        ({"a": [{"b": 1}, {"b": 2}]}, [("a.b", 1), ("a.b", 2)], True),
        ({"_id": 1, "a": 2, "b": 3}, [("a", 2), ("b", 3)], False),
        ({"a": [[1, 2], [3, 4]]}, [("a", [1, 2]), ("a", [3, 4])], True),
        (
            {"a": {"b": [{"c": [1, 2]}, {"c": [3]}]}},
            [("a.b.c", 1), ("a.b.c", 2), ("a.b.c", 3)],
            True,
        ),
        ({"0": "zero", "x.y": 1}, [("0", "zero")], False),
        ({"_id": "onlyid"}, [], False),
    ],
)
def test_leaves_as_mongod_makes_them(doc: dict[str, Any], expected: Any, multikey: bool) -> None:
    assert leaves(index(), doc) == (expected, multikey)


def test_roots_and_projections() -> None:
    doc = {"_id": 7, "a": {"x": 1, "y": 2}, "b": 3, "c": {"d": 4, "e": 5}}
    assert leaves(index("a.$**"), doc)[0] == [("a.x", 1), ("a.y", 2)]
    assert leaves(index("a.$**"), {"a": 5})[0] == [("a", 5)]
    assert leaves(index(projection={"a": 1, "c.d": 1}), doc)[0] == [
        ("a.x", 1),
        ("a.y", 2),
        ("c.d", 4),
    ]
    assert leaves(index(projection={"c": {"d": 1}, "_id": 1}), doc)[0] == [("_id", 7), ("c.d", 4)]
    assert leaves(index(projection={"a": 0, "c.e": 0}), doc)[0] == [("b", 3), ("c.d", 4)]
    assert leaves(index(projection={"a": 0, "_id": 1}), doc)[0][0] == ("_id", 7)


def test_covers() -> None:
    assert covers(index(), "a.b") and not covers(index(), "a.0") and not covers(index(), "_id")
    assert covers(index("a.$**"), "a.x") and not covers(index("a.$**"), "b")
    assert not covers(index(projection={"b": 0}), "b.c")
