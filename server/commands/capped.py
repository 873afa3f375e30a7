"""Capped collections: the `capped`/`size`/`max` options of create, collMod's cappedSize and
cappedMax, and the convertToCapped and cloneCollectionAsCapped commands (storage/engine/capped.py and
storage/engine/capped_ddl.py do the work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import COMMAND_VALUE, Kind, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.catalog.info import validate_collection_name
from ebbdb.storage.core.values import to_decimal
from ebbdb.storage.engine import capped

_INT64_MAX = (1 << 63) - 1


def safe_int64(value: Any) -> int:
    """A number as MongoDB's IDL `safeInt64` takes it: truncated, NaN as 0, infinities and
    values past the range clamped to the int64 limits."""
    d = to_decimal(value)
    if d.is_nan():
        return 0
    if d.is_infinite():
        return _INT64_MAX if d > 0 else -_INT64_MAX - 1
    return max(-_INT64_MAX - 1, min(_INT64_MAX, int(d)))  # int() truncates toward zero


def _bounded(field: str, value: Any, low: int | None, high: int | None, below: int | None) -> int:
    """An IDL range validator: 51024 in its words when the value is out of range."""
    n = safe_int64(value)
    if low is not None and n < low:
        wrong = f">= {low}"
    elif high is not None and n > high:
        wrong = f"<= {high}"
    elif below is not None and n >= below:
        wrong = f"< {below}"
    else:
        return n
    raise CommandError(
        ErrorCode.Location51024,
        f"BSON field '{field}' value must be {wrong}, actual value '{n}'",
    )


def _size(field: str, value: Any) -> int | None:
    return None if value is None else _bounded(field, value, 1, capped.MAX_SIZE, None)


def _max(field: str, value: Any) -> int | None:
    return None if value is None else _bounded(field, value, None, None, capped.MAX_DOCS_BOUND)


def create_options(
    is_capped: bool | None, size: Any, max_docs: Any, options: dict[str, Any]
) -> dict[str, Any]:
    """create's options with its capped ones checked and normalised, as mongod does: the ranges
    first (51024), then `size` required with `capped`, then `capped` required with `size` or
    `max` (72). A capped collection's options come first, as listCollections shows them."""
    n_size, n_max = _size("size", size), _max("max", max_docs)
    if is_capped and n_size is None:
        raise CommandError(
            ErrorCode.InvalidOptions, "the 'size' field is required when 'capped' is true"
        )
    if (n_size is not None or n_max is not None) and not is_capped:
        raise CommandError(
            ErrorCode.InvalidOptions,
            "the 'capped' field needs to be true when either the 'size' or 'max' fields are "
            "present",
        )
    if not is_capped or n_size is None:
        return options
    return capped.options(n_size, n_max, options)


async def coll_mod_limits(ctx: CommandContext, collection: str, size: Any, max_docs: Any) -> bool:
    """collMod's cappedSize / cappedMax (MongoDB 6+): True if either was given (and applied)."""
    n_size, n_max = _size("cappedSize", size), _max("cappedMax", max_docs)
    if n_size is None and n_max is None:
        return False
    await ctx.gateway.write(ctx.gateway.engine.set_capped_limits, ctx.db, collection, n_size, n_max)
    return True


def _copy_size(value: Any) -> int:
    """The size of convertToCapped and cloneCollectionAsCapped (a double in mongod, checked as
    the collection options it becomes)."""
    d = to_decimal(value)
    if d.is_nan() or d < 0:
        raise CommandError(ErrorCode.BadValue, "size has to be >= 0")
    if d > capped.MAX_SIZE:
        raise CommandError(ErrorCode.BadValue, "size cannot exceed 1 PB")
    return int(d)


@dataclass(frozen=True)
class ConvertToCappedParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION_BY_HAND, required=True)
    size: Any = arg("size", Kind.NUMBER, required=True)


@REGISTRY.command("convertToCapped", params=ConvertToCappedParams, writes=True)
async def convert_to_capped(ctx: CommandContext, p: ConvertToCappedParams) -> dict[str, Any]:
    """Make a collection capped: its documents in natural order (the oldest dropped if they do
    not fit), only its `_id` index kept, as mongod does."""
    validate_collection_name(ctx.db, p.collection)
    size = _copy_size(p.size)
    await ctx.gateway.write(ctx.gateway.engine.convert_to_capped, ctx.db, p.collection, size)
    return {"ok": 1.0}


@dataclass(frozen=True)
class CloneAsCappedParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION_BY_HAND, required=True)
    to_collection: str = arg("toCollection", Kind.STRING, required=True)
    size: Any = arg("size", Kind.NUMBER, required=True)


@REGISTRY.command("cloneCollectionAsCapped", params=CloneAsCappedParams, writes=True)
async def clone_collection_as_capped(ctx: CommandContext, p: CloneAsCappedParams) -> dict[str, Any]:
    """Copy a collection into a new capped collection of the same database."""
    validate_collection_name(ctx.db, p.collection)
    validate_collection_name(ctx.db, p.to_collection)
    size = _copy_size(p.size)
    await ctx.gateway.write(
        ctx.gateway.engine.clone_as_capped, ctx.db, p.collection, p.to_collection, size
    )
    return {"ok": 1.0}
