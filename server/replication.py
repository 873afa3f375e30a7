"""The replica set a server started with --replSet is: one member, initiated at start and primary at
once (term 1, never an election after). It answers what hello, replSetGetStatus and replSetGetConfig
say about the set, and keeps the cluster time every reply carries (the oplog's newest committed
timestamp)."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import bson
from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from ebbdb.server.config import Config
from ebbdb.server.config_file import parse_host
from ebbdb.server.errors import ErrorCode
from ebbdb.server.raw_reply import RawDoc
from ebbdb.server.read_concern import ReadConcern, check_time
from ebbdb.server.write_concern import WriteConcern
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.expiry import ttl

if TYPE_CHECKING:
    from ebbdb.server.gateway import Gateway
    from ebbdb.storage.engine.store import Engine

#: The one term: the member was elected once, at start.
TERM = 1
#: mongod's electionId in protocol version 1: the maximum timestamp then the term (an ObjectId, so
#: that drivers compare it with the electionIds of older protocol versions).
ELECTION_ID = ObjectId(f"7fffffff{TERM:016x}")
#: The config's version (no reconfig ever changes it).
CONFIG_VERSION = 1
#: $clusterTime's signature on a server without keys to sign with: mongod's zero hash, key 0.
UNSIGNED = {"hash": Binary(bytes(20)), "keyId": Int64(0)}
#: The commands whose replies carry their write's optime and the electionId.
_WRITE_COMMANDS = frozenset({"insert", "update", "delete"})
#: Where mongod keeps a member's copy of the set's config.
CONFIG_DB, CONFIG_COLLECTION = "local", "system.replset"
#: replSetGetStatus' member states.
PRIMARY_STATE, PRIMARY_STATE_STR = 1, "PRIMARY"


def _wildcard(address: str) -> bool:
    return address in ("0.0.0.0", "::", "")


def member_host(config: Config, bound: tuple[str, int]) -> str:
    """The `host:port` the member is known by: --replSetHost (its port defaulting to the one
    listened on), else the first --bind_ip address and the port listened on (`bound`'s port, the
    real one with --port 0). A wildcard address (--bind_ip_all) is no address a client can dial:
    the machine's name stands for it, as mongod's own default host is."""
    port = bound[1]
    if config.repl_set_host is not None:
        host, given = parse_host(config.repl_set_host)
        port = given if given is not None else port
    else:
        host = config.bind_ip[0] if config.bind_ip else bound[0]
        if _wildcard(host):
            import socket

            host = socket.gethostname()
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{host}:{port}"


def _appended(doc: RawDoc, name: str, value: Any) -> RawDoc:
    """A cursor document laid out as stored BSON (server/commands/replies.py) with one more field
    at its end."""
    element = bson.encode({name: value})[4:-1]
    raw = doc.raw
    body = raw[4:-1] + element
    return RawDoc(struct.pack("<i", len(body) + 5) + body + b"\x00")


def _date(ts: Timestamp) -> datetime.datetime:
    """The wall time of an optime, to the second (mongod's lastWriteDate and optimeDate)."""
    return datetime.datetime.fromtimestamp(ts.time, datetime.UTC)


class ReplicaSet:
    """The set's one member, as hello and the replSet* commands describe it. `host` is set once the
    server listens (see `listening`); constructing one does nothing else."""

    def __init__(self, config: Config, engine: Engine | None, host: str | None = None) -> None:
        assert config.repl_set is not None
        self.name: str = config.repl_set
        self.config = config
        self.engine = engine
        #: The member's `host:port` (`host` given here wins over `listening`'s).
        self._fixed_host = host
        self.host = host or member_host(config, (config.bind_ip[0], config.port))
        self.election_id = ELECTION_ID
        self.set_version = CONFIG_VERSION
        self.term = TERM
        self.started_monotonic = time.monotonic()
        #: When the member became primary: at start; the optime of the oplog's newest entry then
        #: (see `listening`).
        self.election_date = datetime.datetime.fromtimestamp(int(time.time()), datetime.UTC)
        self.election_time = Timestamp(0, 0)
        #: hello's topologyVersion: a new processId for every start; the counter would count
        #: topology changes, of which a lone primary has none.
        self.process_id = ObjectId()
        self.counter = 0
        #: The set's id (kept in local.system.replset from its first start: see keep_config).
        self.replica_set_id = ObjectId()
        #: Set when the server shuts down: awaitable hellos answer at once.
        self.closing = asyncio.Event()

    def listening(self, bound: tuple[str, int]) -> None:
        """The server listens at `bound` (its real port, when --port 0 let the system pick): the
        member's host follows."""
        if self._fixed_host is None:
            self.host = member_host(self.config, bound)
        self.election_time = self.cluster_time()

    def keep_config(self) -> None:
        """Keep the set's config in local.system.replset, as mongod does (mongosh's
        rs.printSecondaryReplicationInfo() reads it there): written at the first start, rewritten
        when the member's host changed (another port), its replicaSetId kept from the first. A
        storage write: run on the writer thread (Gateway.write)."""
        engine = self.engine
        assert engine is not None
        coll = engine.collection(CONFIG_DB, CONFIG_COLLECTION)
        stored: dict[str, Any] | None = None
        if coll is not None:
            with engine.read() as r:
                for _rid, value in r.scan(coll):
                    stored = bson.decode(ttl.body(value), CODEC)
                    break
        if stored is not None:
            settings = stored.get("settings")
            kept = settings.get("replicaSetId") if isinstance(settings, Mapping) else None
            if isinstance(kept, ObjectId):
                self.replica_set_id = kept
        config = self.config_document()
        if stored == config:
            return
        if coll is not None:
            engine.drop_collection(CONFIG_DB, CONFIG_COLLECTION)
        engine.insert(CONFIG_DB, CONFIG_COLLECTION, [bson.encode(config)])

    # -- time --------------------------------------------------------------------------------------

    def cluster_time(self) -> Timestamp:
        """The newest committed oplog entry's timestamp: the cluster time and every reply's
        operationTime (a new set's oplog starts with mongod's 'initiating set' entry, so it is
        never the null timestamp)."""
        oplog = getattr(self.engine, "oplog", None)
        last = getattr(oplog, "last_committed", None)
        return last if isinstance(last, Timestamp) else Timestamp(0, 0)

    def stamp(self, reply: dict[str, Any], command: str = "") -> None:
        """Add `operationTime` and `$clusterTime` to a reply, as every reply of a replica-set
        member carries them (drivers gossip the cluster time, causal sessions read after it); a
        write command's reply also says its optime and the electionId before `ok`, as mongod's
        (mongos reads them)."""
        now = self.cluster_time()
        if command in _WRITE_COMMANDS and reply.get("ok") == 1.0:
            ok = reply.pop("ok")
            reply["electionId"] = ELECTION_ID
            reply["opTime"] = {"ts": now, "t": Int64(TERM)}
            reply["ok"] = ok
        reply["operationTime"] = now
        reply["$clusterTime"] = {"clusterTime": now, "signature": UNSIGNED}

    def op_time(self) -> dict[str, Any]:
        return {"ts": self.cluster_time(), "t": Int64(TERM)}

    # -- write concerns --------------------------------------------------------------------------

    async def wait_for(self, concern: WriteConcern, gateway: Gateway) -> dict[str, Any] | None:
        """Wait for what a write's `concern` asks (its write done): one member's majority, and
        `j`, is its journal, waited for up to wtimeout for w: majority (then 64
        WriteConcernFailed, mongod's "waiting for replication timed out"); what one member
        cannot satisfy fails at once. The writeConcernError to answer, or None."""
        if concern.unsatisfiable is not None:
            code, message = concern.unsatisfiable
            return concern.error_document(code, message)
        if concern.w == "majority" and concern.wtimeout > 0:
            try:
                async with asyncio.timeout(concern.wtimeout / 1000):
                    await gateway.wait_durable()
            except TimeoutError:
                return concern.error_document(
                    ErrorCode.WriteConcernFailed, "waiting for replication timed out", wtimeout=True
                )
        elif concern.journal:
            await gateway.wait_durable()
        return None

    # -- read concerns -----------------------------------------------------------------------------

    async def before_read(self, concern: ReadConcern, gateway: Gateway) -> None:
        """What a read waits for, or is refused for, under `concern` (server/read_concern.py)."""
        check_time(concern, self.cluster_time())
        if concern.wants_durable:
            # One member's majority commit point is its journal: a write is majority-committed
            # once synced, and a majority read must show no other.
            await gateway.wait_durable()

    def after_read(self, concern: ReadConcern, reply: dict[str, Any]) -> None:
        """A snapshot read outside a transaction tells the time it read at (pymongo's snapshot
        sessions read the next time at it): in the cursor, or beside distinct's values."""
        if concern.level != "snapshot" or not reply.get("ok", 1):
            return
        at = concern.at_cluster_time or self.cluster_time()
        cursor = reply.get("cursor")
        if isinstance(cursor, dict):
            cursor["atClusterTime"] = at
        elif isinstance(cursor, RawDoc):
            reply["cursor"] = _appended(cursor, "atClusterTime", at)
        elif cursor is None:
            reply["atClusterTime"] = at

    # -- what the set looks like -------------------------------------------------------------------

    def topology_version(self) -> dict[str, Any]:
        return {"processId": self.process_id, "counter": Int64(self.counter)}

    def last_write(self) -> dict[str, Any]:
        op = self.op_time()
        date = _date(op["ts"])
        return {
            "opTime": op,
            "lastWriteDate": date,
            "majorityOpTime": op,
            "majorityWriteDate": date,
        }

    def hello_fields(self) -> dict[str, Any]:
        """What hello says of the set (before its common fields), in mongod's order."""
        return {
            "topologyVersion": self.topology_version(),
            "hosts": [self.host],
            "setName": self.name,
            "setVersion": CONFIG_VERSION,
            "isWritablePrimary": True,
            "secondary": False,
            "primary": self.host,
            "me": self.host,
            "electionId": ELECTION_ID,
            "lastWrite": self.last_write(),
        }

    def server_status(self) -> dict[str, Any]:
        """serverStatus' `repl` section: hello's fields and the rollback id (no rollback ever)."""
        return {**self.hello_fields(), "rbid": 1}

    def config_document(self) -> dict[str, Any]:
        """The set's config, as replSetGetConfig and rs.conf() show it."""
        return {
            "_id": self.name,
            "version": CONFIG_VERSION,
            "term": TERM,
            "members": [
                {
                    "_id": 0,
                    "host": self.host,
                    "arbiterOnly": False,
                    "buildIndexes": True,
                    "hidden": False,
                    "priority": 1,
                    "tags": {},
                    "secondaryDelaySecs": Int64(0),
                    "votes": 1,
                }
            ],
            "protocolVersion": Int64(1),
            "writeConcernMajorityJournalDefault": True,
            "settings": {
                "chainingAllowed": True,
                "heartbeatIntervalMillis": 2000,
                "heartbeatTimeoutSecs": 10,
                "electionTimeoutMillis": 10000,
                "catchUpTimeoutMillis": -1,
                "catchUpTakeoverDelayMillis": 30000,
                "getLastErrorModes": {},
                "getLastErrorDefaults": {"w": 1, "wtimeout": 0},
                "replicaSetId": self.replica_set_id,
            },
        }

    def status(self, now: datetime.datetime) -> dict[str, Any]:
        """replSetGetStatus' reply (without ok), in mongod's shape for a one-member set."""
        op = self.op_time()
        op_date = _date(op["ts"])
        uptime = int(time.monotonic() - self.started_monotonic)
        null_op = {"ts": Timestamp(0, 0), "t": Int64(-1)}
        return {
            "set": self.name,
            "date": now,
            "myState": PRIMARY_STATE,
            "term": Int64(TERM),
            "syncSourceHost": "",
            "syncSourceId": -1,
            "heartbeatIntervalMillis": Int64(2000),
            "majorityVoteCount": 1,
            "writeMajorityCount": 1,
            "votingMembersCount": 1,
            "writableVotingMembersCount": 1,
            "optimes": {
                "lastCommittedOpTime": op,
                "lastCommittedWallTime": op_date,
                "readConcernMajorityOpTime": op,
                "appliedOpTime": op,
                "durableOpTime": op,
                "lastAppliedWallTime": op_date,
                "lastDurableWallTime": op_date,
            },
            "lastStableRecoveryTimestamp": op["ts"],
            "electionCandidateMetrics": {
                "lastElectionReason": "electionTimeout",
                "lastElectionDate": self.election_date,
                "electionTerm": Int64(TERM),
                "lastCommittedOpTimeAtElection": null_op,
                "lastSeenOpTimeAtElection": null_op,
                "numVotesNeeded": 1,
                "priorityAtElection": 1.0,
                "electionTimeoutMillis": Int64(10000),
                "newTermStartDate": self.election_date,
                "wMajorityWriteAvailabilityDate": self.election_date,
            },
            "members": [
                {
                    "_id": 0,
                    "name": self.host,
                    "health": 1.0,
                    "state": PRIMARY_STATE,
                    "stateStr": PRIMARY_STATE_STR,
                    "uptime": uptime,
                    "optime": op,
                    "optimeDate": op_date,
                    "lastAppliedWallTime": op_date,
                    "lastDurableWallTime": op_date,
                    "syncSourceHost": "",
                    "syncSourceId": -1,
                    "infoMessage": "",
                    "electionTime": self.election_time,
                    "electionDate": self.election_date,
                    "configVersion": CONFIG_VERSION,
                    "configTerm": TERM,
                    "self": True,
                    "lastHeartbeatMessage": "",
                }
            ],
        }

    # -- awaitable hello ---------------------------------------------------------------------------

    def same_topology(self, version: Any) -> bool:
        """Whether a client's topologyVersion is this server's current one (its awaitable hello
        then waits for a change, or for maxAwaitTimeMS)."""
        if not isinstance(version, Mapping):
            return False
        return (
            version.get("processId") == self.process_id and version.get("counter") == self.counter
        )

    async def await_change(self, max_await_ms: int) -> None:
        """Wait up to `max_await_ms` for a topology change: a lone primary has none but its
        shutdown, which ends the wait at once."""
        if self.closing.is_set():
            return
        try:
            async with asyncio.timeout(max_await_ms / 1000):
                await self.closing.wait()
        except TimeoutError:
            pass
