"""Text search's stop words through pymongo, as MongoDB documents them: a search made only of stop
words matches nothing, stop words in documents are not indexed, each document's language
(`language`, the index's `language_override`, `default_language`) picks its list, the search's
`$language` picks the query's, and "none" has no stop words (nor stemming). The lists are
mongod's own, so words NLTK's lists stop and mongod's do not are found, and the other way round."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import MongoClient

Client = MongoClient[dict[str, Any]]

# The quotes collection of MongoDB's "Specify the Language of a Text Index" page.
QUOTES = [
    {
        "_id": 1,
        "language": "portuguese",
        "original": "A sorte protege os audazes.",
        "translation": [
            {"language": "english", "quote": "Fortune favors the bold."},
            {"language": "spanish", "quote": "La suerte protege a los audaces."},
        ],
    },
    {
        "_id": 2,
        "language": "spanish",
        "original": "Nada hay más surrealista que la realidad.",
        "translation": [
            {"language": "english", "quote": "There is nothing more surreal than reality."},
            {"language": "french", "quote": "Il n'y a rien de plus surréaliste que la réalité."},
        ],
    },
    {
        "_id": 3,
        "original": "is this a dagger which I see before me.",
        "translation": {"language": "spanish", "quote": "Es este un puñal que veo delante de mí."},
    },
]


@pytest.fixture
def quotes(client: Client) -> Any:
    coll = client.stopwords.quotes
    coll.insert_many(QUOTES)
    coll.create_index([("original", "text"), ("translation.quote", "text")])
    return coll


def ids(coll: Any, search: str, language: str | None = None) -> list[int]:
    text: dict[str, Any] = {"$search": search}
    if language is not None:
        text["$language"] = language
    return sorted(d["_id"] for d in coll.find({"$text": text}))


def test_documented_language_per_document(quotes: Any) -> None:
    # Each string is read in its (sub)document's language: "protege" is Portuguese and Spanish.
    assert ids(quotes, "protege", "spanish") == [1]
    assert ids(quotes, "dagger") == [3]
    assert ids(quotes, "nothing") == [2]
    assert ids(quotes, "puñal", "spanish") == [3]


def test_a_search_of_stop_words_matches_nothing(quotes: Any) -> None:
    assert ids(quotes, "is this a which before me") == []
    assert ids(quotes, "the than there") == []
    assert ids(quotes, "que la de", "spanish") == []


def test_stop_words_of_a_documents_language_are_not_indexed(quotes: Any) -> None:
    # "os" and "a" are Portuguese stop words in document 1's original; "nada" and "hay" Spanish
    # ones in document 2's; read with no stemming and no stop words of its own ("none"), the
    # search is for exactly those words, and no index key holds them.
    assert ids(quotes, "os", "none") == []
    assert ids(quotes, "nada hay", "none") == []
    # Words that are not stop words there are indexed (stemmed in the document's language).
    assert ids(quotes, "sorte", "portuguese") == [1]
    assert ids(quotes, "surrealista", "spanish") == [2]
    # Document 3's original is English (the index's default): "this" and "which" are stopped,
    # "dagger" is kept; its Spanish translation stops "este", keeps "puñal" (stemmed "puñal").
    assert ids(quotes, "este", "none") == []
    assert ids(quotes, "delante", "spanish") == [3]


def test_negated_stop_words_are_dropped(quotes: Any) -> None:
    assert ids(quotes, "dagger -the -is") == [3]


def test_default_language_and_language_override(client: Client) -> None:
    coll = client.stopwords.notes
    coll.insert_many(
        [
            {"_id": 1, "body": "der Hund und die Katze"},
            {"_id": 2, "body": "the dog and the cat", "lang": "english"},
            {"_id": 3, "body": "the dog and the cat", "lang": "none"},
        ]
    )
    coll.create_index([("body", "text")], default_language="german", language_override="lang")
    assert ids(coll, "und die", "german") == []  # German stop words, in a German document
    assert ids(coll, "hund", "german") == [1]
    assert ids(coll, "the and", "none") == [3]  # "none" indexed every word of document 3
    assert ids(coll, "the and", "english") == []  # an English search drops its stop words
    assert ids(coll, "dog", "english") == [2, 3]


def test_none_has_no_stop_words(client: Client) -> None:
    coll = client.stopwords.plain
    coll.insert_many([{"_id": 1, "t": "to be or not to be"}, {"_id": 2, "t": "the running men"}])
    coll.create_index([("t", "text")], default_language="none")
    assert ids(coll, "be") == [1]
    assert ids(coll, "the") == [2]
    assert ids(coll, "run") == []  # nor stemming: "running" is kept whole
    assert ids(coll, "running") == [2]


def test_mongods_lists_not_nltks(client: Client) -> None:
    coll = client.stopwords.words
    coll.insert_many(
        [
            {"_id": 1, "t": "you can will it just now"},
            {"_id": 2, "t": "it could be, I cannot say"},
            {"_id": 3, "t": "être ou ne pas etre", "language": "french"},
            {"_id": 4, "t": "bu şey ve o", "language": "turkish"},
            {"_id": 5, "t": "și acum", "language": "romanian"},
        ]
    )
    coll.create_index([("t", "text")])
    # mongod's English list stops "could" and "cannot" but not "can", "will", "just", "now".
    assert ids(coll, "can") == [1]
    assert ids(coll, "will just now") == [1]
    assert ids(coll, "could cannot") == []
    # French: "être" (with its accent) is a stop word, "etre" is not.
    assert ids(coll, "être", "french") == []
    assert ids(coll, "etre", "french") == [3]
    # Turkish: mongod's list holds "þey", not "şey"; "ve" and "bu" stop.
    assert ids(coll, "şey", "turkish") == [4]
    assert ids(coll, "ve bu", "turkish") == []
    # Romanian has no list in mongod: "și" is a word like any other.
    assert ids(coll, "și", "romanian") == [5]
