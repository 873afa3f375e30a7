"""Logical sessions through pymongo: startSession, endSessions, refreshSessions, the kill commands,
config.system.sessions and its TTL index, $listLocalSessions and $listSessions, timeouts under the
test clock (localLogicalSessionTimeoutMinutes), cursors dying with their session, and drivers'
implicit sessions; in standalone and replica-set modes alike."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bson.binary import Binary, UuidRepresentation
from bson.codec_options import CodecOptions
from bson.int64 import Int64
from pymongo import CursorType, MongoClient, monitoring
from pymongo.client_session import ClientSession
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread
from tests.e2e import rawwire

#: The uid of a session started with nobody logged in (SHA-256 of nothing), as mongod's.
NO_AUTH_UID = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
#: How mongod's messages show that uid after a session's id.
NO_AUTH_TEXT = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU= -  - "


class Commands(monitoring.CommandListener):
    """The commands a client sent, in order."""

    def __init__(self) -> None:
        self.started_events: list[monitoring.CommandStartedEvent] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.started_events.append(event)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture(params=["standalone", "replset"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def serve(
    mode: str, start_server: Callable[..., ServerThread]
) -> Callable[[dict[str, Any]], ServerThread]:
    """Start a server of the test's mode with these parameters (stopped at the end)."""
    repl_set = "rs0" if mode == "replset" else None
    return lambda parameters: start_server(parameters, repl_set=repl_set)


@pytest.fixture
def srv(serve: Callable[[dict[str, Any]], ServerThread]) -> ServerThread:
    return serve({"enableTestCommands": True})


@pytest.fixture
def client(srv: ServerThread) -> Iterator[MongoClient[dict[str, Any]]]:
    with MongoClient(srv.uri) as c:
        yield c


def _raw(client: MongoClient[dict[str, Any]]) -> Any:
    return client.get_database(
        "admin", codec_options=CodecOptions(uuid_representation=UuidRepresentation.STANDARD)
    )


def _local(client: MongoClient[dict[str, Any]], **spec: Any) -> list[dict[str, Any]]:
    return list(client.admin.aggregate([{"$listLocalSessions": spec}, {"$sort": {"lastUse": 1}}]))


def _ten_in_batches_of_two(client: MongoClient[dict[str, Any]], s: ClientSession) -> Any:
    """Ten documents in t.c, and a cursor of session `s` on them in batches of two."""
    client.t.c.insert_many([{"_id": i} for i in range(10)])
    return client.t.c.find(session=s, batch_size=2)


def test_start_session_replies_with_an_id_and_the_timeout(
    client: MongoClient[dict[str, Any]],
) -> None:
    reply = client.admin.command("startSession")
    assert set(reply) >= {"id", "timeoutMinutes", "ok"}
    assert isinstance(reply["id"]["id"], Binary) and reply["id"]["id"].subtype == 4
    assert reply["timeoutMinutes"] == 30
    assert client.admin.command("hello")["logicalSessionTimeoutMinutes"] == 30
    ids = [d["_id"]["id"] for d in _local(client)]
    assert reply["id"]["id"] in ids


def test_list_local_sessions_shows_used_sessions(client: MongoClient[dict[str, Any]]) -> None:
    with client.start_session() as s:
        client.t.c.insert_one({"_id": 1}, session=s)
        local = _local(client)
        mine = [d for d in local if d["_id"]["id"] == s.session_id["id"]]
        assert len(mine) == 1
        assert mine[0]["_id"]["uid"] == NO_AUTH_UID
        assert set(mine[0]) == {"_id", "lastUse"}
        ids = {d["_id"]["id"] for d in local}
        assert {d["_id"]["id"] for d in _local(client, allUsers=True)} == ids
        assert {d["_id"]["id"] for d in _local(client, users=[{"user": "", "db": ""}])} == ids
        assert _local(client, users=[{"user": "x", "db": "y"}]) == []


def test_end_sessions_forgets_the_session_and_kills_its_cursor(
    client: MongoClient[dict[str, Any]],
) -> None:
    s = client.start_session()
    cursor = _ten_in_batches_of_two(client, s)
    assert len([next(cursor), next(cursor)]) == 2
    client.admin.command("endSessions", [s.session_id])
    assert not [d for d in _local(client) if d["_id"]["id"] == s.session_id["id"]]
    with pytest.raises(OperationFailure) as info:
        list(cursor)
    assert info.value.code == 43  # CursorNotFound
    s.end_session()


@pytest.mark.parametrize(
    "kill",
    [
        lambda c, s: c.admin.command("killSessions", [s.session_id]),
        lambda c, s: c.admin.command("killSessions", []),
        lambda c, s: c.admin.command("killAllSessions", []),
        lambda c, s: c.admin.command("killAllSessions", [{"user": "", "db": ""}]),
        lambda c, s: c.admin.command("killAllSessionsByPattern", []),
        lambda c, s: c.admin.command("killAllSessionsByPattern", [{"lsid": s.session_id}]),
        lambda c, s: c.admin.command("killAllSessionsByPattern", [{"uid": NO_AUTH_UID}]),
    ],
    ids=["killSessions", "own", "killAll", "killAllUser", "pattern", "patternLsid", "patternUid"],
)
def test_a_killed_sessions_cursor_dies(client: MongoClient[dict[str, Any]], kill: Any) -> None:
    with client.start_session() as s:
        cursor = _ten_in_batches_of_two(client, s)
        next(cursor)
        kill(client, s)
        with pytest.raises(OperationFailure) as info:
            list(cursor)
        assert info.value.code == 43
        # The session itself stays usable.
        assert client.t.c.count_documents({}, session=s) == 10


def test_kill_patterns_that_match_nothing_leave_cursors(
    client: MongoClient[dict[str, Any]],
) -> None:
    with client.start_session() as s:
        cursor = _ten_in_batches_of_two(client, s)
        next(cursor)
        client.admin.command("killAllSessions", [{"user": "nobody", "db": "admin"}])
        client.admin.command(
            "killAllSessionsByPattern", [{"lsid": {"id": Binary.from_uuid(uuid.uuid4())}}]
        )
        client.admin.command("killAllSessionsByPattern", [{"roles": [{"role": "r", "db": "a"}]}])
        client.admin.command("killSessions", [{"id": Binary.from_uuid(uuid.uuid4())}])
        assert len(list(cursor)) == 9


def test_refresh_writes_config_system_sessions_with_its_ttl_index(
    srv: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    with client.start_session() as s:
        ident = s.session_id["id"]
        client.t.c.insert_one({}, session=s)
        client.admin.command("refreshLogicalSessionCacheNow")
        records = list(client.config.system.sessions.find({"_id.id": ident}))
        assert len(records) == 1
        assert set(records[0]) == {"_id", "lastUse"}
        assert records[0]["_id"] == {"id": ident, "uid": NO_AUTH_UID}
        indexes = {ix["name"]: ix for ix in client.config.system.sessions.list_indexes()}
        assert indexes["lsidTTLIndex"]["key"] == {"lastUse": 1}
        assert indexes["lsidTTLIndex"]["expireAfterSeconds"] == 1800
        listed = list(
            client.config.system.sessions.aggregate(
                [{"$listSessions": {}}, {"$project": {"_id": 1}}]
            )
        )
        assert {"_id": records[0]["_id"]} in listed
        assert list(
            client.config.system.sessions.aggregate([{"$listSessions": {"allUsers": True}}])
        )
        assert not list(
            client.config.system.sessions.aggregate(
                [{"$listSessions": {"users": [{"user": "x", "db": "y"}]}}]
            )
        )
    # Ended, its record goes at the next refresh. Another client ends it: this one's next
    # command would take the ended session from its pool again.
    with MongoClient(srv.uri) as other:
        other.admin.command("endSessions", [{"id": ident}])
        other.admin.command("refreshLogicalSessionCacheNow")
        assert not list(other.config.system.sessions.find({"_id.id": ident}))


def test_refresh_sessions_keeps_a_session_alive(client: MongoClient[dict[str, Any]]) -> None:
    reply = client.admin.command("startSession")
    lsid = {"id": reply["id"]["id"]}
    client.admin.command("ttlClock", advanceSeconds=20 * 60)
    client.admin.command("refreshSessions", [lsid])
    client.admin.command("ttlClock", advanceSeconds=20 * 60)
    client.admin.command("refreshLogicalSessionCacheNow")
    assert [d for d in _local(client) if d["_id"]["id"] == lsid["id"]]
    client.admin.command("ttlClock", advanceSeconds=31 * 60)
    client.admin.command("refreshLogicalSessionCacheNow")
    assert not [d for d in _local(client) if d["_id"]["id"] == lsid["id"]]
    client.admin.command("ttlClock", reset=True)


def test_an_idle_session_times_out_and_its_cursor_dies(
    client: MongoClient[dict[str, Any]],
) -> None:
    with client.start_session() as s:
        cursor = _ten_in_batches_of_two(client, s)
        next(cursor)
        client.admin.command("ttlClock", advanceSeconds=29 * 60)
        client.admin.command("reapLogicalSessionCacheNow")
        next(cursor), next(cursor)  # a getMore: still alive, and used now
        client.admin.command("ttlClock", advanceSeconds=30 * 60)
        client.admin.command("reapLogicalSessionCacheNow")
        with pytest.raises(OperationFailure) as info:
            list(cursor)
        assert info.value.code == 43
    client.admin.command("ttlClock", reset=True)


def test_the_timeout_follows_the_startup_parameter(
    serve: Callable[[dict[str, Any]], ServerThread],
) -> None:
    srv = serve({"localLogicalSessionTimeoutMinutes": 7, "enableTestCommands": True})
    with MongoClient(srv.uri) as c:
        assert c.admin.command("hello")["logicalSessionTimeoutMinutes"] == 7
        assert c.admin.command("startSession")["timeoutMinutes"] == 7
        assert (
            c.admin.command("getParameter", localLogicalSessionTimeoutMinutes=1)[
                "localLogicalSessionTimeoutMinutes"
            ]
            == 7
        )
        with pytest.raises(OperationFailure):
            c.admin.command("setParameter", localLogicalSessionTimeoutMinutes=9)


def test_implicit_sessions_keep_a_cursor_across_get_mores(
    srv: ServerThread,
) -> None:
    listener = Commands()
    with MongoClient(srv.uri, event_listeners=[listener]) as c:
        c.t.c.insert_many([{"_id": i} for i in range(25)])
        docs = list(c.t.c.find(batch_size=3))
        assert [d["_id"] for d in docs] == list(range(25))
        finds = [e for e in listener.started_events if e.command_name in ("find", "getMore")]
        assert len(finds) == 9
        lsids = {e.command["lsid"]["id"] for e in finds}
        assert len(lsids) == 1  # the implicit session of the find, reused by its getMores
        # The implicit session is the server's: listed, and owning the cursor while it is open
        # (killing it kills the cursor).
        cursor = c.t.c.find(batch_size=2)
        next(cursor)
        lsid = listener.started_events[-1].command["lsid"]
        local = c.admin.aggregate([{"$listLocalSessions": {}}])
        assert lsid["id"] in {d["_id"]["id"] for d in local}
        next(cursor), next(cursor)
        c.admin.command("killSessions", [lsid])
        with pytest.raises(OperationFailure) as info:
            list(cursor)
        assert info.value.code == 43


@pytest.mark.parametrize(
    ("lsid", "code", "message"),
    [
        (
            "x",
            14,
            "BSON field 'OperationSessionInfo.lsid' is the wrong type 'string', expected type 'object'",
        ),
        ({}, 40414, "BSON field 'OperationSessionInfo.lsid.id' is missing but a required field"),
        (
            {"id": 1},
            14,
            "BSON field 'OperationSessionInfo.lsid.id' is the wrong type 'int', expected type 'binData'",
        ),
        (
            {"id": Binary(b"0123456789abcdef", 0)},
            14,
            "BSON field 'OperationSessionInfo.lsid.id' is the wrong binData type 'general', expected type 'UUID'",
        ),
        (
            {"id": Binary(uuid.uuid4().bytes, 4), "x": 1},
            40415,
            "BSON field 'OperationSessionInfo.lsid.x' is an unknown field.",
        ),
    ],
)
def test_a_malformed_lsid_is_refused(srv: ServerThread, lsid: Any, code: int, message: str) -> None:
    # A raw socket: a driver puts its own lsid on every command.
    with rawwire.connect(srv) as sock:
        reply = rawwire.op_msg(sock, {"find": "c", "lsid": lsid, "$db": "t"})
        assert (reply["ok"], reply["code"], reply["errmsg"]) == (0.0, code, message)
        assert rawwire.op_msg(sock, {"ping": 1, "$db": "t"})["ok"] == 1.0


def test_list_stages_in_the_wrong_place(client: MongoClient[dict[str, Any]]) -> None:
    with pytest.raises(OperationFailure) as info:
        list(client.t.c.aggregate([{"$listLocalSessions": {}}]))
    assert info.value.code == 73
    with pytest.raises(OperationFailure) as info:
        list(client.t.c.aggregate([{"$listSessions": {}}]))
    assert info.value.code == 73
    assert info.value.details is not None
    assert info.value.details["errmsg"] == (
        "$listSessions must be run against the 'system.sessions' collection in the 'config' "
        "database."
    )
    with pytest.raises(OperationFailure) as info:
        _local(client, allUsers=True, users=[{"user": "a", "db": "b"}])
    assert info.value.code == 12
    with pytest.raises(OperationFailure) as info:
        _local(client, bogus=1)
    assert info.value.code == 40415


def test_kill_sessions_interrupts_a_waiting_get_more(
    client: MongoClient[dict[str, Any]], srv: ServerThread
) -> None:
    client.t.create_collection("capped", capped=True, size=4096)
    client.t.capped.insert_one({"_id": 1})
    with client.start_session() as s:
        cursor = client.t.capped.find(
            session=s, cursor_type=CursorType.TAILABLE_AWAIT
        ).max_await_time_ms(10_000)
        assert next(cursor) == {"_id": 1}
        outcome: list[Any] = []

        def wait() -> None:
            started = time.monotonic()
            try:
                outcome.append(next(cursor, None))
            except OperationFailure as exc:
                outcome.append(exc.code)
            outcome.append(time.monotonic() - started)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)  # the getMore is waiting for data
        with MongoClient(srv.uri) as other:
            other.admin.command("killSessions", [s.session_id])
        waiter.join(5)
        assert not waiter.is_alive()
        # Woken long before its 10 s: the cursor was killed (pymongo ends a tailable cursor on
        # CursorKilled quietly).
        assert outcome[0] is None and outcome[1] < 5
        assert not cursor.alive


def test_the_ttl_index_follows_the_timeout_across_restarts(tmp_path: Any, mode: str) -> None:
    path = str(tmp_path / "data")
    repl_set = "rs0" if mode == "replset" else None
    for minutes in (30, 5):
        params = {"enableTestCommands": True, "localLogicalSessionTimeoutMinutes": minutes}
        srv = ServerThread(path, params, repl_set=repl_set).start()
        try:
            with MongoClient(srv.uri) as c:
                c.admin.command("refreshLogicalSessionCacheNow")
                indexes = {ix["name"]: ix for ix in c.config.system.sessions.list_indexes()}
                assert indexes["lsidTTLIndex"]["expireAfterSeconds"] == minutes * 60
        finally:
            srv.stop()


def test_the_ttl_monitor_expires_unrefreshed_records(client: MongoClient[dict[str, Any]]) -> None:
    ident = client.admin.command("startSession")["id"]["id"]
    client.admin.command("refreshLogicalSessionCacheNow")
    assert client.config.system.sessions.count_documents({"_id.id": ident}) == 1
    try:
        client.admin.command("ttlClock", advanceSeconds=29 * 60)
        client.admin.command("ttlMonitorPass")
        assert client.config.system.sessions.count_documents({"_id.id": ident}) == 1
        client.admin.command("ttlClock", advanceSeconds=2 * 60)
        client.admin.command("ttlMonitorPass")
        assert client.config.system.sessions.count_documents({"_id.id": ident}) == 0
    finally:
        client.admin.command("ttlClock", reset=True)


def test_sessions_belong_to_their_user_under_auth(tmp_path: Any) -> None:
    srv = ServerThread(str(tmp_path / "auth"), {"enableTestCommands": True}, auth=True).start()
    try:
        with MongoClient(srv.uri) as first:  # the localhost exception: the first user
            first.admin.command("createUser", "root", pwd="pw", roles=["root"])
        with MongoClient(srv.uri, username="root", password="pw") as root:
            root.admin.command(
                "createUser", "ann", pwd="pw", roles=[{"role": "readWrite", "db": "t"}]
            )
            root.t.c.insert_many([{"_id": i} for i in range(5)])
        with MongoClient(srv.uri, username="ann", password="pw", authSource="admin") as ann:
            reply = ann.admin.command("startSession")
            assert reply["timeoutMinutes"] == 30
            mine = list(ann.admin.aggregate([{"$listLocalSessions": {}}]))
            ann_uid = hashlib.sha256(b"ann@admin").digest()
            assert mine and {d["_id"]["uid"] for d in mine} == {ann_uid}
            assert {d["user"]["name"] for d in mine} == {"ann@admin"}
            with ann.start_session() as s:
                cursor = ann.t.c.find(session=s, batch_size=2)
                next(cursor)
                # Her own sessions she may kill; everyone's needs killAnySession.
                with pytest.raises(OperationFailure) as info:
                    ann.admin.command("killAllSessions", [])
                assert info.value.code == 13
                ann.admin.command("killSessions", [])
                with pytest.raises(OperationFailure) as info:
                    list(cursor)
                assert info.value.code == 43
        with MongoClient(srv.uri, username="root", password="pw") as root:
            everyone = list(root.admin.aggregate([{"$listLocalSessions": {"allUsers": True}}]))
            assert hashlib.sha256(b"ann@admin").digest() in {d["_id"]["uid"] for d in everyone}
            root.admin.command("killAllSessions", [{"user": "ann", "db": "admin"}])
    finally:
        srv.stop()


def test_a_get_more_must_be_in_its_cursors_session(srv: ServerThread) -> None:
    a = {"id": Binary(b"A" * 16, 4)}
    b = {"id": Binary(b"B" * 16, 4)}
    with rawwire.connect(srv) as sock:
        docs = [{"_id": i} for i in range(10)]
        rawwire.op_msg(sock, {"insert": "c", "documents": docs, "$db": "t"})

        def open_cursor(lsid: Any) -> int:
            body: dict[str, Any] = {"find": "c", "batchSize": 1, "$db": "t"}
            if lsid is not None:
                body["lsid"] = lsid
            return int(rawwire.op_msg(sock, body)["cursor"]["id"])

        def get_more(cid: int, lsid: Any) -> dict[str, Any]:
            body: dict[str, Any] = {"getMore": Int64(cid), "collection": "c", "$db": "t"}
            if lsid is not None:
                body["lsid"] = lsid
            return rawwire.op_msg(sock, body)

        a_text = "41414141-4141-4141-4141-414141414141 - " + NO_AUTH_TEXT
        b_text = "42424242-4242-4242-4242-424242424242 - " + NO_AUTH_TEXT
        cid = open_cursor(a)
        reply = get_more(cid, b)
        assert (reply["code"], reply["errmsg"]) == (
            50738,
            f"Cannot run getMore on cursor {cid}, which was created in session {a_text}, "
            f"in session {b_text}",
        )
        reply = get_more(cid, None)
        assert (reply["code"], reply["errmsg"]) == (
            50737,
            f"Cannot run getMore on cursor {cid}, which was created in session {a_text}, "
            "without an lsid",
        )
        assert get_more(cid, a)["ok"] == 1.0
        cid = open_cursor(None)
        reply = get_more(cid, b)
        assert (reply["code"], reply["errmsg"]) == (
            50736,
            f"Cannot run getMore on cursor {cid}, which was not created in a session, in "
            f"session {b_text}",
        )
        assert get_more(cid, None)["ok"] == 1.0
