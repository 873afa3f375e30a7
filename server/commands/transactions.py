"""commitTransaction and abortTransaction. In replica-set mode they end the session's transaction
(server/transactions.py; the dispatcher has checked the transaction fields and found the
transaction). A standalone mongod has them too and refuses them: drivers send them with the
session's txnNumber, which the dispatcher refuses before any handler runs (IllegalOperation);
sent without one, there is no transaction here to end, and they get the same answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.server.transactions import ENDING, NOT_REPLICATED, Transaction


@dataclass(frozen=True)
class EndTransactionParams:
    pass


def _transaction(ctx: CommandContext, name: str) -> Transaction:
    """The session's transaction this command ends (the dispatcher checked its number)."""
    if ctx.transactions is None:
        raise CommandError(ErrorCode.IllegalOperation, NOT_REPLICATED)
    txn = ENDING.get()
    if txn is None:
        raise CommandError(ErrorCode.CommandFailed, f"{name} must be run within a transaction")
    return txn


@REGISTRY.command("commitTransaction", params=EndTransactionParams, admin_only=True, writes=True)
async def commit_transaction(ctx: CommandContext, p: EndTransactionParams) -> dict[str, Any]:
    """Commit the session's transaction (replica-set mode): its writes and its oplog entry in one
    storage write. A standalone server refuses it (IllegalOperation)."""
    txn = _transaction(ctx, "commitTransaction")
    await txn.manager.commit(txn)
    return {}


@REGISTRY.command("abortTransaction", params=EndTransactionParams, admin_only=True, writes=True)
async def abort_transaction(ctx: CommandContext, p: EndTransactionParams) -> dict[str, Any]:
    """Abort the session's transaction (replica-set mode): nothing it wrote remains. A standalone
    server refuses it (IllegalOperation)."""
    txn = _transaction(ctx, "abortTransaction")
    await txn.manager.abort_command(txn)
    return {}
