"""$densify and $fill within bounds, through pymongo (issue 24 item 1): a $densify that would
generate more than internalQueryMaxAllowedDensifyDocs (500,000) documents gets mongod's 5897900
as soon as it passes the count, whether the range is explicit or comes from the data; exactly the
cap is allowed; a large $densify under the cap ends at maxTimeMS (50) and at killOp (11601) and
leaves other clients answered; and $fill's methods over 100,000 documents are linear and exact."""

from __future__ import annotations

import datetime
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.parameters import parse_startup
from tests.waiting import wait_until

Client = MongoClient[dict[str, Any]]

CAP = 500_000
CAP_MESSAGE = (
    "Generated 500001 documents in $densify, which is over the limit of 500000. Increase the"
    " 'internalQueryMaxAllowedDensifyDocs' parameter to allow more generated documents"
)
#: A bound on a refusal, not a measurement: it comes after the cap's 500,001 documents (under a
#: second here); before the fix, a 3e6 range took 14 s and 1.4 GB, the 1e8 one never ended.
REFUSAL_MS = 10_000
#: A bound on the end of an interrupted operation: it ends within milliseconds of its limit.
ENDS_WITHIN = 2.0
#: A bound on another client's ping while a $densify runs, far above what it takes (a few ms):
#: before the fix one stalled a second while the stage built its lists.
PING_WITHIN = 0.5


def _count(coll: Any, densify: dict[str, Any], **kw: Any) -> int:
    rows = list(coll.aggregate([{"$densify": densify}, {"$count": "n"}], **kw))
    return int(rows[0]["n"]) if rows else 0


def _refused(coll: Any, densify: dict[str, Any]) -> OperationFailure:
    with pytest.raises(OperationFailure) as info:
        _count(coll, densify, maxTimeMS=REFUSAL_MS)
    return info.value


def _is_over_the_cap(exc: OperationFailure) -> None:
    assert exc.code == 5897900
    assert exc.details is not None
    assert exc.details["codeName"] == "Location5897900"
    assert exc.details["errmsg"] == CAP_MESSAGE


# -- the cap -----------------------------------------------------------------------------------------

DAY = datetime.datetime(2024, 1, 1)

#: The issue's three shapes: an explicit range far past the cap over one document, and ranges
#: the data alone makes, numbers 1e8 apart and dates a day apart in milliseconds.
SHAPES: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "explicit range": (
        [{"x": 1}],
        {"field": "x", "range": {"step": 1, "bounds": [0, 3_000_000]}},
    ),
    "full range of numbers": (
        [{"x": 1}, {"x": 1e8}],
        {"field": "x", "range": {"step": 1, "bounds": "full"}},
    ),
    "full range of dates in milliseconds": (
        [{"x": DAY}, {"x": DAY + datetime.timedelta(days=1)}],
        {"field": "x", "range": {"step": 1, "unit": "millisecond", "bounds": "full"}},
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_issues_shapes_are_refused_at_the_cap(client: Client, shape: str) -> None:
    docs, densify = SHAPES[shape]
    coll = client.densify_limits.shape
    coll.insert_many(docs)
    _is_over_the_cap(_refused(coll, densify))
    assert client.admin.command("ping") == {"ok": 1.0}


def test_exactly_the_cap_is_allowed(client: Client) -> None:
    coll = client.densify_limits.exact
    coll.insert_one({"x": 1})  # below the range: passed through, not counted
    # 2, 3, ..., 500001: 500,000 generated, and the document.
    assert _count(coll, {"field": "x", "range": {"step": 1, "bounds": [2, CAP + 2]}}) == CAP + 1
    _is_over_the_cap(_refused(coll, {"field": "x", "range": {"step": 1, "bounds": [2, CAP + 3]}}))


def test_documents_that_exist_do_not_count(client: Client) -> None:
    # mongod's generated_limit.js at the default cap: 1..500000 between 0 and 500001 is the cap.
    coll = client.densify_limits.existing
    coll.insert_many([{"x": 0}, {"x": CAP + 1}])
    full = {"field": "x", "range": {"step": 1, "bounds": "full"}}
    assert _count(coll, full) == CAP + 2
    coll.update_one({"x": CAP + 1}, {"$set": {"x": CAP + 2}})
    _is_over_the_cap(_refused(coll, full))
    coll.insert_one({"x": CAP // 2})  # one fewer to generate: under the cap again
    assert _count(coll, full) == CAP + 3


def test_the_count_is_shared_by_the_partitions(client: Client) -> None:
    coll = client.densify_limits.parts
    half = CAP // 2
    coll.insert_many([{"p": 1, "x": 0}, {"p": 1, "x": half + 1}, {"p": 2, "x": 0}])
    by_partition = {
        "field": "x",
        "partitionByFields": ["p"],
        "range": {"step": 1, "bounds": "partition"},
    }
    assert _count(coll, by_partition) == 3 + half  # partition 2 has nothing to fill
    coll.insert_one({"p": 2, "x": half + 1})
    assert _count(coll, by_partition) == 4 + CAP
    coll.update_one({"p": 2, "x": half + 1}, {"$set": {"x": half + 2}})  # one more to generate
    _is_over_the_cap(_refused(coll, by_partition))


def test_a_limit_after_the_stage_stops_it_before_the_cap(client: Client) -> None:
    # The stage streams: a $limit after it takes what it wants of a range far past the cap.
    coll = client.densify_limits.limited
    coll.insert_one({"x": 1})
    out = coll.aggregate(
        [
            {"$densify": {"field": "x", "range": {"step": 1, "bounds": [0, 10**9]}}},
            {"$limit": 4},
            {"$project": {"_id": 0}},
        ]
    )
    assert list(out) == [{"x": 0}, {"x": 1}, {"x": 2}, {"x": 3}]


# -- the parameters -----------------------------------------------------------------------------------

DOCS = "internalQueryMaxAllowedDensifyDocs"
BYTES = "internalDocumentSourceDensifyMaxMemoryBytes"


def _over(limit: int) -> str:
    return (
        f"Generated {limit + 1} documents in $densify, which is over the limit of {limit}."
        " Increase the 'internalQueryMaxAllowedDensifyDocs' parameter to allow more generated"
        " documents"
    )


def _failure(exc: OperationFailure) -> tuple[int | None, Any]:
    return exc.code, (exc.details or {}).get("errmsg")


def test_the_parameters_have_mongod_defaults_and_types(client: Client) -> None:
    got = client.admin.command({"getParameter": 1, DOCS: 1, BYTES: 1})
    # Both are `int`s in mongod (query_knobs.idl): 32-bit integers, not longs.
    assert (got[DOCS], got[BYTES]) == (CAP, 100 * 1024 * 1024)
    assert not isinstance(got[DOCS], Int64) and not isinstance(got[BYTES], Int64)


def test_the_cap_is_the_parameter_set_at_runtime(client: Client) -> None:
    coll = client.densify_limits.runtime
    coll.insert_one({"x": 0})
    reply = client.admin.command({"setParameter": 1, DOCS: 10})
    assert reply["was"] == CAP
    assert client.admin.command({"getParameter": 1, DOCS: 1})[DOCS] == 10
    # 1..10 between 0 and 11: ten generated, allowed; one more is refused, naming the limit.
    assert _count(coll, {"field": "x", "range": {"step": 1, "bounds": [0, 11]}}) == 11
    exc = _refused(coll, {"field": "x", "range": {"step": 1, "bounds": [0, 12]}})
    assert _failure(exc) == (5897900, _over(10))
    client.admin.command({"setParameter": 1, DOCS: 11})
    assert _count(coll, {"field": "x", "range": {"step": 1, "bounds": [0, 12]}}) == 12


def test_the_cap_set_at_startup(start_server: Any) -> None:
    # As --setParameter gives it (the same parsing), to a server of its own.
    srv = start_server(parse_startup([f"{DOCS}=7"]))
    with MongoClient(srv.uri) as c:
        assert c.admin.command({"getParameter": 1, DOCS: 1})[DOCS] == 7
        coll = c.densify_limits.startup
        coll.insert_one({"x": 0})
        assert _count(coll, {"field": "x", "range": {"step": 1, "bounds": "full"}}) == 1
        exc = _refused(coll, {"field": "x", "range": {"step": 1, "bounds": [1, 9]}})
        assert _failure(exc) == (5897900, _over(7))


@pytest.mark.parametrize("name", [DOCS, BYTES])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        # mongod: `int` storage with `validator: {gt: 0}`, BadValue for both steps.
        (0, "Invalid value for parameter {name}: 0 is not greater than 0"),
        (-5, "Invalid value for parameter {name}: -5 is not greater than 0"),
        (Int64(2**31), "Failed validating {name}: Out of bounds coercing to integral value"),
        (float("nan"), "Failed validating {name}: Unable to coerce NaN/Inf to integral type"),
        ("ten", "Failed validating {name}: Unable to coerce value to integral type"),
        # mongod would truncate 1.5 to 1; ebbdb refuses a fraction, as for its other integers.
        (1.5, "expected an integer, got 1.5"),
    ],
)
def test_bad_values_are_refused_with_bad_value(
    client: Client, name: str, value: Any, message: str
) -> None:
    before = client.admin.command({"getParameter": 1, name: 1})[name]
    with pytest.raises(OperationFailure) as info:
        client.admin.command({"setParameter": 1, name: value})
    assert _failure(info.value) == (2, message.format(name=name))
    assert (info.value.details or {}).get("codeName") == "BadValue"
    assert client.admin.command({"getParameter": 1, name: 1})[name] == before


def test_the_greatest_int_is_allowed(client: Client) -> None:
    client.admin.command({"setParameter": 1, DOCS: Int64(2**31 - 1)})
    assert client.admin.command({"getParameter": 1, DOCS: 1})[DOCS] == 2**31 - 1


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0", "0 is not greater than 0"),
        ("2147483648", "Out of bounds coercing to integral value"),
        ("many", "Bad value for parameter 'internalQueryMaxAllowedDensifyDocs'"),
    ],
)
def test_a_bad_value_at_startup_stops_the_server(tmp_path: Path, text: str, words: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ebbdb", "--port", "0", "--dbpath", str(tmp_path / "never")]
        + ["--setParameter", f"{DOCS}={text}"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert words in result.stderr
    assert not (tmp_path / "never").exists()


#: mongod's own test of the partitions' limit (densify_memory_limit.js): ten partitions named by
#: 100-character strings hold more than 1,000 bytes.
LONG = "," * 100


def test_the_partitions_limit_is_the_parameter(client: Client) -> None:
    coll = client.densify_limits.memory
    coll.insert_many([{"_id": i, "val": i, "part": f"{LONG}{i}"} for i in range(10)])
    full = {"field": "val", "partitionByFields": ["part"], "range": {"step": 1, "bounds": "full"}}
    assert _count(coll, full) == 100  # each of the ten partitions filled from 0 to 9
    client.admin.command({"setParameter": 1, BYTES: 1000})
    exc = _refused(coll, full)
    assert _failure(exc) == (6007200, "$densify exceeded memory limit of 1000")
    # Documents without the field make no partition state: the same limit lets them through.
    other = client.densify_limits.memory_other
    other.insert_many([{"_id": i, "otherVal": i, "part": f"{LONG}{i}"} for i in range(10)])
    assert _count(other, full) == 10


# -- what streaming changed, as mongod does it -------------------------------------------------------


def test_full_bounds_fill_every_partition_up_to_the_greatest_value(client: Client) -> None:
    # mongod's partitions.js fullTestTwo: the greatest value, on the step, is every partition's.
    coll = client.densify_limits.full_parts
    coll.insert_many([{"val": 0, "part": 0}, {"val": 0, "part": 1}, {"val": 10, "part": 2}])
    out = coll.aggregate(
        [
            {"$project": {"_id": 0}},
            {
                "$densify": {
                    "field": "val",
                    "partitionByFields": ["part"],
                    "range": {"step": 2, "bounds": "full"},
                }
            },
            {"$sort": {"val": 1, "part": 1}},
        ]
    )
    assert list(out) == [{"val": v, "part": p} for v in range(0, 11, 2) for p in range(3)]


def test_an_explicit_range_is_filled_with_no_value_to_start_from(client: Client) -> None:
    coll = client.densify_limits.no_values
    coll.insert_one({"_id": 1})
    out = coll.aggregate([{"$densify": {"field": "x", "range": {"step": 1, "bounds": [0, 3]}}}])
    assert list(out) == [{"_id": 1}, {"x": 0}, {"x": 1}, {"x": 2}]


# -- interruption ------------------------------------------------------------------------------------

#: 400,001 documents, under the cap, each given work to do: many seconds uninterrupted.
LARGE = [
    {"$densify": {"field": "x", "range": {"step": 1, "bounds": [2, 400_002]}}},
    {
        "$set": {
            "s": {
                "$reduce": {
                    "input": {"$range": [0, 20]},
                    "initialValue": 0,
                    "in": {"$add": ["$$value", "$$this", "$x"]},
                }
            }
        }
    },
    {"$count": "n"},
]


class Running:
    """The large $densify on a thread of its own; `ended` says how it ended, and when."""

    def __init__(self, coll: Any, **kw: Any) -> None:
        self.outcome: list[OperationFailure] = []
        self.started = time.monotonic()
        self.finished: float | None = None
        self.job = threading.Thread(target=self._run, args=(coll, kw), daemon=True)
        self.job.start()

    def _run(self, coll: Any, kw: dict[str, Any]) -> None:
        try:
            list(coll.aggregate(LARGE, **kw))
        except OperationFailure as exc:
            self.outcome.append(exc)
        finally:
            self.finished = time.monotonic()

    def ended_with(self, code: int, code_name: str) -> float:
        """Check the outcome; the seconds it ran."""
        self.job.join(60)
        assert not self.job.is_alive(), "the $densify was not interrupted"
        (exc,) = self.outcome
        assert exc.code == code
        assert exc.details is not None
        assert exc.details["codeName"] == code_name
        assert self.finished is not None
        return self.finished - self.started


def _pings_while(job: threading.Thread, client: Client) -> list[float]:
    took: list[float] = []
    while job.is_alive():
        start = time.perf_counter()
        assert client.admin.command("ping") == {"ok": 1.0}
        took.append(time.perf_counter() - start)
        time.sleep(0.01)
    return took


@pytest.fixture
def one(client: Client) -> Any:
    coll = client.densify_limits.one
    coll.insert_one({"x": 1})
    return coll


def test_a_large_densify_ends_at_max_time_ms(one: Any) -> None:
    ran = Running(one, maxTimeMS=200).ended_with(50, "MaxTimeMSExpired")
    assert ran < ENDS_WITHIN


def test_a_large_densify_ends_at_kill_op(one: Any, uri: str) -> None:
    comment = "densify to kill"
    running = Running(one, comment=comment)
    other: Client = MongoClient(uri)
    try:
        ops = wait_until(
            lambda: other.admin.command({"currentOp": 1, "command.comment": comment})["inprog"],
            "the $densify in currentOp",
        )
        assert other.admin.command("killOp", 1, op=ops[0]["opid"])["ok"] == 1.0
        killed = time.monotonic()
        running.ended_with(11601, "Interrupted")
        assert running.finished is not None
        assert running.finished - killed < ENDS_WITHIN
    finally:
        other.close()


def test_other_clients_are_answered_while_a_densify_runs(one: Any, uri: str) -> None:
    running = Running(one, maxTimeMS=1500)
    other: Client = MongoClient(uri)
    try:
        took = _pings_while(running.job, other)
    finally:
        other.close()
    running.ended_with(50, "MaxTimeMSExpired")
    assert took, "no ping was sent while the $densify ran"
    assert max(took) < PING_WITHIN, f"a ping took {max(took):.3f} s"


# -- $fill -------------------------------------------------------------------------------------------

N = 100_000


def _linear(i: int) -> Any:
    """v for document i: known at i % 3 == 0 (10 i), interpolated along t = i within its
    partition (i's parity: known every 6), null past the partition's last known value."""
    if i % 3 == 0:
        return i * 10
    first, last = (0, N - 4) if i % 2 == 0 else (3, N - 1)  # each partition's known ends
    return None if i < first or i > last else float(i * 10)


def _locf(i: int) -> Any:
    """u for document i: set at i % 5 == 0 (to i); the last one set in i's partition."""
    j = i - (i % 10) if i % 2 == 0 else i - ((i - 5) % 10)
    return j if j >= 0 else None


SPOTS = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12_345, 50_000, 77_777, N - 4, N - 3, N - 2, N - 1]


def test_fill_over_a_hundred_thousand_documents_is_exact(client: Client) -> None:
    coll = client.densify_limits.holes
    docs: list[dict[str, Any]] = []
    for i in range(N):
        doc: dict[str, Any] = {"_id": i, "k": i % 2, "t": i}
        if i % 3 == 0:
            doc["v"] = i * 10
        elif i % 3 == 1:
            doc["v"] = None
        if i % 5 == 0:
            doc["u"] = i
        docs.append(doc)
    coll.insert_many(docs)
    fill = {
        "partitionByFields": ["k"],
        "sortBy": {"t": 1},
        "output": {"v": {"method": "linear"}, "u": {"method": "locf"}},
    }
    out = {d["_id"]: d for d in coll.aggregate([{"$fill": fill}])}
    assert len(out) == N
    for i in SPOTS:
        assert (out[i]["v"], out[i]["u"]) == (_linear(i), _locf(i)), i
    assert [i for i in range(N) if (out[i]["v"], out[i]["u"]) != (_linear(i), _locf(i))] == []
