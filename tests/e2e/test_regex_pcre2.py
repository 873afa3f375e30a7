"""Regular expressions on PCRE2 through pymongo: MongoDB's match limit (a catastrophic pattern gives
up on each document: no match for find, count and distinct, 51156 for $regexMatch and its siblings)
while other clients keep being answered, and killOp ends such a scan; options i, m, s, x, u;
PCRE-only syntax; compile errors (51091, 51111) and bad option letters (51108) with MongoDB's
messages."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from bson import Regex
from pymongo import AsyncMongoClient
from pymongo.database import Database
from pymongo.errors import OperationFailure

from tests.waiting import wait_until_async

CATASTROPHIC = "^(a+)+$"
RUNAWAY = "a" * 40 + "b"  # 2^40 ways to fail without a limit


def _error(exc: pytest.ExceptionInfo[OperationFailure]) -> tuple[int | None, str, str]:
    details = exc.value.details or {}
    return exc.value.code, details.get("codeName", ""), details.get("errmsg", "")


# -- the match limit ------------------------------------------------------------------------------


#: Runaway strings in the scan of the liveness test: each gives up at the match limit after a few
#: milliseconds, so the whole scan takes seconds, far longer than the test looks at it.
SCAN_DOCS = 5000
WAIT_SECONDS = 10.0


@pytest.mark.asyncio
async def test_catastrophic_pattern_is_no_match_for_queries_and_51156_for_expressions(
    async_mongo_client: AsyncMongoClient[dict[str, Any]],
) -> None:
    coll = async_mongo_client.regex_limit.docs
    await coll.insert_many(
        [{"_id": i, "s": RUNAWAY} for i in range(150)] + [{"_id": -1, "s": "aa"}]
    )
    # MongoDB's matcher counts a match attempt PCRE2 gave up on as no match.
    found = await coll.find({"s": {"$regex": CATASTROPHIC}}).to_list()
    assert found == [{"_id": -1, "s": "aa"}]
    assert await coll.count_documents({"s": Regex(CATASTROPHIC)}) == 1
    assert await coll.distinct("s", {"s": {"$in": [re.compile(CATASTROPHIC)]}}) == ["aa"]
    # The expressions fail instead, with the library's reason.
    with pytest.raises(OperationFailure) as exc:
        await coll.find(
            {"$expr": {"$regexMatch": {"input": "$s", "regex": CATASTROPHIC}}}
        ).to_list()
    assert _error(exc) == (
        51156,
        "Location51156",
        "Error occurred while executing the regular expression in $regexMatch. "
        "Result code: match limit exceeded",
    )


async def _scans(admin: Any) -> list[int]:
    """The opids of the operations commented "runaway" that currentOp lists."""
    reply = await admin.command({"currentOp": 1, "command.comment": "runaway"})
    return [op["opid"] for op in reply["inprog"]]


@pytest.mark.asyncio
async def test_others_are_answered_while_a_catastrophic_scan_runs(
    async_mongo_client: AsyncMongoClient[dict[str, Any]], ebbdb_uri: str
) -> None:
    """While currentOp shows the scan running, another client's ping is answered, and the scan is
    still the one running after that reply: the ping did not wait for it. killOp then ends it."""
    coll = async_mongo_client.regex_scan.docs
    await coll.insert_many([{"_id": i, "s": RUNAWAY} for i in range(SCAN_DOCS)])
    other: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(ebbdb_uri)
    try:
        await other.admin.command("ping")
        scan = asyncio.create_task(
            coll.find({"s": {"$regex": CATASTROPHIC}}, comment="runaway").to_list()
        )
        running = await wait_until_async(lambda: _scans(other.admin), "the scan in currentOp")
        assert (await other.admin.command("ping"))["ok"] == 1.0
        assert await _scans(other.admin) == running and not scan.done()
        await other.admin.command("killOp", op=running[0])
        with pytest.raises(OperationFailure) as exc:
            await asyncio.wait_for(scan, WAIT_SECONDS)
        assert exc.value.code == 11601
    finally:
        await other.close()


def test_depth_limit_is_mongodbs(mongo_db: Database[dict[str, Any]]) -> None:
    # MongoDB builds PCRE2 with a backtracking depth of 4,000: a group repeated over a long string
    # gives up (no match), a short one matches.
    mongo_db.d.insert_many([{"_id": 1, "s": "ab" * 100}, {"_id": 2, "s": "ab" * 5000}])
    assert [d["_id"] for d in mongo_db.d.find({"s": {"$regex": "^(?:a|b)*$"}})] == [1]


@pytest.mark.parametrize("op", ["$regexFind", "$regexFindAll"])
def test_expressions_hit_the_limit(mongo_db: Database[dict[str, Any]], op: str) -> None:
    mongo_db.d.insert_one({"s": RUNAWAY})
    with pytest.raises(OperationFailure) as exc:
        mongo_db.d.aggregate(
            [{"$project": {"r": {op: {"input": "$s", "regex": Regex(CATASTROPHIC)}}}}]
        ).to_list()
    assert _error(exc) == (
        51156,
        "Location51156",
        f"Error occurred while executing the regular expression in {op}. "
        "Result code: match limit exceeded",
    )


# -- options and PCRE syntax --------------------------------------------------------------------------

STRINGS = [
    "ABC",
    "abc",
    "x\nabc",
    "a\nc",
    "café",
    "CAFÉ",
    "aaab",
    "abc\n",
    "2024-01-31",
    "a.b",
    "A",
    "ü",
    "a b",
]

# (query on s, the strings it matches)
SEMANTICS: list[tuple[str, Any, list[str]]] = [
    ("case-sensitive", {"$regex": "^abc"}, ["abc", "abc\n"]),
    ("i", {"$regex": "^abc$", "$options": "i"}, ["ABC", "abc", "abc\n"]),
    ("i folds beyond ASCII", {"$regex": "^café$", "$options": "i"}, ["café", "CAFÉ"]),
    ("without m", {"$regex": "^abc"}, ["abc", "abc\n"]),
    ("m", {"$regex": "^abc$", "$options": "m"}, ["abc", "x\nabc", "abc\n"]),
    ("without s", {"$regex": "^a.c\\z"}, ["abc"]),
    ("s", {"$regex": "^a.c\\z", "$options": "s"}, ["abc", "a\nc"]),
    ("x", {"$regex": "^ a b c $  # comment", "$options": "x"}, ["abc", "abc\n"]),
    ("x keeps escaped space", {"$regex": "^a\\ b$", "$options": "x"}, ["a b"]),
    ("u changes nothing", {"$regex": "^caf.$", "$options": "u"}, ["café"]),
    ("a regex value's flags", Regex("^ABC$", "im"), ["ABC", "abc", "x\nabc", "abc\n"]),
    ("possessive quantifier", {"$regex": "^a++b\\z"}, ["aaab"]),
    ("possessive never gives back", {"$regex": "^a++ab"}, []),
    ("atomic group", {"$regex": "^(?>a+)b\\z"}, ["aaab"]),
    ("atomic group never gives back", {"$regex": "^(?>a+)ab"}, []),
    ("\\z is the very end", {"$regex": "abc\\z"}, ["abc", "x\nabc"]),
    ("\\Z allows a final newline", {"$regex": "abc\\Z"}, ["abc", "x\nabc", "abc\n"]),
    ("named group and \\k", {"$regex": "^(?<y>\\d{4})-(?<m>\\d\\d)-\\d\\d$"}, ["2024-01-31"]),
    ("named backreference", {"$regex": "^(?<c>a)\\k<c>"}, ["aaab"]),
    ("\\x{..} code point", {"$regex": "caf\\x{e9}"}, ["café"]),
    ("\\Q..\\E quotes", {"$regex": "^\\Qa.b\\E$"}, ["a.b"]),
    ("Unicode property", {"$regex": "^\\p{Lu}$"}, ["A"]),
    ("\\w is ASCII without UCP", {"$regex": "^\\w$"}, ["A"]),
    ("(*UCP) makes \\w Unicode", {"$regex": "(*UCP)^\\w$"}, ["A", "ü"]),
    ("lookbehind", {"$regex": "(?<=caf)é"}, ["café"]),
]


@pytest.mark.parametrize(
    "query, expected", [c[1:] for c in SEMANTICS], ids=[c[0] for c in SEMANTICS]
)
def test_option_and_syntax_semantics(
    mongo_db: Database[dict[str, Any]], query: Any, expected: list[str]
) -> None:
    mongo_db.s.insert_many([{"_id": i, "s": s} for i, s in enumerate(STRINGS)])
    found = [d["s"] for d in mongo_db.s.find({"s": query}).sort("_id", 1)]
    assert found == expected


# -- errors ---------------------------------------------------------------------------------------

COMPILE_ERRORS = [
    ("(", "missing closing parenthesis"),
    ("[a", "missing terminating ] for character class"),
    ("a{2,1}", "numbers out of order in {} quantifier"),
    ("*a", "quantifier does not follow a repeatable item"),
    ("(?<n>a)(?<n>b)", "two named subpatterns have the same name (PCRE2_DUPNAMES not set)"),
    ("\\u0041", "PCRE2 does not support \\F, \\L, \\l, \\N{name}, \\U, or \\u"),
]


@pytest.mark.parametrize("pattern, reason", COMPILE_ERRORS)
def test_compile_errors(mongo_db: Database[dict[str, Any]], pattern: str, reason: str) -> None:
    with pytest.raises(OperationFailure) as exc:
        mongo_db.c.find_one({"s": {"$regex": pattern}})
    assert _error(exc) == (51091, "Location51091", f"Regular expression is invalid: {reason}")
    with pytest.raises(OperationFailure) as exc:
        mongo_db.c.find_one({"s": Regex(pattern, "i")})
    assert _error(exc) == (51091, "Location51091", f"Regular expression is invalid: {reason}")
    mongo_db.c.insert_one({"s": "x"})
    with pytest.raises(OperationFailure) as exc:
        mongo_db.c.aggregate(
            [{"$project": {"m": {"$regexMatch": {"input": "$s", "regex": pattern}}}}]
        ).to_list()
    assert _error(exc) == (51111, "Location51111", f"Invalid Regex in $regexMatch: {reason}")


def test_bad_option_letters(mongo_db: Database[dict[str, Any]]) -> None:
    with pytest.raises(OperationFailure) as exc:
        mongo_db.c.find_one({"s": {"$regex": "a", "$options": "ig"}})
    assert _error(exc) == (51108, "Location51108", " invalid flag in regex options: g")
    # A BSON regex's flags are checked the same way ("l", Python's LOCALE, has no MongoDB meaning).
    with pytest.raises(OperationFailure) as exc:
        mongo_db.c.find_one({"s": Regex("a", "l")})
    assert _error(exc) == (51108, "Location51108", " invalid flag in regex options: l")
    mongo_db.c.insert_one({"s": "x"})
    with pytest.raises(OperationFailure) as exc:
        mongo_db.c.aggregate(
            [{"$project": {"m": {"$regexFind": {"input": "$s", "regex": "a", "options": "z"}}}}]
        ).to_list()
    assert _error(exc) == (51108, "Location51108", "$regexFind invalid flag in regex options: z")


# -- the expressions ------------------------------------------------------------------------------


def test_regex_expressions_on_pcre2(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.e.insert_one({"_id": 1, "s": "Ünïcode 2024-01-31 and 1999-12-25"})
    date = "(?<y>\\d{4})-(?<m>\\d\\d)-(?<d>\\d\\d)"
    [doc] = mongo_db.e.aggregate(
        [
            {
                "$project": {
                    "_id": 0,
                    "match": {"$regexMatch": {"input": "$s", "regex": "^ü", "options": "i"}},
                    "ascii_w": {"$regexMatch": {"input": "$s", "regex": "^\\w"}},
                    "find": {"$regexFind": {"input": "$s", "regex": date}},
                    "all": {"$regexFindAll": {"input": "$s", "regex": Regex("\\d++(?=-)")}},
                    "atomic": {"$regexFind": {"input": "$s", "regex": "(?>\\d+)-\\d"}},
                    "x": {"$regexFind": {"input": "$s", "regex": "a n d  # words", "options": "x"}},
                }
            }
        ]
    ).to_list()
    assert doc == {
        "match": True,
        "ascii_w": False,
        "find": {"match": "2024-01-31", "idx": 8, "captures": ["2024", "01", "31"]},
        "all": [
            {"match": "2024", "idx": 8, "captures": []},
            {"match": "01", "idx": 13, "captures": []},
            {"match": "1999", "idx": 23, "captures": []},
            {"match": "12", "idx": 28, "captures": []},
        ],
        "atomic": {"match": "2024-0", "idx": 8, "captures": []},
        "x": {"match": "and", "idx": 19, "captures": []},
    }
