"""`expireAfterSeconds`, the one parser (storage/expiry/expire_after.py): every value each setting
accepts or refuses, with the exact code and message its command answers with; and the typed value
the catalog reads back from what it has always stored."""

from __future__ import annotations

import datetime
import math
from typing import Any

import bson
import pytest
from bson import Decimal128, Int64

from ebbdb.storage.catalog.info import CollectionInfo, ExpireAfter, IndexInfo
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.expiry import expire_after, ttl
from ebbdb.storage.expiry.expire_after import MAX_INDEX_SECONDS as MAX
from ebbdb.storage.expiry.expire_after import Setting

T = (("t", 1),)
TS = (("_ts", 1),)
TS_DESC = (("_ts", -1),)
ID = (("_id", 1),)
COMPOUND = (("a", 1), ("b", 1))
HASHED = (("h", "hashed"),)
NOW_MS = 1_700_000_000_000  # 2023-11-14
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
DATE = datetime.datetime(2020, 1, 1)

Case = tuple[str, Any, Any]  # id, value, seconds accepted or (codeName, message) refused


def _refused(code: str, message: str) -> tuple[str, str]:
    return (code, message)


def _run(value: Any, setting: Setting, key: Any = None, id_index: bool = False) -> Any:
    try:
        return expire_after.parse(value, setting, key, id_index=id_index, now_ms=NOW_MS).seconds
    except QueryError as exc:
        return (exc.code_name, exc.message)


# -- createIndexes ---------------------------------------------------------------------------------


def _range(value: str) -> tuple[str, str]:
    return _refused(
        "CannotCreateIndex",
        f"invalid TTL index 'expireAfterSeconds' value: {value}; must be within [0, {MAX}]",
    )


def _ts_range(value: str) -> tuple[str, str]:
    return _refused(
        "CannotCreateIndex",
        f"invalid TTL index 'expireAfterSeconds' value for _ts: {value}; must be -1 or within "
        f"[1, {MAX}]",
    )


def _not_numeric(bson_type: str) -> tuple[str, str]:
    # MongoDB's message names the BSON type, and never closes the quote it opens.
    return _refused(
        "CannotCreateIndex",
        "TTL index 'expireAfterSeconds' option must be numeric, but received a type of "
        f"'{bson_type}",
    )


NEW_INDEX_ON_DATE_FIELD: list[Case] = [
    ("0", 0, 0),
    ("1", 1, 1),
    ("max", MAX, MAX),
    ("long", Int64(10), 10),
    ("long max", Int64(MAX), MAX),
    ("double truncated", 10000.7, 10000),
    ("double under 1", 0.5, 0),
    ("double max", float(MAX), MAX),
    ("decimal", Decimal128("10.9"), 10),
    ("negative", -1, _range("-1")),
    ("negative long", Int64(-1), _range("-1")),
    ("negative fraction", -0.5, _range("-0.5")),
    ("negative double", -1.0, _range("-1.0")),
    ("negative decimal", Decimal128("-1"), _range("-1")),
    ("over max", MAX + 1, _range("2147483648")),
    ("long over max", Int64(MAX + 1), _range("2147483648")),
    ("double just over max", MAX + 0.5, _range("2147483647.5")),
    ("huge", 1e20, _range("1e+20")),
    ("NaN", math.nan, _range("nan")),
    ("decimal NaN", Decimal128("NaN"), _range("NaN")),
    ("infinity", math.inf, _range("inf")),
    ("minus infinity", -math.inf, _range("-inf")),
    ("decimal infinity", Decimal128("Infinity"), _range("Infinity")),
    ("string", "10", _not_numeric("string")),
    ("off", "off", _not_numeric("string")),
    ("bool", True, _not_numeric("bool")),
    ("null", None, _not_numeric("null")),
    ("object", {"a": 1}, _not_numeric("object")),
    ("array", [5], _not_numeric("array")),
    ("date", DATE, _not_numeric("date")),
]

NEW_INDEX_ON_TS: list[Case] = [
    ("-1", -1, -1),
    ("1", 1, 1),
    ("max", MAX, MAX),
    ("long -1", Int64(-1), -1),
    ("decimal -1", Decimal128("-1"), -1),
    ("double -1", -1.0, -1),
    # The Cosmos range is checked on the truncated number, the date field's on the double.
    ("double -1.5", -1.5, -1),
    ("double just over max", MAX + 0.5, MAX),
    ("0", 0, _ts_range("0")),
    ("double 0.5", 0.5, _ts_range("0.5")),
    ("double -0.5", -0.5, _ts_range("-0.5")),
    ("-5", -5, _ts_range("-5")),
    ("over max", MAX + 1, _ts_range("2147483648")),
    ("long over max", Int64(MAX + 1), _ts_range("2147483648")),
    # Not finite: refused in the date field's words.
    ("NaN", math.nan, _range("nan")),
    ("infinity", math.inf, _range("inf")),
    ("decimal NaN", Decimal128("NaN"), _range("NaN")),
    ("string", "10", _not_numeric("string")),
]

NOT_SINGLE_FIELD = (
    "CannotCreateIndex",
    "TTL indexes are single-field indexes, compound indexes do not support TTL.",
)
ID_INDEX = (
    "InvalidIndexSpecificationOption",
    "The field 'expireAfterSeconds' is not valid for an _id index specification.",
)

NEW_INDEX_KEYS: list[tuple[str, Any, Any, Any]] = [
    ("compound", COMPOUND, 10, NOT_SINGLE_FIELD),
    ("compound starting with _ts", (("_ts", 1), ("t", 1)), 10, NOT_SINGLE_FIELD),
    ("compound, value refused first", COMPOUND, -1, _range("-1")),
    ("_id", ID, 10, ID_INDEX),
    ("_id descending", (("_id", -1),), 0, ID_INDEX),
    ("_id hashed", (("_id", "hashed"),), 10, ID_INDEX),
    ("_id, value refused first", ID, -1, _range("-1")),
    ("_ts descending is the Cosmos default", TS_DESC, -1, -1),
    ("hashed", HASHED, 10, 10),
    ("nested path", (("a.b", 1),), 10, 10),
]


# -- collMod on an index ---------------------------------------------------------------------------


def _within(got: int) -> tuple[str, str]:
    return _refused(
        "InvalidOptions", f"TTL index 'expireAfterSeconds' must be within [0, {MAX}], got {got}"
    )


def _ts_invalid(got: int) -> tuple[str, str]:
    return _refused("InvalidOptions", f"invalid expireAfterSeconds for _ts: {got}")


NAN = ("InvalidOptions", "expireAfterSeconds cannot be NaN")
INDEX_TYPE = "BSON field 'collMod.index.expireAfterSeconds' is the wrong type '{}', expected types '[long, int, decimal, double]'"  # noqa: E501

CHANGED_INDEX_ON_DATE_FIELD: list[Case] = [
    ("0", 0, 0),
    ("max", MAX, MAX),
    ("long", Int64(10), 10),
    ("decimal", Decimal128("10.9"), 10),
    ("double truncated", 10000.7, 10000),
    # collMod truncates first: what createIndexes refuses as a double, collMod takes.
    ("negative fraction", -0.5, 0),
    ("double just over max", MAX + 0.5, MAX),
    ("negative", -1, _within(-1)),
    ("negative double", -1.5, _within(-1)),
    ("over max", MAX + 1, _within(MAX + 1)),
    ("long over max", Int64(MAX + 1), _within(MAX + 1)),
    ("NaN", math.nan, NAN),
    ("decimal NaN", Decimal128("NaN"), NAN),
    # Infinities read as MongoDB's safeNumberLong reads them: the nearest 64-bit bound.
    ("infinity", math.inf, _within(I64_MAX)),
    ("decimal infinity", Decimal128("Infinity"), _within(I64_MAX)),
    ("minus infinity", -math.inf, _within(I64_MIN)),
    ("string", "10", ("TypeMismatch", INDEX_TYPE.format("string"))),
    ("bool", True, ("TypeMismatch", INDEX_TYPE.format("bool"))),
    ("null", None, ("TypeMismatch", INDEX_TYPE.format("null"))),
    ("date", DATE, ("TypeMismatch", INDEX_TYPE.format("date"))),
]

CHANGED_INDEX_ON_TS: list[Case] = [
    ("-1", -1, -1),
    ("double -1.5", -1.5, -1),
    ("1", 1, 1),
    ("max", MAX, MAX),
    ("0", 0, _ts_invalid(0)),
    ("double 0.5", 0.5, _ts_invalid(0)),
    ("-5", -5, _ts_invalid(-5)),
    ("over max", MAX + 1, _ts_invalid(MAX + 1)),
    ("NaN", math.nan, NAN),
    ("infinity", math.inf, _ts_invalid(I64_MAX)),
    ("minus infinity", -math.inf, _ts_invalid(I64_MIN)),
]

NO_TTL_HERE = (
    "InvalidOptions",
    "TTL indexes are single-field indexes, compound indexes and the _id index do not support TTL",
)

CHANGED_INDEX_KEYS: list[tuple[str, Any, bool, Any, Any]] = [
    ("compound", COMPOUND, False, 10, NO_TTL_HERE),
    ("compound, index refused first", COMPOUND, False, -1, NO_TTL_HERE),
    ("the _id index", ID, True, 10, NO_TTL_HERE),
    ("the _id index, index refused first", ID, True, -1, NO_TTL_HERE),
    ("NaN refused before the index", COMPOUND, False, math.nan, NAN),
    # Only the `_id_` index is refused: another index on _id is an index like any other.
    ("an index on _id not named _id_", (("_id", -1),), False, 10, 10),
    ("_ts descending is the Cosmos default", TS_DESC, False, -1, -1),
    ("hashed", HASHED, False, 10, 10),
]


def test_coll_mod_reads_before_it_finds_the_index() -> None:
    """collMod reads the number (NaN refused) before it looks the index up; the index's rules come
    after, on the whole seconds read."""
    assert expire_after.read(Decimal128("10.9"), Setting.CHANGED_INDEX) == 10
    with pytest.raises(QueryError) as info:
        expire_after.read(math.nan, Setting.CHANGED_INDEX)
    assert (info.value.code_name, info.value.message) == NAN


# -- create and collMod on a clustered or time series collection -----------------------------------

LESS_THAN_0 = ("InvalidOptions", "TTL index 'expireAfterSeconds' option cannot be less than 0")
TOO_LARGE = (
    "InvalidOptions",
    "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number",
)
NOW_S = NOW_MS // 1000

# create's extractor gives the parser a whole number (server/arguments.py, Kind.INT).
NEW_COLLECTION: list[Case] = [
    ("0", 0, 0),
    ("a year", 365 * 86400, 365 * 86400),
    ("the time since the epoch", NOW_S, NOW_S),
    ("long", Int64(10), 10),
    ("past the time since the epoch", NOW_S + 1, TOO_LARGE),
    ("too many ms for 64 bits", I64_MAX // 1000 + 1, TOO_LARGE),
    ("int64 max", I64_MAX, TOO_LARGE),
    ("negative", -1, LESS_THAN_0),
    ("int64 min", I64_MIN, LESS_THAN_0),
]

COLL_TYPE = "BSON field 'collMod.expireAfterSeconds' is the wrong type '{}', expected types '[string, long, int, decimal, double]'"  # noqa: E501

CHANGED_COLLECTION: list[Case] = [
    ("0", 0, 0),
    ("long", Int64(10), 10),
    ("double truncated", 10000.7, 10000),
    ("negative fraction", -0.5, 0),
    ("decimal", Decimal128("10.9"), 10),
    ("past the time since the epoch", NOW_S + 1, TOO_LARGE),
    ("negative", -1, LESS_THAN_0),
    ("negative double", -1.5, LESS_THAN_0),
    # Not finite: read as below 0.
    ("NaN", math.nan, LESS_THAN_0),
    ("infinity", math.inf, LESS_THAN_0),
    ("decimal NaN", Decimal128("NaN"), LESS_THAN_0),
    ("string", "10", ("InvalidOptions", "Invalid string value for the 'clusteredIndex::expireAfterSeconds' option. Got: '10'. Accepted value is 'off'")),  # noqa: E501
    ("empty string", "", ("InvalidOptions", "Invalid string value for the 'clusteredIndex::expireAfterSeconds' option. Got: ''. Accepted value is 'off'")),  # noqa: E501
    ("bool", False, ("TypeMismatch", COLL_TYPE.format("bool"))),
    ("object", {}, ("TypeMismatch", COLL_TYPE.format("object"))),
    ("array", [], ("TypeMismatch", COLL_TYPE.format("array"))),
    ("date", DATE, ("TypeMismatch", COLL_TYPE.format("date"))),
]  # fmt: skip


def test_off_is_not_a_value_the_caller_tests_for_it() -> None:
    assert expire_after.OFF == "off"
    assert _run("off", Setting.CHANGED_COLLECTION)[0] == "InvalidOptions"


def test_a_collection_bound_is_the_clock_without_now() -> None:
    assert expire_after.parse(86400, Setting.NEW_COLLECTION) == ExpireAfter(86400)
    with pytest.raises(QueryError):
        expire_after.parse(2**40, Setting.CHANGED_COLLECTION)


# -- every table, one test ------------------------------------------------------------------------


def _param(setting: Setting, case: Case, key: Any = None, id_index: bool = False) -> Any:
    name, value, want = case
    return pytest.param(value, setting, key, id_index, want, id=f"{setting.value}: {name}")


PARSED = [
    *(_param(Setting.NEW_INDEX, c, T) for c in NEW_INDEX_ON_DATE_FIELD),
    *(_param(Setting.NEW_INDEX, c, TS) for c in NEW_INDEX_ON_TS),
    *(_param(Setting.NEW_INDEX, (n, v, w), key) for n, key, v, w in NEW_INDEX_KEYS),
    *(_param(Setting.CHANGED_INDEX, c, T) for c in CHANGED_INDEX_ON_DATE_FIELD),
    *(_param(Setting.CHANGED_INDEX, c, TS) for c in CHANGED_INDEX_ON_TS),
    *(_param(Setting.CHANGED_INDEX, (n, v, w), k, i) for n, k, i, v, w in CHANGED_INDEX_KEYS),
    *(_param(Setting.NEW_COLLECTION, c) for c in NEW_COLLECTION),
    *(_param(Setting.CHANGED_COLLECTION, c) for c in CHANGED_COLLECTION),
]


@pytest.mark.parametrize(("value", "setting", "key", "id_index", "want"), PARSED)
def test_parse(value: Any, setting: Setting, key: Any, id_index: bool, want: Any) -> None:
    """`want`: the seconds accepted, or the (codeName, message) refusal."""
    assert _run(value, setting, key, id_index) == want


# -- the Cosmos rule: one predicate ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "cosmos"),
    [(TS, True), (TS_DESC, True), ((("_ts", "hashed"),), True), (T, False), (ID, False),
     ((("_ts", 1), ("t", 1)), False), ((("t", 1), ("_ts", 1)), False), ((("a._ts", 1),), False)],
)  # fmt: skip
def test_the_cosmos_key(key: Any, cosmos: bool) -> None:
    assert ttl.is_cosmos_key(key) is cosmos
    ix = IndexInfo(2, "x", key, {"expireAfterSeconds": 10})
    assert ttl.is_cosmos_index(ix) is cosmos
    assert not ttl.is_cosmos_index(IndexInfo(2, "x", key, {}))


# -- what the catalog reads back -------------------------------------------------------------------

#: A collection's catalog entry as ebbdb has always written it (storage/engine/records.py):
#: createIndexes stored an int32, collMod an int, a collection's option a long.
OLD_ENTRY = {
    "id": 1,
    "db": "db",
    "name": "c",
    "options": {
        "clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": True},
        "expireAfterSeconds": Int64(3600),
    },
    "uuid": None,
    "indexes": [
        {"id": 2, "name": "_id_", "key": {"_id": 1}, "options": {}, "multikey": False,
         "long_keys": False},
        {"id": 3, "name": "t_1", "key": {"t": 1},
         "options": {"expireAfterSeconds": 10, "hidden": True}, "multikey": False,
         "long_keys": False},
        {"id": 4, "name": "_ts_1", "key": {"_ts": 1}, "options": {"expireAfterSeconds": -1},
         "multikey": False, "long_keys": False},
        {"id": 5, "name": "u_1", "key": {"u": 1}, "options": {"expireAfterSeconds": Int64(7)},
         "multikey": False, "long_keys": False},
        {"id": 6, "name": "k_1", "key": {"k": 1}, "options": {"unique": True},
         "multikey": False, "long_keys": False},
    ],
}  # fmt: skip


def test_the_catalog_reads_what_it_always_stored_and_writes_it_back_unchanged() -> None:
    stored = bson.encode(OLD_ENTRY, codec_options=CODEC)
    coll = CollectionInfo.from_doc(bson.decode(stored, CODEC))
    assert [ix.expire_after for ix in coll.indexes] == [
        None,
        ExpireAfter(10),
        ExpireAfter(-1),
        ExpireAfter(7),
        None,
    ]
    assert coll.expire_after == ExpireAfter(3600)
    assert bson.encode(coll.to_doc(), codec_options=CODEC) == stored
    # listIndexes shows the option where it was, as it was stored.
    assert list(coll.indexes[1].spec()) == ["v", "key", "name", "expireAfterSeconds", "hidden"]
    rules = ttl.rules_for(coll)
    assert [(ix.name, e) for ix, e in rules.native] == [("t_1", 10), ("u_1", 7)]
    assert rules.cosmos == -1
    assert [r.seconds for r in rules.derived] == [3600]


def test_expire_after_in_ms() -> None:
    assert ExpireAfter(90).ms == 90_000
    assert ExpireAfter(-1).ms == -1000
