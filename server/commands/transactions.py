"""commitTransaction and abortTransaction exist on a standalone mongod, which refuses them: drivers
send them with the session's txnNumber, which the dispatcher refuses before any handler runs
(IllegalOperation, server/transactions.py). Sent without one, there is no transaction here to end,
and they get the same answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.server.transactions import NOT_REPLICATED


@dataclass(frozen=True)
class EndTransactionParams:
    pass


@REGISTRY.command("commitTransaction", params=EndTransactionParams, admin_only=True)
async def commit_transaction(ctx: CommandContext, p: EndTransactionParams) -> dict[str, Any]:
    """Refused: a standalone server has no transaction to commit (IllegalOperation)."""
    raise CommandError(ErrorCode.IllegalOperation, NOT_REPLICATED)


@REGISTRY.command("abortTransaction", params=EndTransactionParams, admin_only=True)
async def abort_transaction(ctx: CommandContext, p: EndTransactionParams) -> dict[str, Any]:
    """Refused: a standalone server has no transaction to abort (IllegalOperation)."""
    raise CommandError(ErrorCode.IllegalOperation, NOT_REPLICATED)
