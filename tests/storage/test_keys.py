"""The key encoding holds against the comparison function: memcmp of two encodings gives the sign of
compare(), descending encodings reverse it, compound keys follow each field's direction, and fit()
keeps keys within LMDB's limit without merging distinct values."""

from __future__ import annotations

import decimal
import functools
from typing import Any

import pytest
from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS
from hypothesis import given, settings
from hypothesis import strategies as st

from ebbdb.storage.indexes import keys
from ebbdb.storage.query.compare import compare

SETTINGS = settings(max_examples=300, deadline=None)


def sign(x: int) -> int:
    return (x > 0) - (x < 0)


def bytes_cmp(a: bytes, b: bytes) -> int:
    return (a > b) - (a < b)


# -- strategies ------------------------------------------------------------------------------------

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64_EDGES = [0, 2**31, 2**53, 2**62, 2**63 - 1, -(2**63), -(2**53), 2**63 - 1024, 2**63 - 513]
INT64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.builds(
        lambda base, off: max(-(2**63), min(2**63 - 1, base + off)),
        st.sampled_from(INT64_EDGES),
        st.integers(-1100, 1100),
    ),
)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            0.0,
            -0.0,
            float("inf"),
            float("-inf"),
            float("nan"),
            2.0**53,
            2.0**63,
            -(2.0**63),
            2.0**53 + 2,
            0.1,
            1e-310,
        ]
    ),
    INT64.map(float),
)


def _decimal(mantissa: int, exponent: int) -> Decimal128:
    return Decimal128(decimal.Decimal(mantissa).scaleb(exponent))


# Modest precision: up to 15 significant digits, or exact int64 values (what int64 comparisons
# need); exponents small enough that every value is a finite double.
DECIMALS = st.one_of(
    st.builds(_decimal, st.integers(-(10**15) + 1, 10**15 - 1), st.integers(-20, 20)),
    INT64.map(lambda n: Decimal128(str(n))),
    st.sampled_from(
        [Decimal128(s) for s in ("NaN", "-NaN", "Infinity", "-Infinity", "-0", "0", "0.1", "1E+3")]
    ),
)
NUMBERS = st.one_of(INT32, INT64.map(Int64), FLOATS, DECIMALS)

TEXT = st.one_of(
    st.text(max_size=6),
    st.sampled_from(
        ["", "\x00", "a\x00", "a\x00b", "a", "ab", "\xff", "é", "\U0001f600", "\uffff"]
    ),
)
KEY_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=4
)
BINARY = st.builds(
    Binary, st.binary(max_size=6), st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 0x80, 0xFF])
)
REGEX = st.builds(
    Regex,
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        max_size=4,
    ),
    st.sampled_from(["", "i", "m", "s", "x", "im", "imsx", "u"]),
)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    NUMBERS,
    TEXT,
    st.binary(min_size=12, max_size=12).map(ObjectId),
    st.integers(-(2**62), 2**62).map(DatetimeMS),
    BINARY,
    st.builds(Timestamp, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    st.just(MinKey()),
    st.just(MaxKey()),
    REGEX,
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(KEY_TEXT, children, max_size=3),
    ),
    max_leaves=8,
)


def same_number_forms(n: int) -> list[object]:
    """Every BSON numeric type that holds exactly `n`."""
    forms: list[object] = [Int64(n), Decimal128(str(n))]
    if -(2**31) <= n < 2**31:
        forms.append(n)
    if float(n) == n:
        forms.append(float(n))
    return forms


# -- ordering --------------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(VALUES, min_size=2, max_size=5))
def test_encoding_order_matches_compare(values: list[object]) -> None:
    encoded = [keys.encode(v) for v in values]
    descending = [keys.encode_descending(v) for v in values]
    for a, ea, da in zip(values, encoded, descending):
        for b, eb, db in zip(values, encoded, descending):
            c = sign(compare(a, b))
            assert bytes_cmp(ea, eb) == c, (a, b)
            assert bytes_cmp(da, db) == -c, (a, b)


@SETTINGS
@given(NUMBERS, NUMBERS)
def test_number_encoding_matches_compare(a: object, b: object) -> None:
    assert bytes_cmp(keys.encode(a), keys.encode(b)) == sign(compare(a, b))
    assert bytes_cmp(keys.encode_descending(a), keys.encode_descending(b)) == -sign(compare(a, b))


@SETTINGS
@given(INT64, st.integers(-3, 3))
def test_equal_numbers_of_every_type_encode_equal(n: int, delta: int) -> None:
    forms = same_number_forms(n)
    assert len({keys.encode(f) for f in forms}) == 1, forms
    m = max(-(2**63), min(2**63 - 1, n + delta))
    for f in forms:
        for g in same_number_forms(m):
            assert bytes_cmp(keys.encode(f), keys.encode(g)) == sign(n - m), (f, g)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (0, -0.0),
        (0.0, Decimal128("-0")),
        (Int64(2**53 + 1), Decimal128(str(2**53 + 1))),
        (2**31 - 1, Int64(2**31 - 1)),
        (float("nan"), Decimal128("NaN")),
        (float("inf"), Decimal128("Infinity")),
        (float("-inf"), Decimal128("-Infinity")),
        (Decimal128("1.0"), 1),
        (Decimal128("1E+2"), 100.0),
    ],
)
def test_known_equal_numbers(a: object, b: object) -> None:
    assert compare(a, b) == 0
    assert keys.encode(a) == keys.encode(b)


@pytest.mark.parametrize(
    ("low", "high"),
    [
        (float("nan"), float("-inf")),
        (Decimal128("NaN"), Decimal128("-Infinity")),
        (float("-inf"), -(2**63)),
        (Int64(2**53), Int64(2**53 + 1)),  # the same double; the tie-breaker decides
        (Int64(2**63 - 2), Int64(2**63 - 1)),
        (2.0**53, Int64(2**53 + 1)),
        (Int64(2**63 - 1), 2.0**63),
        (Decimal128("0.1"), 0.1),  # 0.1 as a double is slightly above one tenth
        (0.3, Decimal128("0.3")),  # ...and 0.3 slightly below three tenths
        (Int64(2**63 - 1), float("inf")),
        ("", "\x00"),
        ("a", "a\x00"),
        ("a\x00", "a\x00\x00"),
        ("a\x00", "a\x01"),
        ("a\x00z", "a\x01"),
        ("\uffff", "\U00010000"),
        ({"a": 1}, {"a": 1, "b": 1}),
        ({"a": 5}, {"a": "x"}),
        ({"b": 1}, {"a": "x"}),  # value type before field name
        ({"a": 1}, {"b": 1}),
        ({"a": 2}, {"ab": 1}),
        ([], [MinKey()]),
        ([1], [1, MinKey()]),
        ([[]], [[None]]),
        (Binary(b"\xff", 0), Binary(b"\x00\x00", 0)),
        (Binary(b"\xff", 0), Binary(b"\x00", 1)),
        (Timestamp(1, 5), Timestamp(2, 0)),
        (DatetimeMS(-1), DatetimeMS(0)),
        (Regex("a", "m"), Regex("a\x01", "")),
        (Regex("a", ""), Regex("a", "i")),
    ],
)
def test_known_orderings(low: object, high: object) -> None:
    assert compare(low, high) < 0 and compare(high, low) > 0
    assert keys.encode(low) < keys.encode(high)
    assert keys.encode_descending(low) > keys.encode_descending(high)


@SETTINGS
@given(
    st.integers(1, 3).flatmap(
        lambda n: st.tuples(
            st.lists(VALUES, min_size=n, max_size=n),
            st.lists(VALUES, min_size=n, max_size=n),
            st.lists(st.sampled_from([1, -1]), min_size=n, max_size=n),
        )
    )
)
def test_compound_keys_follow_each_direction(case: tuple[list, list, list]) -> None:
    a, b, directions = case
    expected = 0
    for va, vb, d in zip(a, b, directions):
        c = sign(compare(va, vb)) * d
        if c:
            expected = c
            break
    ka = keys.encode_compound(tuple(a), tuple(directions))
    kb = keys.encode_compound(tuple(b), tuple(directions))
    assert bytes_cmp(ka, kb) == expected


@SETTINGS
@given(st.lists(st.tuples(VALUES, VALUES), min_size=2, max_size=6))
def test_compound_keys_sort_like_mixed_direction_comparison(rows: list[tuple]) -> None:
    directions = (1, -1)

    def cmp_rows(x: tuple, y: tuple) -> int:
        for vx, vy, d in zip(x, y, directions):
            c = compare(vx, vy) * d
            if c:
                return sign(c)
        return 0

    by_compare = sorted(rows, key=functools.cmp_to_key(cmp_rows))
    by_bytes = sorted(rows, key=lambda r: keys.encode_compound(r, directions))
    for x, y in zip(by_compare, by_bytes):
        assert cmp_rows(x, y) == 0


def test_compound_with_mixed_directions_table() -> None:
    rows = [(1, "b"), (1, "a"), (2, "z"), (0, "c"), (1, "c")]
    ordered = sorted(rows, key=lambda r: keys.encode_compound(r, (1, -1)))
    assert ordered == [(0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "z")]
    ordered = sorted(rows, key=lambda r: keys.encode_compound(r, (-1, 1)))
    assert ordered == [(2, "z"), (1, "a"), (1, "b"), (1, "c"), (0, "c")]


# -- fit -------------------------------------------------------------------------------------------

PREFIX = b"\x00" * 7 + b"\x05"
SUFFIX = b"\x00" * 7 + b"\x09"


@pytest.mark.parametrize("suffix", [b"", SUFFIX])
def test_fit_leaves_short_keys_alone(suffix: bytes) -> None:
    body = keys.encode("short")
    assert keys.fit(PREFIX, body, suffix) == (PREFIX + body + suffix, False)
    room = keys.MAX_KEY - len(PREFIX) - keys.SUFFIX_ROOM
    exact = b"\x07" * room
    assert keys.fit(PREFIX, exact, suffix) == (PREFIX + exact + suffix, False)
    key, truncated = keys.fit(PREFIX, exact + b"\x07", suffix)
    assert truncated and len(key) <= keys.MAX_KEY


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=504, max_size=3000), st.sampled_from([b"", SUFFIX]))
def test_fit_truncates_long_bodies(body: bytes, suffix: bytes) -> None:
    key, truncated = keys.fit(PREFIX, body, suffix)
    assert truncated
    assert len(key) <= keys.MAX_KEY
    assert key.startswith(PREFIX) and key.endswith(suffix)
    assert keys.fit(PREFIX, bytes(body), suffix) == (key, True)  # equal bodies, equal keys


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=600, max_size=1200), st.text(min_size=1, max_size=5))
def test_fit_keeps_different_long_values_apart(common: str, tail: str) -> None:
    a = keys.encode(common + tail)
    b = keys.encode(common + tail + "!")
    ka, ta = keys.fit(PREFIX, a)
    kb, tb = keys.fit(PREFIX, b)
    assert ta and tb
    assert ka != kb
    assert len(ka) <= keys.MAX_KEY and len(kb) <= keys.MAX_KEY
    assert keys.fit(PREFIX, keys.encode(common + tail)) == (ka, True)


def test_fit_long_values_differing_only_at_the_end() -> None:
    a = keys.encode_compound(("x" * 1000, 1), (1, 1))
    b = keys.encode_compound(("x" * 1000, 2), (1, 1))
    assert keys.fit(PREFIX, a)[0] != keys.fit(PREFIX, b)[0]
    assert keys.fit(PREFIX, a, SUFFIX)[0] != keys.fit(PREFIX, b, SUFFIX)[0]


@pytest.mark.parametrize(
    "value",
    [
        0,
        -7,
        2**40,
        1.5,
        -0.25,
        float("inf"),
        "",
        "a\x00b",
        True,
        False,
        None,
        [1, ["x"]],
        {"a": {"b": 2}},
        ObjectId("0123456789ab0123456789ab"),
    ],
)
def test_decode_inverts_encode(value: Any) -> None:
    encoded = keys.encode(value)
    decoded, end = keys.decode(encoded)
    assert end == len(encoded)
    assert keys.encode(decoded) == encoded


def test_decode_refuses_bytes_no_value_encodes_to() -> None:
    for bad in (b"", b"\xfe", keys.encode("abc")[:-1]):
        with pytest.raises(ValueError):
            keys.decode(bad)


def test_expiry_keys_parse_back() -> None:
    from ebbdb.storage.expiry import ttl

    key = ttl.expiry_prefix(7, ttl.KIND_ABSOLUTE) + ttl._time(-1234) + (99).to_bytes(8, "big")
    assert ttl.parse_expiry_key(key) == ttl.ExpiryEntry(7, ttl.KIND_ABSOLUTE, -1234, 99)
    assert ttl.expiry_rid(key) == 99
