"""The cursor reply is laid out by hand from the stored bytes: it must be exactly the BSON that
encoding the same document would give, whatever the batch."""

from __future__ import annotations

import bson
import pytest
from bson import Int64

from ebbdb.server.commands.replies import cursor_reply
from ebbdb.storage.documents import CODEC


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
