"""Property tests: the matcher's typed fast paths (equality, ranges, hashed $in) agree with a plain
reference built on storage.query.compare, for scalars of every numeric type (NaN, infinities,
int64 bounds, decimals), strings, booleans, null, ObjectIds and dates, alone and inside arrays."""

from __future__ import annotations

from typing import Any

from bson import Decimal128, Int64, ObjectId
from bson.datetime_ms import DatetimeMS
from hypothesis import given, settings
from hypothesis import strategies as st

from ebbdb.storage.query.compare import compare, equal, is_nan, rank
from ebbdb.storage.query.match import compile_filter

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
EDGE_INTS = st.sampled_from(
    [0, 1, -1, 2**31 - 1, 2**31, -(2**31), 2**53, 2**53 + 1, 2**63 - 1, -(2**63)]
)
DECIMALS = st.one_of(
    st.builds(
        lambda m, e: Decimal128(f"{m}E{e}"),
        st.integers(min_value=-(10**20), max_value=10**20),
        st.integers(min_value=-30, max_value=30),
    ),
    st.sampled_from(["1", "1.0", "-0", "0.1", "NaN", "-NaN", "Infinity", "-Infinity"]).map(
        Decimal128
    ),
)

SCALARS = st.one_of(
    INT64.filter(lambda n: -(2**31) <= n < 2**31),
    EDGE_INTS,
    INT64.map(Int64),
    EDGE_INTS.map(Int64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 0.1, 2.0**53, 2.0**63, float("nan")]),
    DECIMALS,
    st.text(max_size=3),
    st.booleans(),
    st.none(),
    st.binary(min_size=12, max_size=12).map(ObjectId),
    st.integers(min_value=-(2**40), max_value=2**40).map(DatetimeMS),
)


def ref_eq(v: Any, q: Any) -> bool:
    return equal(v, q)


def ref_range(v: Any, q: Any, op: str) -> bool:
    if q is None:
        return v is None and op in ("$gte", "$lte")
    if is_nan(q) or is_nan(v):
        return is_nan(q) and is_nan(v) and op in ("$gte", "$lte")
    if rank(v) != rank(q):
        return False
    c = compare(v, q)
    return {"$gt": c > 0, "$gte": c >= 0, "$lt": c < 0, "$lte": c <= 0}[op]


@settings(max_examples=600, deadline=None)
@given(SCALARS, SCALARS)
def test_equality_matches_reference(q: Any, v: Any) -> None:
    expected = ref_eq(v, q)
    assert compile_filter({"a": q})({"a": v}) is expected
    assert compile_filter({"a": {"$eq": q}})({"a": v}) is expected
    assert compile_filter({"a": {"$ne": q}})({"a": v}) is not expected
    assert compile_filter({"a.b": q})({"a": {"b": v}}) is expected


@settings(max_examples=600, deadline=None)
@given(st.lists(SCALARS, max_size=4), SCALARS)
def test_in_matches_reference(qs: list[Any], v: Any) -> None:
    expected = any(ref_eq(v, q) for q in qs)
    assert compile_filter({"a": {"$in": qs}})({"a": v}) is expected
    assert compile_filter({"a": {"$nin": qs}})({"a": v}) is not expected


@settings(max_examples=600, deadline=None)
@given(SCALARS, SCALARS, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]))
def test_ranges_match_reference(q: Any, v: Any, op: str) -> None:
    assert compile_filter({"a": {op: q}})({"a": v}) is ref_range(v, q, op)


@settings(max_examples=300, deadline=None)
@given(SCALARS, st.lists(SCALARS, max_size=3))
def test_arrays_match_any_element(q: Any, vs: list[Any]) -> None:
    expected = any(ref_eq(v, q) for v in vs)
    assert compile_filter({"a": q})({"a": vs}) is expected
    assert compile_filter({"a": {"$in": [q]}})({"a": vs}) is expected
    assert compile_filter({"a.b": q})({"a": [{"b": v} for v in vs]}) is expected


def test_missing_field_only_matches_null() -> None:
    assert compile_filter({"a": None})({}) is True
    assert compile_filter({"a": {"$in": [None]}})({}) is True
    for q in (0, "", False, Int64(0), Decimal128("0"), float("nan")):
        assert compile_filter({"a": q})({}) is False
        assert compile_filter({"a": {"$in": [q]}})({}) is False
        assert compile_filter({"a": {"$gte": q}})({}) is False
