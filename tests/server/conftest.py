"""The server's services on a real engine in a temporary directory, without a network: what the
dispatcher and connection tests hand their handlers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ebbdb.server.clock import ExpiryClock
from ebbdb.server.config import Config
from ebbdb.server.context import Services
from ebbdb.server.cursors import CursorManager
from ebbdb.server.gateway import Gateway
from ebbdb.server.log import RingHandler
from ebbdb.server.parameters import Parameters
from ebbdb.server.stats import ServerStats
from ebbdb.server.ttl_monitor import GatewayExpiry, TTLMonitor
from ebbdb.storage.engine.store import Engine


class NoListener:
    """A server that listens nowhere."""

    host = "test:0"
    port = 0

    def active_connections(self) -> int:
        return 0


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    engine = Engine.open(str(tmp_path / "data"))
    clock = ExpiryClock()
    parameters = Parameters({"enableTestCommands": False})
    gateway = Gateway(engine, clock.now_ms)
    try:
        yield Services(
            gateway=gateway,
            cursors=CursorManager(),
            clock=clock,
            parameters=parameters,
            stats=ServerStats(),
            ttl_monitor=TTLMonitor(GatewayExpiry(gateway), parameters, clock.now_ms),
            config=Config(dbpath=str(tmp_path / "data")),
            log_ring=RingHandler(),
            listener=NoListener(),
        )
    finally:
        gateway.close()
        engine.close()
