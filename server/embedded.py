"""Run a real ebbdb server in a background thread with its own event loop (tests and embedding)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ebbdb.server.app import App
from ebbdb.server.config import Config, socket_uri_host


class ServerThread:
    """`start()` returns once the server listens (re-raising its startup error); `stop()` shuts it
    down gracefully and joins the thread. With `auth`, clients must log in (--auth)."""

    def __init__(
        self,
        dbpath: str,
        parameters: dict[str, Any] | None = None,
        port: int = 0,
        *,
        auth: bool = False,
        repl_set: str | None = None,
        oplog_size_mb: int = 192,
    ) -> None:
        """`repl_set` names the one-member replica set the server is (None: a standalone)."""
        self.config = Config(
            port=port,
            bind_ip=("127.0.0.1",),
            dbpath=dbpath,
            parameters=dict(parameters or {}),
            quiet=True,
            auth=auth,
            repl_set=repl_set,
            oplog_size_mb=oplog_size_mb,
        )
        self.app: App | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ebbdb-server", daemon=True)

    @property
    def port(self) -> int:
        assert self.app is not None and self.app.address is not None
        return self.app.address[1]

    @property
    def uri(self) -> str:
        """A URI for a direct connection (a replica set's names the set: drivers then discover
        its primary, this server)."""
        if self.config.repl_set is not None:
            return f"mongodb://127.0.0.1:{self.port}/?replicaSet={self.config.repl_set}"
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    @property
    def socket_path(self) -> str | None:
        """The server's Unix domain socket (/tmp/ebbdb-<port>.sock), None where there is none
        (Windows)."""
        assert self.app is not None
        return self.app.unix_socket

    @property
    def socket_uri(self) -> str | None:
        """`uri` through the Unix domain socket, None where there is none. A replica set's
        member is known by its TCP address, which drivers go on to use: None for it too."""
        path = self.socket_path
        if path is None or self.config.repl_set is not None:
            return None
        return f"mongodb://{socket_uri_host(path)}/?directConnection=true"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("ebbdb did not start in time")
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("ebbdb did not stop in time")

    def call(self, fn: Any, *args: Any) -> Any:
        """Run a plain function on the server's loop thread and return its result."""
        assert self._loop is not None

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.app = App(self.config)
        # stop() and the shutdown command both ask through the app.
        self._stop = self.app.stop_requested
        try:
            await self.app.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        await self._stop.wait()
        await self.app.stop()


@contextmanager
def running_server(dbpath: str, parameters: dict[str, Any] | None = None) -> Iterator[ServerThread]:
    srv = ServerThread(dbpath, parameters).start()
    try:
        yield srv
    finally:
        srv.stop()
