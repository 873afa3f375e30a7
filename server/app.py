"""The server's lifecycle: open storage, listen, serve connections, and shut down cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import errno
import logging
import socket
import sys
from typing import Any

# hello, every client's first command, is loaded with the server rather than by the first client
# (the registry imports the other command modules on first use): a client is answered even when
# the process has no file descriptor left to open a module with.
import ebbdb.server.commands.handshake  # noqa: F401
from ebbdb.server import log as logsetup
from ebbdb.server import startup
from ebbdb.server.auth import startup as auth_startup
from ebbdb.server.clock import ExpiryClock
from ebbdb.server.config import Config
from ebbdb.server.connection import Connection
from ebbdb.server.context import Services
from ebbdb.server.cursors import CursorManager
from ebbdb.server.dispatch import Dispatcher
from ebbdb.server.gateway import Gateway
from ebbdb.server.listener import InputBudget, Listener, listen, listen_unix
from ebbdb.server.memory import cap_pool, spill_dir
from ebbdb.server.operations import Operations
from ebbdb.server.parameters import Parameters
from ebbdb.server.profiler import Profiler
from ebbdb.server.replication import ReplicaSet
from ebbdb.server.sessions import SessionCatalog, operations_killer
from ebbdb.server.stats import ServerStats
from ebbdb.server.tls import server_context
from ebbdb.server.transactions import TransactionManager
from ebbdb.server.ttl_monitor import GatewayExpiry, TTLMonitor
from ebbdb.server.version import EBBDB_VERSION
from ebbdb.storage.core import interrupt, portability
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution import spill

log = logging.getLogger("ebbdb.control")
network_log = logging.getLogger("ebbdb.network")

#: mongod's "Waiting for connections", the line that says the server is ready.
WAITING_FOR_CONNECTIONS_ID = 23016
#: A warning about a config file option accepted and ignored (ebbdb's own id).
CONFIG_WARNING_ID = 9_250_001

#: How long a shutdown by signal (SIGTERM, SIGINT) may take: requests in flight get the first
#: half to finish, then every operation is interrupted (11600 InterruptedAtShutdown) and the rest
#: lets them end; the shutdown command's timeoutSecs plays this part for it.
SHUTDOWN_GRACE_SECONDS = 10.0
#: Of the grace, what stop() keeps for closing connections and storage after the operations it
#: interrupted have had their time (at most a quarter of it): in the CLI, the shutdown watchdog
#: ends the process at the grace (server/shutdown.py), closed or not.
CLOSE_RESERVE_SECONDS = 2.5
_CURSOR_REAP_INTERVAL = 60.0
_SWITCH_INTERVAL = 0.0005


class App:
    """One server. `start()` opens storage and binds; `stop()` undoes it. No side effects before
    start()."""

    def __init__(self, config: Config) -> None:
        #: With --ephemeral, `start` replaces `dbpath` by the temporary directory it makes.
        self.config = config
        self.parameters = Parameters(config.parameters)
        self.stats = ServerStats()
        self.clock = ExpiryClock()
        self.cursors = CursorManager()
        self.log_ring = logsetup.RingHandler()
        self.connections: dict[int, Connection] = {}
        self.address: tuple[str, int] | None = None
        self._engine: Engine | None = None
        self._services: Services | None = None
        self._servers: list[Listener] = []
        #: Bytes of requests received and not yet run, over every connection.
        self.input_budget = InputBudget()
        self._log_handlers: list[logging.Handler] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._ephemeral_dir: str | None = None
        #: Set to ask whoever runs the server (the CLI, ServerThread) to stop it: by a signal, or
        #: by the shutdown command.
        self.stop_requested = asyncio.Event()
        self.stopped = asyncio.Event()
        self._grace = SHUTDOWN_GRACE_SECONDS
        self.operations = Operations(scripting=config.scripting)
        cap_pool(self.parameters, self.operations.pool)  # ebbdbMaxTrackedMemoryBytes
        self._requester: int | None = None

    @property
    def engine(self) -> Engine:
        assert self._engine is not None, "server not started"
        return self._engine

    @property
    def services(self) -> Services:
        """What the handlers are given (the gateway, the TTL monitor, ...)."""
        assert self._services is not None, "server not started"
        return self._services

    @property
    def host(self) -> str:
        return socket.gethostname() + (f":{self.address[1]}" if self.address else "")

    @property
    def port(self) -> int:
        return self.address[1] if self.address else 0

    @property
    def unix_socket(self) -> str | None:
        """The server's own Unix domain socket (PREFIX/ebbdb-<port>.sock) while it listens on
        it; None with --nounixsocket, on Windows, and before start."""
        if not self.config.unix_socket or self.address is None:
            return None
        path = self.config.unix_socket_path(self.address[1])
        listening = any(s.unix_file is not None and s.unix_file[0] == path for s in self._servers)
        return path if listening else None

    def active_connections(self) -> int:
        return sum(1 for c in self.connections.values() if c.busy)

    @property
    def open_connections(self) -> int:
        return len(self.connections)

    def message_timeout(self) -> float:
        return float(self.parameters.get("incomingMessageTimeoutSecs"))

    def shutdown(self, requester: int, force: bool, timeout_secs: float) -> None:
        """The shutdown command (see Listener.shutdown): whoever runs the server then calls
        stop(), which waits `timeout_secs` (0 with `force`) instead of SHUTDOWN_GRACE_SECONDS."""
        if self.stop_requested.is_set():
            return
        log.info(
            "[conn%d] shutdown requested (force: %s, timeoutSecs: %s)",
            requester,
            force,
            timeout_secs,
        )
        self._requester = requester
        self._grace = 0.0 if force else max(0.0, timeout_secs)
        self.stop_requested.set()

    async def start(self) -> None:
        """Open the data directory (with --ephemeral, a new temporary one) and listen. Raises
        StartupError (the data directory, an address: server/startup.py), LogFileError or
        TLSConfigError."""
        # The writer thread runs Python too: a short switch interval keeps a long write (a TTL
        # batch, a large insert) from holding the interpreter for the default 5 ms at a time
        # while clients wait on the event loop.
        sys.setswitchinterval(_SWITCH_INTERVAL)
        config = self.config
        self._log_handlers = logsetup.setup(
            config.quiet,
            self.log_ring,
            config.logpath,
            config.logappend,
            verbosity=config.verbosity,
            log_format=config.log_format,
        )
        try:
            for warning in config.warnings:
                logsetup.log_event(
                    log, logging.WARNING, CONFIG_WARNING_ID, warning, ctx="initandlisten"
                )
            if config.pid_file is not None:
                startup.write_pid_file(config.pid_file)
            if config.timezone_info is not None:
                startup.use_time_zone_database(config.timezone_info)
            if config.ephemeral:
                import tempfile

                self._ephemeral_dir = tempfile.mkdtemp(prefix="ebbdb-ephemeral-")
                self.config = config = dataclasses.replace(config, dbpath=self._ephemeral_dir)
            else:
                startup.prepare_dbpath(config.dbpath)
            self._engine = self._open_storage(config.dbpath)
            replica_set: ReplicaSet | None = None
            if config.repl_set is not None:
                self._engine.enable_oplog(config.oplog_size_mb)
                replica_set = ReplicaSet(config, self._engine)
            spill.clear(spill_dir(config.dbpath))  # what a killed server's operations left
            gateway = Gateway(self._engine, self.clock.now_ms, self._sync_interval_ms)
            ttl_monitor = TTLMonitor(GatewayExpiry(gateway), self.parameters, self.clock.now_ms)
            self.parameters.on_change("ttlMonitorSleepSecs", ttl_monitor.wake)
            self._services = Services(
                gateway=gateway,
                cursors=self.cursors,
                clock=self.clock,
                parameters=self.parameters,
                stats=self.stats,
                ttl_monitor=ttl_monitor,
                config=self.config,
                log_ring=self.log_ring,
                listener=self,
                profiler=Profiler(
                    gateway,
                    slowms=config.slowms,
                    sample_rate=config.sample_rate,
                    default_level=config.profile,
                    # mongod logs every operation once COMMAND's verbosity is 1 or more.
                    log_all=config.verbosity >= 1,
                ),
                operations=self.operations,
                sessions=SessionCatalog(self.clock.now_ms),
                replica_set=replica_set,
                transactions=None
                if replica_set is None
                else TransactionManager(gateway, self.parameters),
            )
            self._services.sessions.kill_cursors = self.cursors.close_all
            self._services.sessions.kill_operations = operations_killer(self.operations)
            if self._services.transactions is not None:
                self._services.transactions.serve(self._services.sessions)
            await auth_startup.prepare(config, self._services.users, gateway)
            await self._listen(Dispatcher(self._services))
            if replica_set is not None and self.address is not None:
                replica_set.listening(self.address)
                await gateway.write(replica_set.keep_config)
        except BaseException as exc:
            if isinstance(exc, startup.StartupError) and config.logpath is not None:
                exc.log()  # the CLI says it on stderr; the log file says it too
            for srv in self._servers:
                srv.close()  # an address that failed leaves none of the others behind
            if config.pid_file is not None:
                startup.remove_pid_file(config.pid_file)
            await self._close_storage()
            self._remove_ephemeral()
            self._detach_logging()
            raise
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._reap_cursors()))
        self._tasks.append(loop.create_task(self._refresh_sessions()))
        # The TTL monitor's purges carry a token of their own, which shutdown interrupts too.
        ttl_context = contextvars.copy_context()
        ttl_context.run(interrupt.current.set, self.operations.internal_token())
        self._tasks.append(loop.create_task(self.services.ttl_monitor.run(), context=ttl_context))
        assert self.address is not None
        logsetup.log_event(
            network_log,
            logging.INFO,
            WAITING_FOR_CONNECTIONS_ID,
            "Waiting for connections",
            {"port": self.address[1], "ssl": "on" if config.tls.enabled else "off"},
            ctx="listener",
            text=f"ebbdb {EBBDB_VERSION} listening on {self.address[0]}:{self.address[1]}, "
            f"dbpath {config.dbpath}"
            + (" (ephemeral)" if config.ephemeral else "")
            + (
                f", replica set {config.repl_set}: primary, member {self.services.replica_set.host}"
                if self.services.replica_set is not None
                else ""
            ),
        )
        self.log_ring.starting = False

    @staticmethod
    def _open_storage(dbpath: str) -> Engine:
        """Engine.open, its errors as StartupError (what in the files stopped the start)."""
        try:
            return Engine.open(dbpath)
        except Exception as exc:
            error = startup.storage_error(dbpath, exc)
            if error is None:
                raise
            raise error from exc

    def _sync_interval_ms(self) -> float:
        """The background sync's period: journalCommitInterval, or syncdelay if that is shorter
        (never, with mongod's ranges, unless syncdelay is below half a second)."""
        interval = float(self.parameters.get("journalCommitInterval"))
        delay = float(self.parameters.get("syncdelay")) * 1000
        return min(interval, delay) if delay > 0 else interval

    async def _listen(self, dispatcher: Dispatcher) -> None:
        """Listen on every address; TLSConfigError, or StartupError for an address in use (or
        a Unix domain socket that cannot be made)."""
        config = self.config
        port = config.port
        tls = config.tls
        ctx = server_context(tls) if tls.enabled else None
        tls_only = tls.mode == "requireTLS"

        def factory() -> Connection:
            return Connection(dispatcher, self)

        for host in config.hosts:
            try:
                srv = await listen(factory, host, port, ctx, tls_only)
            except OSError as exc:
                raise startup.listen_error(f"{host}:{port}", exc) from exc
            self._servers.append(srv)
            if self.address is None:
                sockname = srv.sockets[0].getsockname()
                self.address = (sockname[0], sockname[1])
                port = sockname[1]  # with --port 0, every address shares the port picked first
        # The Unix domain sockets after the TCP port is ours: with --port 0 the socket is named
        # after the port picked, and a file at that name can only be a dead server's.
        own = config.unix_socket_path(port) if config.unix_socket else None
        try:
            paths = self.unix_socket_paths()
        except OSError as exc:
            raise startup.listen_error(str(exc.filename), exc) from exc
        for path in paths:
            try:
                srv = listen_unix(factory, path, config.unix_socket_mode, ctx, tls_only)
            except OSError as exc:
                directory = path == own and exc.errno in startup.DIRECTORY_ERRNOS
                hint = startup.SOCKET_DIRECTORY_HINT if directory else ""
                raise startup.listen_error(path, exc, hint) from exc
            self._servers.append(srv)

    def unix_socket_paths(self) -> list[str]:
        """The Unix domain sockets the server listens on (once it listens): its own (unless
        --nounixsocket) and the --bind_ip entries that are paths; none where the system has no
        Unix domain sockets (Windows), where a path in --bind_ip is an error (OSError)."""
        config = self.config
        paths = list(config.socket_paths)
        if not portability.unix_sockets():
            if paths:
                raise OSError(errno.EAFNOSUPPORT, "no Unix domain sockets on this system", paths[0])
            return []
        if config.unix_socket and self.address is not None:
            paths.insert(0, config.unix_socket_path(self.address[1]))
        return paths

    @property
    def shutdown_grace(self) -> float:
        """How long stop() waits for requests in flight: SHUTDOWN_GRACE_SECONDS, or the
        shutdown command's timeoutSecs (0 with force)."""
        return self._grace

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish (briefly), close connections and storage."""
        if self.stopped.is_set():
            return
        log.info("shutting down")
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self._services is not None and self._services.replica_set is not None:
            self._services.replica_set.closing.set()  # awaitable hellos answer now
        for srv in self._servers:
            srv.close()
        for task in self._tasks:
            task.cancel()
        # The connection that sent shutdown waits for the end without a reply: not for itself.
        # Requests in flight get half the grace to finish; then every operation is interrupted
        # (those that start later are born interrupted) and the other half, but for what
        # closing needs, lets them end.
        conns = [c for c in self.connections.values() if c.id != self._requester]
        idle = asyncio.gather(*(c.wait_idle() for c in conns))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._grace / 2):
                await asyncio.shield(idle)
        if not idle.done():
            n = self.operations.kill_all("InterruptedAtShutdown")
            log.info("interrupting %d operations still running", n)
        reserve = min(CLOSE_RESERVE_SECONDS, self._grace / 4)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(started + self._grace - reserve):
                await idle
        self.operations.kill_all("InterruptedAtShutdown")
        conns = list(self.connections.values())
        for conn in conns:
            conn.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await asyncio.gather(*(c.closed.wait() for c in conns))
        for srv in self._servers:
            with contextlib.suppress(Exception):
                await srv.wait_closed()
        if self._services is not None and self._services.transactions is not None:
            self._services.transactions.close()  # open transactions end with their snapshots
        await self._close_storage()
        # Off the loop, as closing storage is: a large directory takes a while to delete.
        await loop.run_in_executor(None, self._remove_ephemeral)
        if self.config.pid_file is not None:
            startup.remove_pid_file(self.config.pid_file)
        log.info("shutdown complete")
        self._detach_logging()
        self.stopped.set()

    def _remove_ephemeral(self) -> None:
        """With --ephemeral, delete the temporary data directory (storage is closed by now)."""
        path, self._ephemeral_dir = self._ephemeral_dir, None
        if path is not None:
            import shutil

            shutil.rmtree(path, ignore_errors=True)
            log.info("removed the ephemeral data directory %s", path)

    async def _close_storage(self) -> None:
        if self._services is not None:
            await self._services.profiler.close()
            await asyncio.get_running_loop().run_in_executor(None, self._services.gateway.close)
        if self._engine is not None:
            # Closing syncs the data file: off the loop, like every disk wait.
            await asyncio.get_running_loop().run_in_executor(None, self._engine.close)

    def _detach_logging(self) -> None:
        logsetup.detach(self._log_handlers)
        self._log_handlers = []

    async def _reap_cursors(self) -> None:
        """Close cursors idle longer than cursorTimeoutMillis (MongoDB's default: 10 minutes)."""
        while True:
            idle = int(self.parameters.get("cursorTimeoutMillis")) / 1000
            # Check often enough that a cursor outlives its timeout by at most about half of it.
            await asyncio.sleep(min(_CURSOR_REAP_INTERVAL, max(idle / 2, 0.05)))
            n = self.cursors.reap(idle)
            if n:
                log.info("closed %d idle cursors", n)

    async def _refresh_sessions(self) -> None:
        """The logical session cache's periodic refresh (server/session_cache.py), loaded with
        its first run rather than at start."""
        await asyncio.sleep(int(self.parameters.get("logicalSessionRefreshMillis")) / 1000)
        from ebbdb.server import session_cache

        services = self.services
        await session_cache.run(services.sessions, services.gateway, self.parameters, first=True)

    # -- connections -----------------------------------------------------------------------------

    def connection_opened(self, conn: Connection) -> bool:
        """Count `conn` in, unless net.maxIncomingConnections are open already (False)."""
        if len(self.connections) >= self.config.max_connections:
            self.stats.connections_rejected += 1
            return False
        self.connections[conn.id] = conn
        self.stats.connections_current += 1
        self.stats.connections_total += 1
        return True

    def connection_closed(self, conn: Connection) -> None:
        if self.connections.pop(conn.id, None) is not None:
            self.stats.connections_current -= 1
