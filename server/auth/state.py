"""What one connection knows about authentication: the users it has logged in as and the SCRAM
conversation it is in the middle of."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ebbdb.server.auth.scram import Conversation

#: MongoDB numbers a client's SASL conversation 1 (one runs at a time per connection).
CONVERSATION_ID = 1


class ClientAuth:
    """Per connection: `users` maps each logged-in user's id ("db.user") to (user, db)."""

    __slots__ = ("conversation", "conversation_user", "users")

    def __init__(self) -> None:
        self.users: dict[str, tuple[str, str]] = {}
        self.conversation: Conversation | None = None
        #: (user, db) the conversation in progress logs in as.
        self.conversation_user: tuple[str, str] | None = None


def user_id(user: str, db: str) -> str:
    """The `_id` MongoDB gives a user in admin.system.users: "db.user"."""
    return f"{db}.{user}"


def is_localhost(peer: str) -> bool:
    """Whether a peer address ("host:port", "[v6]:port" or a bare host) is a loopback address,
    as the localhost exception requires."""
    from ebbdb.server.listener import is_unix_socket_peer

    if is_unix_socket_peer(peer):
        return True  # a Unix domain socket's client is on this machine, as mongod counts it
    # The connection writes its peer as f"{host}:{port}", IPv6 hosts without brackets.
    host = peer.rsplit(":", 1)[0].strip("[]") if ":" in peer else peer
    import ipaddress  # only under --auth, for the localhost exception

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
