"""A one-member replica set's face, as drivers meet it: pymongo, AsyncMongoClient and motor connect
with `?replicaSet=rs0` and find its primary; hello and isMaster answer as that primary; every reply
carries `$clusterTime` and `operationTime`; replSetGetStatus, replSetGetConfig, replSetInitiate and
replSetStepDown answer as mongod's lone primary does; write concerns (w: "majority", 1, j, and
what one member cannot satisfy) and read concerns (local, available, majority, snapshot,
linearizable, afterClusterTime, atClusterTime) as mongod 7.0 takes them; causally consistent
sessions read their own writes. A standalone server keeps its answers (76 NoReplicationEnabled)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from bson import Int64, ObjectId, Timestamp
from pymongo import AsyncMongoClient, MongoClient, ReadPreference, WriteConcern
from pymongo.errors import OperationFailure, WriteConcernError
from pymongo.read_concern import ReadConcern

from ebbdb.server.embedded import ServerThread
from tests.helpers import Recorder

Doc = dict[str, Any]
#: An unsigned $clusterTime's signature, as pymongo decodes it (binary subtype 0 is bytes).
ZERO_SIGNATURE = {"hash": bytes(20), "keyId": Int64(0)}


@pytest.fixture
def rs(replset: ServerThread) -> Iterator[MongoClient[Doc]]:
    """A client that found the set's primary through `?replicaSet=rs0`."""
    with MongoClient(replset.uri, serverSelectionTimeoutMS=5000) as c:
        yield c
        for name in c.list_database_names():
            if name not in ("admin", "config", "local"):
                c.drop_database(name)


def host_of(srv: ServerThread) -> str:
    return f"127.0.0.1:{srv.port}"


def newest_oplog_ts(client: MongoClient[Doc]) -> Timestamp:
    entry = client.local["oplog.rs"].find_one(sort=[("$natural", -1)])
    assert entry is not None
    ts: Timestamp = entry["ts"]
    return ts


# -- discovery --------------------------------------------------------------------------------------


def test_uri_is_the_replica_sets(replset: ServerThread) -> None:
    assert replset.uri == f"mongodb://127.0.0.1:{replset.port}/?replicaSet=rs0"


def test_pymongo_discovers_the_primary_and_writes_through_it(
    replset: ServerThread, rs: MongoClient[Doc]
) -> None:
    rs.app.items.insert_one({"_id": 1})  # retryable (pymongo's default) on a replica set
    assert rs.app.items.find_one() == {"_id": 1}
    description = rs.topology_description
    assert description.topology_type_name == "ReplicaSetWithPrimary"
    assert description.replica_set_name == "rs0"
    [server] = description.server_descriptions().values()
    assert server.server_type_name == "RSPrimary"
    assert server.address == ("127.0.0.1", replset.port)
    assert rs.primary == ("127.0.0.1", replset.port)
    # Reads that prefer a secondary find none and fall back to the primary.
    preferred = rs.app.get_collection("items", read_preference=ReadPreference.SECONDARY_PREFERRED)
    assert preferred.count_documents({}) == 1


def test_a_wrong_set_name_finds_no_server(replset: ServerThread) -> None:
    with MongoClient(
        f"mongodb://127.0.0.1:{replset.port}/?replicaSet=other", serverSelectionTimeoutMS=500
    ) as c:
        with pytest.raises(Exception, match="No replica set members available|timed out"):
            c.admin.command("ping")


@pytest.mark.asyncio
async def test_async_mongo_client(replset: ServerThread) -> None:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(replset.uri, serverSelectionTimeoutMS=5000)
    try:
        await client.asyncapp.items.insert_one({"_id": "a"})
        assert await client.asyncapp.items.find_one() == {"_id": "a"}
        assert client.topology_description.topology_type_name == "ReplicaSetWithPrimary"
        assert await client.primary == ("127.0.0.1", replset.port)
        await client.drop_database("asyncapp")
    finally:
        await client.close()


@pytest_asyncio.fixture
async def motor(replset: ServerThread) -> AsyncIterator[Any]:
    from motor.motor_asyncio import AsyncIOMotorClient

    client: Any = AsyncIOMotorClient(replset.uri, serverSelectionTimeoutMS=5000)
    yield client
    await client.drop_database("motorapp")
    client.close()


@pytest.mark.asyncio
async def test_motor(replset: ServerThread, motor: Any) -> None:
    await motor.motorapp.items.insert_one({"_id": "m"})
    assert await motor.motorapp.items.find_one() == {"_id": "m"}
    assert motor.delegate.topology_description.topology_type_name == "ReplicaSetWithPrimary"
    status = await motor.admin.command("replSetGetStatus")
    assert status["members"][0]["name"] == host_of(replset)


def test_replset_host_is_what_clients_reconnect_to(tmp_path: Any) -> None:
    """--replSetHost names the member (Docker: the published address): a client given another
    seed address finds the set's member under that name and uses it."""
    srv = ServerThread(str(tmp_path / "d"), repl_set="rs0")
    srv.config = dataclasses.replace(srv.config, repl_set_host="localhost")
    srv.start()
    try:
        with MongoClient(srv.uri, serverSelectionTimeoutMS=5000) as c:
            hello = c.admin.command("hello")
            assert hello["hosts"] == [f"localhost:{srv.port}"]
            assert hello["me"] == hello["primary"] == f"localhost:{srv.port}"
            c.app.t.insert_one({})
            assert c.primary == ("localhost", srv.port)
            assert c.admin.command("replSetGetConfig")["config"]["members"][0]["host"] == (
                f"localhost:{srv.port}"
            )
    finally:
        srv.stop()


# -- hello ------------------------------------------------------------------------------------------


def test_hello_answers_as_the_primary(replset: ServerThread, rs: MongoClient[Doc]) -> None:
    reply = rs.admin.command("hello")
    host = host_of(replset)
    assert reply["setName"] == "rs0"
    assert reply["setVersion"] == 1
    assert reply["hosts"] == [host]
    assert reply["me"] == reply["primary"] == host
    assert reply["isWritablePrimary"] is True
    assert reply["secondary"] is False
    assert reply["electionId"] == ObjectId("7fffffff0000000000000001")
    version = reply["topologyVersion"]
    assert isinstance(version["processId"], ObjectId)
    assert version["counter"] == 0 and isinstance(version["counter"], Int64)
    last = reply["lastWrite"]
    assert last["opTime"] == {"ts": reply["operationTime"], "t": 1}
    assert last["majorityOpTime"] == last["opTime"]
    assert last["lastWriteDate"] == last["majorityWriteDate"]
    assert reply["ok"] == 1.0
    # The keys in mongod's order.
    assert list(reply)[:10] == [
        "topologyVersion",
        "hosts",
        "setName",
        "setVersion",
        "isWritablePrimary",
        "secondary",
        "primary",
        "me",
        "electionId",
        "lastWrite",
    ]


def test_server_status_has_the_repl_section(replset: ServerThread, rs: MongoClient[Doc]) -> None:
    repl = rs.admin.command("serverStatus")["repl"]
    assert repl["setName"] == "rs0"
    assert repl["hosts"] == [host_of(replset)]
    assert repl["isWritablePrimary"] is True and repl["secondary"] is False
    assert repl["rbid"] == 1


def test_a_standalone_server_status_has_none(client: MongoClient[Doc]) -> None:
    assert "repl" not in client.admin.command("serverStatus")


def test_is_master_spells_it_ismaster(rs: MongoClient[Doc]) -> None:
    reply = rs.admin.command("isMaster")
    assert reply["ismaster"] is True
    assert "isWritablePrimary" not in reply
    assert reply["setName"] == "rs0" and reply["secondary"] is False


def test_last_write_follows_the_oplog(rs: MongoClient[Doc]) -> None:
    rs.app.t.insert_one({"x": 1})
    ts = newest_oplog_ts(rs)
    reply = rs.admin.command("hello")
    assert reply["lastWrite"]["opTime"] == {"ts": ts, "t": 1}
    assert reply["lastWrite"]["lastWriteDate"].timestamp() == ts.time


def test_an_awaitable_hello_waits_for_max_await_time(rs: MongoClient[Doc]) -> None:
    """Drivers' streaming monitors send the topologyVersion they know: with the current one, the
    reply waits maxAwaitTimeMS (a lone primary's topology never changes); with another, at once."""
    version = rs.admin.command("hello")["topologyVersion"]
    started = time.monotonic()
    reply = rs.admin.command("hello", topologyVersion=version, maxAwaitTimeMS=300)
    assert time.monotonic() - started >= 0.29
    assert reply["topologyVersion"] == version
    started = time.monotonic()
    other = {"processId": ObjectId(), "counter": Int64(0)}
    rs.admin.command("hello", topologyVersion=other, maxAwaitTimeMS=5000)
    assert time.monotonic() - started < 1.0
    with pytest.raises(OperationFailure) as err:
        rs.admin.command("hello", maxAwaitTimeMS=100)
    assert err.value.code == 51760
    assert "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'" in str(err.value)
    with pytest.raises(OperationFailure) as err:
        rs.admin.command("hello", topologyVersion=version)
    assert err.value.code == 51760
    with pytest.raises(OperationFailure) as err:
        rs.admin.command("hello", topologyVersion=version, maxAwaitTimeMS=-1)
    assert err.value.code == 31373


def test_an_awaiting_hello_does_not_hold_up_shutdown(tmp_path: Any) -> None:
    import threading

    srv = ServerThread(str(tmp_path / "d"), repl_set="rs0").start()
    # (A short server selection: closing the client after the server is gone tries to end its
    # sessions there.)
    with MongoClient(srv.uri, serverSelectionTimeoutMS=300) as c:
        version = c.admin.command("hello")["topologyVersion"]
        got: list[Any] = []

        def wait() -> None:
            try:
                got.append(c.admin.command("hello", topologyVersion=version, maxAwaitTimeMS=20000))
            except Exception as exc:
                got.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.2)
        started = time.monotonic()
        srv.stop()
        assert time.monotonic() - started < 3.0
        waiter.join(10)
        assert got and isinstance(got[0], dict) and got[0]["ok"] == 1.0


# -- cluster time ----------------------------------------------------------------------------------


def raw_replies(srv: ServerThread) -> tuple[MongoClient[Doc], Recorder]:
    recorder = Recorder()
    client: MongoClient[Doc] = MongoClient(
        srv.uri, event_listeners=[recorder], serverSelectionTimeoutMS=5000
    )
    return client, recorder


def test_every_reply_carries_cluster_time_and_operation_time(replset: ServerThread) -> None:
    client, recorder = raw_replies(replset)
    with client:
        client.admin.command("ping")
        client.app.t.insert_one({"_id": 1})
        with pytest.raises(OperationFailure):
            client.app.command("noSuchCommand")
        with pytest.raises(OperationFailure):
            client.app.t.insert_one({"_id": 1})  # a write error: ok 1 all the same
        assert client.app.t.find_one() == {"_id": 1}
        client.drop_database("app")
    ts = None
    for name, reply in recorder.replies:
        assert reply["$clusterTime"]["signature"] == ZERO_SIGNATURE, name
        assert reply["$clusterTime"]["clusterTime"] == reply["operationTime"], name
        assert isinstance(reply["operationTime"], Timestamp)
        if name == "insert" and ts is None:
            ts = reply["operationTime"]
    # An insert's operationTime is its oplog entry's.
    with MongoClient(replset.uri) as c:
        assert c.local["oplog.rs"].find_one({"o._id": 1, "ns": "app.t"})["ts"] == ts  # type: ignore[index]
    # And failed commands carry them too (pymongo reports those as failures, not replies).
    with MongoClient(replset.uri) as c:
        with pytest.raises(OperationFailure) as err:
            c.app.command("noSuchCommand")
        assert err.value.details is not None
        assert isinstance(err.value.details["operationTime"], Timestamp)
        assert err.value.details["$clusterTime"]["signature"] == ZERO_SIGNATURE


def test_a_write_reply_says_its_optime_and_the_election(rs: MongoClient[Doc]) -> None:
    reply = rs.app.command("insert", "t", documents=[{"_id": 1}])
    assert list(reply)[:4] == ["n", "electionId", "opTime", "ok"]
    assert reply["electionId"] == ObjectId("7fffffff0000000000000001")
    assert reply["opTime"] == {"ts": newest_oplog_ts(rs), "t": 1}
    assert reply["operationTime"] == reply["opTime"]["ts"]
    reply = rs.app.command("update", "t", updates=[{"q": {"_id": 1}, "u": {"$set": {"a": 1}}}])
    assert reply["opTime"]["ts"] == newest_oplog_ts(rs)
    reply = rs.app.command("delete", "t", deletes=[{"q": {"_id": 1}, "limit": 1}])
    assert reply["opTime"]["ts"] == newest_oplog_ts(rs) and reply["n"] == 1
    assert "opTime" not in rs.app.command("find", "t")


def test_the_cluster_time_moves_with_writes_only(rs: MongoClient[Doc]) -> None:
    before = rs.admin.command("ping")["operationTime"]
    assert rs.admin.command("ping")["operationTime"] == before
    rs.app.t.insert_one({})
    after = rs.admin.command("ping")["operationTime"]
    assert after > before
    assert after == newest_oplog_ts(rs)


def test_a_client_gossips_the_cluster_time(rs: MongoClient[Doc]) -> None:
    now = rs.admin.command("ping")["$clusterTime"]
    # pymongo sends $clusterTime on every command; a raw one is accepted too, even a later one.
    later = {
        "clusterTime": Timestamp(now["clusterTime"].time + 100, 1),
        "signature": now["signature"],
    }
    assert rs.admin.command({"ping": 1, "$clusterTime": later})["ok"] == 1.0


def test_a_standalone_server_says_nothing_of_a_set(client: MongoClient[Doc]) -> None:
    reply = client.admin.command("hello")
    for field in (
        "setName",
        "hosts",
        "topologyVersion",
        "lastWrite",
        "$clusterTime",
        "operationTime",
    ):
        assert field not in reply
    assert reply["isWritablePrimary"] is True


# -- the replSet commands --------------------------------------------------------------------------


def test_repl_set_get_status(replset: ServerThread, rs: MongoClient[Doc]) -> None:
    status = rs.admin.command("replSetGetStatus")
    optime = {"ts": status["operationTime"], "t": 1}
    assert status["set"] == "rs0"
    assert status["myState"] == 1
    assert status["term"] == 1 and isinstance(status["term"], Int64)
    assert status["optimes"]["lastCommittedOpTime"] == optime
    assert status["optimes"]["appliedOpTime"] == optime
    assert status["optimes"]["durableOpTime"] == optime
    assert status["majorityVoteCount"] == status["writeMajorityCount"] == 1
    [member] = status["members"]
    assert member["_id"] == 0
    assert member["name"] == host_of(replset)
    assert member["health"] == 1
    assert member["state"] == 1
    assert member["stateStr"] == "PRIMARY"
    assert member["self"] is True
    assert member["optime"] == optime
    assert member["optimeDate"].timestamp() == optime["ts"].time
    assert isinstance(member["uptime"], int) and member["uptime"] >= 0
    assert isinstance(member["electionTime"], Timestamp)
    assert member["electionDate"] <= status["date"]
    assert member["configVersion"] == 1 and member["configTerm"] == 1
    assert status["ok"] == 1.0


def test_repl_set_get_config(replset: ServerThread, rs: MongoClient[Doc]) -> None:
    reply = rs.admin.command("replSetGetConfig")
    config = reply["config"]
    settings = config.pop("settings")
    assert config == {
        "_id": "rs0",
        "version": 1,
        "term": 1,
        "members": [
            {
                "_id": 0,
                "host": host_of(replset),
                "arbiterOnly": False,
                "buildIndexes": True,
                "hidden": False,
                "priority": 1,
                "tags": {},
                "secondaryDelaySecs": 0,
                "votes": 1,
            }
        ],
        "protocolVersion": 1,
        "writeConcernMajorityJournalDefault": True,
    }
    assert isinstance(settings["replicaSetId"], ObjectId)
    assert settings["getLastErrorDefaults"] == {"w": 1, "wtimeout": 0}
    assert settings["electionTimeoutMillis"] == 10000
    # The same set every time it is asked.
    again = rs.admin.command("replSetGetConfig", commitmentStatus=True)
    assert again["config"]["settings"]["replicaSetId"] == settings["replicaSetId"]
    assert again["commitmentStatus"] is True


@pytest.mark.parametrize(
    "config",
    [
        None,
        {"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:27017"}]},
        {"_id": "other", "members": [{"_id": 0, "host": "elsewhere:1"}, {"_id": 1, "host": "x:2"}]},
    ],
    ids=["no-config", "same-set", "another-set"],
)
def test_repl_set_initiate_is_already_done(rs: MongoClient[Doc], config: Doc | None) -> None:
    with pytest.raises(OperationFailure) as err:
        rs.admin.command("replSetInitiate", config)
    assert err.value.code == 23
    assert err.value.details is not None
    assert err.value.details["codeName"] == "AlreadyInitialized"
    assert err.value.details["errmsg"] == "already initialized"
    # Nothing changed, and the connection is fine.
    assert rs.admin.command("replSetGetConfig")["config"]["_id"] == "rs0"
    assert rs.admin.command("ping")["ok"] == 1.0


def test_repl_set_step_down_is_refused_as_a_lone_primary_refuses_it(rs: MongoClient[Doc]) -> None:
    started = time.monotonic()
    with pytest.raises(OperationFailure) as err:
        rs.admin.command("replSetStepDown", 5, secondaryCatchUpPeriodSecs=1)
    assert time.monotonic() - started >= 0.95  # it waited for a secondary to catch up
    assert err.value.code == 262
    assert err.value.details is not None
    assert err.value.details["codeName"] == "ExceededTimeLimit"
    message = err.value.details["errmsg"]
    assert message.startswith("No electable secondaries caught up as of ")
    assert message.endswith(
        "Please use the replSetStepDown command with the argument {force: true} to force node "
        "to step down."
    )
    # Still the primary.
    assert rs.admin.command("hello")["isWritablePrimary"] is True
    for period in (5, 10):  # the default catch-up period is 10 s: longer than that
        with pytest.raises(OperationFailure) as err:
            rs.admin.command("replSetStepDown", period)
        assert err.value.code == 2
        assert "stepdown period must be longer than secondaryCatchUpPeriodSecs" in str(err.value)
    with pytest.raises(OperationFailure) as err:
        rs.admin.command("replSetStepDown", 5, force=True)
    assert err.value.code == 238


@pytest.mark.parametrize(
    "command", ["replSetGetStatus", "replSetGetConfig", "replSetInitiate", "replSetStepDown"]
)
def test_repl_set_commands_belong_to_admin(rs: MongoClient[Doc], command: str) -> None:
    with pytest.raises(OperationFailure) as err:
        rs.app.command(command)
    assert err.value.code == 13
    assert f"{command} may only be run against the admin database." in str(err.value)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("replSetGetStatus", "not running with --replSet"),
        ("replSetGetConfig", "not running with --replSet"),
        ("replSetStepDown", "not running with --replSet"),
        ("replSetInitiate", "This node was not started with replication enabled."),
    ],
)
def test_a_standalone_server_has_no_replica_set(
    client: MongoClient[Doc], command: str, message: str
) -> None:
    with pytest.raises(OperationFailure) as err:
        client.admin.command(command)
    assert err.value.code == 76
    assert err.value.details is not None
    assert err.value.details["codeName"] == "NoReplicationEnabled"
    assert err.value.details["errmsg"] == message


# -- write concerns ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "concern",
    [
        {"w": "majority"},
        {"w": 1},
        {"w": 1, "j": True},
        {"w": "majority", "wtimeout": 1000},
        {"j": True},
        {"w": 0},
    ],
    ids=["majority", "w1", "w1-j", "majority-wtimeout", "j", "w0"],
)
def test_write_concerns_one_member_satisfies(rs: MongoClient[Doc], concern: Doc) -> None:
    items = rs.app.get_collection("items", write_concern=WriteConcern(**concern))
    result = items.insert_one({"c": str(concern)})
    assert result.acknowledged is (concern.get("w") != 0)
    deadline = time.monotonic() + 5
    while rs.app.items.count_documents({"c": str(concern)}) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # w: 0 is not acknowledged: its insert arrives on its own time
    assert rs.app.items.count_documents({"c": str(concern)}) == 1


@pytest.mark.parametrize(
    ("w", "code", "code_name", "message"),
    [
        (2, 100, "UnsatisfiableWriteConcern", "Not enough data-bearing nodes"),
        (50, 100, "UnsatisfiableWriteConcern", "Not enough data-bearing nodes"),
        (
            "dc",
            79,
            "UnknownReplWriteConcern",
            "No write concern mode named 'dc' found in replica set configuration",
        ),
    ],
)
def test_what_one_member_cannot_satisfy_is_a_write_concern_error_after_the_write(
    rs: MongoClient[Doc], w: Any, code: int, code_name: str, message: str
) -> None:
    items = rs.app.get_collection("items", write_concern=WriteConcern(w=w, wtimeout=100))
    with pytest.raises(WriteConcernError) as err:
        items.insert_one({"_id": 1})
    assert err.value.code == code
    details = err.value.details
    assert details is not None
    assert details["codeName"] == code_name
    assert details["errmsg"] == message
    assert details["errInfo"] == {
        "writeConcern": {"w": w, "wtimeout": 100, "provenance": "clientSupplied"}
    }
    # The write itself is done, as with mongod.
    assert rs.app.items.find_one() == {"_id": 1}


def test_a_write_concern_error_in_the_raw_reply(rs: MongoClient[Doc]) -> None:
    reply = rs.app.command("insert", "items", documents=[{"_id": 2}], writeConcern={"w": 3})
    assert reply["n"] == 1 and reply["ok"] == 1.0
    assert reply["writeConcernError"]["code"] == 100
    # Malformed ones are refused before anything is written, as on a standalone server.
    with pytest.raises(OperationFailure) as err:
        rs.app.command("insert", "items", documents=[{"_id": 3}], writeConcern={"w": -1})
    assert err.value.code == 9
    assert rs.app.items.count_documents({"_id": 3}) == 0


# -- read concerns ----------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["local", "available", "majority", "linearizable", "snapshot"])
def test_read_concern_levels_on_find(rs: MongoClient[Doc], level: str) -> None:
    rs.app.items.insert_many([{"_id": 1}, {"_id": 2}])
    items = rs.app.get_collection("items", read_concern=ReadConcern(level))
    assert list(items.find().sort("_id", 1)) == [{"_id": 1}, {"_id": 2}]
    assert items.count_documents({}) == 2 or level == "snapshot"


@pytest.mark.parametrize("level", ["local", "majority", "linearizable", "snapshot"])
def test_read_concern_levels_on_aggregate_and_distinct(rs: MongoClient[Doc], level: str) -> None:
    rs.app.items.insert_many([{"_id": 1, "k": "a"}, {"_id": 2, "k": "b"}])
    items = rs.app.get_collection("items", read_concern=ReadConcern(level))
    assert list(items.aggregate([{"$sort": {"_id": -1}}])) == [
        {"_id": 2, "k": "b"},
        {"_id": 1, "k": "a"},
    ]
    assert sorted(items.distinct("k")) == ["a", "b"]


def test_a_snapshot_read_tells_the_time_it_read_at(rs: MongoClient[Doc]) -> None:
    rs.app.items.insert_one({"_id": 1})
    reply = rs.app.command("find", "items", readConcern={"level": "snapshot"})
    assert reply["cursor"]["atClusterTime"] == reply["operationTime"]
    reply = rs.app.command("distinct", "items", key="_id", readConcern={"level": "snapshot"})
    assert reply["atClusterTime"] == reply["operationTime"]
    # At that time again: the same data (nothing was written since).
    at = reply["atClusterTime"]
    again = rs.app.command("find", "items", readConcern={"level": "snapshot", "atClusterTime": at})
    assert again["cursor"]["firstBatch"] == [{"_id": 1}]
    assert again["cursor"]["atClusterTime"] == at
    # Once something is written after it, ebbdb no longer has that time's data.
    rs.app.items.insert_one({"_id": 2})
    with pytest.raises(OperationFailure) as err:
        rs.app.command("find", "items", readConcern={"level": "snapshot", "atClusterTime": at})
    assert err.value.code == 239


def test_a_snapshot_session(rs: MongoClient[Doc]) -> None:
    rs.app.items.insert_many([{"_id": 1}, {"_id": 2}])
    with rs.start_session(snapshot=True) as session:
        assert rs.app.items.find_one({"_id": 1}, session=session) == {"_id": 1}
        assert rs.app.items.find_one({"_id": 2}, session=session) == {"_id": 2}
        assert rs.app.items.distinct("_id", session=session) == [1, 2]


def test_after_cluster_time(rs: MongoClient[Doc]) -> None:
    rs.app.items.insert_one({"_id": 1})
    now = rs.admin.command("ping")["operationTime"]
    for level in ("local", "majority", "snapshot"):
        reply = rs.app.command(
            "find", "items", readConcern={"level": level, "afterClusterTime": now}
        )
        assert reply["cursor"]["firstBatch"] == [{"_id": 1}]
    earlier = Timestamp(now.time - 10, 1)
    assert rs.app.command("count", "items", readConcern={"afterClusterTime": earlier})["n"] == 1
    future = Timestamp(now.time + 3600, 1)
    with pytest.raises(OperationFailure) as err:
        rs.app.command("find", "items", readConcern={"afterClusterTime": future})
    assert err.value.code == 72
    assert str(err.value).startswith(
        "readConcern afterClusterTime value must not be greater than the current clusterTime. "
        f"Requested clusterTime: {{ ts: Timestamp({future.time}, 1) }}; current clusterTime: "
        f"{{ ts: Timestamp({now.time}, {now.inc}) }}"
    )


@pytest.mark.parametrize(
    ("read_concern", "command", "code"),
    [
        ({"level": "snapshot"}, "count", 72),
        ({"level": "linearizable"}, "insert", 72),
        ({"level": "bogus"}, "find", 2),
        ({"level": 1}, "find", 14),
        ({"level": "local", "nope": 1}, "find", 40415),
        ({"level": "majority", "atClusterTime": Timestamp(1, 1)}, "find", 72),
        ({"atClusterTime": Timestamp(1, 1)}, "find", 72),
        ({"level": "snapshot", "atClusterTime": "bad"}, "find", 14),
        ({"level": "snapshot", "atClusterTime": Timestamp(0, 0)}, "find", 72),
        ({"level": "linearizable", "afterClusterTime": Timestamp(1, 1)}, "find", 72),
        (
            {
                "level": "snapshot",
                "afterClusterTime": Timestamp(1, 1),
                "atClusterTime": Timestamp(1, 1),
            },
            "find",
            72,
        ),
    ],
)
def test_read_concerns_refused(
    rs: MongoClient[Doc], read_concern: Doc, command: str, code: int
) -> None:
    rs.app.items.insert_one({"_id": 0})
    body: Doc = {command: "items", "readConcern": read_concern}
    if command == "insert":
        body["documents"] = [{"_id": 1}]
    with pytest.raises(OperationFailure) as err:
        rs.app.command(body)
    assert err.value.code == code
    assert rs.app.items.count_documents({}) == 1  # nothing written
    assert rs.admin.command("ping")["ok"] == 1.0


def test_snapshot_outside_a_transaction_names_the_command(rs: MongoClient[Doc]) -> None:
    with pytest.raises(OperationFailure) as err:
        rs.app.command("count", "items", readConcern={"level": "snapshot"})
    assert str(err.value).startswith(
        'Command count does not support { readConcern: { level: "snapshot" } }'
    )


def test_a_majority_read_shows_only_synced_writes(
    replset: ServerThread, rs: MongoClient[Doc]
) -> None:
    """A one-member set's majority commit point is its journal: the read waits for a sync."""
    assert replset.app is not None
    gateway = replset.app.services.gateway
    rs.app.items.insert_one({"_id": 1})
    reply = rs.app.command("find", "items", readConcern={"level": "majority"})
    assert reply["cursor"]["firstBatch"] == [{"_id": 1}]
    assert gateway.engine.durable >= gateway.engine.commits - 1


# -- sessions ---------------------------------------------------------------------------------------


def test_a_causally_consistent_session_reads_its_own_writes(replset: ServerThread) -> None:
    client, recorder = raw_replies(replset)
    with client, client.start_session(causal_consistency=True) as session:
        client.app.items.insert_one({"_id": 1}, session=session)
        written_at = recorder.replies_to("insert")[-1]["operationTime"]
        assert session.operation_time == written_at
        assert client.app.items.find_one({"_id": 1}, session=session) == {"_id": 1}
        [find] = recorder.sent_named("find")
        assert find["readConcern"] == {"afterClusterTime": written_at}
        # A majority read in the same session waits for the same time, and sees the write.
        items = client.app.get_collection("items", read_concern=ReadConcern("majority"))
        assert items.count_documents({}, session=session) == 1
        [aggregate] = recorder.sent_named("aggregate")
        assert aggregate["readConcern"] == {"level": "majority", "afterClusterTime": written_at}
        client.drop_database("app")


@pytest.mark.asyncio
async def test_a_causally_consistent_async_session(replset: ServerThread) -> None:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(replset.uri)
    try:
        async with client.start_session(causal_consistency=True) as session:
            await client.causal.items.insert_one({"_id": 1}, session=session)
            assert await client.causal.items.find_one({}, session=session) == {"_id": 1}
            assert session.cluster_time is not None
            assert session.operation_time == session.cluster_time["clusterTime"]
        await client.drop_database("causal")
    finally:
        await client.close()


# -- the command line -------------------------------------------------------------------------------


def test_the_command_line_starts_a_replica_set(tmp_path: Any) -> None:
    """`ebbdb --replSet rs0 --port 0`: the startup line names the set and its member, whose port
    is the one the system picked; getCmdLineOpts shows the options as mongod's `parsed`."""
    from tests.e2e.test_cli import ServerProcess

    srv = ServerProcess(
        ["--port", "0", "--dbpath", str(tmp_path / "d"), "--replSet", "rs0", "--oplogSize", "5"],
        tmp_path,
    )
    try:
        line = srv.startup_line()
        assert srv.port is not None
        assert line.rstrip().endswith(f" replSet=rs0 (primary, member 127.0.0.1:{srv.port})")
        uri = f"mongodb://127.0.0.1:{srv.port}/?replicaSet=rs0"
        with MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
            assert client.admin.command("hello")["hosts"] == [f"127.0.0.1:{srv.port}"]
            parsed = client.admin.command("getCmdLineOpts")["parsed"]
            assert parsed["replication"] == {"replSet": "rs0", "oplogSizeMB": 5}
            assert client.local["oplog.rs"].options() == {"capped": True, "size": 5 * 1024 * 1024}
        assert srv.stop() == 0
    finally:
        srv.kill()


def test_the_config_is_kept_in_local_system_replset(tmp_path: Any) -> None:
    """As mongod keeps it: the same replicaSetId after a restart, and the member's host as it is
    now (a restart on another port rewrites it)."""
    path = str(tmp_path / "d")
    srv = ServerThread(path, repl_set="rs0").start()
    try:
        with MongoClient(srv.uri) as c:
            config = c.admin.command("replSetGetConfig")["config"]
            assert list(c.local["system.replset"].find()) == [config]
    finally:
        srv.stop()
    srv = ServerThread(path, repl_set="rs0").start()
    try:
        with MongoClient(srv.uri) as c:
            again = c.admin.command("replSetGetConfig")["config"]
            assert again["settings"]["replicaSetId"] == config["settings"]["replicaSetId"]
            assert again["members"][0]["host"] == f"127.0.0.1:{srv.port}"
            assert list(c.local["system.replset"].find()) == [again]
            # Nothing of it went into the oplog (the local database is not replicated).
            assert c.local["oplog.rs"].count_documents({"ns": {"$regex": "^local"}}) == 0
    finally:
        srv.stop()


def test_a_replica_set_with_auth(tmp_path: Any) -> None:
    """--auth: the drivers' monitors say hello before logging in; replSetGetStatus needs a role
    with clusterMonitor (root has it), as mongod's."""
    from ebbdb.server.config import RootUser

    srv = ServerThread(str(tmp_path / "d"), repl_set="rs0", auth=True)
    srv.config = dataclasses.replace(srv.config, root_user=RootUser("admin", "secret"))
    srv.start()
    try:
        with MongoClient(
            srv.uri, username="admin", password="secret", serverSelectionTimeoutMS=5000
        ) as root:
            root.app.t.insert_one({"_id": 1})
            assert root.admin.command("replSetGetStatus")["members"][0]["stateStr"] == "PRIMARY"
            with root.start_session(causal_consistency=True) as session:
                root.app.t.insert_one({"_id": 2}, session=session)
                assert root.app.t.count_documents({}, session=session) == 2
        with MongoClient(srv.uri, serverSelectionTimeoutMS=5000) as anonymous:
            assert anonymous.admin.command("hello")["setName"] == "rs0"
            with pytest.raises(OperationFailure) as err:
                anonymous.admin.command("replSetGetStatus")
            assert err.value.code == 13
    finally:
        srv.stop()
