"""The regex engine (storage/query/regex.py) on PCRE2: MongoDB's limits (a match attempt gives up at
exactly MongoDB's 200,000 backtracks and depth of 4,000, not at PCRE2's ten million; a pattern cannot
raise the limits again), UTF mode without UCP, the escapes the binding's forced ALT_BSUX would
change, PCRE2's own compile messages, the compiled-pattern cache, and what the matcher and the
expressions make of a match attempt that gives up."""

from __future__ import annotations

import pytest
from bson import Regex

from ebbdb.storage.query import regex
from ebbdb.storage.query.match import compile_filter
from tests.helpers import cases, query_error
from tests.query.expr_support import run

RUNAWAY = "a" * 40 + "b"


def finds(pattern: str, text: str, options: str = "") -> bool:
    return regex.finds_in(regex.compile_regex(pattern, options))(text)


#: A pattern whose match attempt on "a" * n backtracks about 1.5 * 2^n times before its second
#: branch matches: PCRE2 counts 196,609 for n = 17 and 393,217 for n = 18, either side of MongoDB's
#: MATCH_LIMIT (200,000) and both far below PCRE2's default of 10,000,000.
BACKTRACKS = "^(?:(?:a+)+b|a*$)"
#: A pattern whose depth on "ab" * n is 3n + 4: 4,000 for n = 1,332 and 4,003 for n = 1,333,
#: either side of MongoDB's DEPTH_LIMIT (4,000), far below PCRE2's default.
DEEP = "^(?:a|b)*$"
#: What a pattern may put first to ask for more than MongoDB allows.
RAISED = "(*LIMIT_MATCH=100000000)(*LIMIT_DEPTH=100000000)"


def test_catastrophic_pattern_gives_up_at_mongodbs_match_limit() -> None:
    # 2^40 backtracks without a limit: the matcher takes the attempt given up on for no match,
    # a search raises PCRE2's reason.
    assert finds("^(a+)+$", RUNAWAY) is False
    with pytest.raises(regex.RegexRunError, match="^match limit exceeded$"):
        regex.search(regex.compile_regex("^(a+)+$", ""), RUNAWAY)
    assert finds("^(a+)+$", "aaaa") is True


@pytest.mark.parametrize("settings", ["", RAISED], ids=["mongodbs", "raised_by_the_pattern"])
def test_the_limits_are_mongodbs_exactly(settings: str) -> None:
    """Just under MongoDB's limits an attempt runs to its match, just over them it gives up; PCRE2's
    default limits (or the raised ones) would find both. The matcher's path (a first try under a
    short limit, then the full one in the helper process) gives the same answers."""
    backtracks = regex.compile_regex(settings + BACKTRACKS, "")
    assert regex.search(backtracks, "a" * 17) is not None
    with pytest.raises(regex.RegexRunError, match="^match limit exceeded$"):
        regex.search(backtracks, "a" * 18)
    assert [regex.finds_in(backtracks)("a" * n) for n in (17, 18)] == [True, False]
    deep = regex.compile_regex(settings + DEEP, "")
    assert regex.search(deep, "ab" * 1332) is not None
    with pytest.raises(regex.RegexRunError, match="^matching depth limit exceeded$"):
        regex.search(deep, "ab" * 1333)
    assert [regex.finds_in(deep)("ab" * n) for n in (1332, 1333)] == [True, False]


def test_a_pattern_cannot_raise_the_limits() -> None:
    rx = regex.compile_regex(RAISED + "^(a+)+$", "")
    with pytest.raises(regex.RegexRunError, match="^match limit exceeded$"):
        regex.search(rx, RUNAWAY)
    assert regex.finds_in(rx)(RUNAWAY) is False


def test_a_pattern_may_lower_the_limits() -> None:
    # As under mongod, whose own limit a pattern's (*LIMIT_...) may only lower: 2^16 backtracks
    # are within MongoDB's limit, not within the pattern's 5,000 (nor, for the depth, 10).
    assert finds("^(?:(?:a+)+b|a*$)", "a" * 16) is True
    assert finds("(*LIMIT_MATCH=5000)^(?:(?:a+)+b|a*$)", "a" * 16) is False
    assert finds("(*LIMIT_MATCH=5000)^(?:(?:a+)+b|a*$)", "a" * 8) is True
    assert finds("(*LIMIT_RECURSION=10)^(?:a|b)*$", "ab" * 8) is False
    assert finds("(*LIMIT_DEPTH=10)(*UCP)^(?:a|b)*$", "ab") is True


def test_depth_limit() -> None:
    rx = regex.compile_regex("^(?:a|b)*$", "")
    assert regex.search(rx, "ab" * 100) is not None
    with pytest.raises(regex.RegexRunError, match="^matching depth limit exceeded$"):
        regex.search(rx, "ab" * 5000)


MATCHES: list[tuple[str, str, str, str, bool]] = [
    # (name, pattern, options, text, found?)
    ("\\w is ASCII (no UCP)", "^\\w$", "", "é", False),
    ("\\d is ASCII", "\\d", "", "٣", False),
    ("(*UCP) turns Unicode classes on", "(*UCP)^\\w$", "", "é", True),
    ("setting then verb", "(*UCP)(*FAIL)|^é", "", "é", True),
    ("a verb first is not a setting", "(*FAIL)|x", "", "x", True),
    ("dot is one code point", "^.$", "", "€", True),
    ("caseless beyond ASCII", "^straße$", "i", "STRASSE", False),
    ("caseless é", "^É$", "i", "é", True),
    ("\\x{..} is a code point", "^\\x{20AC}$", "", "€", True),
    ("\\x{..} in a class", "^[\\x{41}-\\x{43}]+$", "", "ABC", True),
    ("\\xhh", "^\\x41$", "", "A", True),
    ("\\Q..\\E quotes", "^\\Q\\x{41}.\\E$", "", "\\x{41}.", True),
    ("escaped backslash then x{", "^\\\\x{2}$", "", "\\xx", True),
    ("possessive", "^a++a", "", "aaa", False),
    ("atomic", "^(?>a*)a", "", "aaa", False),
    ("\\z", "a\\z", "", "a\n", False),
    ("\\Z", "a\\Z", "", "a\n", True),
    ("named group backreference", "^(?<q>['\"]).*\\k<q>$", "", "'x'", True),
    ("recursion", "^(\\((?:[^()]|(?1))*\\))$", "", "(a(b)c)", True),
    ("x ignores whitespace", "a b # c", "x", "ab", True),
    ("u changes nothing", "^é$", "u", "é", True),
    ("s", "a.b", "s", "a\nb", True),
    ("m", "^b", "m", "a\nb", True),
]


@cases(("pattern", "options", "text", "found"), MATCHES)
def test_semantics(pattern: str, options: str, text: str, found: bool) -> None:
    assert finds(pattern, text, options) is found


def test_a_long_attempt_runs_on_in_the_helper_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    helper_finds = regex.RUNAWAY.finds

    def counted(source: str, flags: int, text: str) -> bool | None:
        calls.append(text)
        return helper_finds(source, flags, text)

    monkeypatch.setattr(regex.RUNAWAY, "finds", counted)
    test = regex.finds_in(regex.compile_regex("^(?:(a+)+x|a*y)", ""))
    assert test("a" * 8 + "y") is True  # found under the quick limit: no second run
    assert calls == []
    # Past the quick limit, within MongoDB's: found by the second run, not lost to the first.
    assert test("a" * 14 + "y") is True
    assert calls == ["a" * 14 + "y"]
    assert test("a" * 30 + "y") is False  # past MongoDB's limit too: no match
    assert len(calls) == 2


# Patterns whose reading differs between PCRE2 releases: the answer must not depend on whether
# the attempt ran past the quick limit (and so in the helper).
SLOW_OR_FAST = [
    ("^(?:(?:a+)+b|a*x{,3}$)", "", "xx"),
    ("^(?:(?:a+)+b|a*\\x{A7CB}$)", "i", "\u0264"),
    ("(*UCP)^(?:(?:a+)+b|a*\\w$)", "", "\u203f"),
    ("^(?:(?:a+)+b|a*[[:alpha:]]$)", "", "\u00e9"),
]


@pytest.mark.parametrize("pattern, options, tail", SLOW_OR_FAST)
def test_the_answer_does_not_depend_on_the_attempt_length(
    pattern: str, options: str, tail: str
) -> None:
    rx = regex.compile_regex(pattern, options)
    test = regex.finds_in(rx)
    short, long = "aaaa" + tail, "a" * 16 + tail
    expected = [regex.search(rx, short) is not None, regex.search(rx, long) is not None]
    assert [test(short), test(long)] == expected


def test_a_dead_helper_is_replaced_and_answers_stay_right() -> None:
    test = regex.finds_in(regex.compile_regex("^(?:(a+)+x|a*y)", ""))
    assert test("a" * 14 + "y") is True  # the helper is running now
    helper = regex.RUNAWAY
    proc = helper.process
    assert proc is not None
    proc.kill()
    proc.wait()
    started = helper.started
    # The next long attempt meets the dead helper: answered here, and the helper restarted.
    assert test("a" * 15 + "y") is True
    assert test("a" * 13 + "y") is True
    assert helper.started == started + 1
    assert helper.process is not None and helper.process.poll() is None


def test_without_a_helper_the_attempt_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regex.RUNAWAY, "finds", lambda source, flags, text: None)
    test = regex.finds_in(regex.compile_regex("^(?:(a+)+x|a*y)", ""))
    assert test("a" * 14 + "y") is True
    assert test("a" * 30 + "y") is False


COMPILE_ERRORS = [
    ("(", "missing closing parenthesis"),
    ("a{3,2}", "numbers out of order in {} quantifier"),
    ("\\u0041", "PCRE2 does not support \\F, \\L, \\l, \\N{name}, \\U, or \\u"),
    ("a\\U", "PCRE2 does not support \\F, \\L, \\l, \\N{name}, \\U, or \\u"),
    ("(?P<1>a)", "subpattern name must start with a non-digit"),
    ("a(*LIMIT_MATCH=5)", "(*VERB) not recognized or malformed"),
]


@pytest.mark.parametrize("pattern, message", COMPILE_ERRORS)
def test_compile_errors_are_pcre2s(pattern: str, message: str) -> None:
    with pytest.raises(regex.BadRegex) as info:
        regex.compile_regex(pattern, "")
    assert str(info.value) == message
    assert query_error(compile_filter, {"a": {"$regex": pattern}}) == (
        "Location51091",
        f"Regular expression is invalid: {message}",
    )


def test_quoted_u_is_not_an_escape() -> None:
    assert finds("^\\Q\\u\\E$", "\\u")


def test_flag_checked_before_null_byte_and_pattern() -> None:
    # MongoDB's order: the option letters, the embedded null, then the pattern.
    assert query_error(compile_filter, {"a": {"$regex": "(\0", "$options": "q"}}) == (
        "Location51108",
        " invalid flag in regex options: q",
    )
    assert query_error(compile_filter, {"a": {"$regex": "(\0"}}) == (
        "BadValue",
        "Regular expression cannot contain an embedded null byte",
    )


def test_compiled_patterns_are_cached() -> None:
    regex.compile_regex.cache_clear()
    first = regex.compile_regex("^ab+c", "i")
    assert regex.compile_regex("^ab+c", "i") is first
    assert regex.compile_regex("^ab+c", "") is not first
    assert regex.compile_regex.cache_info().hits == 1


def test_matcher_counts_a_failed_attempt_as_no_match() -> None:
    pred = compile_filter({"s": {"$regex": "^(a+)+$"}})
    assert pred({"s": RUNAWAY}) is False
    assert pred({"s": [RUNAWAY, "aa"]}) is True
    assert compile_filter({"s": {"$not": {"$regex": "^(a+)+$"}}})({"s": RUNAWAY}) is True
    assert compile_filter({"s": {"$in": [5, Regex("^(a+)+$")]}})({"s": RUNAWAY}) is False


@pytest.mark.parametrize("op", ["$regexMatch", "$regexFind", "$regexFindAll"])
def test_expressions_fail_with_51156(op: str) -> None:
    assert query_error(run, {op: {"input": RUNAWAY, "regex": "^(a+)+$"}}) == (
        "Location51156",
        f"Error occurred while executing the regular expression in {op}. "
        "Result code: match limit exceeded",
    )


def test_expression_compile_error_is_51111() -> None:
    assert query_error(run, {"$regexFind": {"input": "a", "regex": "a{3,2}"}}) == (
        "Location51111",
        "Invalid Regex in $regexFind: numbers out of order in {} quantifier",
    )


def test_regex_find_all_on_pcre2() -> None:
    assert run({"$regexFindAll": {"input": "aXbbXcccX", "regex": "(?<w>[a-c]++)X"}}) == [
        {"match": "aX", "idx": 0, "captures": ["a"]},
        {"match": "bbX", "idx": 2, "captures": ["bb"]},
        {"match": "cccX", "idx": 5, "captures": ["ccc"]},
    ]
    # Code point offsets, not bytes.
    assert run({"$regexFind": {"input": "€€x", "regex": "x"}}) == {
        "match": "x",
        "idx": 2,
        "captures": [],
    }
