"""Command handlers, one module per group; importing this package registers them all."""

from server.commands import admin, catalog, crud, handshake, indexes, query, testing  # noqa: F401
