"""The replica set this server is, when started with --replSet: a set of one member, initiated at
start-up, always its primary. What hello, the replSet* commands and cluster times say of it."""

from __future__ import annotations

from typing import Any

from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from ebbdb.server.config import Config
from ebbdb.storage.engine.store import Engine


class ReplicaSet:
    """The one-member set. `host` is the member's host:port as clients reach it: --replSetHost,
    or the first --bind_ip address and the port listened on (set by `listening`)."""

    def __init__(self, config: Config, engine: Engine, host: str | None = None) -> None:
        assert config.repl_set is not None
        self.name: str = config.repl_set
        self._engine = engine
        self._fixed_host = host or config.repl_set_host
        self.host = self._fixed_host or f"{config.bind_ip[0]}:{config.port}"
        #: The one election's id: mongod's form for term 1.
        self.election_id = ObjectId("7fffffff0000000000000001")
        self.set_version = 1
        self.term = 1

    def listening(self, address: tuple[str, int]) -> None:
        """The server listens at `address` (its real port, when --port 0 let the system pick)."""
        if self._fixed_host is None:
            self.host = f"{address[0]}:{address[1]}"

    def cluster_time(self) -> Timestamp:
        """The newest committed oplog timestamp: the cluster time and operationTime."""
        return self._engine.oplog.last_committed

    def hello_fields(self) -> dict[str, Any]:
        """What hello adds for a replica-set member."""
        return {
            "hosts": [self.host],
            "setName": self.name,
            "setVersion": self.set_version,
            "secondary": False,
            "primary": self.host,
            "me": self.host,
            "electionId": self.election_id,
        }
