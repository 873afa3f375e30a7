"""Strings and regular expressions: $concat, case, $strcasecmp, substrings and lengths, $split,
$trim, $indexOfBytes/$indexOfCP, $replaceOne/$replaceAll and $regexMatch/$regexFind/$regexFindAll."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from bson import Regex

from ebbdb.storage.core import interrupt, limits
from ebbdb.storage.core.footprint import LIST_SLOT
from ebbdb.storage.core.values import regex_flags
from ebbdb.storage.query import regex
from ebbdb.storage.query.expressions import budget
from ebbdb.storage.query.expressions.coerce import coerce_int, coerce_long, coerce_string, integral
from ebbdb.storage.query.expressions.core import (
    NULL,
    NUMBER_TYPES,
    OPERATORS,
    Check,
    Expression,
    Operand,
    Variables,
    check,
    checked,
    compile_expression,
    fail,
    function,
    named_args,
    nullish,
    operator,
    ranged,
    type_name,
)


@function(
    "$concat",
    arity=None,
    operands=[(Check.typed((str,), 16702, "$concat only supports strings, not {type}"),)],
)
def _concat(op: str, parts: list[str]) -> str:
    budget.check_string_length(sum(map(len, parts)))
    return "".join(parts)


# MongoDB changes the case of ASCII letters only.
_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@function("$toLower", "$toUpper", arity=1, nulls=False)
def _change_case(op: str, x: Any) -> str:
    return coerce_string(x).translate(_LOWER if op == "$toLower" else _UPPER)


@function("$strcasecmp", arity=2, nulls=False)
def _strcasecmp(op: str, left: Any, right: Any) -> int:
    a = coerce_string(left).translate(_UPPER)
    b = coerce_string(right).translate(_UPPER)
    return (a > b) - (a < b)


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


_START_BYTES = (
    Check.typed(
        NUMBER_TYPES,
        16034,
        "{op}:  starting index must be a numeric type (is BSON type {type})",
    ),
)
_LENGTH_BYTES = (
    Check.typed(NUMBER_TYPES, 16035, "{op}:  length must be a numeric type (is BSON type {type})"),
)


@function("$substrBytes", arity=3, nulls=False)
def _substr_bytes(op: str, text: Any, start: Any, length: Any) -> str:
    data = coerce_string(text).encode()
    check(op, start, _START_BYTES)
    check(op, length, _LENGTH_BYTES)
    lower = coerce_long(start)
    if lower < 0:
        fail(50752, f"{op}:  starting index must be non-negative (got: {lower})")
    count = coerce_long(length)
    size = len(data) if count < 0 else count
    if lower < len(data) and _is_continuation(data[lower]):
        fail(28656, f"{op}:  Invalid range, starting index is a UTF-8 continuation byte.")
    if lower + size < len(data) and _is_continuation(data[lower + size]):
        fail(28657, f"{op}:  Invalid range, ending index is in the middle of a UTF-8 character.")
    if lower >= len(data):
        return ""
    return data[lower : lower + size].decode()


@operator("$substr")
def _substr(spec: Any, defined: frozenset[str], op: str) -> Expression:
    # An alias that parses, and reports itself, as $substrBytes.
    return OPERATORS["$substrBytes"](spec, defined, "$substrBytes")


_START_CP: Operand = (
    Check.typed(
        NUMBER_TYPES,
        34450,
        "{op}: starting index must be a numeric type (is BSON type {type})",
    ),
    Check(
        integral,
        34451,
        "{op}: starting index cannot be represented as a 32-bit integral value: {value}",
    ),
)
_LENGTH_CP: Operand = (
    Check.typed(NUMBER_TYPES, 34452, "{op}: length must be a numeric type (is BSON type {type})"),
    Check(
        integral, 34453, "{op}: length cannot be represented as a 32-bit integral value: {value}"
    ),
)


@function("$substrCP", arity=3, nulls=False)
def _substr_cp(op: str, text: Any, start: Any, length: Any) -> str:
    s = coerce_string(text)
    check(op, start, _START_CP)
    check(op, length, _LENGTH_CP)
    first, count = coerce_int(start), coerce_int(length)
    if count < 0:
        fail(34454, f"{op}: length must be a nonnegative integer.")
    if first < 0:
        fail(34455, f"{op}: the starting index must be nonnegative integer.")
    return s[first : first + count]


def _length(name: str, code: int, measure: Callable[[str], int]) -> None:
    """$strLenBytes/$strLenCP: a string's length (null is no string here)."""
    must = Check.typed((str,), code, "{op} requires a string argument, found: {type}")
    function(name, arity=1, nulls=False, operands=[(must,)])(lambda op, x: measure(x))


_length("$strLenBytes", 34473, lambda s: len(s.encode()))
_length("$strLenCP", 34471, len)


@function(
    "$split",
    arity=2,
    operands=[
        (
            Check.typed(
                (str,),
                40085,
                "$split requires an expression that evaluates to a string as a first argument, "
                "found: {type}",
            ),
        ),
        (
            Check.typed(
                (str,),
                40086,
                "$split requires an expression that evaluates to a string as a second argument, "
                "found: {type}",
            ),
        ),
    ],
)
def _split(op: str, text: str, sep: str) -> list[str]:
    if not sep:
        fail(40087, "$split requires a non-empty separator")
    if len(text) <= budget.THRESHOLD:
        return text.split(sep)
    # A 16 MB string split at every character would be millions of strings: what they would
    # take is held to the limit on built values, and charged, before they are made.
    pieces = text.count(sep) + 1
    approx = 40 + pieces * limits.VALUE_BYTES + len(text) - (pieces - 1) * len(sep)
    if approx >= limits.MAX_BUILT_BYTES:
        raise budget.too_large(op, approx)
    budget.charge_up_front(op, pieces * (LIST_SLOT + _STR_BYTES) + len(text))
    if _overlaps_itself(sep):
        return text.split(sep)
    # A window at a time, cut at a separator (which cannot straddle the cut, as no two
    # occurrences of this separator overlap), checking for interruption between windows.
    out: list[str] = []
    check = interrupt.current.get().check
    pos = 0
    while True:
        check()
        end = text.find(sep, pos + budget.PASS * 16)
        if end < 0:
            out.extend(text[pos:].split(sep))
            return out
        out.extend(text[pos:end].split(sep))
        pos = end + len(sep)


#: What CPython holds for a short string besides its characters.
_STR_BYTES = 49


def _overlaps_itself(sep: str) -> bool:
    """Whether two occurrences of `sep` can overlap (a proper suffix is also a prefix)."""
    return any(sep.endswith(sep[:i]) for i in range(1, len(sep)))


_TRIM_WHITESPACE = "\0 \t\n\v\f\r\u00a0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B))
_TRIM_INPUT = (
    Check.typed(
        (str,),
        50699,
        "{op} requires its input to be a string, got {value} (of type {type}) instead.",
    ),
)
_TRIM_CHARS = (
    Check.typed(
        (str,),
        50700,
        "{op} requires 'chars' to be a string, got {value} (of type {type}) instead.",
    ),
)


@operator("$trim", "$ltrim", "$rtrim")
def _trim(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = named_args(
        spec,
        ("input", "chars"),
        (50696, f"{op} only supports an object as an argument, found {type_name(spec)}"),
        (50694, f"{op} found an unknown argument: {{key}}"),
    )
    if "input" not in args:
        fail(50695, f"{op} requires an 'input' field")
    input_f = compile_expression(args["input"], defined)
    chars_f = compile_expression(args["chars"], defined) if "chars" in args else None
    left, right = op != "$rtrim", op != "$ltrim"

    def trim(doc: dict[str, Any], v: Variables) -> Any:
        x = checked(op, input_f(doc, v), _TRIM_INPUT)
        if x is NULL:
            return None
        # The characters are read only once the input is a string.
        chars = _TRIM_WHITESPACE if chars_f is None else checked(op, chars_f(doc, v), _TRIM_CHARS)
        if chars is NULL:
            return None
        if left and right:
            return x.strip(chars)
        return x.lstrip(chars) if left else x.rstrip(chars)

    return trim


def _bound(what: str) -> tuple[Check, ...]:
    # MongoDB's first message lacks a space after the operator's name.
    return (
        Check(
            integral,
            40096,
            f"{{op}}requires an integral {what}, found a value of type: {{type}}, with value: "
            "{value}",
        ),
        Check(
            lambda x: coerce_int(x) >= 0,
            40097,
            f"{{op}} requires a nonnegative {what}, found: {{value}}",
        ),
    )


_BOUNDS = {"starting index": _bound("starting index"), "ending index": _bound("ending index")}


def index_bound(op: str, x: Any, what: str) -> int:
    """uassertIfNotIntegralAndNonNegative: a start or end index, `what` says which."""
    check(op, x, _BOUNDS[what])
    return coerce_int(x)


@operator("$indexOfBytes", "$indexOfCP")
def _index_of_string(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = ranged(spec, defined, op, 2, 4)
    by_bytes = op == "$indexOfBytes"
    codes = (40091, 40092) if by_bytes else (40093, 40094)
    text_operand = (
        Check.typed(
            (str,), codes[0], "{op} requires a string as the first argument, found: {type}"
        ),
    )
    token_operand = (
        Check.typed(
            (str,), codes[1], "{op} requires a string as the second argument, found: {type}"
        ),
    )

    def index_of(doc: dict[str, Any], v: Variables) -> Any:
        text = checked(op, args[0](doc, v), text_operand)
        if text is NULL:
            return None
        token = args[1](doc, v)
        check(op, token, token_operand)
        hay: Any = text.encode() if by_bytes else text
        needle: Any = token.encode() if by_bytes else token
        start = index_bound(op, args[2](doc, v), "starting index") if len(args) > 2 else 0
        end = len(hay)
        if len(args) > 3:
            end = min(end, index_bound(op, args[3](doc, v), "ending index"))
        if by_bytes:
            if start > len(hay) or end < start:
                return -1
            return hay[:end].find(needle, start)
        if end < start:
            return -1
        if start == 0 and not hay and not needle:
            return 0
        # A match must start before the end index but may run past it.
        for i in range(start, end):
            if hay.startswith(needle, i):
                return i
        return -1

    return index_of


@operator("$replaceOne", "$replaceAll")
def _replace(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = named_args(
        spec,
        ("input", "find", "replacement"),
        (51751, f"{op} requires an object as an argument, found: {type_name(spec)}"),
        (51750, f"{op} found an unknown argument: {{key}}"),
    )
    for key, code in (("input", 51749), ("find", 51748), ("replacement", 51747)):
        if key not in args:
            fail(code, f"{op} requires '{key}' to be specified")
    parts = [compile_expression(args[key], defined) for key in ("input", "find", "replacement")]
    operands = [
        (
            Check(
                _string_or_nullish,
                code,
                f"{{op}} requires that '{key}' be a string, found: {{value}}",
            ),
        )
        for key, code in (("input", 51746), ("find", 51745), ("replacement", 51744))
    ]
    count = 1 if op == "$replaceOne" else -1

    def replace(doc: dict[str, Any], v: Variables) -> Any:
        got = [f(doc, v) for f in parts]
        # Every argument is checked before a nullish one makes the result null.
        for x, operand in zip(got, operands):
            check(op, x, operand)
        x, find, repl = got
        if nullish(x) or nullish(find) or nullish(repl):
            return None
        if len(repl) > len(find):
            # Refused before it is built: a 16 MB input could grow a thousandfold.
            n = x.count(find) if count < 0 else 1
            budget.check_string_length(len(x) + n * (len(repl) - len(find)))
        return x.replace(find, repl, count)

    return replace


def _string_or_nullish(x: Any) -> bool:
    return type(x) is str or nullish(x)


# -- regular expressions ---------------------------------------------------------------------------


def _compile_regex(op: str, pattern: str, options: str) -> regex.Pattern:
    try:
        return regex.compile_regex(pattern, options)
    except regex.BadRegexFlag as exc:
        fail(51108, f"{op} invalid flag in regex options: {exc.letter}")
    except regex.BadRegex as exc:
        fail(51111, f"Invalid Regex in {op}: {exc}")


def _search(op: str, rx: regex.Pattern, text: str, pos: int = 0) -> regex.Match | None:
    try:
        return regex.search(rx, text, pos)
    except regex.RegexRunError as exc:
        fail(
            51156,
            f"Error occurred while executing the regular expression in {op}. Result code: {exc}",
        )


def _is_regex(x: Any) -> bool:
    return type(x) is Regex or isinstance(x, re.Pattern)


@operator("$regexMatch", "$regexFind", "$regexFindAll")
def _regex(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(51103, f"{op} expects an object of named arguments but found: {type_name(spec)}")
    parts: dict[str, Expression] = {}
    for key, sub in spec.items():
        if key not in ("input", "regex", "options"):
            fail(31024, f"{op} found an unknown argument: {key}")
        parts[key] = compile_expression(sub, defined)
    if "input" not in parts:
        fail(31022, f"{op} requires 'input' parameter")
    if "regex" not in parts:
        fail(31023, f"{op} requires 'regex' parameter")
    input_f, regex_f = parts["input"], parts["regex"]
    options_f = parts.get("options")

    def state(doc: dict[str, Any], v: Variables) -> tuple[str, regex.Pattern] | None:
        text = input_f(doc, v)
        pattern_v = regex_f(doc, v)
        options_v = options_f(doc, v) if options_f is not None else None
        if not (nullish(text) or type(text) is str):
            fail(51104, f"{op} needs 'input' to be of type string")
        is_regex = _is_regex(pattern_v)
        if not (nullish(pattern_v) or type(pattern_v) is str or is_regex):
            fail(51105, f"{op} needs 'regex' to be of type string or regex")
        if not (nullish(options_v) or type(options_v) is str):
            fail(51106, f"{op} needs 'options' to be of type string")
        pattern: str | None = None
        options = ""
        if is_regex:
            pattern = str(pattern_v.pattern)
            flags = regex_flags(pattern_v.flags)
            if flags and not nullish(options_v):
                fail(
                    51107,
                    f"{op}: found regex option(s) specified in both 'regex' and 'option' fields",
                )
            options = flags
        elif type(pattern_v) is str:
            pattern = pattern_v
        if not nullish(options_v):
            options = str(options_v)
        if pattern is not None and "\0" in pattern:
            fail(51109, f"{op}: regular expression cannot contain an embedded null byte")
        if "\0" in options:
            fail(51110, f"{op}: regular expression options cannot contain an embedded null byte")
        if pattern is None:
            return None
        compiled = _compile_regex(op, pattern, options)
        if nullish(text):
            return None
        return text, compiled

    if op == "$regexMatch":

        def regex_match(doc: dict[str, Any], v: Variables) -> Any:
            s = state(doc, v)
            return s is not None and _search(op, s[1], s[0]) is not None

        return regex_match
    if op == "$regexFind":

        def regex_find(doc: dict[str, Any], v: Variables) -> Any:
            s = state(doc, v)
            if s is None:
                return None
            m = _search(op, s[1], s[0])
            return None if m is None else _found(m)

        return regex_find

    def regex_find_all(doc: dict[str, Any], v: Variables) -> Any:
        s = state(doc, v)
        if s is None:
            return []
        text, rx = s
        out: list[Any] = []
        # Millions of matches in a long string: each is a step of the operation (interruptible),
        # and what they build is measured as it grows (146 past mongod's limit on a built value).
        built = budget.Built(op, out)
        tick = interrupt.current.get().tick
        pos = 0
        while True:
            tick()
            m = _search(op, rx, text, pos)
            if m is None:
                break
            out.append(_found(m))
            if len(out) - built.done >= budget.CHUNK:
                built.measure()
            # An empty match moves on one code point; matches never overlap.
            pos = m.end() if m.end() > m.start() else m.start() + 1
            if pos >= len(text):
                break
        return out

    return regex_find_all


def _found(m: regex.Match) -> dict[str, Any]:
    return {"match": m.group(0), "idx": m.start(), "captures": list(m.groups())}
