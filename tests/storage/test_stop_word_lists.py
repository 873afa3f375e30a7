"""Text search's stop words without a server (storage/query/stop_words.py, as text_search.terms
uses them): mongod's lists per language, checked on the lower-cased word with its diacritics,
before stemming, in documents and in searches alike."""

from __future__ import annotations

import pytest

from ebbdb.storage.query.stop_words import STOP_WORDS, stop_words
from ebbdb.storage.query.text_search import LANGUAGES, TextArgs, terms

#: The size of each of mongod's stop_words_<language>.txt (distinct words).
SIZES = {
    "danish": 94,
    "dutch": 101,
    "english": 174,
    "finnish": 229,
    "french": 249,
    "german": 231,
    "hungarian": 198,
    "italian": 279,
    "norwegian": 218,
    "portuguese": 203,
    "russian": 155,
    "spanish": 308,
    "swedish": 114,
    "turkish": 113,
}


def test_every_list_is_mongods() -> None:
    assert {language: len(words) for language, words in STOP_WORDS.items()} == SIZES
    assert set(STOP_WORDS) == set(LANGUAGES.values()) - {"none", "romanian"}


def test_languages_without_a_list() -> None:
    assert stop_words("none") == frozenset()
    assert stop_words("romanian") == frozenset()  # mongod ships no Romanian list
    assert terms("și care este", "romanian") == ["si", "car", "este"]  # stemmed, folded


@pytest.mark.parametrize(
    ("language", "stopped", "kept"),
    [
        # mongod's English list, not NLTK's: "could", "cannot" and contractions stop; "can",
        # "will", "just" and "now" do not.
        ("english", ["could", "would", "ought", "cannot", "can't", "i'm", "let's", "the"], []),
        ("english", [], ["can", "will", "just", "now", "don", "s", "t"]),
        ("french", ["être", "été", "à", "ça", "les"], ["etre", "ete"]),
        ("german", ["daß", "für", "über", "und"], ["fur"]),
        ("spanish", ["él", "más", "los"], ["mas"]),
        # The lists as mongod has them: Turkish in the wrong encoding, Russian missing letters.
        ("turkish", ["ve", "þey", "bir"], ["şey"]),
        ("russian", ["и", "еловек", "осле"], ["человек", "после"]),
        ("hungarian", ["õ", "és"], ["ő"]),
    ],
)
def test_stop_words(language: str, stopped: list[str], kept: list[str]) -> None:
    for word in stopped:
        assert terms(word, language) == [], word
    for word in kept:
        assert terms(word, language) != [], word


def test_checked_lower_cased_with_diacritics() -> None:
    assert terms("THE Être", "english") == ["etre"]  # "the" stops; "être" is not English
    assert terms("ÊTRE Etre", "french") == ["etre"]  # only the accented one is a stop word
    assert terms("The cat", "english", case_sensitive=True) == ["cat"]


def test_stemmed_before_diacritics_are_dropped() -> None:
    # mongod stems "créée" with its accents, then drops them (stemming "creee" gives "cree").
    assert terms("créée mangées", "french") == ["cre", "mang"]
    assert terms("créée", "french", diacritic_sensitive=True) == ["cré"]


def test_turkish_lower_cases_the_dotted_and_dotless_i() -> None:
    assert terms("İÇİN", "turkish") == []  # "için", a stop word
    assert terms("BIR", "turkish") == ["bır"]  # a dotless ı: not "bir"


def test_searches_drop_stop_words_positive_and_negated() -> None:
    q = TextArgs("the coffee -and -cream", None, False, False).query("english")
    assert q.positive == ("coffe",)
    assert q.negated == frozenset({"cream"})
    only = TextArgs("the and of", None, False, False).query("english")
    assert only.positive == () and only.negated == frozenset()
    assert TextArgs("the and", "none", False, False).query("english").positive == ("the", "and")
