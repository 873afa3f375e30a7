"""Values rendered as MongoDB renders them inside error messages (`dup key: { _id: 1 }`)."""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping
from typing import Any

from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS


def shell_repr(value: Any) -> str:
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k}: {shell_repr(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[]" if not value else "[ " + ", ".join(shell_repr(v) for v in value) + " ]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Int64):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return {"nan": "nan", "inf": "inf", "-inf": "-inf"}[repr(value)]
        return repr(value) if value != int(value) or abs(value) >= 1e16 else str(int(value)) + ".0"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, ObjectId):
        return f"ObjectId('{value}')"
    if isinstance(value, DatetimeMS):
        return f"new Date({int(value)})"
    if isinstance(value, datetime.datetime):
        return f"new Date({int(value.timestamp() * 1000)})"
    if isinstance(value, Decimal128):
        return f'NumberDecimal("{value}")'
    if isinstance(value, Timestamp):
        return f"Timestamp({value.time}, {value.inc})"
    if isinstance(value, Regex):
        return f"/{value.pattern}/"
    if isinstance(value, (Binary, bytes)):
        sub = value.subtype if isinstance(value, Binary) else 0
        return f"BinData({sub}, {bytes(value).hex().upper()})"
    if isinstance(value, MinKey):
        return "MinKey"
    if isinstance(value, MaxKey):
        return "MaxKey"
    return str(value)
