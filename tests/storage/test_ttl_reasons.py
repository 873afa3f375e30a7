"""storage/expiry/status.py and storage/expiry/date_strings.py without a server: which strings look like
dates, the reason a native TTL index gives for a document it finds no date in (docs/ttl.md section
5, row by row), and the notices of date-like strings (once per index)."""

from __future__ import annotations

import datetime
from typing import Any

import bson
import pytest
from bson import Int64, ObjectId, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.expiry import ttl
from ebbdb.storage.expiry.date_strings import DateStringNotice, DateStringNotices, looks_like_date
from ebbdb.storage.expiry.status import Never, Reason, Stored, no_date, rules_of
from ebbdb.storage.query.paths import MISSING

T0 = 1_700_000_000_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01", True),
        ("2024-01-01T00:00:00Z", True),
        ("2024-01-01T00:00:00.123Z", True),
        ("2024-01-01 10:20", True),
        ("2024-01-01T10:20:30+01:00", True),
        ("2024-01-01T10:20:30+0100", True),
        (" 2024-01-01T10:20:30z ", True),
        ("Mon, 01 Jan 2024 00:00:00 GMT", True),
        ("01 Jan 2024 00:00:00 +0000", True),
        ("Mon Jan 01 2024 00:00:00 GMT+0000 (Coordinated Universal Time)", True),
        ("2024-13-01", False),  # no month 13
        ("2024-02-30T00:00:00Z", False),
        ("2024-01-01T", False),
        ("20240101", False),
        ("yesterday", False),
        ("2024", False),
        ("", False),
        ("Mon, 99 Foo 2024", False),
        ("12345678901", False),
        ("2024-01-01" + "x" * 200, False),
    ],
)
def test_looks_like_date(text: str, expected: bool) -> None:
    assert looks_like_date(text) is expected


def native(path: str = "t", **options: Any) -> IndexInfo:
    return IndexInfo(7, f"{path}_1", ((path, 1),), {"expireAfterSeconds": 60, **options})


DATE = DatetimeMS(T0)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({}, Never(Reason.FIELD_MISSING)),
        ({"t": {"u": 1}}, Never(Reason.NOT_A_DATE, {"u": 1})),
        ({"t": None}, Never(Reason.NOT_A_DATE, None)),
        ({"t": 5}, Never(Reason.NOT_A_DATE, 5)),
        ({"t": Int64(T0)}, Never(Reason.NOT_A_DATE, Int64(T0))),
        ({"t": "soon"}, Never(Reason.NOT_A_DATE, "soon")),
        ({"t": ObjectId("0" * 24)}, Never(Reason.NOT_A_DATE, ObjectId("0" * 24))),
        ({"t": Timestamp(1, 1)}, Never(Reason.NOT_A_DATE, Timestamp(1, 1))),
        ({"t": "2024-01-01"}, Never(Reason.DATE_STRING, "2024-01-01")),
        ({"t": [1, "2024-01-01"]}, Never(Reason.DATE_STRING, "2024-01-01")),
        ({"t": []}, Never(Reason.ARRAY_WITHOUT_DATES, [])),
        ({"t": [1, "x"]}, Never(Reason.ARRAY_WITHOUT_DATES, [1, "x"])),
    ],
)
def test_the_reason_a_native_index_gives(doc: dict[str, Any], expected: Never) -> None:
    assert no_date(native(), doc) == expected


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"a": [{"c": 1}, {"c": 2}]}, Never(Reason.FIELD_MISSING)),
        ({"a": [{"b": 1}, {"c": 2}]}, Never(Reason.NOT_A_DATE, 1)),
        ({"a": [{"b": "x"}, {"b": "2024-05-05"}]}, Never(Reason.DATE_STRING, "2024-05-05")),
        ({"a": 3}, Never(Reason.FIELD_MISSING)),
    ],
)
def test_a_dotted_path_follows_arrays_of_documents(doc: dict[str, Any], expected: Never) -> None:
    assert no_date(native("a.b"), doc) == expected


def test_the_partial_filter_comes_first() -> None:
    ix = native(partialFilterExpression={"k": 1})
    assert no_date(ix, {"t": "2024-01-01"}) == Never(Reason.PARTIAL_FILTER)
    assert no_date(ix, {"k": 1, "t": "2024-01-01"}) == Never(Reason.DATE_STRING, "2024-01-01")


def coll(*indexes: IndexInfo) -> CollectionInfo:
    return CollectionInfo(3, "db", "c", {}, ((IndexInfo(1, "_id_", (("_id", 1),)),) + indexes))


def stored(c: CollectionInfo, doc: dict[str, Any], modified: int = T0) -> Stored:
    meta = ttl.meta_for(c, doc, modified)
    return Stored(meta.pack() + bson.encode(doc))


def cosmos(d: int) -> IndexInfo:
    return IndexInfo(9, "_ts_1", (("_ts", 1),), {"expireAfterSeconds": d})


def test_rules_map_documents_to_times_or_reasons() -> None:
    c = coll(native(), cosmos(-1))
    ttl_index, ts = rules_of(c)
    assert (ttl_index.kind, ttl_index.index, ttl_index.field, ttl_index.seconds) == (
        "ttlIndex",
        "t_1",
        "t",
        60,
    )
    assert (ts.kind, ts.index, ts.field, ts.seconds, ts.ignores) == (
        "cosmos",
        "_ts_1",
        "_ts",
        -1,
        "ttl",
    )
    when = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    ms = int(when.timestamp() * 1000)
    doc = {"_id": 1, "t": [DatetimeMS(ms + 5), DatetimeMS(ms)], "ttl": 30}
    assert ttl_index.expiry(stored(c, doc)) == ms + 60_000
    assert ts.expiry(stored(c, doc)) == T0 + 30_000
    assert ts.expiry(stored(c, {"_id": 2, "ttl": -1})) == Never(Reason.TTL_MINUS_ONE, -1)
    assert ts.expiry(stored(c, {"_id": 3, "ttl": 0})) == Never(Reason.INVALID_TTL, 0)
    assert ts.expiry(stored(c, {"_id": 4, "meta": {"ttl": 5}})) == Never(Reason.NO_DEFAULT_TTL)
    assert ts.ignored is not None
    assert ts.ignored(stored(c, {"_id": 3, "ttl": 0})) is MISSING  # a reason, not ignored

    with_default = coll(cosmos(100))
    (ts,) = rules_of(with_default)
    assert ts.expiry(stored(with_default, {"_id": 5, "ttl": "20"})) == T0 + 100_000
    assert ts.ignored is not None
    assert ts.ignored(stored(with_default, {"_id": 5, "ttl": "20"})) == "20"
    assert ts.ignored(stored(with_default, {"_id": 6})) is MISSING
    assert rules_of(coll()) == []


def test_date_string_notices_come_once_per_index() -> None:
    a, b = native("t"), IndexInfo(8, "u_1", (("u", 1),), {"expireAfterSeconds": 0})
    c = coll(a, b)
    notices = DateStringNotices()

    def write(doc: dict[str, Any]) -> None:
        notices.check(c, doc, ttl.meta_for(c, doc, T0).pack())

    write({"_id": 1, "t": DATE, "u": DATE})
    write({"_id": 2, "t": "not a date"})
    assert notices.take() == []
    write({"_id": 3, "t": "2024-01-01T00:00:00Z"})
    write({"_id": 4, "t": "2024-01-02T00:00:00Z", "u": "2024-01-03"})
    write({"_id": 5, "t": ["2024-01-01", DATE]})  # has a date: expires, nothing to say
    assert notices.take() == [
        DateStringNotice("db.c", "t_1", "t", 3, "2024-01-01T00:00:00Z"),
        DateStringNotice("db.c", "u_1", "u", 4, "2024-01-03"),
    ]
    write({"_id": 6, "t": "2024-01-04", "u": "2024-01-05"})
    assert notices.take() == []
