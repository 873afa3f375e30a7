"""How a Unix domain socket's client is named and counted (server/listener.py peer_text): as
mongod names it ("anonymous unix socket", or the path the client bound), and as on this machine
for the localhost exception (server/auth/state.py) and the shutdown command."""

from __future__ import annotations

import pytest

from ebbdb.server.auth.state import is_localhost
from ebbdb.server.commands.lifecycle import _from_this_machine
from ebbdb.server.listener import peer_text


@pytest.mark.parametrize(
    ("peername", "text", "local"),
    [
        (("127.0.0.1", 5000), "127.0.0.1:5000", True),
        (("::1", 5000, 0, 0), "::1:5000", True),
        (("10.0.0.7", 5000), "10.0.0.7:5000", False),
        ("", "anonymous unix socket", True),
        (None, "anonymous unix socket", True),
        ("/tmp/client.sock", "/tmp/client.sock", True),
    ],
)
def test_peers(peername: object, text: str, local: bool) -> None:
    assert peer_text(peername) == text
    assert is_localhost(text) is local
    assert _from_this_machine(text) is local
