"""Type, conversion, date and object expressions, table-driven: $type and $convert with its
shorthands (and onError/onNull), date parts in UTC, fixed offsets and named zones, $dateToString
and friends, $dateAdd/$dateDiff/$dateTrunc, $mergeObjects, $getField and $setField."""

from __future__ import annotations

import math
from typing import Any

from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.query.paths import MISSING
from tests.helpers import cases
from tests.query.expr_support import Doc, errors_test, run, typed

OID = ObjectId("5ab9c3da31c2ab715d421285")  # generated 2018-03-27T04:08:58Z
D = DatetimeMS(1_700_000_000_123)  # Tuesday 2023-11-14T22:13:20.123Z
NEW_YEAR = DatetimeMS(1_704_067_200_000)  # Monday 2024-01-01T00:00:00Z
DOC: Doc = {"d": D, "ny": NEW_YEAR, "o": OID, "ts": Timestamp(1_700_000_000, 7), "n": None}


def date(ms: int) -> DatetimeMS:
    return DatetimeMS(ms)


CASES: list[tuple[str, Any, Any]] = [
    # -- $type / $isNumber -------------------------------------------------------------------------
    ("type double", {"$type": 1.5}, "double"),
    ("type int", {"$type": 1}, "int"),
    ("type long", {"$type": Int64(1)}, "long"),
    ("type decimal", {"$type": Decimal128("1")}, "decimal"),
    ("type string", {"$type": "x"}, "string"),
    ("type object", {"$type": {"$literal": {}}}, "object"),
    ("type array", {"$type": [[1]]}, "array"),
    ("type binData", {"$type": Binary(b"x", 0)}, "binData"),
    ("type objectId", {"$type": "$o"}, "objectId"),
    ("type bool", {"$type": True}, "bool"),
    ("type date", {"$type": "$d"}, "date"),
    ("type null", {"$type": "$n"}, "null"),
    ("type missing", {"$type": "$zz"}, "missing"),
    ("type regex", {"$type": Regex("a")}, "regex"),
    ("type timestamp", {"$type": "$ts"}, "timestamp"),
    ("type javascript", {"$type": Code("f")}, "javascript"),
    ("type minKey", {"$type": MinKey()}, "minKey"),
    ("type maxKey", {"$type": MaxKey()}, "maxKey"),
    ("isNumber", {"$isNumber": Decimal128("1")}, True),
    ("isNumber string", {"$isNumber": "1"}, False),
    ("isNumber missing", {"$isNumber": "$zz"}, False),
    # -- to bool -----------------------------------------------------------------------------------
    ("toBool zero", {"$toBool": 0}, False),
    ("toBool double", {"$toBool": 0.5}, True),
    ("toBool empty string", {"$toBool": ""}, True),
    ("toBool date", {"$toBool": "$d"}, True),
    ("toBool array", {"$toBool": [[]]}, True),
    ("toBool null", {"$toBool": None}, None),
    ("toBool missing", {"$toBool": "$zz"}, None),
    # -- to numbers --------------------------------------------------------------------------------
    ("toInt double truncates", {"$toInt": -2.9}, -2),
    ("toInt string", {"$toInt": "-42"}, -42),
    ("toInt long", {"$toInt": Int64(5)}, 5),
    ("toInt bool", {"$toInt": True}, 1),
    ("toInt decimal truncates", {"$toInt": Decimal128("9.99")}, 9),
    ("toLong int", {"$toLong": 5}, Int64(5)),
    ("toLong date", {"$toLong": "$d"}, Int64(1_700_000_000_123)),
    ("toLong string", {"$toLong": "9000000000"}, Int64(9_000_000_000)),
    ("toDouble string", {"$toDouble": "1.5e3"}, 1500.0),
    ("toDouble int", {"$toDouble": 5}, 5.0),
    ("toDouble date", {"$toDouble": DatetimeMS(5)}, 5.0),
    ("toDouble decimal", {"$toDouble": Decimal128("2.5")}, 2.5),
    ("toDouble bool", {"$toDouble": False}, 0.0),
    ("toDecimal double keeps 15 digits", {"$toDecimal": 2.5}, Decimal128("2.50000000000000")),
    ("toDecimal int", {"$toDecimal": 7}, Decimal128("7")),
    ("toDecimal string", {"$toDecimal": "1.10"}, Decimal128("1.10")),
    ("toDecimal bool", {"$toDecimal": True}, Decimal128("1")),
    # -- to string ---------------------------------------------------------------------------------
    ("toString double", {"$toString": 2.5}, "2.5"),
    ("toString integral double", {"$toString": 3.0}, "3"),
    ("toString large double", {"$toString": 1e20}, "1e+20"),
    ("toString negative zero", {"$toString": -0.0}, "-0"),
    ("toString infinity", {"$toString": float("-inf")}, "-Infinity"),
    ("toString int", {"$toString": 2}, "2"),
    ("toString long", {"$toString": Int64(1000)}, "1000"),
    ("toString decimal", {"$toString": Decimal128("1.50")}, "1.50"),
    ("toString bool", {"$toString": False}, "false"),
    ("toString objectId", {"$toString": "$o"}, "5ab9c3da31c2ab715d421285"),
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
    # -- $convert ----------------------------------------------------------------------------------
    ("convert by name", {"$convert": {"input": "5", "to": "int"}}, 5),
    ("convert by code", {"$convert": {"input": 5, "to": 2}}, "5"),
    ("convert onError", {"$convert": {"input": "x", "to": "int", "onError": "bad"}}, "bad"),
    ("convert onNull", {"$convert": {"input": "$zz", "to": "int", "onNull": 0}}, 0),
    ("convert null to", {"$convert": {"input": 1, "to": None}}, None),
    (
        "convert unsupported with onError",
        {"$convert": {"input": [[1]], "to": "int", "onError": -1}},
        -1,
    ),
    ("convert overflow with onError", {"$convert": {"input": 1e20, "to": "int", "onError": 0}}, 0),
    # -- date parts --------------------------------------------------------------------------------
    ("year", {"$year": "$d"}, 2023),
    ("month", {"$month": "$d"}, 11),
    ("dayOfMonth", {"$dayOfMonth": "$d"}, 14),
    ("hour", {"$hour": "$d"}, 22),
    ("minute", {"$minute": "$d"}, 13),
    ("second", {"$second": "$d"}, 20),
    ("millisecond", {"$millisecond": "$d"}, 123),
    ("dayOfWeek tuesday", {"$dayOfWeek": "$d"}, 3),
    ("dayOfYear", {"$dayOfYear": "$d"}, 318),
    ("week", {"$week": "$d"}, 46),
    ("week before the first sunday", {"$week": "$ny"}, 0),
    ("isoWeek", {"$isoWeek": "$ny"}, 1),
    ("isoWeekYear across the year", {"$isoWeekYear": DatetimeMS(1_703_980_800_000)}, 2023),
    ("isoDayOfWeek monday", {"$isoDayOfWeek": "$ny"}, 1),
    ("date part of an array form", {"$year": ["$d"]}, 2023),
    ("date part in an offset", {"$hour": {"date": "$d", "timezone": "+05:30"}}, 3),
    ("date part in an offset without colon", {"$minute": {"date": "$d", "timezone": "-0130"}}, 43),
    ("date part in a named zone", {"$hour": {"date": "$d", "timezone": "America/New_York"}}, 17),
    (
        "date part in summer time",
        {"$hour": {"date": DatetimeMS(1_689_343_200_000), "timezone": "Europe/Paris"}},
        16,
    ),
    ("date part of an objectId", {"$year": "$o"}, 2018),
    ("date part of a timestamp", {"$second": "$ts"}, 20),
    ("date part of null", {"$year": "$n"}, None),
    ("date part null timezone", {"$year": {"date": "$d", "timezone": None}}, None),
    ("date part from an expression", {"$year": {"$add": ["$d", 0]}}, 2023),
    # -- $dateToString -----------------------------------------------------------------------------
    ("dateToString default", {"$dateToString": {"date": "$d"}}, "2023-11-14T22:13:20.123Z"),
    (
        "dateToString format",
        {"$dateToString": {"date": "$d", "format": "%Y/%m/%d %H:%M:%S.%L %j %w %u %U %V %G %%"}},
        "2023/11/14 22:13:20.123 318 3 2 46 46 2023 %",
    ),
    (
        "dateToString in a zone",
        {"$dateToString": {"date": "$d", "format": "%H:%M %z %Z", "timezone": "+05:30"}},
        "03:43 +0530 +330",
    ),
    (
        "dateToString month names",
        {"$dateToString": {"date": "$d", "format": "%b %B"}},
        "Nov November",
    ),
    ("dateToString onNull", {"$dateToString": {"date": "$zz", "onNull": "none"}}, "none"),
    ("dateToString null", {"$dateToString": {"date": None}}, None),
    ("dateToString null format", {"$dateToString": {"date": "$d", "format": None}}, None),
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
    ("dateFromString onError", {"$dateFromString": {"dateString": "nope", "onError": 0}}, 0),
    ("dateFromString onNull", {"$dateFromString": {"dateString": None, "onNull": 1}}, 1),
    (
        "dateToParts",
        {"$dateToParts": {"date": "$d"}},
        {
            "year": 2023,
            "month": 11,
            "day": 14,
            "hour": 22,
            "minute": 13,
            "second": 20,
            "millisecond": 123,
        },
    ),
    (
        "dateToParts iso",
        {"$dateToParts": {"date": "$ny", "iso8601": True}},
        {
            "isoWeekYear": 2024,
            "isoWeek": 1,
            "isoDayOfWeek": 1,
            "hour": 0,
            "minute": 0,
            "second": 0,
            "millisecond": 0,
        },
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
    ("dateFromParts null part", {"$dateFromParts": {"year": 2024, "month": None}}, None),
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
        "dateAdd null amount",
        {"$dateAdd": {"startDate": "$ny", "unit": "day", "amount": None}},
        None,
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
    ("dateDiff null", {"$dateDiff": {"startDate": None, "endDate": "$ny", "unit": "day"}}, None),
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
    # -- objects -----------------------------------------------------------------------------------
    (
        "mergeObjects",
        {"$mergeObjects": [{"a": 1, "b": 1}, {"b": 2}, None, "$zz"]},
        {"a": 1, "b": 2},
    ),
    ("mergeObjects of an array", {"$mergeObjects": [[{"a": 1}, {"c": 3}]]}, {"a": 1, "c": 3}),
    ("mergeObjects nothing", {"$mergeObjects": [None]}, {}),
    ("getField shorthand", {"$getField": "d"}, D),
    (
        "getField dollar name",
        {"$getField": {"field": {"$literal": "$x"}, "input": {"$literal": {"$x": 1}}}},
        1,
    ),
    ("getField missing", {"$getField": {"field": "q", "input": {"a": 1}}}, MISSING),
    ("getField null input", {"$getField": {"field": "q", "input": None}}, None),
    ("getField non-object input", {"$getField": {"field": "q", "input": 5}}, MISSING),
    ("setField", {"$setField": {"field": "b", "input": {"a": 1}, "value": 2}}, {"a": 1, "b": 2}),
    (
        "setField dotted name",
        {"$setField": {"field": "a.b", "input": {"a": 1}, "value": 2}},
        {"a": 1, "a.b": 2},
    ),
    (
        "setField remove",
        {"$setField": {"field": "a", "input": {"a": 1, "b": 2}, "value": "$$REMOVE"}},
        {"b": 2},
    ),
    ("unsetField", {"$unsetField": {"field": "a", "input": {"a": 1, "b": 2}}}, {"b": 2}),
    ("setField null input", {"$setField": {"field": "a", "input": None, "value": 1}}, None),
    ("bsonSize", {"$bsonSize": {"$literal": {"a": 1}}}, 12),
    ("binarySize", {"$binarySize": "héllo"}, 6),
]


@cases(("spec", "expected"), CASES)
def test_expression(spec: Any, expected: Any) -> None:
    assert typed(run(spec, DOC)) == typed(expected)


def test_to_double_nan() -> None:
    assert math.isnan(run({"$toDouble": "NaN"}))


ERRORS: list[tuple[str, Any, str, str]] = [
    (
        "toInt fraction string",
        {"$toInt": "1.5"},
        "ConversionFailure",
        "Failed to parse number '1.5' in $convert with no onError value: Bad digit \".\" while "
        "parsing 1.5",
    ),
    (
        "toInt hexadecimal",
        {"$toInt": "0x1A"},
        "ConversionFailure",
        "Illegal hexadecimal input in $convert with no onError value: 0x1A",
    ),
    (
        "toDouble junk",
        {"$toDouble": "1.5x"},
        "ConversionFailure",
        "Failed to parse number '1.5x' in $convert with no onError value: Did not consume whole "
        "string.",
    ),
    (
        "toInt overflow",
        {"$toInt": 1e10},
        "ConversionFailure",
        "Conversion would overflow target type in $convert with no onError value: 1e+10",
    ),
    (
        "toInt NaN",
        {"$toInt": float("nan")},
        "ConversionFailure",
        "Attempt to convert NaN value to integer type in $convert with no onError value",
    ),
    (
        "toInt from a date",
        {"$toInt": "$d"},
        "ConversionFailure",
        "Unsupported conversion from date to int in $convert with no onError value",
    ),
    (
        "toString an object",
        {"$toString": {"$literal": {"a": 1}}},
        "ConversionFailure",
        "Unsupported conversion from object to string in $convert with no onError value",
    ),
    (
        "toObjectId short",
        {"$toObjectId": "abc"},
        "ConversionFailure",
        "Failed to parse objectId 'abc' in $convert with no onError value: Invalid string length "
        "for parsing to OID, expected 24 but found 3",
    ),
    (
        "toDate an int",
        {"$toDate": 5},
        "ConversionFailure",
        "Unsupported conversion from int to date in $convert with no onError value",
    ),
    (
        "toInt two arguments",
        {"$toInt": [1, 2]},
        "Location50723",
        "$toInt requires a single argument, got 2",
    ),
    (
        "convert unknown type",
        {"$convert": {"input": 1, "to": "foo"}},
        "BadValue",
        "Unknown type name: foo",
    ),
    (
        "convert unknown type even with onError",
        {"$convert": {"input": 1, "to": "foo", "onError": 0}},
        "BadValue",
        "Unknown type name: foo",
    ),
    (
        "convert to an unknown code",
        {"$convert": {"input": 1, "to": 99}},
        "FailedToParse",
        "In $convert, numeric value for 'to' does not correspond to a BSON type: 99",
    ),
    (
        "convert to a bool",
        {"$convert": {"input": 1, "to": True}},
        "FailedToParse",
        "$convert's 'to' argument must be a string or number, but is bool",
    ),
    (
        "convert without to",
        {"$convert": {"input": 1}},
        "FailedToParse",
        "Missing 'to' parameter to $convert",
    ),
    (
        "convert unknown argument",
        {"$convert": {"input": 1, "to": "int", "x": 1}},
        "FailedToParse",
        "$convert found an unknown argument: x",
    ),
    (
        "year of a string",
        {"$year": "2020"},
        "Location16006",
        "can't convert from BSON type string to Date",
    ),
    (
        "year unknown option",
        {"$year": {"date": "$d", "tz": "UTC"}},
        "Location40535",
        'unrecognized option to $year: "tz"',
    ),
    (
        "year two array elements",
        {"$year": ["$d", "$d"]},
        "Location40536",
        "$year accepts exactly one argument if given an array, but was given 2",
    ),
    (
        "year unknown zone",
        {"$year": {"date": "$d", "timezone": "Mars/Base"}},
        "Location40485",
        'unrecognized time zone identifier: "Mars/Base"',
    ),
    (
        "year numeric zone",
        {"$year": {"date": "$d", "timezone": 5}},
        "Location40533",
        "$year requires a string for the timezone argument, but was given a int (5)",
    ),
    (
        "dateToString bad specifier",
        {"$dateToString": {"date": "$d", "format": "%Q"}},
        "Location18536",
        "Invalid format character '%Q' in format string",
    ),
    (
        "dateToString trailing percent",
        {"$dateToString": {"date": "$d", "format": "%Y%"}},
        "Location18535",
        "Unmatched '%' at end of format string",
    ),
    (
        "dateToString format a number",
        {"$dateToString": {"date": "$d", "format": 1}},
        "Location18533",
        "$dateToString requires that 'format' be a string, found: int with value 1",
    ),
    (
        "dateToString without date",
        {"$dateToString": {"format": "%Y"}},
        "Location18628",
        "Missing 'date' parameter to $dateToString",
    ),
    (
        "dateToString unknown argument",
        {"$dateToString": {"date": "$d", "x": 1}},
        "Location18534",
        "Unrecognized argument to $dateToString: x",
    ),
    (
        "dateFromString unparsable",
        {"$dateFromString": {"dateString": "nope"}},
        "ConversionFailure",
        "Error parsing date string 'nope'",
    ),
    (
        "dateFromParts mixing",
        {"$dateFromParts": {"year": 2020, "isoWeek": 1}},
        "Location40489",
        "$dateFromParts does not allow mixing natural dates with ISO dates",
    ),
    (
        "dateFromParts year range",
        {"$dateFromParts": {"year": 0}},
        "Location40523",
        "'year' must evaluate to an integer in the range 1 to 9999, found 0",
    ),
    (
        "dateFromParts month range",
        {"$dateFromParts": {"year": 2020, "month": 40000}},
        "Location31034",
        "'month' must evaluate to a value in the range [-32768, 32767]; value 40000 is not in range",
    ),
    (
        "dateAdd bad unit",
        {"$dateAdd": {"startDate": "$d", "unit": "fortnight", "amount": 1}},
        "FailedToParse",
        "unknown time unit value: fortnight",
    ),
    (
        "dateAdd fractional amount",
        {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1.5}},
        "Location5166405",
        "$dateAdd expects integer amount of time units",
    ),
    (
        "dateAdd missing unit",
        {"$dateAdd": {"startDate": "$d", "amount": 1}},
        "Location5166402",
        "$dateAdd requires startDate, unit, and amount to be present",
    ),
    (
        "dateDiff bad unit",
        {"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "days"}},
        "Location5439014",
        "$dateDiff parameter 'unit' value cannot be recognized as a time unit: days",
    ),
    (
        "dateDiff start a string",
        {"$dateDiff": {"startDate": "x", "endDate": "$d", "unit": "day"}},
        "Location5166307",
        "$dateDiff requires 'startDate' to be a date, but got string",
    ),
    (
        "dateTrunc zero bin",
        {"$dateTrunc": {"date": "$d", "unit": "day", "binSize": 0}},
        "Location5439018",
        "$dateTrunc requires 'binSize' to be greater than 0, but got value 0",
    ),
    (
        "tsSecond a date",
        {"$tsSecond": "$d"},
        "Location5687301",
        " Argument to $tsSecond must be a timestamp, but is date",
    ),
    (
        "mergeObjects a number",
        {"$mergeObjects": [{"a": 1}, 5]},
        "Location40400",
        "$mergeObjects requires object inputs, but input 5 is of type int",
    ),
    (
        "getField field path",
        {"$getField": "$a"},
        "Location5654600",
        "'$a' is a field path reference which is not allowed in this context. Did you mean "
        "{$literal: '$a'}?",
    ),
    (
        "getField computed name",
        {"$getField": {"field": {"$concat": ["a"]}}},
        "Location5654601",
        "$getField requires 'field' to evaluate to a constant, but got a non-constant argument",
    ),
    (
        "getField numeric name",
        {"$getField": {"field": 5}},
        "Location5654602",
        "$getField requires 'field' to evaluate to type String, but got int",
    ),
    (
        "setField input a number",
        {"$setField": {"field": "a", "input": 1, "value": 1}},
        "Location4161105",
        "$setField requires 'input' to evaluate to type Object",
    ),
    (
        "unsetField with a value",
        {"$unsetField": {"field": "a", "input": {}, "value": 1}},
        "Location4161101",
        "$unsetField found an unknown argument: value",
    ),
]


test_errors = errors_test(ERRORS, DOC)
