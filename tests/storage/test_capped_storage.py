"""Capped collections in the engine: options, removal of the oldest records in the inserting
write, the copy of convertToCapped / cloneCollectionAsCapped, and the insert listeners."""

from __future__ import annotations

import bson
import pytest

from ebbdb.storage.core.errors import NamespaceExists, NamespaceNotFound, QueryError
from ebbdb.storage.engine import capped
from ebbdb.storage.engine.store import CODEC, Engine
from ebbdb.storage.expiry import ttl
from tests.helpers import enc


def ids_in(engine: Engine, name: str = "c") -> list[object]:
    coll = engine.collection("db", name)
    assert coll is not None
    with engine.read() as r:
        return [bson.decode(ttl.body(v), CODEC)["_id"] for _rid, v in r.scan(coll)]


def counts(engine: Engine, name: str = "c") -> tuple[int, int]:
    coll = engine.collection("db", name)
    assert coll is not None
    with engine.read() as r:
        return r.stats(coll)


@pytest.mark.parametrize(
    ("size", "max_docs", "want"),
    [
        (1, None, {"capped": True, "size": 256}),
        (256, 3, {"capped": True, "size": 256, "max": 3}),
        (257, 0, {"capped": True, "size": 512, "max": 2147483647}),
        (4096, -5, {"capped": True, "size": 4096, "max": 2147483647}),
    ],
)
def test_options_are_normalised(size: int, max_docs: int | None, want: dict[str, object]) -> None:
    assert capped.options(size, max_docs, {"idIndex": {}}) == {**want, "idIndex": {}}


def test_insert_removes_the_oldest_by_max_and_by_size(engine: Engine) -> None:
    engine.create_collection("db", "c", capped.options(4096, 3, {}))
    engine.insert("db", "c", [enc({"_id": i}) for i in range(5)])
    assert ids_in(engine) == [2, 3, 4]
    assert counts(engine) == (3, 3 * len(enc({"_id": 0})))
    engine.create_collection("db", "s", capped.options(256, None, {}))
    doc = {"_id": 0, "p": "x" * 78}  # 100 bytes
    engine.insert("db", "s", [enc({**doc, "_id": i}) for i in range(4)])
    assert ids_in(engine, "s") == [2, 3]
    assert counts(engine, "s") == (2, 200)


def test_the_document_just_inserted_is_never_removed(engine: Engine) -> None:
    engine.create_collection("db", "c", capped.options(256, None, {}))
    engine.insert("db", "c", [enc({"_id": 1}), enc({"_id": 2, "p": "x" * 500})])
    assert ids_in(engine) == [2]
    assert counts(engine)[0] == 1


def test_convert_and_clone(engine: Engine) -> None:
    engine.insert("db", "c", [enc({"_id": i, "p": "x" * 78}) for i in (5, 1, 3)])
    engine.clone_as_capped("db", "c", "k", 4096)
    assert ids_in(engine, "k") == [5, 1, 3]
    with pytest.raises(NamespaceExists):
        engine.clone_as_capped("db", "c", "k", 4096)
    with pytest.raises(NamespaceNotFound):
        engine.convert_to_capped("db", "missing", 4096)
    engine.convert_to_capped("db", "c", 200)
    info = engine.collection("db", "c")
    assert info is not None and info.options == {"capped": True, "size": 256}
    assert ids_in(engine) == [1, 3]
    assert counts(engine) == (2, 200)


def test_set_limits(engine: Engine) -> None:
    engine.create_collection("db", "plain")
    with pytest.raises(QueryError) as err:
        engine.set_capped_limits("db", "plain", 4096, None)
    assert (err.value.code_name, err.value.message) == (
        "InvalidOptions",
        "Collection must be capped.",
    )
    engine.create_collection("db", "c", capped.options(4096, None, {}))
    engine.set_capped_limits("db", "c", None, 2)
    info = engine.collection("db", "c")
    assert info is not None and info.options == {"capped": True, "size": 4096, "max": 2}


def test_insert_listeners_hear_committed_collections(engine: Engine) -> None:
    heard: list[frozenset[int]] = []
    engine.on_inserts(heard.append)
    engine.create_collection("db", "c")
    assert heard == []
    engine.insert("db", "c", [enc({"_id": 1})])
    info = engine.collection("db", "c")
    assert info is not None and heard == [frozenset({info.id})]
