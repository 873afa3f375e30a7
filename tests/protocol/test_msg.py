"""OP_MSG: the kind-0 body, kind-1 document sequences, the flag bits, the CRC-32C checksum, and
malformed sections."""

from __future__ import annotations

import struct

import bson
import pytest
from bson.codec_options import DEFAULT_CODEC_OPTIONS
from pymongo import message as pymongo_message

from ebbdb.protocol import (
    FrameDecoder,
    Msg,
    MsgFlags,
    OpCode,
    ProtocolError,
    decode_message,
    encode_msg,
)
from ebbdb.protocol.crc32c import crc32c

BODY = bson.encode({"find": "people", "filter": {"age": {"$gt": 30}}, "$db": "test"})
DOC_A = bson.encode({"_id": 1, "name": "ada"})
DOC_B = bson.encode({"_id": 2, "tags": ["x", "y"], "nested": {"k": 1.5}})
DOC_C = bson.encode({})


def _reference_crc32c(data: bytes) -> int:
    """Bit-at-a-time CRC-32C, written independently of the table-driven one under test."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def _op_msg(sections: bytes, flags: int = 0, request_id: int = 1, response_to: int = 0) -> bytes:
    """A hand-framed OP_MSG around raw section bytes (no checksum appended)."""
    payload = struct.pack("<I", flags) + sections
    return struct.pack("<iiii", 16 + len(payload), request_id, response_to, OpCode.MSG) + payload


def _body(doc: bytes) -> bytes:
    return b"\x00" + doc


def _seq(ident: str, *docs: bytes, size_delta: int = 0) -> bytes:
    ident_b = ident.encode() + b"\x00"
    payload = b"".join(docs)
    return (
        b"\x01"
        + struct.pack("<i", 4 + len(ident_b) + len(payload) + size_delta)
        + ident_b
        + payload
    )


def _with_checksum(frame: bytes) -> bytes:
    """Append a correct CRC-32C to a frame that already has the checksumPresent flag set."""
    grown = struct.pack("<i", len(frame) + 4) + frame[4:]
    return grown + struct.pack("<I", _reference_crc32c(grown))


# --- CRC-32C ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"123456789", 0xE3069283),  # the standard check value
        (b"", 0x00000000),
        (b"a", 0xC1D04330),
        # RFC 3720 (iSCSI) appendix B.4 test vectors
        (bytes(32), 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
        (bytes(range(31, -1, -1)), 0x113FDB5C),
    ],
)
def test_crc32c_known_vectors(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected
    assert _reference_crc32c(data) == expected


def test_crc32c_accepts_bytearray_and_memoryview() -> None:
    assert crc32c(bytearray(b"123456789")) == 0xE3069283
    assert crc32c(memoryview(b"xx123456789")[2:]) == 0xE3069283


def test_crc32c_continues_from_a_previous_value() -> None:
    data = bytes(range(256)) * 3
    for cut in (0, 1, 100, 767, len(data)):
        assert crc32c(data[cut:], crc32c(data[:cut])) == crc32c(data)


def test_crc32c_matches_reference_on_varied_input() -> None:
    data = bson.encode({"k": list(range(200)), "s": "ünïcødé" * 10})
    for end in range(0, len(data), 37):
        assert crc32c(data[:end]) == _reference_crc32c(data[:end])


# --- body and document sequences --------------------------------------------------------------


def test_body_only_wire_layout_and_decode() -> None:
    frame = encode_msg(5, 3, BODY)
    expected = _op_msg(_body(BODY), request_id=5, response_to=3)
    assert frame == expected
    assert decode_message(frame) == Msg(5, 3, MsgFlags.NONE, BODY, ())


def test_sequences_wire_layout_and_decode() -> None:
    sequences = (("documents", (DOC_A, DOC_B)), ("updates", (DOC_C,)))
    frame = encode_msg(11, 0, BODY, sequences=sequences)
    expected = _op_msg(
        _body(BODY) + _seq("documents", DOC_A, DOC_B) + _seq("updates", DOC_C), 0, 11
    )
    assert frame == expected
    msg = decode_message(frame)
    assert msg == Msg(11, 0, MsgFlags.NONE, BODY, sequences)
    assert isinstance(msg, Msg)
    assert [bson.decode(d) for d in msg.sequences[0][1]] == [
        {"_id": 1, "name": "ada"},
        bson.decode(DOC_B),
    ]


def test_many_sequences_and_empty_sequence() -> None:
    sequences = tuple((f"s{i}", (DOC_A,) * i) for i in range(6))
    msg = decode_message(encode_msg(1, 0, BODY, sequences=sequences))
    assert isinstance(msg, Msg)
    assert msg.sequences == sequences
    assert msg.sequences[0] == ("s0", ())


def test_sequence_identifier_may_be_non_ascii_utf8() -> None:
    msg = decode_message(_op_msg(_body(BODY) + _seq("dökümän", DOC_A)))
    assert isinstance(msg, Msg)
    assert msg.sequences == (("dökümän", (DOC_A,)),)


def test_sections_may_come_in_any_order() -> None:
    frame = _op_msg(_seq("documents", DOC_A) + _body(BODY) + _seq("deletes", DOC_B, DOC_C))
    msg = decode_message(frame)
    assert isinstance(msg, Msg)
    assert msg.body == BODY
    assert msg.sequences == (("documents", (DOC_A,)), ("deletes", (DOC_B, DOC_C)))


def test_documents_are_returned_as_raw_bytes_without_inspection() -> None:
    # The framing layer only slices by length prefix; a document's contents are someone else's job.
    odd_doc = struct.pack("<i", 9) + b"\x7fzz\x00\x00"
    msg = decode_message(_op_msg(_body(odd_doc) + _seq("d", odd_doc)))
    assert isinstance(msg, Msg)
    assert msg.body == odd_doc
    assert msg.sequences == (("d", (odd_doc,)),)


def test_decodes_a_frame_built_by_pymongo() -> None:
    # pymongo's own OP_MSG builder moves the `documents` array into a kind-1 sequence.
    command = {"insert": "people", "documents": [{"a": 1}, {"b": "two"}]}
    request_id, frame, _, _ = pymongo_message._op_msg(
        0, command, "test", None, DEFAULT_CODEC_OPTIONS
    )
    assert FrameDecoder().feed(frame) == [frame]
    msg = decode_message(frame)
    assert isinstance(msg, Msg)
    assert msg.request_id == request_id
    assert msg.response_to == 0
    assert msg.flags == MsgFlags.NONE
    assert bson.decode(msg.body) == {"insert": "people", "$db": "test"}
    assert msg.sequences == (("documents", (bson.encode({"a": 1}), bson.encode({"b": "two"}))),)


def test_decodes_a_more_to_come_frame_built_by_pymongo() -> None:
    command = {"insert": "people", "documents": [{"a": 1}], "writeConcern": {"w": 0}}
    _, frame, _, _ = pymongo_message._op_msg(
        int(MsgFlags.MORE_TO_COME), command, "test", None, DEFAULT_CODEC_OPTIONS
    )
    msg = decode_message(frame)
    assert isinstance(msg, Msg)
    assert msg.more_to_come
    assert not msg.exhaust_allowed


# --- flag bits --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "wire", "more_to_come", "exhaust_allowed"),
    [
        (MsgFlags.NONE, 0x0, False, False),
        (MsgFlags.MORE_TO_COME, 0x2, True, False),
        (MsgFlags.EXHAUST_ALLOWED, 0x10000, False, True),
        (MsgFlags.MORE_TO_COME | MsgFlags.EXHAUST_ALLOWED, 0x10002, True, True),
    ],
)
def test_flag_bits_on_the_wire_and_back(
    flags: MsgFlags, wire: int, more_to_come: bool, exhaust_allowed: bool
) -> None:
    frame = encode_msg(1, 0, BODY, flags)
    assert frame[16:20] == struct.pack("<I", wire)
    msg = decode_message(frame)
    assert isinstance(msg, Msg)
    assert msg.flags == flags
    assert msg.more_to_come is more_to_come
    assert msg.exhaust_allowed is exhaust_allowed
    # The same flags in a hand-framed message decode the same way.
    assert decode_message(_op_msg(_body(BODY), wire)) == Msg(1, 0, flags, BODY, ())


@pytest.mark.parametrize("bit", range(2, 16))
def test_unknown_required_flag_bit_is_rejected(bit: int) -> None:
    with pytest.raises(ProtocolError, match="required"):
        decode_message(_op_msg(_body(BODY), 1 << bit))
    with pytest.raises(ProtocolError, match="required"):
        decode_message(_op_msg(_body(BODY), (1 << bit) | int(MsgFlags.MORE_TO_COME)))


@pytest.mark.parametrize("bit", range(17, 32))
def test_unknown_optional_flag_bit_is_ignored(bit: int) -> None:
    msg = decode_message(_op_msg(_body(BODY), 1 << bit))
    assert msg == Msg(1, 0, MsgFlags.NONE, BODY, ())
    msg = decode_message(_op_msg(_body(BODY), (1 << bit) | 0x10002))
    assert msg == Msg(1, 0, MsgFlags.MORE_TO_COME | MsgFlags.EXHAUST_ALLOWED, BODY, ())


# --- checksum ---------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [MsgFlags.NONE, MsgFlags.MORE_TO_COME, MsgFlags.EXHAUST_ALLOWED])
def test_checksum_is_appended_and_verified(extra: MsgFlags) -> None:
    flags = MsgFlags.CHECKSUM_PRESENT | extra
    sequences = (("documents", (DOC_A, DOC_B)),)
    frame = encode_msg(21, 4, BODY, flags, sequences)
    unchecked = encode_msg(21, 4, BODY, extra, sequences)
    assert len(frame) == len(unchecked) + 4
    assert struct.unpack_from("<i", frame)[0] == len(frame)
    assert frame[16:20] == struct.pack("<I", int(flags))
    assert frame[20:-4] == unchecked[20:]
    # The checksum covers everything before it, header included.
    assert frame[-4:] == struct.pack("<I", _reference_crc32c(frame[:-4]))
    assert decode_message(frame) == Msg(21, 4, flags, BODY, sequences)


def test_hand_built_checksummed_frame_is_accepted() -> None:
    frame = _with_checksum(_op_msg(_body(BODY) + _seq("d", DOC_A), int(MsgFlags.CHECKSUM_PRESENT)))
    assert decode_message(frame) == Msg(1, 0, MsgFlags.CHECKSUM_PRESENT, BODY, (("d", (DOC_A,)),))


@pytest.mark.parametrize("delta", [1, -1, 0x80000000, 0xFFFFFFFF])
def test_wrong_checksum_is_rejected(delta: int) -> None:
    frame = encode_msg(1, 0, BODY, MsgFlags.CHECKSUM_PRESENT)
    good = struct.unpack_from("<I", frame, len(frame) - 4)[0]
    bad = frame[:-4] + struct.pack("<I", (good + delta) & 0xFFFFFFFF)
    with pytest.raises(ProtocolError, match="checksum"):
        decode_message(bad)


def test_zero_checksum_is_rejected() -> None:
    frame = encode_msg(1, 0, BODY, MsgFlags.CHECKSUM_PRESENT)
    with pytest.raises(ProtocolError, match="checksum"):
        decode_message(frame[:-4] + bytes(4))


def test_any_corrupted_byte_in_a_checksummed_frame_is_rejected() -> None:
    frame = encode_msg(3, 0, BODY, MsgFlags.CHECKSUM_PRESENT, (("documents", (DOC_A,)),))
    for pos in range(len(frame)):
        for mask in (0x01, 0x80, 0xFF):
            corrupt = bytearray(frame)
            corrupt[pos] ^= mask
            with pytest.raises(ProtocolError):
                decode_message(bytes(corrupt))


@pytest.mark.parametrize("tail", [b"", b"\x00", b"\x00\x00", b"\x00\x00\x00"])
def test_checksum_flag_without_room_for_a_checksum_is_rejected(tail: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_message(_op_msg(tail, int(MsgFlags.CHECKSUM_PRESENT)))


def test_checksum_flag_on_an_unchecksummed_frame_is_rejected() -> None:
    # The last four bytes of the body get read as a checksum, which does not match.
    with pytest.raises(ProtocolError):
        decode_message(_op_msg(_body(BODY), int(MsgFlags.CHECKSUM_PRESENT)))


def test_correct_checksum_does_not_excuse_a_missing_body() -> None:
    frame = _with_checksum(_op_msg(b"", int(MsgFlags.CHECKSUM_PRESENT)))
    with pytest.raises(ProtocolError, match="no body"):
        decode_message(frame)


# --- malformed sections -----------------------------------------------------------------------


def test_no_body_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="no body"):
        decode_message(_op_msg(b""))
    with pytest.raises(ProtocolError, match="no body"):
        decode_message(_op_msg(_seq("documents", DOC_A)))


@pytest.mark.parametrize(
    "sections",
    [
        _body(BODY) + _body(BODY),
        _body(BODY) + _body(DOC_C),
        _body(BODY) + _seq("d", DOC_A) + _body(DOC_A),
    ],
)
def test_two_bodies_are_rejected(sections: bytes) -> None:
    with pytest.raises(ProtocolError, match="more than one body"):
        decode_message(_op_msg(sections))


@pytest.mark.parametrize("kind", [2, 3, 0x7F, 0x80, 0xFF])
def test_unknown_section_kind_is_rejected(kind: int) -> None:
    with pytest.raises(ProtocolError, match="kind"):
        decode_message(_op_msg(_body(BODY) + bytes([kind]) + DOC_A))
    with pytest.raises(ProtocolError, match="kind"):
        decode_message(_op_msg(bytes([kind]) + DOC_A + _body(BODY)))


@pytest.mark.parametrize("declared", [-(2**31), -1, 0, 4])
def test_body_length_below_minimum_document_is_rejected(declared: int) -> None:
    doc = struct.pack("<i", declared) + BODY[4:]
    with pytest.raises(ProtocolError):
        decode_message(_op_msg(_body(doc)))


@pytest.mark.parametrize("extra", [1, 2, 1000, 2**31 - 1 - len(BODY)])
def test_body_length_past_the_message_is_rejected(extra: int) -> None:
    doc = struct.pack("<i", len(BODY) + extra) + BODY[4:]
    with pytest.raises(ProtocolError, match="does not fit"):
        decode_message(_op_msg(_body(doc)))


def test_body_length_past_the_message_into_the_checksum_is_rejected() -> None:
    # The checksum is not part of the sections; a body that claims it must not fit.
    doc = struct.pack("<i", len(BODY) + 4) + BODY[4:]
    frame = _with_checksum(_op_msg(_body(doc), int(MsgFlags.CHECKSUM_PRESENT)))
    with pytest.raises(ProtocolError, match="does not fit"):
        decode_message(frame)


@pytest.mark.parametrize("cut", [1, 2, 4, 5, len(BODY) - 1])
def test_truncated_body_is_rejected(cut: int) -> None:
    with pytest.raises(ProtocolError):
        decode_message(_op_msg(_body(BODY[:cut])))


@pytest.mark.parametrize("size", [-(2**31), -1, 0, 1, 4])
def test_sequence_length_below_minimum_is_rejected(size: int) -> None:
    section = b"\x01" + struct.pack("<i", size) + b"d\x00" + DOC_A
    with pytest.raises(ProtocolError, match="sequence length"):
        decode_message(_op_msg(_body(BODY) + section))


@pytest.mark.parametrize("delta", [1, 2, 100, 2**30])
def test_sequence_length_past_the_message_is_rejected(delta: int) -> None:
    with pytest.raises(ProtocolError, match="does not fit"):
        decode_message(_op_msg(_body(BODY) + _seq("documents", DOC_A, DOC_B, size_delta=delta)))


def test_sequence_length_past_the_message_into_the_checksum_is_rejected() -> None:
    sections = _body(BODY) + _seq("documents", DOC_A, size_delta=4)
    frame = _with_checksum(_op_msg(sections, int(MsgFlags.CHECKSUM_PRESENT)))
    with pytest.raises(ProtocolError, match="does not fit"):
        decode_message(frame)


@pytest.mark.parametrize("delta", [-1, -2, -(len(DOC_B) - 1)])
def test_sequence_length_cutting_its_last_document_is_rejected(delta: int) -> None:
    # The sequence ends inside DOC_B; the bytes after it would otherwise parse as another section.
    sections = _body(BODY) + _seq("documents", DOC_A, DOC_B, size_delta=delta)
    with pytest.raises(ProtocolError):
        decode_message(_op_msg(sections))


def test_sequence_document_longer_than_its_sequence_is_rejected() -> None:
    long_doc = struct.pack("<i", len(DOC_A) + 1) + DOC_A[4:]
    # The sequence is followed by another sequence, so the message has room for the overrun.
    sections = _body(BODY) + _seq("documents", long_doc) + _seq("more", DOC_B)
    with pytest.raises(ProtocolError, match="does not fit"):
        decode_message(_op_msg(sections))


@pytest.mark.parametrize("declared", [-1, 0, 4])
def test_sequence_document_length_below_minimum_is_rejected(declared: int) -> None:
    doc = struct.pack("<i", declared) + DOC_A[4:]
    with pytest.raises(ProtocolError):
        decode_message(_op_msg(_body(BODY) + _seq("documents", doc)))


@pytest.mark.parametrize("junk", [b"\x00", b"\x05\x00\x00", b"\x05\x00\x00\x00"])
def test_sequence_with_bytes_too_few_for_a_document_is_rejected(junk: bytes) -> None:
    ident_b = b"documents\x00"
    payload = DOC_A + junk
    section = b"\x01" + struct.pack("<i", 4 + len(ident_b) + len(payload)) + ident_b + payload
    with pytest.raises(ProtocolError, match="truncated"):
        decode_message(_op_msg(_body(BODY) + section))


@pytest.mark.parametrize("tail", [b"\x01", b"\x01\x10", b"\x01\x10\x00\x00"])
def test_sequence_header_cut_off_by_end_of_message_is_rejected(tail: bytes) -> None:
    with pytest.raises(ProtocolError, match="sequence"):
        decode_message(_op_msg(_body(BODY) + tail))


def test_sequence_identifier_without_terminator_is_rejected() -> None:
    # Size covers only "docu": the NUL lies outside the sequence.
    section = b"\x01" + struct.pack("<i", 8) + b"documents\x00" + DOC_A
    with pytest.raises(ProtocolError):
        decode_message(_op_msg(_body(BODY) + section))
    # Nothing but the identifier, and no NUL at all.
    section = b"\x01" + struct.pack("<i", 9) + b"docs\x01"
    with pytest.raises(ProtocolError, match="unterminated"):
        decode_message(_op_msg(_body(BODY) + section))


def test_sequence_identifier_that_is_not_utf8_is_rejected() -> None:
    ident_b = b"\xff\xfe\x00"
    section = b"\x01" + struct.pack("<i", 4 + len(ident_b) + len(DOC_A)) + ident_b + DOC_A
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_message(_op_msg(_body(BODY) + section))


def test_every_truncation_of_a_sequence_is_rejected() -> None:
    """Cut the message anywhere inside the sequence and fix the header length to match: only the
    section parser can notice."""
    head = _body(BODY)
    seq = _seq("documents", DOC_A, DOC_B)
    for cut in range(1, len(seq)):
        with pytest.raises(ProtocolError):
            decode_message(_op_msg(head + seq[:cut]))
    assert decode_message(_op_msg(head + seq)) == Msg(
        1, 0, MsgFlags.NONE, BODY, (("documents", (DOC_A, DOC_B)),)
    )


def test_every_truncation_of_a_checksummed_message_is_rejected() -> None:
    sections = _body(BODY) + _seq("documents", DOC_A)
    for cut in range(len(sections) + 4):
        frame = _op_msg(sections[:cut], int(MsgFlags.CHECKSUM_PRESENT))
        with pytest.raises(ProtocolError):
            decode_message(frame)


@pytest.mark.parametrize("flags", [0, 0x10000])
def test_flags_cut_short_is_rejected(flags: int) -> None:
    frame = _op_msg(b"", flags)
    for cut in range(16, 20):
        short = struct.pack("<i", cut) + frame[4:cut]
        with pytest.raises(ProtocolError):
            decode_message(short)
