"""Legacy OP_QUERY parsing (the first handshake a driver sends) and OP_REPLY encoding."""

from __future__ import annotations

import struct

import bson
import pytest

from ebbdb.protocol import (
    FrameDecoder,
    Msg,
    OpCode,
    ProtocolError,
    Query,
    Reply,
    decode_message,
    decode_reply,
    encode_msg,
    encode_query,
    encode_reply,
)
from tests.helpers import feed_bytewise

IS_MASTER = bson.encode(
    {
        "isMaster": 1,
        "helloOk": True,
        "client": {
            "driver": {"name": "nodejs", "version": "4.0.0"},
            "os": {"type": "Linux", "name": "linux", "architecture": "x64"},
        },
        "compression": [],
    }
)
SELECTOR = bson.encode({"ismaster": 1, "maxWireVersion": 1})
REPLY_DOC = bson.encode(
    {"ismaster": True, "maxBsonObjectSize": 16777216, "maxWireVersion": 17, "ok": 1.0}
)


def _op_query(
    name: bytes,
    query: bytes,
    selector: bytes = b"",
    *,
    flags: int = 0,
    skip: int = 0,
    to_return: int = -1,
    request_id: int = 1,
    response_to: int = 0,
) -> bytes:
    """A hand-framed OP_QUERY; `name` is raw, so a test can leave out its NUL or break its UTF-8."""
    payload = (
        struct.pack("<i", flags) + name + struct.pack("<ii", skip, to_return) + query + selector
    )
    return struct.pack("<iiii", 16 + len(payload), request_id, response_to, OpCode.QUERY) + payload


def _refit(frame: bytes) -> bytes:
    """Make the header's messageLength agree with the frame's actual length."""
    return struct.pack("<i", len(frame)) + frame[4:]


# --- OP_QUERY ---------------------------------------------------------------------------------


def test_is_master_handshake_on_admin_cmd() -> None:
    frame = _op_query(b"admin.$cmd\x00", IS_MASTER, request_id=0x1234, to_return=-1)
    query = decode_message(frame)
    assert query == Query(0x1234, 0, 0, "admin.$cmd", 0, -1, IS_MASTER, None)
    assert isinstance(query, Query)
    decoded = bson.decode(query.query)
    assert decoded["isMaster"] == 1
    assert decoded["client"]["driver"]["name"] == "nodejs"


def test_query_with_return_fields_selector() -> None:
    frame = _op_query(b"test.$cmd\x00", IS_MASTER, SELECTOR)
    query = decode_message(frame)
    assert isinstance(query, Query)
    assert query.return_fields_selector == SELECTOR
    assert query.query == IS_MASTER


def test_query_fields_are_read_as_signed_int32() -> None:
    # Flag bit 2 is SlaveOk, bit 4 NoCursorTimeout; numberToReturn -1 means "one batch, then close".
    frame = _op_query(
        b"db.coll\x00",
        IS_MASTER,
        flags=(1 << 2) | (1 << 4),
        skip=7,
        to_return=-1,
        request_id=-5,
        response_to=99,
    )
    assert decode_message(frame) == Query(-5, 99, 0b10100, "db.coll", 7, -1, IS_MASTER, None)
    high = _op_query(b"x\x00", IS_MASTER, flags=-(2**31), skip=2**31 - 1, to_return=-(2**31))
    assert decode_message(high) == Query(1, 0, -(2**31), "x", 2**31 - 1, -(2**31), IS_MASTER, None)


def test_query_collection_name_may_be_non_ascii() -> None:
    query = decode_message(_op_query("bäse.$cmd".encode() + b"\x00", IS_MASTER))
    assert isinstance(query, Query)
    assert query.full_collection_name == "bäse.$cmd"


def test_encode_query_wire_layout() -> None:
    query = Query(3, 0, 4, "admin.$cmd", 0, -1, IS_MASTER, SELECTOR)
    frame = encode_query(query)
    assert frame == _op_query(b"admin.$cmd\x00", IS_MASTER, SELECTOR, flags=4, request_id=3)
    assert decode_message(frame) == query


def test_encode_query_without_selector_roundtrips() -> None:
    query = Query(3, 77, 0, "admin.$cmd", 1, 2, IS_MASTER)
    frame = encode_query(query)
    assert frame == _op_query(
        b"admin.$cmd\x00", IS_MASTER, skip=1, to_return=2, request_id=3, response_to=77
    )
    assert decode_message(frame) == query


def test_query_fed_one_byte_at_a_time() -> None:
    frame = _op_query(b"admin.$cmd\x00", IS_MASTER, SELECTOR)
    decoder = FrameDecoder()
    frames = feed_bytewise(decoder, frame)
    assert frames == [frame]
    assert decoder.pending == 0
    assert decode_message(frames[0]) == decode_message(frame)


def test_query_followed_by_op_msg_in_one_chunk() -> None:
    # A driver handshakes with OP_QUERY and then switches to OP_MSG on the same connection.
    query_frame = _op_query(b"admin.$cmd\x00", IS_MASTER)
    msg_frame = encode_msg(2, 0, bson.encode({"ping": 1, "$db": "admin"}))
    frames = FrameDecoder().feed(query_frame + msg_frame)
    assert frames == [query_frame, msg_frame]
    assert isinstance(decode_message(frames[0]), Query)
    assert isinstance(decode_message(frames[1]), Msg)


def test_query_missing_flags_is_rejected() -> None:
    for size in range(16, 20):
        frame = struct.pack("<iiii", size, 1, 0, OpCode.QUERY) + bytes(size - 16)
        with pytest.raises(ProtocolError):
            decode_message(frame)


def test_query_name_without_terminator_is_rejected() -> None:
    frame = struct.pack("<iiii", 30, 1, 0, OpCode.QUERY) + struct.pack("<i", 0) + b"admin.$cmd"
    with pytest.raises(ProtocolError, match="unterminated"):
        decode_message(frame)


def test_query_name_that_is_not_utf8_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_message(_op_query(b"adm\xc3in.$cmd\x00", IS_MASTER))


@pytest.mark.parametrize("keep", [0, 1, 4, 7])
def test_query_missing_skip_or_return_is_rejected(keep: int) -> None:
    payload = struct.pack("<i", 0) + b"admin.$cmd\x00" + struct.pack("<ii", 0, -1)[:keep]
    frame = struct.pack("<iiii", 16 + len(payload), 1, 0, OpCode.QUERY) + payload
    with pytest.raises(ProtocolError):
        decode_message(frame)


def test_query_without_query_document_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        decode_message(_op_query(b"admin.$cmd\x00", b""))


@pytest.mark.parametrize("declared", [-1, 0, 4, len(IS_MASTER) + 1])
def test_query_document_length_that_does_not_fit_is_rejected(declared: int) -> None:
    bad = struct.pack("<i", declared) + IS_MASTER[4:]
    with pytest.raises(ProtocolError):
        decode_message(_op_query(b"admin.$cmd\x00", bad))


@pytest.mark.parametrize("declared", [-1, 0, 4, len(SELECTOR) + 1])
def test_selector_length_that_does_not_fit_is_rejected(declared: int) -> None:
    bad = struct.pack("<i", declared) + SELECTOR[4:]
    with pytest.raises(ProtocolError):
        decode_message(_op_query(b"admin.$cmd\x00", IS_MASTER, bad))


@pytest.mark.parametrize("junk", [b"\x00", b"\x05\x00\x00\x00"])
def test_query_with_bytes_too_few_for_a_selector_is_rejected(junk: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_message(_op_query(b"admin.$cmd\x00", IS_MASTER, junk))


@pytest.mark.parametrize("junk", [b"\x00", b"\xff\xff", bson.encode({})])
def test_query_with_trailing_bytes_after_selector_is_rejected(junk: bytes) -> None:
    with pytest.raises(ProtocolError, match="trailing"):
        decode_message(_op_query(b"admin.$cmd\x00", IS_MASTER, SELECTOR + junk))


def test_every_truncation_of_a_query_is_rejected() -> None:
    """Cut anywhere and fix the header length: only the OP_QUERY parser can notice."""
    frame = _op_query(b"admin.$cmd\x00", IS_MASTER)
    for cut in range(16, len(frame)):
        with pytest.raises(ProtocolError):
            decode_message(_refit(frame[:cut]))


def test_every_truncation_inside_the_selector_is_rejected() -> None:
    full = _op_query(b"admin.$cmd\x00", IS_MASTER, SELECTOR)
    without = len(full) - len(SELECTOR)
    assert decode_message(_refit(full[:without])) == Query(1, 0, 0, "admin.$cmd", 0, -1, IS_MASTER)
    for cut in range(without + 1, len(full)):
        with pytest.raises(ProtocolError):
            decode_message(_refit(full[:cut]))


# --- OP_REPLY ---------------------------------------------------------------------------------


def test_encode_reply_wire_layout() -> None:
    reply = Reply(
        request_id=50,
        response_to=0x1234,
        response_flags=8,
        cursor_id=0,
        starting_from=0,
        documents=(REPLY_DOC,),
    )
    frame = encode_reply(reply)
    assert len(frame) == 16 + 20 + len(REPLY_DOC)
    assert struct.unpack_from("<iiii", frame) == (len(frame), 50, 0x1234, 1)
    assert struct.unpack_from("<iqii", frame, 16) == (8, 0, 0, 1)
    assert bson.decode_all(frame[36:]) == [bson.decode(REPLY_DOC)]


def test_reply_roundtrips_through_decode_reply() -> None:
    reply = Reply(7, 3, 0, 0, 0, (REPLY_DOC,))
    assert decode_reply(encode_reply(reply)) == reply


@pytest.mark.parametrize("cursor_id", [0, 1, -1, 2**63 - 1, -(2**63)])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_reply_roundtrip_cursor_ids_and_document_counts(cursor_id: int, count: int) -> None:
    docs = tuple(bson.encode({"i": i, "s": "x" * i}) for i in range(count))
    reply = Reply(-1, 2**31 - 1, 2, cursor_id, 5, docs)
    frame = encode_reply(reply)
    assert struct.unpack_from("<q", frame, 20)[0] == cursor_id
    assert struct.unpack_from("<i", frame, 32)[0] == count
    assert decode_reply(frame) == reply


def test_reply_answers_the_handshake_query() -> None:
    query = decode_message(_op_query(b"admin.$cmd\x00", IS_MASTER, request_id=777))
    assert isinstance(query, Query)
    frame = encode_reply(Reply(1, query.request_id, 0, 0, 0, (REPLY_DOC,)))
    assert FrameDecoder().feed(frame) == [frame]
    reply = decode_reply(frame)
    assert reply.response_to == 777
    assert bson.decode(reply.documents[0])["ismaster"] is True


def test_decode_message_does_not_accept_a_reply() -> None:
    # Clients never send OP_REPLY; a server must treat it as an unsupported opcode.
    with pytest.raises(ProtocolError):
        decode_message(encode_reply(Reply(1, 0, 0, 0, 0, (REPLY_DOC,))))


def test_decode_reply_rejects_other_opcodes() -> None:
    with pytest.raises(ProtocolError):
        decode_reply(encode_msg(1, 0, REPLY_DOC))
    with pytest.raises(ProtocolError):
        decode_reply(encode_query(Query(1, 0, 0, "admin.$cmd", 0, -1, IS_MASTER)))


def test_decode_reply_rejects_wrong_document_count() -> None:
    frame = encode_reply(Reply(1, 0, 0, 0, 0, (REPLY_DOC, REPLY_DOC)))
    for count in (0, 1, 3, -1):
        bad = frame[:32] + struct.pack("<i", count) + frame[36:]
        with pytest.raises(ProtocolError):
            decode_reply(bad)


def test_decode_reply_rejects_trailing_and_missing_bytes() -> None:
    frame = encode_reply(Reply(1, 0, 0, 0, 0, (REPLY_DOC,)))
    with pytest.raises(ProtocolError):
        decode_reply(frame + b"\x00")
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_reply(frame[:cut])
        with pytest.raises(ProtocolError):
            decode_reply(_refit(frame[:cut]) if cut >= 16 else frame[:cut])
