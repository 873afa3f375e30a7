"""validate: check a collection's records, index entries and expiry entries against each other, with
MongoDB 7.0's options and reply shape (the check itself is storage/engine/validate.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bson import Binary, Int64
from bson.datetime_ms import DatetimeMS

from ebbdb.server.arguments import COMMAND_VALUE, Kind, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.catalog.info import validate_collection_name
from ebbdb.storage.engine.validate import (
    Inconsistency,
    ValidateResult,
    validate_collection,
    validate_metadata,
)

#: Sent with an invalid result, as MongoDB sends its own advice.
_ADVICE = (
    "The collection's records and its index or expiry entries disagree. Restore it from a backup, "
    "or drop and create again the indexes named in errors to rebuild their entries."
)


@dataclass(frozen=True)
class ValidateParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION_BY_HAND, required=True)
    full: bool = arg("full", Kind.BOOL, False)
    background: bool = arg("background", Kind.BOOL, False)
    repair: bool = arg("repair", Kind.BOOL, False)
    metadata: bool = arg("metadata", Kind.BOOL, False)
    #: None: not given (MongoDB refuses an explicit false next to full or enforceFastCount).
    check_bson_conformance: bool | None = arg("checkBSONConformance", Kind.BOOL)
    enforce_fast_count: bool = arg("enforceFastCount", Kind.BOOL, False)
    #: A field of MongoDB before 3.6 that pymongo's validate_collection still sends: no effect.
    scandata: bool = arg("scandata", Kind.BOOL, False)


def _refused_combination(p: ValidateParams) -> str | None:
    """MongoDB's InvalidOptions message for options that do not go together, in its order."""

    def both(a: str, b: str) -> str:
        return (
            f"Running the validate command with both {{ {a}: true }} and {{ {b}: true }} "
            "is not supported."
        )

    if p.background and p.full:
        return both("background", "full")
    if p.background and p.enforce_fast_count:
        return both("background", "enforceFastCount")
    if p.check_bson_conformance is False and (p.full or p.enforce_fast_count):
        return "Cannot explicitly set 'checkBSONConformance: false' with full validation set."
    if p.repair and p.background:
        return both("background", "repair")
    if p.repair and p.enforce_fast_count:
        return both("enforceFastCount", "repair")
    if p.repair and p.check_bson_conformance:
        return both("checkBSONConformance", "repair")
    others = (p.background, p.full, p.enforce_fast_count, p.check_bson_conformance, p.repair)
    if p.metadata and any(others):
        return (
            "Running the validate command with { metadata: true } is not supported with any "
            "other options"
        )
    return None


@REGISTRY.command("validate", params=ValidateParams)
async def validate(ctx: CommandContext, p: ValidateParams) -> dict[str, Any]:
    """Check a collection: every index and expiry entry names a record whose document gives it,
    every document has all its entries, and the collection's count matches its records."""
    validate_collection_name(ctx.db, p.collection)
    refused = _refused_combination(p)
    if refused is not None:
        raise CommandError(ErrorCode.InvalidOptions, refused)
    info = ctx.collection(p.collection)
    if info is None:
        raise CommandError(
            ErrorCode.NamespaceNotFound,
            f"Collection '{ctx.ns(p.collection)}' does not exist to validate.",
        )
    if p.repair:
        # MongoDB repairs on a standalone server; ebbdb only checks.
        raise CommandError(
            ErrorCode.NotImplemented,
            "validate with { repair: true } is not supported: ebbdb only checks a collection",
        )
    if p.metadata:
        return _reply(validate_metadata(info))
    # A snapshot read: background validation is the same check, and writers are not held up.
    result = await ctx.gateway.read(
        validate_collection, ctx.gateway.engine, info, p.full, p.enforce_fast_count
    )
    return _reply(result)


def _reply(r: ValidateResult) -> dict[str, Any]:
    """The reply document, fields in MongoDB 7.0's order."""
    reply: dict[str, Any] = {"ns": r.ns}
    if r.uuid is not None:
        reply["uuid"] = r.uuid
    if r.records is not None:
        reply["nInvalidDocuments"] = r.invalid_documents
        reply["nNonCompliantDocuments"] = 0  # ebbdb has no schema validation
        reply["nrecords"] = r.records
        reply["nIndexes"] = len(r.indexes)
        reply["keysPerIndex"] = {ix.name: ix.keys for ix in r.indexes}
        reply["indexDetails"] = {ix.name: _index_details(ix.valid, ix.errors) for ix in r.indexes}
    reply["valid"] = r.valid
    reply["repaired"] = False
    reply["warnings"] = list(r.warnings)
    reply["errors"] = list(r.errors)
    reply["extraIndexEntries"] = [_entry(e) for e in r.extra]
    reply["missingIndexEntries"] = [_entry(e) for e in r.missing]
    reply["corruptRecords"] = [Int64(rid) for rid in r.corrupt_records]
    if not r.valid:
        reply["advice"] = _ADVICE
    reply["ok"] = 1.0
    return reply


def _index_details(valid: bool, errors: tuple[str, ...]) -> dict[str, Any]:
    details: dict[str, Any] = {"valid": valid}
    if errors:
        details["errors"] = list(errors)
    return details


def _entry(e: Inconsistency) -> dict[str, Any]:
    """One of extraIndexEntries / missingIndexEntries, as MongoDB shapes them (indexName,
    recordId, idKey for a missing one, indexKey); an expiry entry shows its kind and time instead
    of a key, and a key that cannot be shown as values shows its bytes."""
    out: dict[str, Any] = {"indexName": e.index, "recordId": Int64(e.record_id)}
    if e.has_doc_id:
        out["idKey"] = {"_id": e.doc_id}
    if e.expiry is not None:
        entry: dict[str, Any] = {"kind": e.expiry}
        if e.expiry_ms is not None:
            entry["time"] = DatetimeMS(e.expiry_ms)
        out["expiryEntry"] = entry
    elif e.key is not None:
        out["indexKey"] = dict(e.key)
    else:
        out["indexKeyBytes"] = Binary(e.key_bytes)
    return out
