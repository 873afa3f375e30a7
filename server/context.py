"""What a handler is given besides its parameters: the server's services (never the App), the client
it serves, the database the command names, and the command's name."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from ebbdb.server.auth.state import ClientAuth
from ebbdb.server.auth.users import UserStore
from ebbdb.server.clock import ExpiryClock
from ebbdb.server.config import Config
from ebbdb.server.cursors import CursorManager
from ebbdb.server.failpoints import FailCommand
from ebbdb.server.gateway import Gateway
from ebbdb.server.log import RingHandler
from ebbdb.server.operations import Operation, Operations
from ebbdb.server.parameters import Parameters
from ebbdb.server.profiler import Profiler
from ebbdb.server.replication import ReplicaSet
from ebbdb.server.sessions import Session, SessionCatalog
from ebbdb.server.stats import ServerStats
from ebbdb.server.transactions import TransactionManager
from ebbdb.server.ttl_monitor import TTLMonitor
from ebbdb.storage.catalog.info import CollectionInfo


class Listener(Protocol):
    """What the server tells about its own network side (serverStatus, explain's serverInfo), and
    how a client stops it (shutdown)."""

    @property
    def host(self) -> str:
        """This machine's name and the port: `name:port`."""
        ...

    @property
    def port(self) -> int: ...

    def active_connections(self) -> int:
        """Connections running a request now."""
        ...

    def shutdown(self, requester: int, force: bool, timeout_secs: float) -> None:
        """Begin a graceful shutdown asked for by client `requester`: stop accepting, give
        requests running on other connections up to `timeout_secs` to finish (no time with
        `force`), close every connection (the requester's without a reply, as mongod does),
        sync and close storage."""
        ...


@dataclass(frozen=True)
class Services:
    """The server's services, one set per server. `gateway` is the way to storage: writes go to its
    writer thread, long reads to its reader threads, and short bounded reads call
    `gateway.engine` on the loop. `clock` is the expiry clock (moved only by test commands)."""

    gateway: Gateway
    cursors: CursorManager
    clock: ExpiryClock
    parameters: Parameters
    stats: ServerStats
    ttl_monitor: TTLMonitor
    config: Config
    log_ring: RingHandler
    listener: Listener
    #: Profiling levels and the slow-operation log (a server that does not say gets one of its own).
    profiler: Profiler = field(default_factory=Profiler, kw_only=True)
    #: The failCommand fail point (configureFailPoint, with enableTestCommands=1).
    fail_command: FailCommand = field(default_factory=FailCommand, kw_only=True)
    #: The operations in progress (currentOp, killOp, maxTimeMS, shutdown's interruption).
    operations: Operations = field(default_factory=Operations, kw_only=True)
    #: The users of admin.system.users, cached with their privileges.
    users: UserStore = field(default_factory=UserStore, kw_only=True)
    #: Multi-document transactions (server/transactions.py): replica-set mode only.
    transactions: TransactionManager | None = field(default=None, kw_only=True)
    #: The logical sessions clients use (server/sessions.py).
    sessions: SessionCatalog = field(default_factory=SessionCatalog, kw_only=True)
    #: The replica set this server is (--replSet); None for a standalone server.
    replica_set: ReplicaSet | None = field(default=None, kw_only=True)

    def test_commands_enabled(self) -> bool:
        return bool(self.parameters.get("enableTestCommands"))


class Client:
    """The connection a command came on, as handlers see it: its id, the peer's address, and the
    metadata its driver sent with the first hello."""

    __slots__ = (
        "auth",
        "contexts",
        "id",
        "lsid_key",
        "metadata",
        "op",
        "op_run",
        "peer",
        "session",
    )

    def __init__(self, id: int, peer: str = "") -> None:
        self.id = id
        self.peer = peer
        self.metadata: dict[str, Any] | None = None
        #: Handler contexts by (database, command name). A context is immutable, so the dispatcher
        #: makes one per pair and keeps it for the next request, not one per request.
        self.contexts: dict[tuple[str, str], CommandContext] = {}
        #: The QueryRun the request running now read with (find and getMore set it), for the
        #: slow-query log and the profiler.
        self.op_run: object = None
        #: The operation of the request running now (set by the dispatcher).
        self.op: Operation | None = None
        #: The users logged in on this connection and a SASL conversation in progress.
        self.auth = ClientAuth()
        #: The logical session of the request running now (its `lsid`), or None.
        self.session: Session | None = None
        #: (lsid, user, session key) of this connection's last lsid (server/sessions.py's
        #: touch_for): a driver sends the same lsid with request after request.
        self.lsid_key: tuple[Any, tuple[str, str] | None, bytes] | None = None


@dataclass(frozen=True)
class CommandContext(Services):
    """What a handler is given: the services, the client that asked, the database the command
    names and the command's name (an alias, as the client spelled it)."""

    client: Client
    db: str
    command: str

    @classmethod
    def of(cls, services: Services, client: Client, db: str, command: str) -> CommandContext:
        given = {f.name: getattr(services, f.name) for f in fields(Services)}
        return cls(**given, client=client, db=db, command=command)

    def now(self) -> int:
        """The expiry clock's time (ms since the epoch): what a command stamps and hides by."""
        return self.clock.now_ms()

    def ns(self, collection: str) -> str:
        """The namespace of `collection` in this command's database."""
        return f"{self.db}.{collection}"

    def collection(self, name: str) -> CollectionInfo | None:
        """The catalog's entry for collection `name` of this command's database (None: none)."""
        return self.gateway.engine.collection(self.db, name)
