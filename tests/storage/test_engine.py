"""The LMDB engine without a server: inserts and their per-document failures, the catalog, drops,
durability across reopen, the data-directory lock, map growth and record scans."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import bson
import pytest
from bson import Int64, ObjectId, Regex

from ebbdb.storage.core.errors import (
    DocumentTooLarge,
    DuplicateKey,
    InvalidBSON,
    InvalidIdField,
    InvalidNamespace,
    NamespaceExists,
    QueryError,
    StorageError,
)
from ebbdb.storage.engine.store import CODEC, MAX_DOCUMENT_SIZE, DataDirLocked, Engine, InsertResult
from ebbdb.storage.expiry import ttl
from tests.helpers import enc


def stored(engine: Engine, db: str = "db", name: str = "c") -> list[bytes]:
    coll = engine.collection(db, name)
    if coll is None:
        return []
    with engine.read() as r:
        return [ttl.body(value) for _rid, value in r.scan(coll)]


def stored_docs(engine: Engine, db: str = "db", name: str = "c") -> list[dict]:
    return [bson.decode(raw, CODEC) for raw in stored(engine, db, name)]


def error_summary(result) -> list[tuple[int, type]]:
    return [(i, type(exc)) for i, exc in result.errors]


E = TypeVar("E", bound=StorageError)


def one_error(result: InsertResult, inserted: int, index: int, kind: type[E], code_name: str) -> E:
    """The one failure of an insert that wrote `inserted` documents: document `index` of the
    batch, refused with a `kind` that reports `code_name`."""
    assert result.inserted == inserted
    [(i, exc)] = result.errors
    assert i == index
    assert isinstance(exc, kind)
    assert exc.code_name == code_name
    return exc


# -- inserts ---------------------------------------------------------------------------------------


def test_insert_ordered_stops_at_first_duplicate(engine: Engine) -> None:
    docs = [enc({"_id": 1}), enc({"_id": 2}), enc({"_id": 1}), enc({"_id": 3})]
    result = engine.insert("db", "c", docs, ordered=True)
    assert result.inserted == 2
    assert error_summary(result) == [(2, DuplicateKey)]
    assert [d["_id"] for d in stored_docs(engine)] == [1, 2]


def test_insert_unordered_goes_on_after_duplicates(engine: Engine) -> None:
    docs = [enc({"_id": 1}), enc({"_id": 1}), enc({"_id": 2}), enc({"_id": 2}), enc({"_id": 3})]
    result = engine.insert("db", "c", docs, ordered=False)
    assert result.inserted == 3
    assert error_summary(result) == [(1, DuplicateKey), (3, DuplicateKey)]
    assert [d["_id"] for d in stored_docs(engine)] == [1, 2, 3]


def test_duplicate_against_earlier_insert(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": "x"})])
    result = engine.insert("db", "c", [enc({"_id": "x", "v": 2})])
    exc = one_error(result, 0, 0, DuplicateKey, "DuplicateKey")
    assert exc.ns == "db.c"
    assert exc.index_name == "_id_"
    assert exc.key_pattern == {"_id": 1}
    assert exc.key_value == {"_id": "x"}


def test_numeric_ids_of_different_types_collide(engine: Engine) -> None:
    docs = [enc({"_id": 1}), enc({"_id": 1.0}), enc({"_id": Int64(1)}), enc({"_id": 2.5})]
    result = engine.insert("db", "c", docs, ordered=False)
    assert result.inserted == 2
    assert error_summary(result) == [(1, DuplicateKey), (2, DuplicateKey)]


def test_generated_id_is_an_objectid_and_the_first_field(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"a": 1, "b": "x"})])
    [raw] = stored(engine)
    # Element type 0x07 (ObjectId) named "_id" right after the 4-byte length.
    assert raw[4] == 0x07
    assert raw[5:9] == b"_id\x00"
    doc = bson.decode(raw, CODEC)
    assert list(doc) == ["_id", "a", "b"]
    assert isinstance(doc["_id"], ObjectId)
    assert doc["a"] == 1 and doc["b"] == "x"


def test_generated_ids_are_distinct(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"n": i}) for i in range(20)])
    ids = [d["_id"] for d in stored_docs(engine)]
    assert len(set(ids)) == 20


def test_generated_id_keeps_other_bytes_exact(engine: Engine) -> None:
    original = enc({"a": 1.5, "s": "é", "n": None})
    engine.insert("db", "c", [original])
    [raw] = stored(engine)
    assert raw[4 + 17 :] == original[4:]
    assert int.from_bytes(raw[:4], "little") == len(raw) == len(original) + 17


def test_id_not_first_is_moved_first(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"a": 1, "_id": 7, "b": [1, 2]})])
    [raw] = stored(engine)
    assert raw[4] == 0x10  # int32
    assert raw[5:9] == b"_id\x00"
    assert list(bson.decode(raw, CODEC).items()) == [("_id", 7), ("a", 1), ("b", [1, 2])]


def test_id_already_first_keeps_the_client_bytes(engine: Engine) -> None:
    original = enc({"_id": "k", "a": 1})
    engine.insert("db", "c", [original])
    assert stored(engine) == [original]


@pytest.mark.parametrize("bad_id", [[1, 2], []])
def test_array_id_is_rejected(engine: Engine, bad_id: list) -> None:
    result = engine.insert("db", "c", [enc({"_id": bad_id})])
    one_error(result, 0, 0, InvalidIdField, "InvalidIdField")


def test_regex_id_is_rejected(engine: Engine) -> None:
    # MongoDB 5.0+ checks an inserted _id with storageValidIdField, as updates do.
    result = engine.insert("db", "c", [enc({"_id": Regex("^a", "i")})])
    exc = one_error(result, 0, 0, InvalidIdField, "InvalidIdField")
    assert exc.message == "The '_id' value cannot be of type regex"


def test_id_holding_a_dollar_field_is_rejected(engine: Engine) -> None:
    result = engine.insert("db", "c", [enc({"_id": {"a": {"$b": 1}}})])
    exc = one_error(result, 0, 0, QueryError, "DollarPrefixedFieldName")
    assert (
        exc.message
        == "_id fields may not contain '$'-prefixed fields: $b is not valid for storage."
    )


def test_object_id_containing_an_array_is_allowed(engine: Engine) -> None:
    result = engine.insert("db", "c", [enc({"_id": {"a": [1, 2]}})])
    assert result.inserted == 1 and not result.errors


def test_oversized_document_is_rejected(engine: Engine) -> None:
    big = enc({"_id": 1, "s": "x" * MAX_DOCUMENT_SIZE})
    result = engine.insert("db", "c", [big, enc({"_id": 2})], ordered=False)
    # MongoDB's insert path reports "object to insert too large" as BadValue.
    exc = one_error(result, 1, 0, DocumentTooLarge, "BadValue")
    assert exc.message.startswith("object to insert too large")
    assert [d["_id"] for d in stored_docs(engine)] == [2]


def test_document_at_the_limit_is_accepted(engine: Engine) -> None:
    overhead = len(enc({"_id": 1, "s": ""}))
    doc = enc({"_id": 1, "s": "x" * (MAX_DOCUMENT_SIZE - overhead)})
    assert len(doc) == MAX_DOCUMENT_SIZE
    result = engine.insert("db", "c", [doc])
    assert result.inserted == 1 and not result.errors


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x05\x00\x00",
        b"\x05\x00\x00\x00\x01",  # wrong terminator
        b"\xff\x00\x00\x00\x00",  # length says more than there is
        enc({"a": 1})[:-1],
    ],
)
def test_invalid_bson_is_rejected(engine: Engine, garbage: bytes) -> None:
    docs = [enc({"_id": 1}), garbage, enc({"_id": 2})]
    result = engine.insert("db", "c", docs, ordered=False)
    one_error(result, 2, 1, InvalidBSON, "InvalidBSON")


def test_invalid_bson_stops_an_ordered_insert(engine: Engine) -> None:
    result = engine.insert("db", "c", [enc({"_id": 1}), b"junk", enc({"_id": 2})])
    assert result.inserted == 1
    assert error_summary(result) == [(1, InvalidBSON)]


def test_every_insert_error_is_a_storage_error(engine: Engine) -> None:
    docs = [b"junk", enc({"_id": [1]}), enc({"_id": Regex("x")}), enc({"_id": 1}), enc({"_id": 1})]
    result = engine.insert("db", "c", docs, ordered=False)
    assert [i for i, _ in result.errors] == [0, 1, 2, 4]
    assert all(isinstance(exc, StorageError) for _, exc in result.errors)


# -- catalog ---------------------------------------------------------------------------------------


def test_insert_creates_the_collection_once(engine: Engine) -> None:
    assert engine.collection("db", "c") is None
    first = engine.insert("db", "c", [enc({"_id": 1})])
    assert first.created_collection is True
    second = engine.insert("db", "c", [enc({"_id": 2})])
    assert second.created_collection is False
    coll = engine.collection("db", "c")
    assert coll is not None
    assert (coll.db, coll.name, coll.ns) == ("db", "c", "db.c")
    assert [ix.name for ix in coll.indexes] == ["_id_"]
    assert coll.id_index.unique


def test_failed_insert_still_creates_the_collection(engine: Engine) -> None:
    # MongoDB creates the collection implicitly even when every document fails.
    result = engine.insert("db", "c", [enc({"_id": [1]})])
    assert result.inserted == 0
    assert result.created_collection is True
    assert engine.collection("db", "c") is not None


def test_create_collection_and_namespace_exists(engine: Engine) -> None:
    info = engine.create_collection("db", "c", {"capped": False})
    assert info.options == {"capped": False}
    assert engine.collection("db", "c") == info
    with pytest.raises(NamespaceExists) as excinfo:
        engine.create_collection("db", "c")
    assert excinfo.value.code_name == "NamespaceExists"


def test_create_after_implicit_creation_raises_namespace_exists(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": 1})])
    with pytest.raises(NamespaceExists):
        engine.create_collection("db", "c")


def test_insert_into_created_collection_does_not_report_creation(engine: Engine) -> None:
    engine.create_collection("db", "c")
    result = engine.insert("db", "c", [enc({"_id": 1})])
    assert result.created_collection is False


def test_collections_and_databases_listing(engine: Engine) -> None:
    engine.insert("b", "y", [enc({"_id": 1}), enc({"_id": 2})])
    engine.insert("a", "x", [enc({"_id": 1})])
    engine.create_collection("a", "w")
    assert [(c.db, c.name) for c in engine.collections()] == [("a", "w"), ("a", "x"), ("b", "y")]
    assert [c.name for c in engine.collections("a")] == ["w", "x"]
    dbs = {d.name: d for d in engine.databases()}
    assert list(dbs) == ["a", "b"]
    assert (dbs["a"].collections, dbs["a"].documents, dbs["a"].index_count) == (2, 1, 2)
    assert (dbs["b"].collections, dbs["b"].documents) == (1, 2)
    assert dbs["b"].data_size == len(enc({"_id": 1})) + len(enc({"_id": 2}))


def test_drop_collection_removes_its_documents(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": i}) for i in range(50)])
    engine.insert("db", "other", [enc({"_id": 1})])
    assert engine.drop_collection("db", "c") is True
    assert engine.collection("db", "c") is None
    assert engine.drop_collection("db", "c") is False
    # Re-creating the name gives an empty collection, and the _id values are free again.
    engine.create_collection("db", "c")
    assert stored(engine) == []
    with engine.read() as r:
        assert r.stats(engine.collection("db", "c")) == (0, 0)
    result = engine.insert("db", "c", [enc({"_id": 3})])
    assert result.inserted == 1 and not result.errors
    assert len(stored(engine, "db", "other")) == 1
    # The range delete really removed the records (not just the catalog entry).
    with engine.env.env.begin() as txn:
        assert txn.stat(engine.env.records)["entries"] == 2


def test_drop_missing_collection_returns_false(engine: Engine) -> None:
    assert engine.drop_collection("db", "nope") is False


def test_drop_database(engine: Engine) -> None:
    engine.insert("db", "a", [enc({"_id": 1})])
    engine.insert("db", "b", [enc({"_id": 1})])
    engine.insert("keep", "a", [enc({"_id": 1})])
    assert sorted(engine.drop_database("db")) == ["a", "b"]
    assert engine.collections("db") == []
    assert [d.name for d in engine.databases()] == ["keep"]
    assert len(stored(engine, "keep", "a")) == 1
    assert engine.drop_database("db") == []
    engine.create_collection("db", "a")
    assert stored(engine, "db", "a") == []


def test_catalog_and_data_survive_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    eng = Engine.open(path)
    eng.insert("db", "c", [enc({"_id": i, "v": "x" * i}) for i in range(10)])
    eng.create_collection("db", "empty", {"foo": 1})
    before = eng.collection("db", "c")
    eng.close()
    eng.close()  # closing twice is harmless

    eng = Engine.open(path)
    try:
        assert eng.collection("db", "c") == before
        assert eng.collection("db", "empty").options == {"foo": 1}
        assert [d["_id"] for d in stored_docs(eng)] == list(range(10))
        with eng.read() as r:
            assert r.stats(before)[0] == 10
        # Record ids continue after the reopened ones, and the unique index is intact.
        result = eng.insert("db", "c", [enc({"_id": 3}), enc({"_id": 10})], ordered=False)
        assert result.inserted == 1
        assert error_summary(result) == [(0, DuplicateKey)]
        assert [d["_id"] for d in stored_docs(eng)] == list(range(11))
        # New collections do not reuse catalog ids.
        new = eng.create_collection("db", "new")
        assert new.id not in {c.id for c in eng.collections() if c.name != "new"}
        assert new.id_index.id not in {
            ix.id for c in eng.collections() for ix in c.indexes if c.name != "new"
        }
    finally:
        eng.close()


def test_second_open_while_open_raises_data_dir_locked(tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    eng = Engine.open(path)
    try:
        with pytest.raises(DataDirLocked) as excinfo:
            Engine.open(path)
        assert excinfo.value.code_name == "DBPathInUse"
        # The first engine is unaffected.
        assert eng.insert("db", "c", [enc({"_id": 1})]).inserted == 1
    finally:
        eng.close()
    again = Engine.open(path)
    again.close()


def test_map_grows_by_itself(tmp_path: Path) -> None:
    eng = Engine.open(str(tmp_path / "data"), map_size=1 << 20)
    try:
        start = eng.map_size
        payload = "x" * 100_000
        total = 0
        for batch in range(5):
            docs = [enc({"_id": batch * 10 + i, "p": payload}) for i in range(10)]
            result = eng.insert("db", "c", docs)
            assert result.inserted == 10 and not result.errors
            total += sum(map(len, docs))
        assert total > 5_000_000
        assert eng.map_size > start
        assert eng.map_size >= total
        assert len(stored(eng)) == 50
    finally:
        eng.close()


def test_map_growth_while_creating_a_collection_keeps_the_catalog_consistent(
    tmp_path: Path,
) -> None:
    # The first insert into a new collection overflows the tiny map, so the write is retried.
    path = str(tmp_path / "data")
    eng = Engine.open(path, map_size=1 << 20)
    try:
        docs = [enc({"_id": i, "p": "y" * 100_000}) for i in range(30)]
        result = eng.insert("db", "c", docs)
        assert result.inserted == 30 and result.created_collection
        in_memory = eng.collection("db", "c")
    finally:
        eng.close()
    eng = Engine.open(path)
    try:
        assert eng.collection("db", "c") == in_memory
    finally:
        eng.close()


# -- reads -----------------------------------------------------------------------------------------


def test_scan_forward_and_backward_with_after(engine: Engine) -> None:
    # Interleave two collections so a scan must stop at its own prefix in both directions.
    for i in range(5):
        engine.insert("db", "a", [enc({"_id": i})])
        engine.insert("db", "b", [enc({"_id": 100 + i})])
    a, b = engine.collection("db", "a"), engine.collection("db", "b")
    with engine.read() as r:
        rids = [rid for rid, _ in r.scan(a)]
        assert rids == sorted(rids) and len(rids) == 5
        assert [bson.decode(ttl.body(v))["_id"] for _, v in r.scan(a)] == [0, 1, 2, 3, 4]
        assert [rid for rid, _ in r.scan(a, after=rids[1])] == rids[2:]
        assert [rid for rid, _ in r.scan(a, after=rids[-1])] == []
        assert [rid for rid, _ in r.scan(a, reverse=True)] == rids[::-1]
        assert [rid for rid, _ in r.scan(a, after=rids[3], reverse=True)] == rids[2::-1]
        assert [rid for rid, _ in r.scan(a, after=rids[0], reverse=True)] == []
        # `after` need not be an existing record id.
        assert [rid for rid, _ in r.scan(a, after=rids[-1] + 1000, reverse=True)] == rids[::-1]
        assert [rid for rid, _ in r.scan(a, after=0)] == rids
        # The last collection in key order scans backward too.
        assert [bson.decode(ttl.body(v))["_id"] for _, v in r.scan(b, reverse=True)] == [
            104,
            103,
            102,
            101,
            100,
        ]
        # record() reads one by id.
        assert bson.decode(ttl.body(r.record(a, rids[2])))["_id"] == 2
        assert r.record(a, rids[-1] + 1000) is None


def test_scan_of_empty_collection(engine: Engine) -> None:
    coll = engine.create_collection("db", "c")
    with engine.read() as r:
        assert list(r.scan(coll)) == []
        assert list(r.scan(coll, reverse=True)) == []
        assert r.stats(coll) == (0, 0)


def test_stats_count_documents_and_bytes(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": 1, "a": "xyz"}), enc({"_id": 1})], ordered=False)
    engine.insert("db", "c", [enc({"b": 2})])
    coll = engine.collection("db", "c")
    raws = stored(engine)
    with engine.read() as r:
        assert r.stats(coll) == (2, sum(map(len, raws)))


def test_find_unique_through_the_id_index(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": 1}), enc({"_id": "s"}), enc({"_id": {"k": 1}})])
    coll = engine.collection("db", "c")
    with engine.read() as r:
        rid = r.find_unique(coll.id_index, 1.0)
        assert rid is not None and bson.decode(ttl.body(r.record(coll, rid)))["_id"] == 1
        assert r.find_unique(coll.id_index, Int64(1)) == rid
        assert r.find_unique(coll.id_index, {"k": 1}) is not None
        assert r.find_unique(coll.id_index, "missing") is None


def test_long_ids_are_unique_beyond_the_lmdb_key_limit(engine: Engine) -> None:
    long_a = "a" * 2000
    long_b = "a" * 1999 + "b"
    result = engine.insert(
        "db",
        "c",
        [enc({"_id": long_a}), enc({"_id": long_b}), enc({"_id": long_a})],
        ordered=False,
    )
    assert result.inserted == 2
    assert error_summary(result) == [(2, DuplicateKey)]
    coll = engine.collection("db", "c")
    with engine.read() as r:
        assert (
            bson.decode(ttl.body(r.record(coll, r.find_unique(coll.id_index, long_b))))["_id"]
            == long_b
        )


# -- namespaces ------------------------------------------------------------------------------------

BAD_NAMESPACES = [
    ("", "c"),
    ("db", ""),
    ("a.b", "c"),
    ("a b", "c"),
    ("a$b", "c"),
    ("a/b", "c"),
    ("a\\b", "c"),
    ('a"b', "c"),
    ("a\x00b", "c"),
    ("db", "c$d"),
    ("db", "$cmd"),
    ("db", "c\x00d"),
    ("db", ".c"),
    ("d" * 64, "c"),
    ("db", "x" * 300),
    # MongoDB's limits count UTF-8 bytes, not characters.
    ("é" * 40, "c"),
    ("db", "é" * 200),
]


@pytest.mark.parametrize(
    ("db", "name"),
    BAD_NAMESPACES,
    ids=[
        f"{len(db.encode())}B:{db[:6]!r}.{len(name.encode())}B:{name[:6]!r}"
        for db, name in BAD_NAMESPACES
    ],
)
def test_invalid_namespaces_are_rejected(engine: Engine, db: str, name: str) -> None:
    with pytest.raises(InvalidNamespace) as excinfo:
        engine.create_collection(db, name)
    assert excinfo.value.code_name == "InvalidNamespace"
    with pytest.raises(InvalidNamespace):
        engine.insert(db, name, [enc({"_id": 1})])
    assert engine.collections() == []


@pytest.mark.parametrize("db", ["", "a.b", "a b", "a$b", "a/b", "a\\b"])
def test_drop_database_validates_the_name(engine: Engine, db: str) -> None:
    with pytest.raises(InvalidNamespace):
        engine.drop_database(db)


@pytest.mark.parametrize(
    ("db", "name"),
    [("d" * 63, "c"), ("db", "a.b.c"), ("db", "x" * (255 - 3)), ("test-1", "system_x")],
)
def test_valid_edge_namespaces_are_accepted(engine: Engine, db: str, name: str) -> None:
    engine.create_collection(db, name)
    assert engine.collection(db, name) is not None


def test_namespace_validation_is_remembered_only_for_valid_names() -> None:
    from ebbdb.storage.catalog import info as catalog

    catalog.validate_collection_name("db", "ok")
    assert ("db", "ok") in catalog._VALID
    for db, name in BAD_NAMESPACES:
        with pytest.raises(InvalidNamespace):
            catalog.validate_collection_name(db, name)
        with pytest.raises(InvalidNamespace):  # asked again: still refused
            catalog.validate_collection_name(db, name)
        assert (db, name) not in catalog._VALID
