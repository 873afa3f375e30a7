"""BSON values to JavaScript and back, as JSON text with tagged objects (javascript_prelude.py
decodes and encodes the other side).

Into JavaScript, as mongod's server-side JavaScript sees them: int32 and double as numbers, long
as NumberLong, decimal as NumberDecimal, date as Date, ObjectId as ObjectId, regular expression
as RegExp, binary as BinData, timestamp as Timestamp, code as a function, null as null and
undefined (and a missing argument) as undefined. Out of JavaScript: a number is a double (as
mongod's, which keeps an int32 only for a field of a document it read and did not change: ebbdb
does not track that), NumberInt an int32, NumberLong a long, and the other types back to theirs.
"""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.compare import UNDEFINED, date_ms
from ebbdb.storage.query.javascript_prelude import TAG
from ebbdb.storage.query.paths import MISSING

_INT32 = range(-(2**31), 2**31)


def _tagged(kind: str, **fields: Any) -> dict[str, Any]:
    return {TAG: kind, **fields}


def _plain(v: Any) -> Any:
    """A value as JSON-ready data, BSON types tagged."""
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        return v if v in _INT32 else _tagged("l", v=str(v))
    if t is float:
        return (
            v
            if math.isfinite(v) and (v != 0 or math.copysign(1, v) > 0)
            else _tagged("f", v=_js_number(v))
        )
    if t is dict:
        return {str(k): _plain(x) for k, x in v.items()}
    if t is list or t is tuple:
        return [_plain(x) for x in v]
    if t is Int64:
        return _tagged("l", v=str(int(v)))
    if t is Decimal128:
        return _tagged("d", v=str(v))
    if t is DatetimeMS or hasattr(v, "utcoffset"):
        return _tagged("D", v=date_ms(v))
    if t is ObjectId:
        return _tagged("o", v=str(v))
    if v is UNDEFINED or v is MISSING:
        return _tagged("u")
    if t is Regex:
        return _tagged("r", p=v.pattern, f=v.flags if isinstance(v.flags, str) else "")
    if isinstance(v, re.Pattern):
        return _tagged("r", p=v.pattern, f="")
    if isinstance(v, (bytes, Binary)):
        subtype = getattr(v, "subtype", 0)
        return _tagged("b", t=subtype, v=base64.b64encode(bytes(v)).decode())
    if t is Timestamp:
        return _tagged("t", t=v.time, i=v.inc)
    if t is MinKey:
        return _tagged("n")
    if t is MaxKey:
        return _tagged("x")
    if isinstance(v, Code):
        return _tagged("c", v=str(v))
    if t is DBRef:
        return _plain(dict(v.as_doc()))
    if hasattr(v, "items"):  # RawBSONDocument, SON
        return {str(k): _plain(x) for k, x in v.items()}
    if hasattr(v, "bytes"):  # uuid.UUID
        return _tagged("b", t=4, v=base64.b64encode(v.bytes).decode())
    return str(v)


def _js_number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return "-0"


def to_js(value: Any) -> str:
    """`value` as the JSON text the prelude's decode reads."""
    return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False)


def _revive(obj: dict[str, Any]) -> Any:
    kind = obj.get(TAG)
    if kind is None:
        return obj
    if kind == "u":
        return None  # (mongod stores undefined, which drivers read as null)
    if kind == "f":
        return float(obj["v"].replace("Infinity", "inf"))
    if kind == "i":
        return int(obj["v"])
    if kind == "l":
        return Int64(int(obj["v"]))
    if kind == "d":
        try:
            return Decimal128(obj["v"])
        except Exception:
            raise QueryError("BadValue", "Input is not a valid Decimal128 value.") from None
    if kind == "D":
        return DatetimeMS(int(obj["v"]))
    if kind == "o":
        return ObjectId(obj["v"])
    if kind == "t":
        return Timestamp(int(obj["t"]), int(obj["i"]))
    if kind == "b":
        return Binary(base64.b64decode(obj["v"]), int(obj["t"]))
    if kind == "n":
        return MinKey()
    if kind == "x":
        return MaxKey()
    if kind == "r":
        return Regex(obj["p"], obj["f"].replace("g", "").replace("y", "").replace("u", ""))
    if kind == "c":
        return Code(obj["v"])
    return obj


def from_js(text: str) -> Any:
    """The value JSON text from the prelude's encode stands for (a JS number is a double)."""
    return json.loads(text, object_hook=_revive, parse_int=float)


__all__ = ["from_js", "to_js"]
