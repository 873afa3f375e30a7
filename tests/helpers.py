"""Helpers that more than one test file uses: tables of cases, the QueryError a call raises and the
test over a table of them, document ids and encoding, long index keys, explain plan walking,
byte-at-a-time framing, running a query over an engine, a command recorder for driver tests, slow
work for the tests that interrupt it, and what a fresh interpreter prints.
Imported as ``tests.helpers`` (tests/ is a namespace package on pytest's pythonpath). Fixtures live
in the conftest.py files, not here."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import bson
import pytest
from pymongo import monitoring

from ebbdb.protocol import FrameDecoder
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.engine.store import CODEC, Engine
from ebbdb.storage.execution.execute import QueryRun, QuerySpec

# -- tables of cases -------------------------------------------------------------------------------


def cases(argnames: str | Sequence[str], table: Sequence[Sequence[Any]]) -> pytest.MarkDecorator:
    """A test over a table whose rows are (id, *arguments): one case a row, named by its id."""
    return pytest.mark.parametrize(
        argnames, [row[1:] for row in table], ids=[row[0] for row in table]
    )


def query_error(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> tuple[str, str]:
    """(codeName, message) of the QueryError that fn(*args, **kwargs) raises; the test fails if it
    raises none."""
    with pytest.raises(QueryError) as info:
        fn(*args, **kwargs)
    return info.value.code_name, info.value.message


def errors_test(fn: Callable[..., Any], table: Sequence[Sequence[Any]]) -> Callable[..., None]:
    """The test over a table of errors whose rows are (id, *arguments, codeName, message):
    fn(*arguments) raises a QueryError with exactly that codeName and message. A module runs it by
    giving it a name that starts with ``test_``."""

    @cases(("args", "code_name", "message"), [(r[0], r[1:-2], r[-2], r[-1]) for r in table])
    def test_errors(args: Sequence[Any], code_name: str, message: str) -> None:
        assert query_error(fn, *args) == (code_name, message)

    return test_errors


# -- documents -------------------------------------------------------------------------------------


def enc(doc: Mapping[str, Any]) -> bytes:
    return bson.encode(doc)


def ids(docs: Iterable[Mapping[str, Any]]) -> list[Any]:
    """The `_id` of each document (a list or a driver's cursor), in order."""
    return [d["_id"] for d in docs]


# -- keys longer than LMDB allows ------------------------------------------------------------------

PREFIX = "p" * 600
LONG = [PREFIX + tail for tail in ("d", "a" * 900, "c" * 4000, "b", "e" * 2000)] + [
    "q" * 1000,
    "b" * 5000,
    "short",
    "p" * 599,
]
# Ranges over LONG that both the storage and the driver tests run.
LONG_RANGES: list[dict[str, Any]] = [
    {"$gt": PREFIX + "b"},
    {"$gte": PREFIX + "b"},
    {"$lt": PREFIX + "c"},
    {"$lte": PREFIX + "c" * 4000},
    {"$gt": PREFIX, "$lt": PREFIX + "d"},
    {"$gt": "p" * 599},
]


# -- explain ---------------------------------------------------------------------------------------


def plan_stages(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A winning plan's stages from the root down (inputStage chain)."""
    out = []
    node: dict[str, Any] | None = plan
    while node is not None:
        out.append(node)
        node = node.get("inputStage")
    return out


# -- framing ---------------------------------------------------------------------------------------


def feed_bytewise(decoder: FrameDecoder, data: bytes) -> list[bytes]:
    """Feed `data` to the decoder one byte at a time; every frame it completed."""
    frames: list[bytes] = []
    for i in range(len(data)):
        frames += decoder.feed(data[i : i + 1])
    return frames


# -- queries over an engine ------------------------------------------------------------------------


def run_query(
    engine: Engine,
    coll: str,
    flt: dict[str, Any],
    sort: dict[str, Any] | None = None,
    hint: Any = None,
    max_docs: int = 1000,
    budget: int = 2000,
) -> tuple[list[dict[str, Any]], QueryRun]:
    """Run a find on db.`coll` to the end, in chunks of `max_docs`; (documents, the run)."""
    info = engine.collection("db", coll)
    assert info is not None
    run = QueryRun(info, QuerySpec.parse(flt, None, sort, hint=hint))
    out = drain(engine, run, max_docs, budget)
    return [bson.decode(raw, CODEC) for raw in out], run


def drain(
    engine: Engine,
    run: QueryRun,
    max_docs: int = 1000,
    budget: int = 2000,
    now_ms: int | None = None,
) -> list[bytes]:
    """Every document a run still yields, in chunks of `max_docs` (at `now_ms` for expiry)."""
    out: list[bytes] = []
    calls = 0
    while not run.exhausted:
        calls += 1
        assert calls < 100_000, "the run never finished"
        out += run.next_chunk(engine, max_docs, 1 << 30, budget, now_ms=now_ms)
    return out


# -- driver command monitoring ---------------------------------------------------------------------


class Recorder(monitoring.CommandListener):
    """Records the commands the driver sent, the replies it got and the names of those that failed
    (pymongo publishes no event for its handshake hello)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.replies: list[tuple[str, dict[str, Any]]] = []
        self.failures: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append((event.command_name, event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.replies.append((event.command_name, event.reply))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.failures.append(event.command_name)

    def names(self) -> list[str]:
        """The names of the commands sent, in order."""
        return [n for n, _ in self.sent]

    def sent_named(self, name: str) -> list[dict[str, Any]]:
        return [c for n, c in self.sent if n == name]

    def replies_to(self, name: str) -> list[dict[str, Any]]:
        return [r for n, r in self.replies if n == name]

    def batches(self) -> list[list[Any]]:
        """The documents of each find and getMore reply, in order."""
        out = []
        for name, reply in self.replies:
            if name == "find":
                out.append(reply["cursor"]["firstBatch"])
            elif name == "getMore":
                out.append(reply["cursor"]["nextBatch"])
        return out

    def clear(self) -> None:
        self.sent.clear()
        self.replies.clear()
        self.failures.clear()


# -- slow work ------------------------------------------------------------------------------------


def minutes_of_work(count: Any = 100_000) -> dict[str, Any]:
    """An expression that takes minutes per document (a $reduce over `count` numbers, a number or
    a field path, each adding up a thousand more) and is a non-negative number: slow work without
    $where, that a server must interrupt inside the document."""
    add_up = {
        "$reduce": {
            "input": {"$range": [0, 1000]},
            "initialValue": 0,
            "in": {"$add": ["$$value", "$$this"]},
        }
    }
    return {
        "$reduce": {
            "input": {"$range": [0, count]},
            "initialValue": 0,
            "in": {"$add": ["$$value", add_up]},
        }
    }


def slow_filter(count: Any = 100_000) -> dict[str, Any]:
    """A filter over minutes_of_work(count) that matches nothing."""
    return {"$expr": {"$lt": [minutes_of_work(count), 0]}}


# -- storage statistics ----------------------------------------------------------------------------

#: The fields of collStats and of $collStats' storageStats for an existing collection, in MongoDB
#: 7.0's order.
STORAGE_STATS_FIELDS = (
    "size count avgObjSize numOrphanDocs storageSize freeStorageSize capped nindexes indexDetails"
    " indexBuilds totalIndexSize indexSizes totalSize scaleFactor"
).split()


# -- a fresh interpreter ---------------------------------------------------------------------------


def python_output(code: str, *args: str) -> str:
    """What a fresh interpreter prints running `code` (with `args` as sys.argv[1:]); the test fails
    if it fails. For what an import or a first call loads, which this process has loaded already."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    ).stdout
