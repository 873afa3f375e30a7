"""Counters that serverStatus reports, and the latency table $collStats reports."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ebbdb.server.latency import NamespaceLatency

# Commands counted under their own opcounter rather than "command".
_OPCOUNTER_OF = {
    "insert": None,
    "find": "query",
    "getMore": "getmore",
    "update": None,
    "delete": None,
}


@dataclass
class ServerStats:
    started_monotonic: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    connections_current: int = 0
    connections_total: int = 0
    opcounters: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("insert", "query", "update", "delete", "getmore", "command"), 0
        )
    )
    #: Latency per namespace ($collStats' latencyStats).
    latency: NamespaceLatency = field(default_factory=NamespaceLatency)
    #: Requests the express path answered, by command (server/express.py; serverStatus'
    #: ebbdb.expressPath).
    express: dict[str, int] = field(default_factory=dict)

    def count_command(self, name: str) -> None:
        """Count one command; write commands count their documents separately (count_documents)."""
        if name in _OPCOUNTER_OF:
            counter = _OPCOUNTER_OF[name]
            if counter is not None:
                self.opcounters[counter] += 1
        else:
            self.opcounters["command"] += 1

    def count_documents(self, op: str, n: int) -> None:
        self.opcounters[op] += n

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started_monotonic
