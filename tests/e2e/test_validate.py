"""validate through pymongo: MongoDB 7.0's reply fields, order and types for an empty collection
and one with documents and several indexes (exact keys per index, multikey, sparse and TTL ones
included), full: true, metadata: true, pymongo's validate_collection helper, the reply for a
collection damaged underneath the server, and the errors (missing collection 26, unknown option
40415, wrong type 14, options that do not go together 72, repair 238)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from bson import Binary, Int64
from pymongo import ASCENDING, DESCENDING, MongoClient
from pymongo.errors import CollectionInvalid, OperationFailure

from ebbdb.server.embedded import ServerThread
from ebbdb.storage.expiry import ttl
from tests.storage.test_storage_validate import expiry_key, index_key, rid_of, tamper, value_of

Client = MongoClient[dict[str, Any]]

#: MongoDB 7.0's fields of a completed validate, in its order.
FIELDS = [
    "ns",
    "uuid",
    "nInvalidDocuments",
    "nNonCompliantDocuments",
    "nrecords",
    "nIndexes",
    "keysPerIndex",
    "indexDetails",
    "valid",
    "repaired",
    "warnings",
    "errors",
    "extraIndexEntries",
    "missingIndexEntries",
    "corruptRecords",
    "ok",
]
#: ... and of a metadata-only validate: the same without the record and index counts.
METADATA_FIELDS = ["ns", "uuid", *FIELDS[FIELDS.index("valid") :]]


def failure(fn: Callable[[], Any]) -> tuple[int, str]:
    with pytest.raises(OperationFailure) as info:
        fn()
    return int(info.value.code or 0), str(info.value.details and info.value.details["errmsg"])


def uuid_of(client: Client, name: str) -> Any:
    [entry] = client.db.list_collections(filter={"name": name})
    return entry["info"]["uuid"]


def test_an_empty_collection(client: Client) -> None:
    client.db.create_collection("empty")
    reply = client.db.command("validate", "empty")
    assert list(reply) == FIELDS
    assert reply == {
        "ns": "db.empty",
        "uuid": uuid_of(client, "empty"),
        "nInvalidDocuments": 0,
        "nNonCompliantDocuments": 0,
        "nrecords": 0,
        "nIndexes": 1,
        "keysPerIndex": {"_id_": 0},
        "indexDetails": {"_id_": {"valid": True}},
        "valid": True,
        "repaired": False,
        "warnings": [],
        "errors": [],
        "extraIndexEntries": [],
        "missingIndexEntries": [],
        "corruptRecords": [],
        "ok": 1.0,
    }
    assert isinstance(reply["uuid"], Binary) and reply["uuid"].subtype == 4
    for name in ("nInvalidDocuments", "nNonCompliantDocuments", "nrecords", "nIndexes"):
        assert type(reply[name]) is int, name
    assert type(reply["ok"]) is float


@pytest.fixture
def loaded(client: Client) -> Any:
    """Ten documents: a plain index, a multikey one (tags: two for even _ids, one for odd), a
    sparse one (s: six documents), a compound descending one, a native TTL index on a date
    (missing dates index as null) and a Cosmos `_ts` TTL index (its keys are one expiry entry
    per document)."""
    coll = client.db.c
    base = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    docs = []
    for i in range(10):
        doc: dict[str, Any] = {"_id": i, "a": i % 3}
        doc["tags"] = [f"t{i}", "all"] if i % 2 == 0 else f"t{i}"
        if i < 6:
            doc["s"] = f"s{i}"
        if i < 4:
            doc["at"] = base + datetime.timedelta(seconds=i)
        docs.append(doc)
    coll.insert_many(docs)
    coll.create_index("a")
    coll.create_index("tags")
    coll.create_index("s", sparse=True)
    coll.create_index([("a", DESCENDING), ("_id", ASCENDING)])
    coll.create_index("at", expireAfterSeconds=3600)
    coll.create_index("_ts", expireAfterSeconds=86_400)
    return coll


KEYS = {
    "_id_": 10,
    "a_1": 10,
    "tags_1": 15,
    "s_1": 6,
    "a_-1__id_1": 10,
    "at_1": 10,
    "_ts_1": 10,
}


@pytest.mark.parametrize("full", [False, True])
def test_documents_and_indexes(client: Client, loaded: Any, full: bool) -> None:
    reply = client.db.command("validate", "c", full=full)
    assert list(reply) == FIELDS
    assert reply["ns"] == "db.c"
    assert reply["uuid"] == uuid_of(client, "c")
    assert (reply["nrecords"], reply["nIndexes"], reply["nInvalidDocuments"]) == (10, 7, 0)
    assert reply["keysPerIndex"] == KEYS
    assert list(reply["keysPerIndex"]) == list(KEYS)  # the catalog's order
    assert all(type(n) is int for n in reply["keysPerIndex"].values())
    assert reply["indexDetails"] == {name: {"valid": True} for name in KEYS}
    assert reply["valid"] is True and reply["repaired"] is False
    assert reply["warnings"] == reply["errors"] == []
    assert reply["extraIndexEntries"] == reply["missingIndexEntries"] == []
    assert reply["corruptRecords"] == []


def test_counts_follow_writes(client: Client, loaded: Any) -> None:
    loaded.delete_one({"_id": 0})
    loaded.update_one({"_id": 1}, {"$set": {"tags": ["x", "y", "z"], "s": "new"}})
    reply = client.db.command("validate", "c", full=True)
    assert reply["valid"] is True
    assert reply["nrecords"] == 9
    # _id 0 had two tags and an s; _id 1 goes from one tag to three.
    fewer = {name: n - 1 for name, n in KEYS.items()}
    assert reply["keysPerIndex"] == {**fewer, "tags_1": 15, "s_1": 5}


def test_pymongos_helper(client: Client, loaded: Any) -> None:
    reply = client.db.validate_collection("c", full=True)
    assert reply["valid"] is True and reply["keysPerIndex"] == KEYS


def test_a_damaged_collection(client: Client, loaded: Any, server: ServerThread) -> None:
    """One a_1 entry and one expiry entry deleted underneath the server (tests/storage's helper)."""
    engine = server.app.engine
    rid4, rid0 = rid_of(engine, 4), rid_of(engine, 0)
    meta = ttl.read_meta(value_of(engine, 0))
    tamper(
        engine,
        delete=[
            ("index", index_key(engine, "a_1", (1,), rid4)),
            ("expiry", expiry_key(engine, "at_1", meta, rid0)),
        ],
    )
    reply = client.db.command("validate", "c")
    assert list(reply) == [*FIELDS[:-1], "advice", "ok"]
    assert reply["valid"] is False
    assert reply["keysPerIndex"] == {**KEYS, "a_1": 9}
    assert reply["indexDetails"]["a_1"] == {
        "valid": False,
        "errors": ["Index with name 'a_1' has inconsistencies."],
    }
    assert reply["indexDetails"]["at_1"]["valid"] is False
    assert reply["warnings"] == [
        "Detected 1 missing index entries.",
        "Detected 1 missing expiry entries.",
    ]
    assert reply["errors"] == [
        "Index with name 'a_1' has inconsistencies.",
        "Index with name 'at_1' has inconsistencies.",
    ]
    # In record order.
    assert reply["missingIndexEntries"] == [
        {
            "indexName": "at_1",
            "recordId": rid0,
            "idKey": {"_id": 0},
            "expiryEntry": {"kind": "date", "time": datetime.datetime(2030, 1, 1)},
        },
        {"indexName": "a_1", "recordId": rid4, "idKey": {"_id": 4}, "indexKey": {"a": 1}},
    ]
    assert type(reply["missingIndexEntries"][0]["recordId"]) is Int64
    assert reply["extraIndexEntries"] == reply["corruptRecords"] == []
    with pytest.raises(CollectionInvalid):
        client.db.validate_collection("c")


def test_metadata_only(client: Client, loaded: Any) -> None:
    reply = client.db.command("validate", "c", metadata=True)
    assert list(reply) == METADATA_FIELDS
    assert reply["valid"] is True


@pytest.mark.parametrize(
    "options", [{"background": True}, {"checkBSONConformance": True}, {"enforceFastCount": True}]
)
def test_options_that_only_change_how(client: Client, loaded: Any, options: dict[str, Any]) -> None:
    reply = client.db.command({"validate": "c", **options})
    assert reply["valid"] is True and reply["keysPerIndex"] == KEYS


def test_a_missing_collection(client: Client) -> None:
    assert failure(lambda: client.db.command("validate", "nope")) == (
        26,
        "Collection 'db.nope' does not exist to validate.",
    )
    client.db.c.insert_one({})
    assert failure(lambda: client.db.command("validate", "nope"))[0] == 26
    assert failure(lambda: client.other.command("validate", "c"))[0] == 26


def test_an_unknown_option(client: Client, loaded: Any) -> None:
    assert failure(lambda: client.db.command("validate", "c", bogus=1)) == (
        40415,
        "BSON field 'validate.bogus' is an unknown field.",
    )


def test_a_wrong_type(client: Client, loaded: Any) -> None:
    code, message = failure(lambda: client.db.command("validate", "c", full="yes"))
    assert code == 14
    assert message == (
        "BSON field 'validate.full' is the wrong type 'string', expected types "
        "'[bool, long, int, decimal, double]'"
    )
    assert client.db.command("validate", "c", full=1)["valid"] is True  # numbers are booleans


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"full": True, "background": True},
            "Running the validate command with both { background: true } and { full: true } "
            "is not supported.",
        ),
        (
            {"repair": True, "background": True},
            "Running the validate command with both { background: true } and { repair: true } "
            "is not supported.",
        ),
        (
            {"full": True, "checkBSONConformance": False},
            "Cannot explicitly set 'checkBSONConformance: false' with full validation set.",
        ),
        (
            {"metadata": True, "full": True},
            "Running the validate command with { metadata: true } is not supported with any "
            "other options",
        ),
    ],
)
def test_options_that_do_not_go_together(
    client: Client, loaded: Any, options: dict[str, Any], message: str
) -> None:
    assert failure(lambda: client.db.command({"validate": "c", **options})) == (72, message)


def test_repair_is_refused(client: Client, loaded: Any) -> None:
    code, message = failure(lambda: client.db.command("validate", "c", repair=True))
    assert code == 238 and "repair" in message
