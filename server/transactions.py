"""Sessions' transaction fields on a standalone server, refused as a standalone mongod refuses them.

ebbdb is not a replica-set member, so it has no transactions (and no retryable writes, which drivers
only send to replica sets and mongos). A command that carries `txnNumber` would have its writes
applied at once and kept whatever the transaction later does, so it is refused before it runs,
with mongod's checks in mongod's order: nothing it asked to write is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ebbdb.server.errors import CommandError, ErrorCode

#: mongod's answer to a transaction number on a server that is not a replica-set member or mongos.
NOT_REPLICATED = "Transaction numbers are only allowed on a replica set member or mongos"


def refuse_transaction_fields(body: Mapping[str, Any]) -> None:
    """Raise what mongod answers when a command carries a session's transaction fields here. The
    common case, a command with none of them, costs three dictionary look-ups."""
    if "txnNumber" not in body and "autocommit" not in body and "startTransaction" not in body:
        return
    if body.get("autocommit") is True:
        raise CommandError(ErrorCode.InvalidOptions, "Specifying autocommit=true is not allowed.")
    if "txnNumber" in body:
        if "lsid" not in body:
            raise CommandError(
                ErrorCode.InvalidOptions,
                "Transaction number requires a session ID to also be specified",
            )
        raise CommandError(ErrorCode.IllegalOperation, NOT_REPLICATED)
    if "autocommit" in body:
        raise CommandError(
            ErrorCode.InvalidOptions,
            "'autocommit' field requires a transaction number to also be specified",
        )
    raise CommandError(
        ErrorCode.InvalidOptions,
        "'startTransaction' field requires 'autocommit' field to also be specified",
    )
