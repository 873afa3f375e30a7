"""Regular expressions on PCRE2, MongoDB's own engine, through the `pcre2` binding: the one place
patterns are compiled (and cached by pattern and options) and run, for the matcher's $regex and
the expressions' $regexMatch/$regexFind/$regexFindAll alike.

Compiled as MongoDB's mongod compiles them: UTF-8 mode always, without Unicode properties for
\\d, \\w, \\s and \\b (an explicit (*UCP) turns them on), options i, m, s, x (u is accepted and
changes nothing), the interpreter rather than the JIT, and the limits MongoDB builds its PCRE2
with: 200,000 backtracks and a backtracking depth of 4,000 per match attempt. A catastrophic
pattern therefore gives up after a few milliseconds instead of running for hours; the caller
decides what a failed match means (MongoDB's matcher counts it as no match, the expressions fail
with 51156)."""

from __future__ import annotations

import atexit
import functools
import re
from collections.abc import Callable
from typing import Any, Protocol

import pcre2

from ebbdb.storage.query import runaway


class BadRegexFlag(ValueError):
    """An option letter MongoDB does not know (its 51108)."""

    def __init__(self, letter: str) -> None:
        super().__init__(letter)
        self.letter = letter


class BadRegex(ValueError):
    """A pattern PCRE2 does not compile; the message is PCRE2's own (MongoDB's 51091, 51111)."""


class RegexRunError(RuntimeError):
    """A match attempt PCRE2 gave up on (a limit exceeded); the message is PCRE2's own."""


class Match(Protocol):
    def group(self, *groups: int) -> Any: ...
    def groups(self) -> tuple[str | None, ...]: ...
    def start(self) -> int: ...
    def end(self) -> int: ...


class Pattern(Protocol):
    """What ebbdb uses of a compiled pcre2 pattern (the binding has no type stubs)."""

    def search(self, text: str, pos: int = ...) -> Match | None: ...


#: MongoDB's build of PCRE2 (MATCH_LIMIT and MATCH_LIMIT_DEPTH in its config.h).
MATCH_LIMIT = 200_000
DEPTH_LIMIT = 4_000

_OPTIONS = {
    "i": pcre2.IGNORECASE,
    "m": pcre2.MULTILINE,
    "s": pcre2.DOTALL,
    "x": pcre2.VERBOSE,
    "u": 0,  # MongoDB is always in UTF-8 mode
}
# The binding turns Unicode properties (PCRE2_UCP) on for str patterns; its ASCII flag turns them
# off again, leaving UTF mode as MongoDB has it.
_BASE_FLAGS = pcre2.ASCII
# In-pattern limits may only lower the application's limit and the last setting wins: ours go
# after any the pattern opens with, so a pattern cannot raise them again, and they are the lower
# of MongoDB's and the pattern's own (a pattern may lower them, as under mongod).
_USER_LIMIT = re.compile(r"\(\*LIMIT_(MATCH|DEPTH|RECURSION)=(\d+)\)")
_LEADING_SETTINGS = re.compile(
    r"(?:\(\*(?:LIMIT_[A-Z]+=\d+|NOTEMPTY(?:_ATSTART)?|NO_[A-Z_]+|UTF8?|UCP|CR|LF|CRLF|ANYCRLF"
    r"|ANY|NUL|BSR_ANYCRLF|BSR_UNICODE)\))*"
)
#: An escape, or text quoted by \Q...\E (up to \E or the end), one token at a time.
_ESCAPE = re.compile(r"\\x\{|\\Q.*?(?:\\E|\Z)|\\.", re.DOTALL)
#: PCRE2's message for \u and \U, which the binding's forced PCRE2_ALT_BSUX would otherwise accept.
_NO_BSU = str(pcre2.LibraryError(137))


def _limits(settings: str) -> tuple[int, int]:
    """The match and depth limits of a pattern opening with `settings`: MongoDB's, or lower
    ones the settings ask for (LIMIT_RECURSION is PCRE2's old name for LIMIT_DEPTH)."""
    match_limit, depth_limit = MATCH_LIMIT, DEPTH_LIMIT
    for kind, value in _USER_LIMIT.findall(settings):
        if kind == "MATCH":
            match_limit = min(match_limit, int(value))
        else:
            depth_limit = min(depth_limit, int(value))
    return match_limit, depth_limit


def check_options(options: str) -> None:
    """MongoDB's flagsToOptions: every letter must be one of i, m, s, x, u."""
    for ch in options:
        if ch not in _OPTIONS:
            raise BadRegexFlag(ch)


@functools.lru_cache(maxsize=1024)
def compile_regex(pattern: str, options: str) -> Pattern:
    """The pattern compiled with its option letters (BadRegexFlag, BadRegex), cached."""
    check_options(options)
    flags = _BASE_FLAGS
    for ch in options:
        flags |= _OPTIONS[ch]
    lead = _LEADING_SETTINGS.match(pattern)
    cut = lead.end() if lead else 0
    match_limit, depth_limit = _limits(pattern[:cut])
    limits = f"(*LIMIT_MATCH={match_limit})(*LIMIT_DEPTH={depth_limit})"
    source = pattern[:cut] + limits + _escapes(pattern[cut:])
    try:
        compiled: Pattern = pcre2.compile(source, flags, jit=False)
    except pcre2.LibraryError as exc:
        raise BadRegex(str(pcre2.LibraryError(exc.code))) from None
    return compiled


def finds_in(rx: Pattern) -> Callable[[str], bool]:
    """Whether `rx` finds a match in a string, as MongoDB's matcher asks: an attempt PCRE2 gives up
    on (a limit exceeded) is no match, not an error.

    The binding holds the interpreter for a whole match, and an attempt that runs to MongoDB's
    limit takes about 9 ms: long enough to keep the event loop from answering anyone. So each
    string is tried first under QUICK_MATCH_LIMIT (well under a millisecond), and only an attempt
    that reaches it runs again, to the full limit, in the helper process of
    storage/query/runaway.py (the same binding, so the same answer) while this thread waits with
    the interpreter released. What an attempt finds within the short limit, match or no match,
    the full one finds too."""
    code = getattr(rx, "_pcre2_code", None)
    if _MATCH is not None and code is not None:
        match = _MATCH
        quick = _quick_code(rx)
        source, flags = rx.pattern, int(rx.flags)  # type: ignore[attr-defined]

        def finds_fast(text: str) -> bool:
            try:
                return match(quick, text, len(text), 0, _CONTEXT, 0)[0] is not None
            except pcre2.LibraryError as exc:
                if getattr(exc, "code", None) != _ERROR_MATCHLIMIT:
                    return False
            found = RUNAWAY.finds(source, flags, text)
            if found is not None:
                return found
            try:  # no helper: the full attempt here, holding the interpreter
                return match(code, text, len(text), 0, _CONTEXT, 0)[0] is not None
            except pcre2.LibraryError:
                return False

        return finds_fast
    search = rx.search

    def finds(text: str) -> bool:
        try:
            return search(text) is not None
        except pcre2.LibraryError:
            return False

    return finds


def _binding_matcher() -> Callable[..., Any] | None:
    """The binding's own match call (`pcre2._cy.match`), which answers without building a Match
    object: a fifth of Pattern.search's cost, which the matcher pays per string it tests. Used
    only if it still behaves as in the pinned 0.7 series; otherwise Pattern.search serves."""
    try:
        from pcre2 import _cy

        match: Callable[..., Any] = _cy.match
        code = pcre2.compile("b", _BASE_FLAGS, jit=False)._pcre2_code
        if (
            match(code, "ab", 2, 0, _CONTEXT, 0)[0] is not None
            and match(code, "ac", 2, 0, _CONTEXT, 0)[0] is None
        ):
            return match
    except Exception:  # any change in the binding's internals: use its public API
        pass
    return None


_CONTEXT = getattr(pcre2, "_EMPTY_MATCH_CONTEXT", None)
_MATCH = _binding_matcher()


#: The first try's limit: an attempt reaching it (about 0.4 ms of backtracking) runs again to
#: MATCH_LIMIT in the helper process, with the interpreter released.
QUICK_MATCH_LIMIT = 10_000
_ERROR_MATCHLIMIT = -47  # PCRE2_ERROR_MATCHLIMIT
#: The helper process for attempts past QUICK_MATCH_LIMIT (started on the first one).
RUNAWAY = runaway.Helper()
atexit.register(RUNAWAY.close)


@functools.lru_cache(maxsize=1024)
def _quick_code_of(source: str, flags: int) -> Any:
    # The settings end with our limits; the last setting wins, so the short limit goes right
    # after them (never above the pattern's own).
    lead = _LEADING_SETTINGS.match(source)
    cut = lead.end() if lead else 0
    limit = min(QUICK_MATCH_LIMIT, _limits(source[:cut])[0])
    quick = source[:cut] + f"(*LIMIT_MATCH={limit})" + source[cut:]
    return pcre2.compile(quick, flags, jit=False)._pcre2_code


def _quick_code(rx: Pattern) -> Any:
    return _quick_code_of(rx.pattern, int(rx.flags))  # type: ignore[attr-defined]


def search(rx: Pattern, text: str, pos: int = 0) -> Match | None:
    """The first match at or after code point `pos`, or None; RegexRunError when PCRE2 gives up."""
    try:
        return rx.search(text, pos)
    except pcre2.LibraryError as exc:
        raise RegexRunError(str(exc)) from None


def _escapes(pattern: str) -> str:
    """The binding always compiles with PCRE2_ALT_BSUX (JavaScript's escapes), which MongoDB does
    not: there `\\x{hh..}` is a code point (spelled `\\N{U+hh..}` here, which means the same in UTF
    mode) and `\\u`, `\\U` are errors. Text quoted by \\Q...\\E is left alone."""
    if "\\" not in pattern:
        return pattern
    return _ESCAPE.sub(_escape, pattern)


def _escape(m: re.Match[str]) -> str:
    token = m.group()
    if token == "\\x{":
        return "\\N{U+"
    if token in ("\\u", "\\U"):
        raise BadRegex(_NO_BSU)
    return token
