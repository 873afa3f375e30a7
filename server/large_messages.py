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
from ebbdb.storage.core.passes import decode_in_passes

T = TypeVar("T")
R = TypeVar("R")

#: A frame this large is parsed on a reader thread (a message of 100,000 documents took the
#: loop 100 ms to cut into documents).
LARGE_FRAME = 1 << 20
#: A body this large is decoded on a reader thread, a pass at a time.
LARGE_BODY = 256 * 1024
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
