"""BSON decoded a pass at a time: what bson.decode returns, its large documents and arrays cut into
C calls of about PASS_BYTES each, so that a thread decoding a large document lets the others
(the event loop) run between passes. The request path (server/large_messages.py) and the
aggregation source (storage/aggregate/source.py) decode their large documents this way."""

from __future__ import annotations

import struct
from typing import Any

import bson

from ebbdb.storage.core.documents import CODEC

#: What one pass decodes: BSON elements of about this many bytes.
PASS_BYTES = 64 * 1024

_INT32 = struct.Struct("<i")


class _Irregular(Exception):
    """The BSON is not laid out as the pass-wise decoder expects: decoded whole instead."""


#: The size of a value of each fixed-size BSON type.
_FIXED = {
    0x01: 8,  # double
    0x06: 0,  # undefined
    0x07: 12,  # ObjectId
    0x08: 1,  # bool
    0x09: 8,  # datetime
    0x0A: 0,  # null
    0x10: 4,  # int32
    0x11: 8,  # timestamp
    0x12: 8,  # int64
    0x13: 16,  # decimal128
    0x7F: 0,  # MaxKey
    0xFF: 0,  # MinKey
}
#: Types whose value starts with its own int32 length: (that length's extra bytes).
_PREFIXED = {
    0x02: 4,  # string: length, then that many bytes
    0x0D: 4,  # code
    0x0E: 4,  # symbol
    0x05: 5,  # binary: length, subtype, then that many bytes
    0x03: 0,  # document: the length counts itself
    0x04: 0,  # array
    0x0F: 0,  # code with scope
}


def decode_in_passes(data: bytes) -> dict[str, Any]:
    """What bson.decode(data, CODEC) returns, with every document or array of more than
    PASS_BYTES decoded PASS_BYTES of elements at a time: each pass is one short C call, and a
    thread doing this lets others run between passes. Any BSON not as expected (invalid, or a
    large document holding `$ref`, which decodes to a DBRef) is decoded whole, so that what is
    raised is what bson.decode raises."""
    try:
        doc = _container(data, 0, False)
    except (_Irregular, IndexError, ValueError, struct.error):
        return bson.decode(data, CODEC)
    assert isinstance(doc, dict)
    return doc


def _container(data: bytes, pos: int, is_array: bool) -> dict[str, Any] | list[Any]:
    size = _INT32.unpack_from(data, pos)[0]
    end = pos + size
    if size < 5 or end > len(data) or data[end - 1] != 0:
        raise _Irregular
    if pos == 0 and end != len(data):
        raise _Irregular  # trailing bytes: bson.decode's own error
    out: dict[str, Any] | list[Any] = [] if is_array else {}
    p = pos + 4
    start = p  # the first element not decoded yet
    last = end - 1
    while p < last:
        kind = data[p]
        nul = data.index(b"\x00", p + 1, last)
        if not is_array and data[p + 1 : nul] == b"$ref":
            raise _Irregular
        v = nul + 1
        fixed = _FIXED.get(kind)
        if fixed is not None:
            nxt = v + fixed
        elif kind in _PREFIXED:
            length = _INT32.unpack_from(data, v)[0]
            if length < 0:
                raise _Irregular
            nxt = v + length + _PREFIXED[kind]
            if (kind == 0x03 or kind == 0x04) and length > PASS_BYTES:
                _flush(data, start, p, out)
                value = _container(data, v, kind == 0x04)
                if isinstance(out, list):
                    out.append(value)
                else:
                    out[data[p + 1 : nul].decode()] = value
                start = p = nxt
                continue
        elif kind == 0x0B:  # regex: pattern and options, two C strings
            nxt = data.index(b"\x00", data.index(b"\x00", v, last) + 1, last) + 1
        elif kind == 0x0C:  # DBPointer: a string, then an ObjectId
            nxt = v + 4 + _INT32.unpack_from(data, v)[0] + 12
        else:
            raise _Irregular
        if nxt > last:
            raise _Irregular
        p = nxt
        if p - start >= PASS_BYTES:
            _flush(data, start, p, out)
            start = p
    if p != last:
        raise _Irregular
    _flush(data, start, p, out)
    return out


def _flush(data: bytes, start: int, stop: int, out: dict[str, Any] | list[Any]) -> None:
    """Decode the elements data[start:stop] into `out` (a document's, or an array's items)."""
    if stop <= start:
        return
    elements = data[start:stop]
    if isinstance(out, list):
        # Wrapped as an array, so that the items' names are ignored as bson.decode ignores them.
        inner = _INT32.pack(len(elements) + 5) + elements + b"\x00"
        wrapped = _INT32.pack(len(inner) + 8) + b"\x04a\x00" + inner + b"\x00"
        out.extend(bson.decode(wrapped, CODEC)["a"])
    else:
        out.update(bson.decode(_INT32.pack(len(elements) + 5) + elements + b"\x00", CODEC))


__all__ = ["PASS_BYTES", "decode_in_passes"]
