"""The express path's differential harness: two real servers, one with the express path on and
one with `ebbdbExpressPath` false, given the same requests over raw sockets (tests/e2e/rawwire.py)
and their reply frames compared byte for byte, errors included.

Two things legitimately differ and are normalised, each said where it is done: the reply's
header ids (requestID is each server's own counter; responseTo answers our id), and a cursor's id,
which each server draws at random (63 bits from os.urandom, server/cursors.py): a non-zero
`cursor.id` is compared as "some cursor" by zeroing its 8 bytes in both frames. A getMore names
each server's own cursor id (`Pair.get_more`)."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bson
from bson import Int64
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient

from ebbdb.protocol import HEADER_SIZE, Msg, decode_message, encode_msg
from ebbdb.server.embedded import ServerThread
from tests.e2e.rawwire import connect, next_request_id, read_frame

#: The parameters of both servers (test commands: ttlClock moves both clocks alike).
PARAMETERS: dict[str, Any] = {"enableTestCommands": True}
#: Where a cursor document's id is in a reply: `cursor: {firstBatch|nextBatch: [...], id: <long>}`.
_ID_ELEMENT = b"\x12id\x00"


def _normalised(frame: bytes, asked: int = 0) -> tuple[bytes, int]:
    """The reply frame without its header ids, with a non-zero cursor id zeroed; and that id
    (0: none). The cursor's id is the `id` element of the top-level `cursor` document, found by
    walking the reply's elements (never by searching the bytes). An error message naming the
    cursor `asked` for (a getMore's own, which differs between the servers) names it as
    "<cursor>" instead: that reply alone is decoded and encoded again (its other fields are
    strings and numbers, which make the round trip unchanged)."""
    message = decode_message(frame)
    assert isinstance(message, Msg), f"expected an OP_MSG reply, got {message!r}"
    body = message.body
    if asked and str(asked).encode() in body:
        doc = bson.decode(body)
        assert set(doc) <= {"ok", "errmsg", "code", "codeName"}, doc
        doc["errmsg"] = doc["errmsg"].replace(str(asked), "<cursor>")
        body = bson.encode(doc)
    cid = 0
    reply = RawBSONDocument(body)
    cursor = reply.get("cursor")
    if isinstance(cursor, RawBSONDocument):
        value = cursor.get("id")
        if isinstance(value, int) and value:
            cid = int(value)
            raw = bytes(cursor.raw)
            at = body.find(raw)  # the cursor document's own bytes inside the body
            element = raw.rfind(_ID_ELEMENT + Int64(cid).to_bytes(8, "little", signed=True))
            assert at >= 0 and element >= 0
            start = at + element + len(_ID_ELEMENT)
            body = body[:start] + bytes(8) + body[start + 8 :]
    # Header: length, requestID, responseTo, opCode: the ids are left out, and the length, which
    # the body's own length prefix repeats.
    return frame[12:HEADER_SIZE] + frame[HEADER_SIZE : -len(message.body)] + body, cid


class Pair:
    """Two servers alike but for the express path, one raw socket to each."""

    def __init__(self, on: ServerThread, off: ServerThread) -> None:
        self.on, self.off = on, off
        self._socks: dict[str, socket.socket] = {"on": connect(on), "off": connect(off)}
        #: Each server's last cursor id (for the next getMore).
        self.cursors: dict[str, int] = {"on": 0, "off": 0}
        # The express path is loaded by the first command it may take (which the general path
        # runs: server/dispatch.py): one now, so that the tests' requests all may take it.
        # (Under auth it is unauthorized: the path is loaded all the same.)
        for which in ("on", "off"):
            self._ask(which, {"find": "none", "filter": {}, "$db": "admin"}, ())

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()

    def _ask(
        self, which: str, body: dict[str, Any], sequences: Sequence[tuple[str, Sequence[Any]]]
    ) -> bytes:
        frame = encode_msg(
            next_request_id(),
            0,
            bson.encode(body),
            sequences=tuple(
                (ident, tuple(d if isinstance(d, bytes) else bson.encode(d) for d in docs))
                for ident, docs in sequences
            ),
        )
        sock = self._socks[which]
        sock.sendall(frame)
        return read_frame(sock)

    def same(
        self,
        body: dict[str, Any],
        sequences: Sequence[tuple[str, Sequence[Any]]] = (),
        *,
        on_body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send `body` (with kind-1 `sequences`) to both servers (`on_body`, if given, to the
        express one instead: a getMore names each server's own cursor); assert the replies are
        the same bytes (ids normalised, see the module's docstring) and return the reply."""
        frame_on = self._ask("on", on_body if on_body is not None else body, sequences)
        got_on = _normalised(frame_on, self.cursors["on"])
        got_off = _normalised(self._ask("off", body, sequences), self.cursors["off"])
        reply_on = bson.decode(decode_message(frame_on).body)
        assert got_on[0] == got_off[0], (
            f"replies differ for {body!r}:\n  express: {reply_on!r}\n  general: "
            f"{bson.decode(got_off[0][9:])!r}"  # opCode, flags, kind: 9 bytes before the body
        )
        self.cursors = {"on": got_on[1], "off": got_off[1]}
        return reply_on

    def get_more(self, db: str, collection: str, **fields: Any) -> dict[str, Any]:
        """A getMore of each server's last cursor, compared."""
        off = {"getMore": Int64(self.cursors["off"]), "collection": collection, **fields, "$db": db}
        on = {**off, "getMore": Int64(self.cursors["on"])}
        return self.same(off, on_body=on)

    def both(self, body: dict[str, Any]) -> None:
        """Run a set-up command on both servers (its replies not compared: e.g. the ttlClock's
        time), checking each succeeded."""
        for which in ("on", "off"):
            reply = bson.decode(decode_message(self._ask(which, body, ())).body)
            assert reply.get("ok") == 1.0, reply

    def express_taken(self) -> dict[str, int]:
        """serverStatus' `ebbdb.expressPath` of the express server: what it answered there."""
        with MongoClient(self.on.uri) as client:
            return dict(client.admin.command("serverStatus")["ebbdb"]["expressPath"])

    def general_taken(self) -> dict[str, int]:
        with MongoClient(self.off.uri) as client:
            return dict(client.admin.command("serverStatus")["ebbdb"]["expressPath"])

    def opcounters(self) -> tuple[dict[str, int], dict[str, int]]:
        """Each server's serverStatus opcounters (the express path counts as the general one)."""
        out = []
        for server in (self.on, self.off):
            with MongoClient(server.uri) as client:
                out.append(dict(client.admin.command("serverStatus")["opcounters"]))
        return out[0], out[1]


@contextmanager
def server_pair(tmp_path: Path, *, auth: bool = False) -> Iterator[Pair]:
    """Two fresh servers, express path on and off, and a Pair over them."""
    on = ServerThread(str(tmp_path / "on"), PARAMETERS, auth=auth).start()
    try:
        off = ServerThread(
            str(tmp_path / "off"), {**PARAMETERS, "ebbdbExpressPath": False}, auth=auth
        ).start()
        try:
            pair = Pair(on, off)
            try:
                yield pair
            finally:
                pair.close()
        finally:
            off.stop()
    finally:
        on.stop()
