"""What the storage TTL tests share (test_ttl_rules.py, test_ttl_engine.py): the injected clock's
instants, TTL index specs and building the indexes, reading records back with their headers, the _ids reads return at
an instant, and check_schedule, which pins when each document expires four ways at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import bson
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.engine.store import CODEC, Engine
from ebbdb.storage.execution.execute import QueryRun, QuerySpec, count_documents
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.specs import parse_index_spec
from tests.helpers import drain

DB = "db"
#: 2023-11-14T22:13:20Z in milliseconds: the injected "insert time" of every test.
T0 = 1_700_000_000_000
#: A clock far beyond any expiry a test sets (still well inside int64 milliseconds).
FAR = 1 << 60
MAX32 = 2_147_483_647


def D(ms: int) -> DatetimeMS:
    """A BSON date at exactly `ms` milliseconds since the epoch."""
    return DatetimeMS(ms)


def expiring(field: str, seconds: Any, **options: Any) -> dict[str, Any]:
    """The createIndexes spec of a TTL index on `field` (ascending) that expires documents
    `seconds` after its date, with any other `options` after it."""
    return {"key": {field: 1}, "expireAfterSeconds": seconds, **options}


def create(engine: Engine, name: str, *specs: Mapping[str, Any]) -> None:
    engine.create_indexes(DB, name, [parse_index_spec(s) for s in specs])


def coll_of(engine: Engine, name: str = "c") -> CollectionInfo:
    info = engine.collection(DB, name)
    assert info is not None
    return info


def records(engine: Engine, name: str = "c") -> dict[Any, bytes]:
    """_id -> stored record (header and BSON)."""
    with engine.read() as r:
        return {
            bson.decode(ttl.body(v), CODEC)["_id"]: v for _rid, v in r.scan(coll_of(engine, name))
        }


def stats(engine: Engine, name: str = "c") -> tuple[int, int]:
    with engine.read() as r:
        return r.stats(coll_of(engine, name))


def assert_stats_match(engine: Engine, name: str = "c") -> None:
    """The collection statistics agree with what is stored."""
    stored = records(engine, name)
    assert stats(engine, name) == (len(stored), sum(len(ttl.body(v)) for v in stored.values()))


def find(
    engine: Engine,
    now: int,
    flt: dict[str, Any] | None = None,
    name: str = "c",
    max_docs: int = 1000,
    **spec: Any,
) -> list[dict[str, Any]]:
    run = QueryRun(coll_of(engine, name), QuerySpec.parse(flt, **spec))
    out = drain(engine, run, max_docs, now_ms=now)
    return [bson.decode(raw, CODEC) for raw in out]


def visible(engine: Engine, now: int, name: str = "c") -> set[Any]:
    """The _ids a find returns at `now`, asserting that three plans agree and return no _id twice:
    the plain record scan, a filtered collection scan, and an `_id` index scan in batches of two."""
    results = []
    for flt, max_docs, spec in (
        (None, 1000, {}),
        ({"_id": {"$exists": True}}, 1000, {}),
        (None, 2, {"sort": {"_id": 1}, "hint": {"_id": 1}}),
    ):
        ids = [d["_id"] for d in find(engine, now, flt, name, max_docs, **spec)]
        assert len(ids) == len(set(ids))
        results.append(set(ids))
    assert results[0] == results[1] == results[2], f"plans disagree at {now}: {results}"
    return results[0]


def check_schedule(
    engine: Engine,
    expected: Mapping[Any, int | None],
    name: str = "c",
    purge: bool = True,
) -> None:
    """Every document of db.`name` expires exactly at expected[_id] (None: never), checked one
    millisecond before and at each expiry time: the predicate on
    the stored header says so, reads and counts hide it from that millisecond on (not one
    earlier), count_expired counts it, and (when `purge`) purge_expired deletes it at that
    millisecond (not one earlier), the collection statistics following."""
    coll = coll_of(engine, name)
    rules = ttl.rules_for(coll)
    stored = records(engine, name)
    assert {i: ttl.expires_at(ttl.read_meta(v), rules) for i, v in stored.items()} == dict(expected)
    times = sorted({t for t in expected.values() if t is not None})
    probes = sorted({T0 - 1, T0, FAR, *(p for t in times for p in (t - 1, t))})
    for now in probes:
        alive = {i for i, t in expected.items() if t is None or t > now}
        for i, v in stored.items():
            assert ttl.expired_value(v, rules, now) == (i not in alive), (i, now)
        assert visible(engine, now, name) == alive, now
        assert count_documents(engine, coll, now) == len(alive), now
        assert engine.count_expired(coll, now) == len(expected) - len(alive), now
    if not purge:
        return
    remaining = set(expected)
    for now in probes:
        gone = {i for i in remaining if (t := expected[i]) is not None and t <= now}
        assert engine.purge_expired(DB, name, now, 1_000_000) == len(gone), now
        remaining -= gone
        assert set(records(engine, name)) == remaining, now
        assert stats(engine, name)[0] == len(remaining), now
    assert_stats_match(engine, name)
