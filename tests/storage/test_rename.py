"""Renaming a collection in storage (Ddl.rename_collection): in its database and into another, with
and without a target to drop. Documents, index entries, TTL indexes and expiry entries stay valid
under the new name (validate finds nothing wrong), the TTL monitor's purge works there, and the new
catalog entry survives a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bson
import pytest

from ebbdb.storage.core.errors import InvalidNamespace, NamespaceExists, NamespaceNotFound
from ebbdb.storage.engine.store import CODEC, Engine
from ebbdb.storage.engine.validate import validate_collection
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.expiry import ttl
from tests.helpers import drain
from tests.storage.ttl_support import DB, T0, D, coll_of, create

HOUR = 3_600_000


def _load(engine: Engine, name: str = "c", n: int = 6) -> None:
    """`n` documents, the odd ones expiring an hour after T0 under a TTL index, with a unique
    index and a multikey one."""
    docs = [
        {"_id": i, "u": i, "tags": [i, i + 100], **({"at": D(T0)} if i % 2 else {})}
        for i in range(n)
    ]
    engine.insert(DB, name, [bson.encode(d) for d in docs], now_ms=T0)
    create(
        engine,
        name,
        {"key": {"u": 1}, "name": "u_1", "unique": True},
        {"key": {"tags": 1}, "name": "tags_1"},
        {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 3600},
    )


def _info(engine: Engine, db: str, name: str) -> Any:
    info = engine.collection(db, name)
    assert info is not None
    return info


def _stored(engine: Engine, db: str, name: str) -> dict[Any, bytes]:
    """_id -> stored record (header and BSON)."""
    with engine.read() as r:
        return {
            bson.decode(ttl.body(v), CODEC)["_id"]: v for _rid, v in r.scan(_info(engine, db, name))
        }


def _ids(engine: Engine, db: str, name: str, flt: dict[str, Any], now: int = T0) -> list[Any]:
    run = QueryRun(_info(engine, db, name), QuerySpec.parse(flt, sort={"_id": 1}))
    return [bson.decode(raw, CODEC)["_id"] for raw in drain(engine, run, now_ms=now)]


def _valid(engine: Engine, db: str, name: str) -> None:
    result = validate_collection(
        engine, _info(engine, db, name), full=True, enforce_fast_count=True
    )
    assert result.valid, result.errors
    assert not result.warnings, result.warnings


@pytest.mark.parametrize("to_db", [DB, "other"], ids=["same database", "other database"])
def test_rename_keeps_documents_indexes_and_expiry(engine: Engine, to_db: str) -> None:
    _load(engine)
    before = coll_of(engine)
    stored = _stored(engine, DB, "c")
    moved = engine.rename_collection(DB, "c", to_db, "d")
    assert engine.collection(DB, "c") is None
    assert _info(engine, to_db, "d") == moved
    assert (moved.db, moved.name, moved.id, moved.indexes) == (
        to_db,
        "d",
        before.id,
        before.indexes,
    )
    # A move to another database makes a new collection there, as MongoDB's copy does.
    assert (moved.uuid == before.uuid) == (to_db == DB)
    assert _stored(engine, to_db, "d") == stored
    _valid(engine, to_db, "d")
    # Its indexes answer under the new name: the unique one, the multikey one, the TTL one.
    assert _ids(engine, to_db, "d", {"u": 3}) == [3]
    assert _ids(engine, to_db, "d", {"tags": {"$gte": 104}}) == [4, 5]
    assert _ids(engine, to_db, "d", {"at": {"$exists": True}}) == [1, 3, 5]
    # Expiry: reads hide, and the purge deletes, in the renamed collection only.
    assert _ids(engine, to_db, "d", {}, T0 + HOUR) == [0, 2, 4]
    assert engine.count_expired(moved, T0 + HOUR) == 3
    assert [c.ns for c in engine.ttl_collections()] == [f"{to_db}.d"]
    assert engine.purge_expired(DB, "c", T0 + HOUR, 1000) == 0
    assert engine.purge_expired(to_db, "d", T0 + HOUR, 1000) == 3
    assert sorted(_stored(engine, to_db, "d")) == [0, 2, 4]
    _valid(engine, to_db, "d")


def test_a_database_left_empty_by_a_rename_is_gone(engine: Engine) -> None:
    _load(engine)
    engine.rename_collection(DB, "c", "other", "d")
    assert [(d.name, d.collections, d.documents) for d in engine.databases()] == [("other", 1, 6)]


def test_drop_target_replaces_the_target_and_its_entries(engine: Engine) -> None:
    _load(engine, "c", 4)
    _load(engine, "t", 10)
    target = coll_of(engine, "t")
    with pytest.raises(NamespaceExists, match="^target namespace exists$"):
        engine.rename_collection(DB, "c", DB, "t")
    assert coll_of(engine, "t") == target  # nothing changed
    engine.rename_collection(DB, "c", DB, "t", drop_target=True)
    assert engine.collection(DB, "c") is None
    assert sorted(_stored(engine, DB, "t")) == [0, 1, 2, 3]
    with engine.read() as r:
        assert r.stats(target) == (0, 0)
        assert list(r.scan(target)) == []
        for ix in target.indexes:
            assert r.index_footprint(ix) == (0, 0)
            assert r.expiry_footprint(ix) == (0, 0)
    _valid(engine, DB, "t")


def test_rename_errors(engine: Engine) -> None:
    with pytest.raises(NamespaceNotFound, match="^Database db does not exist or is drop pending$"):
        engine.rename_collection(DB, "c", DB, "d")
    with pytest.raises(NamespaceNotFound, match="^source namespace does not exist$"):
        engine.rename_collection(DB, "c", "other", "d")
    _load(engine, "x", 1)
    with pytest.raises(NamespaceNotFound, match="^source namespace does not exist$"):
        engine.rename_collection(DB, "c", DB, "d")
    with pytest.raises(InvalidNamespace):
        engine.rename_collection(DB, "x", DB, "a$b")
    assert engine.collection(DB, "x") is not None


def test_the_renamed_catalog_entry_survives_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    engine = Engine.open(path)
    try:
        _load(engine)
        engine.rename_collection(DB, "c", "other", "d")
    finally:
        engine.close()
    engine = Engine.open(path)
    try:
        assert engine.collection(DB, "c") is None
        info = _info(engine, "other", "d")
        assert [ix.name for ix in info.indexes] == ["_id_", "u_1", "tags_1", "at_1"]
        assert sorted(_stored(engine, "other", "d")) == list(range(6))
        _valid(engine, "other", "d")
    finally:
        engine.close()
