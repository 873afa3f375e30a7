"""What a handler is given besides its parameters: the server, the connection, the database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from server.app import App
    from server.connection import Connection


@dataclass(frozen=True)
class CommandContext:
    app: App
    conn: Connection
    db: str
    command: str

    def ns(self, collection: str) -> str:
        return f"{self.db}.{collection}"
