"""What start-up imports: the server starts, answers the handshake (hello, isMaster, ping,
buildInfo) and runs a TTL pass over a fresh data directory without importing what only some
requests need: the query language, the aggregation stages, collations (ICU), text search
(Snowball), geometry, regular expressions (PCRE2), YAML, SCRAM, or any command module but the
handshake's (loaded with the server: hello is every client's first command). Plain reads and
writes afterwards load the query language but not geometry, text search or collations. Each check
runs in a fresh interpreter; none measures time (bench/startup.py does).

`ssl` is not on the list: asyncio imports it itself (asyncio.base_events -> asyncio.sslproto)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import python_output

#: What only geometry, text search, collations, YAML or logins need.
SPECIAL = (
    "icu",
    "yaml",
    "scramp",
    "snowballstemmer",
    "s2sphere",
    "spherely",
    "shapely",
    "numpy",
    "ebbdb.storage.geometry.geo",
    "ebbdb.storage.indexes.index_kinds.geo",
)

#: Modules (and their submodules) that no start-up may import: those, and what only some
#: requests need.
HEAVY = (
    *SPECIAL,
    "asn1crypto",
    "pcre2",
    "email",
    "ebbdb.storage.aggregate",
    "ebbdb.storage.execution.execute",
    "ebbdb.storage.indexes.planner",
    "ebbdb.storage.query.text_search",
    "ebbdb.storage.query.stop_words",
    "ebbdb.storage.expiry.status",
    "ebbdb.storage.query.match",
    "ebbdb.storage.query.match_tree",  # ~25 dataclasses: 11 ms
    "ebbdb.storage.indexes.plans",
    "ebbdb.storage.query.expressions",
    "ebbdb.storage.query.projection",
    "ebbdb.storage.query.update",
    "ebbdb.storage.query.validator",
    "ebbdb.storage.indexes.index_kinds.text",
    "ebbdb.server.views",
)

COMMANDS = "ebbdb.server.commands."

SERVE = """
import asyncio, json, struct, sys

import bson

from ebbdb.server.app import App
from ebbdb.server.config import Config


def op_msg(doc, request_id):
    body = bson.encode(doc)
    payload = struct.pack("<I", 0) + b"\\x00" + body
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, 2013) + payload


async def main(path, commands):
    app = App(Config(port=0, dbpath=path, quiet=True))
    await app.start()
    try:
        reader, writer = await asyncio.open_connection(*app.address)
        for i, command in enumerate(commands):
            writer.write(op_msg(command, i + 1))
            length = struct.unpack("<i", await reader.readexactly(4))[0]
            reply = bson.decode((await reader.readexactly(length - 4))[17:])
            assert reply["ok"] == 1, reply
        writer.close()
        await app.services.ttl_monitor.run_pass()
    finally:
        await app.stop()


asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
print(json.dumps(sorted(sys.modules)))
"""


def modules_of(code: str, *args: str) -> list[str]:
    """The modules a fresh interpreter holds after running `code`, which prints them as JSON."""
    modules: list[str] = json.loads(python_output(code, *args).splitlines()[-1])
    return modules


def heavy(modules: list[str], among: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules that are, or are under, one of `among`."""
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in among)]


def test_importing_the_command_line_imports_nothing_heavy() -> None:
    modules = modules_of(
        "import json, sys; import ebbdb.server.cli; print(json.dumps(sorted(sys.modules)))"
    )
    assert "ebbdb.server.app" in modules
    assert heavy(modules) == []
    assert [m for m in modules if m.startswith(COMMANDS)] == [COMMANDS + "handshake"]


HANDSHAKE = [
    {name: 1, "$db": "admin"} for name in ("hello", "isMaster", "ismaster", "ping", "buildInfo")
]


def test_starting_and_answering_the_handshake_imports_nothing_heavy(tmp_path: Path) -> None:
    modules = modules_of(SERVE, str(tmp_path / "data"), json.dumps(HANDSHAKE))
    assert "ebbdb.storage.engine.store" in modules
    assert heavy(modules) == []
    assert [m for m in modules if m.startswith(COMMANDS)] == [COMMANDS + "handshake"]


def test_plain_reads_and_writes_import_no_geometry_text_search_or_collations(
    tmp_path: Path,
) -> None:
    """Inserting, finding, updating, aggregating and deleting plain documents loads the query
    language and those commands' modules, and none of what only special requests need."""
    db = {"$db": "shop"}
    commands = [
        {"insert": "items", "documents": [{"_id": 1, "a": "x", "n": 2}], **db},
        {"find": "items", "filter": {"a": "x", "n": {"$gt": 1}}, **db},
        {"update": "items", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}], **db},
        {
            "aggregate": "items",
            "pipeline": [{"$match": {"a": "x"}}, {"$group": {"_id": "$a", "n": {"$sum": "$n"}}}],
            "cursor": {},
            **db,
        },
        {"delete": "items", "deletes": [{"q": {"_id": 1}, "limit": 1}], **db},
    ]
    modules = modules_of(SERVE, str(tmp_path / "data"), json.dumps(commands))
    assert "ebbdb.storage.query.match" in modules
    assert heavy(modules, SPECIAL) == []
