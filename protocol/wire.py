"""The MongoDB wire format: the 16-byte header, OP_MSG, and the legacy OP_QUERY/OP_REPLY pair.

Documents stay as raw BSON bytes here: this layer checks framing (lengths that add up, section kinds,
the checksum) and leaves decoding a document to whoever needs its contents.
"""

from __future__ import annotations

import enum
import mmap
import struct
from dataclasses import dataclass

from ebbdb.protocol.crc32c import crc32c

HEADER_SIZE = 16
MIN_MESSAGE_SIZE = HEADER_SIZE
#: MongoDB's maxMessageSizeBytes: the largest message either side may send.
MAX_MESSAGE_SIZE = 48_000_000
#: The smallest BSON document: int32 length + terminating NUL.
_MIN_DOC_SIZE = 5

_HEADER = struct.Struct("<iiii")
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")
_QUERY_FIXED = struct.Struct("<ii")  # numberToSkip, numberToReturn
_REPLY_FIXED = struct.Struct("<iqii")  # responseFlags, cursorID, startingFrom, numberReturned


class ProtocolError(Exception):
    """The bytes are not a well-formed wire message; the connection that sent them must be closed.
    Raised by FrameDecoder.feed, `frames` holds the whole messages that came before the broken one
    in the bytes fed: they still deserve their replies before the connection closes."""

    def __init__(self, *args: object, frames: list[bytes] | None = None) -> None:
        super().__init__(*args)
        self.frames: list[bytes] = frames or []


class OpCode(enum.IntEnum):
    REPLY = 1
    QUERY = 2004
    COMPRESSED = 2012
    MSG = 2013


class MsgFlags(enum.IntFlag):
    NONE = 0
    CHECKSUM_PRESENT = 1 << 0
    MORE_TO_COME = 1 << 1
    EXHAUST_ALLOWED = 1 << 16


_OP_MSG = int(OpCode.MSG)
#: What precedes the body of an OP_MSG with no flags: the flags and the body's section kind.
_BODY_ONLY = b"\x00\x00\x00\x00\x00"
_OP_QUERY = int(OpCode.QUERY)

# Bits 0-15 of OP_MSG flags are "required": a receiver must reject a message with one it doesn't know.
_KNOWN_REQUIRED = int(MsgFlags.CHECKSUM_PRESENT | MsgFlags.MORE_TO_COME)
_REQUIRED_MASK = 0xFFFF
_KNOWN = _KNOWN_REQUIRED | int(MsgFlags.EXHAUST_ALLOWED)
_CHECKSUM = int(MsgFlags.CHECKSUM_PRESENT)
_MORE_TO_COME = int(MsgFlags.MORE_TO_COME)
_EXHAUST = int(MsgFlags.EXHAUST_ALLOWED)
# Flag combinations built once: making an IntFlag per message is slow on the hot path. Only the
# eight subsets of the known bits, rather than a scan of all 65,540 numbers up to them at import.
_FLAG_VALUES = {
    c | m | e: MsgFlags(c | m | e)
    for c in (0, _CHECKSUM)
    for m in (0, _MORE_TO_COME)
    for e in (0, _EXHAUST)
}


@dataclass(frozen=True, slots=True)
class Header:
    message_length: int
    request_id: int
    response_to: int
    op_code: int


@dataclass(frozen=True, slots=True)
class Msg:
    """OP_MSG: one kind-0 body and any number of kind-1 document sequences, all as raw BSON."""

    request_id: int
    response_to: int
    flags: MsgFlags
    body: bytes
    sequences: tuple[tuple[str, tuple[bytes, ...]], ...] = ()

    @property
    def more_to_come(self) -> bool:
        return bool(int(self.flags) & _MORE_TO_COME)

    @property
    def exhaust_allowed(self) -> bool:
        return bool(int(self.flags) & int(MsgFlags.EXHAUST_ALLOWED))


@dataclass(frozen=True, slots=True)
class Query:
    """Legacy OP_QUERY; ebbdb accepts it only for the first handshake on `<db>.$cmd`."""

    request_id: int
    response_to: int
    flags: int
    full_collection_name: str
    number_to_skip: int
    number_to_return: int
    query: bytes
    return_fields_selector: bytes | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """Legacy OP_REPLY, the answer to an OP_QUERY."""

    request_id: int
    response_to: int
    response_flags: int
    cursor_id: int
    starting_from: int
    documents: tuple[bytes, ...]


def _check_length(length: int) -> None:
    if length < MIN_MESSAGE_SIZE:
        raise ProtocolError(f"message length {length} is below the {MIN_MESSAGE_SIZE}-byte header")
    if length > MAX_MESSAGE_SIZE:
        raise ProtocolError(
            f"message length {length} exceeds the maximum of {MAX_MESSAGE_SIZE} bytes"
        )


#: A message longer than this is received into an anonymous memory map of its announced length:
#: its pages take memory only as bytes arrive, and all of it goes back to the system when the
#: message is whole (a buffer grown as bytes arrive would leave the process holding several
#: times the message in freed, fragmented memory).
_PREALLOCATE = 1024 * 1024


class FrameDecoder:
    """Cuts a byte stream into whole messages. Feed it whatever arrived; it returns complete frames.

    `feed` raises ProtocolError as soon as a header announces an impossible length, before waiting
    for the rest, so an oversized message never gets buffered; the error's `frames` are the whole
    messages before it. A large message is received into one buffer of its announced size.
    """

    __slots__ = ("_buf", "_big", "_fill")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._big: mmap.mmap | None = None  # a large message being received
        self._fill = 0  # bytes of it received

    @property
    def pending(self) -> int:
        """Bytes received that are not yet part of a whole message."""
        return self._fill if self._big is not None else len(self._buf)

    @property
    def incomplete_length(self) -> int:
        """The length the message being received announces (what it will hold once whole), or
        the bytes received of it while its length has not arrived; 0 between messages."""
        if self._big is not None:
            return len(self._big)
        buf = self._buf
        return _INT32.unpack_from(buf)[0] if len(buf) >= 4 else len(buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self._big is not None:
            return self._feed_large(data)
        buf = self._buf
        if not buf and len(data) >= 4:
            # Fast path: the chunk holds exactly one message, as it does for nearly every request.
            length = _INT32.unpack_from(data)[0]
            if length == len(data):
                _check_length(length)
                return [bytes(data)]
        buf += data
        frames: list[bytes] = []
        pos = 0
        while len(buf) - pos >= 4:
            length = _INT32.unpack_from(buf, pos)[0]
            try:
                _check_length(length)
            except ProtocolError as exc:
                exc.frames = frames
                raise
            if len(buf) - pos < length:
                if length > _PREALLOCATE:
                    big = mmap.mmap(-1, length)
                    got = len(buf) - pos
                    big[:got] = buf[pos:]
                    self._big, self._fill = big, got
                    self._buf = bytearray()
                    return frames
                break
            frames.append(bytes(buf[pos : pos + length]))
            pos += length
        if pos:
            del buf[:pos]
        return frames

    def clear(self) -> None:
        """Drop what was received of an incomplete message (its connection is gone)."""
        if self._big is not None:
            self._big.close()
        self._big, self._fill, self._buf = None, 0, bytearray()

    def _feed_large(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        big = self._big
        assert big is not None
        fill = self._fill
        n = min(len(big) - fill, len(data))
        view = memoryview(data)
        big[fill : fill + n] = view[:n]
        fill += n
        if fill < len(big):
            self._fill = fill
            return []
        self._big, self._fill = None, 0
        frames = [big[:]]
        big.close()
        if n < len(data):
            try:
                frames += self.feed(view[n:])
            except ProtocolError as exc:
                exc.frames = frames + exc.frames
                raise
        return frames


def _cstring(data: bytes, pos: int, end: int) -> tuple[str, int]:
    nul = data.find(b"\x00", pos, end)
    if nul < 0:
        raise ProtocolError("unterminated string")
    try:
        return data[pos:nul].decode("utf-8"), nul + 1
    except UnicodeDecodeError as exc:
        raise ProtocolError("string is not valid UTF-8") from exc


def _document(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    """Slice one BSON document by its length prefix; its contents are not inspected."""
    if end - pos < _MIN_DOC_SIZE:
        raise ProtocolError("truncated document")
    size = _INT32.unpack_from(data, pos)[0]
    if size < _MIN_DOC_SIZE or size > end - pos:
        raise ProtocolError(f"document length {size} does not fit in the message")
    return data[pos : pos + size], pos + size


def decode_header(frame: bytes) -> Header:
    if len(frame) < HEADER_SIZE:
        raise ProtocolError(f"message of {len(frame)} bytes is shorter than the header")
    return Header(*_HEADER.unpack_from(frame))


def decode_message(frame: bytes) -> Msg | Query:
    """Parse one whole frame (as FrameDecoder returns it). Raises ProtocolError for anything malformed,
    including an unsupported opcode, a wrong checksum, or bytes left over after the last section."""
    if len(frame) < HEADER_SIZE:
        raise ProtocolError(f"message of {len(frame)} bytes is shorter than the header")
    # The header's fields as plain ints: this runs once per request, and a Header object per
    # request costs more than the rest of the header's checks together.
    length, request_id, response_to, op_code = _HEADER.unpack_from(frame)
    _check_length(length)
    if length != len(frame):
        raise ProtocolError(f"header says {length} bytes but the frame has {len(frame)}")
    if op_code == _OP_MSG:
        return _decode_msg(request_id, response_to, frame)
    if op_code == _OP_QUERY:
        return _decode_query(request_id, response_to, frame)
    raise ProtocolError(f"unsupported opcode {op_code}")


def _decode_msg(request_id: int, response_to: int, frame: bytes) -> Msg:
    end = len(frame)
    if end < HEADER_SIZE + 4:
        raise ProtocolError("OP_MSG too short for its flags")
    raw_flags = _UINT32.unpack_from(frame, HEADER_SIZE)[0]
    unknown_required = raw_flags & _REQUIRED_MASK & ~_KNOWN_REQUIRED
    if unknown_required:
        raise ProtocolError(f"OP_MSG has unknown required flag bits {unknown_required:#x}")
    flags = _FLAG_VALUES[raw_flags & _KNOWN]
    if raw_flags & _CHECKSUM:
        if end < HEADER_SIZE + 4 + 4:
            raise ProtocolError("OP_MSG too short for its checksum")
        end -= 4
        expected = _UINT32.unpack_from(frame, end)[0]
        if crc32c(memoryview(frame)[:end]) != expected:
            raise ProtocolError("OP_MSG checksum mismatch")
    pos = HEADER_SIZE + 4
    body: bytes | None = None
    sequences: list[tuple[str, tuple[bytes, ...]]] = []
    while pos < end:
        kind = frame[pos]
        pos += 1
        if kind == 0:
            if body is not None:
                raise ProtocolError("OP_MSG has more than one body section")
            body, pos = _document(frame, pos, end)
        elif kind == 1:
            if end - pos < 4:
                raise ProtocolError("truncated document sequence")
            size = _INT32.unpack_from(frame, pos)[0]
            if size < 5 or size > end - pos:
                raise ProtocolError(f"document sequence length {size} does not fit in the message")
            seq_end = pos + size
            ident, p = _cstring(frame, pos + 4, seq_end)
            docs = []
            # _document inlined: an insert_many's sequence holds 100,000 documents or more.
            unpack = _INT32.unpack_from
            while p < seq_end:
                if seq_end - p < _MIN_DOC_SIZE:
                    raise ProtocolError("truncated document")
                doc_size = unpack(frame, p)[0]
                if doc_size < _MIN_DOC_SIZE or doc_size > seq_end - p:
                    raise ProtocolError(f"document length {doc_size} does not fit in the message")
                docs.append(frame[p : p + doc_size])
                p += doc_size
            sequences.append((ident, tuple(docs)))
            pos = seq_end
        else:
            raise ProtocolError(f"OP_MSG section kind {kind} is not supported")
    if body is None:
        raise ProtocolError("OP_MSG has no body section")
    return Msg(request_id, response_to, flags, body, tuple(sequences))


def _decode_query(request_id: int, response_to: int, frame: bytes) -> Query:
    end = len(frame)
    pos = HEADER_SIZE
    if end - pos < 4:
        raise ProtocolError("OP_QUERY too short")
    flags = _INT32.unpack_from(frame, pos)[0]
    name, pos = _cstring(frame, pos + 4, end)
    if end - pos < _QUERY_FIXED.size:
        raise ProtocolError("OP_QUERY too short")
    skip, to_return = _QUERY_FIXED.unpack_from(frame, pos)
    query, pos = _document(frame, pos + _QUERY_FIXED.size, end)
    selector = None
    if pos < end:
        selector, pos = _document(frame, pos, end)
    if pos != end:
        raise ProtocolError("OP_QUERY has trailing bytes")
    return Query(request_id, response_to, flags, name, skip, to_return, query, selector)


def _frame(request_id: int, response_to: int, op: OpCode, payload: bytes) -> bytes:
    length = HEADER_SIZE + len(payload)
    _check_length(length)
    return _HEADER.pack(length, request_id, response_to, op) + payload


def msg_prefix(request_id: int, response_to: int, body_length: int) -> bytes:
    """What comes before the body of an OP_MSG with no flags and no document sequences: the
    frame is this, then the body's `body_length` bytes (a large reply is written in parts)."""
    length = HEADER_SIZE + 5 + body_length
    _check_length(length)
    return _HEADER.pack(length, request_id, response_to, _OP_MSG) + _BODY_ONLY


def encode_msg(
    request_id: int,
    response_to: int,
    body: bytes,
    flags: MsgFlags = MsgFlags.NONE,
    sequences: tuple[tuple[str, tuple[bytes, ...]], ...] = (),
) -> bytes:
    """Frame an OP_MSG; with CHECKSUM_PRESENT in `flags` the CRC-32C is appended."""
    iflags = int(flags)
    if not iflags and not sequences:
        # Nearly every reply: a body alone, no flags.
        return msg_prefix(request_id, response_to, len(body)) + body
    parts = [_UINT32.pack(iflags), b"\x00", body]
    for ident, docs in sequences:
        ident_b = ident.encode("utf-8") + b"\x00"
        payload = b"".join(docs)
        parts += [b"\x01", _INT32.pack(4 + len(ident_b) + len(payload)), ident_b, payload]
    if iflags & _CHECKSUM:
        head = _HEADER.pack(
            HEADER_SIZE + sum(map(len, parts)) + 4, request_id, response_to, OpCode.MSG
        )
        parts.append(_UINT32.pack(crc32c(head + b"".join(parts))))
    return _frame(request_id, response_to, OpCode.MSG, b"".join(parts))


def encode_msg_from(message: Msg) -> bytes:
    return encode_msg(
        message.request_id, message.response_to, message.body, message.flags, message.sequences
    )


def encode_query(query: Query) -> bytes:
    payload = (
        _INT32.pack(query.flags)
        + query.full_collection_name.encode("utf-8")
        + b"\x00"
        + _QUERY_FIXED.pack(query.number_to_skip, query.number_to_return)
        + query.query
        + (query.return_fields_selector or b"")
    )
    return _frame(query.request_id, query.response_to, OpCode.QUERY, payload)


def encode_reply(reply: Reply) -> bytes:
    payload = _REPLY_FIXED.pack(
        reply.response_flags, reply.cursor_id, reply.starting_from, len(reply.documents)
    ) + b"".join(reply.documents)
    return _frame(reply.request_id, reply.response_to, OpCode.REPLY, payload)


def decode_reply(frame: bytes) -> Reply:
    """Parse an OP_REPLY (what a server sends; used by tests and tools that play the client)."""
    header = decode_header(frame)
    if header.op_code != OpCode.REPLY or header.message_length != len(frame):
        raise ProtocolError("not a whole OP_REPLY")
    if len(frame) < HEADER_SIZE + _REPLY_FIXED.size:
        raise ProtocolError("OP_REPLY too short")
    rflags, cursor_id, start, count = _REPLY_FIXED.unpack_from(frame, HEADER_SIZE)
    pos = HEADER_SIZE + _REPLY_FIXED.size
    docs = []
    while pos < len(frame):
        doc, pos = _document(frame, pos, len(frame))
        docs.append(doc)
    if len(docs) != count:
        raise ProtocolError(f"OP_REPLY says {count} documents but holds {len(docs)}")
    return Reply(header.request_id, header.response_to, rflags, cursor_id, start, tuple(docs))


__all__ = [
    "HEADER_SIZE",
    "MAX_MESSAGE_SIZE",
    "MIN_MESSAGE_SIZE",
    "FrameDecoder",
    "Header",
    "Msg",
    "MsgFlags",
    "OpCode",
    "ProtocolError",
    "Query",
    "Reply",
    "decode_header",
    "decode_message",
    "decode_reply",
    "encode_msg",
    "msg_prefix",
    "encode_msg_from",
    "encode_query",
    "encode_reply",
]
