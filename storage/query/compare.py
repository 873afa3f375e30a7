"""MongoDB's total order over BSON values: the one comparison that sorting, range operators and index
keys all agree with (see storage/indexes/keys.py for its byte-string twin)."""

from __future__ import annotations

import datetime
import decimal
import math
import re
from collections.abc import Mapping
from typing import Any

from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS
from bson.raw_bson import RawBSONDocument

from ebbdb.storage.core.values import regex_flags as regex_flags

# MongoDB's canonical type ranks (canonicalizeBSONType); equal ranks compare by value.
RANK_MINKEY = -1
RANK_UNDEFINED = 0
RANK_NULL = 5
RANK_NUMBER = 10
RANK_STRING = 15
RANK_OBJECT = 20
RANK_ARRAY = 25
RANK_BINDATA = 30
RANK_OBJECTID = 35
RANK_BOOL = 40
RANK_DATE = 45
RANK_TIMESTAMP = 47
RANK_REGEX = 50
RANK_CODE = 60
RANK_CODEWSCOPE = 65
RANK_MAXKEY = 127


#: BSON type names (as `$type` and `$convert` spell them) and their type codes.
BSON_TYPE_CODES: dict[str, int] = {
    "double": 1,
    "string": 2,
    "object": 3,
    "array": 4,
    "binData": 5,
    "undefined": 6,
    "objectId": 7,
    "bool": 8,
    "date": 9,
    "null": 10,
    "regex": 11,
    "dbPointer": 12,
    "javascript": 13,
    "symbol": 14,
    "javascriptWithScope": 15,
    "int": 16,
    "timestamp": 17,
    "long": 18,
    "decimal": 19,
    "minKey": -1,
    "maxKey": 127,
}

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class _Undefined:
    """BSON's deprecated undefined; also what an empty array sorts as (below null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED: Any = _Undefined()


def rank(value: Any) -> int:
    """The canonical type rank of a decoded BSON value."""
    # Order matters: bool is an int subclass, Int64 too.
    if value is None:
        return RANK_NULL
    if value is UNDEFINED:
        return RANK_UNDEFINED
    t = type(value)
    if t is bool:
        return RANK_BOOL
    if t is int or t is float or t is Int64 or t is Decimal128:
        return RANK_NUMBER
    if t is str:
        return RANK_STRING
    if t is dict or t is RawBSONDocument or t is DBRef:
        return RANK_OBJECT
    if t is list:
        return RANK_ARRAY
    if t is ObjectId:
        return RANK_OBJECTID
    if t is DatetimeMS or t is datetime.datetime:
        return RANK_DATE
    if t is Binary or t is bytes:
        return RANK_BINDATA
    if t is Timestamp:
        return RANK_TIMESTAMP
    if t is Regex or isinstance(value, re.Pattern):
        return RANK_REGEX
    if t is Code:
        return RANK_CODE if value.scope is None else RANK_CODEWSCOPE
    if t is MinKey:
        return RANK_MINKEY
    if t is MaxKey:
        return RANK_MAXKEY
    if isinstance(value, bool):
        return RANK_BOOL
    if isinstance(value, (int, float)):
        return RANK_NUMBER
    if isinstance(value, str):
        return RANK_STRING
    if isinstance(value, Mapping):
        return RANK_OBJECT
    if isinstance(value, (list, tuple)):
        return RANK_ARRAY
    raise TypeError(f"not a BSON value: {type(value).__name__}")


def date_ms(value: DatetimeMS | datetime.datetime) -> int:
    """Milliseconds since the epoch of a BSON date, however it was decoded."""
    if isinstance(value, DatetimeMS):
        return int(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def number_value(value: Any) -> int | float | decimal.Decimal:
    """A number as a Python value that compares exactly with the others (NaN stays NaN)."""
    if type(value) is Decimal128:
        d = value.to_decimal()
        return float("nan") if d.is_nan() else d
    return value  # type: ignore[no-any-return]


def is_nan(value: Any) -> bool:
    if type(value) is float:
        return math.isnan(value)
    if type(value) is Decimal128:
        return bool(value.to_decimal().is_nan())
    return False


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _compare_numbers(a: Any, b: Any) -> int:
    a_nan, b_nan = is_nan(a), is_nan(b)
    if a_nan or b_nan:
        return b_nan - a_nan if not (a_nan and b_nan) else 0  # NaN is the lowest number
    return _cmp(number_value(a), number_value(b))


def _items(value: Any) -> list[tuple[str, Any]]:
    if type(value) is DBRef:
        return list(value.as_doc().items())
    return list(value.items())


def _binary_parts(value: Any) -> tuple[int, int, bytes]:
    subtype = value.subtype if type(value) is Binary else 0
    return len(value), subtype, bytes(value)


def _regex_parts(value: Any) -> tuple[str, str]:
    if isinstance(value, re.Pattern):
        value = Regex.from_native(value)
    return value.pattern, regex_flags(value.flags)


def compare(a: Any, b: Any) -> int:
    """-1, 0 or 1 as `a` sorts before, with or after `b` in MongoDB's order."""
    ra, rb = rank(a), rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra == RANK_NUMBER:
        return _compare_numbers(a, b)
    if ra == RANK_STRING:
        return _cmp(a, b)
    if ra == RANK_OBJECT:
        ia, ib = _items(a), _items(b)
        for (ka, va), (kb, vb) in zip(ia, ib):
            c = _cmp(rank(va), rank(vb)) or _cmp(ka.encode(), kb.encode()) or compare(va, vb)
            if c:
                return c
        return _cmp(len(ia), len(ib))
    if ra == RANK_ARRAY:
        for va, vb in zip(a, b):
            c = compare(va, vb)
            if c:
                return c
        return _cmp(len(a), len(b))
    if ra == RANK_BINDATA:
        return _cmp(_binary_parts(a), _binary_parts(b))
    if ra == RANK_OBJECTID:
        return _cmp(a.binary, b.binary)
    if ra == RANK_BOOL:
        return _cmp(a, b)
    if ra == RANK_DATE:
        return _cmp(date_ms(a), date_ms(b))
    if ra == RANK_TIMESTAMP:
        return _cmp((a.time, a.inc), (b.time, b.inc))
    if ra == RANK_REGEX:
        return _cmp(_regex_parts(a), _regex_parts(b))
    if ra == RANK_CODE:
        return _cmp(str(a), str(b))
    if ra == RANK_CODEWSCOPE:
        return _cmp(str(a), str(b)) or compare(dict(a.scope), dict(b.scope))
    return 0  # null, undefined, MinKey, MaxKey: one value each


def equal(a: Any, b: Any) -> bool:
    """BSON equality: 1 == 1.0 == NumberLong(1), but true != 1 and "1" != 1."""
    return compare(a, b) == 0


class SortKey:
    """Wraps a value so Python's sort uses MongoDB's order (direction applied by the caller)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: SortKey) -> bool:
        return compare(self.value, other.value) < 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SortKey) and compare(self.value, other.value) == 0

    __hash__ = None  # type: ignore[assignment]
