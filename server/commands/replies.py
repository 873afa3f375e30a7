"""Reply layouts several command modules share: the cursor reply (find, getMore, aggregate), whose
batch is the stored BSON laid out by hand rather than encoded document by document; and what a
cursor keeps of its command's time limit."""

from __future__ import annotations

import itertools
import struct
from typing import Any

from ebbdb.server.context import CommandContext
from ebbdb.server.raw_reply import STREAM_BYTES, RawDoc

#: BSON element headers of an array's items: type 3 (document) and the decimal index as name.
_ITEM_HEADS = [b"\x03%d\x00" % i for i in range(1024)]
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")


def _item_heads(n: int) -> list[bytes]:
    while len(_ITEM_HEADS) < n:
        _ITEM_HEADS.extend(b"\x03%d\x00" % i for i in range(len(_ITEM_HEADS), 2 * len(_ITEM_HEADS)))
    return _ITEM_HEADS


def cursor_reply(ns: str, cid: int, batch_field: str, docs: list[bytes]) -> dict[str, Any]:
    """A cursor reply whose batch is the stored BSON, laid out here rather than encoded document by
    document: the cursor document is {<batch_field>: [docs], id: <cid as a long>, ns: <ns>}. A batch
    of STREAM_BYTES or more stays in parts (server/raw_reply.py); a smaller one is joined once."""
    head = b"\x04" + batch_field.encode() + b"\x00"  # the batch: an array
    # One list from the start (the document's and the array's lengths filled in after): a batch
    # of thousands of documents is not copied from list to list on the way.
    parts = [b"", head, b""]
    if len(docs) == 1:
        parts += (b"\x030\x00", docs[0])  # a find_one's batch
    else:
        parts.extend(itertools.chain.from_iterable(zip(_item_heads(len(docs)), docs)))
    size = sum(map(len, itertools.islice(parts, 3, None)))
    nsb = ns.encode()
    tail = b"".join(
        (
            b"\x00",  # the batch array's end
            b"\x12id\x00",  # the id: an int64
            _INT64.pack(cid),
            b"\x02ns\x00",  # the namespace: a string
            _INT32.pack(len(nsb) + 1),
            nsb,
            b"\x00",  # the string's end
            b"\x00",  # the cursor document's end
        )
    )
    parts[2] = _INT32.pack(size + 5)
    parts[0] = _INT32.pack(4 + len(head) + 4 + size + len(tail))  # the whole document
    parts.append(tail)
    batch = (len(docs), cid)
    if size < STREAM_BYTES:
        return {"cursor": RawDoc(b"".join(parts), batch=batch), "ok": 1.0}
    return {"cursor": RawDoc(parts=parts, batch=batch), "ok": 1.0}


def listing_reply(ns: str, docs: list[bytes]) -> dict[str, Any]:
    """The reply of a listing command that answers in one batch (listCollections), its documents
    encoded already (off the event loop): {cursor: {id: 0, ns: <ns>, firstBatch: [docs]}}, in
    the order mongod gives these fields."""
    nsb = ns.encode()
    head = b"".join(
        (
            b"\x12id\x00",  # the id: an int64, 0 (no more batches)
            _INT64.pack(0),
            b"\x02ns\x00",  # the namespace: a string
            _INT32.pack(len(nsb) + 1),
            nsb,
            b"\x00",
            b"\x04firstBatch\x00",  # the batch: an array
        )
    )
    parts = [b"", head, b""]
    parts.extend(itertools.chain.from_iterable(zip(_item_heads(len(docs)), docs)))
    size = sum(map(len, itertools.islice(parts, 3, None)))
    parts[2] = _INT32.pack(size + 5)
    parts.append(b"\x00\x00")  # the batch array's end, the cursor document's end
    parts[0] = _INT32.pack(4 + len(head) + 4 + size + 2)
    batch = (len(docs), 0)
    if size < STREAM_BYTES:
        return {"cursor": RawDoc(b"".join(parts), batch=batch), "ok": 1.0}
    return {"cursor": RawDoc(parts=parts, batch=batch), "ok": 1.0}


#: Per namespace: what follows a one-document first batch's array in its reply (the cursor's id
#: 0 and `ns`, the cursor document's end, `ok: 1.0`, the reply's end), and the fixed bytes.
_FIRST_BATCH_TAILS: dict[str, tuple[bytes, int]] = {}
_FIRST_BATCH_TAILS_MAX = 1024
_FIRST_BATCH_HEAD = b"\x04firstBatch\x00"
_OK = b"\x01ok\x00" + struct.pack("<d", 1.0)


def first_batch_body(ns: str, doc: bytes | None) -> bytes | dict[str, Any]:
    """The encoded reply of a find whose whole result is `doc` (or nothing) and whose cursor is
    exhausted: the bytes of `cursor_reply(ns, 0, "firstBatch", ...)` encoded, laid out from a
    template kept per namespace (the express path's find by `_id`). A document of STREAM_BYTES
    or more gets cursor_reply's reply document (its parts are not joined on the event loop)."""
    if doc is not None and len(doc) >= STREAM_BYTES:
        return cursor_reply(ns, 0, "firstBatch", [doc])
    cached = _FIRST_BATCH_TAILS.get(ns)
    if cached is None:
        nsb = ns.encode()
        tail = b"".join(
            (
                b"\x12id\x00",
                _INT64.pack(0),
                b"\x02ns\x00",
                _INT32.pack(len(nsb) + 1),
                nsb,
                b"\x00\x00",  # the string's end, the cursor document's end
                _OK,
                b"\x00",  # the reply's end
            )
        )
        # The reply's length, its cursor element's head, the cursor's length and batch head.
        cached = (tail, 4 + 8 + 4 + len(_FIRST_BATCH_HEAD) + len(tail))
        if len(_FIRST_BATCH_TAILS) >= _FIRST_BATCH_TAILS_MAX:
            _FIRST_BATCH_TAILS.clear()
        _FIRST_BATCH_TAILS[ns] = cached
    tail, fixed = cached
    if doc is None:
        batch = b"\x05\x00\x00\x00\x00"
    else:
        batch = b"".join((_INT32.pack(len(doc) + 8), b"\x030\x00", doc, b"\x00"))
    size = fixed + len(batch)
    cursor_size = size - 4 - 8 - len(_OK) - 1
    return b"".join(
        (
            _INT32.pack(size),
            b"\x03cursor\x00",
            _INT32.pack(cursor_size),
            _FIRST_BATCH_HEAD,
            batch,
            tail,
        )
    )


def time_left(ctx: CommandContext) -> float | None:
    """What is left of the command's maxTimeMS, for its cursor's getMores (MongoDB counts a
    find's or an aggregate's time limit over the getMores too, not the time between them)."""
    return ctx.client.op.remaining() if ctx.client.op is not None else None
