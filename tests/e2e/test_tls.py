"""TLS as an operator turns it on: `python -m ebbdb --tlsMode ... --tlsCertificateKeyFile ...`
with a throwaway certificate authority (trustme), then pymongo with `tls=True` and mongosh with
`--tls` options in its URI. Plain clients are refused by requireTLS and served by allowTLS and
preferTLS on the same port; with --tlsCAFile a client must show a certificate signed by it."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from pymongo import MongoClient
from pymongo.errors import ServerSelectionTimeoutError

from tests.e2e.node_tools import run_mongosh
from tests.e2e.test_cli import ServerProcess, _run


class Certs:
    """A CA, the server's certificate for 127.0.0.1 and localhost, and a client certificate."""

    def __init__(self, folder: Path) -> None:
        self.ca = trustme.CA()
        self.ca_file = folder / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.server_file = folder / "server.pem"
        self.ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
            str(self.server_file)
        )
        self.client_file = folder / "client.pem"
        self.ca.issue_cert("ebbdb-test-client").private_key_and_cert_chain_pem.write_to_path(
            str(self.client_file)
        )
        stranger = trustme.CA()
        self.stranger_file = folder / "stranger.pem"
        stranger.issue_cert("stranger").private_key_and_cert_chain_pem.write_to_path(
            str(self.stranger_file)
        )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    """start(*args) runs `python -m ebbdb --ephemeral --port 0 *args` and waits for it to listen."""
    procs: list[ServerProcess] = []

    def run(*args: str) -> ServerProcess:
        proc = ServerProcess(["--ephemeral", "--port", "0", *args], tmp_path)
        procs.append(proc)
        proc.startup_line()
        return proc

    yield run
    for proc in procs:
        assert proc.stop() == 0
        proc.kill()


def _tls(certs: Certs, *more: str, mode: str = "requireTLS") -> list[str]:
    """The flags of a TLS server with the test certificate, and `more`."""
    return ["--tlsMode", mode, "--tlsCertificateKeyFile", str(certs.server_file), *more]


def _client(port: int, **options: Any) -> MongoClient[dict[str, Any]]:
    return MongoClient(
        f"mongodb://127.0.0.1:{port}/?directConnection=true",
        serverSelectionTimeoutMS=3000,
        connectTimeoutMS=3000,
        **options,
    )


def _round_trip(client: MongoClient[dict[str, Any]]) -> list[dict[str, Any]]:
    coll = client.tlsdb.items
    coll.insert_one({"_id": 1, "secret": "over TLS"})
    return list(coll.find({}, {"_id": 0}))


def test_require_tls_serves_tls_clients_and_refuses_plain_ones(certs: Certs, start: Any) -> None:
    proc = start(*_tls(certs))
    assert proc.port is not None
    with _client(proc.port, tls=True, tlsCAFile=str(certs.ca_file)) as client:
        assert _round_trip(client) == [{"secret": "over TLS"}]
        opts = client.admin.command("getCmdLineOpts")["parsed"]["net"]["tls"]
        assert opts == {"mode": "requireTLS", "certificateKeyFile": str(certs.server_file)}
    with _client(proc.port) as plain:
        with pytest.raises(ServerSelectionTimeoutError):
            plain.admin.command("ping")


def test_a_client_that_does_not_trust_the_server_cannot_connect(certs: Certs, start: Any) -> None:
    proc = start(*_tls(certs))
    assert proc.port is not None
    with _client(proc.port, tls=True) as client:  # the system's CAs: not our throwaway one
        with pytest.raises(ServerSelectionTimeoutError, match="CERTIFICATE_VERIFY_FAILED"):
            client.admin.command("ping")


@pytest.mark.parametrize("mode", ["allowTLS", "preferTLS"])
def test_allow_and_prefer_take_tls_and_plain_clients_on_one_port(
    certs: Certs, start: Any, mode: str
) -> None:
    proc = start(*_tls(certs, mode=mode))
    assert proc.port is not None
    with (
        _client(proc.port, tls=True, tlsCAFile=str(certs.ca_file)) as secure,
        _client(proc.port) as plain,
    ):
        assert _round_trip(secure) == [{"secret": "over TLS"}]
        assert list(plain.tlsdb.items.find({}, {"_id": 0})) == [{"secret": "over TLS"}]
        plain.tlsdb.items.insert_one({"_id": 2, "secret": "in the clear"})
        assert secure.tlsdb.items.count_documents({}) == 2
        assert secure.admin.command("serverStatus")["connections"]["current"] >= 2


def test_ca_file_asks_clients_for_a_certificate_signed_by_it(certs: Certs, start: Any) -> None:
    proc = start(*_tls(certs, "--tlsCAFile", str(certs.ca_file)))
    assert proc.port is not None
    ca = str(certs.ca_file)
    with _client(
        proc.port, tls=True, tlsCAFile=ca, tlsCertificateKeyFile=str(certs.client_file)
    ) as c:
        assert c.admin.command("ping") == {"ok": 1.0}
    for other in ({}, {"tlsCertificateKeyFile": str(certs.stranger_file)}):
        with _client(proc.port, tls=True, tlsCAFile=ca, **other) as refused:
            with pytest.raises(ServerSelectionTimeoutError):
                refused.admin.command("ping")


def test_client_certificates_can_be_optional(certs: Certs, start: Any) -> None:
    proc = start(
        *_tls(certs, "--tlsCAFile", str(certs.ca_file), "--tlsAllowConnectionsWithoutCertificates")
    )
    assert proc.port is not None
    ca = str(certs.ca_file)
    with _client(proc.port, tls=True, tlsCAFile=ca) as anonymous:
        assert anonymous.admin.command("ping") == {"ok": 1.0}
    with _client(
        proc.port, tls=True, tlsCAFile=ca, tlsCertificateKeyFile=str(certs.client_file)
    ) as c:
        assert c.admin.command("ping") == {"ok": 1.0}
    with _client(
        proc.port, tls=True, tlsCAFile=ca, tlsCertificateKeyFile=str(certs.stranger_file)
    ) as stranger:  # a certificate that is shown must still verify
        with pytest.raises(ServerSelectionTimeoutError):
            stranger.admin.command("ping")


def test_the_config_file_turns_tls_on(certs: Certs, start: Any, tmp_path: Path) -> None:
    conf = tmp_path / "mongod.conf"
    conf.write_text(
        "net:\n"
        "  tls:\n"
        "    mode: requireTLS\n"
        f"    certificateKeyFile: {certs.server_file}\n"
        f"    CAFile: {certs.ca_file}\n"
        "    allowConnectionsWithoutCertificates: true\n"
    )
    proc = start("--config", str(conf))
    assert proc.port is not None
    with _client(proc.port, tls=True, tlsCAFile=str(certs.ca_file)) as client:
        assert client.admin.command("getCmdLineOpts")["parsed"]["net"]["tls"] == {
            "mode": "requireTLS",
            "certificateKeyFile": str(certs.server_file),
            "CAFile": str(certs.ca_file),
            "allowConnectionsWithoutCertificates": True,
        }


def test_startup_log_says_ssl_on(certs: Certs, start: Any) -> None:
    proc = start(*_tls(certs, "--logFormat", "json"))
    assert proc.port is not None
    with _client(proc.port, tls=True, tlsCAFile=str(certs.ca_file)) as client:
        client.admin.command("ping")
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    waiting = [line for line in lines if line.get("id") == 23016]
    assert [line["attr"] for line in waiting] == [{"port": proc.port, "ssl": "on"}]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--tlsMode", "requireTLS"],
            "need tlsCertificateKeyFile or certificateSelector when TLS is enabled",
        ),
        (
            ["--tlsCertificateKeyFile", "server.pem"],
            "need to enable TLS via the tlsMode flag when using TLS configuration parameters",
        ),
        (["--tlsMode", "sometimes"], "argument --tlsMode: invalid choice: 'sometimes'"),
    ],
)
def test_inconsistent_tls_options_exit_2(args: list[str], words: str) -> None:
    done = _run(["--ephemeral", "--port", "0", *args])
    assert done.returncode == 2
    assert words in done.stderr


def test_an_unreadable_certificate_exits_2_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-cert.pem"
    bad.write_text("this is not PEM\n")
    done = _run(
        [
            "--ephemeral",
            "--port",
            "0",
            "--tlsMode",
            "requireTLS",
            "--tlsCertificateKeyFile",
            str(bad),
        ]
    )
    assert done.returncode == 2
    assert f"ebbdb: cannot read the certificate and key in {bad}:" in done.stderr


def test_mongosh_connects_with_tls(certs: Certs, start: Any, tmp_path: Path) -> None:
    proc = start(*_tls(certs, "--tlsCAFile", str(certs.ca_file)))
    uri = (
        f"mongodb://localhost:{proc.port}/tlsdb?directConnection=true&tls=true"
        f"&tlsCAFile={certs.ca_file}&tlsCertificateKeyFile={certs.client_file}"
    )
    script = (
        "db.items.insertOne({_id: 1, via: 'mongosh'});\n"
        "print(EJSON.stringify({docs: db.items.find().toArray(), "
        "tls: db.adminCommand({getCmdLineOpts: 1}).parsed.net.tls.mode}));\n"
    )
    out = json.loads(run_mongosh(uri, script, tmp_path / "home")[-1])
    assert out == {"docs": [{"_id": 1, "via": "mongosh"}], "tls": "requireTLS"}


def test_python_ssl_negotiates_tls_1_2_or_later(certs: Certs, start: Any) -> None:
    """The handshake itself, with the standard library as the client, on a port that takes both."""
    import socket

    proc = start(*_tls(certs, mode="preferTLS"))
    assert proc.port is not None
    ctx = ssl.create_default_context(cafile=str(certs.ca_file))
    with socket.create_connection(("127.0.0.1", proc.port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


@pytest.mark.parametrize("length", [16, 278, 790, 66326, 48_000_000])
def test_a_plain_message_is_never_taken_for_a_tls_handshake(length: int) -> None:
    from ebbdb.server.tls import opens_tls

    assert not opens_tls(length.to_bytes(4, "little"))


def test_a_client_hello_is_taken_for_a_tls_handshake(certs: Certs) -> None:
    from ebbdb.server.tls import opens_tls

    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    ctx = ssl.create_default_context(cafile=str(certs.ca_file))
    client = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    assert opens_tls(outgoing.read()[:4])
