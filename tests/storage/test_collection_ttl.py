"""The TTL rules a collection's own options set (storage/expiry/ttl.py collection_rules): a clustered
collection's by the `_id` date, a time series collection's by the timeField; decided by the one
predicate with an injected `now`, and the time series options MongoDB 7 fills in or refuses."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson import Int64, ObjectId

from ebbdb.storage.catalog import timeseries
from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.expiry import ttl

T = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
T_MS = int(T.timestamp() * 1000)
CLUSTER = {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": True}


def collection(options: dict[str, Any]) -> CollectionInfo:
    return CollectionInfo(1, "db", "c", options, (IndexInfo(2, "_id_", (("_id", 1),), {}),))


def expired_at(coll: CollectionInfo, doc: dict[str, Any], now_ms: int) -> bool:
    meta = ttl.meta_for(coll, doc, modified=0)
    return ttl.expired(meta, ttl.rules_for(coll), now_ms)


@pytest.mark.parametrize(
    ("doc", "expires_ms"),
    [
        ({"_id": ObjectId.from_datetime(T)}, T_MS + 60_000),
        ({"_id": T}, T_MS + 60_000),
        ({"_id": datetime.datetime(1960, 1, 1, tzinfo=datetime.UTC)}, -315_619_200_000 + 60_000),
        ({"_id": "2024-01-01"}, None),
        ({"_id": 5}, None),
        ({"_id": {"at": T}}, None),
    ],
)
def test_clustered_rule_by_id_date(doc: dict[str, Any], expires_ms: int | None) -> None:
    coll = collection({"clusteredIndex": CLUSTER, "expireAfterSeconds": Int64(60)})
    [rule] = ttl.collection_rules(coll)
    assert (rule.kind, rule.field, rule.seconds, rule.space) == ("clustered", "_id", 60, 2)
    if expires_ms is None:
        assert not expired_at(coll, doc, 2**62)
    else:
        assert not expired_at(coll, doc, expires_ms - 1)
        assert expired_at(coll, doc, expires_ms)


def test_dates_are_kept_while_the_rule_is_off() -> None:
    off = collection({"clusteredIndex": CLUSTER})
    assert not ttl.rules_for(off).active
    meta = ttl.meta_for(off, {"_id": T}, modified=0)
    assert meta.dates == ((2, T_MS),)
    assert len(ttl.expiry_keys(off, meta, b"\0" * 8)) == 1
    assert list(ttl.expiry_ranges(ttl.rules_for(off), T_MS)) == []
    on = collection({"clusteredIndex": CLUSTER, "expireAfterSeconds": Int64(0)})
    assert ttl.expired(meta, ttl.rules_for(on), T_MS)


def test_timeseries_rule_by_time_field() -> None:
    ts = {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600}
    coll = collection({"expireAfterSeconds": Int64(10), "timeseries": ts})
    [rule] = ttl.collection_rules(coll)
    assert (rule.kind, rule.field, rule.seconds) == ("timeseries", "t", 10)
    assert expired_at(coll, {"t": T}, T_MS + 10_000)
    assert not expired_at(coll, {"t": T}, T_MS + 9_999)
    assert ttl.collection_rules(collection({})) == ()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("t", None, None, None, None), {"granularity": "seconds", "bucketMaxSpanSeconds": 3600}),
        (
            ("t", "m", "hours", None, None),
            {"granularity": "hours", "bucketMaxSpanSeconds": 2592000},
        ),
        (("t", None, None, 90, 90), {"bucketRoundingSeconds": 90, "bucketMaxSpanSeconds": 90}),
        (
            ("t", None, "minutes", 86400, 3600),
            {"granularity": "minutes", "bucketMaxSpanSeconds": 86400},
        ),
    ],
)
def test_timeseries_options_filled_in(args: tuple[Any, ...], expected: dict[str, Any]) -> None:
    time_field, meta = args[0], args[1]
    out = timeseries.create_options("db.w", time_field, meta, args[2], args[3], args[4])
    assert out == {"timeField": time_field, **({"metaField": meta} if meta else {}), **expected}


@pytest.mark.parametrize(
    ("args", "code_name"),
    [
        (("t", "t", None, None, None), "InvalidOptions"),
        (("t", None, "weeks", None, None), "BadValue"),
        (("t", None, "hours", 60, None), "InvalidOptions"),
        (("t", None, None, 60, None), "InvalidOptions"),
        (("t", None, None, 60, 30), "InvalidOptions"),
        (("t", None, None, 0, 0), "Location51024"),
    ],
)
def test_timeseries_options_refused(args: tuple[Any, ...], code_name: str) -> None:
    with pytest.raises(QueryError) as info:
        timeseries.create_options("db.w", *args)
    assert info.value.code_name == code_name


def test_granularity_only_grows_coarser() -> None:
    ts = {"timeField": "t", "granularity": "minutes", "bucketMaxSpanSeconds": 86400}
    assert timeseries.with_granularity(ts, "minutes") is None
    assert timeseries.with_granularity(ts, "hours") == {
        **ts,
        "granularity": "hours",
        "bucketMaxSpanSeconds": 2592000,
    }
    with pytest.raises(QueryError) as info:
        timeseries.with_granularity(ts, "seconds")
    assert info.value.code_name == "InvalidOptions"
