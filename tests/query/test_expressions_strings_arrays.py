"""String, regex, array and set expressions, table-driven: results (with their BSON types) and the
codes and messages MongoDB gives for bad input."""

from __future__ import annotations

from typing import Any

from bson import Decimal128, Int64, Regex
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.query.paths import MISSING
from tests.case_tables import load_cases
from tests.helpers import cases
from tests.query.expr_support import Doc, errors_test, run, typed

DOC: Doc = {
    "s": "Hello World",
    "u": "héllo",
    "arr": [1, 2, 3, 4, 5],
    "docs": [{"k": "a", "v": 1}, {"k": "b", "v": 2}],
    "n": None,
}

CASES: list[tuple[str, Any, Any]] = load_cases("strings_arrays") + [
    # Rows holding BSON values (not plain YAML), after those of cases/strings_arrays.yaml:
    ("toUpper of a date", {"$toUpper": DatetimeMS(0)}, "1970-01-01T00:00:00.000Z"),
    ("substrCP double indexes", {"$substrCP": ["abcdef", 1.0, Int64(2)]}, "bc"),
    ("regexMatch regex value", {"$regexMatch": {"input": "ABC", "regex": Regex("b", "i")}}, True),
    ("arrayElemAt out of range", {"$arrayElemAt": ["$arr", 9]}, MISSING),
    ("arrayElemAt far negative", {"$arrayElemAt": ["$arr", -9]}, MISSING),
    ("first of empty", {"$first": [[]]}, MISSING),
    ("in across numeric types", {"$in": [Int64(3), [1.0, 3.0]]}, True),
    ("allElementsTrue with zero", {"$allElementsTrue": [[1, Decimal128("0")]]}, False),
]


@cases(("spec", "expected"), CASES)
def test_expression(spec: Any, expected: Any) -> None:
    assert typed(run(spec, DOC)) == typed(expected)


ERRORS: list[tuple[str, Any, str, str]] = load_cases("strings_arrays_errors") + [
    # Rows holding BSON values (not plain YAML), after those of cases/strings_arrays_errors.yaml:
    (
        "regexFind options twice",
        {"$regexFind": {"input": "a", "regex": Regex("a", "i"), "options": "m"}},
        "Location51107",
        "$regexFind: found regex option(s) specified in both 'regex' and 'option' fields",
    ),
]


test_errors = errors_test(ERRORS, DOC)
