"""The cursor reply is laid out by hand from the stored bytes: it must be exactly the BSON that
encoding the same document would give, whatever the batch."""

from __future__ import annotations

from typing import Any

import bson
import pytest
from bson import Int64

from ebbdb.server.commands.replies import cursor_reply, first_batch_body
from ebbdb.server.raw_reply import SLICE_BYTES, STREAM_BYTES, encode_parts, slices, small_body
from ebbdb.storage.core.documents import CODEC


@pytest.mark.parametrize("n", [0, 1, 2, 11, 1500])
@pytest.mark.parametrize("cid", [0, 1, 2**63 - 1])
@pytest.mark.parametrize(("ns", "field"), [("db.c", "firstBatch"), ("dé.ç€.x", "nextBatch")])
def test_cursor_reply_is_the_encoded_cursor_document(n: int, cid: int, ns: str, field: str) -> None:
    docs = [bson.encode({"_id": i, "s": "x" * (i % 7)}) for i in range(n)]
    reply = cursor_reply(ns, cid, field, docs)
    assert reply["ok"] == 1.0
    expected = {field: [bson.decode(d) for d in docs], "id": Int64(cid), "ns": ns}
    assert reply["cursor"].raw == bson.encode(expected, codec_options=CODEC)
    whole = bson.decode(bson.encode(reply, codec_options=CODEC), CODEC)
    assert whole == {"cursor": expected, "ok": 1.0}


@pytest.mark.parametrize("n", [1, 2, 1500])
def test_a_large_batch_stays_in_parts_that_make_the_same_reply(n: int) -> None:
    """A batch of STREAM_BYTES or more is kept as parts (never joined on the event loop); the
    parts, the reply's encoding in parts and its slices all give exactly the bytes of the whole."""
    pad = "p" * (STREAM_BYTES // n + 1)
    docs = [bson.encode({"_id": i, "pad": pad}) for i in range(n)]
    reply = cursor_reply("db.c", 7, "nextBatch", docs)
    cursor = reply["cursor"]
    assert cursor.parts is not None
    parts = encode_parts({**reply, "note": "after"}, CODEC)
    assert parts is not None
    whole = bson.encode({**reply, "note": "after"}, codec_options=CODEC)  # joins `raw`
    assert b"".join(parts) == whole
    pieces = list(slices(parts))
    assert b"".join(pieces) == whole
    assert all(len(p) < SLICE_BYTES + len(max(parts, key=len)) for p in pieces)
    assert bson.decode(whole, CODEC)["cursor"]["nextBatch"] == [bson.decode(d) for d in docs]


def test_a_small_batch_is_joined_at_once() -> None:
    reply = cursor_reply("db.c", 0, "firstBatch", [bson.encode({"_id": 1})])
    assert reply["cursor"].parts is None
    assert encode_parts(reply, CODEC) is None


@pytest.mark.parametrize(
    "reply",
    [
        {"ok": 1.0},
        {"ok": 0.0},
        {"n": 0, "ok": 1.0},
        {"n": 1, "ok": 1.0},
        {"n": -(2**31), "ok": 1.0},
        {"n": 2**31 - 1, "nModified": 0, "ok": 1.0},
        {"n": 1, "nModified": 1, "ok": 1.0},
        {"cursor": "raw", "ok": 1.0},
    ],
)
def test_small_replies_are_the_encoders_bytes(reply: dict[str, Any]) -> None:
    if reply.get("cursor") == "raw":
        reply = cursor_reply("db.c", 0, "firstBatch", [bson.encode({"_id": 1, "a": "b"})])
    assert small_body(reply) == bson.encode(reply, codec_options=CODEC)


@pytest.mark.parametrize(
    "reply",
    [
        {"n": 2**31, "ok": 1.0},  # an int64
        {"n": True, "ok": 1.0},
        {"n": Int64(1), "ok": 1.0},
        {"n": 1, "ok": 1},  # an int ok
        {"ok": 1.0, "n": 1},
        {"n": 1, "ok": 1.0, "nModified": 1},
        {"n": 1, "nModified": 1, "ok": 1.0, "writeErrors": []},
        {"n": 1, "writeErrors": [], "ok": 1.0},
        {"cursor": {"id": 0}, "ok": 1.0},
        {"ok": 1.0, "cursor": {"id": 0}},
        {"errmsg": "x", "ok": 0.0},
    ],
)
def test_other_replies_are_left_to_the_encoder(reply: dict[str, Any]) -> None:
    assert small_body(reply) is None


@pytest.mark.parametrize("ns", ["db.c", "dé.ç€.x", "d." + "n" * 200])
@pytest.mark.parametrize("n", [0, 1])
def test_a_first_batch_body_is_the_encoded_cursor_reply(ns: str, n: int) -> None:
    doc = bson.encode({"_id": 1, "s": "x" * 10}) if n else None
    for _ in range(2):  # the template made, then kept
        expected = bson.encode(
            cursor_reply(ns, 0, "firstBatch", [doc] if doc else []), codec_options=CODEC
        )
        assert first_batch_body(ns, doc) == expected


def test_a_large_first_batch_stays_a_reply_document() -> None:
    doc = bson.encode({"_id": 1, "pad": "p" * STREAM_BYTES})
    reply = first_batch_body("db.c", doc)
    assert isinstance(reply, dict) and reply["cursor"].parts is not None
