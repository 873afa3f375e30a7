"""Reply layouts several command modules share: the cursor reply (find, getMore, aggregate), whose
batch is the stored BSON laid out by hand rather than encoded document by document; and what a
cursor keeps of its command's time limit."""

from __future__ import annotations

import itertools
import struct
from typing import Any

from ebbdb.server.context import CommandContext


class RawDoc:
    """Stored BSON that goes out unchanged. pymongo's encoder copies the bytes of any object whose
    `_type_marker` is RawBSONDocument's (101); this class skips RawBSONDocument's own validation,
    which the stored bytes passed on the way in."""

    __slots__ = ("raw",)
    _type_marker = 101

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


#: BSON element headers of an array's items: type 3 (document) and the decimal index as name.
_ITEM_HEADS = [b"\x03%d\x00" % i for i in range(1024)]
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")


def _item_heads(n: int) -> list[bytes]:
    while len(_ITEM_HEADS) < n:
        _ITEM_HEADS.extend(b"\x03%d\x00" % i for i in range(len(_ITEM_HEADS), 2 * len(_ITEM_HEADS)))
    return _ITEM_HEADS


def cursor_reply(ns: str, cid: int, batch_field: str, docs: list[bytes]) -> dict[str, Any]:
    """A cursor reply whose batch is the stored BSON, copied once into the reply (the batch's
    array is laid out here, not encoded document by document): the cursor document is
    {<batch_field>: [docs], id: <cid as a long>, ns: <ns>}."""
    if len(docs) == 1:
        body = b"\x030\x00" + docs[0]  # a find_one's batch
    else:
        body = b"".join(itertools.chain.from_iterable(zip(_item_heads(len(docs)), docs)))
    nsb = ns.encode()
    cursor = b"".join(
        (
            b"\x04",  # the batch: an array
            batch_field.encode(),
            b"\x00",
            _INT32.pack(len(body) + 5),
            body,
            b"\x00\x12id\x00",  # the id: an int64
            _INT64.pack(cid),
            b"\x02ns\x00",  # the namespace: a string
            _INT32.pack(len(nsb) + 1),
            nsb,
            b"\x00",
        )
    )
    return {"cursor": RawDoc(_INT32.pack(len(cursor) + 5) + cursor + b"\x00"), "ok": 1.0}


def time_left(ctx: CommandContext) -> float | None:
    """What is left of the command's maxTimeMS, for its cursor's getMores (MongoDB counts a
    find's or an aggregate's time limit over the getMores too, not the time between them)."""
    return ctx.client.op.remaining() if ctx.client.op is not None else None
