"""Property tests: arbitrary bytes raise only ProtocolError, and decode(encode(m)) == m."""

from __future__ import annotations

import struct
from functools import reduce
from itertools import combinations
from operator import or_

import bson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ebbdb.protocol import (
    MAX_MESSAGE_SIZE,
    MIN_MESSAGE_SIZE,
    FrameDecoder,
    Msg,
    MsgFlags,
    OpCode,
    ProtocolError,
    Query,
    decode_message,
    encode_msg_from,
    encode_query,
)
from tests.helpers import feed_bytewise

FAST = settings(max_examples=250, deadline=None)

INT32 = st.integers(-(2**31), 2**31 - 1)

# Strings that survive a C-string round trip: valid UTF-8 (no lone surrogates) and no NUL.
CSTRING = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12
)

_FLAG_BITS = (MsgFlags.CHECKSUM_PRESENT, MsgFlags.MORE_TO_COME, MsgFlags.EXHAUST_ALLOWED)
ALL_FLAG_COMBINATIONS = [
    reduce(or_, combo, MsgFlags.NONE) for n in range(4) for combo in combinations(_FLAG_BITS, n)
]
FLAGS = st.sampled_from(ALL_FLAG_COMBINATIONS)

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=16),
    st.binary(max_size=16),
)
# Small and shallow: the framing layer never looks inside a document, so depth buys nothing here.
_VALUES = _SCALARS | st.lists(_SCALARS, max_size=3) | st.dictionaries(CSTRING, _SCALARS, max_size=2)
DOCS = st.dictionaries(CSTRING, _VALUES, max_size=4).map(bson.encode)

SEQUENCES = st.lists(st.tuples(CSTRING, st.lists(DOCS, max_size=3).map(tuple)), max_size=3).map(
    tuple
)

MSGS = st.builds(
    Msg, request_id=INT32, response_to=INT32, flags=FLAGS, body=DOCS, sequences=SEQUENCES
)

QUERIES = st.builds(
    Query,
    request_id=INT32,
    response_to=INT32,
    flags=INT32,
    full_collection_name=CSTRING,
    number_to_skip=INT32,
    number_to_return=INT32,
    query=DOCS,
    return_fields_selector=st.none() | DOCS,
)


def _encode(message: Msg | Query) -> bytes:
    return encode_msg_from(message) if isinstance(message, Msg) else encode_query(message)


def _decode_or_protocol_error(data: bytes) -> Msg | Query | None:
    """decode_message, where ProtocolError is an allowed answer and any other exception fails."""
    try:
        return decode_message(data)
    except ProtocolError:
        return None


# --- roundtrips -------------------------------------------------------------------------------


def _check_roundtrip(message: Msg | Query, op: OpCode) -> None:
    """The frame's header gives its length, the message's ids and `op`; the frame decodes back
    to the message."""
    frame = _encode(message)
    assert struct.unpack_from("<iiii", frame) == (
        len(frame),
        message.request_id,
        message.response_to,
        op,
    )
    assert decode_message(frame) == message


@FAST
@given(MSGS)
def test_msg_roundtrip(msg: Msg) -> None:
    _check_roundtrip(msg, OpCode.MSG)


@FAST
@given(QUERIES)
def test_query_roundtrip(query: Query) -> None:
    _check_roundtrip(query, OpCode.QUERY)


@FAST
@given(MSGS | QUERIES)
def test_roundtrip_fed_one_byte_at_a_time(message: Msg | Query) -> None:
    frame = _encode(message)
    decoder = FrameDecoder()
    frames = feed_bytewise(decoder, frame)
    assert frames == [frame]
    assert decoder.pending == 0
    assert decode_message(frames[0]) == message


@FAST
@given(MSGS | QUERIES, st.binary(min_size=1, max_size=8))
def test_roundtrip_with_trailing_bytes(message: Msg | Query, extra: bytes) -> None:
    frame = _encode(message)
    try:
        decode_message(frame + extra)
    except ProtocolError:
        pass
    else:
        raise AssertionError("decode_message accepted a frame followed by extra bytes")
    decoder = FrameDecoder()
    try:
        frames = decoder.feed(frame + extra)
    except ProtocolError:
        # The extra bytes start a header announcing an impossible length.
        assert len(extra) >= 4
        length = struct.unpack_from("<i", extra)[0]
        assert not MIN_MESSAGE_SIZE <= length <= MAX_MESSAGE_SIZE
    else:
        assert frames[0] == frame
        assert decode_message(frames[0]) == message


@settings(max_examples=150, deadline=None)
@given(st.lists(MSGS | QUERIES, min_size=1, max_size=3), st.data())
def test_stream_split_anywhere_gives_the_same_messages(
    messages: list[Msg | Query], data: st.DataObject
) -> None:
    frames = [_encode(m) for m in messages]
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    decoder = FrameDecoder()
    got: list[bytes] = []
    for start, stop in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(stream[start:stop])
    assert got == frames
    assert decoder.pending == 0
    assert [decode_message(f) for f in got] == messages


# --- arbitrary bytes --------------------------------------------------------------------------


def _framed(op_code: int, payload: bytes) -> bytes:
    return struct.pack("<iiii", 16 + len(payload), 1, 0, op_code) + payload


# Raw bytes rarely get past the header, so also try payloads behind a correct header, and valid
# frames with a few bytes overwritten, cut short or extended (with the header length kept right).
_FRAMED_NOISE = st.builds(
    _framed, st.sampled_from([OpCode.MSG, OpCode.QUERY, OpCode.REPLY, 2012]), st.binary(max_size=64)
)
_MSG_PAYLOADS = st.builds(
    lambda flags, sections: _framed(OpCode.MSG, struct.pack("<I", flags) + sections),
    st.sampled_from([0, 1, 2, 3, 0x10000, 0x10001, 4, 0x8000]),
    st.lists(
        st.one_of(
            DOCS.map(lambda d: b"\x00" + d),
            st.builds(
                lambda ident, docs: (
                    b"\x01"
                    + struct.pack("<i", 4 + len(ident.encode()) + 1 + sum(map(len, docs)))
                    + ident.encode()
                    + b"\x00"
                    + b"".join(docs)
                ),
                CSTRING,
                st.lists(DOCS, max_size=2),
            ),
            st.binary(max_size=8),
        ),
        max_size=4,
    ).map(b"".join),
)


@st.composite
def _mutated_frames(draw: st.DrawFn) -> bytes:
    frame = bytearray(_encode(draw(MSGS | QUERIES)))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(
            st.integers(4, len(frame) - 1)
        )  # keep the length; the header is fuzzed elsewhere
        frame[pos] = draw(st.integers(0, 255))
    cut = draw(st.integers(16, len(frame)))
    tail = draw(st.binary(max_size=6))
    out = bytes(frame[:cut]) + tail
    return struct.pack("<i", len(out)) + out[4:]


ARBITRARY = st.one_of(st.binary(max_size=128), _FRAMED_NOISE, _MSG_PAYLOADS, _mutated_frames())


@settings(max_examples=300, deadline=None)
@given(ARBITRARY)
def test_decode_message_raises_only_protocol_error(data: bytes) -> None:
    message = _decode_or_protocol_error(data)
    if message is None:
        return
    # Whatever was accepted is a consistent message: it re-encodes to something that decodes to it.
    assert isinstance(message, (Msg, Query))
    assert struct.unpack_from("<i", data, 12)[0] in (OpCode.MSG, OpCode.QUERY)
    assert decode_message(_encode(message)) == message


@FAST
@given(st.binary(max_size=256), st.data())
def test_frame_decoder_raises_only_protocol_error(data: bytes, draw: st.DataObject) -> None:
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=8)))
    decoder = FrameDecoder()
    frames: list[bytes] = []
    try:
        for start, stop in zip([0, *cuts], [*cuts, len(data)], strict=True):
            frames += decoder.feed(data[start:stop])
    except ProtocolError:
        return
    consumed = sum(map(len, frames))
    assert b"".join(frames) == data[:consumed]
    assert decoder.pending == len(data) - consumed
    for frame in frames:
        assert struct.unpack_from("<i", frame)[0] == len(frame)
        _decode_or_protocol_error(frame)


@FAST
@given(ARBITRARY)
def test_frame_decoder_byte_at_a_time_agrees_with_whole(data: bytes) -> None:
    def run(chunks: list[bytes]) -> tuple[list[bytes], int] | None:
        decoder = FrameDecoder()
        frames: list[bytes] = []
        try:
            for chunk in chunks:
                frames += decoder.feed(chunk)
        except ProtocolError:
            return None
        return frames, decoder.pending

    whole = run([data])
    bytewise = run([data[i : i + 1] for i in range(len(data))])
    assert whole == bytewise


@FAST
@given(INT32)
@example(-1)
@example(0)
@example(4)
@example(MIN_MESSAGE_SIZE - 1)
@example(MIN_MESSAGE_SIZE)
@example(MAX_MESSAGE_SIZE)
@example(MAX_MESSAGE_SIZE + 1)
def test_frame_decoder_rejects_exactly_the_impossible_lengths(length: int) -> None:
    decoder = FrameDecoder()
    prefix = struct.pack("<i", length)
    legal = MIN_MESSAGE_SIZE <= length <= MAX_MESSAGE_SIZE
    try:
        frames = decoder.feed(prefix)
    except ProtocolError:
        assert not legal
    else:
        assert legal
        assert frames == []
        assert decoder.pending == 4
