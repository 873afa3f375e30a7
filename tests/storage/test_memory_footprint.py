"""What a value costs as CPython holds it (storage/core/footprint.py) against tracemalloc's count,
and accumulators charging what they hold to the stage that made them (limits.Tracked, bound with
memory.bound); a stage's tracker gives everything back to the pool when it closes."""

from __future__ import annotations

import datetime
import tracemalloc
from collections.abc import Callable
from typing import Any

import bson
import pytest
from bson import ObjectId

from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.footprint import footprint
from ebbdb.storage.core.interrupt import OpToken, current
from ebbdb.storage.core.limits import MemoryLimits, Tracked
from ebbdb.storage.core.memory import Pool, Tracker, bound
from ebbdb.storage.execution import spill
from ebbdb.storage.query.expressions import compile_accumulator

SHAPES: dict[str, Callable[[int], Any]] = {
    "flat document": lambda i: {"_id": i + 1000, "k": i % 97, "pad": "x" * 900, "v": i * 0.5},
    "nested document": lambda i: {"_id": ObjectId(), "a": {"b": [i + 1000, "y" * 50, {"c": 1.5}]}},
    "dates and strings": lambda i: {"t": datetime.datetime(2026, 1, 1), "s": "word " * 20},
    "array of numbers": lambda i: [float(j) for j in range(50)],
    "long string": lambda i: "z" * 5000,
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_footprint_is_close_to_what_decoded_values_take(shape: str) -> None:
    make = SHAPES[shape]
    raw = [bson.encode({"v": make(i)}) for i in range(2000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        values = [bson.decode(r, CODEC)["v"] for r in raw]
        real = (tracemalloc.get_traced_memory()[0] - before) / len(values)
    finally:
        tracemalloc.stop()
    counted = sum(footprint(v) for v in values) / len(values)
    print(f"{shape}: {counted:.0f} counted, {real:.0f} real")
    assert real / 1.5 <= counted <= real * 1.5, (real, counted)


def test_a_value_held_twice_counts_once() -> None:
    inner = ["q" * 1000] * 10
    doubled = [inner, inner, inner]
    assert footprint(doubled) < footprint(inner) + 200


def test_tracked_charges_the_bound_tracker_and_its_own_limit() -> None:
    pool = Pool()
    stage = Tracker("$group", pool)
    held = bound(stage, lambda: Tracked("$push", 10_000))
    unbound = Tracked("$push")
    assert held.tracker is stage and unbound.tracker is None
    held.add("a" * 1000)
    assert stage.used == held.bytes == footprint("a" * 1000) + 8
    held.swap("a" * 1000, "b" * 3000)
    assert stage.used == held.bytes == footprint("b" * 3000) + 8
    held.grow(-held.bytes)
    assert stage.used == 0
    with pytest.raises(QueryError, match=r"\$push used too much memory"):
        for _ in range(20):
            held.add("c" * 1000)


def test_group_accumulators_count_toward_the_limit_and_go_back_to_the_pool() -> None:
    pool = Pool()
    token = OpToken(pool=pool)
    first = compile_accumulator("$first", "$pad")
    docs = [{"_id": i, "pad": "p" * 1000} for i in range(500)]

    def run(limits: MemoryLimits) -> list[Any]:
        groups = spill.group(
            iter(docs),
            lambda d: (d["_id"], d["_id"]),
            lambda: [first()],
            lambda accs, d: accs[0].add(d, {}),
            limits,
            spill.dump_document,
            lambda raw: spill.load_document(raw)[0],
        )
        return [accs[0].result() for _, accs in groups]

    reset = current.set(token)
    try:
        assert len(run(MemoryLimits())) == 500
        assert token.memory.peak > 500 * 1000
        with pytest.raises(QueryError, match="Exceeded memory limit for \\$group"):
            run(MemoryLimits(group_bytes=200_000, allow_disk=False))
    finally:
        current.reset(reset)
    assert token.memory.used == 0
    assert pool.used == 0


@pytest.mark.parametrize(
    ("op", "arg"),
    [
        ("$push", "$v"),
        ("$addToSet", "$v"),
        ("$median", {"input": "$v", "method": "approximate"}),
        ("$percentile", {"input": "$v", "p": [0.5], "method": "approximate"}),
        ("$lastN", {"input": "$v", "n": 1000}),
    ],
)
def test_accumulators_that_hold_values_charge_their_stage(op: str, arg: Any) -> None:
    stage = Tracker("$group", Pool())
    acc = bound(stage, compile_accumulator(op, arg))
    for i in range(1000):
        acc.add({"v": float(i)}, {})
    # A thousand doubles held: 24 bytes each and their slots, at the least.
    assert 1000 * 32 <= stage.used < 1000 * 200
