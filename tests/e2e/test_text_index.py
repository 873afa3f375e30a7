"""Text indexes and `$text` through pymongo against the real server: listIndexes' shape, MongoDB's
creation errors (one text index per collection, no TTL), `$search` (terms, stemming, stop words,
phrases, negation), `$language` and the per-document language override, case and diacritic
sensitivity, `{$meta: "textScore"}` in find's projection and sort and in aggregation, weights,
compound text indexes, the query rules and their codes, explain's TEXT_MATCH, and index upkeep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

Client = MongoClient[dict[str, Any]]

# The collection of MongoDB's $text reference page.
ARTICLES = [
    {"_id": 1, "subject": "coffee", "author": "xyz", "views": 50},
    {"_id": 2, "subject": "Coffee Shopping", "author": "efg", "views": 5},
    {"_id": 3, "subject": "Baking a cake", "author": "abc", "views": 90},
    {"_id": 4, "subject": "baking", "author": "xyz", "views": 100},
    {"_id": 5, "subject": "Café Con Leche", "author": "abc", "views": 200},
    {"_id": 6, "subject": "Сырники", "author": "jkl", "views": 80},
    {"_id": 7, "subject": "coffee and cream", "author": "efg", "views": 10},
    {"_id": 8, "subject": "Cafe con Leche", "author": "xyz", "views": 10},
]


def failure(fn: Callable[[], Any]) -> tuple[int, str]:
    with pytest.raises(OperationFailure) as info:
        fn()
    details = info.value.details or {}
    return int(info.value.code or 0), str(details.get("errmsg"))


@pytest.fixture
def articles(client: Client) -> Any:
    coll = client.textdb.articles
    coll.drop()
    coll.insert_many(ARTICLES)
    coll.create_index([("subject", "text")])
    return coll


def ids(coll: Any, search: dict[str, Any], flt: dict[str, Any] | None = None) -> list[int]:
    return sorted(d["_id"] for d in coll.find({"$text": search, **(flt or {})}))


# -- creating and listing ---------------------------------------------------------------------------


def test_list_indexes_shape(articles: Any) -> None:
    spec = dict(articles.index_information()["subject_text"])
    assert spec == {
        "v": 2,
        "key": [("_fts", "text"), ("_ftsx", 1)],
        "weights": {"subject": 1},
        "default_language": "english",
        "language_override": "language",
        "textIndexVersion": 3,
    }


def test_compound_and_weights_shape(client: Client) -> None:
    coll = client.textdb.compound
    coll.drop()
    name = coll.create_index(
        [("a", 1), ("title", "text"), ("body", "text"), ("z", -1)],
        weights={"title": 10},
        default_language="spanish",
        language_override="idioma",
    )
    assert name == "a_1_title_text_body_text_z_-1"
    listed = [ix for ix in coll.list_indexes() if ix["name"] == name][0]
    assert dict(listed) == {
        "v": 2,
        "key": {"a": 1, "_fts": "text", "_ftsx": 1, "z": -1},
        "name": name,
        "weights": {"body": 1, "title": 10},
        "default_language": "spanish",
        "language_override": "idioma",
        "textIndexVersion": 3,
    }
    assert list(listed["key"]) == ["a", "_fts", "_ftsx", "z"]
    assert list(listed["weights"]) == ["body", "title"]


def test_wildcard_text_index(client: Client) -> None:
    coll = client.textdb.wild
    coll.drop()
    coll.insert_many(
        [
            {"_id": 1, "a": "red apple", "n": {"deep": ["green pear"]}},
            {"_id": 2, "b": {"c": "yellow banana"}},
            {"_id": 3, "d": 5},
        ]
    )
    assert coll.create_index([("$**", "text")]) == "$**_text"
    listed = [ix for ix in coll.list_indexes() if ix["name"] == "$**_text"][0]
    assert listed["weights"] == {"$**": 1}
    assert ids(coll, {"$search": "pears"}) == [1]
    assert ids(coll, {"$search": "banana apple"}) == [1, 2]


def test_same_text_index_again_is_a_no_op(articles: Any) -> None:
    assert articles.create_index([("subject", "text")]) == "subject_text"
    assert len(list(articles.list_indexes())) == 2


def test_one_text_index_per_collection(articles: Any) -> None:
    message = 'only one text index per collection allowed, found existing text index "subject_text"'
    assert failure(lambda: articles.create_index([("author", "text")])) == (67, message)
    assert failure(
        lambda: articles.create_index([("subject", "text")], weights={"subject": 5}, name="other")
    ) == (67, message)
    assert failure(lambda: articles.create_index([("subject", "text")], name="other")) == (
        85,
        "Index already exists with a different name: subject_text",
    )


@pytest.mark.parametrize(
    ("keys", "options", "code", "message"),
    [
        (
            [("a", "text"), ("b", 1), ("c", "text")],
            {},
            17389,
            "'text' fields in index must all be adjacent",
        ),
        (
            [("a", 2), ("b", "text")],
            {},
            17273,
            "expected value 1 or -1 for non-text key in compound index",
        ),
        (
            [("a", "text")],
            {"weights": {"a": "x"}},
            17283,
            "weight for text index needs numeric type",
        ),
        ([("a", "text")], {"weights": 3}, 17284, "text index option 'weights' must be an object"),
        (
            [("a", "text")],
            {"default_language": "klingon"},
            17264,
            "default_language is not valid: klingon",
        ),
        ([("a", "text")], {"language_override": "$x"}, 17136, "language_override is not valid"),
        ([("a", "text")], {"textIndexVersion": 1}, 16730, "bad textIndexVersion: 1"),
        # MongoDB stores the key {_fts: "text", _ftsx: 1}: two fields, never a TTL index.
        (
            [("a", "text")],
            {"expireAfterSeconds": 10},
            67,
            "TTL indexes are single-field indexes, compound indexes do not support TTL.",
        ),
    ],
)
def test_creation_errors(
    client: Client, keys: list[Any], options: dict[str, Any], code: int, message: str
) -> None:
    coll = client.textdb.bad
    coll.drop()
    coll.insert_one({"a": "x"})
    assert failure(lambda: coll.create_index(keys, **options)) == (code, message)
    assert [ix["name"] for ix in coll.list_indexes()] == ["_id_"]


def test_drop_by_name_and_by_stored_key(client: Client, articles: Any) -> None:
    db = client.textdb
    assert (
        failure(lambda: db.command("dropIndexes", "articles", index={"subject": "text"}))[0] == 27
    )
    db.command("dropIndexes", "articles", index={"_fts": "text", "_ftsx": 1})
    assert [ix["name"] for ix in articles.list_indexes()] == ["_id_"]
    articles.create_index([("subject", "text")], name="s")
    articles.drop_index("s")
    assert [ix["name"] for ix in articles.list_indexes()] == ["_id_"]


def test_existing_documents_indexed_with_bad_language_fail_the_build(client: Client) -> None:
    coll = client.textdb.badlang
    coll.drop()
    coll.insert_one({"t": "hola", "language": "klingon"})
    code, message = failure(lambda: coll.create_index([("t", "text")]))
    assert (code, message) == (17262, "language override unsupported: klingon")


# -- $search ----------------------------------------------------------------------------------------


def test_terms_are_ored_and_stemmed(articles: Any) -> None:
    assert ids(articles, {"$search": "coffee"}) == [1, 2, 7]
    assert ids(articles, {"$search": "bake coffee cake"}) == [1, 2, 3, 4, 7]
    assert ids(articles, {"$search": "COFFEES"}) == [1, 2, 7]


def test_stop_words_match_nothing(articles: Any) -> None:
    assert ids(articles, {"$search": "a and the"}) == []


def test_phrases_and_negation(articles: Any) -> None:
    assert ids(articles, {"$search": '"coffee shop"'}) == [2]
    assert ids(articles, {"$search": 'cake "coffee shop"'}) == [2]
    assert ids(articles, {"$search": "coffee -shop"}) == [1, 7]
    assert ids(articles, {"$search": 'coffee -"and cream"'}) == [1, 2]
    assert ids(articles, {"$search": "-coffee"}) == []  # negations alone match nothing
    assert ids(articles, {"$search": "coffee-shop"}) == [1, 2, 7]  # a hyphen inside a word splits


def test_diacritics_and_case(articles: Any) -> None:
    assert ids(articles, {"$search": "CAFÉ"}) == [5, 8]
    assert ids(articles, {"$search": "CAFÉ", "$diacriticSensitive": True}) == [5]
    assert ids(articles, {"$search": "cafe", "$diacriticSensitive": True}) == [8]
    assert ids(articles, {"$search": "Café", "$diacriticSensitive": True}) == [5]
    assert ids(articles, {"$search": "Coffee", "$caseSensitive": True}) == [2]
    assert ids(articles, {"$search": '"Café Con"', "$caseSensitive": True}) == [5]
    assert ids(articles, {"$search": "сырники"}) == [6]


def test_language_option(articles: Any) -> None:
    assert ids(articles, {"$search": "leche", "$language": "es"}) == [5, 8]
    # "none" neither stems nor stops: its terms must be as the index (English here) holds them.
    assert ids(articles, {"$search": "con", "$language": "none"}) == [5, 8]
    assert ids(articles, {"$search": "baking", "$language": "none"}) == []
    assert failure(lambda: ids(articles, {"$search": "x", "$language": "klingon"})) == (
        2,
        'unsupported language: "klingon" for $language',
    )


def test_language_override_per_document(client: Client) -> None:
    coll = client.textdb.quotes
    coll.drop()
    coll.create_index([("q", "text")])
    coll.insert_many(
        [
            {"_id": 1, "q": "Las casas blancas", "language": "spanish"},
            {"_id": 2, "q": "Las casas blancas"},  # english: "casas" stems to "casa"
            {"_id": 3, "q": "The white houses", "language": "none"},
        ]
    )
    assert ids(coll, {"$search": "casa", "$language": "spanish"}) == [1]
    assert ids(coll, {"$search": "las"}) == [2]  # a Spanish stop word, not an English one
    assert ids(coll, {"$search": "houses", "$language": "none"}) == [3]
    assert ids(coll, {"$search": "the", "$language": "none"}) == [3]
    with pytest.raises(WriteError) as info:
        coll.insert_one({"q": "x", "language": "klingon"})
    assert (info.value.code, info.value.details["errmsg"]) == (
        17262,
        "language override unsupported: klingon",
    )
    with pytest.raises(BulkWriteError) as bulk:
        coll.insert_many([{"q": "y", "language": 7}])
    assert bulk.value.details["writeErrors"][0]["code"] == 17261
    assert coll.count_documents({}) == 3


# -- scores -----------------------------------------------------------------------------------------


def test_text_score_projection_and_sort(articles: Any) -> None:
    found = list(
        articles.find(
            {"$text": {"$search": "coffee"}},
            {"subject": 1, "score": {"$meta": "textScore"}},
        ).sort([("score", {"$meta": "textScore"}), ("_id", 1)])
    )
    assert found == [
        {"_id": 1, "subject": "coffee", "score": 1.0},
        {"_id": 2, "subject": "Coffee Shopping", "score": 0.75},
        {"_id": 7, "subject": "coffee and cream", "score": 0.75},
    ]
    # The score alone keeps every field; sorting needs no projection of it.
    first = articles.find_one({"$text": {"$search": "coffee"}}, {"score": {"$meta": "textScore"}})
    assert first is not None and set(first) == {"_id", "subject", "author", "views", "score"}
    by_score = articles.find({"$text": {"$search": "cake baking"}}, {"_id": 1}).sort(
        [("s", {"$meta": "textScore"}), ("_id", 1)]
    )
    assert [d["_id"] for d in by_score] == [3, 4]  # two terms (1.5) before one (1.0)


def test_weights_raise_scores(client: Client) -> None:
    coll = client.textdb.weighted
    coll.drop()
    coll.create_index([("title", "text"), ("body", "text")], weights={"title": 10})
    coll.insert_many(
        [{"_id": 1, "title": "x", "body": "tea time"}, {"_id": 2, "title": "tea time", "body": "x"}]
    )
    found = coll.find({"$text": {"$search": "tea"}}, {"s": {"$meta": "textScore"}, "_id": 1})
    assert sorted((d["_id"], d["s"]) for d in found) == [(1, 0.75), (2, 7.5)]


def test_text_score_requires_text(articles: Any) -> None:
    message = "query requires text score metadata, but it is not available"
    assert failure(lambda: articles.find_one({}, {"s": {"$meta": "textScore"}})) == (40218, message)
    assert failure(lambda: list(articles.find({}).sort([("s", {"$meta": "textScore"})]))) == (
        40218,
        message,
    )
    assert failure(
        lambda: list(articles.aggregate([{"$project": {"s": {"$meta": "textScore"}}}]))
    ) == (40218, message)
    assert failure(lambda: articles.find_one({}, {"s": {"$meta": "nope"}})) == (
        17308,
        "Unsupported argument to $meta: nope",
    )


# -- aggregation ------------------------------------------------------------------------------------


def test_aggregate_match_sort_and_project_score(articles: Any) -> None:
    out = list(
        articles.aggregate(
            [
                {"$match": {"$text": {"$search": "coffee"}}},
                {"$sort": {"score": {"$meta": "textScore"}, "_id": -1}},
                {"$project": {"subject": 0, "author": 0, "views": 0}},
                {"$addFields": {"score": {"$meta": "textScore"}}},
                {"$match": {"score": {"$lt": 1}}},
            ]
        )
    )
    assert out == [{"_id": 7, "score": 0.75}, {"_id": 2, "score": 0.75}]


def test_aggregate_score_kept_through_project(articles: Any) -> None:
    out = list(
        articles.aggregate(
            [
                {"$match": {"$text": {"$search": "baking"}}},
                {"$project": {"_id": 1}},
                {"$sort": {"s": {"$meta": "textScore"}}},
                {"$group": {"_id": None, "n": {"$sum": 1}, "top": {"$first": "$_id"}}},
            ]
        )
    )
    assert out == [{"_id": None, "n": 2, "top": 4}]


def test_aggregate_text_only_first(articles: Any) -> None:
    message = "$match with $text is only allowed as the first pipeline stage"
    assert failure(
        lambda: list(articles.aggregate([{"$limit": 5}, {"$match": {"$text": {"$search": "x"}}}]))
    ) == (17313, message)
    assert failure(
        lambda: list(
            articles.aggregate([{"$facet": {"f": [{"$match": {"$text": {"$search": "x"}}}]}}])
        )
    ) == (17313, message)


# -- query rules ------------------------------------------------------------------------------------


def test_text_index_required(client: Client) -> None:
    coll = client.textdb.plain
    coll.drop()
    coll.insert_one({"a": "coffee"})
    assert failure(lambda: coll.find_one({"$text": {"$search": "coffee"}})) == (
        27,
        "text index required for $text query",
    )


def test_text_query_errors(articles: Any) -> None:
    assert failure(
        lambda: articles.find_one(
            {"$and": [{"$text": {"$search": "a"}}, {"$text": {"$search": "b"}}]}
        )
    ) == (2, "Too many text expressions")
    assert failure(lambda: articles.find_one({"$nor": [{"$text": {"$search": "a"}}]})) == (
        2,
        "text expression not allowed in nor",
    )
    assert failure(
        lambda: articles.find_one({"a": {"$elemMatch": {"$text": {"$search": "a"}}}})
    ) == (2, "$text can only be applied to the top-level document")
    assert failure(lambda: articles.find_one({"a": {"$not": {"$text": {"$search": "a"}}}})) == (
        2,
        "unknown operator: $text",
    )
    code, _ = failure(lambda: articles.find_one({"$text": {"$search": "a"}}, hint="_id_"))
    assert code == 291


def test_text_under_or(articles: Any) -> None:
    message = (
        "error processing query: planner returned error :: caused by :: Failed to produce a "
        "solution for TEXT under OR - other non-TEXT clauses under OR have to be indexed as well."
    )
    flt = {"$or": [{"$text": {"$search": "cake"}}, {"views": 200}]}
    assert failure(lambda: articles.find_one(flt)) == (291, message)
    articles.create_index("views")
    assert sorted(d["_id"] for d in articles.find(flt)) == [3, 5]


def test_text_under_or_beside_an_indexed_geo_clause(client: Client) -> None:
    """A $geoWithin clause served by a 2dsphere index counts as indexed beside a $text."""
    coll = client.textdb.places
    coll.drop()
    coll.insert_many(
        [
            {"_id": 1, "s": "cake shop", "loc": {"type": "Point", "coordinates": [50, 50]}},
            {"_id": 2, "s": "tea room", "loc": {"type": "Point", "coordinates": [1, 1]}},
            {"_id": 3, "s": "tea room", "loc": {"type": "Point", "coordinates": [60, 60]}},
        ]
    )
    coll.create_index([("s", "text")])
    coll.create_index([("loc", "2dsphere")])
    square = {"type": "Polygon", "coordinates": [[[0, 0], [2, 0], [2, 2], [0, 2], [0, 0]]]}
    flt = {"$or": [{"$text": {"$search": "cake"}}, {"loc": {"$geoWithin": {"$geometry": square}}}]}
    assert sorted(d["_id"] for d in coll.find(flt)) == [1, 2]


def test_text_with_other_conditions(articles: Any) -> None:
    assert ids(articles, {"$search": "coffee"}, {"author": "efg"}) == [2, 7]
    assert ids(articles, {"$search": "coffee"}, {"views": {"$gte": 10}}) == [1, 7]


def test_compound_text_index_needs_prefix_equality(client: Client) -> None:
    coll = client.textdb.inventory
    coll.drop()
    coll.create_index([("dept", 1), ("description", "text")])
    coll.insert_many(
        [
            {"_id": 1, "dept": "tech", "description": "lime green computer"},
            {"_id": 2, "dept": "tech", "description": "wireless red mouse"},
            {"_id": 3, "dept": "kitchen", "description": "green placemat"},
            {"_id": 4, "dept": "kitchen", "description": "red peeler"},
        ]
    )
    assert ids(coll, {"$search": "green"}, {"dept": "kitchen"}) == [3]
    assert ids(coll, {"$search": "red"}, {"dept": {"$eq": "tech"}}) == [2]
    code, message = failure(lambda: coll.find_one({"$text": {"$search": "green"}}))
    assert (code, message) == (
        291,
        "error processing query: planner returned error :: caused by :: failed to use text "
        "index to satisfy $text query (if text index is compound, are equality predicates given "
        "for all prefix fields?)",
    )
    # The text index serves $text alone: a plain query on its prefix field scans the collection.
    plan = coll.find({"dept": "tech"}).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "COLLSCAN"
    assert sorted(d["_id"] for d in coll.find({"dept": "tech"})) == [1, 2]


def test_explain_text_match(articles: Any) -> None:
    plan = articles.find({"$text": {"$search": 'coffee -shop "coffee"'}}).explain()["queryPlanner"][
        "winningPlan"
    ]
    assert plan["stage"] == "TEXT_MATCH"
    assert plan["indexName"] == "subject_text"
    assert plan["parsedTextQuery"] == {
        "terms": ["coffe"],
        "negatedTerms": ["shop"],
        "phrases": ["coffee"],
        "negatedPhrases": [],
    }
    assert plan["inputStage"]["stage"] == "TEXT_OR"
    assert [s["stage"] for s in plan["inputStage"]["inputStages"]] == ["IXSCAN"]
    stats = articles.find({"$text": {"$search": "coffee"}}).explain()["executionStats"]
    assert stats["nReturned"] == 3
    assert stats["totalDocsExamined"] == 3  # only the documents holding the term


# -- writes and upkeep ------------------------------------------------------------------------------


def test_count_update_delete_with_text(articles: Any) -> None:
    assert articles.count_documents({"$text": {"$search": "coffee"}}) == 3
    assert (
        articles.update_many({"$text": {"$search": "bake"}}, {"$set": {"x": 1}}).modified_count == 2
    )
    assert sorted(d["_id"] for d in articles.find({"x": 1})) == [3, 4]
    assert articles.delete_one({"$text": {"$search": "shopping"}}).deleted_count == 1
    assert ids(articles, {"$search": "coffee"}) == [1, 7]
    assert sorted(articles.distinct("_id", {"$text": {"$search": "leche"}})) == [5, 8]


def test_index_follows_updates(articles: Any) -> None:
    articles.update_one({"_id": 1}, {"$set": {"subject": "green tea"}})
    assert ids(articles, {"$search": "coffee"}) == [2, 7]
    assert ids(articles, {"$search": "tea"}) == [1]
    articles.replace_one({"_id": 1}, {"subject": "espresso"})
    assert ids(articles, {"$search": "tea"}) == []
    assert ids(articles, {"$search": "espresso"}) == [1]
    articles.delete_many({})
    assert ids(articles, {"$search": "espresso"}) == []


def test_text_on_missing_collection(client: Client) -> None:
    client.textdb.nothing.drop()
    message = "text index required for $text query (no such collection 'textdb.nothing')"
    assert failure(lambda: client.textdb.nothing.find_one({"$text": {"$search": "x"}})) == (
        27,
        message,
    )
    pipeline = [{"$match": {"$text": {"$search": "x"}}}]
    assert failure(lambda: list(client.textdb.nothing.aggregate(pipeline))) == (27, message)


def test_partial_filter_with_text_refused(client: Client) -> None:
    coll = client.textdb.partial
    coll.drop()
    assert failure(
        lambda: coll.create_index("a", partialFilterExpression={"$text": {"$search": "x"}})
    ) == (67, "Expression not supported in partial index: $text")


def test_more_text_reads(client: Client, articles: Any) -> None:
    # $text with $expr in the first $match: the read does the $text, the stage the $expr.
    pipeline: list[dict[str, Any]] = [
        {"$match": {"$text": {"$search": "coffee"}, "$expr": {"$gt": ["$views", 5]}}},
        {"$sort": {"_id": 1}},
        {"$group": {"_id": None, "ids": {"$push": "$_id"}, "t": {"$sum": {"$meta": "textScore"}}}},
    ]
    assert list(articles.aggregate(pipeline)) == [{"_id": None, "ids": [1, 7], "t": 1.75}]
    explained = client.textdb.command(
        "explain",
        {"aggregate": "articles", "pipeline": [{"$match": {"$text": {"$search": "coffee"}}}]},
    )
    assert explained["queryPlanner"]["winningPlan"]["stage"] == "TEXT_MATCH"
    keys = list(articles.find({"$text": {"$search": "baking"}}, return_key=True).sort("_id", 1))
    assert keys == [{"_fts": "bake", "_ftsx": 0.75}, {"_fts": "bake", "_ftsx": 1.0}]
    code, message = failure(
        lambda: list(articles.find({"$text": {"$search": "coffee"}}).sort("$natural", 1))
    )
    assert (code, message) == (
        291,
        "error processing query: planner returned error :: caused by :: $natural sort cannot be "
        "used with a $text query",
    )


def test_upsert_with_text_query(articles: Any) -> None:
    result = articles.update_one({"$text": {"$search": "juice"}}, {"$set": {"x": 1}}, upsert=True)
    assert result.matched_count == 0 and result.upserted_id is not None
    assert articles.find_one({"_id": result.upserted_id}) == {"_id": result.upserted_id, "x": 1}


def test_text_index_and_collations(client: Client) -> None:
    """A text index compares by bytes: on a collection with a default collation MongoDB asks for
    an explicit simple one (an inherited collation used to make every $text find nothing)."""
    db = client.textdb
    db.create_collection("accents", collation={"locale": "en", "strength": 2})
    code, msg = failure(lambda: db.accents.create_index([("title", "text")]))
    assert code == 67
    assert msg.startswith("Index type 'text' does not support collation: { locale: \"en\"")
    code, _ = failure(lambda: db.plain.create_index([("t", "text")], collation={"locale": "fr"}))
    assert code == 67
    name = db.accents.create_index([("title", "text")], collation={"locale": "simple"})
    assert name == "title_text"
    db.accents.insert_one({"_id": 1, "title": "hello world"})
    assert [d["_id"] for d in db.accents.find({"$text": {"$search": "hello"}})] == [1]


def test_a_compound_text_prefix_under_a_query_collation(client: Client) -> None:
    """The prefix keys are bytes: under a collation that calls "abc" and "ABC" equal they cannot
    find the document, so the index cannot serve (an empty result before)."""
    coll = client.textdb.prefixed
    coll.create_index([("cat", 1), ("title", "text")])
    coll.insert_one({"_id": 1, "cat": "ABC", "title": "hello world"})
    query = {"cat": "ABC", "$text": {"$search": "hello"}}
    assert [d["_id"] for d in coll.find(query)] == [1]
    code, msg = failure(
        lambda: list(coll.find({**query, "cat": "abc"}, collation={"locale": "en", "strength": 2}))
    )
    assert code == 291
    assert "failed to use text index to satisfy $text query" in msg
    # A number prefix is the same under any collation.
    coll.insert_one({"_id": 2, "cat": 7, "title": "hello there"})
    found = coll.find({"cat": 7, "$text": {"$search": "hello"}}, collation={"locale": "en"})
    assert [d["_id"] for d in found] == [2]


def test_a_one_value_in_is_an_equality_on_a_text_prefix(client: Client) -> None:
    coll = client.textdb.prefixed_in
    coll.create_index([("cat", 1), ("title", "text")])
    coll.insert_many(
        [{"_id": 1, "cat": 1, "title": "hello"}, {"_id": 2, "cat": 2, "title": "hello"}]
    )
    found = coll.find({"cat": {"$in": [2]}, "$text": {"$search": "hello"}})
    assert [d["_id"] for d in found] == [2]
    code, _ = failure(
        lambda: list(coll.find({"cat": {"$in": [1, 2]}, "$text": {"$search": "hello"}}))
    )
    assert code == 291
