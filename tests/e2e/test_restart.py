"""Data outlives the server process: stop a real server, start another on the same data directory,
and read back the same bytes. Also: one data directory serves one server at a time."""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import bson
import pytest
from bson import SON, Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient
from pymongo.errors import DuplicateKeyError

from ebbdb.server.embedded import ServerThread

StartServer = Callable[..., ServerThread]

RAW = CodecOptions(document_class=RawBSONDocument)

DOCS: list[dict[str, Any]] = [
    {"_id": 1, "int": 42, "long": Int64(2**40), "neg_long": Int64(-(2**62))},
    {"_id": 2, "dec": Decimal128(Decimal("1234567890.123456789")), "nan": Decimal128("NaN")},
    {
        "_id": 3,
        "when": datetime.datetime(2024, 2, 29, 23, 59, 59, 999000),
        "epoch": datetime.datetime(1970, 1, 1),
        "before_epoch": datetime.datetime(1901, 12, 13, 20, 45, 52),
    },
    {"_id": 4, "uuid": Binary.from_uuid(uuid.UUID("12345678-1234-5678-1234-567812345678"))},
    {"_id": 5, "bin": Binary(b"\x00\x01\xfe\xff", 0), "user_bin": Binary(b"xyz", 128)},
    {"_id": 6, "re": Regex("^ab.*c$", "im"), "re2": Regex("a/b", "")},
    {"_id": 7, "nested": {"a": {"b": {"c": [1, {"d": "deep"}]}}, "empty": {}}},
    {"_id": 8, "arr": [1, "two", 3.0, None, True, [4, [5]], {"six": 6}], "empty_arr": []},
    {
        "_id": "string id",
        "double": 1.5,
        "inf": float("inf"),
        "neg_zero": -0.0,
        "unicode": "héllo ✓",
    },
    {"_id": ObjectId("64b7f0c2a1b2c3d4e5f60718"), "bool": False, "null": None},
    {"_id": 9, "ts": Timestamp(1700000000, 7), "min": MinKey(), "max": MaxKey(), "code": Code("x")},
    {"_id": 10, "big": "x" * 100_000, "many": list(range(2000))},
]


def _raw_by_id(client: MongoClient[dict[str, Any]], db: str, coll: str) -> dict[bytes, bytes]:
    """Every stored document's exact bytes, keyed by the encoded _id (ids of mixed types)."""
    raw_coll = client[db][coll].with_options(codec_options=RAW)
    out = {}
    for doc in raw_coll.find():
        out[bson.encode({"_id": doc["_id"]})] = doc.raw
    return out


def _client(srv: ServerThread) -> MongoClient[dict[str, Any]]:
    return MongoClient(srv.uri, serverSelectionTimeoutMS=5000, uuidRepresentation="standard")


def test_documents_survive_restart_byte_for_byte(start_server: StartServer, dbpath: str) -> None:
    first = start_server()
    with _client(first) as client:
        client.keep.things.insert_many(DOCS)
        # A document whose _id the client did not put first: the stored bytes have _id first.
        client.keep.command("insert", "things", documents=[SON([("z", 1), ("_id", 11)])])
        client.keep.other.insert_one({"_id": 1, "in": "other collection"})
        client.elsewhere.c.insert_one({"_id": 1})
        before = _raw_by_id(client, "keep", "things")
    assert len(before) == len(DOCS) + 1
    for doc in DOCS:
        # What went in is what is stored: insert_many sent exactly these bytes.
        assert before[bson.encode({"_id": doc["_id"]})] == bson.encode(doc)
    first.stop()

    second = start_server(path=dbpath)
    with _client(second) as client:
        after = _raw_by_id(client, "keep", "things")
        assert after == before
        assert bson.decode(after[bson.encode({"_id": 11})]) == {"_id": 11, "z": 1}
        assert list(bson.decode(after[bson.encode({"_id": 11})])) == ["_id", "z"]
        assert client.keep.other.find_one() == {"_id": 1, "in": "other collection"}
        assert sorted(client.keep.list_collection_names()) == ["other", "things"]
        assert {"keep", "elsewhere"} <= set(client.list_database_names())


def test_decoded_values_survive_restart(start_server: StartServer, dbpath: str) -> None:
    first = start_server()
    with _client(first) as client:
        client.keep.types.insert_many(DOCS)
    first.stop()

    second = start_server(path=dbpath)
    with _client(second) as client:
        coll = client.keep.types
        uuid_doc = coll.find_one({"_id": 4})
        assert uuid_doc is not None
        assert uuid_doc["uuid"] == uuid.UUID("12345678-1234-5678-1234-567812345678")
        as_binary = CodecOptions(uuid_representation=UuidRepresentation.UNSPECIFIED)
        raw = coll.with_options(codec_options=as_binary).find_one({"_id": 4})
        assert raw is not None
        assert raw["uuid"].subtype == 4
        long_doc = coll.find_one({"_id": 1})
        assert long_doc is not None
        assert isinstance(long_doc["long"], Int64)
        assert long_doc["long"] == 2**40
        dec_doc = coll.find_one({"_id": 2})
        assert dec_doc is not None
        assert dec_doc["dec"] == Decimal128(Decimal("1234567890.123456789"))
        re_doc = coll.find_one({"_id": 6})
        assert re_doc is not None
        assert re_doc["re"] == Regex("^ab.*c$", "im")
        # Queries still work against reloaded data, including dotted paths into nested documents.
        assert [d["_id"] for d in coll.find({"nested.a.b.c": 1})] == [7]
        assert [d["_id"] for d in coll.find({"arr": "two"})] == [8]
        assert coll.find_one({"_id": "string id"}, {"_id": 0, "unicode": 1}) == {
            "unicode": "héllo ✓"
        }


def test_id_index_survives_restart(start_server: StartServer, dbpath: str) -> None:
    first = start_server()
    with _client(first) as client:
        client.keep.c.insert_many([{"_id": i} for i in range(300)])
    first.stop()

    second = start_server(path=dbpath)
    with _client(second) as client:
        coll = client.keep.c
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"_id": 150})
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"_id": 150.0})
        coll.insert_one({"_id": 300})
        assert [d["_id"] for d in coll.find().sort("_id", -1).batch_size(50)] == list(
            range(300, -1, -1)
        )
        assert coll.find_one({"_id": 299}) == {"_id": 299}


def test_drops_survive_restart(start_server: StartServer, dbpath: str) -> None:
    first = start_server()
    with _client(first) as client:
        client.keep.dropped.insert_one({"x": 1})
        client.keep.kept.insert_one({"x": 1})
        client.gone_db.c.insert_one({"x": 1})
        client.keep.drop_collection("dropped")
        client.drop_database("gone_db")
    first.stop()

    second = start_server(path=dbpath)
    with _client(second) as client:
        assert client.keep.list_collection_names() == ["kept"]
        assert "gone_db" not in client.list_database_names()
        assert client.keep.dropped.find_one() is None


def test_several_restarts_accumulate(start_server: StartServer, dbpath: str) -> None:
    for round_ in range(3):
        srv = start_server(path=dbpath)
        with _client(srv) as client:
            client.keep.log.insert_one({"_id": round_})
            assert [d["_id"] for d in client.keep.log.find().sort("_id", 1)] == list(
                range(round_ + 1)
            )
        srv.stop()


def test_second_server_on_the_same_dbpath_is_refused(
    start_server: StartServer, dbpath: str
) -> None:
    first = start_server()
    with pytest.raises(Exception) as info:
        ServerThread(dbpath).start()
    message = str(info.value)
    assert re.search(r"data directory", message, re.IGNORECASE), message
    assert re.search(r"in use|using it|already running|lock", message, re.IGNORECASE), message
    assert dbpath in message
    # The running server is undisturbed.
    with _client(first) as client:
        client.keep.c.insert_one({"_id": 1})
        assert client.keep.c.find_one() == {"_id": 1}


def test_dbpath_is_free_again_after_stop(start_server: StartServer, dbpath: str) -> None:
    first = start_server()
    first.stop()
    second = start_server(path=dbpath)
    with _client(second) as client:
        assert client.admin.command("ping")["ok"] == 1.0
