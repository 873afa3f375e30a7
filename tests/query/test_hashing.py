"""mongod's hashed-index hash (storage/query/hashing.py) against mongod's own outputs: its key
generator's golden keys, its start-up self-check and the `$toHashedIndexKey` docs' example; and
the fractional numbers whose equal values of other types hash differently."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64, MinKey

from ebbdb.storage.query.compare import UNDEFINED
from ebbdb.storage.query.hashing import hash_value, point_hashes
from ebbdb.storage.query.paths import MISSING


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 4470791281878691347),
        (5.0, 4470791281878691347),
        (Int64(5), 4470791281878691347),
        (Decimal128("5"), 4470791281878691347),
        (42, -944302157085130861),
        ({"b": "string"}, -8313607634880231286),
        ({"b": "abc", "c": "def"}, -9172419457489471550),
        (None, 2338878944348059895),
        (MISSING, 2338878944348059895),
        ("test", -3120687751959783844),
        ("value", 6628978540110585136),
        ("string to hash", 763543691661428748),
        (0, 4854801880128277513),
        (-0.0, 4854801880128277513),
        (MinKey(), 7961148599568647290),
        (UNDEFINED, 40158834000849533),
    ],
)
def test_hash_is_mongods(value: Any, expected: int) -> None:
    got = hash_value(value)
    assert got == expected and type(got) is Int64


def test_numbers_fold_as_mongod_folds_them() -> None:
    assert hash_value(5.9) == hash_value(5)  # a double truncates
    assert hash_value(Decimal128("5.5")) == hash_value(6)  # a decimal rounds half to even
    assert hash_value(Decimal128("4.5")) == hash_value(4)
    assert hash_value(float("nan")) == hash_value(0)
    assert hash_value(2.0**63) == hash_value(Int64(-(2**63)))  # mongod's old wrap, kept
    assert hash_value(1e300) == hash_value(Int64(2**63 - 1))
    assert hash_value([1, 2]) != hash_value([2, 1])


def test_point_hashes_cover_every_type_an_equal_number_may_have() -> None:
    assert point_hashes(1) == [hash_value(1)]
    assert point_hashes("x") == [hash_value("x")]
    assert sorted(point_hashes(1.5)) == sorted([hash_value(1), hash_value(2)])
    assert sorted(point_hashes(Decimal128("1.5"))) == sorted([hash_value(1), hash_value(2)])
    assert point_hashes(2.0) == [hash_value(2)]
