"""Regular expressions, table-driven: implicit regex values, $regex with $options (i, m, s, x), regex
elements of $in, $nin, $all and $not, arrays of strings, regex-valued fields, PCRE spellings, and
MongoDB's errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
from bson import Regex

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.match import compile_filter
from tests.helpers import cases

CASES: list[tuple[str, dict[str, Any], Any, bool]] = [
    # (name, filter on field a, value of a (NOPE = missing), matches?)
    ("implicit regex", {"a": Regex("^ab")}, "abc", True),
    ("implicit regex, no match", {"a": Regex("^ab")}, "xabc", False),
    ("search, not full match", {"a": Regex("b")}, "abc", True),
    ("python pattern", {"a": re.compile("b")}, "abc", True),
    ("python pattern with flag", {"a": re.compile("B", re.IGNORECASE)}, "abc", True),
    ("case-sensitive by default", {"a": Regex("AB")}, "abc", False),
    ("implicit regex flags", {"a": Regex("AB", "i")}, "abc", True),
    ("not a string", {"a": Regex("1")}, 1, False),
    ("missing", {"a": Regex(".*")}, "NOPE", False),
    ("null", {"a": Regex(".*")}, None, False),
    ("array element", {"a": Regex("^x")}, ["y", "xz"], True),
    ("array, no element", {"a": Regex("^x")}, ["y", "zx"], False),
    ("nested array not searched", {"a": Regex("^x")}, [["xz"]], False),
    ("$regex string", {"a": {"$regex": "^ab"}}, "abc", True),
    ("$regex with $options i", {"a": {"$regex": "ab", "$options": "i"}}, "ABC", True),
    ("$options before $regex", {"a": {"$options": "i", "$regex": "ab"}}, "ABC", True),
    ("$regex as a regex value", {"a": {"$regex": Regex("AB", "i")}}, "xab", True),
    (
        "$regex value without flags, $options",
        {"a": {"$regex": Regex("AB"), "$options": "i"}},
        "ab",
        True,
    ),
    (
        "$options empty before a flagged $regex",
        {"a": {"$options": "", "$regex": Regex("AB", "i")}},
        "ab",
        True,
    ),
    ("without m, ^ anchors the string", {"a": {"$regex": "^b"}}, "a\nb", False),
    ("m: ^ anchors lines", {"a": {"$regex": "^b", "$options": "m"}}, "a\nb", True),
    ("without s, dot stops at newline", {"a": {"$regex": "a.b"}}, "a\nb", False),
    ("s: dot matches newline", {"a": {"$regex": "a.b", "$options": "s"}}, "a\nb", True),
    (
        "x: whitespace and comments ignored",
        {"a": {"$regex": "a b c # note", "$options": "x"}},
        "abc",
        True,
    ),
    ("without x, whitespace counts", {"a": {"$regex": "a b c"}}, "abc", False),
    ("u is accepted", {"a": {"$regex": "é", "$options": "u"}}, "café", True),
    ("unicode case folding", {"a": {"$regex": "É", "$options": "i"}}, "é", True),
    ("several options", {"a": {"$regex": "^B.C", "$options": "ims"}}, "a\nb\nc", True),
    ("$regex with another operator", {"a": {"$regex": "^a", "$ne": "ab"}}, "abc", True),
    ("$regex with another operator, fails", {"a": {"$regex": "^a", "$ne": "ab"}}, "ab", False),
    # Regex values in documents: an equal regex matches, a string is searched.
    ("regex value, same pattern and flags", {"a": Regex("x", "i")}, Regex("x", "i"), True),
    ("regex value, other flags", {"a": Regex("x", "i")}, Regex("x"), False),
    ("regex value, other pattern", {"a": Regex("x")}, Regex("y"), False),
    ("$eq regex is equality", {"a": {"$eq": Regex("x")}}, "x", False),
    ("$eq regex value", {"a": {"$eq": Regex("x")}}, Regex("x"), True),
    # $in / $nin / $all / $not
    ("$in regex", {"a": {"$in": [Regex("^a"), 5]}}, "abc", True),
    ("$in value beside a regex", {"a": {"$in": [Regex("^a"), 5]}}, 5, True),
    ("$in neither", {"a": {"$in": [Regex("^a"), 5]}}, "b", False),
    ("$in regex on array", {"a": {"$in": [Regex("^a")]}}, ["b", "ax"], True),
    ("$in python pattern", {"a": {"$in": [re.compile("^a")]}}, "abc", True),
    ("$nin regex", {"a": {"$nin": [Regex("^a")]}}, "abc", False),
    ("$nin regex, no match", {"a": {"$nin": [Regex("^a")]}}, "b", True),
    ("$nin regex, missing", {"a": {"$nin": [Regex("^a")]}}, "NOPE", True),
    ("$all regexes on a string", {"a": {"$all": [Regex("^a"), Regex("c$")]}}, "abc", True),
    (
        "$all regexes across elements",
        {"a": {"$all": [Regex("^a"), Regex("c$")]}},
        ["ab", "xc"],
        True,
    ),
    ("$all regexes, one fails", {"a": {"$all": [Regex("^a"), Regex("c$")]}}, "ab", False),
    ("$not regex", {"a": {"$not": Regex("^a")}}, "abc", False),
    ("$not regex, other string", {"a": {"$not": Regex("^a")}}, "b", True),
    ("$not regex, missing", {"a": {"$not": Regex("^a")}}, "NOPE", True),
    ("$not regex, number", {"a": {"$not": Regex("^a")}}, 5, True),
    ("$not regex, array with a match", {"a": {"$not": Regex("^a")}}, ["b", "a"], False),
    ("$not $regex", {"a": {"$not": {"$regex": "^A", "$options": "i"}}}, "abc", False),
    ("$not $regex, no match", {"a": {"$not": {"$regex": "^A", "$options": "i"}}}, "b", True),
    # PCRE spellings (PCRE2 reads them as they are)
    ("named group", {"a": {"$regex": r"^(?<year>\d{4})-"}}, "2024-01", True),
    ("lookbehind still works", {"a": {"$regex": r"(?<=a)b"}}, "ab", True),
    ("negative lookbehind still works", {"a": {"$regex": r"(?<!a)b"}}, "ab", False),
    (r"\z is the very end", {"a": {"$regex": r"abc\z"}}, "xabc", True),
    (r"\z before a newline", {"a": {"$regex": r"abc\z"}}, "abc\n", False),
    (r"\Z allows a final newline", {"a": {"$regex": r"abc\Z"}}, "abc\n", True),
    (r"\Z at the end", {"a": {"$regex": r"abc\Z"}}, "abc", True),
    ("escaped backslash before z", {"a": {"$regex": r"a\\z"}}, "a\\z", True),
    ("escaped bracket", {"a": {"$regex": r"\[x\]"}}, "[x]", True),
    ("bracket first in a class", {"a": {"$regex": r"[]a]"}}, "]", True),
]


@cases(("flt", "value", "expected"), CASES)
def test_regex(flt: dict[str, Any], value: Any, expected: bool) -> None:
    doc = {} if value == "NOPE" else {"a": value}
    assert compile_filter(flt)(doc) is expected


def test_regex_on_dotted_paths() -> None:
    pred = compile_filter({"a.b": {"$regex": "^x"}})
    assert pred({"a": [{"b": "y"}, {"b": "xy"}]}) is True
    assert pred({"a": [{"b": "y"}, {"c": "xy"}]}) is False


ERRORS: list[tuple[str, dict[str, Any], str, str]] = [
    ("$regex not a string", {"$regex": 5}, "BadValue", "$regex has to be a string"),
    ("$regex null", {"$regex": None}, "BadValue", "$regex has to be a string"),
    (
        "$options not a string",
        {"$regex": "a", "$options": 1},
        "BadValue",
        "$options has to be a string",
    ),
    ("$options alone", {"$options": "i"}, "BadValue", "$options needs a $regex"),
    (
        "$options with another operator",
        {"$options": "i", "$gt": 1},
        "BadValue",
        "$options needs a $regex",
    ),
    (
        "flags in both, $regex first",
        {"$regex": Regex("a", "i"), "$options": "m"},
        "Location51075",
        "options set in both $regex and $options",
    ),
    (
        "flags in both, $regex first, empty $options",
        {"$regex": Regex("a", "i"), "$options": ""},
        "Location51075",
        "options set in both $regex and $options",
    ),
    (
        "flags in both, $options first",
        {"$options": "m", "$regex": Regex("a", "i")},
        "Location51074",
        "options set in both $regex and $options",
    ),
    (
        "bad option",
        {"$regex": "a", "$options": "g"},
        "Location51108",
        " invalid flag in regex options: g",
    ),
    (
        "bad pattern",
        {"$regex": "("},
        "Location51091",
        "Regular expression is invalid: missing closing parenthesis",
    ),
    (
        "bad implicit regex",
        {"$in": [Regex("[")]},
        "Location51091",
        "Regular expression is invalid: ",
    ),
    (
        "null byte",
        {"$regex": "a\0b"},
        "BadValue",
        "Regular expression cannot contain an embedded null byte",
    ),
    ("$ne regex", {"$ne": Regex("a")}, "BadValue", "Can't have regex as arg to $ne."),
    (
        "$gt regex",
        {"$gt": Regex("a")},
        "BadValue",
        "Can't have RegEx as arg to predicate over field 'a'.",
    ),
    (
        "$lte python pattern",
        {"$lte": re.compile("a")},
        "BadValue",
        "Can't have RegEx as arg to predicate over field 'a'.",
    ),
]


@cases(("ops", "code_name", "message"), ERRORS)
def test_regex_errors(ops: dict[str, Any], code_name: str, message: str) -> None:
    with pytest.raises(QueryError) as excinfo:
        compile_filter({"a": ops})
    assert excinfo.value.code_name == code_name
    assert excinfo.value.message.startswith(message)


def test_regex_bad_flag_on_a_regex_value() -> None:
    # A regex value's flags are checked like $options: Python's LOCALE flag has no MongoDB letter.
    with pytest.raises(QueryError) as excinfo:
        compile_filter({"a": Regex("x", re.LOCALE)})
    assert excinfo.value.code_name == "Location51108"
