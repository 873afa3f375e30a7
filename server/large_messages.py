"""Requests and replies too large to handle in one go on the event loop. One C-level BSON call
holds the interpreter lock for as long as it runs, whatever thread makes it: decoding a body of
500,000 cursor ids took 115 ms, encoding 50,000 writeErrors as long. So a large frame is parsed,
and a large body decoded, on a reader thread, its large arrays and documents a pass of
PASS_BYTES at a time (the event loop gets the lock between passes); a reply whose lists may be
long (a LargeReply) is encoded PASS_ITEMS items at a time on the loop, which serves other
clients between passes, and goes out in parts (server/raw_reply.py)."""

from __future__ import annotations

import asyncio
import gc
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import bson

from ebbdb.protocol import Msg, Query, decode_message
from ebbdb.server.gateway import Gateway
from ebbdb.server.raw_reply import document_parts
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.limits import check_bson_depth

T = TypeVar("T")
R = TypeVar("R")

#: A frame this large is parsed on a reader thread (a message of 100,000 documents took the
#: loop 100 ms to cut into documents).
LARGE_FRAME = 1 << 20
#: A body this large is decoded on a reader thread, a pass at a time.
LARGE_BODY = 256 * 1024
#: What one pass decodes: BSON elements of about this many bytes.
PASS_BYTES = 64 * 1024
#: What one pass on the loop encodes or computes: this many items (of an array, of a list).
PASS_ITEMS = 512
#: The loop is given back once a run of passes has held it this long.
TURN_SECONDS = 0.002

_INT32 = struct.Struct("<i")


class LargeReply(dict[str, Any]):
    """A reply whose lists may be long (writeErrors, killCursors' ids): the dispatcher encodes
    it with `encode_large`, a pass at a time, rather than in one C call."""


class EncodedDocs(list[bytes]):
    """A LargeReply's array of documents encoded already (as BSON bytes): 50,000 write errors
    held as dicts were 150,000 objects for every garbage collection to walk (a full one, in the
    middle of the request, held the interpreter for 100 ms and more); bytes are not walked."""


# -- garbage collection ------------------------------------------------------------------------

#: Large requests in progress (see defer_full_collections).
_deferring = 0
#: The collector's third threshold while none is (Python's, or what the process set).
_full_threshold = gc.get_threshold()[2]


def defer_full_collections(start: bool) -> None:
    """While a large request runs (`start` True when it begins, False when it ends; called on
    the loop thread), no full collection starts: its 500,000 decoded cursor ids or 50,000
    failed documents are not garbage, yet each full collection walked them all (and the 10,000
    collections of a catalog) holding the interpreter for 15 to 250 ms, every thread waiting.
    Young generations are still collected; what ends up in the old one waits for the next full
    collection once no large request runs."""
    global _deferring, _full_threshold
    first, second, third = gc.get_threshold()
    if start:
        if _deferring == 0:
            _full_threshold = third
            gc.set_threshold(first, second, 1 << 30)
        _deferring += 1
    else:
        _deferring -= 1
        if _deferring == 0:
            gc.set_threshold(first, second, _full_threshold)


# -- requests ----------------------------------------------------------------------------------


async def parse_frame(gateway: Gateway, frame: bytes) -> Msg | Query:
    """decode_message for a frame of LARGE_FRAME bytes or more, on a reader thread (it raises
    what decode_message raises)."""
    return await gateway.read(decode_message, frame)


async def decode_body(gateway: Gateway, body: bytes) -> tuple[dict[str, Any], int | None]:
    """`body` decoded as bson.decode(body, CODEC) does (and raising what it raises), on a reader
    thread a pass at a time, with its nesting depth checked there too. Returns the document and
    the size the dispatcher's own depth check is to go by: 0 once checked (too short to need a
    look), the body's size when the check failed (the dispatcher reports the failure)."""

    def decode() -> tuple[dict[str, Any], int | None]:
        doc = decode_in_passes(body)
        try:
            check_bson_depth(doc)
        except Exception:
            return doc, len(body)
        return doc, 0

    return await gateway.read(decode)


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


# -- replies -----------------------------------------------------------------------------------


async def mapped(items: Sequence[T], fn: Callable[[T], R]) -> list[R]:
    """[fn(item) for item in items], PASS_ITEMS at a time, giving the loop back between passes
    once a run of them has held it TURN_SECONDS."""
    out: list[R] = []
    turn = time.perf_counter()
    for i in range(0, len(items), PASS_ITEMS):
        out += map(fn, items[i : i + PASS_ITEMS])
        if time.perf_counter() - turn > TURN_SECONDS:
            await asyncio.sleep(0)
            turn = time.perf_counter()
    return out


async def encoded(items: Sequence[T], fn: Callable[[T], dict[str, Any]]) -> EncodedDocs:
    """The documents fn(item) for each item, encoded, a pass at a time (see `mapped`)."""
    encode = bson.encode
    return EncodedDocs(await mapped(items, lambda item: encode(fn(item), codec_options=CODEC)))


async def encode_large(reply: dict[str, Any]) -> list[bytes]:
    """The BSON of `reply` (as bson.encode(reply, codec_options=CODEC) gives it), as parts: each
    list of more than PASS_ITEMS items is encoded PASS_ITEMS at a time, the loop given back
    between passes."""
    elements: list[bytes] = []
    size = 0
    turn = time.perf_counter()
    for key, value in reply.items():
        if type(value) is not EncodedDocs and (type(value) is not list or len(value) <= PASS_ITEMS):
            element = bson.encode({key: value}, codec_options=CODEC)[4:-1]
            elements.append(element)
            size += len(element)
            continue
        items: list[bytes] = []
        length = 0
        laid_out = type(value) is EncodedDocs
        for i in range(0, len(value), PASS_ITEMS):
            if laid_out:
                chunk = value[i : i + PASS_ITEMS]
                pass_bytes = b"".join(b"\x03%d\x00%s" % (n, doc) for n, doc in enumerate(chunk, i))
            else:
                named = {str(n): v for n, v in enumerate(value[i : i + PASS_ITEMS], i)}
                pass_bytes = bson.encode(named, codec_options=CODEC)[4:-1]
            items.append(pass_bytes)
            length += len(pass_bytes)
            if time.perf_counter() - turn > TURN_SECONDS:
                await asyncio.sleep(0)
                turn = time.perf_counter()
        head = b"\x04" + key.encode() + b"\x00"
        elements += (head, _INT32.pack(length + 5), *items, b"\x00")
        size += len(head) + length + 5
    return document_parts(elements, size)
