"""End-to-end fuzzing: hypothesis sends random and mutated frames and command documents over raw
sockets to one real server, more than 10,000 frames a run. Every reply must be a well-formed
OP_MSG (or OP_REPLY) whose document has `ok`, and for ok: 0 an int `code`, a string `errmsg` and
`codeName`; never InternalError (1); or the server closes the connection (broken framing), but
only once every request before the broken frame has its reply. Values of odd types (JavaScript
code above all) go where names are expected: databases, collections, indexes, fields. The server
never dies, never logs an error or a traceback, and a pymongo client on its own connection reads
its known document back after every example. Derandomized, so a run is the same every time.

Not fuzzed: `shutdown` (it would end the run) and `fsync` (its `lock` stops every write)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import random
import socket
import struct
from collections.abc import Iterator
from typing import Any

import bson
import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo import MongoClient

from ebbdb.protocol import (
    HEADER_SIZE,
    MAX_MESSAGE_SIZE,
    Msg,
    MsgFlags,
    OpCode,
    ProtocolError,
    Query,
    decode_message,
    decode_reply,
    encode_msg,
    encode_query,
)
from ebbdb.server.arguments import COMMAND_VALUE
from ebbdb.server.embedded import ServerThread
from ebbdb.server.registry import REGISTRY
from tests.e2e.rawwire import connect, next_request_id

#: At least this many fuzzed frames per run (the sentinel pings are not counted).
MIN_FRAMES = 10_000
EXAMPLES = 520
#: The request id of the ping after a run's frames: none of theirs (a mutated frame's id is a bit
#: or a byte away from the counter's, which a counter's next id could be).
SENTINEL_ID = 0x7ABCDEF0
#: A reply that takes longer than this means a hang.
READ_TIMEOUT = 20.0
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")

# -- what is sent ----------------------------------------------------------------------------------

_SKIPPED = {"shutdown", "fsync"}
COMMANDS = sorted({name for c in REGISTRY.commands() for name in (c.name, *c.aliases)} - _SKIPPED)


def _fields(params: type, seen: set[type]) -> set[str]:
    """The BSON field names a params class (and the classes of its nested documents) declares."""
    if params in seen or not dataclasses.is_dataclass(params):
        return set()
    seen.add(params)
    names: set[str] = set()
    for f in dataclasses.fields(params):
        a = f.metadata.get("arg")
        if a is None:
            continue
        if a.name != COMMAND_VALUE and not a.name.startswith("$rest"):
            names.add(a.name)
        if a.of is not None:
            names |= _fields(a.of, seen)
    return names


#: Each command's own fields, and whether it runs on admin only.
OWN_FIELDS = {
    name: (sorted(_fields(c.params, set())) or ["x"], c.admin_only)
    for c in REGISTRY.commands()
    for name in (c.name, *c.aliases)
}
FIELD_NAMES = sorted(
    {n for c in REGISTRY.commands() for n in _fields(c.params, set())}
    | {"$db", "lsid", "txnNumber", "autocommit", "startTransaction", "$readPreference"}
)
OPERATORS = [
    "$gt", "$lt", "$in", "$eq", "$ne", "$exists", "$type", "$regex", "$options", "$elemMatch",
    "$all", "$size", "$mod", "$not", "$and", "$or", "$nor", "$expr", "$where", "$text",
    "$set", "$unset", "$inc", "$push", "$pull", "$addToSet", "$rename", "$min", "$max",
    "$currentDate", "$setOnInsert", "$pop", "$each", "$position", "$slice", "$sort", "$bit",
    "$match", "$group", "$project", "$limit", "$skip", "$unwind", "$lookup", "$addFields",
    "$count", "$facet", "$bucket", "$sortByCount", "$replaceRoot", "$sum", "$avg", "$first",
    "$concat", "$substr", "$cond", "$ifNull", "$map", "$filter", "$reduce", "$range", "$let",
    "$literal", "$toString", "$dateToString", "$jsonSchema", "$meta", "$$ROOT", "$a", "$a.b",
    "a", "a.b", "a.$", "a.$[]", "a.$[x]", "_id", "", ".", "$", "x" * 200,
]  # fmt: skip
KEYS = st.one_of(
    st.sampled_from(FIELD_NAMES),
    st.sampled_from(OPERATORS),
    # No lone surrogates: they are not UTF-8, so no client can send them (bson refuses them).
    st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=8),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1).map(Int64),
    st.floats(),
    st.sampled_from([0, 1, -1, 0.5, 2**53, 16 * 1024 * 1024, 2**31 - 1, -(2**31)]),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=20),
    st.sampled_from(["c", "fuzz", "system.profile", "a.b", "$x", "", "admin", "fuzz.c"]),
    st.binary(max_size=20).map(Binary),
    st.builds(ObjectId, st.binary(min_size=12, max_size=12)),
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31)),
    st.builds(Timestamp, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    st.builds(Regex, st.sampled_from(["a", "^(a+)+$", "[", "x*", "\\"]), st.text("imsxu")),
    st.sampled_from([MinKey(), MaxKey(), Decimal128("1.5"), Decimal128("NaN")]),
    # JavaScript where a name is expected: pymongo's Code is a str subclass.
    st.builds(Code, st.sampled_from(["c", "fuzz", "a_1", "$a", "admin"])),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def commands(draw: st.DrawFn) -> bytes:
    """A command document: a registered name first, then random and real fields."""
    doc: dict[str, Any] = {draw(st.sampled_from(COMMANDS)): draw(VALUES)}
    for _ in range(draw(st.integers(0, 4))):
        doc[draw(KEYS)] = draw(VALUES)
    if draw(st.integers(0, 9)):
        doc["$db"] = draw(st.sampled_from(["fuzz", "admin", "test", "local", ""]) | SCALARS)
    return bson.encode(doc)


# Most frames come from a Random that hypothesis hands out (derandomized like the rest): drawing
# every value through hypothesis costs milliseconds a frame, and the run must send ten thousand.

_DBS = ["fuzz", "fuzz", "admin", "test", "local", "", "$x", "a.b", "x" * 70, Code("fuzz"), 5]
_NAMES = ["c", "c", "fuzz", "system.profile", "system.views", "a.b", "$x", "", "x" * 300]
#: Names that are not strings: JavaScript above all (a str subclass in pymongo).
_ODD_NAMES = [Code("c"), Code("c", {"x": 1}), Code("a_1"), Code("$a"), Code("a.b")]
_TEXT = ["", "a", "é", "\ud7ff", "^(a+)+$", "[", "$a", "$$ROOT", "a.b", "x" * 2000]


def _scalar(rng: random.Random) -> Any:
    return rng.choice(
        [
            lambda: None,
            lambda: rng.random() < 0.5,
            lambda: rng.choice([0, 1, -1, 2, 100, 2**31 - 1, -(2**31)]),
            lambda: Int64(rng.choice([0, -1, 2**63 - 1, -(2**63), 10**12])),
            lambda: rng.choice([0.5, -0.0, float("inf"), float("-inf"), float("nan"), 1e308]),
            lambda: rng.choice(_TEXT + _NAMES),
            lambda: rng.choice(_ODD_NAMES),
            lambda: Binary(rng.randbytes(rng.randrange(20)), rng.choice([0, 3, 4, 5, 128])),
            lambda: ObjectId(rng.randbytes(12)),
            lambda: datetime.datetime(1970, 1, 1) + datetime.timedelta(days=rng.randrange(-1, 9)),
            lambda: Timestamp(rng.randrange(2**32), rng.randrange(2**32)),
            lambda: Regex(
                rng.choice(["a", "^(a+)+$", "[", "x*"]), rng.choice(["", "i", "z", "ms"])
            ),
            lambda: rng.choice([MinKey(), MaxKey(), Decimal128("1.5"), Decimal128("-Infinity")]),
        ]
    )()


def _key(rng: random.Random) -> str:
    pool = rng.choice([FIELD_NAMES, OPERATORS, OPERATORS, _TEXT])
    return rng.choice(pool)


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.55:
        return _scalar(rng)
    if roll < 0.75:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {_key(rng): _value(rng, depth + 1) for _ in range(rng.randrange(4))}


_DOC_FIELDS = {"filter", "query", "q", "u", "projection", "sort", "update", "hint", "let", "key"}
_DOCS_FIELDS = {"pipeline", "documents", "updates", "deletes", "indexes", "arrayFilters"}
_STATEMENT_KEYS = ["q", "u", "limit", "multi", "upsert", "key", "name", "arrayFilters", "hint"]


def _filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A document shaped like a filter, an update or a stage: operators and paths as keys."""
    keys = OPERATORS if rng.random() < 0.6 else ["a", "b", "_id", "a.b", "n"]
    return {
        rng.choice(keys): _filter(rng, depth + 1) if depth < 2 and rng.random() < 0.4 else
        _value(rng, depth + 1)
        for _ in range(rng.randrange(1, 4))
    }  # fmt: skip


def _field_value(rng: random.Random, field: str) -> Any:
    """A value for `field`: a plausible shape most of the time, so that commands get past
    their argument checks into the query engine."""
    if rng.random() < 0.2:
        return _value(rng)
    if field in _DOC_FIELDS:
        return _filter(rng)
    if field in _DOCS_FIELDS:
        statement = rng.random() < 0.5
        return [
            {
                k: rng.choice(["a_1", *_ODD_NAMES, 5]) if k == "name" else _filter(rng)
                for k in rng.sample(_STATEMENT_KEYS, rng.randint(1, 3))
            }
            if statement
            else _filter(rng)
            for _ in range(rng.randint(1, 3))
        ]
    return _value(rng)


def _command(rng: random.Random) -> bytes:
    name = rng.choice(COMMANDS)
    own, admin_only = OWN_FIELDS[name]
    value = rng.choice(["c", "c", "fuzz", 1, 1, Code("c")]) if rng.random() < 0.8 else _value(rng)
    doc: dict[str, Any] = {name: value}
    for _ in range(rng.randrange(5)):
        field = rng.choice(own) if rng.random() < 0.8 else _key(rng)
        doc[field] = _field_value(rng, field)
    if rng.random() < 0.9:
        doc["$db"] = "admin" if admin_only else "fuzz" if rng.random() < 0.8 else rng.choice(_DBS)
    return bson.encode(doc)


def _nested(depth: int, kind: int) -> bytes:
    """A document nested `depth` levels deep (objects, or arrays for kind 4), built as bytes so
    that no Python recursion limit caps it."""
    doc = b"\x05\x00\x00\x00\x00"
    for _ in range(depth):
        element = bytes([kind]) + b"0\x00" + doc
        doc = _INT32.pack(len(element) + 5) + element + b"\x00"
    return doc


def _deep(rng: random.Random) -> bytes:
    """An insert, find, update or aggregate carrying a document nested deeper than BSON allows
    (or nearly)."""
    inner = _nested(rng.choice([99, 100, 101, 150, 400, 1000]), rng.choice([3, 4]))
    name, field, kind = rng.choice(
        [
            ("insert", "documents", 4),
            ("find", "filter", 3),
            ("aggregate", "pipeline", 4),
            ("count", "query", 3),
            ("update", "updates", 4),
        ]
    )
    if kind == 4:  # an array whose element 0 is the nested document
        inner = _INT32.pack(len(inner) + 8) + b"\x030\x00" + inner + b"\x00"
    body = bson.encode({name: "deep", "$db": "fuzz"})[4:-1]
    body += bytes([kind]) + field.encode() + b"\x00" + inner
    return _INT32.pack(len(body) + 5) + body + b"\x00"


def _mutate(rng: random.Random, doc: bytes, framed: bool = False) -> bytes:
    """`doc` with a few bytes changed: a bit flipped, a byte set to 0xff (invalid UTF-8 in a
    string, a bad type byte), cut short, or garbage put in. `framed`: its length prefix then
    says its new length (the message parses, the document inside is broken)."""
    data = bytearray(doc)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(max(1, len(data)))
        op = rng.randrange(4)
        if op == 0 and data:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and data:
            data[i] = 0xFF
        elif op == 2:
            del data[i:]
        else:
            data[i:i] = rng.randbytes(rng.randint(1, 4))
    if framed and len(data) >= 5:
        data[0:4] = _INT32.pack(len(data))
    return bytes(data)


def _body(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.6:
        return _command(rng)
    if roll < 0.9:
        return _mutate(rng, _command(rng), framed=rng.random() < 0.9)
    return _deep(rng)


def _command_frame(rng: random.Random, body: bytes | None = None) -> bytes:
    """A well-framed OP_MSG carrying a command (maybe broken inside), sometimes with a document
    sequence or flags, or a legacy OP_QUERY."""
    rid = next_request_id()
    body = _body(rng) if body is None else body
    if rng.random() < 0.06:
        ns = rng.choice(["admin.$cmd", "fuzz.$cmd", "fuzz.c", "x"])
        return encode_query(Query(rid, 0, rng.choice([0, 4, 32]), ns, 0, -1, body))
    sequences: tuple[tuple[str, tuple[bytes, ...]], ...] = ()
    if rng.random() < 0.15:
        ident = rng.choice(["documents", "updates", "deletes", "x", "$db", ""])
        sequences = ((ident, tuple(_command(rng) for _ in range(rng.randrange(3)))),)
    flags = rng.choice([0, 0, 0, 0, 1, 2, 1 << 16, 3])  # checksum, moreToCome, exhaust
    return encode_msg(rid, 0, body, MsgFlags(flags), sequences)


def _broken_frame(rng: random.Random) -> bytes:
    """A frame with its framing changed: length, opcode, flags, section kind, truncation, or
    plain random bytes."""
    frame = bytearray(_command_frame(rng))
    what = rng.randrange(7)
    if what == 0:
        lengths = [0, 4, 15, 16, 20, MAX_MESSAGE_SIZE + 1, -1, 2**31 - 1]
        frame[0:4] = _INT32.pack(rng.choice([*lengths, rng.randint(16, len(frame) + 8)]))
    elif what == 1:
        ops = [1, 2001, 2002, 2004, 2005, 2006, 2007, 2010, 2012, 2013, 0, -1]
        frame[12:16] = _INT32.pack(rng.choice([*ops, rng.randint(-(2**31), 2**31 - 1)]))
    elif what == 2 and len(frame) >= 20:
        frame[16:20] = _UINT32.pack(rng.randrange(2**32))
    elif what == 3 and len(frame) > 20:
        frame[20] = rng.randrange(256)
    elif what == 4:
        frame = frame[: rng.randrange(len(frame))]
    elif what == 5:
        frame = bytearray(rng.randbytes(rng.randint(1, 64)))
    else:
        frame = bytearray(_mutate(rng, bytes(frame)))
    return bytes(frame)


# -- the server, the observer, the checks ----------------------------------------------------------


class _Errors(logging.Handler):
    """Every error (or traceback) the server logs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())

    def handle(self, record: logging.LogRecord) -> bool:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.emit(record)
        return True


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    srv = ServerThread(str(tmp_path_factory.mktemp("fuzz") / "data")).start()
    yield srv
    srv.stop()


class Run:
    """The counts and checks of one fuzzing run against `server`."""

    KNOWN = {"_id": 1, "name": "known", "n": [1, 2, 3]}

    def __init__(self, server: ServerThread) -> None:
        self.server = server
        self.frames = 0
        self.replies = 0
        self.closed = 0
        self.client: MongoClient[dict[str, Any]] = MongoClient(
            server.uri, serverSelectionTimeoutMS=10_000, retryReads=False, retryWrites=False
        )
        self.known = self.client.fuzzobserver.known
        self.known.insert_one(dict(self.KNOWN))

    def observe(self) -> None:
        assert self.known.find_one({"_id": 1}) == self.KNOWN

    def send(self, frames: list[bytes], before_break: int | None = None) -> None:
        """Send the frames on a new connection and check whatever comes back; the first
        `before_break` frames (all, when None) must each get their reply, but for those sent
        with moreToCome."""
        stream = b"".join(frames)
        sentinel = SENTINEL_ID
        aligned = _aligned(stream)
        if aligned:  # the server reads every frame whole: a ping after them shows it is done
            stream += encode_msg(sentinel, 0, bson.encode({"ping": 1, "$db": "admin"}))
        with connect(self.server.port, READ_TIMEOUT) as sock:
            try:
                sock.sendall(stream)
                if not aligned:  # a frame is cut short: end the stream, the server must close
                    sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed already for a frame it refused
            self.frames += len(frames)
            answered = self._check_replies(sock, sentinel if aligned else None, frames)
        due = {_request_id(f) for f in _before_a_break(frames[:before_break]) if _wants_reply(f)}
        assert due <= answered, f"no reply to {sorted(due - answered)} in {frames!r:.3000}"

    def _check_replies(
        self, sock: socket.socket, sentinel: int | None, sent: list[bytes]
    ) -> set[int]:
        """What the replies respond to, up to the sentinel's or the server's close."""
        answered: set[int] = set()
        buf = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            except TimeoutError:
                pytest.fail(f"no reply nor close in {READ_TIMEOUT} s after {sent!r:.2000}")
            if not chunk:
                assert buf == b"", f"a reply cut short: {buf!r:.300}"
                self.closed += 1
                return answered
            buf += chunk
            while len(buf) >= 4 and len(buf) >= _INT32.unpack_from(buf)[0]:
                length = _INT32.unpack_from(buf)[0]
                assert length >= HEADER_SIZE
                frame, buf = buf[:length], buf[length:]
                response_to = _check_reply(frame, sent)
                answered.add(response_to)
                self.replies += 1
                if response_to == sentinel:
                    assert buf == b""
                    return answered


def _before_a_break(frames: list[bytes]) -> list[bytes]:
    """The frames before the first one that does not parse (the server closes there)."""
    for i, frame in enumerate(frames):
        try:
            decode_message(frame)
        except ProtocolError:
            return frames[:i]
    return frames


def _request_id(frame: bytes) -> int:
    return int(_INT32.unpack_from(frame, 4)[0])


def _wants_reply(frame: bytes) -> bool:
    """A well-formed request asks for a reply unless it is an OP_MSG with moreToCome."""
    if _INT32.unpack_from(frame, 12)[0] != OpCode.MSG:
        return True
    return not _UINT32.unpack_from(frame, 16)[0] & MsgFlags.MORE_TO_COME


def _aligned(stream: bytes) -> bool:
    """The header lengths tile the stream exactly (or one is impossible, and the server closes
    at once): nothing is left waiting for more bytes."""
    pos = 0
    while pos + 4 <= len(stream):
        length = _INT32.unpack_from(stream, pos)[0]
        if length < HEADER_SIZE or length > MAX_MESSAGE_SIZE:
            return True
        pos += length
    return pos == len(stream)


def _check_reply(frame: bytes, sent: list[bytes]) -> int:
    """A reply must decode, carry a document with `ok`, and for ok: 0 MongoDB's error fields;
    never InternalError. Returns what it responds to."""
    op = _INT32.unpack_from(frame, 12)[0]
    if op == OpCode.REPLY:
        reply = decode_reply(frame)
        assert len(reply.documents) == 1
        doc, response_to = bson.decode(reply.documents[0]), reply.response_to
    else:
        assert op == OpCode.MSG, f"reply with opcode {op}"
        message = decode_message(frame)
        assert isinstance(message, Msg) and not message.sequences
        doc, response_to = bson.decode(message.body), message.response_to
    assert "ok" in doc, doc
    if doc["ok"] != 1:
        assert doc["ok"] == 0, doc
        assert type(doc.get("code")) is int and isinstance(doc.get("errmsg"), str), doc
        assert isinstance(doc.get("codeName"), str), doc
        request = (
            [f for f in sent if _INT32.unpack_from(f, 4)[0] == response_to]
            if all(len(f) >= 8 for f in sent)
            else sent
        )
        assert doc["code"] != 1, f"InternalError {doc} for {request!r:.3000}"
    return response_to


@pytest.mark.timeout(600)
def test_fuzz_the_server(fuzz_server: ServerThread) -> None:
    errors = _Errors()
    logging.getLogger("ebbdb").addHandler(errors)
    run = Run(fuzz_server)
    try:

        @FUZZ
        @given(st.randoms(use_true_random=False), commands())
        def well_framed(rng: random.Random, drawn: bytes) -> None:
            frames = [_command_frame(rng, drawn)]
            frames += [_command_frame(rng) for _ in range(rng.randint(10, 30))]
            run.send(frames)
            run.observe()

        @FUZZ
        @given(st.randoms(use_true_random=False))
        def broken(rng: random.Random) -> None:
            frames = [_command_frame(rng) for _ in range(rng.randrange(10))]
            before_break = len(frames)
            frames.append(_broken_frame(rng))
            frames += [_command_frame(rng) for _ in range(rng.randrange(4))]
            run.send(frames, before_break)
            run.observe()

        well_framed()
        broken()
    finally:
        logging.getLogger("ebbdb").removeHandler(errors)
        run.client.close()
    print(f"{run.frames} frames, {run.replies} replies, {run.closed} connections closed")
    assert run.frames >= MIN_FRAMES
    assert errors.records == []
    assert fuzz_server.app is not None
    with MongoClient(fuzz_server.uri) as client:
        assert client.admin.command("ping")["ok"] == 1.0
