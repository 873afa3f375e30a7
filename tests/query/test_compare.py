"""MongoDB's total order over BSON values: the cross-type ranks, numbers by value whatever their type
(NaN lowest), and objects and arrays element by element."""

from __future__ import annotations

import datetime
import functools
import itertools

import pytest
from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.query.compare import SortKey, compare, equal, rank

# One representative per type bracket, in MongoDB's order.
CROSS_TYPE = [
    ("minkey", MinKey()),
    ("null", None),
    ("number", -1e300),
    ("string", ""),
    ("object", {}),
    ("array", []),
    ("binData", Binary(b"", 0)),
    ("objectId", ObjectId(b"\x00" * 12)),
    ("bool", False),
    ("date", DatetimeMS(-(2**62))),
    ("timestamp", Timestamp(0, 0)),
    ("regex", Regex("", "")),
    ("maxkey", MaxKey()),
]

# Within each bracket, the largest value still sorts below the next bracket's smallest.
CROSS_TYPE_HIGH = [
    ("null", None),
    ("number", float("inf")),
    ("string", "\U0010ffff" * 3),
    ("object", {"z": MaxKey()}),
    ("array", [MaxKey()]),
    ("binData", Binary(b"\xff" * 64, 255)),
    ("objectId", ObjectId(b"\xff" * 12)),
    ("bool", True),
    ("date", DatetimeMS(2**62)),
    ("timestamp", Timestamp(2**32 - 1, 2**32 - 1)),
    ("regex", Regex("\U0010ffff", "imsx")),
]


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


@pytest.mark.parametrize(("i", "j"), list(itertools.product(range(len(CROSS_TYPE)), repeat=2)))
def test_cross_type_order(i: int, j: int) -> None:
    (_, a), (_, b) = CROSS_TYPE[i], CROSS_TYPE[j]
    assert compare(a, b) == _sign(i - j)


@pytest.mark.parametrize("i", range(len(CROSS_TYPE_HIGH) - 1))
def test_largest_of_a_type_below_smallest_of_the_next(i: int) -> None:
    name, high = CROSS_TYPE_HIGH[i]
    next_name = CROSS_TYPE_HIGH[i + 1][0]
    low_next = dict(CROSS_TYPE)[next_name]
    assert compare(high, low_next) == -1, (name, next_name)
    assert compare(low_next, high) == 1


def test_minkey_and_maxkey_bound_everything() -> None:
    for _, v in CROSS_TYPE[1:-1] + CROSS_TYPE_HIGH:
        assert compare(MinKey(), v) == -1
        assert compare(MaxKey(), v) == 1
    assert compare(MinKey(), MinKey()) == 0
    assert compare(MaxKey(), MaxKey()) == 0


# -- numbers ---------------------------------------------------------------------------------------

NUMBERS_ASCENDING = [
    [float("nan"), Decimal128("NaN")],
    [float("-inf"), Decimal128("-Infinity")],
    [Int64(-(2**63))],
    [-1, -1.0, Int64(-1), Decimal128("-1"), Decimal128("-1.00")],
    [-0.5, Decimal128("-0.5")],
    [0, 0.0, -0.0, Int64(0), Decimal128("0"), Decimal128("-0")],
    [1e-300],
    [Decimal128("0.1")],
    [0.1],  # the double just above one tenth
    [1, 1.0, Int64(1), Decimal128("1"), Decimal128("1.0")],
    [2**31 - 1, Int64(2**31 - 1)],
    [2**53, 2.0**53, Int64(2**53), Decimal128(str(2**53))],
    [Int64(2**53 + 1), Decimal128(str(2**53 + 1))],
    [Int64(2**63 - 1), Decimal128(str(2**63 - 1))],
    [2.0**63],
    [float("inf"), Decimal128("Infinity")],
]


def test_numbers_compare_by_value_across_types() -> None:
    for gi, group_a in enumerate(NUMBERS_ASCENDING):
        for gj, group_b in enumerate(NUMBERS_ASCENDING):
            for a in group_a:
                for b in group_b:
                    assert compare(a, b) == _sign(gi - gj), (a, b)


def test_nan_is_the_lowest_number_but_above_null() -> None:
    assert compare(float("nan"), float("-inf")) == -1
    assert compare(float("nan"), float("nan")) == 0
    assert compare(None, float("nan")) == -1
    assert compare(float("nan"), "") == -1


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (1, 1.0, True),
        (1, Int64(1), True),
        (1.0, Decimal128("1.000"), True),
        (True, 1, False),
        (False, 0, False),
        ("1", 1, False),
        (None, None, True),
        (None, 0, False),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, False),
        ([1, 2], [1.0, Int64(2)], True),
        ([1, 2], [2, 1], False),
        (DatetimeMS(0), datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC), True),
        (DatetimeMS(1500), datetime.datetime(1970, 1, 1, 0, 0, 1, 500_000), True),
        (Binary(b"ab", 0), b"ab", True),
        (Binary(b"ab", 0), Binary(b"ab", 5), False),
        (Regex("a", "im"), Regex("a", "mi"), True),
    ],
)
def test_equal(a: object, b: object, expected: bool) -> None:
    assert equal(a, b) is expected
    assert equal(b, a) is expected


# -- within a type ---------------------------------------------------------------------------------

ORDERED_WITHIN_TYPE = [
    # strings: by UTF-8 bytes / code points, case-sensitive
    ["", "\x00", "A", "B", "Z", "a", "ab", "b", "z", "é", "\uffff", "\U0001f600"],
    # objects: element by element (type, then field name, then value); fewer fields first
    [
        {},
        {"a": None},
        {"a": 1},
        {"a": 1, "b": 1},
        {"a": 2},
        {"b": 1},
        {"a": "x"},
        {"a": {}},
        {"a": []},
    ],
    # arrays: element by element, shorter prefix first
    [[], [None], [1], [1, 1], [1, 2], [1, "a"], [2], ["a"], [{}], [[]], [[1]]],
    # binData: length first, then subtype, then bytes
    [
        Binary(b"", 0),
        Binary(b"\xff", 0),
        Binary(b"\x00", 1),
        Binary(b"\x00\x00", 0),
        Binary(b"\x00\x01", 0),
        Binary(b"\x00\x00", 4),
    ],
    [
        ObjectId(b"\x00" * 11 + b"\x01"),
        ObjectId(b"\x00" * 11 + b"\x02"),
        ObjectId(b"\x01" + b"\x00" * 11),
    ],
    [False, True],
    [DatetimeMS(-(2**40)), DatetimeMS(-1), DatetimeMS(0), DatetimeMS(1), DatetimeMS(2**40)],
    [Timestamp(0, 5), Timestamp(1, 0), Timestamp(1, 1), Timestamp(2**32 - 1, 0)],
    [Regex("a", ""), Regex("a", "i"), Regex("a", "m"), Regex("b", "")],
]


@pytest.mark.parametrize("values", ORDERED_WITHIN_TYPE, ids=lambda v: type(v[-1]).__name__)
def test_order_within_type(values: list) -> None:
    for i, a in enumerate(values):
        for j, b in enumerate(values):
            assert compare(a, b) == _sign(i - j), (a, b)


def test_objects_compare_value_type_before_field_name() -> None:
    # MongoDB compares each element's canonical type first, so {b: 1} < {a: "x"}.
    assert compare({"b": 1}, {"a": "x"}) == -1
    assert compare({"a": 1}, {"b": 1}) == -1
    assert compare({"a": 1, "b": 2}, {"a": 1, "b": 3}) == -1
    assert compare({"a": {"b": 1}}, {"a": {"b": 2}}) == -1


def test_nested_arrays_compare_elementwise() -> None:
    assert compare([1, [2, 3]], [1, [2, 4]]) == -1
    assert compare([1, [2, 3]], [1, [2]]) == 1
    assert compare([[1]], [1]) == 1  # array above number


def test_rank_rejects_non_bson_values() -> None:
    with pytest.raises(TypeError):
        rank(object())


def test_sort_key_orders_like_compare() -> None:
    values = [MaxKey(), True, "b", 2, None, [1], {"a": 1}, 1.5, MinKey(), "a", Int64(1)]
    ordered = sorted(values, key=SortKey)
    assert ordered == sorted(values, key=functools.cmp_to_key(compare))
    assert [rank(v) for v in ordered] == sorted(rank(v) for v in values)
    assert ordered[0] == MinKey() and ordered[-1] == MaxKey()
    assert SortKey(1) == SortKey(1.0)
    assert SortKey(1) != SortKey("1")
