"""Expressions that build or hold large values (issue 24): mongod's codes and messages for what
they refuse, the operation's memory charged while they build (146 past the server's cap, named
for the operator), and interruption inside their loops."""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest
from bson.int64 import Int64

from ebbdb.storage.core import interrupt
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.interrupt import Interrupted, OpToken
from ebbdb.storage.core.memory import Pool
from ebbdb.storage.query.compare import compare
from ebbdb.storage.query.expressions import compile_expression


def _run(spec: Any, doc: dict[str, Any] | None = None, token: OpToken | None = None) -> Any:
    ctx = interrupt.current.set(token or OpToken())
    try:
        return compile_expression(spec)(doc or {}, {})
    finally:
        interrupt.current.reset(ctx)


def _error(
    spec: Any, doc: dict[str, Any] | None = None, token: OpToken | None = None
) -> tuple[str, str]:
    with pytest.raises(QueryError) as exc:
        _run(spec, doc, token)
    return exc.value.code_name, str(exc.value)


MAP_STRINGS = {
    "$map": {
        "input": {"$range": [0, 5_000_000]},
        "in": {"$concat": ["item-", {"$toString": "$$this"}]},
    }
}


def test_range_past_its_limit_is_146_in_mongods_words() -> None:
    assert _error({"$range": [0, 7_000_000]}) == (
        "ExceededMemoryLimit",
        "$range would use too much memory (112000024 bytes) and cannot spill to disk. "
        "Memory limit: 104857600 bytes",
    )


def test_map_past_100mb_is_146_before_it_is_whole() -> None:
    code, message = _error(MAP_STRINGS)
    assert code == "ExceededMemoryLimit"
    assert message.startswith("$map would use too much memory (")
    assert message.endswith("bytes) and cannot spill to disk. Memory limit: 104857600 bytes")
    size = int(message.split("(")[1].split(" ")[0])
    assert 104857600 <= size < 104857600 + 2_000_000  # stopped within a chunk of the limit


def test_strings_past_16mb_are_16493_before_they_are_built() -> None:
    big = {"s": "a" * 2_000_000}
    replace = {"$replaceAll": {"input": "$s", "find": "a", "replacement": "bbbbbbbbbb"}}
    expected = ("Location16493", "Tried to create string longer than 16MB")
    assert _error(replace, big) == expected
    assert _error({"$concat": ["$s"] * 9}, big) == expected
    assert len(_run({"$concat": ["$s"] * 8}, big)) == 16_000_000


def test_split_past_100mb_is_146_and_splits_like_python_otherwise() -> None:
    text = ",".join(["ab"] * 2_000_000)
    assert _run({"$split": ["$t", ","]}, {"t": text}) == text.split(",")
    overlapping = "aXYaXYXYa" * 300_000
    assert _run({"$split": ["$t", "XYX"]}, {"t": overlapping}) == overlapping.split("XYX")
    code, message = _error({"$split": ["$t", ","]}, {"t": "," * 15_000_000})
    assert code == "ExceededMemoryLimit"
    assert message.startswith("$split would use too much memory (")


def test_past_the_server_cap_the_builder_gets_146_and_gives_everything_back() -> None:
    pool = Pool(cap=64 * 1024 * 1024)
    token = OpToken(pool=pool)
    code, message = _error(MAP_STRINGS, token=token)
    assert code == "ExceededMemoryLimit"
    assert message.startswith("$range needs more memory, but the server's operations already")
    assert pool.used == 0
    small = {
        "$map": {
            "input": {"$range": [0, 500_000]},
            "in": {"$concat": ["x", {"$toString": "$$this"}]},
        }
    }
    code, message = _error(small, token=OpToken(pool=Pool(cap=30 * 1024 * 1024)))
    assert message.startswith("$map needs more memory, but the server's operations already")
    # Under the cap: the charge is the operation's peak, and all of it is given back.
    token = OpToken(pool=Pool(cap=1 << 30))
    assert len(_run(small, token=token)) == 500_000
    assert token.pool.used == 0
    assert 30_000_000 < token.memory.peak < 80_000_000  # ~18 MB of ints, ~30 MB of strings


def test_reduce_charges_its_latest_value_not_every_step() -> None:
    token = OpToken(pool=Pool(cap=1 << 30))
    grow = {
        "$reduce": {
            "input": {"$range": [0, 200]},
            "initialValue": "",
            "in": {"$concat": ["$$value", "x" * 60_000]},
        }
    }
    assert len(_run(grow, token=token)) == 12_000_000
    # Steps of 1 MB to 12 MB: their sum would be ~80 MB, the largest one is 12 MB.
    assert 12_000_000 <= token.memory.peak < 30_000_000
    assert token.pool.used == 0


@pytest.mark.parametrize(
    "spec",
    [
        {"$map": {"input": {"$range": [0, 3_000_000]}, "in": "$$this"}},
        {"$filter": {"input": {"$range": [0, 3_000_000]}, "cond": True}},
        {"$reduce": {"input": {"$range": [0, 3_000_000]}, "initialValue": 0, "in": "$$this"}},
        {"$in": [-1, {"$range": [0, 3_000_000]}]},
        {"$sortArray": {"input": {"$range": [0, 3_000_000]}, "sortBy": -1}},
        {"$setUnion": [{"$range": [0, 3_000_000]}]},
        {"$zip": {"inputs": [{"$range": [0, 3_000_000]}]}},
        {"$range": [0, 3_000_000]},
        {"$reverseArray": {"$range": [0, 3_000_000]}},
    ],
    ids=lambda spec: next(iter(spec)),
)
def test_loops_stop_when_the_operation_is_killed(spec: Any) -> None:
    token = OpToken()
    token.kill()
    with pytest.raises(Interrupted) as exc:
        _run(spec, token=token)
    assert exc.value.code_name == "Interrupted"


def _typed(values: list[Any]) -> list[tuple[str, Any]]:
    return [(type(v).__name__, v) for v in values]


@pytest.mark.parametrize("direction", [1, -1])
def test_sort_array_of_numbers_orders_as_bson(direction: int) -> None:
    """$sortArray of plain numbers (int, long, double; sorted without a key object each, in runs
    past 65,536) gives BSON's order, equal values of different types kept in input order."""
    rng = random.Random(7)
    values: list[Any] = [
        rng.choice([rng.randint(-50, 50), Int64(rng.randint(-50, 50)), rng.randint(-50, 50) / 2])
        for _ in range(150_000)
    ] + [-0.0, 0, Int64(0), 2**62, float(2**62)]
    rng.shuffle(values)
    got = _run({"$sortArray": {"input": "$a", "sortBy": direction}}, {"a": values})
    expected = sorted(values, key=functools.cmp_to_key(compare), reverse=direction < 0)
    assert _typed(got) == _typed(expected)


def test_sort_array_with_nan_orders_it_first() -> None:
    """NaN sorts below every number in BSON (the general path: Python would misplace it)."""
    nan = float("nan")
    got = _run({"$sortArray": {"input": "$a", "sortBy": 1}}, {"a": [3, nan, -1.5, 2]})
    assert got[1:] == [-1.5, 2, 3]
    assert got[0] != got[0]


def test_sort_array_of_many_numbers_stops_when_killed() -> None:
    token = OpToken()
    token.kill()
    with pytest.raises(Interrupted):
        _run({"$sortArray": {"input": "$a", "sortBy": 1}}, {"a": list(range(200_000))}, token)
