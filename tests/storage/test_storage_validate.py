"""validate's check (storage/engine/validate.py) on an engine with plain, multikey, unique sparse,
compound, long-key and TTL indexes (a native one on a date and a Cosmos `_ts` one): a consistent
collection is valid; each kind of damage made underneath the engine (an index entry or an expiry
entry gone or stray, an entry naming the wrong record, a document or a header rewritten, the kept
count wrong, a record that is not BSON) is found, counted and named. The e2e validate tests reuse
`tamper`, the one helper that writes LMDB underneath the engine."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any

import bson
import pytest
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.errors import NamespaceNotFound
from ebbdb.storage.engine import validate as validate_module
from ebbdb.storage.engine.store import CODEC, Engine
from ebbdb.storage.engine.validate import ValidateResult, validate_collection, validate_metadata
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.specs import parse_index_spec

DB = "db"
T0 = 1_700_000_000_000
U64 = struct.Struct(">Q")
LONG = "x" * 800
N = 10
INDEXES: list[dict[str, Any]] = [
    {"key": {"a": 1}, "name": "a_1"},
    {"key": {"tags": 1}, "name": "tags_1"},
    {"key": {"s": 1}, "name": "s_1", "unique": True, "sparse": True},
    {"key": {"a": -1, "_id": 1}, "name": "a_-1__id_1"},
    {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 3600},
    {"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 600},
    {"key": {"long": 1}, "name": "long_1"},
]
#: Entries per index of the documents below. tags: two for even _ids, one for odd; s: _ids 0-5;
#: _ts_1 has no key entries, its keys are its expiry entries (one per document).
KEYS = {
    "_id_": N,
    "a_1": N,
    "tags_1": 15,
    "s_1": 6,
    "a_-1__id_1": N,
    "at_1": N,
    "_ts_1": N,
    "long_1": N,
}


def document(i: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_id": i,
        "a": i % 4,
        "tags": [f"t{i}", "all"] if i % 2 == 0 else f"t{i}",
    }
    if i < 6:
        doc["s"] = f"s{i}"
    if i < 7:
        doc["at"] = DatetimeMS(T0 + 1000 * i)  # expiry entries under at_1 for _ids 0-6
    if i == 3:
        doc["ttl"] = 100  # its own Cosmos time to live: an "expiresAt" entry under _ts_1
    if i == 4:
        doc["long"] = LONG  # a key too long for LMDB: stored shortened
    return doc


@pytest.fixture
def engine(engine: Engine) -> Engine:
    engine.insert(DB, "c", [bson.encode(document(i)) for i in range(N)], now_ms=T0)
    engine.create_indexes(DB, "c", [parse_index_spec(s) for s in INDEXES])
    return engine


# -- helpers ---------------------------------------------------------------------------------------


def tamper(
    engine: Engine,
    delete: Sequence[tuple[str, bytes]] = (),
    put: Sequence[tuple[str, bytes, bytes]] = (),
) -> None:
    """THE one place that changes LMDB underneath the engine: deletes (sub-database, key), then
    puts (sub-database, key, value), in one write transaction. The engine attributes it uses are
    private and may be renamed: keep every use of them here."""
    env = engine.env
    dbs = {"records": env.records, "index": env.index, "expiry": env.expiry, "stats": env.stats}
    with env.env.begin(write=True) as txn:
        for db, key in delete:
            assert txn.delete(key, db=dbs[db]), (db, key)
        for db, key, value in put:
            txn.put(key, value, db=dbs[db])


def coll(engine: Engine, name: str = "c") -> CollectionInfo:
    info = engine.collection(DB, name)
    assert info is not None
    return info


def stored(engine: Engine) -> Iterator[tuple[int, bytes]]:
    with engine.read() as r:
        yield from list(r.scan(coll(engine)))


def rid_of(engine: Engine, _id: int) -> int:
    for rid, value in stored(engine):
        if bson.decode(ttl.body(value), CODEC)["_id"] == _id:
            return rid
    raise KeyError(_id)


def value_of(engine: Engine, _id: int) -> bytes:
    with engine.read() as r:
        value = r.record(coll(engine), rid_of(engine, _id))
    assert value is not None
    return value


def record_key(engine: Engine, rid: int) -> bytes:
    return U64.pack(coll(engine).id) + U64.pack(rid)


def index_key(engine: Engine, index: str, values: tuple[Any, ...], rid: int) -> bytes:
    """The entry key `values` make in an index, for record `rid`."""
    ix = coll(engine).index_named(index)
    assert ix is not None
    body = keys.encode_compound(values, ix.directions)
    suffix = b"" if ix.unique else U64.pack(rid)
    return keys.fit(U64.pack(ix.id), body, suffix)[0]


def expiry_key(engine: Engine, index: str, meta: ttl.RecordMeta, rid: int) -> bytes:
    """The expiry entry a record with this header has under one TTL index."""
    ix = coll(engine).index_named(index)
    assert ix is not None
    [key] = [
        k for k in ttl.expiry_keys(coll(engine), meta, U64.pack(rid)) if k[:8] == U64.pack(ix.id)
    ]
    return key


def run(engine: Engine, full: bool = False, **kw: Any) -> ValidateResult:
    return validate_collection(engine, coll(engine), full, **kw)


def key_counts(result: ValidateResult) -> dict[str, int]:
    return {ix.name: ix.keys for ix in result.indexes}


def invalid_indexes(result: ValidateResult) -> dict[str, tuple[str, ...]]:
    return {ix.name: ix.errors for ix in result.indexes if not ix.valid}


def inconsistencies(result: ValidateResult) -> tuple[list[Any], list[Any]]:
    """(missing, extra) as (index, record id, key or expiry kind, _id) tuples."""

    def row(e: validate_module.Inconsistency) -> tuple[Any, ...]:
        what = e.expiry if e.expiry is not None else e.key
        return (e.index, e.record_id, what, e.doc_id if e.has_doc_id else "-")

    return [row(e) for e in result.missing], [row(e) for e in result.extra]


def inconsistent(*names: str) -> tuple[str, ...]:
    return tuple(f"Index with name '{n}' has inconsistencies." for n in names)


# -- consistent collections ------------------------------------------------------------------------


@pytest.mark.parametrize("full", [False, True])
def test_a_consistent_collection_is_valid(engine: Engine, full: bool) -> None:
    result = run(engine, full)
    assert result.valid
    assert (result.ns, result.records, result.invalid_documents) == ("db.c", N, 0)
    assert result.uuid == coll(engine).uuid
    assert key_counts(result) == KEYS
    assert (result.warnings, result.errors, result.missing, result.extra) == ((), (), (), ())
    assert result.corrupt_records == ()


def test_an_empty_collection_is_valid(engine: Engine) -> None:
    engine.create_collection(DB, "empty")
    result = validate_collection(engine, coll(engine, "empty"), True)
    assert result.valid and result.records == 0
    assert key_counts(result) == {"_id_": 0}


def test_writes_keep_it_valid(engine: Engine) -> None:
    """A delete, a replacement and an expiry purge keep entries and counts in step."""
    rid1, rid2 = rid_of(engine, 1), rid_of(engine, 2)

    def change(view: Any) -> None:
        view.delete(rid1, view.get(rid1))
        value = view.get(rid2)
        doc = {**document(2), "a": [7, 8], "at": DatetimeMS(T0 - 5), "ttl": 1}
        view.replace(rid2, value, bson.encode(doc), doc)

    engine.modify(DB, "c", change, now_ms=T0 + 1)
    assert run(engine, True).valid
    assert engine.purge_expired(DB, "c", T0 + 2000, 100) == 1  # _id 2: its own ttl of 1 s
    result = run(engine, True)
    assert result.valid, result
    assert result.records == N - 2


def test_metadata_only(engine: Engine) -> None:
    result = validate_metadata(coll(engine))
    assert result.valid and result.records is None and result.indexes == ()


def test_a_collection_dropped_before_the_check(engine: Engine) -> None:
    info = coll(engine)
    engine.drop_collection(DB, "c")
    with pytest.raises(NamespaceNotFound, match="Collection 'db.c' does not exist to validate."):
        validate_collection(engine, info, False)


# -- index entries ---------------------------------------------------------------------------------


def test_a_missing_index_entry(engine: Engine) -> None:
    rid = rid_of(engine, 5)
    tamper(engine, delete=[("index", index_key(engine, "a_1", (1,), rid))])
    result = run(engine)
    assert not result.valid
    assert key_counts(result) == {**KEYS, "a_1": N - 1}
    assert result.warnings == ("Detected 1 missing index entries.",)
    assert result.errors == inconsistent("a_1")
    assert invalid_indexes(result) == {"a_1": inconsistent("a_1")}
    assert inconsistencies(result) == ([("a_1", rid, (("a", 1),), 5)], [])


def test_a_missing_multikey_entry(engine: Engine) -> None:
    rid = rid_of(engine, 4)
    tamper(engine, delete=[("index", index_key(engine, "tags_1", ("all",), rid))])
    result = run(engine)
    assert key_counts(result)["tags_1"] == 14
    assert inconsistencies(result) == ([("tags_1", rid, (("tags", "all"),), 4)], [])
    assert invalid_indexes(result) == {"tags_1": inconsistent("tags_1")}


def test_a_stray_index_entry(engine: Engine) -> None:
    stray = index_key(engine, "a_-1__id_1", (7, 99), 99)
    tamper(engine, put=[("index", stray, U64.pack(99))])
    result = run(engine)
    assert not result.valid
    assert key_counts(result) == {**KEYS, "a_-1__id_1": N + 1}
    assert result.warnings == ("Detected 1 extra index entries.",)
    assert result.errors == inconsistent("a_-1__id_1")
    assert inconsistencies(result) == ([], [("a_-1__id_1", 99, (("a", 7), ("_id", 99)), "-")])


def test_an_entry_naming_another_record(engine: Engine) -> None:
    """A unique entry that names the wrong record: the right one lacks it, the entry is extra."""
    rid2, rid3 = rid_of(engine, 2), rid_of(engine, 3)
    tamper(engine, put=[("index", index_key(engine, "s_1", ("s2",), rid2), U64.pack(rid3))])
    result = run(engine)
    assert key_counts(result) == KEYS
    assert result.warnings == (
        "Detected 1 missing index entries.",
        "Detected 1 extra index entries.",
    )
    assert inconsistencies(result) == (
        [("s_1", rid2, (("s", "s2"),), 2)],
        [("s_1", rid3, (("s", "s2"),), "-")],
    )


def test_a_rewritten_document(engine: Engine) -> None:
    """A document changed under its entries: its new keys are missing, its old ones extra."""
    rid = rid_of(engine, 6)
    value = value_of(engine, 6)
    doc = {**document(6), "a": 99}
    rewritten = value[: ttl.body_offset(value)] + bson.encode(doc)
    tamper(engine, put=[("records", record_key(engine, rid), rewritten)])
    result = run(engine)
    assert not result.valid
    assert result.errors == inconsistent("a_1", "a_-1__id_1")
    missing, extra = inconsistencies(result)
    assert missing == [
        ("a_1", rid, (("a", 99),), 6),
        ("a_-1__id_1", rid, (("a", 99), ("_id", 6)), 6),
    ]
    assert extra == [
        ("a_1", rid, (("a", 2),), "-"),
        ("a_-1__id_1", rid, (("a", 2), ("_id", 6)), "-"),
    ]
    assert result.warnings == (
        "Detected 2 missing index entries.",
        "Detected 2 extra index entries.",
    )


def test_long_keys(engine: Engine) -> None:
    """A key too long for LMDB is stored shortened (with a hash): missing and stray ones are found;
    a stray one cannot be read back, so its bytes are shown."""
    rid = rid_of(engine, 4)
    tamper(engine, delete=[("index", index_key(engine, "long_1", (LONG + "",), rid))])
    result = run(engine)
    assert inconsistencies(result) == ([("long_1", rid, (("long", LONG),), 4)], [])

    stray = index_key(engine, "long_1", ("y" * 900,), rid)
    tamper(engine, put=[("index", stray, U64.pack(rid))])
    result = run(engine)
    [extra] = result.extra
    assert (extra.index, extra.record_id, extra.key) == ("long_1", rid, None)
    assert extra.key_bytes == stray[8:-8]


# -- expiry entries --------------------------------------------------------------------------------


def test_a_missing_native_expiry_entry(engine: Engine) -> None:
    rid = rid_of(engine, 2)
    meta = ttl.read_meta(value_of(engine, 2))
    tamper(engine, delete=[("expiry", expiry_key(engine, "at_1", meta, rid))])
    result = run(engine)
    assert not result.valid
    assert key_counts(result) == KEYS  # at_1's key entries are all there
    assert result.warnings == ("Detected 1 missing expiry entries.",)
    assert result.errors == inconsistent("at_1")
    assert inconsistencies(result) == ([("at_1", rid, "date", 2)], [])
    assert result.missing[0].expiry_ms == T0 + 2000


def test_a_missing_cosmos_expiry_entry(engine: Engine) -> None:
    rid = rid_of(engine, 3)
    meta = ttl.read_meta(value_of(engine, 3))
    tamper(engine, delete=[("expiry", expiry_key(engine, "_ts_1", meta, rid))])
    result = run(engine)
    assert key_counts(result) == {**KEYS, "_ts_1": N - 1}
    assert result.errors == inconsistent("_ts_1")
    assert inconsistencies(result) == ([("_ts_1", rid, "expiresAt", 3)], [])
    assert result.missing[0].expiry_ms == T0 + 100_000


def test_stray_expiry_entries(engine: Engine) -> None:
    """One for a document without a date, one more for a document that has its own already."""
    rid8, rid1 = rid_of(engine, 8), rid_of(engine, 1)
    at_id = coll(engine).index_named("at_1").id  # type: ignore[union-attr]
    fake = ttl.RecordMeta(T0, 0, ((at_id, T0 + 5),))
    put = [
        ("expiry", expiry_key(engine, "at_1", fake, rid8), b""),
        ("expiry", expiry_key(engine, "at_1", fake, rid1), b""),
    ]
    tamper(engine, put=put)
    result = run(engine)
    assert not result.valid
    assert result.warnings == ("Detected 2 extra expiry entries.",)
    assert result.errors == inconsistent("at_1")
    assert sorted(inconsistencies(result)[1]) == sorted(
        [("at_1", rid8, "date", "-"), ("at_1", rid1, "date", "-")]
    )


def test_a_rewritten_header(engine: Engine) -> None:
    """A header whose expiry date is not its document's: its entries follow the header, so they
    are missing and extra; `full` also compares the header with the document."""
    rid = rid_of(engine, 2)
    value = value_of(engine, 2)
    meta = ttl.read_meta(value)
    at_id = coll(engine).index_named("at_1").id  # type: ignore[union-attr]
    wrong = ttl.RecordMeta(meta.modified, meta.ttl, ((at_id, T0 + 7),))
    assert len(wrong.pack()) == ttl.body_offset(value)
    tamper(engine, put=[("records", record_key(engine, rid), wrong.pack() + ttl.body(value))])
    result = run(engine)
    assert result.warnings == (
        "Detected 1 missing expiry entries.",
        "Detected 1 extra expiry entries.",
    )
    assert inconsistencies(result) == ([("at_1", rid, "date", 2)], [("at_1", rid, "date", "-")])
    assert result.corrupt_records == ()

    full = run(engine, True)
    assert full.corrupt_records == (rid,)
    assert invalid_indexes(full) == {
        "at_1": (
            *inconsistent("at_1"),
            "The expiry date kept in the header of 1 document for index 'at_1' is not the one "
            f"the document gives (first: RecordId {rid}: header {T0 + 7}, document {T0 + 2000})",
        )
    }


def test_a_header_ttl_not_the_documents_shows_with_full(engine: Engine) -> None:
    rid = rid_of(engine, 5)
    value = value_of(engine, 5)
    doc = {**document(5), "ttl": 50}
    tamper(
        engine,
        put=[
            ("records", record_key(engine, rid), value[: ttl.body_offset(value)] + bson.encode(doc))
        ],
    )
    assert run(engine).errors == ()  # its entries follow the header, which is unchanged
    result = run(engine, True)
    assert not result.valid
    assert result.errors == (
        "The ttl kept in the header of 1 document is not the one the document gives "
        f"(first: RecordId {rid}: header 0, document 50)",
    )
    assert result.corrupt_records == (rid,)


# -- statistics and unreadable records -------------------------------------------------------------


def test_the_kept_count_must_match_the_records(engine: Engine) -> None:
    with engine.read() as r:
        count, size = r.stats(coll(engine))
    tamper(
        engine, put=[("stats", U64.pack(coll(engine).id), struct.pack(">qq", count + 2, size + 3))]
    )
    result = run(engine)
    count_message = (
        f"fast count ({count + 2}) does not match number of records ({N}) for collection 'db.c'"
    )
    size_message = (
        f"data size ({size + 3}) does not match the size of the documents ({size}) for "
        "collection 'db.c'"
    )
    # MongoDB corrects a wrong count quietly unless asked to enforce it; a read only tells.
    assert result.valid
    assert result.warnings == (count_message, size_message)
    enforced = run(engine, enforce_fast_count=True)
    assert not enforced.valid
    assert (enforced.errors, enforced.warnings) == ((count_message,), (size_message,))


def test_an_unreadable_record(engine: Engine) -> None:
    """A record that is not BSON is counted and named; its entries cannot be judged, so they are
    not called extra."""
    rid = rid_of(engine, 7)
    value = value_of(engine, 7)
    garbage = value[: ttl.body_offset(value)] + b"\x05\x00\x00\x00\x07"
    tamper(engine, put=[("records", record_key(engine, rid), garbage)])
    result = run(engine)
    assert not result.valid
    assert (result.records, result.invalid_documents, result.corrupt_records) == (N, 1, (rid,))
    assert result.errors == ("Detected one or more invalid documents.",)
    assert result.extra == result.missing == ()
    assert [w.split(" (")[0] for w in result.warnings] == ["data size"]


def test_many_inconsistencies_are_counted_and_some_listed(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(validate_module, "MAX_LISTED", 2)
    gone = [("index", index_key(engine, "a_1", (i % 4,), rid_of(engine, i))) for i in (1, 2, 3)]
    tamper(engine, delete=gone)
    result = run(engine)
    assert result.warnings == ("Detected 3 missing index entries.",)
    assert len(result.missing) == 2
    assert result.errors == (
        *inconsistent("a_1"),
        "Not all missing index entry inconsistencies are listed due to size limitations.",
    )
