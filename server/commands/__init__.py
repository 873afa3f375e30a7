"""Command handlers, one module per group; importing this package registers them all."""

from ebbdb.server.commands import (  # noqa: F401
    admin,
    aggregate,
    auth,
    capped,
    catalog,
    current_op,
    handshake,
    indexes,
    lifecycle,
    reads,
    rename,
    stats,
    testing,
    transactions,
    ttl_status,
    validate,
    writes,
)
