"""A replica set's configuration and its service, without a network: --replSet, --oplogSize and
--replSetHost (and the config file's replication section, getCmdLineOpts' `parsed`), the member's
advertised host, the ReplicaSet's documents (config, status, hello's fields, the cluster time
stamped on replies), and the read and write concerns a replica set parses."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pytest
from bson import Binary, Int64, ObjectId, Timestamp

from ebbdb.server import read_concern, write_concern
from ebbdb.server.config import Config, parse_args
from ebbdb.server.config_file import ConfigFileError, parse_config, parse_host
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.replication import ReplicaSet, member_host

# -- the command line and the config file ---------------------------------------------------------


def test_standalone_by_default() -> None:
    config = parse_args([])
    assert (config.repl_set, config.oplog_size_mb, config.repl_set_host) == (None, 192, None)
    assert "replication" not in config.parsed()


def test_repl_set_flags() -> None:
    config = parse_args(["--replSet", "rs0", "--oplogSize", "64", "--replSetHost", "db:27018"])
    assert (config.repl_set, config.oplog_size_mb, config.repl_set_host) == ("rs0", 64, "db:27018")
    assert config.parsed()["replication"] == {
        "replSet": "rs0",
        "oplogSizeMB": 64,
        "replSetHost": "db:27018",
    }
    assert parse_args(["--replSet", "rs0"]).parsed()["replication"] == {"replSet": "rs0"}


def test_a_seed_list_names_the_set() -> None:
    assert parse_args(["--replSet", "rs0/a:1,b:2"]).repl_set == "rs0"


def test_an_empty_name_is_no_replica_set() -> None:
    """As with mongod, and so a Compose file can pass `--replSet=${VARIABLE:-}`; --replSetHost
    and --oplogSize are then accepted and unused."""
    config = parse_args(["--replSet=", "--replSetHost=localhost:27017", "--oplogSize", "5"])
    assert config.repl_set is None
    assert parse_args(["--replSet", "rs0", "--replSetHost="]).repl_set_host is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--oplogSize", "0"], "must be at least 1"),
        (["--oplogSize", "x"], "invalid size value"),
        (["--replSet", "rs0", "--replSetHost", "a:"], "cannot parse 'a:' as host:port"),
        (["--replSet", "rs0", "--replSetHost", "h:0"], "port must be between 1 and 65535"),
        (["--replSet", "rs0", "--replSetHost", "h:x"], "cannot parse 'h:x' as host:port"),
        (["--replSet", "/a:1"], "the replica set name must not be empty"),
    ],
)
def test_bad_flags_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_config_file_replication(tmp_path: Path) -> None:
    path = tmp_path / "mongod.conf"
    path.write_text(
        "replication:\n  replSetName: rs1\n  oplogSizeMB: 10\n  replSetHost: 'example.org'\n"
    )
    config = parse_args(["--config", str(path)])
    assert (config.repl_set, config.oplog_size_mb, config.repl_set_host) == (
        "rs1",
        10,
        "example.org",
    )
    # Flags win over the file.
    config = parse_args(["--config", str(path), "--replSet", "rs2", "--oplogSize", "20"])
    assert (config.repl_set, config.oplog_size_mb) == ("rs2", 20)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("replication:\n  oplogSizeMB: 0\n", "replication.oplogSizeMB: expected an integer"),
        ("replication:\n  replSetName: ''\n", "replication.replSetName: expected a non-empty"),
        ("replication:\n  replSetHost: '[::1'\n", "cannot parse"),
        ("replication:\n  enableMajorityReadConcern: true\n", "unrecognized option"),
        ("replication: rs0\n", "replication: expected a mapping of options"),
    ],
)
def test_config_file_replication_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigFileError, match=message):
        parse_config(text)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("db:27018", ("db", 27018)),
        ("db", ("db", None)),
        ("[::1]:27018", ("::1", 27018)),
        ("[::1]", ("::1", None)),
        (" 10.0.0.1:1 ", ("10.0.0.1", 1)),
        ("fe80::1", ("fe80::1", None)),  # an IPv6 address without brackets has no port
    ],
)
def test_parse_host(text: str, parsed: tuple[str, int | None]) -> None:
    assert parse_host(text) == parsed


# -- the member's host ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "bound", "host"),
    [
        (Config(repl_set="rs0"), ("127.0.0.1", 40000), "127.0.0.1:40000"),
        (Config(repl_set="rs0", bind_ip=("::1",)), ("::1", 40000), "[::1]:40000"),
        (Config(repl_set="rs0", repl_set_host="localhost"), ("127.0.0.1", 5), "localhost:5"),
        (
            Config(repl_set="rs0", repl_set_host="db.example:27018"),
            ("0.0.0.0", 5),
            "db.example:27018",
        ),
    ],
)
def test_member_host(config: Config, bound: tuple[str, int], host: str) -> None:
    assert member_host(config, bound) == host


def test_a_wildcard_address_is_the_machines_name() -> None:
    import socket

    config = Config(repl_set="rs0", bind_ip=("0.0.0.0",))
    assert member_host(config, ("0.0.0.0", 27017)) == f"{socket.gethostname()}:27017"


# -- the service ------------------------------------------------------------------------------------


class FakeOplog:
    def __init__(self, ts: Timestamp) -> None:
        self.last_committed = ts


class FakeEngine:
    def __init__(self, ts: Timestamp) -> None:
        self.oplog = FakeOplog(ts)


NOW = Timestamp(1_700_000_000, 3)


def replica_set(ts: Timestamp = NOW) -> ReplicaSet:
    rs = ReplicaSet(Config(repl_set="rs0"), FakeEngine(ts))  # type: ignore[arg-type]
    rs.listening(("127.0.0.1", 4242))
    return rs


def test_hello_fields() -> None:
    rs = replica_set()
    fields = rs.hello_fields()
    op = {"ts": Timestamp(1_700_000_000, 3), "t": Int64(1)}
    date = datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)
    assert fields == {
        "topologyVersion": {"processId": rs.process_id, "counter": Int64(0)},
        "hosts": ["127.0.0.1:4242"],
        "setName": "rs0",
        "setVersion": 1,
        "isWritablePrimary": True,
        "secondary": False,
        "primary": "127.0.0.1:4242",
        "me": "127.0.0.1:4242",
        "electionId": ObjectId("7fffffff0000000000000001"),
        "lastWrite": {
            "opTime": op,
            "lastWriteDate": date,
            "majorityOpTime": op,
            "majorityWriteDate": date,
        },
    }


def test_a_host_given_wins_over_the_listening_address() -> None:
    rs = ReplicaSet(Config(repl_set="rs0"), FakeEngine(Timestamp(1, 1)), "given:1")  # type: ignore[arg-type]
    rs.listening(("127.0.0.1", 4242))
    assert rs.host == "given:1"


def test_stamp_follows_the_oplog() -> None:
    rs = replica_set()
    reply: dict[str, Any] = {"ok": 1.0}
    rs.stamp(reply)
    assert list(reply) == ["ok", "operationTime", "$clusterTime"]
    assert reply["operationTime"] == Timestamp(1_700_000_000, 3)
    assert reply["$clusterTime"] == {
        "clusterTime": Timestamp(1_700_000_000, 3),
        "signature": {"hash": Binary(bytes(20)), "keyId": Int64(0)},
    }
    rs.engine.oplog.last_committed = Timestamp(1_700_000_001, 1)  # type: ignore[union-attr]
    rs.stamp(reply)
    assert reply["operationTime"] == Timestamp(1_700_000_001, 1)


def test_config_document_is_stable() -> None:
    rs = replica_set()
    first = rs.config_document()
    assert first == rs.config_document()
    assert first["members"][0]["host"] == "127.0.0.1:4242"
    assert first["settings"]["replicaSetId"] == rs.replica_set_id


def test_status_shape() -> None:
    rs = replica_set()
    now = datetime.datetime.now(datetime.UTC)
    status = rs.status(now)
    assert status["date"] == now
    assert status["members"][0]["electionTime"] == Timestamp(1_700_000_000, 3)
    assert sorted(status["optimes"]) == [
        "appliedOpTime",
        "durableOpTime",
        "lastAppliedWallTime",
        "lastCommittedOpTime",
        "lastCommittedWallTime",
        "lastDurableWallTime",
        "readConcernMajorityOpTime",
    ]


def test_same_topology() -> None:
    rs = replica_set()
    assert rs.same_topology({"processId": rs.process_id, "counter": Int64(0)})
    assert not rs.same_topology({"processId": ObjectId(), "counter": Int64(0)})
    assert not rs.same_topology({"processId": rs.process_id, "counter": Int64(1)})
    assert not rs.same_topology(None)


# -- read concerns ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "value", "parsed"),
    [
        ("find", None, read_concern.ReadConcern()),
        ("find", {}, read_concern.ReadConcern()),
        ("find", {"level": "majority"}, read_concern.ReadConcern("majority")),
        ("count", {"level": "linearizable"}, read_concern.ReadConcern("linearizable")),
        ("distinct", {"level": "snapshot"}, read_concern.ReadConcern("snapshot")),
        (
            "aggregate",
            {"level": "snapshot", "atClusterTime": Timestamp(5, 1)},
            read_concern.ReadConcern("snapshot", at_cluster_time=Timestamp(5, 1)),
        ),
        (
            "find",
            {"afterClusterTime": Timestamp(5, 1)},
            read_concern.ReadConcern(after_cluster_time=Timestamp(5, 1)),
        ),
        ("insert", {"level": "local"}, read_concern.ReadConcern()),
        (
            "find",
            {"level": "available", "provenance": "clientSupplied"},
            read_concern.ReadConcern("available"),
        ),
    ],
)
def test_read_concern_parse(command: str, value: Any, parsed: read_concern.ReadConcern) -> None:
    assert read_concern.parse(command, value) == parsed


@pytest.mark.parametrize(
    ("command", "value", "code", "message"),
    [
        ("find", "majority", 14, "BSON field 'find.readConcern' is the wrong type 'string'"),
        ("find", {"level": "x"}, 2, "Enumeration value 'x' for field 'readConcern.level'"),
        ("find", {"x": 1}, 40415, "BSON field 'readConcern.x' is an unknown field."),
        (
            "count",
            {"level": "snapshot"},
            72,
            'Command count does not support { readConcern: { level: "snapshot" } }',
        ),
        ("insert", {"level": "linearizable"}, 72, "Command insert does not support"),
        ("find", {"atClusterTime": Timestamp(1, 1)}, 72, "atClusterTime field can be set only"),
        ("find", {"level": "snapshot", "atClusterTime": 5}, 14, "expected type 'timestamp'"),
        ("find", {"afterClusterTime": Timestamp(0, 0)}, 72, "must not be a null timestamp"),
        (
            "find",
            {"level": "available", "afterClusterTime": Timestamp(1, 1)},
            72,
            "afterClusterTime field",
        ),
    ],
)
def test_read_concern_refused(command: str, value: Any, code: int, message: str) -> None:
    with pytest.raises(CommandError) as err:
        read_concern.parse(command, value)
    assert int(err.value.code) == code
    assert message in err.value.message


def test_read_concern_times() -> None:
    now = Timestamp(100, 2)
    read_concern.check_time(read_concern.ReadConcern(after_cluster_time=now), now)
    read_concern.check_time(read_concern.ReadConcern(after_cluster_time=Timestamp(100, 1)), now)
    with pytest.raises(CommandError) as err:
        read_concern.check_time(read_concern.ReadConcern(after_cluster_time=Timestamp(100, 3)), now)
    assert err.value.code == ErrorCode.InvalidOptions
    assert err.value.message == (
        "readConcern afterClusterTime value must not be greater than the current clusterTime. "
        "Requested clusterTime: { ts: Timestamp(100, 3) }; current clusterTime: "
        "{ ts: Timestamp(100, 2) }"
    )
    snapshot = read_concern.ReadConcern("snapshot", at_cluster_time=Timestamp(99, 1))
    with pytest.raises(CommandError) as err:
        read_concern.check_time(snapshot, now)
    assert err.value.code == ErrorCode.SnapshotTooOld


# -- write concerns --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "unsatisfiable"),
    [
        ({"w": 1}, None),
        ({"w": "majority"}, None),
        ({"w": 0}, None),
        ({"w": 2}, (ErrorCode.UnsatisfiableWriteConcern, "Not enough data-bearing nodes")),
        (
            {"w": "dc"},
            (
                ErrorCode.UnknownReplWriteConcern,
                "No write concern mode named 'dc' found in replica set configuration",
            ),
        ),
        (
            {"w": {"dc": 1}},
            (ErrorCode.UnsatisfiableWriteConcern, "Not enough nodes match write concern tags"),
        ),
    ],
)
def test_replica_set_write_concerns(value: dict[str, Any], unsatisfiable: Any) -> None:
    concern = write_concern.parse("insert", value, True, replicated=True)
    assert concern.unsatisfiable == unsatisfiable
    assert concern.journal is (value.get("w") == "majority")


class SlowSync:
    """A gateway whose syncs take `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.waits = 0

    async def wait_durable(self) -> None:
        self.waits += 1
        await asyncio.sleep(self.seconds)


def wait_for(value: dict[str, Any], sync: float) -> tuple[dict[str, Any] | None, int]:
    concern = write_concern.parse("insert", value, True, replicated=True)
    gateway = SlowSync(sync)
    failed = asyncio.run(replica_set().wait_for(concern, gateway))  # type: ignore[arg-type]
    return failed, gateway.waits


def test_what_a_write_waits_for() -> None:
    assert wait_for({"w": 1}, 0) == (None, 0)
    assert wait_for({"w": 1, "j": True}, 0) == (None, 1)
    assert wait_for({"w": "majority"}, 0.01) == (None, 1)
    assert wait_for({"w": "majority", "wtimeout": 1000}, 0.01) == (None, 1)
    # One member's majority is its journal: a sync slower than wtimeout is mongod's timeout.
    assert wait_for({"w": "majority", "wtimeout": 10}, 0.5) == (
        {
            "code": 64,
            "codeName": "WriteConcernFailed",
            "errmsg": "waiting for replication timed out",
            "errInfo": {
                "wtimeout": True,
                "writeConcern": {"w": "majority", "wtimeout": 10, "provenance": "clientSupplied"},
            },
        },
        1,
    )
    # What one member cannot satisfy is answered at once.
    assert wait_for({"w": 2, "wtimeout": 5}, 0.5) == (
        {
            "code": 100,
            "codeName": "UnsatisfiableWriteConcern",
            "errmsg": "Not enough data-bearing nodes",
            "errInfo": {"writeConcern": {"w": 2, "wtimeout": 5, "provenance": "clientSupplied"}},
        },
        0,
    )


def test_a_standalone_still_refuses_what_it_cannot_satisfy() -> None:
    with pytest.raises(CommandError) as err:
        write_concern.parse("insert", {"w": 2}, True)
    assert err.value.code == ErrorCode.BadValue
