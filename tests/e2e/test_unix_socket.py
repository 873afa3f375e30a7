"""The Unix domain socket, as mongod's net.unixDomainSocket: on by default on POSIX at
/tmp/ebbdb-<port>.sock (named after the real port with --port 0), mode 0700, removed at exit;
pymongo (sync and AsyncMongoClient) through `mongodb://%2Ftmp%2Febbdb-<port>.sock`;
--nounixsocket, --unixSocketPrefix, --filePermissions and the config file; a stale socket left
by a killed server does not stop the next start; a --bind_ip entry that is a path. Without
POSIX's facilities (no AF_UNIX, as on Windows) tests/e2e/test_portability.py checks there is no
socket and TCP serves alone."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.collection import Collection

from ebbdb.server.config import socket_uri_host
from ebbdb.server.embedded import ServerThread
from ebbdb.storage.core import portability
from tests.e2e.test_cli import ServerProcess

pytestmark = pytest.mark.skipif(
    not portability.unix_sockets(), reason="no Unix domain sockets on this system"
)

Doc = dict[str, Any]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a socket's path must fit in about 100 bytes, and pytest's
    tmp_path may not leave room."""
    path = Path(tempfile.mkdtemp(prefix="ebbdb-t-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _client(path: str | Path, **kwargs: Any) -> MongoClient[Doc]:
    return MongoClient(
        f"mongodb://{socket_uri_host(str(path))}/?directConnection=true",
        serverSelectionTimeoutMS=5000,
        **kwargs,
    )


def _mode(path: str | Path) -> int:
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode), f"{path} is not a socket"
    return stat.S_IMODE(st.st_mode)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """launch(*args): `python -m ebbdb --dbpath <tmp> *args`, its startup line read; killed at
    the end of the test if still running."""
    procs: list[ServerProcess] = []

    def start(*args: str, dbpath: Path | None = None) -> ServerProcess:
        data = dbpath or tmp_path / f"data{len(procs)}"
        srv = ServerProcess(["--dbpath", str(data), *args], tmp_path)
        procs.append(srv)
        srv.startup_line()
        return srv

    yield start
    for srv in procs:
        srv.kill()


# -- the default socket ----------------------------------------------------------------------------


def test_pymongo_through_the_default_socket(
    start_server: Callable[..., ServerThread],
) -> None:
    srv = start_server()
    path = f"/tmp/ebbdb-{srv.port}.sock"  # port 0 asked: named after the port picked
    assert srv.socket_path == path
    assert srv.socket_uri == f"mongodb://%2Ftmp%2Febbdb-{srv.port}.sock/?directConnection=true"
    assert _mode(path) == 0o700
    client: MongoClient[Doc]
    with MongoClient(srv.socket_uri, serverSelectionTimeoutMS=5000) as client:
        hello = client.admin.command("hello")
        assert hello["isWritablePrimary"] is True and hello["ok"] == 1.0
        items: Collection[Doc] = client.shop.items
        items.insert_many([{"_id": i, "n": i} for i in range(5)])
        assert items.update_one({"_id": 2}, {"$set": {"n": 20}}).modified_count == 1
        assert items.delete_one({"_id": 4}).deleted_count == 1
        assert list(items.find({}, {"_id": 0, "n": 1}).sort("_id", 1)) == [
            {"n": 0},
            {"n": 1},
            {"n": 20},
            {"n": 3},
        ]
        # The client of a socket has no address: mongod's name for it.
        assert client.admin.command("whatsmyuri")["you"] == "anonymous unix socket"
    tcp: MongoClient[Doc]
    # The issue's own spelling: the percent-encoded path alone (pymongo finds a standalone).
    plain: MongoClient[Doc]
    with MongoClient(
        f"mongodb://%2Ftmp%2Febbdb-{srv.port}.sock", serverSelectionTimeoutMS=5000
    ) as plain:
        assert plain.shop.items.count_documents({}) == 4
    with MongoClient(srv.uri, serverSelectionTimeoutMS=5000) as tcp:
        assert tcp.shop.items.count_documents({}) == 4  # the same server over TCP
    srv.stop()
    assert not os.path.exists(path), "removed at exit"


def test_async_client_through_the_socket(start_server: Callable[..., ServerThread]) -> None:
    srv = start_server()
    assert srv.socket_uri is not None
    uri = srv.socket_uri

    async def main() -> list[Doc]:
        client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, serverSelectionTimeoutMS=5000)
        try:
            await client.app.log.insert_one({"_id": 1, "msg": "hi"})
            return [d async for d in client.app.log.find({}, {"_id": 0})]
        finally:
            await client.close()

    assert asyncio.run(main()) == [{"msg": "hi"}]


def test_many_servers_at_once_each_have_their_own(
    start_server: Callable[..., ServerThread], tmp_path: Path
) -> None:
    servers = [start_server(path=str(tmp_path / f"d{i}")) for i in range(3)]
    paths = {srv.socket_path for srv in servers}
    assert len(paths) == 3
    for i, srv in enumerate(servers):
        with _client(str(srv.socket_path)) as client:
            client.db.c.insert_one({"_id": i})
    for i, srv in enumerate(servers):
        with _client(str(srv.socket_path)) as client:
            assert client.db.c.find_one() == {"_id": i}


def test_the_localhost_exception_counts_the_socket_as_local(
    tmp_path: Path,
) -> None:
    srv = ServerThread(str(tmp_path / "data"), auth=True).start()
    try:
        assert srv.socket_path is not None
        with _client(srv.socket_path) as client:
            client.admin.command("createUser", "root", pwd="pw", roles=["root"])
        with _client(srv.socket_path, username="root", password="pw") as client:
            assert client.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"]
    finally:
        srv.stop()


# -- the command line and the config file ----------------------------------------------------------


def test_cli_default_socket_and_its_removal(launch: Callable[..., ServerProcess]) -> None:
    srv = launch("--port", "0")
    path = Path(f"/tmp/ebbdb-{srv.port}.sock")
    assert f" and {path} " in srv.stdout_lines[0]
    assert _mode(path) == 0o700
    with _client(path) as client:
        assert client.admin.command("ping")["ok"] == 1.0
        assert "unixDomainSocket" not in client.admin.command("getCmdLineOpts")["parsed"]["net"]
    assert srv.stop(signal.SIGTERM) == 0, srv.stderr
    assert not path.exists()
    assert "removed the socket file" in srv.stderr


def test_nounixsocket(launch: Callable[..., ServerProcess]) -> None:
    srv = launch("--port", "0", "--nounixsocket")
    assert not Path(f"/tmp/ebbdb-{srv.port}.sock").exists()
    assert " and " not in srv.stdout_lines[0]
    with srv.client() as client:
        parsed = client.admin.command("getCmdLineOpts")["parsed"]
        assert parsed["net"]["unixDomainSocket"] == {"enabled": False}
    assert srv.stop() == 0


def test_prefix_and_permissions(launch: Callable[..., ServerProcess], short_dir: Path) -> None:
    srv = launch("--port", "0", "--unixSocketPrefix", str(short_dir), "--filePermissions", "0770")
    path = short_dir / f"ebbdb-{srv.port}.sock"
    assert _mode(path) == 0o770
    assert not Path(f"/tmp/ebbdb-{srv.port}.sock").exists()
    with _client(path) as client:
        parsed = client.admin.command("getCmdLineOpts")["parsed"]
        assert parsed["net"]["unixDomainSocket"] == {
            "pathPrefix": str(short_dir),
            "filePermissions": 0o770,
        }
    assert srv.stop() == 0
    assert not path.exists()


def test_config_file(launch: Callable[..., ServerProcess], short_dir: Path, tmp_path: Path) -> None:
    conf = tmp_path / "mongod.conf"
    conf.write_text(
        "net:\n  port: 0\n  unixDomainSocket:\n    enabled: true\n"
        f"    pathPrefix: {short_dir}\n    filePermissions: 0777\n"
    )
    srv = launch("--config", str(conf))
    path = short_dir / f"ebbdb-{srv.port}.sock"
    assert _mode(path) == 0o777
    with _client(path) as client:
        assert client.admin.command("ping")["ok"] == 1.0
    assert srv.stop() == 0
    off = tmp_path / "off.conf"
    off.write_text(
        f"net:\n  port: 0\n  unixDomainSocket:\n    enabled: false\n    pathPrefix: {short_dir}\n"
    )
    srv = launch("--config", str(off))
    assert list(short_dir.iterdir()) == []
    assert srv.stop() == 0


def test_a_killed_servers_socket_does_not_stop_the_next_start(
    launch: Callable[..., ServerProcess], short_dir: Path, tmp_path: Path
) -> None:
    """As mongod: the file at the socket's name is replaced (once the TCP port is ours, it can
    only be a dead server's)."""
    port = _free_port()
    args = ("--port", str(port), "--unixSocketPrefix", str(short_dir))
    first = launch(*args, dbpath=tmp_path / "data")
    path = short_dir / f"ebbdb-{port}.sock"
    with _client(path) as client:
        client.db.c.insert_one({"_id": 1})
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    assert path.exists(), "a killed server leaves its socket behind"
    with pytest.raises(ConnectionRefusedError):
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(path))
    again = launch(*args, dbpath=tmp_path / "data")
    with _client(path) as client:
        assert client.db.c.find_one() == {"_id": 1}
    assert again.stop() == 0
    assert not path.exists()


def test_a_stale_file_of_any_kind_is_replaced(
    launch: Callable[..., ServerProcess], short_dir: Path
) -> None:
    port = _free_port()
    path = short_dir / f"ebbdb-{port}.sock"
    path.write_text("left over")
    srv = launch("--port", str(port), "--unixSocketPrefix", str(short_dir))
    assert _mode(path) == 0o700
    assert srv.stop() == 0


def test_a_path_in_bind_ip(launch: Callable[..., ServerProcess], short_dir: Path) -> None:
    """As mongod: an entry with a '/' is a socket to listen on, with --filePermissions."""
    extra = short_dir / "app.sock"
    srv = launch("--port", "0", "--bind_ip", f"127.0.0.1,{extra}", "--filePermissions", "0750")
    assert _mode(extra) == 0o750
    assert _mode(f"/tmp/ebbdb-{srv.port}.sock") == 0o750
    with _client(extra) as client, srv.client() as tcp:
        client.db.c.insert_one({"_id": "via socket"})
        assert tcp.db.c.find_one() == {"_id": "via socket"}
    assert srv.stop() == 0
    assert not extra.exists()


def test_a_socket_that_cannot_be_made_stops_the_start(tmp_path: Path) -> None:
    """A prefix that does not exist: the start fails as for a port in use (mongod fails too)."""
    proc = ServerProcess(
        ["--port", "0", "--dbpath", str(tmp_path / "d"), "--unixSocketPrefix", "/nonexistent/x"],
        tmp_path,
    )
    try:
        assert proc.proc.wait(15) == 48
        assert "ebbdb: SocketException: /nonexistent/x/ebbdb-" in proc.stderr
        assert ":: caused by :: No such file or directory" in proc.stderr
    finally:
        proc.kill()


def test_a_path_in_bind_ip_without_unix_sockets_stops_the_start(tmp_path: Path) -> None:
    """Where the system has no Unix domain sockets (as on Windows; here POSIX's facilities are
    hidden), a path in --bind_ip is an address the server cannot listen on: exit status 48."""
    from tests.e2e.test_portability import server_env

    proc = ServerProcess(
        ["--port", "0", "--dbpath", str(tmp_path / "d"), "--bind_ip", "127.0.0.1,/tmp/x/a.sock"],
        tmp_path,
        env=server_env("hidden"),
    )
    try:
        assert proc.proc.wait(15) == 48
        assert (
            "SocketException: /tmp/x/a.sock :: caused by :: no Unix domain sockets on this system"
            in proc.stderr
        )
    finally:
        proc.kill()
