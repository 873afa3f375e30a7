"""String, regex, array and set expressions, table-driven: results (with their BSON types) and the
codes and messages MongoDB gives for bad input."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64, Regex
from bson.datetime_ms import DatetimeMS

from storage.errors import QueryError
from storage.query.paths import MISSING
from tests.query.expr_support import Doc, run, typed

DOC: Doc = {
    "s": "Hello World",
    "u": "héllo",
    "arr": [1, 2, 3, 4, 5],
    "docs": [{"k": "a", "v": 1}, {"k": "b", "v": 2}],
    "n": None,
}

CASES: list[tuple[str, Any, Any]] = [
    # -- $concat and case --------------------------------------------------------------------------
    ("concat", {"$concat": ["a", "-", "$s"]}, "a-Hello World"),
    ("concat empty", {"$concat": []}, ""),
    ("concat null", {"$concat": ["a", "$n"]}, None),
    ("concat missing", {"$concat": ["a", "$zz"]}, None),
    ("toLower", {"$toLower": "$s"}, "hello world"),
    ("toUpper ASCII only", {"$toUpper": "$u"}, "HéLLO"),
    ("toLower of a number", {"$toLower": 12}, "12"),
    ("toUpper of a double", {"$toUpper": 1.5}, "1.5"),
    ("toLower of null", {"$toLower": None}, ""),
    ("toLower of missing", {"$toLower": "$zz"}, ""),
    ("toUpper of a date", {"$toUpper": DatetimeMS(0)}, "1970-01-01T00:00:00.000Z"),
    ("strcasecmp equal", {"$strcasecmp": ["abc", "ABC"]}, 0),
    ("strcasecmp less", {"$strcasecmp": ["abc", "abd"]}, -1),
    ("strcasecmp null is empty", {"$strcasecmp": [None, ""]}, 0),
    # -- substrings --------------------------------------------------------------------------------
    ("substrBytes", {"$substrBytes": ["$s", 6, 5]}, "World"),
    ("substr alias", {"$substr": ["$s", 0, 5]}, "Hello"),
    ("substr negative length is the rest", {"$substr": ["$s", 6, -1]}, "World"),
    ("substr past the end", {"$substr": ["abc", 5, 2]}, ""),
    ("substr multibyte on boundaries", {"$substrBytes": ["$u", 1, 2]}, "é"),
    ("substr of a number", {"$substr": [12345, 1, 2]}, "23"),
    ("substr of null", {"$substr": [None, 0, 1]}, ""),
    ("substrCP", {"$substrCP": ["$u", 1, 3]}, "éll"),
    ("substrCP past the end", {"$substrCP": ["abc", 2, 10]}, "c"),
    ("substrCP start past the end", {"$substrCP": ["abc", 10, 1]}, ""),
    ("substrCP double indexes", {"$substrCP": ["abcdef", 1.0, Int64(2)]}, "bc"),
    ("strLenBytes", {"$strLenBytes": "$u"}, 6),
    ("strLenCP", {"$strLenCP": "$u"}, 5),
    ("strLenCP empty", {"$strLenCP": ""}, 0),
    # -- $split / $trim / $indexOf -------------------------------------------------------------------
    ("split", {"$split": ["a,b,,c", ","]}, ["a", "b", "", "c"]),
    ("split no match", {"$split": ["abc", "x"]}, ["abc"]),
    ("split multichar", {"$split": ["a--b--", "--"]}, ["a", "b", ""]),
    ("split null", {"$split": [None, ","]}, None),
    ("trim whitespace", {"$trim": {"input": " \t hi \n"}}, "hi"),
    ("trim unicode spaces", {"$trim": {"input": "\u00a0hi\u2003"}}, "hi"),
    ("trim chars", {"$trim": {"input": "xxhixy", "chars": "xy"}}, "hi"),
    ("ltrim", {"$ltrim": {"input": "  hi  "}}, "hi  "),
    ("rtrim", {"$rtrim": {"input": "  hi  "}}, "  hi"),
    ("trim null", {"$trim": {"input": "$zz"}}, None),
    ("trim null chars", {"$trim": {"input": "a", "chars": None}}, None),
    ("indexOfBytes", {"$indexOfBytes": ["héllo", "l"]}, 3),
    ("indexOfCP", {"$indexOfCP": ["héllo", "l"]}, 2),
    ("indexOfCP not found", {"$indexOfCP": ["abc", "d"]}, -1),
    ("indexOfCP from a start", {"$indexOfCP": ["abcabc", "b", 2]}, 4),
    ("indexOfCP end bounds the start of a match", {"$indexOfCP": ["abc", "bc", 0, 2]}, 1),
    ("indexOfBytes end bounds the whole match", {"$indexOfBytes": ["abc", "bc", 0, 2]}, -1),
    ("indexOfCP start past end", {"$indexOfCP": ["abc", "a", 2, 1]}, -1),
    ("indexOfCP empty in empty", {"$indexOfCP": ["", ""]}, 0),
    ("indexOfCP null", {"$indexOfCP": [None, "a"]}, None),
    ("replaceOne", {"$replaceOne": {"input": "aXbXc", "find": "X", "replacement": "-"}}, "a-bXc"),
    ("replaceAll", {"$replaceAll": {"input": "aXbXc", "find": "X", "replacement": "-"}}, "a-b-c"),
    (
        "replaceAll empty find",
        {"$replaceAll": {"input": "ab", "find": "", "replacement": "."}},
        ".a.b.",
    ),
    ("replaceOne null", {"$replaceOne": {"input": None, "find": "X", "replacement": "-"}}, None),
    # -- regular expressions -----------------------------------------------------------------------
    ("regexMatch", {"$regexMatch": {"input": "$s", "regex": "wor", "options": "i"}}, True),
    ("regexMatch no match", {"$regexMatch": {"input": "$s", "regex": "^World"}}, False),
    ("regexMatch regex value", {"$regexMatch": {"input": "ABC", "regex": Regex("b", "i")}}, True),
    ("regexMatch null input", {"$regexMatch": {"input": None, "regex": "a"}}, False),
    (
        "regexFind",
        {"$regexFind": {"input": "héllo 42", "regex": "(\\d)(\\d)(x)?"}},
        {"match": "42", "idx": 6, "captures": ["4", "2", None]},
    ),
    ("regexFind none", {"$regexFind": {"input": "abc", "regex": "\\d"}}, None),
    ("regexFind null regex", {"$regexFind": {"input": "abc", "regex": None}}, None),
    (
        "regexFindAll",
        {"$regexFindAll": {"input": "a1b22", "regex": "\\d+"}},
        [
            {"match": "1", "idx": 1, "captures": []},
            {"match": "22", "idx": 3, "captures": []},
        ],
    ),
    (
        "regexFindAll empty matches",
        {"$regexFindAll": {"input": "ab", "regex": "x*"}},
        [
            {"match": "", "idx": 0, "captures": []},
            {"match": "", "idx": 1, "captures": []},
        ],
    ),
    ("regexFindAll null input", {"$regexFindAll": {"input": "$zz", "regex": "a"}}, []),
    (
        "regexFind named group",
        {"$regexFind": {"input": "ab", "regex": "(?<x>b)"}},
        {"match": "b", "idx": 1, "captures": ["b"]},
    ),
    # -- element access ----------------------------------------------------------------------------
    ("size", {"$size": "$arr"}, 5),
    ("size literal", {"$size": [[1, 2]]}, 2),
    ("arrayElemAt", {"$arrayElemAt": ["$arr", 1]}, 2),
    ("arrayElemAt negative", {"$arrayElemAt": ["$arr", -1]}, 5),
    ("arrayElemAt out of range", {"$arrayElemAt": ["$arr", 9]}, MISSING),
    ("arrayElemAt far negative", {"$arrayElemAt": ["$arr", -9]}, MISSING),
    ("arrayElemAt double index", {"$arrayElemAt": ["$arr", 1.0]}, 2),
    ("arrayElemAt null", {"$arrayElemAt": ["$zz", 0]}, None),
    ("first", {"$first": "$arr"}, 1),
    ("last", {"$last": "$arr"}, 5),
    ("first of empty", {"$first": [[]]}, MISSING),
    ("first of missing", {"$first": "$zz"}, None),
    ("in", {"$in": [3, "$arr"]}, True),
    ("in across numeric types", {"$in": [Int64(3), [1.0, 3.0]]}, True),
    ("in not found", {"$in": ["3", "$arr"]}, False),
    ("in null in array with null", {"$in": [None, [None]]}, True),
    ("indexOfArray", {"$indexOfArray": ["$arr", 3]}, 2),
    ("indexOfArray not found", {"$indexOfArray": ["$arr", 9]}, -1),
    ("indexOfArray range", {"$indexOfArray": [[1, 2, 1, 2], 2, 2, 4]}, 3),
    ("indexOfArray null array", {"$indexOfArray": [None, 1]}, None),
    ("isArray", {"$isArray": ["$arr"]}, True),
    ("isArray scalar", {"$isArray": "$s"}, False),
    ("isArray missing", {"$isArray": "$zz"}, False),
    # -- building arrays ---------------------------------------------------------------------------
    ("concatArrays", {"$concatArrays": ["$arr", [6], []]}, [1, 2, 3, 4, 5, 6]),
    ("concatArrays null", {"$concatArrays": ["$arr", None]}, None),
    ("slice first", {"$slice": ["$arr", 2]}, [1, 2]),
    ("slice last", {"$slice": ["$arr", -2]}, [4, 5]),
    ("slice too many from the end", {"$slice": ["$arr", -9]}, [1, 2, 3, 4, 5]),
    ("slice position", {"$slice": ["$arr", 1, 2]}, [2, 3]),
    ("slice negative position", {"$slice": ["$arr", -2, 5]}, [4, 5]),
    ("slice position past the end", {"$slice": ["$arr", 9, 1]}, []),
    ("slice null", {"$slice": [None, 1]}, None),
    ("reverseArray", {"$reverseArray": "$arr"}, [5, 4, 3, 2, 1]),
    ("reverseArray null", {"$reverseArray": None}, None),
    ("range", {"$range": [0, 5]}, [0, 1, 2, 3, 4]),
    ("range step", {"$range": [0, 10, 4]}, [0, 4, 8]),
    ("range down", {"$range": [5, 0, -2]}, [5, 3, 1]),
    ("range empty", {"$range": [5, 0]}, []),
    ("range doubles", {"$range": [0.0, 3.0]}, [0, 1, 2]),
    ("filter", {"$filter": {"input": "$arr", "cond": {"$gt": ["$$this", 3]}}}, [4, 5]),
    (
        "filter with as and limit",
        {"$filter": {"input": "$arr", "as": "x", "cond": {"$gt": ["$$x", 1]}, "limit": 2}},
        [2, 3],
    ),
    ("filter null limit", {"$filter": {"input": [1], "cond": True, "limit": None}}, [1]),
    ("filter null input", {"$filter": {"input": "$zz", "cond": True}}, None),
    (
        "map",
        {"$map": {"input": "$arr", "as": "x", "in": {"$multiply": ["$$x", 2]}}},
        [2, 4, 6, 8, 10],
    ),
    ("map missing becomes null", {"$map": {"input": [1, 2], "in": "$$REMOVE"}}, [None, None]),
    ("map over documents", {"$map": {"input": "$docs", "in": "$$this.k"}}, ["a", "b"]),
    ("map null", {"$map": {"input": None, "in": 1}}, None),
    (
        "reduce",
        {"$reduce": {"input": "$arr", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}},
        15,
    ),
    (
        "reduce to an array",
        {
            "$reduce": {
                "input": [[1], [2, 3]],
                "initialValue": [],
                "in": {"$concatArrays": ["$$value", "$$this"]},
            }
        },
        [1, 2, 3],
    ),
    ("reduce empty input", {"$reduce": {"input": [], "initialValue": "x", "in": 1}}, "x"),
    ("arrayToObject pairs", {"$arrayToObject": [[["a", 1], ["b", 2]]]}, {"a": 1, "b": 2}),
    ("arrayToObject k/v", {"$arrayToObject": "$docs"}, {"a": 1, "b": 2}),
    (
        "arrayToObject repeated key",
        {"$arrayToObject": [[["a", 1], ["b", 2], ["a", 3]]]},
        {"a": 3, "b": 2},
    ),
    ("arrayToObject empty", {"$arrayToObject": [[]]}, {}),
    ("arrayToObject null", {"$arrayToObject": None}, None),
    (
        "objectToArray",
        {"$objectToArray": {"a": 1, "b": {"c": 2}}},
        [{"k": "a", "v": 1}, {"k": "b", "v": {"c": 2}}],
    ),
    ("objectToArray null", {"$objectToArray": "$zz"}, None),
    ("zip", {"$zip": {"inputs": [[1, 2, 3], ["a", "b"]]}}, [[1, "a"], [2, "b"]]),
    (
        "zip longest with defaults",
        {"$zip": {"inputs": [[1, 2], ["a"]], "useLongestLength": True, "defaults": [0, "z"]}},
        [[1, "a"], [2, "z"]],
    ),
    (
        "zip longest without defaults",
        {"$zip": {"inputs": [[1], []], "useLongestLength": True}},
        [[1, None]],
    ),
    ("zip null", {"$zip": {"inputs": [[1], None]}}, None),
    (
        "sortArray ascending",
        {"$sortArray": {"input": [3, "a", 1, None], "sortBy": 1}},
        [None, 1, 3, "a"],
    ),
    ("sortArray descending", {"$sortArray": {"input": [3, 1, 2], "sortBy": -1}}, [3, 2, 1]),
    (
        "sortArray by field",
        {
            "$sortArray": {
                "input": [{"x": 2, "i": 0}, {"x": 1, "i": 1}, {"x": 2, "i": 2}],
                "sortBy": {"x": -1},
            }
        },
        [{"x": 2, "i": 0}, {"x": 2, "i": 2}, {"x": 1, "i": 1}],
    ),
    ("sortArray null", {"$sortArray": {"input": None, "sortBy": 1}}, None),
    # -- sets --------------------------------------------------------------------------------------
    ("setUnion sorts and dedupes", {"$setUnion": [[3, 1, 3], [2, 1.0]]}, [1, 2, 3]),
    ("setUnion nothing", {"$setUnion": []}, []),
    ("setUnion null", {"$setUnion": [[1], None]}, None),
    ("setIntersection", {"$setIntersection": [[1, 2, 3, 3], [3, 2, 9]]}, [2, 3]),
    ("setIntersection disjoint", {"$setIntersection": [[1], [2]]}, []),
    ("setDifference keeps order", {"$setDifference": [[3, 1, 2, 1], [2]]}, [3, 1]),
    ("setDifference null", {"$setDifference": [None, [1]]}, None),
    ("setEquals", {"$setEquals": [[1, 2, 2], [2, 1], [1.0, 2]]}, True),
    ("setEquals differs", {"$setEquals": [[1], [1, 2]]}, False),
    ("setIsSubset", {"$setIsSubset": [[1, 1], [1, 2]]}, True),
    ("setIsSubset not", {"$setIsSubset": [[1, 3], [1, 2]]}, False),
    ("setIsSubset empty", {"$setIsSubset": [[], []]}, True),
    ("anyElementTrue", {"$anyElementTrue": [[0, None, 2]]}, True),
    ("anyElementTrue empty", {"$anyElementTrue": [[]]}, False),
    ("allElementsTrue", {"$allElementsTrue": [[1, "x", []]]}, True),
    ("allElementsTrue with zero", {"$allElementsTrue": [[1, Decimal128("0")]]}, False),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_expression(spec: Any, expected: Any) -> None:
    assert typed(run(spec, DOC)) == typed(expected)


ERRORS: list[tuple[str, Any, str, str]] = [
    (
        "concat a number",
        {"$concat": ["a", 1]},
        "Location16702",
        "$concat only supports strings, not int",
    ),
    (
        "toLower an object",
        {"$toLower": [{"a": 1}]},
        "Location16007",
        "can't convert from BSON type object to String",
    ),
    (
        "substr start not a number",
        {"$substr": ["abc", "x", 1]},
        "Location16034",
        "$substrBytes:  starting index must be a numeric type (is BSON type string)",
    ),
    (
        "substr negative start",
        {"$substrBytes": ["abc", -1, 1]},
        "Location50752",
        "$substrBytes:  starting index must be non-negative (got: -1)",
    ),
    (
        "substr inside a character",
        {"$substrBytes": ["héllo", 2, 1]},
        "Location28656",
        "$substrBytes:  Invalid range, starting index is a UTF-8 continuation byte.",
    ),
    (
        "substr ending inside a character",
        {"$substrBytes": ["héllo", 0, 2]},
        "Location28657",
        "$substrBytes:  Invalid range, ending index is in the middle of a UTF-8 character.",
    ),
    (
        "substrCP fractional start",
        {"$substrCP": ["abc", 0.5, 1]},
        "Location34451",
        "$substrCP: starting index cannot be represented as a 32-bit integral value: 0.5",
    ),
    (
        "substrCP negative length",
        {"$substrCP": ["abc", 0, -1]},
        "Location34454",
        "$substrCP: length must be a nonnegative integer.",
    ),
    (
        "substrCP negative start",
        {"$substrCP": ["abc", -1, 1]},
        "Location34455",
        "$substrCP: the starting index must be nonnegative integer.",
    ),
    (
        "substr arity",
        {"$substr": ["abc", 1]},
        "Location16020",
        "Expression $substrBytes takes exactly 3 arguments. 2 were passed in.",
    ),
    (
        "strLenCP of missing",
        {"$strLenCP": "$zz"},
        "Location34471",
        "$strLenCP requires a string argument, found: missing",
    ),
    (
        "strLenBytes of a number",
        {"$strLenBytes": 1},
        "Location34473",
        "$strLenBytes requires a string argument, found: int",
    ),
    (
        "split a number",
        {"$split": [1, ","]},
        "Location40085",
        "$split requires an expression that evaluates to a string as a first argument, found: int",
    ),
    (
        "split empty separator",
        {"$split": ["a", ""]},
        "Location40087",
        "$split requires a non-empty separator",
    ),
    (
        "trim not an object",
        {"$trim": "x"},
        "Location50696",
        "$trim only supports an object as an argument, found string",
    ),
    (
        "trim without input",
        {"$trim": {"chars": "x"}},
        "Location50695",
        "$trim requires an 'input' field",
    ),
    (
        "trim unknown field",
        {"$ltrim": {"input": "x", "y": 1}},
        "Location50694",
        "$ltrim found an unknown argument: y",
    ),
    (
        "trim a number",
        {"$trim": {"input": 5}},
        "Location50699",
        "$trim requires its input to be a string, got 5 (of type int) instead.",
    ),
    (
        "indexOfCP a number",
        {"$indexOfCP": [1, "a"]},
        "Location40093",
        "$indexOfCP requires a string as the first argument, found: int",
    ),
    (
        "indexOfCP null token",
        {"$indexOfCP": ["a", None]},
        "Location40094",
        "$indexOfCP requires a string as the second argument, found: null",
    ),
    (
        "indexOfCP negative start",
        {"$indexOfCP": ["a", "a", -1]},
        "Location40097",
        "$indexOfCP requires a nonnegative starting index, found: -1",
    ),
    (
        "replaceAll a number",
        {"$replaceAll": {"input": 1, "find": "a", "replacement": "b"}},
        "Location51746",
        "$replaceAll requires that 'input' be a string, found: 1",
    ),
    (
        "replaceOne without find",
        {"$replaceOne": {"input": "a", "replacement": "b"}},
        "Location51748",
        "$replaceOne requires 'find' to be specified",
    ),
    (
        "regexMatch not an object",
        {"$regexMatch": "a"},
        "Location51103",
        "$regexMatch expects an object of named arguments but found: string",
    ),
    (
        "regexMatch without regex",
        {"$regexMatch": {"input": "a"}},
        "Location31023",
        "$regexMatch requires 'regex' parameter",
    ),
    (
        "regexMatch input a number",
        {"$regexMatch": {"input": 1, "regex": "a"}},
        "Location51104",
        "$regexMatch needs 'input' to be of type string",
    ),
    (
        "regexFind options twice",
        {"$regexFind": {"input": "a", "regex": Regex("a", "i"), "options": "m"}},
        "Location51107",
        "$regexFind: found regex option(s) specified in both 'regex' and 'option' fields",
    ),
    (
        "regexMatch bad flag",
        {"$regexMatch": {"input": "a", "regex": "a", "options": "q"}},
        "Location51108",
        "$regexMatch invalid flag in regex options: q",
    ),
    (
        "size of missing",
        {"$size": "$zz"},
        "Location17124",
        "The argument to $size must be an array, but was of type: missing",
    ),
    (
        "size of a string",
        {"$size": "$s"},
        "Location17124",
        "The argument to $size must be an array, but was of type: string",
    ),
    (
        "arrayElemAt a string",
        {"$arrayElemAt": ["$s", 0]},
        "Location28689",
        "$arrayElemAt's first argument must be an array, but is string",
    ),
    (
        "arrayElemAt fractional index",
        {"$arrayElemAt": ["$arr", 1.5]},
        "Location28691",
        "$arrayElemAt's second argument must be representable as a 32-bit integer: 1.5",
    ),
    (
        "first of a string",
        {"$first": "$s"},
        "Location28689",
        "$first's argument must be an array, but is string",
    ),
    (
        "in a missing array",
        {"$in": [1, "$zz"]},
        "Location40081",
        "$in requires an array as a second argument, found: missing",
    ),
    (
        "indexOfArray a string",
        {"$indexOfArray": ["abc", "a"]},
        "Location40090",
        "$indexOfArray requires an array as a first argument, found: string",
    ),
    (
        "concatArrays a string",
        {"$concatArrays": [[1], "x"]},
        "Location28664",
        "$concatArrays only supports arrays, not string",
    ),
    (
        "slice a string",
        {"$slice": ["x", 1]},
        "Location28724",
        "First argument to $slice must be an array, but is of type: string",
    ),
    (
        "slice zero count",
        {"$slice": [[1], 0, 0]},
        "Location28729",
        "Third argument to $slice must be positive: 0",
    ),
    (
        "reverseArray a string",
        {"$reverseArray": "x"},
        "Location34435",
        "The argument to $reverseArray must be an array, but was of type: string",
    ),
    (
        "range a string",
        {"$range": ["a", 2]},
        "Location34443",
        "$range requires a numeric starting value, found value of type: string",
    ),
    (
        "range zero step",
        {"$range": [0, 2, 0]},
        "Location34449",
        "$range requires a non-zero step value",
    ),
    (
        "filter not an object",
        {"$filter": []},
        "Location28646",
        "$filter only supports an object as its argument",
    ),
    (
        "filter without cond",
        {"$filter": {"input": []}},
        "Location28650",
        "Missing 'cond' parameter to $filter",
    ),
    (
        "filter input a number",
        {"$filter": {"input": 1, "cond": True}},
        "Location28651",
        "input to $filter must be an array not int",
    ),
    (
        "filter zero limit",
        {"$filter": {"input": [1], "cond": True, "limit": 0}},
        "Location327392",
        "$filter: limit must be greater than 0: 0",
    ),
    (
        "filter bad as",
        {"$filter": {"input": [1], "as": "X", "cond": True}},
        "Location16867",
        "'X' starts with an invalid character for a user variable name",
    ),
    (
        "map unknown field",
        {"$map": {"input": [], "in": 1, "x": 1}},
        "Location16879",
        "Unrecognized parameter to $map: x",
    ),
    ("map without in", {"$map": {"input": []}}, "Location16882", "Missing 'in' parameter to $map"),
    (
        "map input a string",
        {"$map": {"input": "x", "in": 1}},
        "Location16883",
        "input to $map must be an array not string",
    ),
    (
        "map variable outside",
        {"$map": {"input": [], "as": "x", "in": "$$y"}},
        "Location17276",
        "Use of undefined variable: y",
    ),
    (
        "reduce without initialValue",
        {"$reduce": {"input": [], "in": 1}},
        "Location40078",
        "$reduce requires 'initialValue' to be specified",
    ),
    (
        "reduce input a string",
        {"$reduce": {"input": "x", "initialValue": 0, "in": 1}},
        "Location40080",
        "$reduce requires that 'input' be an array, found: \"x\"",
    ),
    (
        "arrayToObject a string",
        {"$arrayToObject": "x"},
        "Location40386",
        "$arrayToObject requires an array input, found: string",
    ),
    (
        "arrayToObject wrong pair size",
        {"$arrayToObject": [[["a"]]]},
        "Location40397",
        "$arrayToObject requires an array of size 2 arrays,found array of size: 1",
    ),
    (
        "arrayToObject non-string key",
        {"$arrayToObject": [[[1, 2]]]},
        "Location40395",
        "$arrayToObject requires an array of key-value pairs, where the key must be of type "
        "string. Found key type: int",
    ),
    (
        "arrayToObject scalar elements",
        {"$arrayToObject": [[1]]},
        "Location40398",
        "Unrecognised input type format for $arrayToObject: int",
    ),
    (
        "objectToArray a number",
        {"$objectToArray": 1},
        "Location40390",
        "$objectToArray requires a document input, found: int",
    ),
    (
        "setUnion a string",
        {"$setUnion": [[1], "x"]},
        "Location17043",
        "All operands of $setUnion must be arrays. One argument is of type: string",
    ),
    (
        "setDifference second a string",
        {"$setDifference": [[1], "x"]},
        "Location17049",
        "both operands of $setDifference must be arrays. Second argument is of type: string",
    ),
    (
        "setEquals one argument",
        {"$setEquals": [[1]]},
        "Location17045",
        "$setEquals needs at least two arguments had: 1",
    ),
    (
        "setEquals null",
        {"$setEquals": [[1], None]},
        "Location17044",
        "All operands of $setEquals must be arrays. 2-th argument is of type: null",
    ),
    (
        "setIsSubset null",
        {"$setIsSubset": [None, [1]]},
        "Location17046",
        "both operands of $setIsSubset must be arrays. First argument is of type: null",
    ),
    (
        "allElementsTrue a number",
        {"$allElementsTrue": [1]},
        "Location17040",
        "$allElementsTrue's argument must be an array, but is int",
    ),
    (
        "sortArray bad sortBy",
        {"$sortArray": {"input": [], "sortBy": 2}},
        "Location2942506",
        "The $sort element value must be either 1 or -1",
    ),
    (
        "sortArray input a string",
        {"$sortArray": {"input": "x", "sortBy": 1}},
        "Location2942504",
        "The input argument to $sortArray must be an array, but was of type: string",
    ),
    (
        "zip defaults without longest",
        {"$zip": {"inputs": [[1]], "defaults": [0]}},
        "Location34466",
        "cannot specify defaults unless useLongestLength is true",
    ),
]


@pytest.mark.parametrize(
    ("spec", "code_name", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_errors(spec: Any, code_name: str, message: str) -> None:
    with pytest.raises(QueryError) as info:
        run(spec, DOC)
    assert (info.value.code_name, info.value.message) == (code_name, message)
