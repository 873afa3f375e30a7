"""The TTL purge's fast loop (storage/engine/purge.py purge_one_entry, with plain indexes' keys
computed directly) against the general loop: the same data purged both ways, at the same instants
and in the same small jobs, leaves the same LMDB contents (records, index entries, expiry entries,
statistics), byte for byte, over every kind of index and collection a TTL rule can live on."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import Int64, ObjectId
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.catalog import timeseries
from ebbdb.storage.engine import purge
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.specs import parse_index_spec
from tests.storage.ttl_support import DB, T0

E = 300  # seconds: the TTL of the scenarios' date rules
#: The purge's instant: documents dated before T0 + 700 s are expired under E.
NOW = T0 + 1_000_000
CLUSTER = {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": True}
TS = timeseries.create_options(f"{DB}.c", "t", "m", None, None, None)


def at(seconds: float) -> DatetimeMS:
    """A date `seconds` after T0."""
    return DatetimeMS(T0 + int(seconds * 1000))


def dated(i: int) -> Any:
    """The TTL field of document i: expired dates, live dates, arrays of dates and non-dates."""
    return [
        at(i),
        at(900 + i),
        [at(800 + i), at(i)],
        None,
        "2023-11-14",
        [],
        [at(2000), "x", at(i)],
        i,
    ][i % 8]


def docs(n: int = 80) -> list[dict[str, Any]]:
    return [
        {
            "_id": [i, f"k{i:03d}", ObjectId(f"{i:024x}"), float(i) + 0.5][i % 4],
            "t": dated(i),
            "g": i % 5,
            "s": (f"user_{i:03d}" if i % 6 else f"USER_{i:03d}")
            + ("x" * 600 if i % 11 == 0 else ""),
            "tags": [i % 3, i % 7] if i % 2 else i % 3,
            **({"opt": i} if i % 3 else {}),
            **({"ttl": [10, -1, 2000, 0.5][i % 4]} if i % 2 else {}),
        }
        for i in range(n)
    ]


def ttl_index(**options: Any) -> dict[str, Any]:
    return {"key": {"t": 1}, "expireAfterSeconds": E, **options}


Setup = tuple[dict[str, Any] | None, list[dict[str, Any]], Callable[[], list[dict[str, Any]]]]


#: name -> (collection options or None, index specs, documents); and whether every index is plain
#: (the fast loop computes every key directly).
def flat(d: dict[str, Any]) -> dict[str, Any]:
    """A document whose TTL field is never an array (the TTL index stays single-key)."""
    t = d["t"]
    return dict(d, t=(t[-1] if t else None) if isinstance(t, list) else t)


SCENARIOS: dict[str, tuple[Setup, bool]] = {
    # Only `_id` and the TTL field indexed, never an array: the fast loop decodes no document
    # whose `_id` is an int32, a string or an ObjectId (its doubles are decoded).
    "no decode": ((None, [ttl_index()], lambda: [flat(d) for d in docs()]), True),
    "no decode, descending TTL field": (
        (None, [{"key": {"t": -1}, "expireAfterSeconds": E}], lambda: [flat(d) for d in docs()]),
        True,
    ),
    "plain": (
        (None, [ttl_index(), {"key": {"g": -1}}], lambda: [dict(d, tags=0) for d in docs()]),
        True,
    ),
    "multikey": ((None, [ttl_index(), {"key": {"tags": 1}}], docs), True),
    "unique and sparse": (
        (
            None,
            [
                ttl_index(),
                {"key": {"s": 1}, "unique": True},
                {"key": {"opt": -1}, "sparse": True},
            ],
            docs,
        ),
        True,
    ),
    "compound": ((None, [ttl_index(), {"key": {"g": 1, "s": -1}}], docs), False),
    "dotted": (
        (
            None,
            [ttl_index(), {"key": {"sub.x": 1}}],
            lambda: [dict(d, sub={"x": d["g"]}) for d in docs()],
        ),
        False,
    ),
    "partial": (
        (
            None,
            [ttl_index(partialFilterExpression={"g": {"$gte": 2}}), {"key": {"opt": 1}}],
            docs,
        ),
        False,
    ),
    "partial plain index": (
        (None, [ttl_index(), {"key": {"s": 1}, "partialFilterExpression": {"g": 1}}], docs),
        False,
    ),
    "collation": (
        (
            None,
            [ttl_index(), {"key": {"s": 1}, "collation": {"locale": "en", "strength": 2}}],
            docs,
        ),
        False,
    ),
    "hashed": ((None, [ttl_index(), {"key": {"s": "hashed"}}], docs), False),
    "cosmos _ts": (
        (None, [{"key": {"_ts": 1}, "expireAfterSeconds": 500}, {"key": {"g": 1}}], docs),
        True,
    ),
    "two TTL indexes": (
        (None, [ttl_index(), {"key": {"opt": 1}, "expireAfterSeconds": 1}], docs),
        True,
    ),
    "capped": (({"capped": True, "size": 1 << 20}, [ttl_index()], docs), True),
    "clustered": (
        (
            {"clusteredIndex": CLUSTER, "expireAfterSeconds": Int64(E)},
            [{"key": {"s": 1}}],
            lambda: [dict(d, _id=datetime_of(d["_id"], i)) for i, d in enumerate(docs())],
        ),
        True,
    ),
    "time series": (
        (
            {"timeseries": TS, "expireAfterSeconds": Int64(E)},
            [],
            lambda: [{"_id": i, "t": at(i * 20), "m": i % 3, "v": i} for i in range(80)],
        ),
        True,
    ),
}


def datetime_of(_id: Any, i: int) -> Any:
    """A clustered collection's `_id`: a date (expiring by it) for most documents."""
    if i % 5 == 4:
        return _id
    return datetime.datetime.fromtimestamp(T0 / 1000 + i * 20, datetime.UTC)


def load(path: Path, setup: Setup, built_after: bool) -> Engine:
    """An engine holding the scenario's collection; its indexes created before the documents go
    in, or built over them (the bulk build) when `built_after`."""
    options, specs, make = setup
    engine = Engine.open(str(path))
    if options is not None:
        engine.create_collection(DB, "c", options)

    def build() -> None:
        if specs:
            engine.create_indexes(DB, "c", [parse_index_spec(s) for s in specs])

    if not built_after:
        build()
    result = engine.insert(DB, "c", [bson.encode(d) for d in make()], False, T0)
    assert not result.errors
    if built_after:
        build()
    return engine


def contents(engine: Engine) -> dict[str, list[tuple[bytes, bytes]]]:
    env = engine.env
    with env.env.begin() as txn:
        return {
            name: list(txn.cursor(db=db).iternext())
            for name, db in [
                ("records", env.records),
                ("index", env.index),
                ("expiry", env.expiry),
                ("stats", env.stats),
            ]
        }


def purge_all(engine: Engine, now_ms: int, general: bool) -> list[int]:
    """Purge in jobs of at most 7 documents until nothing is left; the jobs' counts (but for a
    last empty one: the general loop says there may be more when it stops at the limit)."""
    counts = []
    while True:
        n, more = engine.purge_expired_batch(DB, "c", now_ms, 7, None, general)
        if n:
            counts.append(n)
        if not more:
            return counts


@pytest.mark.parametrize("built_after", [False, True], ids=["indexes first", "indexes built after"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fast_and_general_purges_leave_the_same_entries(
    tmp_path: Path, name: str, built_after: bool
) -> None:
    setup, plain = SCENARIOS[name]
    fast = load(tmp_path / "fast", setup, built_after)
    general = load(tmp_path / "general", setup, built_after)
    try:
        info = fast.collection(DB, "c")
        assert info is not None
        assert (purge.plain_indexes(info) is not None) == plain
        plan = purge.purge_plan(info)
        if plan is not None and any(type(d.get("t")) is list for d in setup[2]()):
            # The header's one date stands for the TTL field only where it never holds an array.
            assert plan.date_field is None
        assert (plan is not None and not plan.needs_doc) == (
            name.startswith("no decode") or name == "time series"
        )
        before = contents(general)
        assert contents(fast) == before
        for now in (NOW, NOW + 1_000_000):
            assert purge_all(fast, now, False) == purge_all(general, now, True)
            after = contents(fast)
            assert after == contents(general)
            if now == NOW:
                # Something went, something stayed: not a comparison of two empty stores.
                assert 0 < len(after["records"]) < len(before["records"])
                assert len(after["index"]) < len(before["index"])
        assert fast.count_expired(info, NOW + 1_000_000) == 0
    finally:
        fast.close()
        general.close()


def test_the_fast_loop_runs_where_a_record_has_one_entry() -> None:
    """Which loop a collection gets: one date space or the Cosmos default alone."""
    from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
    from ebbdb.storage.indexes.specs import parse_index_spec as spec

    def coll(*keys: dict[str, Any]) -> CollectionInfo:
        indexes = [IndexInfo(2, "_id_", (("_id", 1),), {})]
        for n, k in enumerate(keys):
            s = spec(k)
            indexes.append(IndexInfo(3 + n, s.name, s.key, s.options))
        return CollectionInfo(1, DB, "c", {}, tuple(indexes))

    assert ttl.rules_for(coll(ttl_index())).one_entry
    assert ttl.rules_for(coll({"key": {"_ts": 1}, "expireAfterSeconds": 5})).one_entry
    assert not ttl.rules_for(
        coll(ttl_index(), {"key": {"u": 1}, "expireAfterSeconds": 5})
    ).one_entry
