"""Change streams' pure side: resume tokens (KeyString bytes as mongod lays them out, decoded
strictly with mongod's codes), the $changeStream stage's options, and oplog entries of the
contract's shape turned into MongoDB 7.0's events."""

from __future__ import annotations

import datetime
import uuid

import pytest
from bson import Binary, Int64, ObjectId, Timestamp

from ebbdb.storage.aggregate.change_stream.events import apply_diff, events_of, update_description
from ebbdb.storage.aggregate.change_stream.spec import Scope, check_after, legal, parse_spec
from ebbdb.storage.aggregate.change_stream.tokens import (
    HIGH_WATER_MARK,
    Position,
    TokenData,
    decode,
    encode,
    high_water_mark,
    parse,
)
from ebbdb.storage.core.errors import QueryError

UI = Binary(uuid.UUID("20ea7287-c120-4d83-a4ff-da70f869ec56").bytes, 4)
WALL = datetime.datetime(2026, 11, 27, 12, 0, 0)
TS = Timestamp(1617460013, 2)


def entry(op: str, ns: str, o: dict, o2: dict | None = None, **more: object) -> dict:
    e: dict = {"ts": TS, "t": Int64(1), "v": Int64(2), "op": op, "ns": ns, "ui": UI, "o": o}
    if o2 is not None:
        e["o2"] = o2
    e["wall"] = WALL
    e.update(more)
    return e


# -- tokens --------------------------------------------------------------------------------------------


def test_a_token_starts_with_its_cluster_time_as_mongod_writes_it() -> None:
    oid = ObjectId("60687b2d8faf53467f4cd2b0")
    token = encode(TokenData(TS, uuid=UI, event_id={"_id": oid}))
    # 82 + clusterTime, version 2 (2B04), event token 128 (2C0100), txnOpIndex 0 (29),
    # fromInvalidate false (6E), the UUID (5A 10 04 ...), the identifier as an object (46 ...), end.
    assert token["_data"] == (
        "82" + "60687B2D00000002" + "2B04" + "2C0100" + "29" + "6E" + "5A1004"
        "20EA7287C1204D83A4FFDA70F869EC56" + "46" + "64" + "5F696400" + "64"
        "60687B2D8FAF53467F4CD2B0" + "00" + "04"
    )
    assert decode(bytes.fromhex(token["_data"])) == TokenData(TS, uuid=UI, event_id={"_id": oid})


@pytest.mark.parametrize(
    "key",
    [
        {"_id": 1},
        {"_id": -300},
        {"_id": "a\x00b"},
        {"_id": None},
        {"_id": True},
        {"_id": {"x": 1, "y": "z"}},
        {"_id": 2.5},
        {"_id": Int64(7)},
        {"_id": [1, 2]},
        {"_id": WALL},
    ],
)
def test_tokens_round_trip(key: dict) -> None:
    data = TokenData(
        TS, txn_op_index=3, uuid=UI, event_id={"operationType": "insert", "documentKey": key}
    )
    back = parse(encode(data), "resumeAfter")
    assert back.cluster_time == TS and back.txn_op_index == 3 and back.uuid == UI
    assert back.event_id == data.event_id
    assert encode(back) == encode(data)


def test_high_water_mark_token() -> None:
    data = parse(high_water_mark(TS), "resumeAfter")
    assert data.token_type == HIGH_WATER_MARK and data.cluster_time == TS
    assert data.position > Position.of(Timestamp(TS.time, TS.inc - 1), 5, True)
    assert data.position < Position.of(TS)


@pytest.mark.parametrize(
    ("token", "code", "message"),
    [
        (
            5,
            "TypeMismatch",
            "BSON field '$changeStream.resumeAfter' is the wrong type 'int', expected type 'object'",
        ),
        (
            {},
            "Location40647",
            "Bad resume token: _data of missing or of wrong type. Expected string, got {}",
        ),
        (
            {"_data": 1},
            "Location40647",
            "Bad resume token: _data of missing or of wrong type. Expected string, got {_data: 1}",
        ),
        ({"_data": "zz"}, "FailedToParse", "resume token string was not a valid hex string"),
        ({"_data": "abc"}, "FailedToParse", "resume token string was not a valid hex string"),
        ({"_data": ""}, "Location40649", "invalid empty resume token"),
        ({"_data": "aa"}, "Location50811", "KeyString format error: Unknown type: 170"),
        ({"_data": "8260687B2D00000002"}, "Location50796", "Resume Token does not contain version"),
        (
            {"_data": "8260687B2D000000022B0A04"},
            "Location50795",
            "Invalid Resume Token: only supports version 0, 1 and 2",
        ),
    ],
)
def test_bad_tokens_get_mongods_errors(token: object, code: str, message: str) -> None:
    with pytest.raises(QueryError) as err:
        parse(token, "resumeAfter")
    assert (err.value.code_name, err.value.message) == (code, message)


def test_a_token_with_bytes_after_its_end_is_refused() -> None:
    good = encode(TokenData(TS, uuid=UI, event_id={"_id": 1}))["_data"]
    with pytest.raises(QueryError):
        parse({"_data": good + "00"}, "resumeAfter")


# -- the stage's options -----------------------------------------------------------------------------


def test_spec_defaults_and_errors() -> None:
    spec = parse_spec({})
    assert (spec.full_document, spec.before_change, spec.resume_after, spec.start_at) == (
        "default",
        "off",
        None,
        None,
    )
    with pytest.raises(QueryError) as err:
        parse_spec({"fullDocument": "nope"})
    assert err.value.message == (
        "Enumeration value 'nope' for field '$changeStream.fullDocument' is not a valid value."
    )
    with pytest.raises(QueryError) as err:
        parse_spec({"bogus": 1})
    assert err.value.code_name == "Location40415"
    with pytest.raises(QueryError) as err:
        parse_spec([])
    assert err.value.code_name == "Location50808"
    with pytest.raises(QueryError) as err:
        parse_spec({"showExpandedEvents": 1})
    assert err.value.code_name == "TypeMismatch"


def legal_error(db: str, coll: str | None, spec: dict) -> tuple[str, str]:
    with pytest.raises(QueryError) as err:
        legal(db, coll, parse_spec(spec))
    return err.value.code_name, err.value.message


def test_resume_options_in_mongod_s_order() -> None:
    hwm = high_water_mark(TS)
    assert legal_error("t", "c", {"startAtOperationTime": TS, "resumeAfter": hwm}) == (
        "Location40674",
        "Only one type of resume option is allowed, but multiple were found",
    )
    assert legal_error("t", "c", {"startAfter": hwm, "resumeAfter": hwm})[0] == "Location50865"
    # The token's own errors come before 40674.
    bad = {"startAtOperationTime": TS, "resumeAfter": {"_data": "zz"}}
    assert legal_error("t", "c", bad)[0] == "FailedToParse"
    no_uuid = encode(TokenData(TS, event_id={"operationType": "dropDatabase"}))
    assert legal_error("t", "c", {"resumeAfter": no_uuid}) == (
        "InvalidResumeToken",
        "Attempted to resume a single-collection stream, but the resume token does not include "
        "a UUID",
    )
    assert legal("t", None, parse_spec({"resumeAfter": no_uuid}))[1] is not None


def test_resume_after_an_invalidate_is_260() -> None:
    token = encode(TokenData(TS, from_invalidate=True, uuid=UI, event_id={"operationType": "drop"}))
    assert legal_error("test", "c", {"resumeAfter": token}) == (
        "InvalidResumeToken",
        "Attempting to resume a change stream using 'resumeAfter' is not allowed from an "
        "invalidate notification",
    )
    scope, data = legal("test", "c", parse_spec({"startAfter": token}))
    assert data is not None and data.from_invalidate


def test_scopes() -> None:
    assert legal("test", "c", parse_spec({}))[0] == Scope("test", "c")
    assert legal("test", None, parse_spec({}))[0] == Scope("test")
    assert legal("admin", None, parse_spec({"allChangesForCluster": True}))[0] == Scope(None)
    assert legal_error("admin", None, {}) == (
        "InvalidNamespace",
        "$changeStream may not be opened on the internal admin database",
    )
    assert legal_error("test", None, {"allChangesForCluster": True}) == (
        "InvalidOptions",
        "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' "
        "database, and with no collection name; found test.$cmd.aggregate",
    )
    for db, coll in (("local", "x"), ("config", None), ("test", "system.js")):
        assert legal_error(db, coll, {})[0] == "InvalidNamespace"
    assert legal("config", "x", parse_spec({"allowToRunOnConfigDB": True}))[0] == Scope(
        "config", "x"
    )
    with pytest.raises(QueryError) as err:
        check_after([{"$match": {}}, {"$group": {"_id": 1}}])
    assert (err.value.code_name, err.value.message) == (
        "IllegalOperation",
        "$group is not permitted in a $changeStream pipeline",
    )


# -- events ------------------------------------------------------------------------------------------


COLL = Scope("test", "c")


def docs(e: dict, scope: Scope = COLL, expanded: bool = False) -> list[dict]:
    return [ev.doc for ev in events_of(e, scope, expanded)]


def test_insert_event() -> None:
    [ev] = docs(entry("i", "test.c", {"_id": 1, "a": 2}, {"_id": 1}))
    assert list(ev) == [
        "_id",
        "operationType",
        "clusterTime",
        "wallTime",
        "fullDocument",
        "ns",
        "documentKey",
    ]
    assert ev["operationType"] == "insert" and ev["clusterTime"] == TS and ev["wallTime"] == WALL
    assert ev["fullDocument"] == {"_id": 1, "a": 2}
    assert ev["ns"] == {"db": "test", "coll": "c"} and ev["documentKey"] == {"_id": 1}
    data = parse(ev["_id"], "resumeAfter")
    assert data.event_id == {"operationType": "insert", "documentKey": {"_id": 1}}
    assert docs(entry("i", "test.other", {"_id": 1}, {"_id": 1})) == []
    assert len(docs(entry("i", "test.other", {"_id": 1}, {"_id": 1}), Scope("test"))) == 1
    assert docs(entry("i", "test.system.views", {"_id": 1}, {"_id": 1}), Scope("test")) == []
    assert docs(entry("i", "config.x", {"_id": 1}, {"_id": 1}), Scope(None)) == []
    [expanded] = docs(entry("i", "test.c", {"_id": 1}, {"_id": 1}), expanded=True)
    assert expanded["collectionUUID"] == UI


def test_update_event_from_a_v2_diff() -> None:
    diff = {
        "u": {"a": 5},
        "i": {"new": 1},
        "d": {"gone": False},
        "sarr": {"a": True, "l": 2, "u1": "x"},
        "ssub": {"s3": {"u": {"z": 0}}, "u": {"k": 1, "p.q": 2}},
    }
    [ev] = docs(entry("u", "test.c", {"$v": 2, "diff": diff}, {"_id": 7}), expanded=True)
    assert ev["operationType"] == "update" and ev["documentKey"] == {"_id": 7}
    assert "fullDocument" not in ev
    assert ev["updateDescription"] == {
        "updatedFields": {"a": 5, "new": 1, "arr.1": "x", "sub.k": 1, "sub.p.q": 2, "sub.3.z": 0},
        "removedFields": ["gone"],
        "truncatedArrays": [{"field": "arr", "newSize": 2}],
        "disambiguatedPaths": {"sub.p.q": ["sub", "p.q"], "sub.3.z": ["sub", "3", "z"]},
    }
    plain = update_description({"u": {"a": 1}}, expanded=False)
    assert plain == {"updatedFields": {"a": 1}, "removedFields": [], "truncatedArrays": []}
    arr = update_description({"sarr": {"a": True, "s0": {"u": {"b": 1}}}}, expanded=True)
    assert arr["updatedFields"] == {"arr.0.b": 1} and arr["disambiguatedPaths"] == {}


def test_apply_diff_makes_the_post_image() -> None:
    before = {"_id": 1, "a": 1, "gone": 2, "arr": [1, 2, 3], "sub": {"k": 0, "n": [{"z": 1}]}}
    diff = {
        "u": {"a": 5},
        "d": {"gone": False},
        "sarr": {"a": True, "l": 2, "u1": "x"},
        "ssub": {"i": {"m": 1}, "sn": {"a": True, "s0": {"u": {"z": 2}}, "u1": 9}},
    }
    assert apply_diff(before, diff) == {
        "_id": 1,
        "a": 5,
        "arr": [1, "x"],
        "sub": {"k": 0, "n": [{"z": 2}, 9], "m": 1},
    }


def test_replace_and_delete_events() -> None:
    [rep] = docs(entry("u", "test.c", {"_id": 1, "b": 1}, {"_id": 1}))
    assert rep["operationType"] == "replace" and rep["fullDocument"] == {"_id": 1, "b": 1}
    [dele] = docs(entry("d", "test.c", {"_id": 1}))
    assert list(dele) == ["_id", "operationType", "clusterTime", "wallTime", "ns", "documentKey"]
    assert dele["operationType"] == "delete" and dele["documentKey"] == {"_id": 1}


def test_drop_invalidates_a_collection_stream_only() -> None:
    drop = entry("c", "test.$cmd", {"drop": "c"})
    ev, inv = docs(drop)
    assert ev["operationType"] == "drop" and ev["ns"] == {"db": "test", "coll": "c"}
    assert inv["operationType"] == "invalidate" and list(inv) == [
        "_id",
        "operationType",
        "clusterTime",
        "wallTime",
    ]
    assert parse(inv["_id"], "startAfter").from_invalidate
    assert [e.position for e in events_of(drop, Scope("test", "c"), False)] == [
        Position.of(TS),
        Position.of(TS, 0, True),
    ]
    assert [d["operationType"] for d in docs(drop, Scope("test"))] == ["drop"]
    assert docs(entry("c", "test.$cmd", {"drop": "d"})) == []


def test_rename_and_drop_database() -> None:
    rename = entry(
        "c",
        "test.$cmd",
        {"renameCollection": "test.c", "to": "test.d", "stayTemp": False, "dropTarget": False},
    )
    ev, inv = docs(rename)
    assert ev["operationType"] == "rename" and ev["to"] == {"db": "test", "coll": "d"}
    # mongod sets the rename's top-level `to` first; operationDescription only when expanded.
    assert list(ev) == ["to", "_id", "operationType", "clusterTime", "wallTime", "ns"]
    assert parse(ev["_id"], "resumeAfter").event_id == {
        "operationType": "rename",
        "operationDescription": {"to": {"db": "test", "coll": "d"}},
    }
    assert inv["operationType"] == "invalidate"
    # A rename onto the watched namespace ends its stream too.
    onto, onto_inv = docs(rename, Scope("test", "d"))
    assert (onto["operationType"], onto_inv["operationType"]) == ("rename", "invalidate")
    assert docs(rename, Scope("test", "e")) == []
    [db_ev] = docs(rename, Scope("test"), expanded=True)
    assert db_ev["operationDescription"] == {"to": {"db": "test", "coll": "d"}}
    assert list(db_ev)[4] == "collectionUUID"
    dropdb = entry("c", "test.$cmd", {"dropDatabase": 1})
    del dropdb["ui"]
    ev, inv = docs(dropdb, Scope("test"))
    assert (ev["operationType"], ev["ns"], inv["operationType"]) == (
        "dropDatabase",
        {"db": "test"},
        "invalidate",
    )
    assert [d["operationType"] for d in docs(dropdb, Scope(None))] == ["dropDatabase"]


def test_expanded_ddl_events() -> None:
    create = entry(
        "c", "test.$cmd", {"create": "c", "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
    )
    assert docs(create) == []
    [ev] = docs(create, expanded=True)
    assert ev["operationType"] == "create" and ev["collectionUUID"] == UI
    assert ev["operationDescription"] == {"idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
    ci = entry("c", "test.$cmd", {"createIndexes": "c", "v": 2, "key": {"a": 1}, "name": "a_1"})
    [ev] = docs(ci, expanded=True)
    assert ev["operationDescription"] == {"indexes": [{"v": 2, "key": {"a": 1}, "name": "a_1"}]}
    di = entry(
        "c",
        "test.$cmd",
        {"dropIndexes": "c", "index": "a_1"},
        {"v": 2, "key": {"a": 1}, "name": "a_1"},
    )
    [ev] = docs(di, expanded=True)
    assert (ev["operationType"], ev["operationDescription"]) == (
        "dropIndexes",
        {"indexes": [{"v": 2, "key": {"a": 1}, "name": "a_1"}]},
    )
    mod = entry("c", "test.$cmd", {"collMod": "c", "validator": {"a": 1}})
    [ev] = docs(mod, expanded=True)
    assert (ev["operationType"], ev["operationDescription"]) == ("modify", {"validator": {"a": 1}})


def test_a_transaction_is_one_event_per_op_with_its_session() -> None:
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    txn = {
        "ts": TS,
        "t": Int64(1),
        "v": Int64(2),
        "op": "c",
        "ns": "admin.$cmd",
        "wall": WALL,
        "o": {
            "applyOps": [
                {"op": "i", "ns": "test.c", "ui": UI, "o": {"_id": 1}, "o2": {"_id": 1}},
                {"op": "i", "ns": "test.other", "ui": UI, "o": {"_id": 2}, "o2": {"_id": 2}},
                {"op": "d", "ns": "test.c", "ui": UI, "o": {"_id": 3}},
            ]
        },
        "lsid": lsid,
        "txnNumber": Int64(4),
        "stmtId": 0,
        "prevOpTime": {"ts": Timestamp(0, 0), "t": Int64(-1)},
    }
    evs = list(events_of(txn, Scope("test", "c"), False))
    assert [(e.op, e.position.index) for e in evs] == [("insert", 0), ("delete", 2)]
    assert evs[0].doc["lsid"] == lsid and evs[0].doc["txnNumber"] == Int64(4)
    # mongod sets a transaction's txnNumber and lsid first of all.
    assert list(evs[1].doc)[:3] == ["txnNumber", "lsid", "_id"]
    assert parse(evs[1].doc["_id"], "resumeAfter").txn_op_index == 2
    assert evs[0].doc["clusterTime"] == TS and evs[0].doc["wallTime"] == WALL


def test_a_retryable_write_s_event_does_not_name_its_session() -> None:
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    e = entry("i", "test.c", {"_id": 1}, {"_id": 1}, lsid=lsid, txnNumber=Int64(1), stmtId=0)
    [ev] = docs(e)
    assert "lsid" not in ev and "txnNumber" not in ev


def test_drop_s_token_names_only_its_operation_type() -> None:
    [ev, _] = docs(entry("c", "test.$cmd", {"drop": "c"}))
    assert parse(ev["_id"], "resumeAfter").event_id == {"operationType": "drop"}


def test_no_op_entries_make_no_event() -> None:
    assert docs(entry("n", "", {"msg": "initiating set"}), Scope(None)) == []
