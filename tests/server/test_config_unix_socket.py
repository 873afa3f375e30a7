"""The Unix domain socket's options as mongod's: --nounixsocket, --unixSocketPrefix,
--filePermissions and net.unixDomainSocket in a config file (flags win), their defaults, and
getCmdLineOpts' `parsed` section. No server here: tests/e2e/test_unix_socket.py runs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ebbdb.server.config import parse_args, socket_uri_host
from ebbdb.server.config_file import parse_file_mode


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mongod.conf"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    config = parse_args([])
    assert (config.unix_socket, config.unix_socket_prefix, config.unix_socket_mode) == (
        True,
        "/tmp",
        0o700,
    )
    assert config.unix_socket_path(27017) == "/tmp/ebbdb-27017.sock"
    assert "unixDomainSocket" not in config.parsed()["net"]


def test_flags() -> None:
    config = parse_args(
        ["--nounixsocket", "--unixSocketPrefix", "/run/db", "--filePermissions", "0770"]
    )
    assert (config.unix_socket, config.unix_socket_prefix, config.unix_socket_mode) == (
        False,
        "/run/db",
        0o770,
    )
    assert config.unix_socket_path(40000) == "/run/db/ebbdb-40000.sock"
    # As mongod's getCmdLineOpts: --nounixsocket is net.unixDomainSocket.enabled: false.
    assert config.parsed()["net"]["unixDomainSocket"] == {
        "enabled": False,
        "pathPrefix": "/run/db",
        "filePermissions": 0o770,
    }


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("0700", 0o700),
        ("0777", 0o777),
        ("0o755", 0o755),
        ("0x1ff", 0o777),
        ("0", 0),
        ("448", 0o700),  # decimal, as mongod reads a number without a leading 0
        (0o660, 0o660),  # YAML 1.1 reads 0660 as an octal integer
    ],
)
def test_file_modes(value: Any, mode: int) -> None:
    assert parse_file_mode(value) == mode


@pytest.mark.parametrize("value", ["777", "0800", "rwx", "", "-1", "01777", True, None, 1.5])
def test_file_modes_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="expected a file mode from 0 to 0777"):
        parse_file_mode(value)


def test_bad_file_permissions_flag(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["--filePermissions", "777"], capsys)
    assert "expected a file mode from 0 to 0777 (octal, as in 0700), got 777" in err


def test_config_file(tmp_path: Path) -> None:
    text = (
        "net:\n  port: 0\n  unixDomainSocket:\n    enabled: false\n    pathPrefix: /var/run\n"
        "    filePermissions: 0770\n"
    )
    config = parse_args(["--config", _config(tmp_path, text)])
    assert (config.unix_socket, config.unix_socket_prefix, config.unix_socket_mode) == (
        False,
        "/var/run",
        0o770,
    )
    quoted = "net:\n  unixDomainSocket:\n    filePermissions: '0755'\n"
    assert parse_args(["--config", _config(tmp_path, quoted)]).unix_socket_mode == 0o755


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    text = "net:\n  unixDomainSocket:\n    pathPrefix: /var/run\n    filePermissions: 0770\n"
    path = _config(tmp_path, text)
    config = parse_args(["--config", path, "--unixSocketPrefix", "/x", "--filePermissions", "0700"])
    assert (config.unix_socket_prefix, config.unix_socket_mode) == ("/x", 0o700)
    assert parse_args(["--config", path, "--nounixsocket"]).unix_socket is False
    enabled = _config(tmp_path, "net:\n  unixDomainSocket:\n    enabled: true\n")
    assert parse_args(["--config", enabled, "--nounixsocket"]).unix_socket is False


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("net:\n  unixDomainSocket:\n    enabled: 1\n", "enabled: expected true or false"),
        ("net:\n  unixDomainSocket:\n    filePermissions: 777\n", "expected a file mode"),
        ("net:\n  unixDomainSocket:\n    pathPrefix: ''\n", "pathPrefix: expected a non-empty"),
        (
            "net:\n  unixDomainSocket:\n    label: x\n",
            "unrecognized option: net.unixDomainSocket.label",
        ),
        ("net:\n  unixDomainSocket: 3\n", "net.unixDomainSocket: expected a mapping of options"),
    ],
)
def test_bad_config_files(
    tmp_path: Path, text: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert words in _refused(["--config", _config(tmp_path, text)], capsys)


def test_paths_in_bind_ip() -> None:
    """As mongod: a --bind_ip entry with a '/' is a Unix domain socket's path."""
    config = parse_args(["--bind_ip", "127.0.0.1,/run/app/db.sock"])
    assert config.hosts == ("127.0.0.1",)
    assert config.socket_paths == ("/run/app/db.sock",)


def test_bind_ip_of_paths_alone_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert "besides socket paths" in _refused(["--bind_ip", "/run/app/db.sock"], capsys)


def test_socket_uri_host() -> None:
    assert socket_uri_host("/tmp/ebbdb-27017.sock") == "%2Ftmp%2Febbdb-27017.sock"
