"""Order-preserving byte encoding of BSON values: comparing two encodings with memcmp gives the same
answer as storage.query.compare.compare on the values. Index entries are built from it.

Every encoding is prefix-free, so a component can be bit-inverted for a descending key and still sort
in exact reverse, and components can be concatenated for compound keys.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import math
import re
import struct
from typing import Any

from bson import Binary, Code, DBRef, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.values import regex_flags
from ebbdb.storage.query import compare as cmp

_DOUBLE = struct.Struct(">d")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_SIGN = 1 << 63
_MASK64 = (1 << 64) - 1

# Type bytes: canonical rank + 2 so that 0x00 stays free as the end marker of objects and arrays.
_END = b"\x00"


def _type_byte(r: int) -> bytes:
    return bytes((r + 2,))


_T = {
    r: _type_byte(r)
    for r in (
        cmp.RANK_MINKEY,
        cmp.RANK_UNDEFINED,
        cmp.RANK_NULL,
        cmp.RANK_NUMBER,
        cmp.RANK_STRING,
        cmp.RANK_OBJECT,
        cmp.RANK_ARRAY,
        cmp.RANK_BINDATA,
        cmp.RANK_OBJECTID,
        cmp.RANK_BOOL,
        cmp.RANK_DATE,
        cmp.RANK_TIMESTAMP,
        cmp.RANK_REGEX,
        cmp.RANK_CODE,
        cmp.RANK_CODEWSCOPE,
        cmp.RANK_MAXKEY,
    )
}


def _double_bits(d: float) -> bytes:
    bits = _U64.unpack(_DOUBLE.pack(d + 0.0))[0]  # + 0.0 folds -0.0 into 0.0
    return _U64.pack(bits ^ _MASK64 if bits & _SIGN else bits | _SIGN)


def _escape(b: bytes) -> bytes:
    # NUL becomes 00 FF and the string ends with 00 00, keeping binary order and prefix-freedom.
    return b.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


_NAN = b"\x01"
_FINITE = b"\x02"
_ZERO_TIE = _double_bits(0.0)


def _number_body(value: Any) -> bytes:
    """A double's bits, then a tie-breaker for int64 and Decimal128 values the double rounds."""
    if cmp.is_nan(value):
        return _NAN
    exact = cmp.number_value(value)
    approx = float(exact)
    if type(exact) is float or math.isinf(approx):
        return _FINITE + _double_bits(approx) + _ZERO_TIE
    # int64 values differ from their double by at most 2**10, exactly representable; Decimal128's
    # remainder is kept to double precision (enough to tell apart all but 33-34 digit neighbours).
    if isinstance(exact, int):
        tie = float(exact - int(approx))
    else:
        assert isinstance(exact, decimal.Decimal)
        tie = float(exact - decimal.Decimal(approx))
    return _FINITE + _double_bits(approx) + _double_bits(tie)


_NUMBER_FINITE = _T[cmp.RANK_NUMBER] + _FINITE
_STRING_T = _T[cmp.RANK_STRING]
_OBJECTID_T = _T[cmp.RANK_OBJECTID]
_DATE_T = _T[cmp.RANK_DATE]
#: Integers of at most this magnitude are exact doubles: their tie-breaker is zero.
_EXACT_INT = 1 << 53


def encode(value: Any) -> bytes:
    """The ascending key encoding of one BSON value, type byte included."""
    # The usual key types first, with the bytes the general path below gives them.
    tp = type(value)
    if tp is int and -_EXACT_INT <= value <= _EXACT_INT:
        return _NUMBER_FINITE + _double_bits(float(value)) + _ZERO_TIE
    if tp is float and value == value:  # not NaN
        return _NUMBER_FINITE + _double_bits(value) + _ZERO_TIE
    if tp is str:
        return _STRING_T + _escape(value.encode("utf-8", "surrogatepass"))
    if tp is ObjectId:
        return _OBJECTID_T + bytes(value.binary)
    if tp is datetime.datetime:
        return _DATE_T + _U64.pack((cmp.date_ms(value) + _SIGN) & _MASK64)
    if tp is DatetimeMS:  # how storage decodes a date (CODEC): a TTL index's key
        return _DATE_T + _U64.pack((int(value) + _SIGN) & _MASK64)
    r = cmp.rank(value)
    t = _T[r]
    if r == cmp.RANK_NUMBER:
        return t + _number_body(value)
    if r == cmp.RANK_STRING:
        return t + _escape(value.encode("utf-8", "surrogatepass"))
    if r == cmp.RANK_OBJECTID:
        return t + bytes(value.binary)
    if r == cmp.RANK_DATE:
        return t + _U64.pack((cmp.date_ms(value) + _SIGN) & _MASK64)
    if r == cmp.RANK_BOOL:
        return t + (b"\x01" if value else b"\x00")
    if r == cmp.RANK_OBJECT:
        items = value.as_doc().items() if type(value) is DBRef else value.items()
        parts = [t]
        for k, v in items:
            ev = encode(v)
            parts += [ev[:1], _escape(k.encode("utf-8", "surrogatepass")), ev[1:]]
        parts.append(_END)
        return b"".join(parts)
    if r == cmp.RANK_ARRAY:
        return t + b"".join(encode(v) for v in value) + _END
    if r == cmp.RANK_BINDATA:
        subtype = value.subtype if type(value) is Binary else 0
        return t + _U32.pack(len(value)) + bytes((subtype,)) + bytes(value)
    if r == cmp.RANK_TIMESTAMP:
        ts: Timestamp = value
        return t + _U32.pack(ts.time) + _U32.pack(ts.inc)
    if r == cmp.RANK_REGEX:
        rx = Regex.from_native(value) if isinstance(value, re.Pattern) else value
        return t + _escape(rx.pattern.encode()) + _escape(regex_flags(rx.flags).encode())
    if r == cmp.RANK_CODE:
        return t + _escape(str(value).encode())
    if r == cmp.RANK_CODEWSCOPE:
        code: Code = value
        return t + _escape(str(code).encode()) + encode(dict(code.scope or {}))
    return t  # null, undefined, MinKey, MaxKey


def encode_descending(value: Any) -> bytes:
    """Bitwise complement of the ascending encoding: sorts in exactly the reverse order."""
    return bytes(b ^ 0xFF for b in encode(value))


def encode_compound(values: tuple[Any, ...], directions: tuple[int, ...]) -> bytes:
    return b"".join(
        encode(v) if d >= 0 else encode_descending(v) for v, d in zip(values, directions)
    )


#: LMDB's default maximum key size.
MAX_KEY = 511
_HASH_LEN = 16


#: Room kept for a suffix (a record id) whether or not one is given, so that a unique index's key
#: (no suffix) and a non-unique index's key (record id suffix) shorten a body the same way.
SUFFIX_ROOM = 8


def fit(prefix: bytes, body: bytes, suffix: bytes = b"") -> tuple[bytes, bool]:
    """Join a key and shorten it to fit LMDB. Returns (key, truncated). `suffix` is at most
    SUFFIX_ROOM bytes; whether the body is shortened does not depend on it.

    A body too long keeps its leading bytes and appends a hash of the whole body, so equal values
    still collide (unique checks work) and unequal ones don't. Order among long keys that share the
    kept prefix is by hash, so readers of truncated keys must re-check and re-sort.
    """
    if len(prefix) + len(body) + SUFFIX_ROOM <= MAX_KEY:
        return prefix + body + suffix, False
    keep = MAX_KEY - len(prefix) - SUFFIX_ROOM - _HASH_LEN - 1
    digest = hashlib.blake2b(body, digest_size=_HASH_LEN).digest()
    return prefix + body[:keep] + b"\xff" + digest + suffix, True


#: How many bytes of a key body an index entry keeps before shortening (8-byte index id prefix).
BODY_KEEP = MAX_KEY - 8 - SUFFIX_ROOM - _HASH_LEN - 1


def type_byte(value: Any) -> int:
    """The first byte of a value's ascending encoding (its type bracket)."""
    return _T[cmp.rank(value)][0]


def successor(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with `prefix` (None: none)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


# -- decoding (for reports: validate shows the values of entries it cannot match) ---------------

_B_MINKEY = _T[cmp.RANK_MINKEY][0]
_B_UNDEFINED = _T[cmp.RANK_UNDEFINED][0]
_B_NULL = _T[cmp.RANK_NULL][0]
_B_NUMBER = _T[cmp.RANK_NUMBER][0]
_B_STRING = _T[cmp.RANK_STRING][0]
_B_OBJECT = _T[cmp.RANK_OBJECT][0]
_B_ARRAY = _T[cmp.RANK_ARRAY][0]
_B_BINDATA = _T[cmp.RANK_BINDATA][0]
_B_OBJECTID = _T[cmp.RANK_OBJECTID][0]
_B_BOOL = _T[cmp.RANK_BOOL][0]
_B_DATE = _T[cmp.RANK_DATE][0]
_B_TIMESTAMP = _T[cmp.RANK_TIMESTAMP][0]
_B_REGEX = _T[cmp.RANK_REGEX][0]
_B_CODE = _T[cmp.RANK_CODE][0]
_B_CODEWSCOPE = _T[cmp.RANK_CODEWSCOPE][0]
_B_MAXKEY = _T[cmp.RANK_MAXKEY][0]
_CONSTANTS: dict[int, Any] = {
    _B_MINKEY: MinKey(),
    _B_UNDEFINED: cmp.UNDEFINED,
    _B_NULL: None,
    _B_MAXKEY: MaxKey(),
}


def decode(buf: bytes, i: int = 0) -> tuple[Any, int]:
    """The value whose ascending encoding starts at `buf[i]`, and the index past it: the inverse
    of `encode` (numbers come back as int or float; a Decimal128 that its double rounds cannot be
    told apart, so it raises). Raises ValueError for bytes no value encodes to."""
    try:
        return _decode_body(buf[i], buf, i + 1)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a key encoding: {exc}") from None


def _decode_body(t: int, buf: bytes, i: int) -> tuple[Any, int]:
    if t in _CONSTANTS:
        return _CONSTANTS[t], i
    if t == _B_NUMBER:
        return _decode_number(buf, i)
    if t == _B_STRING:
        raw, i = _unescape(buf, i)
        return raw.decode("utf-8", "surrogatepass"), i
    if t == _B_OBJECTID:
        return ObjectId(buf[i : i + 12]), _need(buf, i + 12)
    if t == _B_BOOL:
        return buf[i] == 1, i + 1
    if t == _B_DATE:
        return DatetimeMS(_U64.unpack_from(buf, i)[0] - _SIGN), i + 8
    if t == _B_TIMESTAMP:
        return Timestamp(_U32.unpack_from(buf, i)[0], _U32.unpack_from(buf, i + 4)[0]), i + 8
    if t == _B_BINDATA:
        n = _U32.unpack_from(buf, i)[0]
        subtype = buf[i + 4]
        return Binary(buf[i + 5 : i + 5 + n], subtype), _need(buf, i + 5 + n)
    if t == _B_OBJECT:
        doc: dict[str, Any] = {}
        while buf[i] != 0:
            et = buf[i]
            name, i = _unescape(buf, i + 1)
            doc[name.decode("utf-8", "surrogatepass")], i = _decode_body(et, buf, i)
        return doc, i + 1
    if t == _B_ARRAY:
        items: list[Any] = []
        while buf[i] != 0:
            item, i = decode(buf, i)
            items.append(item)
        return items, i + 1
    if t == _B_REGEX:
        pattern, i = _unescape(buf, i)
        flags, i = _unescape(buf, i)
        return Regex(pattern.decode(), flags.decode()), i
    if t == _B_CODE:
        code, i = _unescape(buf, i)
        return Code(code.decode()), i
    if t == _B_CODEWSCOPE:
        code, i = _unescape(buf, i)
        scope, i = decode(buf, i)
        return Code(code.decode(), scope), i
    raise ValueError(f"unknown key type byte {t}")


def _decode_number(buf: bytes, i: int) -> tuple[Any, int]:
    if buf[i] == 1:
        return math.nan, i + 1
    approx, tie = _double(buf, i + 1), _double(buf, i + 9)
    end = _need(buf, i + 17)
    if tie == 0 and math.isfinite(approx) and approx.is_integer() and abs(approx) < 2.0**63:
        return int(approx), end
    if tie == 0:
        return approx, end
    if tie.is_integer():
        return int(approx) + int(tie), end  # an int64 its double rounds
    raise ValueError("a Decimal128 key")  # shown as bytes


def _double(buf: bytes, i: int) -> float:
    bits = _U64.unpack_from(buf, i)[0]
    bits = bits ^ _SIGN if bits & _SIGN else bits ^ _MASK64
    return float(_DOUBLE.unpack(_U64.pack(bits))[0])


def _unescape(buf: bytes, i: int) -> tuple[bytes, int]:
    """An escaped string (storage/indexes/keys.py: NUL is 00 FF, the end is 00 00)."""
    out = bytearray()
    while True:
        j = buf.index(b"\x00", i)
        out += buf[i:j]
        if buf[j + 1] == 0:
            return bytes(out), j + 2
        if buf[j + 1] != 0xFF:
            raise ValueError("bad escape")
        out += b"\x00"
        i = j + 2


def _need(buf: bytes, end: int) -> int:
    if end > len(buf):
        raise ValueError("key body ends early")
    return end
