"""The parsed filter: the tree the matcher builds in the same pass as its predicate (node types,
operands, how documents, fields, `$and`, `$all` and negations nest), the predicate parse_filter
returns, a node's own predicate, the top-level conditions, and the filters a $match with $expr
implies for a pipeline's first read."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson import Binary, Decimal128, Int64, ObjectId, Regex

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query import match_tree as t
from ebbdb.storage.query.match import compile_filter, implied_filters, node_predicate, parse_filter
from ebbdb.storage.query.update import upsert_seed

Doc = dict[str, Any]
OID = ObjectId(b"\x02" * 12)


def _any(v: Any) -> bool:
    return False  # a stand-in: a leaf's test takes no part in comparing nodes


def eq(path: str, value: Any, op: str = "$eq") -> t.Compare:
    return t.Compare(path, _any, op, value)


# (filter, tree)
TREES: list[tuple[Doc, t.Node]] = [
    ({}, t.And(())),
    ({"a": 1}, eq("a", 1)),
    ({"a.b": "x"}, eq("a.b", "x")),
    ({"a": {"b": 1}}, eq("a", {"b": 1})),
    ({"a": None}, eq("a", None)),
    ({"a": [1, 2]}, eq("a", [1, 2])),
    ({"a": 1, "b": 2}, t.And((eq("a", 1), eq("b", 2)))),
    ({"a": 1, "$comment": "why"}, eq("a", 1)),
    ({"$comment": "why"}, t.And(())),
    ({"a": {"$eq": 5}}, eq("a", 5)),
    ({"a": {"$gt": 1, "$lt": 5}}, t.And((eq("a", 1, "$gt"), eq("a", 5, "$lt")))),
    ({"a": {"$gte": Int64(1), "$lte": 2.5}}, t.And((eq("a", 1, "$gte"), eq("a", 2.5, "$lte")))),
    ({"a": {"$ne": 1}}, t.Not(eq("a", 1))),
    ({"a": {"$in": [1, "x"]}}, t.In("a", _any, (1, "x"))),
    ({"a": {"$nin": [1]}}, t.Not(t.In("a", _any, (1,)))),
    ({"a": {"$exists": True}}, t.Exists("a", _any)),
    ({"a": {"$exists": 0}}, t.Not(t.Exists("a", _any))),
    ({"a": Regex("^x", "i")}, t.Regex("a", _any, "^x", "i")),
    ({"a": {"$regex": "^x", "$options": "mi"}}, t.Regex("a", _any, "^x", "im")),
    ({"a": {"$not": Regex("x")}}, t.Not(t.Regex("a", _any, "x", ""))),
    ({"a": {"$not": {"$gt": 1, "$lt": 5}}}, t.Not(t.And((eq("a", 1, "$gt"), eq("a", 5, "$lt"))))),
    ({"a": {"$type": "number"}}, t.Type("a", _any, frozenset({1, 16, 18, 19}))),
    ({"a": {"$type": ["string", 8]}}, t.Type("a", _any, frozenset({2, 8}))),
    ({"a": {"$size": 2.0}}, t.Size("a", _any, 2)),
    ({"a": {"$mod": [4.5, -1]}}, t.Mod("a", _any, 4, -1)),
    ({"a": {"$bitsAllSet": 5}}, t.Bits("a", _any, "$bitsAllSet", (0, 2))),
    ({"a": {"$bitsAnyClear": Binary(b"\x02")}}, t.Bits("a", _any, "$bitsAnyClear", (1,))),
    ({"a": {"$all": [1, Regex("x")]}}, t.All("a", (eq("a", 1), t.Regex("a", _any, "x", "")))),
    ({"a": {"$all": []}}, t.Always(False, "a")),
    (
        {"a": {"$all": [{"$elemMatch": {"b": 1}}]}},
        t.All("a", (t.ElemMatchObject("a", _any, eq("b", 1)),)),
    ),
    ({"a": {"$elemMatch": {"$gt": 1}}}, t.ElemMatchValue("a", _any, eq("", 1, "$gt"))),
    (
        {"a": {"$elemMatch": {"b": 1, "c": {"$ne": 2}}}},
        t.ElemMatchObject("a", _any, t.And((eq("b", 1), t.Not(eq("c", 2))))),
    ),
    ({"$and": [{"a": 1}]}, eq("a", 1)),
    ({"$and": [{"a": 1}, {"b": 2, "c": 3}]}, t.And((eq("a", 1), t.And((eq("b", 2), eq("c", 3)))))),
    ({"$or": [{"a": 1}]}, t.Or((eq("a", 1),))),
    ({"$or": [{"a": 1}, {"b": 2}]}, t.Or((eq("a", 1), eq("b", 2)))),
    ({"$nor": [{"a": 1}]}, t.Nor((eq("a", 1),))),
    ({"$expr": {"$eq": ["$a", 1]}}, t.Expr({"$eq": ["$a", 1]})),
    ({"$alwaysTrue": 1, "$alwaysFalse": 1}, t.And((t.Always(True), t.Always(False)))),
    ({"$ref": "c", "$id": OID}, t.And((eq("$ref", "c"), eq("$id", OID)))),
    ({"a": {"$ref": "c", "$id": OID}}, eq("a", {"$ref": "c", "$id": OID})),
]


@pytest.mark.parametrize(("flt", "tree"), TREES, ids=[repr(f) for f, _ in TREES])
def test_the_tree_of_a_filter(flt: Doc, tree: t.Node) -> None:
    parsed = parse_filter(flt)
    assert parsed.tree == tree
    assert parsed.filter is flt


def test_an_absent_filter_is_the_empty_one() -> None:
    parsed = parse_filter(None)
    assert parsed == t.ParsedFilter({}, t.And(()), parsed.predicate)
    assert parsed.predicate({"a": 1})


def test_leaves_hold_their_tests() -> None:
    tree = parse_filter({"a": {"$gt": 1}}).tree
    assert isinstance(tree, t.Compare)
    assert tree.test(2) and not tree.test(1) and not tree.test("x")
    assert tree.expand
    size = parse_filter({"a": {"$size": 1}}).tree
    assert isinstance(size, t.Size) and not size.expand  # judges the array, never its elements


DOCS: list[Doc] = [
    {},
    {"a": 1},
    {"a": 3, "b": 2, "c": 3},
    {"a": [1, 5, {"b": 1, "c": 1}]},
    {"a": "xy", "b": 2},
    {"a": None},
    {"a": {"b": 1}},
    {"a": [[1, 2], 3]},
    {"a": [{"b": 1, "c": 2}]},
    {"a": Decimal128("5")},
    {"a": datetime.datetime(2020, 1, 1)},
    {"$ref": "c", "$id": OID},
]


@pytest.mark.parametrize(("flt", "tree"), TREES, ids=[repr(f) for f, _ in TREES])
def test_the_predicate_is_the_compiled_filter_and_each_node_tests_alike(
    flt: Doc, tree: t.Node
) -> None:
    parsed = parse_filter(flt)
    compiled = compile_filter(flt)
    own = node_predicate(parsed.tree)
    for doc in DOCS:
        assert parsed.predicate(doc) == compiled(doc) == own(doc), doc


def test_parse_errors_are_the_matchers() -> None:
    for flt in ({"a": {"$bogus": 1}}, {"$or": []}, {"a": {"$in": 5}}):
        with pytest.raises(QueryError) as parsed:
            parse_filter(flt)
        with pytest.raises(QueryError) as compiled:
            compile_filter(flt)
        assert (parsed.value.code_name, parsed.value.message) == (
            compiled.value.code_name,
            compiled.value.message,
        )


def test_variables_reach_expr() -> None:
    parsed = parse_filter({"$expr": {"$eq": ["$a", "$$v"]}}, {"v": 2})
    assert parsed.tree == t.Expr({"$eq": ["$a", "$$v"]})
    assert parsed.predicate({"a": 2}) and not parsed.predicate({"a": 3})
    assert node_predicate(parsed.tree, {"v": 3})({"a": 3})


def test_conjuncts_open_every_and_but_not_all_or_or() -> None:
    tree = parse_filter(
        {"a": {"$gt": 1, "$lt": 5}, "$and": [{"b": 1}, {"c": {"$all": [2]}}], "$or": [{"d": 1}]}
    ).tree
    assert list(t.conjuncts(tree)) == [
        eq("a", 1, "$gt"),
        eq("a", 5, "$lt"),
        eq("b", 1),
        t.All("c", (eq("c", 2),)),
        t.Or((eq("d", 1),)),
    ]


def test_conditions_pair_each_top_level_condition_with_its_node() -> None:
    flt = {"a": {"$gt": 1, "$lt": 5}, "$comment": "x", "$or": [{"b": 1}, {"c": 2}]}
    assert list(t.conditions(parse_filter(flt))) == [
        ("a", {"$gt": 1, "$lt": 5}, t.And((eq("a", 1, "$gt"), eq("a", 5, "$lt")))),
        ("$or", [{"b": 1}, {"c": 2}], t.Or((eq("b", 1), eq("c", 2)))),
    ]
    assert list(t.conditions(parse_filter({"$comment": "x", "a": 1}))) == [("a", 1, eq("a", 1))]
    assert list(t.conditions(parse_filter({}))) == []


def test_uses_expr() -> None:
    assert t.uses_expr(parse_filter({"$or": [{"a": 1}, {"$expr": True}]}).tree)
    assert t.uses_expr(parse_filter({"$nor": [{"$and": [{"$expr": True}]}]}).tree)
    assert not t.uses_expr(parse_filter({"a": {"$elemMatch": {"b": 1}}, "c": {"$ne": 1}}).tree)


# (filter, variables, implied filters)
IMPLIED: list[tuple[Doc, Doc, list[Doc]]] = [
    ({"a": 1}, {}, [{"a": 1}]),
    ({"$expr": {"$eq": ["$a", "$$v"]}}, {"v": 5}, [{"a": {"$eq": 5}}]),
    ({"$expr": {"$eq": ["$$v", "$a.b"]}}, {"v": "x"}, [{"a.b": {"$eq": "x"}}]),
    ({"$expr": {"$eq": ["$a", "lit"]}}, {}, [{"a": {"$eq": "lit"}}]),
    (
        {"k": {"$gt": 1}, "$expr": {"$and": [{"$eq": ["$a", "$$v"]}, {"$eq": ["$b", 2]}]}},
        {"v": OID},
        [{"k": {"$gt": 1}}, {"a": {"$eq": OID}}, {"b": {"$eq": 2}}],
    ),
    ({"$expr": {"$eq": ["$a", "$$v.x"]}}, {"v": {"x": 3}}, [{"a": {"$eq": 3}}]),
    # What the variables do not fix, or what means something else to the matcher, is left out.
    ({"$expr": {"$eq": ["$a", "$$missing"]}}, {}, []),
    ({"$expr": {"$eq": ["$a", "$$v"]}}, {"v": None}, []),
    ({"$expr": {"$eq": ["$a", "$$v"]}}, {"v": [1]}, []),
    ({"$expr": {"$eq": ["$a", "$$v"]}}, {"v": float("nan")}, []),
    ({"$expr": {"$eq": ["$a", "$b"]}}, {}, []),
    ({"$expr": {"$eq": ["$a", "$$ROOT"]}}, {}, []),
    ({"$expr": {"$gt": ["$a", 1]}}, {}, []),
    ({"$expr": {"$eq": ["$a", {"$add": [1, 1]}]}}, {}, []),
    # A condition holding $expr anywhere depends on the variables: not pushed.
    ({"a": 1, "$or": [{"$expr": True}, {"b": 1}]}, {}, [{"a": 1}]),
    ({"$comment": "x", "a": {"$in": [1, 2]}}, {}, [{"a": {"$in": [1, 2]}}]),
]


@pytest.mark.parametrize(
    ("flt", "variables", "implied"), IMPLIED, ids=[repr(f) for f, *_ in IMPLIED]
)
def test_implied_filters(flt: Doc, variables: Doc, implied: list[Doc]) -> None:
    # Parsed as a pipeline parses its $match: every variable in scope defined, whatever its value.
    parsed = parse_filter(flt, {"missing": None, **variables})
    assert implied_filters(parsed, variables) == implied
    # A superset: every document the filter matches, each implied filter matches.
    for doc in [*DOCS, {"a": 5}, {"a": OID, "b": 2, "k": 3}, {"a": {"b": "x"}}]:
        if parsed.predicate(doc):
            assert all(compile_filter(f)(doc) for f in implied), doc


def test_upsert_seed_reads_a_parsed_filter() -> None:
    parsed = parse_filter({"a": 1, "$and": [{"b.c": {"$eq": 2}}], "d": {"$in": [3]}})
    assert upsert_seed(parsed) == {"a": 1, "b": {"c": 2}, "d": 3}
