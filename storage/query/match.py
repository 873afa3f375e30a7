"""The matcher: compiles a filter document into one predicate over decoded documents. Every query
answer passes through it, whatever index narrowed the candidates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from storage.errors import QueryError
from storage.query.compare import RANK_MAXKEY, RANK_MINKEY, compare, equal, is_nan, rank
from storage.query.paths import MISSING, leaves, split

Predicate = Callable[[dict[str, Any]], bool]
_ValueTest = Callable[[Any], bool]


def _always(_doc: dict[str, Any]) -> bool:
    return True


def compile_filter(flt: dict[str, Any] | None) -> Predicate:
    """Compile a filter once; the predicate is then called per candidate document.
    Raises QueryError (BadValue and friends) for a malformed filter."""
    if not flt:
        return _always
    return _compile_doc(flt)


def _compile_doc(flt: dict[str, Any]) -> Predicate:
    preds = []
    for key, value in flt.items():
        if key.startswith("$"):
            preds.append(_compile_top_operator(key, value))
        else:
            preds.append(_compile_field(key, value))
    if len(preds) == 1:
        return preds[0]
    return lambda doc: all(p(doc) for p in preds)


def _compile_top_operator(op: str, value: Any) -> Predicate:
    if op == "$comment":
        return _always
    if op in ("$and", "$or", "$nor"):
        if not isinstance(value, list) or not value:
            raise QueryError("BadValue", "$and/$or/$nor must be a nonempty array")
        subs = []
        for clause in value:
            if not isinstance(clause, dict):
                raise QueryError("BadValue", "$or/$and/$nor entries need to be full objects")
            subs.append(_compile_doc(clause))
        if op == "$and":
            return lambda doc: all(p(doc) for p in subs)
        if op == "$or":
            return lambda doc: any(p(doc) for p in subs)
        return lambda doc: not any(p(doc) for p in subs)
    raise QueryError("BadValue", f"unknown top level operator: {op}")


def _is_operator_doc(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and next(iter(value)).startswith("$")


def _compile_field(path: str, value: Any) -> Predicate:
    parts = split(path)
    if _is_operator_doc(value):
        tests = [_compile_operator(op, arg) for op, arg in value.items()]
        negations = [t for neg, t in tests if neg]
        positives = [t for neg, t in tests if not neg]

        def pred(doc: dict[str, Any]) -> bool:
            vals = list(leaves(doc, parts))
            return all(_any_leaf(vals, t) for t in positives) and not any(
                _any_leaf(vals, t) for t in negations
            )

        return pred
    test = _eq_test(value)
    return lambda doc: _any_leaf(leaves(doc, parts), test)


def _any_leaf(vals: Any, test: _ValueTest) -> bool:
    """A leaf matches when the test holds for it or, if it is an array, for one of its elements."""
    for v in vals:
        if test(v):
            return True
        if type(v) is list and any(test(e) for e in v):
            return True
    return False


def _eq_test(q: Any) -> _ValueTest:
    if q is None:
        return lambda v: v is MISSING or v is None
    return lambda v: v is not MISSING and equal(v, q)


def _range_test(q: Any, ok: Callable[[int], bool]) -> _ValueTest:
    qrank = rank(q)
    if qrank in (RANK_MINKEY, RANK_MAXKEY):
        return lambda v: v is not MISSING and ok(compare(v, q))
    if q is None:
        return lambda v: (v is MISSING or v is None) and ok(0)
    if is_nan(q):
        # NaN equals only NaN and lies outside every range: {$gte: NaN} matches NaN, {$gt: NaN} nothing.
        return lambda v: v is not MISSING and is_nan(v) and ok(0)

    # Comparisons stay within a type bracket: {$gt: 5} never matches a string; NaN is in no range.
    def test(v: Any) -> bool:
        return v is not MISSING and rank(v) == qrank and not is_nan(v) and ok(compare(v, q))

    return test


def _in_test(arg: Any, op: str) -> _ValueTest:
    if not isinstance(arg, list):
        raise QueryError("BadValue", f"{op} needs an array")
    tests = [_eq_test(q) for q in arg]
    return lambda v: any(t(v) for t in tests)


def _compile_operator(op: str, arg: Any) -> tuple[bool, _ValueTest]:
    """Returns (negated, test). A negated test matches documents where no leaf passes it."""
    if op == "$eq":
        return False, _eq_test(arg)
    if op == "$ne":
        return True, _eq_test(arg)
    if op == "$gt":
        return False, _range_test(arg, lambda c: c > 0)
    if op == "$gte":
        return False, _range_test(arg, lambda c: c >= 0)
    if op == "$lt":
        return False, _range_test(arg, lambda c: c < 0)
    if op == "$lte":
        return False, _range_test(arg, lambda c: c <= 0)
    if op == "$in":
        return False, _in_test(arg, op)
    if op == "$nin":
        return True, _in_test(arg, op)
    if op == "$exists":
        want = bool(arg)
        if want:
            return False, lambda v: v is not MISSING
        return True, lambda v: v is not MISSING
    raise QueryError("BadValue", f"unknown operator: {op}")


__all__ = ["Predicate", "compile_filter"]
