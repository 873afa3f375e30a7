"""The TTL rules of spec/ttl.md, sections 1 and 2, row by row: which documents expire and exactly when
(native TTL indexes on dates, the Cosmos `_ts` default and per-document `ttl`), and the createIndexes
validation of expireAfterSeconds. Time is injected (`now_ms`); nothing sleeps.

Each expectation is checked four ways at once: the pure predicate (`ttl.expires_at` / `ttl.expired`
on the stored header), hiding (QueryRun over three plans, count_documents) one millisecond before
and at the expiry time, and deletion (purge_expired at the same instants)."""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

import bson
import pytest
from bson import Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.binary import Binary

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.engine.store import CODEC, Engine
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.specs import parse_index_spec
from tests.helpers import enc
from tests.storage.ttl_support import (
    DB,
    FAR,
    MAX32,
    T0,
    D,
    check_schedule,
    coll_of,
    create,
    expiring,
    records,
    visible,
)

OID = ObjectId("65540000aabbccddeeff0011")
UTC = datetime.UTC


# -- helpers ---------------------------------------------------------------------------------------


def run_rows(
    engine: Engine, index: Mapping[str, Any] | None, rows: list[tuple[str, dict[str, Any], Any]]
) -> None:
    """Insert each row's document (at T0) under `index` and check the expected schedule."""
    if index is not None:
        create(engine, "c", index)
    docs = [enc({"_id": rid, **fields}) for rid, fields, _ in rows]
    assert engine.insert(DB, "c", docs, now_ms=T0).inserted == len(rows)
    check_schedule(engine, {rid: want for rid, _, want in rows})


def pure_expiry(specs: list[Mapping[str, Any]], fields: dict[str, Any], modified: int = T0) -> Any:
    """No engine: the expiry time the pure functions give one document (as stored: encoded and
    decoded) under hand-built indexes, checked against the predicate and the expiry-index ranges
    one millisecond before and at that time."""
    indexes = [IndexInfo(1, "_id_", (("_id", 1),))]
    for i, s in enumerate(specs):
        spec = parse_index_spec(s)
        indexes.append(IndexInfo(i + 2, spec.name, spec.key, dict(spec.options)))
    coll = CollectionInfo(1, DB, "c", {}, tuple(indexes))
    rules = ttl.rules_for(coll)
    meta = ttl.meta_for(coll, bson.decode(enc({"_id": "x", **fields}), CODEC), modified)
    assert ttl.read_meta(meta.pack()) == meta
    at = ttl.expires_at(meta, rules)
    entries = ttl.expiry_keys(coll, meta, (7).to_bytes(8, "big"))
    for now in (T0, FAR) if at is None else (at - 1, at):
        assert ttl.expired(meta, rules, now) == (at is not None and at <= now)
        ranges = list(ttl.expiry_ranges(rules, now))
        in_range = any(a <= k < b for k in entries for a, b in ranges)
        assert in_range == ttl.expired(meta, rules, now), now
    return at


# -- section 1: the native model -------------------------------------------------------------------

E10 = {"key": {"t": 1}, "expireAfterSeconds": 10}
ISO = "2023-11-14T22:13:20Z"
NATIVE_ROWS: list[tuple[str, dict[str, Any], int | None]] = [
    ("date", {"t": D(T0)}, T0 + 10_000),
    ("date_odd_ms", {"t": D(T0 + 7)}, T0 + 10_007),
    (
        "datetime_micros_truncated",
        {"t": datetime.datetime(2023, 11, 14, 22, 13, 20, 999_999, tzinfo=UTC)},
        T0 + 999 + 10_000,
    ),
    ("epoch", {"t": D(0)}, 10_000),
    ("before_1970", {"t": D(-86_400_000)}, -86_390_000),
    ("before_1970_ms", {"t": D(-1)}, 9_999),
    (
        "year_1900",
        {"t": datetime.datetime(1900, 1, 1, tzinfo=UTC)},
        -2_208_988_800_000 + 10_000,
    ),
    ("far_future", {"t": D(253_402_300_799_999)}, 253_402_300_799_999 + 10_000),
    ("array_one_date", {"t": [D(T0 + 1)]}, T0 + 10_001),
    ("array_earliest", {"t": [D(T0 + 500), D(T0 + 200), D(T0 + 900)]}, T0 + 10_200),
    (
        "array_mixed",
        {"t": [5, ISO, None, D(T0 + 300), True, OID, Timestamp(1, 1), D(T0 + 400)]},
        T0 + 10_300,
    ),
    ("array_pre_1970_first", {"t": [D(T0), D(-5)]}, 9_995),
    ("array_no_dates", {"t": [1, ISO, None, OID]}, None),
    ("array_empty", {"t": []}, None),
    ("array_of_array_of_date", {"t": [[D(T0)]]}, None),
    ("missing", {}, None),
    ("null", {"t": None}, None),
    ("iso_string", {"t": ISO}, None),
    ("int_ms", {"t": T0}, None),
    ("int32", {"t": 5}, None),
    ("int64", {"t": Int64(T0)}, None),
    ("double", {"t": float(T0)}, None),
    ("decimal", {"t": Decimal128(str(T0))}, None),
    ("bool", {"t": True}, None),
    ("objectid", {"t": OID}, None),
    ("timestamp", {"t": Timestamp(1_700_000_000, 1)}, None),
    ("subdocument_with_date", {"t": {"d": D(T0)}}, None),
    ("binary", {"t": Binary(b"\x00" * 8)}, None),
    ("regex", {"t": Regex("^a")}, None),
    ("minkey", {"t": MinKey()}, None),
    ("maxkey", {"t": MaxKey()}, None),
    ("other_field_date", {"u": D(T0)}, None),
]


@pytest.mark.parametrize(("rid", "fields", "want"), NATIVE_ROWS, ids=[r[0] for r in NATIVE_ROWS])
def test_native_value_table(rid: str, fields: dict[str, Any], want: Any) -> None:
    assert pure_expiry([E10], fields) == want


def test_native_value_table_on_the_engine(engine: Engine) -> None:
    run_rows(engine, E10, NATIVE_ROWS)


NESTED = {"key": {"a.b": 1}, "expireAfterSeconds": 0}
NESTED_ROWS: list[tuple[str, dict[str, Any], int | None]] = [
    ("subdocument", {"a": {"b": D(T0)}}, T0),
    ("array_of_subdocuments", {"a": [{"b": D(T0 + 300)}, {"b": D(T0 + 100)}, {"c": 1}]}, T0 + 100),
    ("array_under_subdocument", {"a": {"b": [D(T0 + 70), 3, D(T0 + 50)]}}, T0 + 50),
    ("arrays_at_both_levels", {"a": [{"b": [D(T0 + 90), "x"]}, {"b": D(T0 + 80)}]}, T0 + 80),
    ("subdocuments_without_dates", {"a": [{"b": ISO}, {"b": 5}, {"b": None}]}, None),
    ("string", {"a": {"b": ISO}}, None),
    ("null", {"a": {"b": None}}, None),
    ("sibling_field", {"a": {"c": D(T0)}}, None),
    ("parent_is_date", {"a": D(T0)}, None),
    ("parent_is_array_of_dates", {"a": [D(T0)]}, None),
    ("top_level_only", {"b": D(T0)}, None),
    ("missing", {}, None),
]


@pytest.mark.parametrize(("rid", "fields", "want"), NESTED_ROWS, ids=[r[0] for r in NESTED_ROWS])
def test_nested_path_table(rid: str, fields: dict[str, Any], want: Any) -> None:
    assert pure_expiry([NESTED], fields) == want


def test_nested_path_table_on_the_engine(engine: Engine) -> None:
    run_rows(engine, NESTED, NESTED_ROWS)


@pytest.mark.parametrize(
    ("expire", "e_ms"),
    [
        (0, 0),
        (1, 1000),
        (Int64(10), 10_000),
        (10.0, 10_000),
        (10.9, 10_000),
        (0.5, 0),
        (MAX32, MAX32 * 1000),
        (Int64(MAX32), MAX32 * 1000),
    ],
    ids=["0", "1", "int64", "double", "fraction", "half", "max", "max_int64"],
)
def test_expire_after_seconds_values(engine: Engine, expire: Any, e_ms: int) -> None:
    run_rows(
        engine,
        {"key": {"t": 1}, "expireAfterSeconds": expire},
        [("d", {"t": D(T0)}, T0 + e_ms), ("old", {"t": D(-1)}, e_ms - 1), ("n", {"t": 1}, None)],
    )


def test_zero_seconds_expires_at_the_date_itself(engine: Engine) -> None:
    """E = 0 with a future Date: "expire at a specific clock time"."""
    hour = 3_600_000
    run_rows(
        engine,
        {"key": {"at": 1}, "expireAfterSeconds": 0},
        [
            ("in_an_hour", {"at": D(T0 + hour)}, T0 + hour),
            ("next_year", {"at": D(T0 + 365 * 24 * hour)}, T0 + 365 * 24 * hour),
            ("a_ms_ago", {"at": D(T0 - 1)}, T0 - 1),
            ("now", {"at": D(T0)}, T0),
        ],
    )


def test_inclusive_boundary_at_millisecond_precision(engine: Engine) -> None:
    create(engine, "c", E10)
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(T0 + 123)})], now_ms=T0)
    at = T0 + 123 + 10_000
    assert visible(engine, at - 1) == {1}
    assert visible(engine, at) == set()
    assert visible(engine, at + 1) == set()
    assert engine.purge_expired(DB, "c", at - 1, 10) == 0
    assert engine.purge_expired(DB, "c", at, 10) == 1


def test_several_ttl_indexes_any_one_expires(engine: Engine) -> None:
    create(engine, "c", {"key": {"a": 1}, "expireAfterSeconds": 100})
    create(engine, "c", {"key": {"b": 1}, "expireAfterSeconds": 10})
    create(engine, "c", {"key": {"c.d": 1}, "expireAfterSeconds": 0})
    rows = [
        ("a_only", {"a": D(T0)}, T0 + 100_000),
        ("b_only", {"b": D(T0)}, T0 + 10_000),
        ("b_first", {"a": D(T0), "b": D(T0)}, T0 + 10_000),
        ("a_first", {"a": D(T0), "b": D(T0 + 1_000_000)}, T0 + 100_000),
        ("c_first", {"a": D(T0), "b": D(T0), "c": {"d": D(T0 + 5)}}, T0 + 5),
        ("a_date_b_text", {"a": D(T0 + 1), "b": ISO}, T0 + 100_001),
        ("none", {"a": 1, "b": "x", "c": {"d": None}}, None),
    ]
    run_rows(engine, None, rows)


def test_partial_filter_only_matching_documents_expire(engine: Engine) -> None:
    run_rows(
        engine,
        {"key": {"t": 1}, "expireAfterSeconds": 0, "partialFilterExpression": {"kind": "tmp"}},
        [
            ("tmp", {"kind": "tmp", "t": D(T0)}, T0),
            ("tmp_array", {"kind": "tmp", "t": [D(T0 + 9), D(T0 + 3)]}, T0 + 3),
            ("keep", {"kind": "keep", "t": D(T0)}, None),
            ("no_kind", {"t": D(T0)}, None),
            ("tmp_no_date", {"kind": "tmp", "t": "soon"}, None),
        ],
    )


def test_partial_filter_on_the_date_itself(engine: Engine) -> None:
    run_rows(
        engine,
        {
            "key": {"t": 1},
            "expireAfterSeconds": 1,
            "partialFilterExpression": {"t": {"$gte": D(T0)}},
        },
        [("new", {"t": D(T0 + 1)}, T0 + 1001), ("old", {"t": D(T0 - 1)}, None)],
    )


def test_hidden_ttl_index_still_expires(engine: Engine) -> None:
    run_rows(
        engine,
        {"key": {"t": 1}, "expireAfterSeconds": 5, "hidden": True},
        [("d", {"t": D(T0)}, T0 + 5000), ("s", {"t": "x"}, None)],
    )
    assert coll_of(engine, "c").index_named("t_1").hidden  # type: ignore[union-attr]


def test_predicate_on_hand_built_rules() -> None:
    """The pure predicate without an engine: RecordMeta dates by index id, the earliest expiry
    wins, the boundary is inclusive, and a header survives pack/read."""
    a = IndexInfo(2, "a_1", (("a", 1),), {"expireAfterSeconds": 10})
    b = IndexInfo(3, "b_1", (("b", 1),), {"expireAfterSeconds": 0})
    plain = IndexInfo(4, "c_1", (("c", 1),), {})
    coll = CollectionInfo(1, DB, "c", {}, (IndexInfo(1, "_id_", (("_id", 1),)), a, b, plain))
    rules = ttl.rules_for(coll)
    assert [(ix.name, e) for ix, e in rules.native] == [("a_1", 10), ("b_1", 0)]
    assert rules.cosmos is None
    meta = ttl.meta_for(coll, {"_id": 1, "a": D(T0), "b": [D(T0 + 20_000), 1], "c": D(0)}, 77)
    assert meta == ttl.RecordMeta(77, 0, ((2, T0), (3, T0 + 20_000)))
    assert ttl.read_meta(meta.pack() + enc({"_id": 1})) == meta
    assert ttl.body(meta.pack() + enc({"_id": 1})) == enc({"_id": 1})
    assert ttl.expires_at(meta, rules) == T0 + 10_000
    assert not ttl.expired(meta, rules, T0 + 9_999)
    assert ttl.expired(meta, rules, T0 + 10_000)
    assert not ttl.expired(meta, ttl.NO_RULES, FAR)
    assert ttl.expires_at(ttl.meta_for(coll, {"_id": 2, "c": D(0)}, 77), rules) is None


def test_expiry_ranges_bound_the_entries_exactly() -> None:
    """expiry_keys/expiry_ranges: an entry lies in a range at `now` exactly when expired."""
    a = IndexInfo(2, "a_1", (("a", 1),), {"expireAfterSeconds": 10})
    cosmos = IndexInfo(3, "_ts_1", (("_ts", 1),), {"expireAfterSeconds": 30})
    coll = CollectionInfo(1, DB, "c", {}, (IndexInfo(1, "_id_", (("_id", 1),)), a, cosmos))
    rules = ttl.rules_for(coll)
    metas = {
        "date": ttl.RecordMeta(T0, 0, ((2, T0 - 86_400_000),)),
        "default": ttl.RecordMeta(T0, 0, ()),
        "own_ttl": ttl.RecordMeta(T0, 5, ()),
        "never": ttl.RecordMeta(T0, -1, ()),
    }
    probes = sorted(
        {T0 - 86_400_000 + d for d in (9_999, 10_000)}
        | {T0 + d for d in (4_999, 5_000, 29_999, 30_000)}
        | {FAR}
    )
    for i, (tag, meta) in enumerate(metas.items()):
        entries = ttl.expiry_keys(coll, meta, i.to_bytes(8, "big"))
        assert (tag == "never") == (not entries)
        at = ttl.expires_at(meta, rules)
        for now in probes:
            ranges = list(ttl.expiry_ranges(rules, now))
            inside = any(start <= k < stop for k in entries for start, stop in ranges)
            assert inside == (at is not None and at <= now), (tag, now)


# -- section 2: the Cosmos model -------------------------------------------------------------------


COSMOS_TABLE: list[tuple[int | None, list[tuple[str, dict[str, Any], int | None]]]] = [
    (
        None,
        [
            ("plain", {}, None),
            ("ttl_minus_one", {"ttl": -1}, None),
            ("ttl_5", {"ttl": 5}, None),
            ("client_ts", {"_ts": D(0)}, None),
        ],
    ),
    (
        -1,
        [
            ("plain", {}, None),
            ("ttl_minus_one", {"ttl": -1}, None),
            ("ttl_5", {"ttl": 5}, T0 + 5_000),
            ("ttl_20", {"ttl": 20}, T0 + 20_000),
            ("ttl_ignored", {"ttl": 20.5}, None),
            ("ttl_zero", {"ttl": 0}, None),
        ],
    ),
    (
        10,
        [
            ("plain", {}, T0 + 10_000),
            ("ttl_minus_one", {"ttl": -1}, None),
            ("ttl_5", {"ttl": 5}, T0 + 5_000),
            ("ttl_20", {"ttl": 20}, T0 + 20_000),
            ("ttl_1", {"ttl": 1}, T0 + 1_000),
            ("ttl_max", {"ttl": MAX32}, T0 + MAX32 * 1000),
            ("ttl_ignored", {"ttl": "20"}, T0 + 10_000),
        ],
    ),
]


@pytest.mark.parametrize(("d", "rows"), COSMOS_TABLE, ids=[f"D={d}" for d, _ in COSMOS_TABLE])
def test_cosmos_table(engine: Engine, d: int | None, rows: list[Any]) -> None:
    run_rows(engine, None if d is None else expiring("_ts", d), rows)


#: (the document's `ttl` value, what the header records: the valid ttl, or 0 when ignored).
VALID_TTL: list[tuple[str, Any, int]] = [
    ("int32", 20, 20),
    ("int64_fits", Int64(20), 20),
    ("whole_double", 20.0, 20),
    ("one", 1, 1),
    ("int32_max", MAX32, MAX32),
    ("int64_max32", Int64(MAX32), MAX32),
    ("double_max32", float(MAX32), MAX32),
    ("minus_one", -1, -1),
    ("minus_one_int64", Int64(-1), -1),
    ("minus_one_double", -1.0, -1),
]
IGNORED_TTL: list[tuple[str, Any]] = [
    ("fraction", 20.5),
    ("small_fraction", 0.5),
    ("minus_fraction", -1.5),
    ("int64_too_big", Int64(2_147_483_649)),
    ("int64_2pow31", Int64(2_147_483_648)),
    ("double_too_big", 2_147_483_648.0),
    ("huge_double", 1e300),
    ("inf", math.inf),
    ("minus_inf", -math.inf),
    ("nan", math.nan),
    ("string", "20"),
    ("true", True),
    ("false", False),
    ("zero", 0),
    ("zero_int64", Int64(0)),
    ("zero_double", 0.0),
    ("minus_five", -5),
    ("minus_two_int64", Int64(-2)),
    ("int32_min", -2_147_483_648),
    ("null", None),
    ("decimal", Decimal128("20")),
    ("array", [20]),
    ("subdocument", {"n": 20}),
    ("date", D(T0)),
]
FINITE_IGNORED = [
    (tag, v) for tag, v in IGNORED_TTL if not isinstance(v, float) or math.isfinite(v)
]


@pytest.mark.parametrize(("tag", "value", "valid"), VALID_TTL, ids=[r[0] for r in VALID_TTL])
@pytest.mark.parametrize("d", [10, -1])
def test_valid_document_ttl(d: int, tag: str, value: Any, valid: int) -> None:
    assert ttl.valid_doc_ttl({"ttl": value}) == valid
    want = None if valid == -1 else T0 + valid * 1000
    assert pure_expiry([expiring("_ts", d)], {"ttl": value}) == want
    assert pure_expiry([], {"ttl": value}) is None  # no `_ts` index: never


@pytest.mark.parametrize(("tag", "value"), IGNORED_TTL, ids=[r[0] for r in IGNORED_TTL])
@pytest.mark.parametrize("d", [10, -1])
def test_ignored_document_ttl(d: int, tag: str, value: Any) -> None:
    assert ttl.valid_doc_ttl({"ttl": value}) == 0
    assert pure_expiry([expiring("_ts", d)], {"ttl": value}) == (T0 + 10_000 if d == 10 else None)


@pytest.mark.parametrize("d", [10, -1])
def test_document_ttl_values_on_the_engine(engine: Engine, d: int) -> None:
    """Every valid and ignored `ttl` of the tables in one collection: the header records the
    valid value (0 when ignored), the stored BSON is exactly the client's, and the schedule holds."""
    create(engine, "c", expiring("_ts", d))
    docs = {tag: {"_id": tag, "ttl": value} for tag, value, _ in VALID_TTL}
    docs |= {tag: {"_id": tag, "ttl": value} for tag, value in FINITE_IGNORED}
    result = engine.insert(DB, "c", [enc(doc) for doc in docs.values()], now_ms=T0)
    assert (result.inserted, result.errors) == (len(docs), ())
    header = {tag: valid for tag, _, valid in VALID_TTL} | {tag: 0 for tag, _ in FINITE_IGNORED}
    stored = records(engine, "c")
    assert {tag: ttl.read_meta(v) for tag, v in stored.items()} == {
        tag: ttl.RecordMeta(T0, n, ()) for tag, n in header.items()
    }
    assert {tag: ttl.body(v) for tag, v in stored.items()} == {
        tag: enc(doc) for tag, doc in docs.items()
    }
    default = T0 + 10_000 if d == 10 else None
    check_schedule(
        engine,
        {
            tag: default if n == 0 else None if n == -1 else T0 + n * 1000
            for tag, n in header.items()
        },
    )


@pytest.mark.parametrize("d", [None, 10, -1], ids=["no_ttl_index", "D=10", "D=-1"])
def test_document_ttl_infinity_is_ordinary_data(engine: Engine, d: int | None) -> None:
    """A double `ttl` of +-Infinity is not a whole number that fits int32: ignored, and the insert
    succeeds (on a collection without any TTL index `ttl` is plain data altogether)."""
    if d is not None:
        create(engine, "c", expiring("_ts", d))
    docs = [{"_id": 1, "ttl": math.inf}, {"_id": 2, "ttl": -math.inf}]
    result = engine.insert(DB, "c", [enc(doc) for doc in docs], now_ms=T0)
    assert (result.inserted, result.errors) == (2, ())
    assert [ttl.body(v) for v in records(engine, "c").values()] == [enc(doc) for doc in docs]
    default = T0 + 10_000 if d == 10 else None
    check_schedule(engine, {1: default, 2: default})


@pytest.mark.parametrize(
    "fields",
    [
        {"meta": {"ttl": 5}},
        {"TTL": 5},
        {"Ttl": 5},
        {"ttl ": 5},
        {"a": [{"ttl": 5}]},
        {"_ttl": 5},
    ],
    ids=["nested", "upper", "title", "trailing_space", "in_array", "underscore"],
)
def test_only_the_root_lower_case_ttl_counts(engine: Engine, fields: dict[str, Any]) -> None:
    run_rows(engine, expiring("_ts", 10), [("doc", fields, T0 + 10_000)])
    assert ttl.valid_doc_ttl({"_id": 1, **fields}) == 0


def test_cosmos_documentation_example(engine: Engine) -> None:
    """Azure's example: index {_ts: 1} with expireAfterSeconds 10; ttl 20.0, int 20 and
    NumberLong(20) live 20 s, ttl 20.5 and NumberLong(2147483649) live 10 s."""
    run_rows(
        engine,
        expiring("_ts", 10),
        [
            ("double", {"ttl": 20.0}, T0 + 20_000),
            ("int", {"ttl": 20}, T0 + 20_000),
            ("long", {"ttl": Int64(20)}, T0 + 20_000),
            ("fraction", {"ttl": 20.5}, T0 + 10_000),
            ("long_too_big", {"ttl": Int64(2_147_483_649)}, T0 + 10_000),
        ],
    )


def test_ttl_without_a_ts_index_never_expires(engine: Engine) -> None:
    """A per-document ttl counts only while the collection has a `_ts` TTL index, even under an
    unrelated native TTL index."""
    run_rows(
        engine,
        E10,
        [("ttl", {"ttl": 1}, None), ("ttl_and_date", {"ttl": 1, "t": D(T0)}, T0 + 10_000)],
    )


def test_cosmos_and_native_rules_together(engine: Engine) -> None:
    create(engine, "c", expiring("_ts", 30))
    run_rows(
        engine,
        E10,
        [
            ("date_first", {"t": D(T0)}, T0 + 10_000),
            ("default_first", {"t": D(T0 + 60_000)}, T0 + 30_000),
            ("own_ttl_first", {"t": D(T0), "ttl": 2}, T0 + 2_000),
            ("ttl_minus_one_date", {"t": D(T0), "ttl": -1}, T0 + 10_000),
            ("ttl_minus_one", {"ttl": -1}, None),
        ],
    )


@pytest.mark.parametrize(
    "client_ts",
    [D(0), D(T0 - 10**9), D(T0 + 10**9), Timestamp(1, 1), 5, "2020-01-01", None],
    ids=["epoch", "past", "future", "timestamp", "number", "string", "null"],
)
def test_client_ts_field_is_ordinary_data(engine: Engine, client_ts: Any) -> None:
    """A top-level `_ts` the client writes never drives expiry, and it is returned unchanged."""
    create(engine, "c", expiring("_ts", 10))
    doc = {"_id": 1, "_ts": client_ts, "x": 1}
    engine.insert(DB, "c", [enc(doc)], now_ms=T0)
    stored = records(engine, "c")[1]
    assert ttl.read_meta(stored).modified == T0
    assert ttl.body(stored) == enc(doc)
    coll = coll_of(engine, "c")
    run = QueryRun(coll, QuerySpec.parse({"_ts": client_ts}))
    assert run.next_chunk(engine, 10, 1 << 20, now_ms=T0) == [enc(doc)]
    check_schedule(engine, {1: T0 + 10_000})


def test_last_modified_is_kept_outside_the_document(engine: Engine) -> None:
    """meta.modified is the insert's now_ms; the stored BSON is exactly what the client sent (no
    `_ts` added), and reads return those bytes."""
    create(engine, "c", expiring("_ts", 10))
    docs = [{"_id": 1, "a": "x"}, {"_id": 2, "ttl": 20}, {"_id": 3, "ttl": -1, "n": [1, 2]}]
    engine.insert(DB, "c", [enc(d) for d in docs[:2]], now_ms=T0)
    engine.insert(DB, "c", [enc(docs[2])], now_ms=T0 + 5)
    coll = coll_of(engine, "c")
    with engine.read() as r:
        by_id = {bson.decode(ttl.body(v), CODEC)["_id"]: rid for rid, v in r.scan(coll)}
        stored = {i: r.record(coll, rid) for i, rid in by_id.items()}
    assert {i: ttl.read_meta(v) for i, v in stored.items()} == {  # type: ignore[arg-type]
        1: ttl.RecordMeta(T0, 0, ()),
        2: ttl.RecordMeta(T0, 20, ()),
        3: ttl.RecordMeta(T0 + 5, -1, ()),
    }
    for d in docs:
        value = stored[d["_id"]]
        assert value is not None
        body = ttl.body(value)
        assert body == enc(d)
        assert b"_ts" not in body
        assert len(value) == ttl.body_offset(value) + len(enc(d))
    run = QueryRun(coll_of(engine, "c"), QuerySpec.parse())
    assert run.next_chunk(engine, 10, 1 << 20, now_ms=T0 + 5) == [enc(d) for d in docs]
    check_schedule(engine, {1: T0 + 10_000, 2: T0 + 20_000, 3: None})


def test_documents_without_id_get_one_and_keep_their_expiry(engine: Engine) -> None:
    create(engine, "c", expiring("_ts", 10))
    engine.insert(DB, "c", [enc({"ttl": 3})], now_ms=T0)
    [(oid, value)] = records(engine, "c").items()
    assert isinstance(oid, ObjectId)
    assert ttl.read_meta(value) == ttl.RecordMeta(T0, 3, ())
    check_schedule(engine, {oid: T0 + 3_000})


# -- createIndexes validation ----------------------------------------------------------------------


def int32_in_bson(value: Any) -> bool:
    raw = bson.encode({"e": value})
    return raw[4] == 0x10  # element type int32


OK_EXPIRE: list[tuple[Any, int]] = [
    (0, 0),
    (1, 1),
    (Int64(0), 0),
    (Int64(5), 5),
    (5.0, 5),
    (10000.7, 10000),
    (0.9, 0),
    (MAX32, MAX32),
    (Int64(MAX32), MAX32),
    (float(MAX32), MAX32),
]


@pytest.mark.parametrize(("value", "stored"), OK_EXPIRE, ids=[repr(v) for v, _ in OK_EXPIRE])
def test_expire_after_seconds_accepted(value: Any, stored: int) -> None:
    spec = parse_index_spec({"key": {"t": 1}, "expireAfterSeconds": value})
    assert spec.options == {"expireAfterSeconds": stored}
    assert int32_in_bson(spec.options["expireAfterSeconds"])


def test_accepted_expire_values_in_list_indexes(engine: Engine) -> None:
    for i, (value, stored) in enumerate(OK_EXPIRE):
        name = f"c{i}"
        spec = parse_index_spec({"key": {"t": 1}, "expireAfterSeconds": value})
        result = engine.create_indexes(DB, name, [spec])
        assert (result.before, result.after, result.created_collection, result.note) == (
            1,
            2,
            True,
            None,
        )
        ix = coll_of(engine, name).index_named("t_1")
        assert ix is not None
        assert ix.spec() == {"v": 2, "key": {"t": 1}, "name": "t_1", "expireAfterSeconds": stored}
        assert int32_in_bson(ix.spec()["expireAfterSeconds"])
        assert ttl.rules_for(coll_of(engine, name)).native == ((ix, stored),)


def test_truncated_expire_is_stored_as_int32_across_reopen(engine: Engine) -> None:
    create(engine, "c", {"key": {"t": 1}, "expireAfterSeconds": 10000.7, "name": "ttl"})
    path = engine.path
    engine.close()
    again = Engine.open(path)
    try:
        ix = coll_of(again, "c").index_named("ttl")
        assert ix is not None
        spec = ix.spec()
        assert spec == {"v": 2, "key": {"t": 1}, "name": "ttl", "expireAfterSeconds": 10000}
        assert type(spec["expireAfterSeconds"]) is int
        assert int32_in_bson(spec["expireAfterSeconds"])
    finally:
        again.close()


BAD_EXPIRE: list[Any] = [
    -1,
    -0.5,
    Int64(-1),
    -MAX32,
    math.nan,
    MAX32 + 1,
    Int64(MAX32 + 1),
    2_147_483_648.0,
    1e20,
    math.inf,
    -math.inf,
    "5",
    "",
    True,
    False,
    None,
    {},
    [5],
    D(5),
]


@pytest.mark.parametrize("value", BAD_EXPIRE, ids=[repr(v) for v in BAD_EXPIRE])
def test_expire_after_seconds_rejected(value: Any) -> None:
    with pytest.raises(QueryError) as info:
        parse_index_spec({"key": {"t": 1}, "expireAfterSeconds": value})
    assert info.value.code_name == "CannotCreateIndex"


@pytest.mark.parametrize(
    "key",
    [
        {"a": 1, "b": 1},
        {"a": 1, "b": -1},
        {"t": 1, "_ts": 1},
        {"_ts": 1, "t": 1},
        {"_id": 1, "a": 1},
        {"a.b": 1, "a.c": 1},
    ],
    ids=["ab", "a_b_desc", "t_ts", "ts_t", "id_a", "dotted"],
)
@pytest.mark.parametrize("value", [0, 10])
def test_compound_key_with_expire_is_cannot_create_index(key: dict[str, Any], value: int) -> None:
    with pytest.raises(QueryError) as info:
        parse_index_spec({"key": key, "expireAfterSeconds": value})
    assert info.value.code_name == "CannotCreateIndex"
    assert "compound" in info.value.message


@pytest.mark.parametrize("key", [{"_id": 1}, {"_id": -1}], ids=["asc", "desc"])
@pytest.mark.parametrize("value", [0, 10, 10.5])
def test_id_key_with_expire_is_invalid_index_specification_option(
    key: dict[str, Any], value: Any
) -> None:
    with pytest.raises(QueryError) as info:
        parse_index_spec({"key": key, "expireAfterSeconds": value, "name": "_id_"})
    assert info.value.code_name == "InvalidIndexSpecificationOption"


@pytest.mark.parametrize(
    "key",
    [
        {"expireAfterSeconds": 1},
        {"expireAfterSeconds": 1, "a": 1},
        {"a": 1, "expireAfterSeconds": -1},
    ],
    ids=["alone", "first", "second"],
)
def test_key_field_named_expire_after_seconds_is_ordinary(
    engine: Engine, key: dict[str, Any]
) -> None:
    spec = parse_index_spec({"key": key})
    assert spec.options == {}
    engine.create_indexes(DB, "c", [spec])
    coll = coll_of(engine, "c")
    assert not ttl.rules_for(coll).active
    assert "expireAfterSeconds" not in coll.indexes[-1].spec()
    doc = {"_id": 1, "expireAfterSeconds": D(0), "a": D(0)}
    engine.insert(DB, "c", [enc(doc)], now_ms=T0)
    check_schedule(engine, {1: None})


OK_TS: list[tuple[Any, int]] = [
    (-1, -1),
    (Int64(-1), -1),
    (-1.0, -1),
    (1, 1),
    (5.0, 5),
    (10.7, 10),
    (MAX32, MAX32),
    (Int64(MAX32), MAX32),
]
BAD_TS: list[Any] = [
    0,
    0.0,
    Int64(0),
    0.5,
    -2,
    Int64(-2),
    -100,
    MAX32 + 1,
    Int64(MAX32 + 1),
    math.nan,
    math.inf,
    -math.inf,
    "5",
    True,
    None,
]


@pytest.mark.parametrize(("value", "stored"), OK_TS, ids=[repr(v) for v, _ in OK_TS])
def test_ts_default_accepted(value: Any, stored: int) -> None:
    spec = parse_index_spec(expiring("_ts", value))
    assert spec.options == {"expireAfterSeconds": stored}
    assert int32_in_bson(spec.options["expireAfterSeconds"])
    ix = IndexInfo(2, spec.name, spec.key, spec.options)
    rules = ttl.rules_for(CollectionInfo(1, DB, "c", {}, (ix,)))
    assert (rules.cosmos, rules.cosmos_index, rules.native) == (stored, ix, ())


@pytest.mark.parametrize("value", BAD_TS, ids=[repr(v) for v in BAD_TS])
def test_ts_default_rejected(value: Any) -> None:
    with pytest.raises(QueryError) as info:
        parse_index_spec(expiring("_ts", value))
    assert info.value.code_name == "CannotCreateIndex"


# Existing index: {t: 1}, name t_1, expireAfterSeconds 10.
CONFLICTS: list[tuple[str, dict[str, Any], str]] = [
    ("new_e_same_name", {"key": {"t": 1}, "expireAfterSeconds": 20}, "IndexOptionsConflict"),
    ("no_e_same_name", {"key": {"t": 1}}, "IndexOptionsConflict"),
    (
        "same_e_other_name",
        {"key": {"t": 1}, "expireAfterSeconds": 10, "name": "other"},
        "IndexOptionsConflict",
    ),
    (
        "new_e_other_name",
        {"key": {"t": 1}, "expireAfterSeconds": 20, "name": "other"},
        "IndexOptionsConflict",
    ),
    ("no_e_other_name", {"key": {"t": 1}, "name": "other"}, "IndexOptionsConflict"),
    ("other_key_same_name", {"key": {"u": 1}, "name": "t_1"}, "IndexKeySpecsConflict"),
    (
        "other_direction_same_name",
        {"key": {"t": -1}, "expireAfterSeconds": 10, "name": "t_1"},
        "IndexKeySpecsConflict",
    ),
    (
        "unique_same_name",
        {"key": {"t": 1}, "expireAfterSeconds": 10, "unique": True},
        "IndexKeySpecsConflict",
    ),
    (
        "sparse_same_name",
        {"key": {"t": 1}, "expireAfterSeconds": 10, "sparse": True},
        "IndexKeySpecsConflict",
    ),
    (
        "partial_same_name",
        {"key": {"t": 1}, "expireAfterSeconds": 10, "partialFilterExpression": {"x": 1}},
        "IndexKeySpecsConflict",
    ),
    ("identical", {"key": {"t": 1}, "expireAfterSeconds": 10}, "same"),
    ("identical_int64", {"key": {"t": 1}, "expireAfterSeconds": Int64(10)}, "same"),
    ("identical_double", {"key": {"t": 1}, "expireAfterSeconds": 10.0}, "same"),
    ("identical_double_key", {"key": {"t": 1.0}, "expireAfterSeconds": 10}, "same"),
    ("identical_named", {"key": {"t": 1}, "expireAfterSeconds": 10, "name": "t_1"}, "same"),
    (
        "other_partial_other_name",
        {
            "key": {"t": 1},
            "expireAfterSeconds": 10,
            "name": "p",
            "partialFilterExpression": {"x": 1},
        },
        "created",
    ),
]


@pytest.mark.parametrize(("tag", "spec", "outcome"), CONFLICTS, ids=[c[0] for c in CONFLICTS])
def test_create_indexes_against_an_existing_ttl_index(
    engine: Engine, tag: str, spec: dict[str, Any], outcome: str
) -> None:
    create(engine, "c", E10)
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(T0)})], now_ms=T0)
    before = [ix.spec() for ix in coll_of(engine, "c").indexes]
    parsed = parse_index_spec(spec)
    if outcome == "same":
        result = engine.create_indexes(DB, "c", [parsed])
        assert (result.before, result.after, result.created_collection, result.note) == (
            2,
            2,
            False,
            "all indexes already exist",
        )
    elif outcome == "created":
        result = engine.create_indexes(DB, "c", [parsed])
        assert (result.before, result.after, result.note) == (2, 3, None)
        return
    else:
        # The whole command fails, an acceptable index given alongside included.
        fine = parse_index_spec({"key": {"fine": 1}})
        with pytest.raises(QueryError) as info:
            engine.create_indexes(DB, "c", [fine, parsed])
        assert info.value.code_name == outcome
    assert [ix.spec() for ix in coll_of(engine, "c").indexes] == before
    check_schedule(engine, {1: T0 + 10_000})


def test_create_indexes_repeat_of_ts_index_reports_all_exist(engine: Engine) -> None:
    create(engine, "c", expiring("_ts", -1))
    result = engine.create_indexes(DB, "c", [parse_index_spec(expiring("_ts", -1.0))])
    assert (result.before, result.after, result.note) == (2, 2, "all indexes already exist")
    with pytest.raises(QueryError) as info:
        engine.create_indexes(DB, "c", [parse_index_spec(expiring("_ts", 10))])
    assert info.value.code_name == "IndexOptionsConflict"


def test_error_code_names_have_the_numbers_the_spec_gives() -> None:
    """Storage raises codeNames; these are the numbers clients see (server/errors.py)."""
    from ebbdb.server.errors import ErrorCode

    assert {
        name: int(ErrorCode[name])
        for name in (
            "CannotCreateIndex",
            "InvalidIndexSpecificationOption",
            "IndexOptionsConflict",
            "IndexKeySpecsConflict",
            "InvalidOptions",
            "TypeMismatch",
            "IndexNotFound",
            "AmbiguousIndexKeyPattern",
            "NamespaceNotFound",
            "DuplicateKey",
        )
    } == {
        "CannotCreateIndex": 67,
        "InvalidIndexSpecificationOption": 197,
        "IndexOptionsConflict": 85,
        "IndexKeySpecsConflict": 86,
        "InvalidOptions": 72,
        "TypeMismatch": 14,
        "IndexNotFound": 27,
        "AmbiguousIndexKeyPattern": 181,
        "NamespaceNotFound": 26,
        "DuplicateKey": 11000,
    }
