"""Type, conversion, date and object expressions, table-driven: $type and $convert with its
shorthands (and onError/onNull), date parts in UTC, fixed offsets and named zones, $dateToString
and friends, $dateAdd/$dateDiff/$dateTrunc, $mergeObjects, $getField and $setField."""

from __future__ import annotations

import math
from typing import Any

from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.query.paths import MISSING
from tests.case_tables import load_cases
from tests.helpers import cases
from tests.query.expr_support import Doc, errors_test, run, typed

OID = ObjectId("5ab9c3da31c2ab715d421285")  # generated 2018-03-27T04:08:58Z
D = DatetimeMS(1_700_000_000_123)  # Tuesday 2023-11-14T22:13:20.123Z
NEW_YEAR = DatetimeMS(1_704_067_200_000)  # Monday 2024-01-01T00:00:00Z
DOC: Doc = {"d": D, "ny": NEW_YEAR, "o": OID, "ts": Timestamp(1_700_000_000, 7), "n": None}


def date(ms: int) -> DatetimeMS:
    return DatetimeMS(ms)


CASES: list[tuple[str, Any, Any]] = load_cases("types_dates") + [
    # Rows holding BSON values (not plain YAML), after those of cases/types_dates.yaml:
    ("type long", {"$type": Int64(1)}, "long"),
    ("type decimal", {"$type": Decimal128("1")}, "decimal"),
    ("type binData", {"$type": Binary(b"x", 0)}, "binData"),
    ("type regex", {"$type": Regex("a")}, "regex"),
    ("type javascript", {"$type": Code("f")}, "javascript"),
    ("type minKey", {"$type": MinKey()}, "minKey"),
    ("type maxKey", {"$type": MaxKey()}, "maxKey"),
    ("isNumber", {"$isNumber": Decimal128("1")}, True),
    ("toInt long", {"$toInt": Int64(5)}, 5),
    ("toInt decimal truncates", {"$toInt": Decimal128("9.99")}, 9),
    ("toLong int", {"$toLong": 5}, Int64(5)),
    ("toLong date", {"$toLong": "$d"}, Int64(1_700_000_000_123)),
    ("toLong string", {"$toLong": "9000000000"}, Int64(9_000_000_000)),
    ("toDouble date", {"$toDouble": DatetimeMS(5)}, 5.0),
    ("toDouble decimal", {"$toDouble": Decimal128("2.5")}, 2.5),
    ("toDecimal double keeps 15 digits", {"$toDecimal": 2.5}, Decimal128("2.50000000000000")),
    ("toDecimal int", {"$toDecimal": 7}, Decimal128("7")),
    ("toDecimal string", {"$toDecimal": "1.10"}, Decimal128("1.10")),
    ("toDecimal bool", {"$toDecimal": True}, Decimal128("1")),
    ("toString infinity", {"$toString": float("-inf")}, "-Infinity"),
    ("toString long", {"$toString": Int64(1000)}, "1000"),
    ("toString decimal", {"$toString": Decimal128("1.50")}, "1.50"),
    ("toString date", {"$toString": DatetimeMS(1_522_169_931_538)}, "2018-03-27T16:58:51.538Z"),
    # -- to objectId and date ----------------------------------------------------------------------
    ("toObjectId", {"$toObjectId": "5ab9c3da31c2ab715d421285"}, OID),
    ("toDate string", {"$toDate": "2018-03-27T16:58:51.538Z"}, date(1_522_169_931_538)),
    (
        "toDate string with offset",
        {"$toDate": "2018-03-27T18:58:51+02:00"},
        date(1_522_169_931_000),
    ),
    ("toDate date only", {"$toDate": "2018-03-27"}, date(1_522_108_800_000)),
    ("toDate long", {"$toDate": Int64(1000)}, date(1000)),
    ("toDate double", {"$toDate": 1000.9}, date(1000)),
    ("toDate objectId", {"$toDate": "$o"}, date(1_522_123_738_000)),
    ("toDate timestamp", {"$toDate": "$ts"}, date(1_700_000_000_000)),
    ("isoWeekYear across the year", {"$isoWeekYear": DatetimeMS(1_703_980_800_000)}, 2023),
    (
        "date part in summer time",
        {"$hour": {"date": DatetimeMS(1_689_343_200_000), "timezone": "Europe/Paris"}},
        16,
    ),
    # -- $dateFromString / $dateToParts / $dateFromParts ---------------------------------------------
    (
        "dateFromString",
        {"$dateFromString": {"dateString": "2017-02-08T12:10:40.787"}},
        date(1_486_555_840_787),
    ),
    (
        "dateFromString in a zone",
        {"$dateFromString": {"dateString": "2017-02-08T12:10:40", "timezone": "America/New_York"}},
        date(1_486_573_840_000),
    ),
    (
        "dateFromString format",
        {"$dateFromString": {"dateString": "15-06-2018", "format": "%d-%m-%Y"}},
        date(1_529_020_800_000),
    ),
    ("dateFromParts", {"$dateFromParts": {"year": 2024, "month": 1, "day": 1}}, NEW_YEAR),
    ("dateFromParts overflowing month", {"$dateFromParts": {"year": 2023, "month": 13}}, NEW_YEAR),
    (
        "dateFromParts day zero",
        {"$dateFromParts": {"year": 2024, "month": 1, "day": 0}},
        date(1_703_980_800_000),
    ),
    (
        "dateFromParts in a zone",
        {"$dateFromParts": {"year": 2024, "hour": 5, "timezone": "+05:00"}},
        NEW_YEAR,
    ),
    (
        "dateFromParts iso",
        {"$dateFromParts": {"isoWeekYear": 2024, "isoWeek": 1, "isoDayOfWeek": 1}},
        NEW_YEAR,
    ),
    # -- $dateAdd / $dateSubtract / $dateDiff / $dateTrunc -------------------------------------------
    (
        "dateAdd hours",
        {"$dateAdd": {"startDate": "$ny", "unit": "hour", "amount": 2}},
        date(1_704_074_400_000),
    ),
    (
        "dateAdd month clamps the day",
        {"$dateAdd": {"startDate": DatetimeMS(1_706_659_200_000), "unit": "month", "amount": 1}},
        date(1_709_164_800_000),
    ),
    (
        "dateAdd quarter",
        {"$dateAdd": {"startDate": "$ny", "unit": "quarter", "amount": 1}},
        date(1_711_929_600_000),
    ),
    (
        "dateAdd days keep the wall clock",
        {
            "$dateAdd": {
                "startDate": DatetimeMS(1_710_000_000_000),
                "unit": "day",
                "amount": 1,
                "timezone": "America/New_York",
            }
        },
        date(1_710_082_800_000),
    ),
    (
        "dateSubtract",
        {"$dateSubtract": {"startDate": "$ny", "unit": "week", "amount": 1}},
        date(1_703_462_400_000),
    ),
    (
        "dateDiff days",
        {"$dateDiff": {"startDate": "$d", "endDate": "$ny", "unit": "day"}},
        Int64(48),
    ),
    (
        "dateDiff months",
        {"$dateDiff": {"startDate": "$d", "endDate": "$ny", "unit": "month"}},
        Int64(2),
    ),
    (
        "dateDiff years",
        {"$dateDiff": {"startDate": "$d", "endDate": "$ny", "unit": "year"}},
        Int64(1),
    ),
    (
        "dateDiff negative",
        {"$dateDiff": {"startDate": "$ny", "endDate": "$d", "unit": "quarter"}},
        Int64(-1),
    ),
    (
        "dateDiff weeks from monday",
        {"$dateDiff": {"startDate": "$d", "endDate": "$ny", "unit": "week", "startOfWeek": "mon"}},
        Int64(7),
    ),
    (
        "dateDiff hours count boundaries",
        {
            "$dateDiff": {
                "startDate": DatetimeMS(3_599_999),
                "endDate": DatetimeMS(3_600_000),
                "unit": "hour",
            }
        },
        Int64(1),
    ),
    ("dateTrunc month", {"$dateTrunc": {"date": "$d", "unit": "month"}}, date(1_698_796_800_000)),
    ("dateTrunc hour", {"$dateTrunc": {"date": "$d", "unit": "hour"}}, date(1_699_999_200_000)),
    (
        "dateTrunc 15 minutes",
        {"$dateTrunc": {"date": "$d", "unit": "minute", "binSize": 15}},
        date(1_699_999_200_000),
    ),
    ("dateTrunc week", {"$dateTrunc": {"date": "$d", "unit": "week"}}, date(1_699_747_200_000)),
    (
        "dateTrunc year in a zone",
        {"$dateTrunc": {"date": "$ny", "unit": "year", "timezone": "+01:00"}},
        date(1_704_063_600_000),
    ),
    ("tsSecond", {"$tsSecond": "$ts"}, Int64(1_700_000_000)),
    ("tsIncrement", {"$tsIncrement": "$ts"}, Int64(7)),
    ("getField shorthand", {"$getField": "d"}, D),
    ("getField missing", {"$getField": {"field": "q", "input": {"a": 1}}}, MISSING),
    ("getField non-object input", {"$getField": {"field": "q", "input": 5}}, MISSING),
]


@cases(("spec", "expected"), CASES)
def test_expression(spec: Any, expected: Any) -> None:
    assert typed(run(spec, DOC)) == typed(expected)


def test_to_double_nan() -> None:
    assert math.isnan(run({"$toDouble": "NaN"}))


ERRORS: list[tuple[str, Any, str, str]] = load_cases("types_dates_errors") + [
    # Rows holding BSON values (not plain YAML), after those of cases/types_dates_errors.yaml:
    (
        "toInt NaN",
        {"$toInt": float("nan")},
        "ConversionFailure",
        "Attempt to convert NaN value to integer type in $convert with no onError value",
    ),
]


test_errors = errors_test(ERRORS, DOC)
