"""Text search without a server: tokenizing, folding, stop words and stemming per language, the
`$search` string's reading, which strings an index reads, scores, and the text index kind's
key pattern and options (storage/query/text_search.py, storage/indexes/index_kinds/text.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ebbdb.storage.indexes.index_kinds.text import check, stored_key
from ebbdb.storage.indexes.specs import parse_index_spec
from ebbdb.storage.query.text_search import (
    TextSpec,
    fold,
    language_named,
    parse_text,
    terms,
    tokens,
)
from tests.helpers import query_error


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello, world!", ["Hello", "world"]),
        ("coffee-shop's  menu", ["coffee", "shop", "s", "menu"]),
        ("snake_case and x1y2", ["snake_case", "and", "x1y2"]),
        ("Café\tcrème\nbrûlée", ["Café", "crème", "brûlée"]),
        ("«Сырники»—вкусно", ["Сырники", "вкусно"]),
        ("", []),
        ("...", []),
    ],
)
def test_tokens(text: str, expected: list[str]) -> None:
    assert tokens(text) == expected


def test_english_words_keep_apostrophes() -> None:
    assert tokens("coffee-shop's menu", "english") == ["coffee", "shop's", "menu"]
    assert terms("Don't stop the coffee's aroma", "english") == ["stop", "coffe", "aroma"]


@pytest.mark.parametrize(
    ("text", "case", "diacritic", "expected"),
    [
        ("Crème Brûlée", False, False, "creme brulee"),
        ("Crème Brûlée", True, False, "Creme Brulee"),
        ("Crème Brûlée", False, True, "crème brûlée"),
        ("Crème Brûlée", True, True, "Crème Brûlée"),
        ("ÉCOLE", False, False, "ecole"),
    ],
)
def test_fold(text: str, case: bool, diacritic: bool, expected: str) -> None:
    assert fold(text, case, diacritic) == expected


@pytest.mark.parametrize(
    ("text", "language", "expected"),
    [
        # Stop words go, the rest is stemmed (Snowball's English stemmer).
        ("The runners were running to the shops", "english", ["runner", "run", "shop"]),
        ("Baking cakes", "english", ["bake", "cake"]),
        # "none": no stop words, no stemming.
        ("The runners were running", "none", ["the", "runners", "were", "running"]),
        # Spanish stop words and stemmer.
        ("Los gatos y las casas", "spanish", ["gat", "cas"]),
        ("Die Häuser und die Katzen", "german", ["haus", "katz"]),
        ("Les maisons et les chats", "french", ["maison", "chat"]),
    ],
)
def test_terms(text: str, language: str, expected: list[str]) -> None:
    assert terms(text, language) == expected


def test_terms_case_sensitive_keeps_case() -> None:
    assert terms("Coffee coffee", "english", case_sensitive=True) == ["Coffe", "coffe"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("english", "english"),
        ("EN", "english"),
        ("Spanish", "spanish"),
        ("es", "spanish"),
        ("nb", "norwegian"),
        ("none", "none"),
        ("klingon", None),
        ("", None),
    ],
)
def test_language_named(name: str, expected: str | None) -> None:
    assert language_named(name) == expected


def test_search_reading() -> None:
    q = parse_text({"$search": 'coffee -shop "ice cream" -"hot chocolate" tea-cake'}).query(
        "english"
    )
    assert q.positive == ("coffe", "ice", "cream", "tea", "cake")
    assert q.negated == frozenset({"shop"})
    assert q.phrases == ("ice cream",)
    assert q.negated_phrases == ("hot chocolate",)
    assert q.index_terms == q.positive


def test_search_stop_words_only_has_no_terms() -> None:
    q = parse_text({"$search": "the and of"}).query("english")
    assert q.positive == ()


def test_search_language_and_sensitivity() -> None:
    q = parse_text({"$search": "Gatos", "$language": "es", "$caseSensitive": True}).query("english")
    assert (q.language, q.positive, q.index_terms) == ("spanish", ("Gat",), ("gat",))


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("x", "$text expects an object"),
        ({}, "$search required and must be a string"),
        ({"$search": 1}, "$search required and must be a string"),
        ({"$search": "x", "$language": 1}, "$language must be a string"),
        ({"$search": "x", "$language": "xx"}, 'unsupported language: "xx" for $language'),
        ({"$search": "x", "$caseSensitive": 1}, "$caseSensitive must be a boolean"),
        ({"$search": "x", "$diacriticSensitive": "y"}, "$diacriticSensitive must be a boolean"),
        ({"$search": "x", "$foo": 1}, "extra fields in $text: $foo"),
    ],
)
def test_parse_text_errors(arg: Any, message: str) -> None:
    assert query_error(parse_text, arg) == ("BadValue", message)


SPEC = TextSpec((("body", 1.0), ("title", 10.0)), False, "english", "language")


def test_strings_read_weighted_paths_through_arrays() -> None:
    doc = {"title": "A", "body": ["B", {"x": "C"}], "other": "D", "sub": {"title": "E"}}
    assert list(SPEC.strings(doc)) == [("A", 10.0, "english"), ("B", 1.0, "english")]


def test_strings_nested_paths_and_language_override() -> None:
    spec = TextSpec((("a.b", 1.0),), False, "english", "lang")
    doc = {"lang": "es", "a": [{"b": "uno"}, {"b": "dos", "lang": "fr"}]}
    assert list(spec.strings(doc)) == [("uno", 1.0, "spanish"), ("dos", 1.0, "french")]


def test_wildcard_reads_every_string() -> None:
    spec = TextSpec((("t", 3.0),), True, "english", "language")
    doc = {"t": "x", "n": 5, "d": {"e": ["y", {"f": "z"}]}}
    assert list(spec.strings(doc)) == [
        ("x", 3.0, "english"),
        ("y", 1.0, "english"),
        ("z", 1.0, "english"),
    ]


def test_language_override_errors() -> None:
    assert query_error(list, SPEC.strings({"language": "xx", "title": "a"})) == (
        "Location17262",
        "language override unsupported: xx",
    )
    assert query_error(list, SPEC.strings({"language": 1, "title": "a"})) == (
        "Location17261",
        "found language override field in document with non-string type",
    )


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        # MongoDB's documented scores for these strings ($text's example collection).
        ({"body": "coffee"}, {"coffe": 1.0}),
        ({"body": "Coffee Shopping"}, {"coffe": 0.75, "shop": 0.75}),
        ({"body": "coffee and cream"}, {"coffe": 0.75, "cream": 0.75}),
        # A repeat counts half the one before; the string that is the word gets 1.1.
        ({"body": "tea tea"}, {"tea": 1.5 * 1.0}),
        ({"body": "tea"}, {"tea": 1.1}),
        # Weights multiply, fields add up.
        ({"title": "tea", "body": "tea"}, {"tea": 11.0 + 1.1}),
    ],
)
def test_term_scores(doc: dict[str, Any], expected: dict[str, float]) -> None:
    assert SPEC.term_scores(doc) == pytest.approx(expected)


def test_matches_and_score() -> None:
    q = parse_text({"$search": 'coffee -cream "coffee shop"'}).query("english")
    assert SPEC.matches(q, {"body": "Coffee Shopping"})
    assert not SPEC.matches(q, {"body": "coffee and cream shop"})
    assert not SPEC.matches(q, {"body": "coffee"})  # the phrase is missing
    assert SPEC.score(q, {"body": "Coffee Shopping"}) == pytest.approx(1.5)


def test_check_fills_defaults_and_weights_sorted() -> None:
    key = (("z", "text"), ("a", "text"))
    assert check(key, {"weights": {"z": 3}}) == {
        "weights": {"a": 1, "z": 3},
        "default_language": "english",
        "language_override": "language",
        "textIndexVersion": 3,
    }
    assert stored_key(key) == (("_fts", "text"), ("_ftsx", 1))
    assert stored_key((("p", 1), ("t", "text"), ("s", -1))) == (
        ("p", 1),
        ("_fts", "text"),
        ("_ftsx", 1),
        ("s", -1),
    )


@pytest.mark.parametrize(
    ("key", "options", "code", "message"),
    [
        (
            (("a", "text"), ("b", 1), ("c", "text")),
            {},
            17389,
            "'text' fields in index must all be adjacent",
        ),
        (
            (("a", 2), ("b", "text")),
            {},
            17273,
            "expected value 1 or -1 for non-text key in compound index",
        ),
        ((("_fts", 1), ("b", "text")), {}, 17271, 'expecting _fts:"text"'),
        (
            (("a", "text"),),
            {"weights": {"a": "x"}},
            17283,
            "weight for text index needs numeric type",
        ),
        ((("a", "text"),), {"weights": 5}, 17284, "text index option 'weights' must be an object"),
        ((("a", "text"),), {"weights": {"a": 0}}, 16674, "score for word too high"),
        ((("a", "text"),), {"weights": {"a": 100000}}, 16674, "score for word too high"),
        (
            (("a", "text"),),
            {"weights": {"b.$c": 1}},
            17292,
            "weight cannot have path component with $ prefix",
        ),
        ((("a", "text"),), {"default_language": 5}, 17263, "default_language needs a string type"),
        ((("a", "text"),), {"default_language": "xx"}, 17264, "default_language is not valid: xx"),
        ((("a", "text"),), {"language_override": "$x"}, 17136, "language_override is not valid"),
        ((("a", "text"),), {"language_override": "a.b"}, 17136, "language_override is not valid"),
        (
            (("a", "text"),),
            {"textIndexVersion": "3"},
            17293,
            "text index option 'textIndexVersion' must be a number",
        ),
        ((("a", "text"),), {"textIndexVersion": 2}, 16730, "bad textIndexVersion: 2"),
    ],
)
def test_check_errors(key: Any, options: dict[str, Any], code: int, message: str) -> None:
    assert query_error(check, key, options) == (f"Location{code}", message)


def test_check_refuses_ttl_and_collation() -> None:
    key = (("a", "text"),)
    assert query_error(check, key, {"expireAfterSeconds": 10}) == (
        "CannotCreateIndex",
        "TTL indexes are single-field indexes, compound indexes do not support TTL.",
    )
    # The collation is checked for every kind that compares by bytes, by the spec parser.
    spec = {"key": {"a": "text"}, "collation": {"locale": "fr"}}
    code, _ = query_error(parse_index_spec, spec)
    assert code == "CannotCreateIndex"
    simple = parse_index_spec({"key": {"a": "text"}, "collation": {"locale": "simple"}})
    assert "collation" not in simple.options


def test_unbound_text_matching_is_index_not_found() -> None:
    from ebbdb.storage.query.match import compile_filter

    pred = compile_filter({"$text": {"$search": "x"}})
    assert query_error(pred, {"a": "x"}) == ("IndexNotFound", "text index required for $text query")
