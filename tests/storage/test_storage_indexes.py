"""Indexes in storage, without a server: spec validation and generated names, conflicts with existing
indexes, builds over existing documents, the entries each document contributes (multikey, sparse,
partial, MongoDB's null/missing rule), index upkeep in the write transaction, drops, and keys longer
than LMDB allows."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from bson import Decimal128, Int64

from ebbdb.storage.catalog.info import IndexInfo
from ebbdb.storage.core.errors import DuplicateKey, NamespaceNotFound, QueryError
from ebbdb.storage.engine.store import Engine, index_bodies
from ebbdb.storage.execution.execute import QueryRun
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.planner import IndexScan
from ebbdb.storage.indexes.specs import (
    MAX_INDEXES,
    IndexSpec,
    conflict,
    default_name,
    parse_index_spec,
)
from ebbdb.storage.query.compare import UNDEFINED
from tests.helpers import LONG, LONG_RANGES, PREFIX, enc, ids, run_query


def spec(key: dict[str, Any], **options: Any) -> IndexSpec:
    return parse_index_spec({"key": key, **options})


def create(engine: Engine, key: dict[str, Any], **options: Any) -> Any:
    """Create one index on db.c."""
    return engine.create_indexes("db", "c", [spec(key, **options)])


def index(engine: Engine, name: str, coll: str = "c") -> IndexInfo:
    info = engine.collection("db", coll)
    assert info is not None
    ix = info.index_named(name)
    assert ix is not None, f"no index {name}"
    return ix


def entries(engine: Engine, ix: IndexInfo) -> list[tuple[bytes, int]]:
    """Every entry of an index, in key order."""
    with engine.read() as r:
        return list(r.index_entries(ix, b"", b"\xff" * 9, False, None))


def index_names(engine: Engine, coll: str = "c") -> list[str]:
    info = engine.collection("db", coll)
    return [] if info is None else [ix.name for ix in info.indexes]


def query(
    engine: Engine,
    flt: dict[str, Any],
    sort: dict[str, Any] | None = None,
    hint: Any = None,
    coll: str = "c",
) -> tuple[list[dict[str, Any]], QueryRun]:
    return run_query(engine, coll, flt, sort, hint)


# -- specs and names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ({"a": 1}, "a_1"),
        ({"a": -1}, "a_-1"),
        ({"a": 1, "b": -1}, "a_1_b_-1"),
        ({"a.b": 1, "c": 1}, "a.b_1_c_1"),
        ({"a": 1.0}, "a_1"),
        ({"a": Int64(-1)}, "a_-1"),
        ({"a": 2}, "a_2"),
        ({"a": -1.5}, "a_-1.5"),
        ({"_id": 1}, "_id_1"),
    ],
)
def test_default_names(key: dict[str, Any], name: str) -> None:
    assert default_name(tuple(key.items())) == name


def test_parse_spec_keeps_key_order_name_and_options() -> None:
    s = parse_index_spec(
        {"key": {"b": 1, "a": -1}, "name": "x", "unique": True, "sparse": 1, "v": 2}
    )
    assert s.name == "x"
    assert s.key == (("b", 1), ("a", -1))
    assert s.options == {"unique": True, "sparse": True}


def test_false_options_are_left_out_and_the_simple_collation_is_not_listed() -> None:
    s = spec({"a": 1}, unique=False, sparse=0, hidden=False, collation={"locale": "simple"})
    assert s.options == {}


@pytest.mark.parametrize(
    ("doc", "code_name"),
    [
        ({"key": {}}, "CannotCreateIndex"),
        ({"key": {"a": 0}}, "CannotCreateIndex"),
        ({"key": {"a": 0.0}}, "CannotCreateIndex"),
        ({"key": {"a": True}}, "CannotCreateIndex"),
        ({"key": {"a": None}}, "CannotCreateIndex"),
        ({"key": {"a": {"x": 1}}}, "CannotCreateIndex"),
        ({"key": {"a": "ascending"}}, "CannotCreateIndex"),
        ({"key": {"a": float("nan")}}, "CannotCreateIndex"),
        ({"key": {"": 1}}, "CannotCreateIndex"),
        ({"key": {"a..b": 1}}, "CannotCreateIndex"),
        ({"key": {"a": 1}, "name": "*"}, "CannotCreateIndex"),
        ({"key": {"a": 1}, "name": ""}, "CannotCreateIndex"),
        ({"key": {"a": "columnstore"}}, "NotImplemented"),
        ({"key": {"a": "text", "b": 1, "c": "text"}}, "Location17389"),
        ({"key": {"a": "text"}, "default_language": "klingon"}, "Location17264"),
        ({"key": {"a": "geoHaystack"}}, "NotImplemented"),
        ({"key": {"a": 1}, "collation": {"locale": "xx"}}, "BadValue"),
        ({"key": {"a": 1}, "collation": {"locale": "simple", "strength": 2}}, "FailedToParse"),
        ({"key": {"a": 1}, "bogus": 1}, "InvalidIndexSpecificationOption"),
        ({"key": {"a": 1}, "uniqe": True}, "InvalidIndexSpecificationOption"),
        ({"key": {"_id": 1}, "unique": True}, "InvalidIndexSpecificationOption"),
        ({"key": {"_id": 1}, "sparse": True}, "InvalidIndexSpecificationOption"),
        (
            {"key": {"a": 1}, "sparse": True, "partialFilterExpression": {"a": 1}},
            "CannotCreateIndex",
        ),
        ({"key": {"a": 1}, "partialFilterExpression": {"a": {"$bogus": 1}}}, "BadValue"),
        (
            {"key": {"a": 1}, "partialFilterExpression": {"$expr": {"$gt": ["$a", 1]}}},
            "CannotCreateIndex",
        ),
        (
            {"key": {"a": 1}, "partialFilterExpression": {"$and": [{"$expr": True}]}},
            "CannotCreateIndex",
        ),
        ({"key": {"a": 1}, "expireAfterSeconds": -1}, "CannotCreateIndex"),
        ({"key": {"a": 1, "b": 1}, "expireAfterSeconds": 5}, "CannotCreateIndex"),
        ({"name": "x"}, "FailedToParse"),
    ],
)
def test_invalid_specs(doc: dict[str, Any], code_name: str) -> None:
    with pytest.raises(QueryError) as info:
        parse_index_spec(doc)
    assert info.value.code_name == code_name


# -- conflicts -------------------------------------------------------------------------------------


def existing(key: dict[str, Any], name: str, **options: Any) -> IndexInfo:
    return IndexInfo(7, name, tuple(key.items()), options)


@pytest.mark.parametrize(
    ("requested", "have", "outcome"),
    [
        # Identical: already exists (numeric directions compare by value).
        (spec({"a": 1}), existing({"a": 1}, "a_1"), "same"),
        (spec({"a": 1.0}, name="a_1"), existing({"a": Int64(1)}, "a_1"), "same"),
        (spec({"b": 1}), existing({"a": 1}, "a_1"), "distinct"),
        (spec({"a": -1}), existing({"a": 1}, "a_1"), "distinct"),
        # Same key, different name, same options: MongoDB's 85.
        (spec({"a": 1}, name="other"), existing({"a": 1}, "a_1"), "IndexOptionsConflict"),
        # Same name, different key: 86.
        (spec({"b": 1}, name="a_1"), existing({"a": 1}, "a_1"), "IndexKeySpecsConflict"),
        # Same name and key, an identifying option differs: not the same index, so 86.
        (spec({"a": 1}, unique=True), existing({"a": 1}, "a_1"), "IndexKeySpecsConflict"),
        # A different partial filter makes the same key pattern a different index.
        (
            spec({"a": 1}, name="p", partialFilterExpression={"a": {"$gt": 1}}),
            existing({"a": 1}, "a_1"),
            "distinct",
        ),
    ],
)
def test_conflicts(requested: IndexSpec, have: IndexInfo, outcome: str) -> None:
    if outcome in ("same", "distinct"):
        assert conflict(requested, have) == outcome
    else:
        with pytest.raises(QueryError) as info:
            conflict(requested, have)
        assert info.value.code_name == outcome


# -- create_indexes --------------------------------------------------------------------------------


def test_create_on_a_new_collection_creates_it(engine: Engine) -> None:
    result = create(engine, {"a": 1})
    assert (result.before, result.after, result.created_collection, result.note) == (
        1,
        2,
        True,
        None,
    )
    assert index_names(engine) == ["_id_", "a_1"]


def test_identical_repeat_is_a_no_op_with_a_note(engine: Engine) -> None:
    create(engine, {"a": 1}, unique=True)
    result = create(engine, {"a": 1}, unique=True)
    assert (result.before, result.after, result.note) == (2, 2, "all indexes already exist")
    assert not result.created_collection
    assert index_names(engine) == ["_id_", "a_1"]


def test_several_specs_in_one_call_some_existing(engine: Engine) -> None:
    create(engine, {"a": 1})
    result = engine.create_indexes("db", "c", [spec({"a": 1}), spec({"b": 1}), spec({"c": -1})])
    assert (result.before, result.after, result.note) == (2, 4, None)
    assert index_names(engine) == ["_id_", "a_1", "b_1", "c_-1"]


def test_the_same_name_twice_in_one_call_is_refused(engine: Engine) -> None:
    with pytest.raises(QueryError) as info:
        engine.create_indexes("db", "c", [spec({"a": 1}, name="x"), spec({"b": 1}, name="x")])
    assert info.value.code_name == "IndexKeySpecsConflict"
    assert engine.collection("db", "c") is None  # nothing, not even the collection


def test_conflicts_leave_the_catalog_unchanged(engine: Engine) -> None:
    create(engine, {"a": 1})
    for bad, code_name in [
        (spec({"a": 1}, name="again"), "IndexOptionsConflict"),
        (spec({"b": 1}, name="a_1"), "IndexKeySpecsConflict"),
    ]:
        with pytest.raises(QueryError) as info:
            engine.create_indexes("db", "c", [spec({"z": 1}), bad])
        assert info.value.code_name == code_name
        assert index_names(engine) == ["_id_", "a_1"]


def test_too_many_indexes(engine: Engine) -> None:
    engine.create_indexes("db", "c", [spec({f"f{i}": 1}) for i in range(MAX_INDEXES - 1)])
    assert len(index_names(engine)) == MAX_INDEXES
    with pytest.raises(QueryError) as info:
        create(engine, {"one_more": 1})
    assert info.value.code_name == "CannotCreateIndex"
    assert len(index_names(engine)) == MAX_INDEXES


def test_build_indexes_existing_documents(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": i, "a": i % 5}) for i in range(30)])
    result = create(engine, {"a": 1})
    assert (result.before, result.after, result.created_collection) == (1, 2, False)
    ix = index(engine, "a_1")
    assert len(entries(engine, ix)) == 30
    assert not ix.multikey
    docs, run = query(engine, {"a": 3})
    assert isinstance(run.plan, IndexScan) and run.plan.index.name == "a_1"
    assert ids(docs) == [3, 8, 13, 18, 23, 28]
    assert run.docs_examined == 6


def test_build_marks_multikey(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": 1, "a": 1}), enc({"_id": 2, "a": [1, 2, 3]})])
    create(engine, {"a": 1})
    ix = index(engine, "a_1")
    assert ix.multikey
    assert len(entries(engine, ix)) == 4


def test_insert_marks_multikey_and_it_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    eng = Engine.open(path)
    create(eng, {"a": 1})
    assert not index(eng, "a_1").multikey
    eng.insert("db", "c", [enc({"_id": 1, "a": [5, 6]})])
    assert index(eng, "a_1").multikey
    eng.close()
    eng = Engine.open(path)
    try:
        ix = index(eng, "a_1")
        assert ix.multikey
        assert len(entries(eng, ix)) == 2
        assert ids(query(eng, {"a": 6})[0]) == [1]
    finally:
        eng.close()


def test_unique_build_meeting_a_duplicate_leaves_nothing_behind(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": i, "a": i % 10}) for i in range(20)])
    with pytest.raises(DuplicateKey) as info:
        engine.create_indexes("db", "c", [spec({"b": 1}), spec({"a": 1}, unique=True)])
    assert info.value.index_name == "a_1"
    assert index_names(engine) == ["_id_"]
    # The aborted build wrote no entries: the same key, non-unique, builds exactly one per document.
    create(engine, {"a": 1})
    assert len(entries(engine, index(engine, "a_1"))) == 20
    assert sorted(ids(query(engine, {"a": 4})[0])) == [4, 14]


def test_parallel_arrays_fail_a_build(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": 1, "a": [1, 2], "b": [3, 4]})])
    with pytest.raises(QueryError) as info:
        create(engine, {"a": 1, "b": 1})
    assert info.value.code_name == "CannotIndexParallelArrays"
    assert index_names(engine) == ["_id_"]


def test_indexes_survive_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    eng = Engine.open(path)
    eng.insert("db", "c", [enc({"_id": i, "a": i}) for i in range(5)])
    create(eng, {"a": -1}, unique=True, name="ua")
    eng.close()
    eng = Engine.open(path)
    try:
        ix = index(eng, "ua")
        assert ix.unique and ix.key == (("a", -1),)
        assert ix.spec() == {"v": 2, "key": {"a": -1}, "name": "ua", "unique": True}
        res = eng.insert("db", "c", [enc({"_id": 9, "a": 3})])
        assert [type(e) for _, e in res.errors] == [DuplicateKey]
    finally:
        eng.close()


# -- what each document contributes ------------------------------------------------------------------


def info_for(key: dict[str, Any], **options: Any) -> IndexInfo:
    return IndexInfo(1, "ix", tuple(key.items()), dict(options))


def values_of(ix: IndexInfo, doc: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    bodies, multi = index_bodies(ix, {"_id": 0, **doc})
    return [values for _body, values in bodies], multi


@pytest.mark.parametrize(
    ("key", "options", "doc", "expected", "multikey"),
    [
        ({"a": 1}, {}, {"a": 5}, [{"a": 5}], False),
        ({"a": 1}, {}, {}, [{"a": None}], False),
        ({"a": 1}, {}, {"a": None}, [{"a": None}], False),
        ({"a": 1}, {}, {"a": [1, 2]}, [{"a": 1}, {"a": 2}], True),
        # The same element twice is one entry.
        ({"a": 1}, {}, {"a": [3, 3]}, [{"a": 3}], True),
        ({"a": 1}, {}, {"a": []}, [{"a": UNDEFINED}], True),
        ({"a": 1}, {}, {"a": [[1], 2]}, [{"a": [1]}, {"a": 2}], True),
        ({"a": 1}, {}, {"a": {"b": 1}}, [{"a": {"b": 1}}], False),
        ({"a.b": 1}, {}, {"a": {"b": 7}}, [{"a.b": 7}], False),
        ({"a.b": 1}, {}, {"a": [{"b": 1}, {"b": 2}]}, [{"a.b": 1}, {"a.b": 2}], True),
        ({"a.b": 1}, {}, {"a": 5}, [{"a.b": None}], False),
        ({"a": 1, "b": 1}, {}, {"a": 1}, [{"a": 1, "b": None}], False),
        (
            {"a": 1, "b": -1},
            {},
            {"a": [1, 2], "b": "x"},
            [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}],
            True,
        ),
        # Sparse: only a document missing every indexed field is left out.
        ({"a": 1}, {"sparse": True}, {}, [], False),
        ({"a": 1}, {"sparse": True}, {"a": None}, [{"a": None}], False),
        ({"a": 1, "b": 1}, {"sparse": True}, {"b": 2}, [{"a": None, "b": 2}], False),
        ({"a": 1, "b": 1}, {"sparse": True}, {"c": 2}, [], False),
        # Partial: documents the filter rejects have no entries.
        ({"a": 1}, {"partialFilterExpression": {"a": {"$gt": 5}}}, {"a": 3}, [], False),
        ({"a": 1}, {"partialFilterExpression": {"a": {"$gt": 5}}}, {"a": 9}, [{"a": 9}], False),
        (
            {"a": 1},
            {"partialFilterExpression": {"b": True}},
            {"a": 1, "b": True},
            [{"a": 1}],
            False,
        ),
    ],
)
def test_index_entries_of_a_document(
    key: dict[str, Any],
    options: dict[str, Any],
    doc: dict[str, Any],
    expected: list[dict[str, Any]],
    multikey: bool,
) -> None:
    got, multi = values_of(info_for(key, **options), doc)
    assert sorted(map(repr, got)) == sorted(map(repr, expected))
    assert multi == multikey


@pytest.mark.parametrize(
    ("key", "doc"),
    [
        ({"a": 1, "b": 1}, {"a": [1, 2], "b": [3, 4]}),
        ({"a": 1, "b": -1}, {"a": [1], "b": []}),
        ({"a.x": 1, "b": 1}, {"a": {"x": [1]}, "b": [2]}),
        ({"a.x": 1, "a.y": 1}, {"a": {"x": [1], "y": [2]}}),
        # An array met on the way down a dotted path counts too.
        ({"a.b": 1, "c": 1}, {"a": [{"b": 1}], "c": [1, 2]}),
        ({"a.b": 1, "c.d": 1}, {"a": [{"b": 1}, {"b": 2}], "c": [{"d": 1}, {"d": 2}]}),
    ],
)
def test_parallel_arrays_are_refused(key: dict[str, Any], doc: dict[str, Any]) -> None:
    with pytest.raises(QueryError) as info:
        index_bodies(info_for(key), {"_id": 0, **doc})
    assert info.value.code_name == "CannotIndexParallelArrays"


def test_numbers_of_every_type_share_an_entry() -> None:
    ix = info_for({"a": 1})
    bodies = {
        index_bodies(ix, {"_id": 0, "a": v})[0][0][0]
        for v in (1, 1.0, Int64(1), Decimal128("1"), Decimal128("1.000"))
    }
    assert len(bodies) == 1


def test_descending_entries_sort_in_reverse() -> None:
    ix = info_for({"a": -1})
    values = [None, -5, 0, 2.5, "a", "b", {"x": 1}, False, True, datetime.datetime(2020, 1, 1)]
    bodies = [index_bodies(ix, {"_id": 0, "a": v})[0][0][0] for v in values]
    assert bodies == sorted(bodies, reverse=True)


# -- writes keep their indexes in step --------------------------------------------------------------


def test_insert_writes_entries_to_every_index(engine: Engine) -> None:
    engine.create_indexes("db", "c", [spec({"a": 1}), spec({"b": -1}), spec({"a": 1, "b": 1})])
    engine.insert("db", "c", [enc({"_id": 1, "a": 1, "b": 2}), enc({"_id": 2, "a": [1, 2]})])
    assert len(entries(engine, index(engine, "_id_"))) == 2
    assert len(entries(engine, index(engine, "a_1"))) == 3
    assert len(entries(engine, index(engine, "b_-1"))) == 2
    assert len(entries(engine, index(engine, "a_1_b_1"))) == 3
    assert ids(query(engine, {"a": 2}, hint="a_1")[0]) == [2]
    assert sorted(ids(query(engine, {"b": None}, hint="b_-1")[0])) == [2]


def test_failed_unique_insert_leaves_no_entries_anywhere(engine: Engine) -> None:
    engine.create_indexes("db", "c", [spec({"v": 1}), spec({"u": 1}, unique=True), spec({"w": 1})])
    assert engine.insert("db", "c", [enc({"_id": 1, "u": 1, "v": "x", "w": 1})]).inserted == 1
    before = {n: entries(engine, index(engine, n)) for n in index_names(engine)}
    # v_1 comes before the unique index and w_1 after it: neither may keep an entry.
    result = engine.insert("db", "c", [enc({"_id": 2, "u": 1, "v": "y", "w": 2})])
    assert result.inserted == 0
    assert [type(e) for _, e in result.errors] == [DuplicateKey]
    assert {n: entries(engine, index(engine, n)) for n in index_names(engine)} == before
    assert query(engine, {"v": "y"}, hint="v_1")[0] == []
    assert query(engine, {"_id": 2})[0] == []
    # The next document with that key (and a free unique value) goes in, once.
    assert engine.insert("db", "c", [enc({"_id": 2, "u": 2, "v": "y", "w": 2})]).inserted == 1
    assert ids(query(engine, {"v": "y"}, hint="v_1")[0]) == [2]
    assert ids(query(engine, {"w": 2}, hint="w_1")[0]) == [2]
    assert ids(query(engine, {"u": {"$gte": 1}}, hint="u_1")[0]) == [1, 2]


def test_unordered_insert_skips_only_the_duplicates(engine: Engine) -> None:
    create(engine, {"u": 1}, unique=True)
    docs = [enc({"_id": i, "u": u}) for i, u in enumerate([1, 2, 1, 3, 2])]
    result = engine.insert("db", "c", docs, ordered=False)
    assert result.inserted == 3
    assert [i for i, _ in result.errors] == [2, 4]
    assert len(entries(engine, index(engine, "u_1"))) == 3
    assert ids(query(engine, {"u": {"$gt": 0}}, hint="u_1")[0]) == [0, 1, 3]


def test_duplicate_within_one_batch_is_caught(engine: Engine) -> None:
    create(engine, {"u": 1}, unique=True)
    result = engine.insert("db", "c", [enc({"_id": 1, "u": "k"}), enc({"_id": 2, "u": "k"})])
    assert result.inserted == 1
    err = result.errors[0][1]
    assert isinstance(err, DuplicateKey)
    assert (err.index_name, err.key_pattern, err.key_value) == ("u_1", {"u": 1}, {"u": "k"})


# -- the unique rule for null and missing ------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "options", "first", "second", "collides"),
    [
        # Missing indexes as null: two documents without the field collide.
        ({"a": 1}, {}, {}, {}, True),
        ({"a": 1}, {}, {}, {"a": None}, True),
        ({"a": 1}, {}, {"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {}, {"a": Int64(7)}, {"a": Decimal128("7")}, True),
        ({"a": 1}, {}, {"a": 1}, {"a": "1"}, False),
        ({"a": 1}, {}, {"a": [1, 2]}, {"a": [2, 3]}, True),
        ({"a": 1}, {}, {"a": [1, 2]}, {"a": 3}, False),
        ({"a": 1}, {}, {"a": {"x": 1, "y": 2}}, {"a": {"y": 2, "x": 1}}, False),
        ({"a.b": 1}, {}, {"a": {"b": 1}}, {"a": [{"b": 1}]}, True),
        # Sparse: documents missing the field have no entry, so they never collide...
        ({"a": 1}, {"sparse": True}, {}, {}, False),
        # ...but an explicit null is indexed.
        ({"a": 1}, {"sparse": True}, {"a": None}, {"a": None}, True),
        ({"a": 1}, {"partialFilterExpression": {"a": {"$exists": True}}}, {}, {}, False),
        ({"a": 1}, {"partialFilterExpression": {"a": {"$gt": 5}}}, {"a": 1}, {"a": 1}, False),
        ({"a": 1}, {"partialFilterExpression": {"a": {"$gt": 5}}}, {"a": 9}, {"a": 9}, True),
        # Compound: the combination is what must be unique; missing fields are nulls.
        ({"a": 1, "b": 1}, {}, {}, {}, True),
        ({"a": 1, "b": 1}, {}, {"a": 1}, {"a": 1}, True),
        ({"a": 1, "b": 1}, {}, {"a": 1}, {"a": 1, "b": None}, True),
        ({"a": 1, "b": 1}, {}, {"a": 1}, {"a": 2}, False),
        ({"a": 1, "b": 1}, {}, {"a": 1, "b": 1}, {"a": 1, "b": 2}, False),
        ({"a": 1, "b": -1}, {}, {"a": 1, "b": "x"}, {"b": "x", "a": 1.0}, True),
        ({"a": 1, "b": 1}, {"sparse": True}, {}, {}, False),
        ({"a": 1, "b": 1}, {"sparse": True}, {"a": 1}, {"a": 1}, True),
    ],
)
def test_unique_collisions(
    engine: Engine,
    key: dict[str, Any],
    options: dict[str, Any],
    first: dict[str, Any],
    second: dict[str, Any],
    collides: bool,
) -> None:
    create(engine, key, unique=True, **options)
    assert engine.insert("db", "c", [enc({"_id": 1, **first})]).inserted == 1
    result = engine.insert("db", "c", [enc({"_id": 2, **second})])
    assert result.inserted == (0 if collides else 1)
    assert [type(e) for _, e in result.errors] == ([DuplicateKey] if collides else [])


@pytest.mark.parametrize(
    ("key", "options", "docs"),
    [
        ({"a": 1}, {}, [{}, {"a": None}]),
        ({"a": 1, "b": 1}, {}, [{"a": 1}, {"a": 1, "b": None}]),
    ],
)
def test_unique_build_applies_the_null_rule(
    engine: Engine, key: dict[str, Any], options: dict[str, Any], docs: list[dict[str, Any]]
) -> None:
    engine.insert("db", "c", [enc({"_id": i, **d}) for i, d in enumerate(docs)])
    with pytest.raises(DuplicateKey):
        create(engine, key, unique=True, **options)
    assert index_names(engine) == ["_id_"]


def test_unique_sparse_build_over_documents_missing_the_field(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": i}) for i in range(3)])
    create(engine, {"a": 1}, unique=True, sparse=True)
    assert entries(engine, index(engine, "a_1")) == []
    assert engine.insert("db", "c", [enc({"_id": 9})]).inserted == 1


# -- drops -----------------------------------------------------------------------------------------


@pytest.fixture
def four(engine: Engine) -> Engine:
    engine.insert("db", "c", [enc({"_id": i, "a": i, "b": -i}) for i in range(4)])
    engine.create_indexes(
        "db", "c", [spec({"a": 1}), spec({"b": -1}), spec({"a": 1, "b": 1}, name="ab")]
    )
    return engine


@pytest.mark.parametrize(
    ("which", "left"),
    [
        ("a_1", ["_id_", "b_-1", "ab"]),
        ({"b": -1}, ["_id_", "a_1", "ab"]),
        ({"a": 1.0, "b": Int64(1)}, ["_id_", "a_1", "b_-1"]),
        (["a_1", "ab"], ["_id_", "b_-1"]),
        ([], ["_id_", "a_1", "b_-1", "ab"]),
        ("*", ["_id_"]),
    ],
)
def test_drop_indexes(four: Engine, which: Any, left: list[str]) -> None:
    assert four.drop_indexes("db", "c", which) == 4
    assert index_names(four) == left


@pytest.mark.parametrize(
    ("which", "code_name"),
    [
        ("nope", "IndexNotFound"),
        ({"a": -1}, "IndexNotFound"),
        ({"z": 1}, "IndexNotFound"),
        (["a_1", "nope"], "IndexNotFound"),
        ("_id_", "InvalidOptions"),
        ({"_id": 1}, "InvalidOptions"),
        (["a_1", "_id_"], "InvalidOptions"),
    ],
)
def test_drop_indexes_errors_drop_nothing(four: Engine, which: Any, code_name: str) -> None:
    with pytest.raises(QueryError) as info:
        four.drop_indexes("db", "c", which)
    assert info.value.code_name == code_name
    assert index_names(four) == ["_id_", "a_1", "b_-1", "ab"]


def test_drop_indexes_on_a_missing_collection(engine: Engine) -> None:
    with pytest.raises(NamespaceNotFound):
        engine.drop_indexes("db", "nope", "*")


def test_ambiguous_key_pattern(engine: Engine) -> None:
    engine.create_indexes(
        "db",
        "c",
        [
            spec({"a": 1}),
            spec({"a": 1}, name="a_pos", partialFilterExpression={"a": {"$gt": 0}}),
        ],
    )
    with pytest.raises(QueryError) as info:
        engine.drop_indexes("db", "c", {"a": 1})
    assert info.value.code_name == "AmbiguousIndexKeyPattern"
    assert engine.drop_indexes("db", "c", "a_pos") == 3


def test_dropped_index_entries_are_gone_and_a_rebuild_is_clean(four: Engine) -> None:
    four.drop_indexes("db", "c", "*")
    four.insert("db", "c", [enc({"_id": 10, "a": 10})])
    create(four, {"a": 1})
    assert len(entries(four, index(four, "a_1"))) == 5
    assert ids(query(four, {"a": {"$gte": 2}})[0]) == [2, 3, 10]


# -- keys longer than LMDB allows ------------------------------------------------------------------


@pytest.fixture
def long_engine(engine: Engine) -> Engine:
    engine.insert("db", "c", [enc({"_id": i, "s": s, "t": s}) for i, s in enumerate(LONG)])
    engine.create_indexes("db", "c", [spec({"s": 1}, unique=True), spec({"t": -1})])
    return engine


def test_long_keys_are_stored_shortened(long_engine: Engine) -> None:
    for name in ("s_1", "t_-1"):
        got = entries(long_engine, index(long_engine, name))
        assert len(got) == len(LONG)
        assert all(len(k) <= keys.MAX_KEY for k, _ in got)


@pytest.mark.parametrize("field", ["s", "t"])
@pytest.mark.parametrize("i", range(len(LONG)))
def test_equality_on_long_values_finds_exactly_the_document(
    long_engine: Engine, field: str, i: int
) -> None:
    docs, run = query(long_engine, {field: LONG[i]})
    assert isinstance(run.plan, IndexScan)
    assert ids(docs) == [i]


def test_long_unique_values_collide_only_when_equal(long_engine: Engine) -> None:
    dup = long_engine.insert("db", "c", [enc({"_id": 100, "s": PREFIX + "c" * 4000})])
    assert [type(e) for _, e in dup.errors] == [DuplicateKey]
    near = long_engine.insert("db", "c", [enc({"_id": 101, "s": PREFIX + "c" * 3999 + "d"})])
    assert near.inserted == 1
    assert ids(query(long_engine, {"s": PREFIX + "c" * 3999 + "d"})[0]) == [101]
    assert ids(query(long_engine, {"s": PREFIX + "c" * 4000})[0]) == [2]


def test_unique_build_detects_long_duplicates(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": 1, "s": "x" * 3000}), enc({"_id": 2, "s": "x" * 3000})])
    with pytest.raises(DuplicateKey):
        create(engine, {"s": 1}, unique=True)
    engine.insert("db", "c", [enc({"_id": 3, "s": "x" * 2999 + "y"})])
    create(engine, {"s": 1})
    assert ids(query(engine, {"s": "x" * 3000})[0]) == [1, 2]


RANGES = [
    *LONG_RANGES,
    {"$gte": "p" * 700},
    {"$lt": "q"},
    {"$in": [PREFIX + "b", "q" * 1000, "nope" * 300]},
]


@pytest.mark.parametrize("field", ["s", "t"])
@pytest.mark.parametrize("cond", RANGES, ids=range(len(RANGES)))
def test_ranges_on_long_values_match_a_collection_scan(
    long_engine: Engine, field: str, cond: dict[str, Any]
) -> None:
    docs, run = query(long_engine, {field: cond})
    assert isinstance(run.plan, IndexScan)
    natural, _ = query(long_engine, {field: cond}, hint={"$natural": 1})
    assert sorted(ids(docs)) == sorted(ids(natural))


@pytest.mark.parametrize("field", ["s", "t"])
@pytest.mark.parametrize("direction", [1, -1])
@pytest.mark.parametrize("flt", [{}, {"s": {"$gt": "p"}}], ids=["all", "range"])
def test_sort_through_an_index_on_long_values(
    long_engine: Engine, field: str, direction: int, flt: dict[str, Any]
) -> None:
    docs, _ = query(long_engine, flt, sort={field: direction})
    expected = sorted(
        (i for i, s in enumerate(LONG) if not flt or s > "p"),
        key=lambda i: LONG[i],
        reverse=direction < 0,
    )
    assert ids(docs) == expected


def test_compound_keys_that_differ_after_a_long_first_field(engine: Engine) -> None:
    long = "L" * 3000
    create(engine, {"s": 1, "n": -1}, unique=True)
    docs = [{"_id": i, "s": long, "n": i} for i in range(5)] + [{"_id": 9, "s": long + "x", "n": 1}]
    assert engine.insert("db", "c", [enc(d) for d in docs]).inserted == 6
    dup = engine.insert("db", "c", [enc({"_id": 10, "s": long, "n": 3.0})])
    assert [type(e) for _, e in dup.errors] == [DuplicateKey]
    for flt, expected in [
        ({"s": long, "n": 2}, [2]),
        ({"s": long, "n": {"$gt": 2}}, [3, 4]),
        ({"s": long, "n": {"$in": [0, 4, 7]}}, [0, 4]),
        ({"s": long}, [0, 1, 2, 3, 4]),
        ({"s": {"$gt": long}}, [9]),
        ({"s": long + "x", "n": 1}, [9]),
    ]:
        docs_found, run = query(engine, flt)
        assert isinstance(run.plan, IndexScan), flt
        assert sorted(ids(docs_found)) == expected, flt
    for sort in ({"s": 1, "n": -1}, {"n": -1}, {"n": 1}):
        got, _ = query(engine, {"s": long}, sort=sort)
        assert ids(got) == ([0, 1, 2, 3, 4] if sort == {"n": 1} else [4, 3, 2, 1, 0]), sort
