"""Expired-but-not-yet-deleted documents are invisible to every command that reads a collection
(spec/ttl.md section 3): update and delete matching, upserts, findAndModify, aggregate (the first
read, $lookup, $unionWith, getMore batch by batch) and pymongo's count_documents; and every write
refreshes the Cosmos last-modified time. The clock moves with ttlClock; no pass runs unless a test
asks for one, so every document here is expired but still stored."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from ebbdb.server.embedded import ServerThread
from tests.e2e.ttl_helpers import TEST_COMMANDS, Client, advance, ids_after, ids_of, ttl_pass

StartServer = Callable[..., ServerThread]


@pytest.fixture
def server(start_server: StartServer) -> ServerThread:
    return start_server(parameters=TEST_COMMANDS)


def server_now(client: Client) -> datetime.datetime:
    now: datetime.datetime = client.admin.command("ttlClock")["now"]
    return now


@pytest.fixture
def sessions(client: Client) -> Any:
    """`app.sessions`: ids 1-4 expire 60 s after `at` (now), ids 5-6 have no date (never expire).
    The clock is then moved 61 s: 1-4 are expired, not yet deleted."""
    coll = client.app.sessions
    coll.create_index("at", expireAfterSeconds=60)
    now = server_now(client)
    coll.insert_many([{"_id": i, "at": now, "k": i, "tag": "a"} for i in range(1, 5)])
    coll.insert_many([{"_id": i, "k": i, "tag": "a"} for i in (5, 6)])
    advance(client, 61)
    return coll


# -- update and delete -----------------------------------------------------------------------------


def test_update_many_never_matches_expired(client: Client, sessions: Any) -> None:
    result = sessions.update_many({}, {"$set": {"seen": True}})
    assert (result.matched_count, result.modified_count) == (2, 2)
    assert ids_of(sessions, {"seen": True}) == [5, 6]


def test_update_one_by_id_of_expired_matches_nothing(client: Client, sessions: Any) -> None:
    result = sessions.update_one({"_id": 1}, {"$set": {"seen": True}})
    assert (result.matched_count, result.modified_count, result.upserted_id) == (0, 0, None)


def test_upsert_treats_expired_as_absent(client: Client, sessions: Any) -> None:
    result = sessions.update_one({"_id": 2}, {"$set": {"fresh": 1}}, upsert=True)
    assert (result.matched_count, result.upserted_id) == (0, 2)
    # The expired document gave way in the same transaction; the new one has no date: it lives.
    assert sessions.find_one({"_id": 2}) == {"_id": 2, "fresh": 1}
    assert ttl_pass(client)["deleted"] == 3
    assert ids_of(sessions) == [2, 5, 6]


def test_replace_upsert_over_expired_id(client: Client, sessions: Any) -> None:
    result = sessions.replace_one({"_id": 3}, {"v": "new"}, upsert=True)
    assert result.upserted_id == 3
    assert sessions.find_one({"_id": 3}) == {"_id": 3, "v": "new"}


def test_update_into_unique_key_held_by_expired(client: Client, sessions: Any) -> None:
    sessions.create_index("k", unique=True)
    # k=1 belongs only to expired document 1: taking it is not a duplicate.
    assert sessions.update_one({"_id": 5}, {"$set": {"k": 1}}).modified_count == 1
    assert sessions.find_one({"k": 1}) == {"_id": 5, "k": 1, "tag": "a"}
    # A live holder still conflicts.
    with pytest.raises(DuplicateKeyError):
        sessions.update_one({"_id": 6}, {"$set": {"k": 1}})


def test_delete_never_matches_expired(client: Client, sessions: Any) -> None:
    assert sessions.delete_many({"tag": "a"}).deleted_count == 2
    assert sessions.delete_one({"_id": 1}).deleted_count == 0
    # The expired ones were still stored: the pass removes them now.
    assert ttl_pass(client)["deleted"] == 4


def test_update_moving_date_into_the_past_hides_at_once(client: Client, sessions: Any) -> None:
    old = server_now(client) - datetime.timedelta(hours=1)
    sessions.update_one({"_id": 5}, {"$set": {"at": old}})
    assert ids_of(sessions) == [6]
    # And a date moved forward brings nothing back: expired documents are not matched.
    sessions.update_many({}, {"$set": {"at": server_now(client)}})
    assert ids_of(sessions) == [6]


# -- findAndModify ---------------------------------------------------------------------------------


def test_find_one_and_update_skips_expired(client: Client, sessions: Any) -> None:
    assert sessions.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}) is None
    first = sessions.find_one_and_update({}, {"$set": {"x": 1}}, sort=[("_id", 1)])
    assert first is not None and first["_id"] == 5


def test_find_one_and_update_upserts_over_expired(client: Client, sessions: Any) -> None:
    doc = sessions.find_one_and_update(
        {"_id": 4}, {"$set": {"x": 1}}, upsert=True, return_document=ReturnDocument.AFTER
    )
    assert doc == {"_id": 4, "x": 1}


def test_find_one_and_delete_and_replace_skip_expired(client: Client, sessions: Any) -> None:
    assert sessions.find_one_and_delete({"_id": 2}) is None
    assert sessions.find_one_and_replace({"_id": 3}, {"v": 1}) is None
    gone = sessions.find_one_and_delete({"tag": "a"}, sort=[("k", -1)])
    assert gone is not None and gone["_id"] == 6


# -- aggregate -------------------------------------------------------------------------------------


def test_aggregate_and_count_documents_hide_expired(client: Client, sessions: Any) -> None:
    assert [d["_id"] for d in sessions.aggregate([{"$sort": {"_id": 1}}])] == [5, 6]
    assert sessions.count_documents({}) == 2
    assert sessions.count_documents({"tag": "a"}) == 2
    grouped = list(sessions.aggregate([{"$group": {"_id": "$tag", "n": {"$sum": 1}}}]))
    assert grouped == [{"_id": "a", "n": 2}]


def test_lookup_never_joins_expired(client: Client, sessions: Any) -> None:
    users = client.app.users
    users.insert_many([{"_id": "u1", "session": 1}, {"_id": "u5", "session": 5}])
    joined = list(
        users.aggregate(
            [
                {
                    "$lookup": {
                        "from": "sessions",
                        "localField": "session",
                        "foreignField": "_id",
                        "as": "s",
                    }
                },
                {"$project": {"n": {"$size": "$s"}}},
                {"$sort": {"_id": 1}},
            ]
        )
    )
    assert joined == [{"_id": "u1", "n": 0}, {"_id": "u5", "n": 1}]
    piped = list(
        users.aggregate(
            [
                {
                    "$lookup": {
                        "from": "sessions",
                        "let": {"sid": "$session"},
                        "pipeline": [{"$match": {"$expr": {"$eq": ["$_id", "$$sid"]}}}],
                        "as": "s",
                    }
                },
                {"$project": {"n": {"$size": "$s"}}},
                {"$sort": {"_id": 1}},
            ]
        )
    )
    assert piped == joined


def test_union_with_never_reads_expired(client: Client, sessions: Any) -> None:
    client.app.other.insert_one({"_id": 100})
    out = client.app.other.aggregate([{"$unionWith": "sessions"}, {"$sort": {"_id": 1}}])
    assert [d["_id"] for d in out] == [5, 6, 100]


def test_aggregate_getmore_checks_expiry_per_batch(client: Client) -> None:
    coll = client.app.staggered
    coll.create_index("at", expireAfterSeconds=0)
    now = server_now(client)
    # Document i expires i minutes from now.
    coll.insert_many([{"_id": i, "at": now + datetime.timedelta(minutes=i)} for i in range(1, 11)])
    cursor = coll.aggregate([{"$match": {}}], batchSize=3)
    first = [next(cursor)["_id"] for _ in range(3)]
    assert first == [1, 2, 3]
    advance(client, 6 * 60)  # 4, 5 and 6 expire before the next batch
    assert [d["_id"] for d in cursor] == [7, 8, 9, 10]


# -- Cosmos: every write refreshes the last-modified time -----------------------------------------


@pytest.fixture
def cosmos(client: Client) -> Any:
    """`app.items` with the Cosmos default TTL of 10 s."""
    coll = client.app.items
    coll.create_index("_ts", expireAfterSeconds=10)
    coll.insert_many([{"_id": i, "v": 0} for i in range(1, 6)])
    return coll


@pytest.mark.parametrize(
    "write",
    [
        lambda c: c.update_one({"_id": 1}, {"$inc": {"v": 1}}),
        lambda c: c.replace_one({"_id": 1}, {"v": 9}),
        lambda c: c.find_one_and_update({"_id": 1}, {"$set": {"v": 2}}),
        lambda c: c.find_one_and_replace({"_id": 1}, {"v": 3}),
        lambda c: c.update_many({"_id": {"$lte": 1}}, {"$set": {"v": 4}}),
    ],
    ids=["update_one", "replace_one", "find_one_and_update", "find_one_and_replace", "update_many"],
)
def test_cosmos_write_refreshes_last_modified(
    client: Client, cosmos: Any, write: Callable[[Any], Any]
) -> None:
    advance(client, 8)
    write(cosmos)
    assert ids_after(client, cosmos, 8) == [1]  # 16 s after the insert, 8 s after the write
    assert ids_after(client, cosmos, 2) == []  # 10 s after the write
    assert "_ts" not in str(cosmos.database.command("find", cosmos.name))


def test_cosmos_noop_update_still_refreshes(client: Client, cosmos: Any) -> None:
    """An update that changes nothing is not counted as a modification, but it is a write:
    it extends the document's life like any other."""
    advance(client, 8)
    assert cosmos.update_one({"_id": 2}, {"$set": {"v": 0}}).modified_count == 0
    assert ids_after(client, cosmos, 8) == [2]
    assert ids_after(client, cosmos, 2) == []


def test_cosmos_per_document_ttl_set_and_unset_by_update(client: Client, cosmos: Any) -> None:
    cosmos.update_one({"_id": 1}, {"$set": {"ttl": 100}})
    cosmos.update_one({"_id": 2}, {"$set": {"ttl": -1}})
    assert ids_after(client, cosmos, 50) == [1, 2]
    cosmos.update_one({"_id": 1}, {"$unset": {"ttl": ""}})  # back to the default, from now
    assert ids_after(client, cosmos, 11) == [2]
    assert ttl_pass(client)["deleted"] == 4
