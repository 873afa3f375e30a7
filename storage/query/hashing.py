"""MongoDB's hash of a BSON value (BSONElementHasher::hash64, seed 0), bit for bit: what a
`hashed` index holds and what `$toHashedIndexKey` returns. MD5 over the value's canonical type and
contents, numbers folded to 64-bit integers so equal numbers of different types hash alike."""

from __future__ import annotations

import decimal
import hashlib
import math
import struct
from typing import Any

import bson
from bson import Decimal128, Int64
from bson.binary import UuidRepresentation
from bson.raw_bson import RawBSONDocument

from ebbdb.storage.query.compare import UNDEFINED
from ebbdb.storage.query.paths import MISSING

_ENCODE: bson.CodecOptions[dict[str, Any]] = bson.CodecOptions(
    uuid_representation=UuidRepresentation.STANDARD
)

# MongoDB's canonical type numbers (canonicalizeBSONType), by BSON type byte: the hash starts
# with the value's, so equal numbers of different types hash alike and types never collide.
_CANONICAL = {
    0x01: 10,  # double
    0x10: 10,  # int32
    0x12: 10,  # int64
    0x13: 10,  # decimal128
    0x02: 15,  # string
    0x0E: 15,  # symbol
    0x03: 20,  # object
    0x04: 25,  # array
    0x05: 30,  # binData
    0x06: 0,  # undefined
    0x07: 35,  # objectId
    0x08: 40,  # bool
    0x09: 45,  # date
    0x0A: 5,  # null
    0x0B: 50,  # regex
    0x0C: 55,  # dbPointer
    0x0D: 60,  # code
    0x0F: 65,  # code with scope
    0x11: 47,  # timestamp
    0xFF: -1,  # minKey
    0x7F: 127,  # maxKey
}
_NUMBERS = frozenset({0x01, 0x10, 0x12, 0x13})
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_EOO = _I32.pack(0)  # the end of an embedded document: canonical type 0, no name, no value
_SEED = _I32.pack(0)  # the default hash seed
_MIN, _MAX = -(2**63), 2**63 - 1
_RAW: bson.CodecOptions[RawBSONDocument] = bson.CodecOptions(document_class=RawBSONDocument)


def _double_long(d: float) -> int:
    """safeNumberLongForHash on a double: NaN is 0, out-of-range values saturate, except 2^63
    itself, which older servers wrapped to -2^63 (kept for compatibility); the rest truncate."""
    if math.isnan(d):
        return 0
    if d == 2.0**63:
        return _MIN
    if d > 2.0**63:
        return _MAX
    if d < -(2.0**63):
        return _MIN
    return int(d)


def _decimal_long(d: decimal.Decimal) -> int:
    """safeNumberLong on a Decimal128: NaN is 0, saturating, else rounded half to even (not
    truncated, unlike a double)."""
    if d.is_nan():
        return 0
    if d > _MAX:
        return _MAX
    if d < _MIN:
        return _MIN
    return int(d.to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def _number_long(value: Any) -> int:
    t = type(value)
    if t is float:
        return _double_long(value)
    if t is Decimal128:
        return _decimal_long(value.to_decimal())
    return int(value)


def _feed(md5: Any, value: Any, name: bytes | None) -> None:
    """MongoDB's recursive element hash: canonical type, the field name inside documents, then
    a number as a 64-bit integer, the elements of a document or array, or the value's raw bytes."""
    if value is UNDEFINED:
        md5.update(_I32.pack(0))
        if name is not None:
            md5.update(name)
        return
    raw = bson.encode({"": value}, codec_options=_ENCODE)
    type_byte, body = raw[4], raw[6:-1]
    md5.update(_I32.pack(_CANONICAL[type_byte]))
    if name is not None:
        md5.update(name)
    if type_byte in _NUMBERS:
        md5.update(_I64.pack(_number_long(value)))
    elif type_byte in (0x03, 0x04):
        for key, item in bson.decode(body, _RAW).items():
            _feed(md5, item, key.encode("utf-8", "surrogatepass") + b"\x00")
        md5.update(_EOO)
    elif type_byte == 0x0F:
        # Code with scope: the code string's bytes (with its NUL), then the scope's elements.
        code_len = _I32.unpack_from(body, 4)[0]
        md5.update(body[8 : 8 + code_len])
        for key, item in bson.decode(body[8 + code_len :], _RAW).items():
            _feed(md5, item, key.encode("utf-8", "surrogatepass") + b"\x00")
        md5.update(_EOO)
    else:
        md5.update(body)


def hash_value(value: Any) -> Int64:
    """A value's hashed-index key: the first 8 bytes (little-endian) of the MD5 of its canonical
    type and contents, as mongod's BSONElementHasher::hash64 with seed 0 computes it. Missing
    hashes as null."""
    md5 = hashlib.md5(_SEED, usedforsecurity=False)
    _feed(md5, None if value is MISSING else value, None)
    return Int64(_I64.unpack(md5.digest()[:8])[0])


def point_hashes(value: Any) -> list[Int64]:
    """The hashes under which a document equal to `value` may be indexed. A number equals
    numbers of other types that the hash folds to other integers (a double truncates, a decimal
    rounds half to even: 1.5 hashes as 1 from a double and as 2 from a decimal), so a fractional
    number may have two."""
    t = type(value)
    if t is float or t is Decimal128:
        exact = decimal.Decimal(value) if t is float else value.to_decimal()
        candidates = {_number_long(value)}
        if exact.is_finite():
            candidates.add(_decimal_long(exact))
            if abs(exact) < 2**63:
                candidates.add(int(exact))  # as a double would truncate it
        return [_hash_long(n) for n in sorted(candidates)]
    return [hash_value(value)]


def _hash_long(n: int) -> Int64:
    md5 = hashlib.md5(_SEED + _I32.pack(10) + _I64.pack(n), usedforsecurity=False)
    return Int64(_I64.unpack(md5.digest()[:8])[0])
