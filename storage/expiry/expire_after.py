"""`expireAfterSeconds`, the one parser of the option wherever a client sets it: on an index
(createIndexes, collMod) or on a clustered or time series collection (create, collMod). Its rules
are stated once here; each command refuses a value with its own code and words (MongoDB's, kept
side by side below). What it returns, an ExpireAfter, is the catalog's (storage/catalog/info.py)."""

from __future__ import annotations

import enum
import math
import time
from typing import Any

from ebbdb.storage.catalog.info import ExpireAfter
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, to_decimal, to_float, type_name
from ebbdb.storage.expiry import ttl

#: The largest TTL an index takes (int32), the Cosmos default on `_ts` included.
MAX_INDEX_SECONDS = 2_147_483_647
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: collMod's value that switches a collection's TTL off: not a TTL, so callers test for it first.
OFF = "off"


class Setting(enum.Enum):
    """Where the option is being set, and by which command."""

    NEW_INDEX = "createIndexes"
    CHANGED_INDEX = "collMod.index"
    NEW_COLLECTION = "create"
    CHANGED_COLLECTION = "collMod"


def parse(
    value: Any,
    setting: Setting,
    key: tuple[tuple[str, Any], ...] | None = None,
    *,
    id_index: bool = False,
    now_ms: int | None = None,
) -> ExpireAfter:
    """The client's `value` as the TTL of what `setting` names: an index with the key pattern
    `key` (`id_index`: it is the `_id_` index), or a collection (no key; its upper bound is the
    time since the epoch, `now_ms` or the clock's). Raises QueryError with the code and message
    the setting's command answers with.

    On an index the key decides the range (on `_ts`, the Cosmos default, -1 is allowed and 0 is
    not) and whether a TTL is allowed at all (not on a compound key, nor on `_id`); createIndexes
    compares the number as a double and truncates it after, collMod truncates it first. collMod
    reads its value before it finds the index (`read`), then calls this with the index's key."""
    if setting is Setting.NEW_INDEX:
        assert key is not None
        return _new_index(value, key)
    seconds = read(value, setting)
    if setting is Setting.CHANGED_INDEX:
        assert key is not None
        return _changed_index(seconds, key, id_index)
    return _on_collection(seconds, time.time_ns() // 1_000_000 if now_ms is None else now_ms)


def read(value: Any, setting: Setting) -> int:
    """The whole seconds (truncated) that collMod's or create's `value` gives, before the place
    it is set on is checked. Raises QueryError for a value that is not a number (a string other
    than OFF, on a collection), or NaN where collMod refuses it."""
    assert setting is not Setting.NEW_INDEX  # its messages show the value as given: see parse
    if setting is Setting.CHANGED_COLLECTION and isinstance(value, str):
        raise QueryError(
            "InvalidOptions",
            "Invalid string value for the 'clusteredIndex::expireAfterSeconds' option. Got: "
            f"'{value}'. Accepted value is '{OFF}'",
        )
    if not is_number(value):
        expected = "string, " if setting is Setting.CHANGED_COLLECTION else ""
        raise QueryError(
            "TypeMismatch",
            f"BSON field '{setting.value}.expireAfterSeconds' is the wrong type "
            f"'{type_name(value)}', expected types '[{expected}long, int, decimal, double]'",
        )
    d = to_decimal(value)
    if d.is_finite():
        return int(d)
    if setting is Setting.CHANGED_INDEX:
        if d.is_nan():
            raise QueryError("InvalidOptions", "expireAfterSeconds cannot be NaN")
        return _INT64_MAX if d > 0 else _INT64_MIN  # MongoDB's safeNumberLong: the nearest bound
    # A collection's NaN or infinity reads as below 0 (create's extractor refuses them first).
    return -1


def _in_range(seconds: float, cosmos: bool) -> bool:
    """THE range of an index's TTL: 0..2147483647, or on `_ts` -1 or 1..2147483647."""
    if cosmos:
        return seconds == -1 or 1 <= seconds <= MAX_INDEX_SECONDS
    return 0 <= seconds <= MAX_INDEX_SECONDS


def _new_index(value: Any, key: tuple[tuple[str, Any], ...]) -> ExpireAfter:
    """createIndexes: 67 CannotCreateIndex (197 for the `_id` index), the value checked before
    the key."""
    if not is_number(value):
        raise QueryError(
            "CannotCreateIndex",
            # MongoDB's message opens a quote around the type's name and never closes it.
            "TTL index 'expireAfterSeconds' option must be numeric, but received a type of "
            f"'{type_name(value)}",
        )
    f = to_float(value)
    if ttl.is_cosmos_key(key) and math.isfinite(f):
        if not _in_range(int(f), cosmos=True):
            raise QueryError(
                "CannotCreateIndex",
                f"invalid TTL index 'expireAfterSeconds' value for _ts: {value}; must be -1 or "
                f"within [1, {MAX_INDEX_SECONDS}]",
            )
        return ExpireAfter(int(f))
    if not _in_range(f, cosmos=False):  # NaN included
        raise QueryError(
            "CannotCreateIndex",
            f"invalid TTL index 'expireAfterSeconds' value: {value}; must be within "
            f"[0, {MAX_INDEX_SECONDS}]",
        )
    if len(key) == 1 and key[0][0] == "_id":
        raise QueryError(
            "InvalidIndexSpecificationOption",
            "The field 'expireAfterSeconds' is not valid for an _id index specification.",
        )
    if len(key) > 1:
        raise QueryError(
            "CannotCreateIndex",
            "TTL indexes are single-field indexes, compound indexes do not support TTL.",
        )
    return ExpireAfter(int(f))


def _changed_index(seconds: int, key: tuple[tuple[str, Any], ...], id_index: bool) -> ExpireAfter:
    """collMod on an index: 72 InvalidOptions, the index checked before the value."""
    if id_index or len(key) != 1:
        raise QueryError(
            "InvalidOptions",
            "TTL indexes are single-field indexes, compound indexes and the _id index do not "
            "support TTL",
        )
    cosmos = ttl.is_cosmos_key(key)
    if not _in_range(seconds, cosmos):
        if cosmos:
            raise QueryError("InvalidOptions", f"invalid expireAfterSeconds for _ts: {seconds}")
        raise QueryError(
            "InvalidOptions",
            f"TTL index 'expireAfterSeconds' must be within [0, {MAX_INDEX_SECONDS}], "
            f"got {seconds}",
        )
    return ExpireAfter(seconds)


def _on_collection(seconds: int, now_ms: int) -> ExpireAfter:
    """create or collMod on a clustered or time series collection, as MongoDB 7 checks a
    collection's (not an index's) TTL: a 64-bit count of seconds from 0 up to the time since the
    epoch. 72 InvalidOptions."""
    if seconds < 0:
        raise QueryError(
            "InvalidOptions", "TTL index 'expireAfterSeconds' option cannot be less than 0"
        )
    if seconds > _INT64_MAX // 1000 or seconds * 1000 > now_ms:
        raise QueryError(
            "InvalidOptions",
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a "
            "lower number",
        )
    return ExpireAfter(seconds)
