"""server/large_messages.py: the pass-wise decoder and encoder give exactly what one bson call
gives (values, order, bytes, errors); the slow-query log's command of 500,000 values is what
rendering it whole gave."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import bson
import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS
from bson.dbref import DBRef

from ebbdb.server.large_messages import PASS_ITEMS, encode_large, encoded
from ebbdb.server.profiler import loggable_command
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.passes import PASS_BYTES, decode_in_passes
from ebbdb.storage.core.values import render

VALUES: list[Any] = [
    1,
    2.5,
    "s",
    None,
    True,
    Int64(5),
    ObjectId(),
    Decimal128("1.5"),
    Regex("a", "i"),
    Binary(b"xx", 0),
    Binary(b"u" * 16, 4),
    Code("f"),
    Code("g", {"a": 1}),
    MinKey(),
    MaxKey(),
    Timestamp(1, 2),
    DatetimeMS(5),
    {"a": [1, {"b": 2}]},
    [],
    {},
    DBRef("c", 1),
    b"bytes",
]


def _some(n: int, seed: int) -> list[Any]:
    rnd = random.Random(seed)
    return [rnd.choice(VALUES) for _ in range(n)]


DOCUMENTS: list[dict[str, Any]] = [
    {"killCursors": "c", "cursors": [Int64(i) for i in range(100_000)], "$db": "x"},
    {
        "a": _some(50_000, 1),
        "b": {"c": _some(30_000, 2), "d": {f"k{i}": v for i, v in enumerate(_some(20_000, 3))}},
    },
    {"f": {"_id": {"$in": _some(40_000, 4)}}, "big": "x" * (4 * PASS_BYTES)},
    {"d": {"$ref": "c", "$id": 1, "pad": "x" * (2 * PASS_BYTES)}},
    {"deep": [[[_some(30_000, 5)]]]},
]


@pytest.mark.parametrize("doc", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_decode_in_passes_is_bson_decode(doc: dict[str, Any]) -> None:
    raw = bson.encode(doc, codec_options=CODEC)
    got = decode_in_passes(raw)
    want = bson.decode(raw, CODEC)
    assert repr(got) == repr(want)
    assert bson.encode(got, codec_options=CODEC) == raw


def test_decode_in_passes_raises_what_bson_raises() -> None:
    raw = bson.encode(DOCUMENTS[0])
    for bad in (raw[:-1], raw + b"x", raw[:-2] + b"\x13\x00"):
        with pytest.raises(Exception) as want:
            bson.decode(bad, CODEC)
        with pytest.raises(Exception) as got:
            decode_in_passes(bad)
        assert repr(got.value) == repr(want.value)


@pytest.mark.parametrize("doc", DOCUMENTS[:3], ids=range(3))
def test_encode_large_is_bson_encode(doc: dict[str, Any]) -> None:
    parts = asyncio.run(encode_large(doc))
    assert b"".join(parts) == bson.encode(doc, codec_options=CODEC)


def test_encoded_documents_lay_out_as_an_array() -> None:
    docs = [{"index": i, "code": 11000, "keyValue": {"_id": i}} for i in range(3 * PASS_ITEMS)]

    async def reply() -> bytes:
        value = await encoded(docs, lambda d: d)
        return b"".join(await encode_large({"n": 1, "writeErrors": value, "ok": 1.0}))

    assert asyncio.run(reply()) == bson.encode(
        {"n": 1, "writeErrors": docs, "ok": 1.0}, codec_options=CODEC
    )


@pytest.mark.parametrize("items", [10, 3_000, 500_000])
def test_logged_command_of_many_values_is_the_whole_rendering_cut(items: int) -> None:
    limit = 10 * 1024
    body = {"killCursors": "c", "cursors": [Int64(i) for i in range(items)], "$db": "x"}
    size = len(bson.encode(body, codec_options=CODEC))
    text = render(body)
    want = body if size <= limit else {"$truncated": text[: limit - 3] + "..."}
    assert loggable_command(body, limit) == want
