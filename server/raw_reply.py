"""Replies too large to copy on the event loop. A cursor batch near 16 MB used to be copied whole
about eight times on the loop (the batch laid out, the cursor document, the reply, the frame, the
transport's own copies), each copy of fresh memory some 10 ms on this machine: one getMore held
every other client for over 100 ms. A large reply is instead kept as the list of its parts (the
stored documents and the few bytes between them) from the batch to the socket, and the connection
writes it a slice at a time as the socket drains (server/connection.py)."""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Iterator
from typing import Any

import bson

#: A reply this large or larger goes out in parts; smaller ones are joined at once (cheaper).
STREAM_BYTES = 1 << 20
#: What one write to the transport carries when a reply goes out in parts.
SLICE_BYTES = 256 * 1024
#: What one turn of the event loop writes of such a reply before the others get their turn.
TURN_BYTES = 2 * SLICE_BYTES

_INT32 = struct.Struct("<i")


class RawDoc:
    """Stored BSON that goes out unchanged: its bytes, or the parts they are made of (`parts`,
    `size` bytes in all, joined only if something asks for `raw`). pymongo's encoder copies the
    `raw` bytes of any object whose `_type_marker` is RawBSONDocument's (101); this class skips
    RawBSONDocument's own validation, which the stored bytes passed on the way in."""

    __slots__ = ("_raw", "batch", "parts", "size")
    _type_marker = 101

    def __init__(
        self,
        raw: bytes | None = None,
        parts: list[bytes] | None = None,
        batch: tuple[int, int] | None = None,
    ) -> None:
        self._raw = raw
        self.parts = parts
        self.size = len(raw) if raw is not None else sum(map(len, parts or ()))
        #: For a cursor document laid out by hand: (documents in its batch, its cursor id), what
        #: the slow-query log reports, known without reading (or joining) the bytes.
        self.batch = batch

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = b"".join(self.parts or ())
            self.parts = None
        return self._raw


def document_parts(fields: list[bytes], size: int) -> list[bytes]:
    """A BSON document of the element `fields` (`size` bytes in all), as parts."""
    return [_INT32.pack(size + 5), *fields, b"\x00"]


def encode_parts(reply: dict[str, Any], codec_options: Any) -> list[bytes] | None:
    """The reply document as parts when its cursor is a RawDoc held in parts (a batch of at least
    STREAM_BYTES: only cursor replies make them); None otherwise (encode it the ordinary way).
    Asked of every reply, so it looks at the one field first."""
    cursor = reply.get("cursor")
    if type(cursor) is not RawDoc or cursor.parts is None:
        return None
    elements: list[bytes] = []
    size = 0
    for key, value in reply.items():
        if type(value) is RawDoc and value.parts is not None:
            head = b"\x03" + key.encode() + b"\x00"
            elements.append(head)
            elements += value.parts
            size += len(head) + value.size
        else:
            element = bson.encode({key: value}, codec_options=codec_options)[4:-1]
            elements.append(element)
            size += len(element)
    return document_parts(elements, size)


def slices(parts: list[bytes]) -> Iterator[bytes]:
    """`parts` joined into writes of about SLICE_BYTES each (a slice ends with the part that
    takes it to SLICE_BYTES or past), one at a time as they are asked for (the connection asks
    when the socket takes more). The cuts are found at C speed (running sizes, bisection): a
    batch of 10,000 small documents is 20,000 parts."""
    ends = list(itertools.accumulate(map(len, parts)))
    start, total = 0, 0
    while start < len(parts):
        stop = bisect.bisect_left(ends, total + SLICE_BYTES, start) + 1
        yield b"".join(parts[start:stop])
        total = ends[min(stop, len(parts)) - 1]
        start = stop


_DOUBLE = struct.Struct("<d")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _ok(value: Any) -> bytes | None:
    """The `ok` element of a reply (a double, as every reply has it), or None."""
    return b"\x01ok\x00" + _DOUBLE.pack(value) if type(value) is float else None


def _int32(name: bytes, value: Any) -> bytes | None:
    """An int element as bson encodes an int that fits 32 bits, or None."""
    if type(value) is not int or not _INT32_MIN <= value <= _INT32_MAX:
        return None
    return b"\x10" + name + b"\x00" + _INT32.pack(value)


def small_body(reply: dict[str, Any]) -> bytes | None:
    """The BSON of the commonest replies, laid out here at a fraction of the encoder's cost: a
    find's first batch held as one RawDoc (`{cursor, ok}`), a write's acknowledgement (`{n, ok}`,
    `{n, nModified, ok}`) and `{ok}`; None for any other reply (encode it the ordinary way). The
    bytes are bson.encode's (tests/server/test_raw_reply.py holds them against it)."""
    size = len(reply)
    if size > 3 or "ok" not in reply:
        return None
    ok = _ok(reply["ok"])
    if ok is None:
        return None
    if size == 1:
        elements = [ok]
    else:
        first = next(iter(reply))
        if first == "cursor" and size == 2:
            cursor = reply["cursor"]
            if type(cursor) is not RawDoc or cursor.parts is not None:
                return None
            elements = [b"\x03cursor\x00", cursor.raw, ok]
        elif first == "n":
            n = _int32(b"n", reply["n"])
            if n is None:
                return None
            if size == 2:
                elements = [n, ok]
            else:
                if tuple(reply) != ("n", "nModified", "ok"):
                    return None
                modified = _int32(b"nModified", reply["nModified"])
                if modified is None:
                    return None
                elements = [n, modified, ok]
        else:
            return None
    length = 5 + sum(map(len, elements))
    return b"".join((_INT32.pack(length), *elements, b"\x00"))
