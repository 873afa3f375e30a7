"""Memory operations hold, counted as the server process really holds it (issue 24, item 2): for
each heavy pipeline shape the server's peak resident growth and the peak it counted agree within
2x; each stage refuses past its limit without disk use and spills (or goes on) with it; past the
server-wide cap (ebbdbMaxTrackedMemoryBytes) the operation asking gets 146 and the others go on;
serverStatus and the profiler show the counts."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread
from tests.e2e import server_process
from tests.e2e.test_cli import ServerProcess
from tests.waiting import wait_until

Doc = dict[str, Any]

#: Documents of about 1 KB each: `g` makes 97 groups, `i` orders them.
PAD = 900


def _doc(i: int) -> Doc:
    return {"_id": i, "g": i % 97, "i": i, "pad": "x" * PAD + str(i)}


def _fill(coll: Collection[Doc], n: int) -> None:
    for start in range(0, n, 5000):
        coll.insert_many([_doc(i) for i in range(start, min(n, start + 5000))])


def _code(exc: OperationFailure) -> tuple[int, str | None, str]:
    details = exc.details or {}
    return exc.code or 0, details.get("codeName"), str(details.get("errmsg"))


def _memory(client: MongoClient[Doc]) -> Doc:
    memory: Doc = client.admin.command("serverStatus")["ebbdb"]["memory"]
    return memory


def _set(client: MongoClient[Doc], name: str, value: Any) -> None:
    client.admin.command({"setParameter": 1, name: value})


@pytest.fixture
def db(client: MongoClient[Doc]) -> Iterator[Database[Doc]]:
    yield client.memory_accounting


# -- the parameter and what serverStatus shows -------------------------------------------------------


def test_cap_parameter_default_runtime_and_startup(
    client: MongoClient[Doc], start_server: Any
) -> None:
    got = client.admin.command({"getParameter": 1, "ebbdbMaxTrackedMemoryBytes": 1})
    cap = got["ebbdbMaxTrackedMemoryBytes"]
    assert isinstance(cap, Int64) and cap >= 256 * 1024 * 1024
    memory = _memory(client)
    assert set(memory) == {"usedBytes", "peakBytes", "capBytes"}
    assert memory["capBytes"] == cap
    _set(client, "ebbdbMaxTrackedMemoryBytes", 300_000_000)
    assert _memory(client)["capBytes"] == 300_000_000
    with pytest.raises(OperationFailure) as bad:
        _set(client, "ebbdbMaxTrackedMemoryBytes", -1)
    assert bad.value.code == 2
    srv = start_server({"ebbdbMaxTrackedMemoryBytes": 123_456_789})
    with MongoClient(srv.uri) as other:
        assert _memory(other)["capBytes"] == 123_456_789


def test_counts_go_back_to_zero_and_the_profiler_shows_the_peak(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    _fill(db.c, 2000)
    db.command({"profile": 2, "slowms": -1})
    pipeline: list[Doc] = [{"$sort": {"pad": -1}}, {"$limit": 3000}, {"$count": "n"}]
    try:
        assert list(db.c.aggregate(pipeline, comment="sorted")) == [{"n": 2000}]
    finally:
        db.command({"profile": 0, "slowms": 100})
    entry = db.system.profile.find_one({"command.comment": "sorted"})
    assert entry is not None
    # 2,000 documents of ~1 KB held by the sort: about 4 MB as CPython holds them.
    assert 2_000_000 < entry["peakTrackedMemBytes"] < 8_000_000
    assert isinstance(entry["peakTrackedMemBytes"], Int64)
    logged = [
        json.loads(line)["attr"]
        for line in client.admin.command({"getLog": "global"})["log"]
        if '"Slow query"' in line and '"sorted"' in line
    ]
    assert [a["peakTrackedMemBytes"] for a in logged] == [entry["peakTrackedMemBytes"]]
    memory = _memory(client)
    assert memory["usedBytes"] == 0
    assert memory["peakBytes"] >= entry["peakTrackedMemBytes"]


def test_an_open_cursor_holds_its_sort_until_closed(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    _fill(db.c, 2000)
    cursor = db.c.aggregate([{"$sort": {"pad": -1}}], batchSize=10)
    next(cursor)
    assert _memory(client)["usedBytes"] > 2_000_000
    cursor.close()
    wait_until(lambda: _memory(client)["usedBytes"] == 0, "the sort's memory given back")


# -- per stage: 292 without disk use, spilling with it -----------------------------------------------


def _refused_then_spilled(
    coll: Collection[Doc], pipeline: list[Doc], code: tuple[int, str], message: str
) -> list[Doc]:
    with pytest.raises(OperationFailure) as exc:
        list(coll.aggregate(pipeline, allowDiskUse=False))
    assert _code(exc.value) == (*code, message)
    return list(coll.aggregate(pipeline, allowDiskUse=True))


NO_DISK = (292, "QueryExceededMemoryLimitNoDiskUseAllowed")
GROUP_MESSAGE = (
    "Exceeded memory limit for $group, but didn't allow external sort. "
    "Pass allowDiskUse:true to opt in."
)


def test_group_counts_accumulator_values_not_only_keys(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    """97 groups have small keys; what $first holds of 3,000 documents (~3 MB) passes 1 MB."""
    _fill(db.c, 3000)
    _set(client, "internalDocumentSourceGroupMaxMemoryBytes", 1_000_000)
    pipeline: list[Doc] = [
        {"$group": {"_id": "$i", "f": {"$first": "$pad"}}},
        {"$count": "n"},
    ]
    assert _refused_then_spilled(db.c, pipeline, NO_DISK, GROUP_MESSAGE) == [{"n": 3000}]
    pushed: list[Doc] = [
        {"$group": {"_id": "$g", "all": {"$push": "$pad"}}},
        {"$group": {"_id": None, "n": {"$sum": {"$size": "$all"}}}},
    ]
    with pytest.raises(OperationFailure) as exc:
        list(db.c.aggregate(pushed, allowDiskUse=False))
    assert _code(exc.value) == (*NO_DISK, GROUP_MESSAGE)
    assert list(db.c.aggregate(pushed, allowDiskUse=True)) == [{"_id": None, "n": 3000}]


def test_bucket_auto_sorts_under_the_sort_limit(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    _fill(db.c, 3000)
    pipeline: list[Doc] = [{"$bucketAuto": {"groupBy": "$i", "buckets": 3}}]
    expected = [
        {"_id": {"min": 0, "max": 1000}, "count": 1000},
        {"_id": {"min": 1000, "max": 2000}, "count": 1000},
        {"_id": {"min": 2000, "max": 2999}, "count": 1000},
    ]
    assert list(db.c.aggregate(pipeline, allowDiskUse=False)) == expected
    _set(client, "internalQueryMaxBlockingSortMemoryUsageBytes", 1_000_000)
    message = "Sort exceeded memory limit of 1000000 bytes, but did not opt in to external sorting."
    assert _refused_then_spilled(db.c, pipeline, NO_DISK, message) == expected


def test_facet_holds_its_input_counted_and_spills_it(
    client: MongoClient[Doc], db: Database[Doc], server: ServerThread
) -> None:
    _fill(db.c, 1000)
    pipeline: list[Doc] = [
        {"$facet": {"n": [{"$count": "n"}], "last": [{"$sort": {"i": -1}}, {"$limit": 1}]}},
        {"$project": {"n": 1, "last": "$last.i"}},
    ]
    assert list(db.c.aggregate(pipeline, allowDiskUse=False)) == [
        {"n": [{"n": 1000}], "last": [999]}
    ]
    # $facet's input buffer is mongod's internalQueryFacetBufferSizeBytes (100 MB): 2,000 more
    # documents with 60 KB each pass it.
    big = "y" * 60_000
    db.big.insert_many([{"_id": i, "i": i, "pad": big} for i in range(2000)])
    facet: list[Doc] = [
        {"$facet": {"n": [{"$count": "n"}], "top": [{"$sort": {"i": -1}}, {"$limit": 1}]}},
        {"$project": {"n": 1, "top": "$top.i"}},
    ]
    message = (
        "$facet exceeded memory limit of 104857600 bytes holding its input, but did not opt in"
        " to spilling it. Pass allowDiskUse:true to opt in."
    )
    got = _refused_then_spilled(db.big, facet, NO_DISK, message)
    assert got == [{"n": [{"n": 2000}], "top": [1999]}]
    assert _memory(client)["usedBytes"] == 0
    assert server.app is not None
    spill = Path(server.app.config.dbpath) / "_tmp"
    assert not spill.exists() or list(spill.iterdir()) == []


def test_set_window_fields_partition_past_its_limit(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    _fill(db.c, 2000)
    pipeline: list[Doc] = [
        {
            "$setWindowFields": {
                "partitionBy": {"$mod": ["$i", 2]},
                "sortBy": {"i": 1},
                "output": {"r": {"$documentNumber": {}}},
            }
        },
        {"$group": {"_id": None, "top": {"$max": "$r"}}},
    ]
    assert list(db.c.aggregate(pipeline, allowDiskUse=False)) == [{"_id": None, "top": 1000}]
    _set(client, "internalDocumentSourceSetWindowFieldsMaxMemoryBytes", 500_000)
    with pytest.raises(OperationFailure) as exc:
        list(db.c.aggregate(pipeline, allowDiskUse=False))
    code, name, message = _code(exc.value)
    assert (code, name) == (5414201, "Location5414201")
    assert message.startswith("Exceeded memory limit in DocumentSourceSetWindowFields, used ")
    assert message.endswith(" bytes but max allowed is 500000")
    # With disk use mongod spills the partition; ebbdb holds it, counted against the server's cap.
    assert list(db.c.aggregate(pipeline, allowDiskUse=True)) == [{"_id": None, "top": 1000}]
    # The sort in front of the windows is a blocking sort, with its limit and its spilling.
    _set(client, "internalQueryMaxBlockingSortMemoryUsageBytes", 500_000)
    with pytest.raises(OperationFailure) as sort:
        list(db.c.aggregate(pipeline, allowDiskUse=False))
    assert sort.value.code == 292


def test_lookup_results_past_16mb_are_4568(db: Database[Doc]) -> None:
    big = "z" * 1_000_000
    db.many.insert_many([{"_id": i, "k": 1, "pad": big} for i in range(20)])
    db.one.insert_one({"_id": 1, "k": 1})
    joined: list[Doc] = [
        {"$lookup": {"from": "many", "localField": "k", "foreignField": "k", "as": "all"}},
        {"$project": {"n": {"$size": "$all"}}},
    ]
    with pytest.raises(OperationFailure) as exc:
        list(db.one.aggregate(joined))
    assert _code(exc.value) == (
        4568,
        "Location4568",
        "Total size of documents in many matching pipeline's $lookup stage exceeds 16793600 bytes",
    )
    # Under it, the same join works, and nested joins too.
    fewer: list[Doc] = [
        {
            "$lookup": {
                "from": "many",
                "pipeline": [
                    {"$match": {"_id": {"$lt": 10}}},
                    {"$lookup": {"from": "one", "pipeline": [], "as": "back"}},
                ],
                "as": "all",
            }
        },
        {"$project": {"n": {"$size": "$all"}, "back": {"$size": {"$first": "$all.back"}}}},
    ]
    assert list(db.one.aggregate(fewer)) == [{"_id": 1, "n": 10, "back": 1}]


def test_graph_lookup_past_100mb_is_40099(db: Database[Doc]) -> None:
    """mongod's $graphLookup holds at most 100 MB of what it found, and cannot spill it."""
    big = "g" * 1_000_000
    db.nodes.insert_many([{"_id": i, "next": i + 1, "pad": big} for i in range(120)])
    db.start.insert_one({"_id": 0})
    search: list[Doc] = [
        {
            "$graphLookup": {
                "from": "nodes",
                "startWith": 0,
                "connectFromField": "next",
                "connectToField": "_id",
                "as": "path",
            }
        },
        {"$project": {"n": {"$size": "$path"}}},
    ]
    with pytest.raises(OperationFailure) as exc:
        list(db.start.aggregate(search, allowDiskUse=True))
    assert _code(exc.value) == (
        40099,
        "Location40099",
        "$graphLookup reached maximum memory consumption",
    )
    search[0]["$graphLookup"]["maxDepth"] = 49
    assert list(db.start.aggregate(search)) == [{"_id": 0, "n": 50}]


# -- the server-wide cap -----------------------------------------------------------------------------


def test_past_the_server_cap_the_asker_gets_146_and_others_go_on(
    client: MongoClient[Doc], db: Database[Doc], uri: str
) -> None:
    _fill(db.c, 20_000)  # ~20 MB of documents, ~40 MB as CPython holds them sorted
    _set(client, "ebbdbMaxTrackedMemoryBytes", 16 * 1024 * 1024)
    errors: list[OperationFailure] = []
    small: list[list[Doc]] = []
    failed: list[BaseException] = []
    done = threading.Event()
    # Another client's queries that hold nothing go on (one that asked for memory while the sort
    # held the cap would get 146 too: the operation asking for more is the one that fails).
    others_pipeline: list[Doc] = [{"$match": {"i": {"$lt": 5}}}, {"$project": {"i": 1}}]

    def others() -> None:
        try:
            with MongoClient(uri) as other:
                coll = other.memory_accounting.c
                while not done.is_set():
                    small.append(list(coll.aggregate(others_pipeline)))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=others)
    thread.start()
    try:
        for _ in range(2):
            with pytest.raises(OperationFailure) as exc:
                list(db.c.aggregate([{"$sort": {"pad": -1}}, {"$count": "n"}]))
            errors.append(exc.value)
    finally:
        done.set()
        thread.join()
    for error in errors:
        code, name, message = _code(error)
        assert (code, name) == (146, "ExceededMemoryLimit")
        assert message.startswith("$sort needs more memory, but the server's operations already")
        assert message.endswith(
            f"the {16 * 1024 * 1024} bytes they may (ebbdbMaxTrackedMemoryBytes)"
        )
    assert not failed
    assert small and all([d["i"] for d in batch] == [0, 1, 2, 3, 4] for batch in small)
    assert _memory(client)["usedBytes"] == 0
    # $out holds its results until its one write: counted too, and the target left alone.
    db.target.insert_one({"_id": "kept"})
    with pytest.raises(OperationFailure) as out:
        db.c.aggregate([{"$out": "target"}])
    assert _code(out.value)[:2] == (146, "ExceededMemoryLimit")
    assert list(db.target.find()) == [{"_id": "kept"}]
    _set(client, "ebbdbMaxTrackedMemoryBytes", 0)  # no cap: the same sort runs
    assert list(db.c.aggregate([{"$sort": {"pad": -1}}, {"$count": "n"}])) == [{"n": 20_000}]
    db.c.aggregate([{"$out": "target"}])
    assert db.target.count_documents({}) == 20_000


# -- counted against what the process holds ----------------------------------------------------------

#: Documents for the measured shapes: about 25 MB stored, 35 MB as CPython holds them decoded.
MEASURED = 25_000

#: Each heavy shape, over collection `c` (and `c` joined): a small result, so the reply's size
#: does not count in what the server grows by.
SHAPES: dict[str, list[Doc]] = {
    "$group $first": [{"$group": {"_id": "$_id", "f": {"$first": "$pad"}}}, {"$count": "n"}],
    "$push": [
        {"$group": {"_id": "$g", "all": {"$push": "$pad"}}},
        {"$project": {"n": {"$size": "$all"}}},
    ],
    "$addToSet": [
        {"$group": {"_id": "$g", "all": {"$addToSet": "$pad"}}},
        {"$project": {"n": {"$size": "$all"}}},
    ],
    "$facet": [
        {"$facet": {"n": [{"$count": "n"}], "one": [{"$match": {"i": 1}}, {"$project": {"i": 1}}]}}
    ],
    "$lookup": [
        {"$match": {"_id": 0}},
        {"$lookup": {"from": "c", "pipeline": [], "as": "all"}},
        {"$project": {"n": {"$size": "$all"}}},
    ],
    "nested $lookup": [
        {"$match": {"_id": {"$lt": 2}}},
        {
            "$lookup": {
                "from": "c",
                "pipeline": [
                    {"$match": {"_id": {"$lt": 4}}},
                    {"$lookup": {"from": "c", "pipeline": [{"$limit": 3000}], "as": "inner"}},
                ],
                "as": "all",
            }
        },
        {"$project": {"n": {"$size": "$all"}}},
    ],
    "$bucketAuto": [
        {"$bucketAuto": {"groupBy": "$i", "buckets": 4, "output": {"p": {"$push": "$pad"}}}},
        {"$project": {"n": {"$size": "$p"}}},
    ],
    "$setWindowFields": [
        {
            "$setWindowFields": {
                "partitionBy": "$g",
                "sortBy": {"i": 1},
                "output": {"r": {"$rank": {}}},
            }
        },
        {"$count": "n"},
    ],
    "$setWindowFields, one partition": [
        {"$setWindowFields": {"sortBy": {"pad": 1}, "output": {"n": {"$documentNumber": {}}}}},
        {"$count": "n"},
    ],
    "$sort": [{"$sort": {"pad": -1}}, {"$count": "n"}],
    "find's sort": [],  # find(), not aggregate: see _measured
}


def _measured(c: MongoClient[Doc], pipeline: list[Doc], collection: str = "c") -> list[Doc]:
    """What a shape returns: the pipeline's results, or for find's sort (no pipeline) a count."""
    coll = c.t[collection]
    if pipeline:
        return list(coll.aggregate(pipeline))
    found = coll.find({}, {"_id": 1}).sort("pad", -1).batch_size(1_000_000)
    return [{"n": sum(1 for _ in found)}]


def _warm(pipeline: list[Doc]) -> list[Doc]:
    """The same shape over the small collection: run first, so that loading modules does not
    count as the shape's memory."""
    loaded: list[Doc] = json.loads(json.dumps(pipeline).replace('"from": "c"', '"from": "small"'))
    return loaded


def _started(dbpath: Path, log_dir: Path, *options: str) -> ServerProcess:
    srv = ServerProcess(["--port", "0", "--dbpath", str(dbpath), "--quiet", *options], log_dir)
    srv.startup_line()
    return srv


@pytest.fixture(scope="module")
def measured_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data path with the measured collection, written once by a server that then stops."""
    root = tmp_path_factory.mktemp("measured")
    dbpath = root / "data"
    dbpath.mkdir()
    srv = _started(dbpath, root)
    try:
        with srv.client() as c:
            _fill(c.t.c, MEASURED)
            c.t.small.insert_many([_doc(i) for i in range(20)])
        srv.stop()
    finally:
        srv.kill()
    return dbpath


@pytest.mark.skipif(sys.platform != "linux", reason="reads the server's memory in /proc")
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counted_peak_is_within_2x_of_rss_growth(
    measured_data: Path, tmp_path: Path, shape: str
) -> None:
    """A fresh server per shape, its limits out of the way; the collection's pages are made
    resident first (a scan), so that what the server grows by is what its stages hold."""
    limits = {
        "internalQueryMaxBlockingSortMemoryUsageBytes": 10**9,
        "internalDocumentSourceGroupMaxMemoryBytes": 10**9,
        "internalLookupStageIntermediateDocumentMaxSizeBytes": 10**9,
        "ebbdbMaxTrackedMemoryBytes": 2 * 10**9,
    }
    options = [f"--setParameter={name}={value}" for name, value in limits.items()]
    srv = _started(measured_data, tmp_path, *options)
    pid = srv.proc.pid
    try:
        with srv.client() as c:
            pipeline = SHAPES[shape]
            _measured(c, _warm(pipeline), "small")
            assert list(c.t.c.aggregate([{"$match": {"none": 1}}])) == []
            before = server_process.rss(pid)
            server_process.reset_peak(pid)
            assert _measured(c, pipeline)
            grown = server_process.peak_rss(pid) - before
            memory = _memory(c)
            counted = memory["peakBytes"]
            assert memory["capBytes"] == 2 * 10**9  # --setParameter
        print(f"{shape}: counted {counted:,} bytes, RSS grew {grown:,} ({grown / counted:.2f}x)")
        assert counted > 10_000_000
        assert counted / 2 <= grown <= counted * 2
        srv.stop()
    finally:
        srv.kill()
