"""Resume tokens: `{_data: <hex>}`, the hex of a KeyString (MongoDB's order-preserving key format)
holding clusterTime, version (2), tokenType (128 event, 0 high-water mark), txnOpIndex,
fromInvalidate, the collection's UUID and the event identifier, as mongod writes them: a token
starts `82<8 bytes of clusterTime>`, which tools read. Decoding is strict and fails with mongod's
codes; only the KeyString types a token needs are known (anything else is a format error)."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import bson
from bson import Binary, ObjectId, Timestamp

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import INT32_MAX, INT32_MIN, render_value

#: Token types (ResumeTokenData::TokenType).
EVENT_TOKEN, HIGH_WATER_MARK = 128, 0
VERSION = 2

# KeyString type bytes (V1).
_NULL, _ZERO, _POS1, _NEG1 = 0x14, 0x29, 0x2B, 0x27
_STRING, _OBJECT, _BINDATA, _OID, _FALSE, _TRUE, _TIMESTAMP, _END = (
    0x3C,
    0x46,
    0x5A,
    0x64,
    0x6E,
    0x6F,
    0x82,
    0x04,
)
#: An object element's type byte: the generic type of its value.
_GENERIC_NUMBER, _GENERIC_BOOL = 0x1E, 0x6E
_U64 = struct.Struct(">Q")


def _format_error(what: str) -> QueryError:
    return QueryError("Location50811", f"KeyString format error: {what}")


@dataclass(frozen=True, order=True)
class Position:
    """Where an event stands in the oplog: its entry's clusterTime, its index in a transaction's
    applyOps (0 otherwise) and 1 for the invalidate that follows it. Streams deliver events in
    this order; a token resumes after its position."""

    ts_key: int
    index: int = 0
    invalidate: int = 0

    @classmethod
    def of(cls, ts: Timestamp, index: int = 0, invalidate: bool = False) -> Position:
        return cls(ts_key(ts), index, int(invalidate))

    @property
    def ts(self) -> Timestamp:
        return Timestamp(self.ts_key >> 32, self.ts_key & 0xFFFFFFFF)


def ts_key(ts: Timestamp) -> int:
    return (ts.time << 32) | ts.inc


@dataclass(frozen=True)
class TokenData:
    """A resume token's contents (ResumeTokenData)."""

    cluster_time: Timestamp
    token_type: int = EVENT_TOKEN
    txn_op_index: int = 0
    from_invalidate: bool = False
    uuid: Binary | None = None
    event_id: dict[str, Any] | None = None

    @property
    def position(self) -> Position:
        """Where a stream resumes after this token. A high-water mark at a time says every entry
        before that time was seen (as mongod's: events at its time come after it)."""
        if self.token_type == HIGH_WATER_MARK:
            return Position(ts_key(self.cluster_time) - 1, 1 << 62, 1)
        return Position.of(self.cluster_time, self.txn_op_index, self.from_invalidate)


def high_water_mark(ts: Timestamp) -> dict[str, Any]:
    """The token of a point in the oplog with no event (postBatchResumeToken of an idle stream)."""
    return encode(TokenData(ts, HIGH_WATER_MARK))


def encode(data: TokenData) -> dict[str, Any]:
    """The `_id` of an event (or a high-water mark): `{_data: <hex>}`."""
    out = bytearray()
    out += bytes([_TIMESTAMP]) + _U64.pack(ts_key(data.cluster_time))
    _int(out, VERSION)
    _int(out, data.token_type)
    _int(out, data.txn_op_index)
    out.append(_TRUE if data.from_invalidate else _FALSE)
    if data.uuid is None:
        out.append(_NULL)
    else:
        _bindata(out, bytes(data.uuid), data.uuid.subtype)
    if data.event_id is not None:
        _value(out, data.event_id)
    out.append(_END)
    return {"_data": out.hex().upper()}


def _int(out: bytearray, n: int) -> None:
    if n == 0:
        out.append(_ZERO)
        return
    m = abs(n) << 1
    size = (m.bit_length() + 7) // 8
    raw = m.to_bytes(size, "big")
    if n > 0:
        out.append(_POS1 + size - 1)
        out += raw
    else:
        out.append(_NEG1 - (size - 1))
        out += bytes(0xFF - b for b in raw)


def _bindata(out: bytearray, raw: bytes, subtype: int) -> None:
    out.append(_BINDATA)
    out += bytes([len(raw)]) if len(raw) < 0xFF else b"\xff" + struct.pack(">I", len(raw))
    out.append(subtype)
    out += raw


def _string(out: bytearray, text: str) -> None:
    out += text.encode().replace(b"\x00", b"\x00\xff") + b"\x00"


def _keyable(value: Any) -> bool:
    """Whether a value has a KeyString form here without type bits (int32, no long or double)."""
    if value is None or isinstance(value, bool | str | ObjectId):
        return True
    if type(value) is int:
        return INT32_MIN <= value <= INT32_MAX
    if isinstance(value, Mapping):
        return all(_keyable(v) for v in value.values())
    return False


def _value(out: bytearray, value: Any) -> None:
    """A value with its type byte. An event identifier holding a value this module has no
    KeyString form for (a long, a double, a date, ...) is carried as its BSON in a binData: ebbdb's
    own encoding, which only ebbdb reads back."""
    if value is None:
        out.append(_NULL)
    elif isinstance(value, bool):
        out.append(_TRUE if value else _FALSE)
    elif type(value) is int:
        _int(out, value)
    elif isinstance(value, str):
        out.append(_STRING)
        _string(out, value)
    elif isinstance(value, ObjectId):
        out.append(_OID)
        out += value.binary
    elif isinstance(value, Mapping) and _keyable(value):
        out.append(_OBJECT)
        for name, item in value.items():
            out.append(_generic(item))
            _string(out, name)
            _value(out, item)
        out.append(0)
    elif isinstance(value, Mapping):
        _bindata(out, bson.encode(value), 0)
    else:  # pragma: no cover - event identifiers are documents
        raise TypeError(f"no KeyString form for {type(value).__name__}")


def _generic(value: Any) -> int:
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _GENERIC_BOOL
    if type(value) is int:
        return _GENERIC_NUMBER
    if isinstance(value, str):
        return _STRING
    if isinstance(value, ObjectId):
        return _OID
    return _OBJECT


# -- decoding ----------------------------------------------------------------------------------------


def check_shape(token: Any, option: str) -> Mapping[str, Any]:
    """A token given as `$changeStream.<option>`, checked as mongod's parser checks it: 14 (not
    a document), 40647 (_data missing or not a string), 40648 (_typeBits of a wrong type)."""
    if not isinstance(token, Mapping):
        from ebbdb.storage.core.values import type_name

        raise QueryError(
            "TypeMismatch",
            f"BSON field '$changeStream.{option}' is the wrong type '{type_name(token)}', "
            "expected type 'object'",
        )
    if not isinstance(token.get("_data"), str):
        raise QueryError(
            "Location40647",
            "Bad resume token: _data of missing or of wrong type. Expected string, got "
            + render_value(dict(token)),
        )
    type_bits = token.get("_typeBits")
    if type_bits is not None and not (isinstance(type_bits, bytes) and _subtype(type_bits) == 0):
        raise QueryError(
            "Location40648",
            f"Bad resume token: _typeBits of wrong type {render_value(dict(token))}",
        )
    return token


def parse(token: Any, option: str) -> TokenData:
    """The data of a token given as `$changeStream.<option>`; raises QueryError with mongod's
    codes: check_shape's, then 9 (not hex), 40649 (empty) and the format errors of a token that
    is not one."""
    data = check_shape(token, option)["_data"]
    try:
        raw = bytes.fromhex(data) if len(data) % 2 == 0 else None
    except ValueError:
        raw = None
    if raw is None:
        raise QueryError("FailedToParse", "resume token string was not a valid hex string")
    return decode(raw)


def _subtype(value: bytes) -> int:
    return value.subtype if isinstance(value, Binary) else 0


class _Reader:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.at = 0

    def more(self) -> bool:
        return self.at < len(self.raw) and self.raw[self.at] != _END

    def byte(self) -> int:
        if self.at >= len(self.raw):
            raise _format_error("Unexpected end of input")
        b = self.raw[self.at]
        self.at += 1
        return b

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.raw):
            raise _format_error("Unexpected end of input")
        out = self.raw[self.at : self.at + n]
        self.at += n
        return out

    def cstring(self) -> str:
        out = bytearray()
        while True:
            b = self.byte()
            if b == 0:
                if self.at < len(self.raw) and self.raw[self.at] == 0xFF:
                    self.at += 1
                    out.append(0)
                    continue
                break
            out.append(b)
        try:
            return out.decode()
        except UnicodeDecodeError:
            raise _format_error("Invalid UTF-8 in a string") from None

    def value(self) -> Any:
        t = self.byte()
        if t == _NULL:
            return None
        if t in (_TRUE, _FALSE):
            return t == _TRUE
        if t == _ZERO:
            return 0
        if _POS1 <= t <= _POS1 + 7:
            m = int.from_bytes(self.take(t - _POS1 + 1), "big")
            if m & 1:
                raise _format_error("a number with a fraction in a resume token")
            return m >> 1
        if _NEG1 - 7 <= t <= _NEG1:
            m = int.from_bytes(bytes(0xFF - b for b in self.take(_NEG1 - t + 1)), "big")
            if m & 1:
                raise _format_error("a number with a fraction in a resume token")
            return -(m >> 1)
        if t == _STRING:
            return self.cstring()
        if t == _OID:
            return ObjectId(self.take(12))
        if t == _TIMESTAMP:
            k = _U64.unpack(self.take(8))[0]
            return Timestamp(k >> 32, k & 0xFFFFFFFF)
        if t == _BINDATA:
            size = self.byte()
            if size == 0xFF:
                size = struct.unpack(">I", self.take(4))[0]
            subtype = self.byte()
            return Binary(self.take(size), subtype)
        if t == _OBJECT:
            doc: dict[str, Any] = {}
            while True:
                generic = self.byte()
                if generic == 0:
                    return doc
                name = self.cstring()
                doc[name] = self.value()
        raise _format_error(f"Unknown type: {t}")


def decode(raw: bytes) -> TokenData:
    """A token's KeyString bytes -> its data, with mongod's checks and codes."""
    r = _Reader(raw)
    if not r.more():
        raise QueryError("Location40649", "invalid empty resume token")
    cluster_time = r.value()
    if not isinstance(cluster_time, Timestamp):
        raise _format_error("a resume token starts with its clusterTime")
    if not r.more():
        raise QueryError("Location50796", "Resume Token does not contain version")
    version = r.value()
    if type(version) is not int:
        raise QueryError("Location50854", "Invalid resume token: wrong type for version")
    if version not in (0, 1, 2):
        raise QueryError("Location50795", "Invalid Resume Token: only supports version 0, 1 and 2")
    if version != VERSION:  # a token of an older mongod's format: none of ebbdb's
        raise _format_error(f"resume token version {version} is not one ebbdb writes")
    if not r.more():
        raise QueryError("Location51055", "Resume Token does not contain tokenType")
    token_type = r.value()
    if type(token_type) is not int:
        raise QueryError("Location51056", "Resume Token tokenType is not an int.")
    if token_type not in (EVENT_TOKEN, HIGH_WATER_MARK):
        raise QueryError("Location51057", f"Token type {token_type} not recognized")
    if not r.more():
        raise QueryError("Location50793", "Resume Token does not contain txnOpIndex")
    index = r.value()
    if type(index) is not int:
        raise QueryError("Location50855", "Resume Token txnOpIndex is not an integer")
    if index < 0:
        raise QueryError("Location50794", "Invalid Resume Token: txnOpIndex should be non-negative")
    if not r.more():
        raise QueryError("Location50872", "Resume Token does not contain fromInvalidate")
    from_invalidate = r.value()
    if not isinstance(from_invalidate, bool):
        raise QueryError("Location50870", "Resume Token fromInvalidate is not a boolean.")
    if not r.more():
        raise QueryError("Location6189500", "Expected UUID or null")
    uuid = r.value()
    if uuid is not None and not (isinstance(uuid, Binary) and len(uuid) == 16):
        raise QueryError("BadValue", "Invalid UUID in a resume token")
    event_id: Any = None
    if token_type == HIGH_WATER_MARK:
        if r.more() or index or from_invalidate or uuid is not None:
            raise QueryError("Location6189504", "Invalid high water mark token")
    else:
        if not r.more():
            raise QueryError(
                "Location6189501", "Expected an eventIdentifier for an event resume token"
            )
        event_id = r.value()
        if isinstance(event_id, Binary) and event_id.subtype == 0:
            try:
                event_id = bson.decode(bytes(event_id))
            except Exception:
                raise _format_error("a malformed event identifier") from None
        if not isinstance(event_id, dict):
            raise QueryError("Location6189503", "Resume Token eventIdentifier is not an object")
        if r.more():
            raise QueryError("Location40646", "invalid oversized resume token")
    if r.at != len(raw) - 1 or raw[r.at] != _END:
        raise _format_error("a resume token must end where its KeyString ends")
    return TokenData(cluster_time, token_type, index, from_invalidate, uuid, event_id)
