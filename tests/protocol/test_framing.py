"""The 16-byte header, message size limits, and FrameDecoder cutting a byte stream into frames."""

from __future__ import annotations

import struct

import bson
import pytest

from ebbdb.protocol import (
    HEADER_SIZE,
    MAX_MESSAGE_SIZE,
    MIN_MESSAGE_SIZE,
    FrameDecoder,
    Header,
    Msg,
    MsgFlags,
    OpCode,
    ProtocolError,
    Query,
    decode_header,
    decode_message,
    encode_msg,
    encode_query,
)
from tests.helpers import feed_bytewise

BODY = bson.encode({"ping": 1, "$db": "admin"})
MSG_FRAME = encode_msg(7, 0, BODY)
CHECKSUM_FRAME = encode_msg(8, 0, bson.encode({"hello": 1}), MsgFlags.CHECKSUM_PRESENT)
SEQ_FRAME = encode_msg(
    9,
    0,
    bson.encode({"insert": "c", "$db": "test"}),
    sequences=(("documents", (bson.encode({"a": 1}), bson.encode({"b": "x" * 40}))),),
)
QUERY_FRAME = encode_query(Query(10, 0, 0, "admin.$cmd", 0, -1, bson.encode({"isMaster": 1})))
FRAMES = [MSG_FRAME, CHECKSUM_FRAME, SEQ_FRAME, QUERY_FRAME]


def _with_length(frame: bytes, length: int) -> bytes:
    """The same frame with its header's messageLength overwritten."""
    return struct.pack("<i", length) + frame[4:]


# --- the header -------------------------------------------------------------------------------


def test_limits_are_mongodb_values() -> None:
    assert HEADER_SIZE == 16
    assert MIN_MESSAGE_SIZE == 16
    assert MAX_MESSAGE_SIZE == 48_000_000


def test_decode_header_reads_four_little_endian_int32() -> None:
    raw = struct.pack("<iiii", 1234, 0x01020304, -5, 2013) + b"rest is ignored"
    assert decode_header(raw) == Header(1234, 0x01020304, -5, 2013)


@pytest.mark.parametrize("size", [0, 1, 15])
def test_decode_header_rejects_short_input(size: int) -> None:
    with pytest.raises(ProtocolError):
        decode_header(bytes(size))


def test_encoded_msg_header() -> None:
    frame = encode_msg(-42, 2**31 - 1, BODY)
    assert decode_header(frame) == Header(len(frame), -42, 2**31 - 1, OpCode.MSG)
    assert frame[:16] == struct.pack("<iiii", len(frame), -42, 2**31 - 1, 2013)


# --- size limits in decode_message -------------------------------------------------------------


@pytest.mark.parametrize("length", [-(2**31), -1, 0, 4, 15])
def test_decode_message_rejects_length_below_header(length: int) -> None:
    with pytest.raises(ProtocolError, match="below"):
        decode_message(_with_length(MSG_FRAME, length))


def test_decode_message_rejects_length_above_maximum() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        decode_message(_with_length(MSG_FRAME, MAX_MESSAGE_SIZE + 1))


def _msg_of_size(size: int) -> bytes:
    """A well-formed OP_MSG (flags and one body holding a binary field) of exactly `size` bytes."""
    doc_overhead = len(bson.encode({"x": b""}))
    body = bson.encode({"x": bytes(size - HEADER_SIZE - 4 - 1 - doc_overhead)})
    frame = struct.pack("<iiii", size, 1, 0, OpCode.MSG) + struct.pack("<I", 0) + b"\x00" + body
    assert len(frame) == size
    return frame


def test_decode_message_accepts_exactly_the_maximum_and_rejects_one_byte_more() -> None:
    largest = _msg_of_size(MAX_MESSAGE_SIZE)
    msg = decode_message(largest)
    assert isinstance(msg, Msg)
    assert len(msg.body) == MAX_MESSAGE_SIZE - 21
    del msg, largest
    # Well-formed in every other respect: only the size limit can reject it.
    with pytest.raises(ProtocolError):
        decode_message(_msg_of_size(MAX_MESSAGE_SIZE + 1))


def test_encode_msg_refuses_to_build_an_oversized_message() -> None:
    body = bson.encode({"x": bytes(MAX_MESSAGE_SIZE)})
    with pytest.raises(ProtocolError):
        encode_msg(1, 0, body)


@pytest.mark.parametrize("frame", FRAMES, ids=["msg", "checksum", "sequence", "query"])
def test_decode_message_rejects_frame_shorter_than_its_header_says(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_message(frame[:-1])


# --- unknown opcodes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op_code",
    [OpCode.REPLY, OpCode.COMPRESSED, 0, -1, 2001, 2002, 2005, 2006, 2007, 2010, 2011, 2014, 9999],
)
def test_decode_message_rejects_unsupported_opcode(op_code: int) -> None:
    frame = MSG_FRAME[:12] + struct.pack("<i", op_code) + MSG_FRAME[16:]
    with pytest.raises(ProtocolError, match="opcode"):
        decode_message(frame)


# --- trailing bytes ---------------------------------------------------------------------------


@pytest.mark.parametrize("frame", FRAMES, ids=["msg", "checksum", "sequence", "query"])
@pytest.mark.parametrize("extra", [b"\x00", b"\x01\x02\x03", bytes(5), MSG_FRAME])
def test_decode_message_rejects_trailing_bytes(frame: bytes, extra: bytes) -> None:
    decode_message(frame)  # the frame alone is fine
    with pytest.raises(ProtocolError):
        decode_message(frame + extra)


@pytest.mark.parametrize("frame", FRAMES, ids=["msg", "checksum", "sequence", "query"])
def test_decode_message_rejects_every_proper_prefix(frame: bytes) -> None:
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_message(frame[:cut])


# --- FrameDecoder: whole, byte by byte, several per chunk, split, trailing --------------------


@pytest.mark.parametrize("frame", FRAMES, ids=["msg", "checksum", "sequence", "query"])
def test_feed_whole_frame(frame: bytes) -> None:
    decoder = FrameDecoder()
    assert decoder.feed(frame) == [frame]
    assert decoder.pending == 0


@pytest.mark.parametrize("frame", FRAMES, ids=["msg", "checksum", "sequence", "query"])
def test_feed_one_byte_at_a_time(frame: bytes) -> None:
    decoder = FrameDecoder()
    for i in range(len(frame) - 1):
        assert decoder.feed(frame[i : i + 1]) == []
        assert decoder.pending == i + 1
    assert decoder.feed(frame[-1:]) == [frame]
    assert decoder.pending == 0


def test_feed_stream_one_byte_at_a_time_gives_same_frames_as_whole() -> None:
    stream = b"".join(FRAMES)
    whole = FrameDecoder().feed(stream)
    assert whole == FRAMES
    bytewise = FrameDecoder()
    assert feed_bytewise(bytewise, stream) == FRAMES
    assert bytewise.pending == 0


def test_feed_several_messages_in_one_chunk() -> None:
    decoder = FrameDecoder()
    frames = decoder.feed(MSG_FRAME + QUERY_FRAME + MSG_FRAME + SEQ_FRAME)
    assert frames == [MSG_FRAME, QUERY_FRAME, MSG_FRAME, SEQ_FRAME]
    assert decoder.pending == 0
    assert [type(decode_message(f)) for f in frames] == [Msg, Query, Msg, Msg]


def test_feed_message_split_at_every_point() -> None:
    stream = SEQ_FRAME + CHECKSUM_FRAME
    for cut in range(1, len(stream)):
        decoder = FrameDecoder()
        frames = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert frames == [SEQ_FRAME, CHECKSUM_FRAME], cut
        assert decoder.pending == 0


def test_feed_message_split_across_three_chunks() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(MSG_FRAME[:2]) == []  # not even a whole length prefix yet
    assert decoder.pending == 2
    assert decoder.feed(MSG_FRAME[2:20]) == []
    assert decoder.pending == 20
    assert decoder.feed(MSG_FRAME[20:] + QUERY_FRAME[:3]) == [MSG_FRAME]
    assert decoder.pending == 3
    assert decoder.feed(QUERY_FRAME[3:]) == [QUERY_FRAME]
    assert decoder.pending == 0


@pytest.mark.parametrize("keep", [1, 3, 4, 16, 20])
def test_feed_keeps_trailing_partial_bytes_pending(keep: int) -> None:
    decoder = FrameDecoder()
    assert decoder.feed(MSG_FRAME + QUERY_FRAME[:keep]) == [MSG_FRAME]
    assert decoder.pending == keep
    assert decoder.feed(QUERY_FRAME[keep:]) == [QUERY_FRAME]
    assert decoder.pending == 0


def test_feed_accepts_bytearray_and_memoryview() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(bytearray(MSG_FRAME)) == [MSG_FRAME]
    assert decoder.feed(memoryview(QUERY_FRAME)) == [QUERY_FRAME]
    stream = memoryview(MSG_FRAME + QUERY_FRAME)
    assert decoder.feed(stream[:10]) == []
    assert decoder.feed(stream[10:]) == [MSG_FRAME, QUERY_FRAME]
    frames = decoder.feed(bytearray(SEQ_FRAME))
    assert frames == [SEQ_FRAME]
    assert type(frames[0]) is bytes


def test_feed_empty_chunk_is_harmless() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(MSG_FRAME[:5]) == []
    assert decoder.feed(b"") == []
    assert decoder.pending == 5
    assert decoder.feed(MSG_FRAME[5:]) == [MSG_FRAME]


def test_feed_returns_header_only_frame_that_decode_message_then_rejects() -> None:
    # 16 bytes is a legal frame length; an OP_MSG that short has no flags and is malformed.
    frame = struct.pack("<iiii", 16, 1, 0, OpCode.MSG)
    assert FrameDecoder().feed(frame) == [frame]
    with pytest.raises(ProtocolError):
        decode_message(frame)


# --- FrameDecoder: size limits checked as soon as the length is known -------------------------

BAD_LENGTHS = [-(2**31), -1, 0, 1, 4, 15, MAX_MESSAGE_SIZE + 1, 2**31 - 1]


@pytest.mark.parametrize("length", BAD_LENGTHS)
def test_feed_rejects_bad_length_from_the_header_alone(length: int) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack("<iiii", length, 1, 0, OpCode.MSG))


@pytest.mark.parametrize("length", BAD_LENGTHS)
def test_feed_rejects_bad_length_once_four_bytes_arrived(length: int) -> None:
    decoder = FrameDecoder()
    prefix = struct.pack("<i", length)
    for i in range(3):
        assert decoder.feed(prefix[i : i + 1]) == []
    with pytest.raises(ProtocolError):
        decoder.feed(prefix[3:])


@pytest.mark.parametrize("length", range(4, MIN_MESSAGE_SIZE))
def test_feed_rejects_chunk_exactly_as_long_as_its_too_short_length(length: int) -> None:
    # A chunk that holds exactly the bytes its length prefix announces is still below the minimum.
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack("<i", length) + bytes(length - 4))


@pytest.mark.parametrize("length", BAD_LENGTHS)
def test_feed_rejects_bad_length_after_a_good_frame(length: int) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(MSG_FRAME + struct.pack("<i", length))


@pytest.mark.parametrize("length", [MIN_MESSAGE_SIZE, 17, 1 << 20, MAX_MESSAGE_SIZE])
def test_feed_waits_for_the_rest_of_a_legal_length(length: int) -> None:
    decoder = FrameDecoder()
    header = struct.pack("<iiii", length, 1, 0, OpCode.MSG)
    frames = decoder.feed(header[:-1])
    assert frames == []
    assert decoder.pending == 15
    if length == MIN_MESSAGE_SIZE:
        assert decoder.feed(header[-1:]) == [header]
    else:
        assert decoder.feed(header[-1:]) == []
        assert decoder.pending == 16


def test_frame_decoder_instances_do_not_share_state() -> None:
    a, b = FrameDecoder(), FrameDecoder()
    assert a.feed(MSG_FRAME[:10]) == []
    assert b.pending == 0
    assert b.feed(QUERY_FRAME) == [QUERY_FRAME]
    assert a.feed(MSG_FRAME[10:]) == [MSG_FRAME]


def _large_frame(request_id: int, size: int) -> bytes:
    """An OP_MSG of exactly `size` bytes (a ping padded with a string field)."""
    pad = size - len(encode_msg(request_id, 0, bson.encode({"ping": 1, "p": ""})))
    return encode_msg(request_id, 0, bson.encode({"ping": 1, "p": "x" * pad}))


@pytest.mark.parametrize("chunk", [1000, 65536, 262144, 5_000_000])
def test_large_frames_arrive_whole_in_any_chunking(chunk: int) -> None:
    big = _large_frame(1, 3_000_000)
    other = _large_frame(2, 2_000_001)
    stream = MSG_FRAME + big + SEQ_FRAME + other + MSG_FRAME
    dec = FrameDecoder()
    frames: list[bytes] = []
    for pos in range(0, len(stream), chunk):
        frames += dec.feed(stream[pos : pos + chunk])
        if dec.pending:
            length = struct.unpack_from("<i", stream, len(b"".join(frames)))[0]
            assert dec.incomplete_length == (length if dec.pending >= 4 else dec.pending)
    assert frames == [MSG_FRAME, big, SEQ_FRAME, other, MSG_FRAME]
    assert all(type(f) is bytes for f in frames)
    assert dec.pending == 0 and dec.incomplete_length == 0


def test_a_large_frame_reports_its_announced_length_and_clear_drops_it() -> None:
    big = _large_frame(3, 4_000_000)
    dec = FrameDecoder()
    assert dec.feed(big[:3]) == []
    assert (dec.pending, dec.incomplete_length) == (3, 3)  # the length has not arrived yet
    assert dec.feed(big[3:100_000]) == []
    assert (dec.pending, dec.incomplete_length) == (100_000, 4_000_000)
    dec.clear()
    assert (dec.pending, dec.incomplete_length) == (0, 0)
    assert dec.feed(MSG_FRAME) == [MSG_FRAME]
