"""The session catalog without a server: lsid checks, keys, use times under an injected clock,
ending, killing and timing out (with the cursors a session owns), and what a refresh must write."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
from bson.binary import Binary
from bson.int64 import Int64

from ebbdb.server.errors import CodedError, CommandError
from ebbdb.server.sessions import (
    NO_AUTH_DIGEST,
    SessionCatalog,
    describe,
    label_reply,
    parse_lsid,
    session_key,
    txn_fields,
    user_digest,
)

ID = Binary(bytes(range(16)), 4)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _catalog() -> tuple[SessionCatalog, Clock, list[int]]:
    clock = Clock()
    catalog = SessionCatalog(clock)
    killed: list[int] = []
    catalog.kill_cursors = killed.extend
    return catalog, clock, killed


def test_digests_are_mongods() -> None:
    assert NO_AUTH_DIGEST == hashlib.sha256(b"").digest()
    assert user_digest(None) == user_digest(("", "")) == NO_AUTH_DIGEST
    assert user_digest(("ann", "admin")) == hashlib.sha256(b"ann@admin").digest()


def test_keys_and_names() -> None:
    assert session_key({"id": ID}) == bytes(ID) + NO_AUTH_DIGEST
    uid = b"u" * 32
    assert session_key({"id": ID, "uid": uid}) == bytes(ID) + uid
    assert describe(session_key({"id": ID})) == (
        "00010203-0405-0607-0809-0a0b0c0d0e0f - 47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU= -  - "
    )


@pytest.mark.parametrize(
    ("lsid", "code"),
    [
        (1, 14),
        ({}, 40414),
        ({"id": "x"}, 14),
        ({"id": b"x" * 16}, 14),
        ({"id": Binary(b"x" * 3, 4)}, 2),
        ({"id": ID, "uid": b"short"}, 2),
        ({"id": ID, "other": 1}, 40415),
    ],
)
def test_malformed_lsids(lsid: Any, code: int) -> None:
    with pytest.raises(CommandError) as info:
        parse_lsid(lsid)
    assert int(info.value.code) == code


def test_touch_end_and_refresh_work() -> None:
    catalog, clock, killed = _catalog()
    s = catalog.touch({"id": ID})
    assert catalog.touch({"id": ID}) is s and len(catalog) == 1
    s.cursors.update({7, 8})
    used, ended = catalog.take_refresh()
    assert used == [s] and ended == set()
    assert catalog.take_refresh() == ([], set())  # nothing used since
    assert catalog.end([s.key]) == 1
    assert sorted(killed) == [7, 8] and len(catalog) == 0
    assert catalog.take_refresh() == ([], {s.key})


def test_a_failed_refresh_gives_its_work_back() -> None:
    catalog, _, _ = _catalog()
    s = catalog.touch({"id": ID})
    catalog.end([b"gone" * 12])
    used, ended = catalog.take_refresh()
    catalog.give_back(used, ended)
    assert catalog.take_refresh() == ([s], {b"gone" * 12})


def test_sessions_time_out_under_the_clock() -> None:
    catalog, clock, killed = _catalog()
    s = catalog.touch({"id": ID})
    s.cursors.add(5)
    clock.ms += 29 * 60_000
    assert catalog.expire(30 * 60_000) == []
    catalog.touch({"id": ID})
    clock.ms += 30 * 60_000
    assert catalog.expire(30 * 60_000) == [s]
    assert killed == [5] and len(catalog) == 0


def test_killed_sessions_stay_known() -> None:
    catalog, _, killed = _catalog()
    a = catalog.touch({"id": ID})
    b = catalog.start(NO_AUTH_DIGEST, None)
    a.cursors.add(1)
    b.cursors.add(2)
    assert catalog.kill(lambda s: s is a) == [a]
    assert killed == [1] and len(catalog) == 2 and b.cursors == {2}


def test_transaction_fields() -> None:
    lsid = {"id": ID}
    assert txn_fields({"insert": "c"}) is None
    assert txn_fields({"insert": "c", "lsid": lsid, "txnNumber": Int64(3)}) == 3
    assert (
        txn_fields({"find": "c", "lsid": lsid, "txnNumber": Int64(3), "autocommit": False}) is None
    )
    with pytest.raises(CommandError):
        txn_fields({"insert": "c", "txnNumber": Int64(3)})
    with pytest.raises(CommandError):
        txn_fields({"insert": "c", "lsid": lsid, "txnNumber": 3})
    with pytest.raises(CodedError) as info:
        txn_fields({"find": "c", "lsid": lsid, "txnNumber": Int64(3)})
    assert info.value.code == 50768


@pytest.mark.parametrize(
    ("reply", "body", "labelled"),
    [
        ({"ok": 0.0, "code": 91}, {"txnNumber": Int64(1)}, True),
        ({"ok": 0.0, "code": 91}, {}, False),
        ({"ok": 0.0, "code": 91}, {"txnNumber": Int64(1), "autocommit": False}, False),
        ({"ok": 0.0, "code": 11000}, {"txnNumber": Int64(1)}, False),
        ({"ok": 1.0, "writeConcernError": {"code": 11600}}, {"txnNumber": Int64(1)}, True),
        ({"ok": 0.0, "code": 91, "errorLabels": ["X"]}, {"txnNumber": Int64(1)}, False),
    ],
)
def test_retryable_write_labels(
    reply: dict[str, Any], body: dict[str, Any], labelled: bool
) -> None:
    label_reply(reply, body)
    assert (reply.get("errorLabels") == ["RetryableWriteError"]) is labelled


def test_a_newer_retryable_write_aborts_the_transaction() -> None:
    from ebbdb.server.retryable_writes import begin

    catalog, _, _ = _catalog()
    session = catalog.touch({"id": ID})
    session.txn_number = 4
    session.transaction = object()  # TXN's transaction in progress
    aborted: list[Any] = []

    async def nothing_stored(*args: Any) -> None:
        return None

    body = {"insert": "c", "lsid": {"id": ID}, "txnNumber": Int64(5)}
    retry = asyncio.run(begin(session, body, None, nothing_stored, aborted.append))  # type: ignore[arg-type]
    assert retry is not None and aborted == [session] and session.txn_number == 5
    # The same number again (a retry) aborts nothing more.
    asyncio.run(begin(session, body, None, nothing_stored, aborted.append))  # type: ignore[arg-type]
    assert aborted == [session]
