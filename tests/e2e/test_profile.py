"""The `profile` command and what it causes, through pymongo: MongoDB's reply shape (the settings
in force before), per-database levels, filters, the global slowms and sampleRate, system.profile
documents for level 2 and for slow operations at level 1, and the "Slow query" line getLog serves."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from tests.waiting import wait_until

Client = MongoClient[dict[str, Any]]
DEFAULT = {"was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0}
NOTE = (
    "When a filter expression is set, slowms and sampleRate are not used for profiling and "
    "slow-query log lines."
)


def _profile_docs(db: Any, expected: int, flt: dict[str, Any] | None = None) -> list[Any]:
    """system.profile's documents matching `flt` once there are `expected` of them (the profiler
    writes through the storage writer, after the reply); fails if there never are."""

    def found() -> list[Any] | None:
        docs = list(db.system.profile.find(flt or {}))
        return docs if len(docs) >= expected else None

    return wait_until(found, f"{expected} system.profile documents matching {flt}")


def _slow_queries(client: Client, ns: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in client.admin.command("getLog", "global")["log"]]
    return [e for e in lines if e["id"] == 51803 and e["attr"]["ns"] == ns]


@pytest.fixture
def reset(client: Client) -> Any:
    """Put the global slowms and sampleRate back (they are server-wide, as in mongod)."""
    yield
    client.admin.command("profile", -1, slowms=100, sampleRate=1.0)


def test_reading_the_defaults(client: Client) -> None:
    reply = client.prof.command("profile", -1)
    assert reply == DEFAULT
    assert [type(reply[k]) for k in ("was", "slowms", "sampleRate")] == [int, int, float]


def test_setting_replies_with_what_was_in_force(client: Client, reset: Any) -> None:
    assert client.prof.command("profile", 1, slowms=20, sampleRate=0.5) == DEFAULT
    assert client.prof.command("profile", -1) == {
        "was": 1,
        "slowms": 20,
        "sampleRate": 0.5,
        "ok": 1.0,
    }
    # The level is the database's; slowms and sampleRate are the server's.
    assert client.other.command("profile", -1) == {
        "was": 0,
        "slowms": 20,
        "sampleRate": 0.5,
        "ok": 1.0,
    }
    # A level outside 0..2 only reads, as mongod.
    assert client.prof.command("profile", 7)["was"] == 1
    assert client.prof.command("profile", 0)["was"] == 1
    assert client.prof.command("profile", -1)["was"] == 0


def test_filter_is_shown_with_mongods_note_until_unset(client: Client) -> None:
    db = client.filtered
    assert db.command("profile", 0, filter={"millis": {"$gte": 50}}) == {**DEFAULT, "note": NOTE}
    assert db.command("profile", -1) == {
        **DEFAULT,
        "filter": {"millis": {"$gte": 50}},
        "note": NOTE,
    }
    db.command("profile", 0, filter="unset")
    assert db.command("profile", -1) == DEFAULT


@pytest.mark.parametrize(
    ("command", "code", "message"),
    [
        ({"sampleRate": 1.5}, 2, "'sampleRate' must be between 0.0 and 1.0 inclusive"),
        ({"filter": "everything"}, 2, "Expected an object, or the string 'unset'."),
        ({"filter": None}, 2, "Expected an object, or the string 'unset'."),
        ({"slowms": "fast"}, 14, None),
        ({"bogus": 1}, 40415, "BSON field 'profile.bogus' is an unknown field."),
    ],
)
def test_bad_arguments(
    client: Client, command: dict[str, Any], code: int, message: str | None
) -> None:
    with pytest.raises(OperationFailure) as info:
        client.prof.command({"profile": 1, **command})
    assert info.value.code == code
    if message is not None:
        assert info.value.details is not None
        assert info.value.details["errmsg"] == message
    assert client.prof.command("profile", -1)["was"] == 0, "nothing was changed"


def test_level_2_profiles_every_operation(uri: str) -> None:
    with MongoClient(uri, appname="profiled-app") as client:
        db = client.lvl2
        db.items.insert_many([{"_id": i, "v": i % 3} for i in range(10)])
        assert db.command("profile", 2)["was"] == 0
        assert len(list(db.items.find({"v": 1}))) == 3
        db.items.update_many({"v": 2}, {"$set": {"w": 1}})
        db.items.delete_one({"_id": 0})
        db.command("profile", 0)

        docs = _profile_docs(db, 3, {"op": {"$ne": "command"}})
        by_op = {d["op"]: d for d in docs}
        assert set(by_op) == {"query", "update", "remove"}, docs
        query = by_op["query"]
        assert query["ns"] == "lvl2.items"
        assert query["command"]["find"] == "items"
        assert query["command"]["filter"] == {"v": 1}
        assert query["command"]["$db"] == "lvl2"
        assert (query["nreturned"], query["docsExamined"], query["keysExamined"]) == (3, 10, 0)
        assert query["planSummary"] == "COLLSCAN"
        assert query["cursorExhausted"] is True
        assert isinstance(query["millis"], int) and query["millis"] >= 0
        assert query["client"] == "127.0.0.1"
        assert query["appName"] == "profiled-app"
        assert (query["allUsers"], query["user"], query["protocol"]) == ([], "", "op_msg")
        assert query["ts"].year >= 2024
        assert (by_op["update"]["nMatched"], by_op["update"]["nModified"]) == (3, 3)
        assert by_op["remove"]["ndeleted"] == 1
        # A command is profiled under the level in force when it ends (mongod reads it when
        # the command starts): the one that turned profiling on is, the one that turned it off
        # is not.
        assert db.system.profile.count_documents({"command.profile": 2}) == 1
        assert db.system.profile.count_documents({"command.profile": 0}) == 0
        # Other databases are not profiled.
        assert "system.profile" not in client.other_db.list_collection_names()


def test_level_1_profiles_only_slow_operations(client: Client, reset: Any) -> None:
    db = client.lvl1
    db.items.insert_one({"_id": 1})
    db.command("profile", 1)
    db.items.find_one({"_id": 1})  # fast: not profiled
    db.command("profile", 1, slowms=-1)  # now every operation is slower than slowms
    db.items.find_one({"_id": 1})
    db.command("profile", 0)
    docs = _profile_docs(db, 1, {"op": "query"})
    assert len(docs) == 1, docs
    assert docs[0]["planSummary"] == "IDHACK"
    assert docs[0]["nreturned"] == 1


def test_filter_decides_what_is_profiled(client: Client) -> None:
    db = client.flt
    db.items.insert_many([{"_id": i} for i in range(3)])
    db.command("profile", 1, filter={"op": "query", "ns": "flt.items"})
    db.items.find_one({"_id": 2})
    db.items.insert_one({"_id": 9})
    db.command("profile", 0, filter="unset")
    docs = _profile_docs(db, 1)
    assert [d["op"] for d in docs] == ["query"]


def test_slow_queries_are_logged_with_their_plan(
    start_server: Callable[..., Any], reset: Any, client: Client
) -> None:
    db = client.slowlog
    db.items.insert_many([{"_id": i, "k": i} for i in range(50)])
    db.items.create_index("k")
    db.command("profile", 0, slowms=-1)
    try:
        assert len(list(db.items.find({"k": {"$gte": 45}}))) == 5
        list(db.items.find({"k": {"$gte": 45}}).hint([("$natural", 1)]))
        with pytest.raises(OperationFailure):
            db.command({"find": "items", "filter": {"$bad": 1}})
    finally:
        db.command("profile", 0, slowms=100)
    lines = _slow_queries(client, "slowlog.items")
    finds = [e for e in lines if "find" in e["attr"]["command"]]
    assert len(finds) == 3, finds
    by_index, collscan, failed = finds
    for e in finds:
        assert (e["s"], e["c"], e["msg"], e["ctx"][:4]) == ("I", "COMMAND", "Slow query", "conn")
        attr = e["attr"]
        assert attr["type"] == "command"
        assert attr["remote"].startswith("127.0.0.1:")
        assert isinstance(attr["durationMillis"], int)
        assert list(attr)[-1] == "durationMillis"
    assert by_index["attr"]["planSummary"] == "IXSCAN { k: 1 }"
    assert (by_index["attr"]["keysExamined"], by_index["attr"]["docsExamined"]) == (5, 5)
    assert by_index["attr"]["nreturned"] == 5
    assert collscan["attr"]["planSummary"] == "COLLSCAN"
    assert collscan["attr"]["docsExamined"] == 50
    assert (failed["attr"]["ok"], failed["attr"]["errName"]) == (0, "BadValue")
    assert failed["attr"]["errCode"] == 2


def test_fast_operations_are_not_logged(client: Client) -> None:
    client.fastlog.items.insert_one({"_id": 1})
    client.fastlog.items.find_one({"_id": 1})
    assert _slow_queries(client, "fastlog.items") == []


def test_sample_rate_zero_logs_and_profiles_nothing(client: Client, reset: Any) -> None:
    db = client.sampled
    db.command("profile", 1, slowms=-1, sampleRate=0.0)
    db.items.insert_one({"_id": 1})
    db.items.find_one({"_id": 1})
    db.command("profile", 0, slowms=100, sampleRate=1.0)
    time.sleep(0.1)
    assert db.system.profile.count_documents({"op": {"$in": ["query", "insert"]}}) == 0
    assert _slow_queries(client, "sampled.items") == []


def test_settings_changes_are_logged(client: Client) -> None:
    client.changes.command("profile", 2)
    client.changes.command("profile", 0)
    lines = [json.loads(line) for line in client.admin.command("getLog", "global")["log"]]
    changes = [e for e in lines if e["id"] == 48742 and e["attr"]["db"] == "changes"]
    assert [(e["attr"]["from"]["level"], e["attr"]["to"]["level"]) for e in changes] == [
        (0, 2),
        (2, 0),
    ]
    assert changes[0]["msg"] == "Profiler settings changed"


def test_open_cursor_id_is_reported(client: Client) -> None:
    db = client.cursorid
    db.items.insert_many([{"_id": i} for i in range(5)])
    db.command("profile", 2)
    cursor = db.items.find().batch_size(2)
    next(cursor)
    db.command("profile", 0)
    cursor.close()
    (doc,) = _profile_docs(db, 1, {"op": "query"})
    assert isinstance(doc["cursorid"], int) and doc["cursorid"] != 0
    assert "cursorExhausted" not in doc
    assert doc["nreturned"] == 2
    assert Int64(doc["cursorid"]) == doc["cursorid"]
