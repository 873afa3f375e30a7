"""The command line as parsed, without starting anything: the addresses to listen on."""

from __future__ import annotations

import pytest

from server.config import parse_args


@pytest.mark.parametrize(
    ("argv", "bind"),
    [
        ([], ("127.0.0.1",)),
        (["--bind_ip", "127.0.0.1, ::1"], ("127.0.0.1", "::1")),
        # mongod's rule: --bind_ip_all is every IPv4 address; IPv6 too only with --ipv6.
        (["--bind_ip_all"], ("0.0.0.0",)),
        (["--bind_ip_all", "--ipv6"], ("0.0.0.0", "::")),
    ],
)
def test_addresses_to_listen_on(argv: list[str], bind: tuple[str, ...]) -> None:
    assert parse_args(argv).bind_ip == bind


def test_empty_bind_ip_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(["--bind_ip", " , "])
    assert info.value.code == 2
    assert "--bind_ip needs at least one address" in capsys.readouterr().err
