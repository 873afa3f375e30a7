"""server/profiler.py without a server: the threshold the dispatcher compares with, what `configure`
keeps and returns, the command as logged (document sequences left out, large ones truncated), and
the shapes of the "Slow query" attributes and the system.profile document."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

from ebbdb.server.arguments import DocSequence
from ebbdb.server.profiler import (
    MAX_LOGGED_COMMAND,
    Finished,
    Profiler,
    loggable_command,
    profile_document,
    slow_query_attr,
)


def _finished(**changes: Any) -> Finished:
    given: dict[str, Any] = {
        "db": "shop",
        "name": "insert",
        "body": {"insert": "orders", "ordered": True, "$db": "shop"},
        "reply": {"n": 3, "ok": 1.0},
        "seconds": 0.25,
        "peer": "127.0.0.1:50123",
        "metadata": {"driver": {"name": "PyMongo", "version": "4.9"}, "application": {"name": "x"}},
        "run": None,
        "ctx": "conn4",
        **changes,
    }
    return Finished(**given)


def test_threshold_is_slowms_until_something_is_profiled() -> None:
    p = Profiler(slowms=100)
    assert p.threshold == 0.1
    p.configure("shop", 1, False, None, None)
    assert p.threshold == -math.inf
    p.configure("shop", 0, False, 250, None)
    assert p.threshold == 0.25
    p.configure("shop", -1, {"millis": {"$gt": 5}}, None, None)
    assert p.threshold == -math.inf, "a filter looks at every operation"
    p.configure("shop", -1, None, None, None)
    assert p.threshold == 0.25
    assert Profiler(log_all=True).threshold == -math.inf
    assert Profiler(default_level=2).threshold == -math.inf


def test_configure_returns_what_was_in_force() -> None:
    p = Profiler()
    old, slowms, rate = p.configure("a", 2, {"op": "query"}, 20, 0.5)
    assert (old.level, old.filter, slowms, rate) == (0, None, 100, 1.0)
    old, slowms, rate = p.configure("a", -1, False, None, None)
    assert (old.level, old.filter, slowms, rate) == (2, {"op": "query"}, 20, 0.5)
    assert p.settings("b").level == 0, "levels are per database"


def test_logged_command_leaves_out_document_sequences() -> None:
    body = {"insert": "c", "documents": DocSequence([b"\x05\x00\x00\x00\x00"]), "$db": "d"}
    assert loggable_command(body, MAX_LOGGED_COMMAND) == {"insert": "c", "$db": "d"}


def test_large_command_is_truncated() -> None:
    body = {"find": "c", "filter": {"s": "x" * 500}, "$db": "d"}
    out = loggable_command(body, 100)
    assert list(out) == ["$truncated"]
    assert out["$truncated"].startswith('{ find: "c", filter: { s: "xxx')
    assert out["$truncated"].endswith("...") and len(out["$truncated"]) == 100


def test_slow_query_attributes() -> None:
    attr = slow_query_attr(_finished())
    assert attr == {
        "type": "command",
        "ns": "shop.orders",
        "appName": "x",
        "command": {"insert": "orders", "ordered": True, "$db": "shop"},
        "ninserted": 3,
        "numYields": 0,
        "remote": "127.0.0.1:50123",
        "protocol": "op_msg",
        "durationMillis": 250,
    }


def test_failed_command_attributes() -> None:
    reply = {"ok": 0.0, "errmsg": "bad", "code": 2, "codeName": "BadValue"}
    attr = slow_query_attr(
        _finished(name="ping", body={"ping": 1, "$db": "admin"}, db="admin", reply=reply)
    )
    assert attr["ns"] == "admin.$cmd"
    assert [attr[k] for k in ("ok", "errMsg", "errName", "errCode")] == [0, "bad", "BadValue", 2]


@pytest.mark.parametrize(
    ("name", "reply", "expected"),
    [
        (
            "update",
            {"n": 4, "nModified": 2, "upserted": [{"index": 0, "_id": 1}], "ok": 1.0},
            {"nMatched": 3, "nModified": 2, "nUpserted": 1},
        ),
        ("delete", {"n": 2, "ok": 1.0}, {"ndeleted": 2}),
    ],
)
def test_write_counts(name: str, reply: dict[str, Any], expected: dict[str, Any]) -> None:
    doc = profile_document(
        _finished(name=name, body={name: "orders", "$db": "shop"}, reply=reply),
        datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    )
    assert {k: doc[k] for k in expected} == expected


def test_profile_document_fields() -> None:
    now = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    doc = profile_document(_finished(), now)
    assert list(doc) == [
        "op",
        "ns",
        "command",
        "ninserted",
        "numYield",
        "locks",
        "flowControl",
        "protocol",
        "millis",
        "ts",
        "client",
        "appName",
        "allUsers",
        "user",
    ]
    assert (doc["op"], doc["ns"], doc["millis"], doc["ts"]) == ("insert", "shop.orders", 250, now)
    assert (doc["client"], doc["appName"]) == ("127.0.0.1", "x")
