"""The matcher: compiles a filter document once into one predicate over decoded documents, with
MongoDB 7.0's semantics (operators, array rules, errors). Every query answer passes through it,
whatever index narrowed the candidates."""

from __future__ import annotations

import datetime
import math
import operator
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS
from bson.raw_bson import RawBSONDocument

from storage.errors import QueryError
from storage.query import expressions
from storage.query.compare import (
    BSON_TYPE_CODES,
    RANK_MAXKEY,
    RANK_MINKEY,
    RANK_NUMBER,
    UNDEFINED,
    compare,
    equal,
    is_nan,
    rank,
    regex_flags,
)
from storage.query.paths import MISSING, split, values_at
from storage.query.regex import pcre_to_python

Predicate = Callable[[dict[str, Any]], bool]
_Test = Callable[[Any], bool]
_ValuesTest = Callable[[list[Any], list[Any]], bool]

_INT64_MIN = -(2**63)
_INT64_END = 2**63
_INT32_MIN = -(2**31)
_INT32_END = 2**31


def _always(_doc: dict[str, Any]) -> bool:
    return True


def _never(_doc: dict[str, Any]) -> bool:
    return False


def compile_filter(
    flt: Mapping[str, Any] | None, variables: Mapping[str, Any] | None = None
) -> Predicate:
    """Compile a filter once; the predicate is then called per candidate document.
    `variables` are what `$expr` sees as `$$name` (a command's `let`, and "NOW").
    Raises QueryError (BadValue, FailedToParse, TypeMismatch, NotImplemented or a
    `Location<code>` name, as MongoDB would) for a malformed or unsupported filter; a
    predicate with `$expr` may also raise it for a document its expression fails on."""
    if not flt:
        return _always
    return _compile_doc(flt, variables if variables is not None else {})


# -- the expression tree ----------------------------------------------------------------------------
#
# A field's operators parse into a small tree, then turn into closures. MongoDB evaluates each
# operator twice over: against a document (any value its path yields) and against one value
# (matchesSingleElement, which $elemMatch's value form and $not inside it need). Each leaf says how
# it meets a path ending at an array: most test the elements and the array itself; $size and
# $elemMatch test only the array.


@dataclass(frozen=True, slots=True)
class _Leaf:
    test: _Test
    expand: bool = True


@dataclass(frozen=True, slots=True)
class _Not:
    child: _Node


@dataclass(frozen=True, slots=True)
class _And:
    children: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Const:
    value: bool


_Node = _Leaf | _Not | _And | _Const


def _and_node(nodes: list[_Node]) -> _Node:
    if not nodes:
        return _Const(True)
    return nodes[0] if len(nodes) == 1 else _And(tuple(nodes))


def _element_test(node: _Node) -> _Test:
    """The node against one value, as $elemMatch's value form applies it to each element."""
    if isinstance(node, _Leaf):
        return node.test
    if isinstance(node, _Not):
        inner = _element_test(node.child)
        return lambda v: not inner(v)
    if isinstance(node, _And):
        tests = tuple(_element_test(c) for c in node.children)

        def all_hold(v: Any) -> bool:
            for t in tests:
                if not t(v):
                    return False
            return True

        return all_hold
    const = node.value
    return lambda v: const


def _values_test(node: _Node) -> _ValuesTest:
    """The node against a path's values: `ev` expanded (leaf arrays' elements too), `nv` not."""
    if isinstance(node, _Leaf):
        test = node.test
        if node.expand:
            return lambda ev, nv: any(map(test, ev))
        return lambda ev, nv: any(map(test, nv))
    if isinstance(node, _Not):
        inner = _values_test(node.child)
        return lambda ev, nv: not inner(ev, nv)
    if isinstance(node, _And):
        tests = tuple(_values_test(c) for c in node.children)

        def all_hold(ev: list[Any], nv: list[Any]) -> bool:
            for t in tests:
                if not t(ev, nv):
                    return False
            return True

        return all_hold
    const = node.value
    return lambda ev, nv: const


def _modes(node: _Node) -> tuple[bool, bool]:
    """Which value lists the node reads: (expanded, not expanded)."""
    if isinstance(node, _Leaf):
        return node.expand, not node.expand
    if isinstance(node, _Not):
        return _modes(node.child)
    if isinstance(node, _And):
        e = n = False
        for c in node.children:
            ce, cn = _modes(c)
            e, n = e or ce, n or cn
        return e, n
    return False, False


_EMPTY: list[Any] = []


def _field_predicate(path: str, node: _Node) -> Predicate:
    """The predicate for one field's operators. Most filters are a few plain operators on a field
    (equality, ranges, $in, $ne, ...): those get closures that read the field once and touch no
    list unless the value is an array. Everything else goes through the general tree walk."""
    if isinstance(node, _Const):
        return _always if node.value else _never
    parts = split(path)
    terms = _plain_terms(node)
    if terms is not None:
        positives, negatives = terms
        if len(parts) == 1:
            return _top_field_terms(parts[0], positives, negatives)
        return _dotted_terms(parts, positives, negatives)
    vtest = _values_test(node)
    if len(parts) == 1:
        key = parts[0]
        if isinstance(node, _Leaf):  # $size, $elemMatch: the value itself, never its elements
            test = node.test
            return lambda doc: test(doc.get(key, MISSING))

        def top(doc: dict[str, Any]) -> bool:
            v = doc.get(key, MISSING)
            nv = [v]
            return vtest([v, *v] if type(v) is list else nv, nv)

        return top
    need_e, need_n = _modes(node)

    def dotted(doc: dict[str, Any]) -> bool:
        ev = values_at(doc, parts, True) if need_e else _EMPTY
        nv = values_at(doc, parts, False) if need_n else _EMPTY
        return vtest(ev, nv)

    return dotted


def _plain_terms(node: _Node) -> tuple[tuple[_Test, ...], tuple[_Test, ...]] | None:
    """The node as a conjunction of leaves that test a value and, if it is an array, its elements:
    (the positive tests, the negated ones); None for any other shape."""
    children = node.children if isinstance(node, _And) else (node,)
    positives: list[_Test] = []
    negatives: list[_Test] = []
    for c in children:
        if isinstance(c, _Leaf) and c.expand:
            positives.append(c.test)
        elif isinstance(c, _Not) and isinstance(c.child, _Leaf) and c.child.expand:
            negatives.append(c.child.test)
        else:
            return None
    return tuple(positives), tuple(negatives)


def _holds(
    positives: tuple[_Test, ...], negatives: tuple[_Test, ...]
) -> tuple[_Test, Callable[[list[Any]], bool]]:
    """The terms over one non-array value, and over a path's expanded values."""

    def on_value(v: Any) -> bool:
        for t in positives:
            if not t(v):
                return False
        for t in negatives:
            if t(v):
                return False
        return True

    def on_values(values: list[Any]) -> bool:
        for t in positives:
            if not any(map(t, values)):
                return False
        for t in negatives:
            if any(map(t, values)):
                return False
        return True

    return on_value, on_values


def _top_field_terms(
    key: str, positives: tuple[_Test, ...], negatives: tuple[_Test, ...]
) -> Predicate:
    if len(positives) + len(negatives) == 1:
        # One operator: the commonest filter of all gets the shortest path.
        if positives:
            test = positives[0]

            def one(doc: dict[str, Any]) -> bool:
                v = doc.get(key, MISSING)
                if test(v):
                    return True
                if type(v) is list:
                    for e in v:
                        if test(e):
                            return True
                return False

            return one
        inner = negatives[0]

        def one_negated(doc: dict[str, Any]) -> bool:
            v = doc.get(key, MISSING)
            if inner(v):
                return False
            if type(v) is list:
                for e in v:
                    if inner(e):
                        return False
            return True

        return one_negated
    on_value, on_values = _holds(positives, negatives)

    def several(doc: dict[str, Any]) -> bool:
        v = doc.get(key, MISSING)
        if type(v) is list:
            return on_values([v, *v])
        return on_value(v)

    return several


def _dotted_terms(
    parts: tuple[str, ...], positives: tuple[_Test, ...], negatives: tuple[_Test, ...]
) -> Predicate:
    on_value, on_values = _holds(positives, negatives)

    def dotted(doc: dict[str, Any]) -> bool:
        # Walk plain subdocuments inline; an array (or DBRef) on the way takes the full rules.
        v: Any = doc
        for part in parts:
            if type(v) is dict:
                v = v.get(part, MISSING)
            elif type(v) is list or isinstance(v, (Mapping, DBRef)):
                return on_values(values_at(doc, parts, True))
            else:
                v = MISSING  # a scalar before the path ends
                break
        if type(v) is list:
            return on_values([v, *v])
        return on_value(v)

    return dotted


def _all_of(preds: list[Predicate]) -> Predicate:
    if not preds:
        return _always
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        first, second = preds
        return lambda doc: first(doc) and second(doc)
    frozen = tuple(preds)

    def all_hold(doc: dict[str, Any]) -> bool:
        for p in frozen:
            if not p(doc):
                return False
        return True

    return all_hold


def _any_of(preds: list[Predicate]) -> Predicate:
    if len(preds) == 1:
        return preds[0]
    frozen = tuple(preds)

    def any_holds(doc: dict[str, Any]) -> bool:
        for p in frozen:
            if p(doc):
                return True
        return False

    return any_holds


# -- documents and top-level operators -------------------------------------------------------------

# Operators MongoDB accepts at the top level (its "pathless" operators). A $elemMatch whose first
# key is one of these matches documents, not values.
_PATHLESS = frozenset(
    {
        "$and",
        "$or",
        "$nor",
        "$comment",
        "$expr",
        "$where",
        "$text",
        "$jsonSchema",
        "$alwaysTrue",
        "$alwaysFalse",
        "$sampleRate",
        "$ref",
        "$id",
        "$db",
    }
)
_UNSUPPORTED_TOP = frozenset({"$where", "$text", "$jsonSchema", "$sampleRate"})

# Operators MongoDB accepts on a field (besides $not).
_PATH_OPERATORS = frozenset(
    {
        "$all",
        "$bitsAllClear",
        "$bitsAllSet",
        "$bitsAnyClear",
        "$bitsAnySet",
        "$elemMatch",
        "$eq",
        "$exists",
        "$geoIntersects",
        "$geoNear",
        "$geoWithin",
        "$gt",
        "$gte",
        "$in",
        "$lt",
        "$lte",
        "$mod",
        "$ne",
        "$near",
        "$nearSphere",
        "$nin",
        "$options",
        "$regex",
        "$size",
        "$type",
        "$within",
    }
)
_GEO_OPERATORS = frozenset(
    {"$geoIntersects", "$geoNear", "$geoWithin", "$near", "$nearSphere", "$within"}
)


def _compile_doc(flt: Mapping[str, Any], variables: Mapping[str, Any] | None = None) -> Predicate:
    """A filter document. `variables` is None below the top level (in $elemMatch), where MongoDB
    refuses $expr; $and, $or and $nor pass theirs on."""
    preds: list[Predicate] = []
    for key, value in flt.items():
        if key.startswith("$"):
            pred = _compile_top_operator(key, value, variables)
            if pred is not None:
                preds.append(pred)
        elif type(value) in _SCALARS and "." not in key:
            # {field: value}, the commonest filter of all (an `_id` lookup): straight to the
            # predicate _field_predicate makes of the leaf _parse_field would give.
            preds.append(_top_field_terms(key, (_eq_test(value),), ()))
        else:
            preds.append(_field_predicate(key, _parse_field(key, value)))
    return _all_of(preds)


#: Values that are neither operator documents nor regular expressions: an equality on a field.
_SCALARS = frozenset({int, float, str, bool, Int64, ObjectId, datetime.datetime, type(None)})


def _compile_top_operator(
    op: str, value: Any, variables: Mapping[str, Any] | None
) -> Predicate | None:
    if op == "$comment":
        return None
    if op == "$expr":
        if variables is None:
            raise QueryError("BadValue", "$expr can only be applied to the top-level document")
        return _expr_predicate(value, variables)
    if op in ("$and", "$or", "$nor"):
        if not isinstance(value, list):
            raise QueryError("BadValue", f"{op} must be an array")
        if not value:
            raise QueryError("BadValue", "$and/$or/$nor must be a nonempty array")
        subs = []
        for clause in value:
            if not isinstance(clause, Mapping):
                raise QueryError("BadValue", "$or/$and/$nor entries need to be full objects")
            subs.append(_compile_doc(clause, variables))
        if op == "$and":
            return _all_of(subs)
        either = _any_of(subs)
        if op == "$or":
            return either
        return lambda doc: not either(doc)
    if op in ("$alwaysTrue", "$alwaysFalse"):
        try:
            n = _parse_integer(value, op)
        except _IntegerError as exc:
            raise QueryError("FailedToParse", exc.reason) from None
        if n != 1:
            raise QueryError("FailedToParse", f"{op} must be an integer value of 1")
        return _always if op == "$alwaysTrue" else _never
    if op in ("$ref", "$id", "$db"):
        # DBRef fields: MongoDB compares them by plain equality, whatever the value looks like.
        return _field_predicate(op, _Leaf(_eq_test(value)))
    if op in _UNSUPPORTED_TOP:
        raise QueryError("NotImplemented", f"{op} is not supported")
    hint = (
        ". If you are trying to negate an entire expression, use $nor."
        if op == "$not"
        else ". If you have a field name that starts with a '$' symbol, consider using "
        "$getField or $setField."
    )
    raise QueryError("BadValue", f"unknown top level operator: {op}{hint}")


def _expr_predicate(spec: Any, variables: Mapping[str, Any]) -> Predicate:
    """{$expr: <aggregation expression>}: a document matches when the expression is truthy."""
    expr = expressions.compile_expression(spec, frozenset(variables))
    truthy = expressions.truthy
    return lambda doc: truthy(expr(doc, variables))


def _is_operator_doc(value: Any) -> bool:
    """MongoDB's isExpressionDocument: an object whose first key starts with '$', unless it is a
    DBRef ({$ref, $id, ...}), which is a value to compare."""
    if not isinstance(value, Mapping) or not value:
        return False
    if not next(iter(value)).startswith("$"):
        return False
    return not ("$ref" in value and "$id" in value)


def _is_regex(value: Any) -> bool:
    return isinstance(value, (Regex, re.Pattern))


def _parse_field(path: str, value: Any) -> _Node:
    if _is_operator_doc(value):
        return _parse_operators(path, value)
    if _is_regex(value):
        return _Leaf(_regex_test(*_regex_source(value)))
    return _Leaf(_eq_test(value))


def _parse_operators(path: str, ops: Mapping[str, Any]) -> _Node:
    nodes: list[_Node] = []
    for op, arg in ops.items():
        node = _parse_operator(path, op, arg, ops)
        if node is not None:
            nodes.append(node)
    return _and_node(nodes)


_RANGE_OPS: dict[str, tuple[Callable[[Any, Any], bool], Callable[[int], bool]]] = {
    "$gt": (operator.gt, lambda c: c > 0),
    "$gte": (operator.ge, lambda c: c >= 0),
    "$lt": (operator.lt, lambda c: c < 0),
    "$lte": (operator.le, lambda c: c <= 0),
}
_BIT_OPS = frozenset({"$bitsAllSet", "$bitsAllClear", "$bitsAnySet", "$bitsAnyClear"})


def _parse_operator(path: str, op: str, arg: Any, context: Mapping[str, Any]) -> _Node | None:
    if op == "$eq":
        return _Leaf(_eq_test(arg))
    if op in _RANGE_OPS:
        if _is_regex(arg):
            raise QueryError(
                "BadValue", f"Can't have RegEx as arg to predicate over field '{path}'."
            )
        return _Leaf(_range_test(arg, op))
    if op == "$ne":
        if _is_regex(arg):
            raise QueryError("BadValue", "Can't have regex as arg to $ne.")
        return _Not(_Leaf(_eq_test(arg)))
    if op in ("$in", "$nin"):
        if not isinstance(arg, list):
            raise QueryError("BadValue", f"{op} needs an array")
        leaf = _Leaf(_in_test(arg))
        return leaf if op == "$in" else _Not(leaf)
    if op == "$exists":
        exists = _Leaf(_exists_test)
        return exists if _true_value(arg) else _Not(exists)
    if op == "$not":
        return _parse_not(path, arg)
    if op == "$regex":
        return _Leaf(_regex_test(*_regex_document(context)))
    if op == "$options":
        if "$regex" in context:
            return None  # read together with its $regex
        raise QueryError("BadValue", "$options needs a $regex")
    if op == "$type":
        return _Leaf(_type_test(path, arg))
    if op == "$size":
        return _Leaf(_size_test(arg), expand=False)
    if op == "$elemMatch":
        return _parse_elem_match(arg)
    if op == "$all":
        return _parse_all(arg)
    if op == "$mod":
        return _Leaf(_mod_test(arg))
    if op in _BIT_OPS:
        return _Leaf(_bits_test(path, op, arg))
    if op in _GEO_OPERATORS:
        raise QueryError("NotImplemented", f"{op} is not supported")
    if op == "$where":
        raise QueryError("BadValue", "$where cannot be applied to a field")
    raise QueryError("BadValue", f"unknown operator: {op}")


def _parse_not(path: str, arg: Any) -> _Node:
    if _is_regex(arg):
        return _Not(_Leaf(_regex_test(*_regex_source(arg))))
    if not isinstance(arg, Mapping):
        raise QueryError("BadValue", "$not needs a regex or a document")
    if not arg:
        raise QueryError("BadValue", "$not cannot be empty")
    return _Not(_parse_operators(path, arg))


# -- equality, ranges, $in --------------------------------------------------------------------------


def _eq_test(q: Any) -> _Test:
    """MongoDB equality for one value: numbers compare across types, null also matches missing."""
    if q is None:
        return lambda v: v is None or v is MISSING
    t = type(q)
    if t is str:
        return lambda v: type(v) is str and v == q
    if t is bool:
        return lambda v: v is q
    if (t is int or t is Int64 or t is float) and q == q:

        def number(v: Any) -> bool:
            tv = type(v)
            if tv is int or tv is float or tv is Int64:
                return bool(v == q)
            return tv is Decimal128 and equal(v, q)

        return number
    if t is ObjectId:
        return lambda v: type(v) is ObjectId and v == q
    return lambda v: v is not MISSING and equal(v, q)


def _range_test(q: Any, op: str) -> _Test:
    py_op, ok = _RANGE_OPS[op]
    inclusive = op in ("$gte", "$lte")
    qrank = rank(q)
    if qrank in (RANK_MINKEY, RANK_MAXKEY):
        # Every value, and a missing field too, sorts between MinKey and MaxKey.
        missing = (qrank == RANK_MAXKEY and op in ("$lt", "$lte")) or (
            qrank == RANK_MINKEY and op in ("$gt", "$gte")
        )
        return lambda v: missing if v is MISSING else ok(compare(v, q))
    if q is None:
        if inclusive:
            return lambda v: v is None or v is MISSING
        return lambda v: False
    if is_nan(q):
        # NaN equals only NaN and lies outside every range: {$gte: NaN} matches NaN, {$gt: NaN} nothing.
        if inclusive:
            return is_nan
        return lambda v: False
    t = type(q)
    if t is int or t is Int64 or t is float:

        def number(v: Any) -> bool:
            tv = type(v)
            if tv is int or tv is Int64:
                return bool(py_op(v, q))
            if tv is float:
                return bool(py_op(v, q))  # false for NaN, which lies outside every range
            return tv is Decimal128 and not is_nan(v) and ok(compare(v, q))

        return number
    if t is str:
        # Code point order is UTF-8 byte order, which is how MongoDB compares strings.
        return lambda v: type(v) is str and bool(py_op(v, q))

    if qrank == RANK_NUMBER:  # a Decimal128 bound
        return lambda v: _is_number(v) and not is_nan(v) and ok(compare(v, q))

    # Comparisons stay within a type bracket: {$gt: 5} never matches a string.
    def bracketed(v: Any) -> bool:
        return v is not MISSING and rank(v) == qrank and ok(compare(v, q))

    return bracketed


def _in_test(values: list[Any]) -> _Test:
    """$in: hashed lookups for the common scalar types, equality for the rest, regexes match."""
    strings: set[str] = set()
    numbers: set[Any] = set()
    bools: set[bool] = set()
    oids: set[ObjectId] = set()
    others: list[Any] = []
    regexes: list[_Test] = []
    has_null = has_nan = False
    for q in values:
        if _is_operator_doc(q):
            raise QueryError("BadValue", "cannot nest $ under $in")
        t = type(q)
        if _is_regex(q):
            regexes.append(_regex_test(*_regex_source(q)))
        elif q is None:
            has_null = True
        elif t is str:
            strings.add(q)
        elif t is bool:
            bools.add(q)
        elif t is int or t is Int64 or t is float:
            if q != q:
                has_nan = True
            else:
                numbers.add(int(q) if t is Int64 else q)
        elif t is Decimal128:
            d = q.to_decimal()
            if d.is_nan():
                has_nan = True
            else:
                numbers.add(d)
        elif t is ObjectId:
            oids.add(q)
        else:
            others.append(q)

    def test(v: Any) -> bool:
        t = type(v)
        if t is str:
            if v in strings:
                return True
        elif t is int or t is Int64 or t is float:
            if v in numbers or (has_nan and v != v):
                return True
        elif t is bool:
            if v in bools:
                return True
        elif v is None:
            if has_null:
                return True
        elif v is MISSING:
            return has_null
        elif t is Decimal128:
            d = v.to_decimal()
            if (has_nan and d.is_nan()) or (not d.is_nan() and d in numbers):
                return True
        elif t is ObjectId:
            if v in oids:
                return True
        for q in others:
            if equal(v, q):
                return True
        for r in regexes:
            if r(v):
                return True
        return False

    return test


def _exists_test(v: Any) -> bool:
    return v is not MISSING


def _true_value(v: Any) -> bool:
    """BSON truthiness, as $exists reads its argument: only false, 0, null and undefined are false
    (an empty string or array is true)."""
    if v is None or v is UNDEFINED:
        return False
    t = type(v)
    if t is bool:
        return bool(v)
    if t is int or t is Int64 or t is float:
        return bool(v != 0)
    if t is Decimal128:
        return bool(v.to_decimal() != 0)
    return True


# -- $regex ---------------------------------------------------------------------------------------

_PY_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": 0}


def _regex_source(value: Any) -> tuple[str, str]:
    """(pattern, option letters) of a bson.Regex or a compiled Python pattern."""
    pattern = value.pattern
    if isinstance(pattern, bytes):
        pattern = pattern.decode("utf-8", "replace")
    return pattern, regex_flags(value.flags)


def _regex_document(context: Mapping[str, Any]) -> tuple[str, str]:
    """{$regex, $options} read together, in MongoDB's order of checks."""
    pattern = ""
    options = ""
    for op, v in context.items():
        if op == "$regex":
            if isinstance(v, str):
                pattern = v
            elif _is_regex(v):
                pattern, flags = _regex_source(v)
                if flags:
                    if options:
                        raise QueryError("Location51074", "options set in both $regex and $options")
                    options = flags
            else:
                raise QueryError("BadValue", "$regex has to be a string")
        elif op == "$options":
            if not isinstance(v, str):
                raise QueryError("BadValue", "$options has to be a string")
            if options:
                raise QueryError("Location51075", "options set in both $regex and $options")
            options = v
    return pattern, options


def _regex_test(pattern: str, options: str) -> _Test:
    """Matches strings the pattern finds a match in, and regex values with the same pattern and
    options (MongoDB's RegexMatchExpression)."""
    py_flags = 0
    for ch in options:
        if ch not in _PY_FLAGS:
            # MongoDB's message starts with the (here empty) operator name and a space.
            raise QueryError("Location51108", f" invalid flag in regex options: {ch}")
        py_flags |= _PY_FLAGS[ch]
    if "\0" in pattern:
        raise QueryError("BadValue", "Regular expression cannot contain an embedded null byte")
    try:
        compiled = re.compile(pcre_to_python(pattern), py_flags)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise QueryError("Location51091", f"Regular expression is invalid: {exc}") from None
    search = compiled.search
    letters = "".join(sorted(options))

    def test(v: Any) -> bool:
        t = type(v)
        if t is str:
            return search(v) is not None
        if t is Regex or isinstance(v, re.Pattern):
            return bool(v.pattern == pattern) and regex_flags(v.flags) == letters
        return False

    return test


# -- $type ----------------------------------------------------------------------------------------

_TYPE_ALIASES = BSON_TYPE_CODES
_TYPE_CODES = frozenset(_TYPE_ALIASES.values())
_NUMBER_CODES = frozenset({1, 16, 18, 19})

# BSON type codes of decoded values. pymongo decodes int32 as int and int64 as Int64; symbols as
# str; DBPointer as DBRef (so it reads as an object here); undefined as None.
_CODE_OF_TYPE: dict[type, int] = {
    float: 1,
    str: 2,
    dict: 3,
    RawBSONDocument: 3,
    DBRef: 3,
    list: 4,
    bytes: 5,
    Binary: 5,
    uuid.UUID: 5,
    ObjectId: 7,
    bool: 8,
    DatetimeMS: 9,
    datetime.datetime: 9,
    type(None): 10,
    Regex: 11,
    Timestamp: 17,
    Int64: 18,
    Decimal128: 19,
    MinKey: -1,
    MaxKey: 127,
}


def _type_code(v: Any) -> int:
    """The BSON type code of a decoded value; 0 (EOO) for a missing one."""
    t = type(v)
    code = _CODE_OF_TYPE.get(t)
    if code is not None:
        return code
    if t is int:
        return 16 if _INT32_MIN <= v < _INT32_END else 18
    if t is Code:
        return 13 if v.scope is None else 15
    if v is UNDEFINED:
        return 6
    if isinstance(v, re.Pattern):
        return 11
    if isinstance(v, Mapping):
        return 3
    return 0


def _type_test(path: str, arg: Any) -> _Test:
    specs = arg if isinstance(arg, list) else [arg]
    codes: set[int] = set()
    for spec in specs:
        if isinstance(spec, str):
            if spec == "number":
                codes |= _NUMBER_CODES
            elif spec in _TYPE_ALIASES:
                codes.add(_TYPE_ALIASES[spec])
            elif spec == "missing":
                raise QueryError(
                    "BadValue",
                    "'missing' is not a legal type name. To query for non-existence of a field, "
                    "use {$exists:false}.",
                )
            else:
                raise QueryError("BadValue", f"Unknown type name alias: {spec}")
        elif _is_number(spec):
            shown = _show_number(spec)
            try:
                code = _parse_integer(spec, "")
            except _IntegerError:
                raise QueryError("BadValue", f"Invalid numerical type code: {shown}") from None
            if code == 0:
                raise QueryError(
                    "BadValue",
                    f"Invalid numerical type code: {shown}. Instead use {{$exists:false}}.",
                )
            if code not in _TYPE_CODES:
                raise QueryError("BadValue", f"Invalid numerical type code: {shown}")
            codes.add(code)
        else:
            raise QueryError("TypeMismatch", "type must be represented as a number or a string")
    if not codes:
        raise QueryError("FailedToParse", f"{path} must match at least one type")
    wanted = frozenset(codes)
    return lambda v: _type_code(v) in wanted


# -- arrays: $size, $elemMatch, $all ----------------------------------------------------------------


def _size_test(arg: Any) -> _Test:
    try:
        n = _parse_integer(arg, "$size", non_negative=True, int32=True)
    except _IntegerError as exc:
        raise QueryError("BadValue", f"Failed to parse $size. {exc.reason}") from None
    return lambda v: type(v) is list and len(v) == n


def _element_document(e: Any) -> dict[str, Any] | None:
    """An array element as $elemMatch's document form sees it: documents, and arrays as documents
    keyed "0", "1", ...; other elements never match."""
    if isinstance(e, dict):
        return e
    if type(e) is list:
        return {str(i): x for i, x in enumerate(e)}
    if type(e) is DBRef:
        return dict(e.as_doc())
    if isinstance(e, Mapping):
        return dict(e)
    return None


def _parse_elem_match(arg: Any) -> _Node:
    if not isinstance(arg, Mapping):
        raise QueryError("BadValue", "$elemMatch needs an Object")
    first = next(iter(arg), "")
    is_value_form = (
        first.startswith("$")
        and first not in _PATHLESS
        and not any(k in arg for k in ("$ref", "$id", "$db"))
    )
    if is_value_form:
        # {$elemMatch: {$gt: 1, $lt: 5}}: one element must pass every operator, tested as a value
        # (an element that is itself an array is not searched).
        each = _element_test(_parse_operators("", arg))

        def value_form(v: Any) -> bool:
            if type(v) is not list:
                return False
            for e in v:
                if each(e):
                    return True
            return False

        return _Leaf(value_form, expand=False)
    sub = _compile_doc(arg)

    def document_form(v: Any) -> bool:
        if type(v) is not list:
            return False
        for e in v:
            d = _element_document(e)
            if d is not None and sub(d):
                return True
        return False

    return _Leaf(document_form, expand=False)


def _parse_all(arg: Any) -> _Node:
    if not isinstance(arg, list):
        raise QueryError("BadValue", "$all needs an array")
    if not arg:
        return _Const(False)  # {$all: []} matches nothing
    nodes: list[_Node] = []
    if _first_key(arg[0]) == "$elemMatch":
        for element in arg:
            if _first_key(element) != "$elemMatch":
                raise QueryError("BadValue", "$all/$elemMatch has to be consistent")
            nodes.append(_parse_elem_match(element["$elemMatch"]))
        return _and_node(nodes)
    for element in arg:
        if _is_regex(element):
            nodes.append(_Leaf(_regex_test(*_regex_source(element))))
        elif _first_key(element) in _PATH_OPERATORS:
            raise QueryError("BadValue", "no $ expressions in $all")
        else:
            nodes.append(_Leaf(_eq_test(element)))
    return _and_node(nodes)


def _first_key(value: Any) -> str | None:
    if isinstance(value, Mapping) and value:
        return str(next(iter(value)))
    return None


# -- $mod and the bit operators ------------------------------------------------------------------------


def _mod_test(arg: Any) -> _Test:
    if not isinstance(arg, list):
        raise QueryError("BadValue", "malformed mod, needs to be an array")
    if not arg:
        raise QueryError("BadValue", "malformed mod, not enough elements")
    if not _is_number(arg[0]):
        raise QueryError("BadValue", "malformed mod, divisor not a number")
    if len(arg) < 2:
        raise QueryError("BadValue", "malformed mod, not enough elements")
    if not _is_number(arg[1]):
        raise QueryError("BadValue", "malformed mod, remainder not a number")
    if len(arg) > 2:
        raise QueryError("BadValue", "malformed mod, too many elements")
    divisor = _coerce_long(arg[0], "divisor")
    remainder = _coerce_long(arg[1], "remainder")
    if divisor == 0:
        raise QueryError("BadValue", "divisor cannot be 0")

    def test(v: Any) -> bool:
        dividend = _dividend(v)
        if dividend is None:
            return False
        if divisor == -1:
            return remainder == 0  # MongoDB's overflow-safe mod: x % -1 is 0
        r = abs(dividend) % abs(divisor)
        # C's remainder takes the dividend's sign.
        return (-r if dividend < 0 else r) == remainder

    return test


def _coerce_long(value: Any, what: str) -> int:
    """A $mod argument truncated toward zero to a 64-bit integer, or MongoDB's error."""
    n = _truncate(value)
    reason = None
    if n is None:
        reason = "Unable to coerce NaN/Inf to integral type"
    elif not _INT64_MIN <= n < _INT64_END:
        reason = "Out of bounds coercing to integral value"
    if n is None or reason is not None:
        raise QueryError(
            "BadValue", f"malformed mod, {what} value is invalid :: caused by :: {reason}"
        )
    return n


def _dividend(v: Any) -> int | None:
    """A document value as $mod's dividend: numbers truncated toward zero; NaN, infinities and
    values beyond 64 bits never match."""
    if not _is_number(v):
        return None
    n = _truncate(v)
    return n if n is not None and _INT64_MIN <= n < _INT64_END else None


def _truncate(v: Any) -> int | None:
    """A number truncated toward zero; None for NaN and infinities."""
    t = type(v)
    if t is float:
        return int(v) if math.isfinite(v) else None
    if t is Decimal128:
        d = v.to_decimal()
        return int(d) if d.is_finite() else None
    return int(v)


def _bits_test(path: str, op: str, arg: Any) -> _Test:
    positions: list[int] = []
    if isinstance(arg, list):
        for i, p in enumerate(arg):
            try:
                positions.append(_parse_integer(p, str(i), non_negative=True, int32=True))
            except _IntegerError as exc:
                raise QueryError(
                    "BadValue", f"Failed to parse bit position. {exc.reason}"
                ) from None
    elif _is_number(arg):
        try:
            mask = _parse_integer(arg, op, non_negative=True)
        except _IntegerError as exc:
            raise QueryError("FailedToParse", exc.reason) from None
        positions = [b for b in range(64) if mask >> b & 1]
    elif isinstance(arg, bytes):
        positions = [8 * i + b for i, byte in enumerate(arg) for b in range(8) if byte >> b & 1]
    else:
        raise QueryError(
            "BadValue",
            f"{path} takes an Array, a number, or a BinData but received: {op}: {_show(arg)}",
        )
    # Numbers are sign-extended 64-bit integers: a position past 63 tests the sign bit.
    number_mask = 0
    for p in positions:
        number_mask |= 1 << min(p, 63)
    want_set = op in ("$bitsAllSet", "$bitsAnySet")
    want_all = op in ("$bitsAllSet", "$bitsAllClear")

    def test(v: Any) -> bool:
        t = type(v)
        if t is bytes or t is Binary:
            data = bytes(v)
            bits = (p < 8 * len(data) and bool(data[p >> 3] >> (p & 7) & 1) for p in positions)
            hits = (bit == want_set for bit in bits)
            return all(hits) if want_all else any(hits)
        n = _bits_number(v)
        if n is None:
            return False
        selected = (n if want_set else ~n) & number_mask
        return selected == number_mask if want_all else selected != 0

    return test


def _bits_number(v: Any) -> int | None:
    t = type(v)
    if t is int or t is Int64:
        return int(v)
    if t is float:
        # Only integral doubles within 64 bits take part.
        if v != v or not _INT64_MIN <= v < _INT64_END or v != int(v):
            return None
        return int(v)
    if t is Decimal128:
        d = v.to_decimal()
        if not d.is_finite():
            return None
        n = int(d.to_integral_value())
        return max(_INT64_MIN, min(n, _INT64_END - 1))
    return None


# -- argument parsing helpers ------------------------------------------------------------------------


class _IntegerError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _is_number(v: Any) -> bool:
    t = type(v)
    return t is int or t is Int64 or t is float or t is Decimal128


def _parse_integer(v: Any, name: str, non_negative: bool = False, int32: bool = False) -> int:
    """MongoDB's parseIntegerElementTo{Long,NonNegativeLong,NonNegativeInt}: an integral number, with
    its reasons for refusing one (the caller adds the code and context)."""
    shown = f"{name}: {_show(v)}"
    t = type(v)
    if not _is_number(v):
        raise _IntegerError(f"Expected a number in: {shown}")
    if t is float:
        if math.isnan(v):
            raise _IntegerError(f"Expected an integer, but found NaN in: {shown}")
        if not _INT64_MIN <= v < _INT64_END:
            raise _IntegerError(f"Cannot represent as a 64-bit integer: {shown}")
        if v != int(v):
            raise _IntegerError(f"Expected an integer: {shown}")
        n = int(v)
    elif t is Decimal128:
        d = v.to_decimal()
        if not d.is_finite() or d != d.to_integral_value() or not _INT64_MIN <= d < _INT64_END:
            raise _IntegerError(f"Cannot represent as a 64-bit integer: {shown}")
        n = int(d)
    else:
        n = int(v)
    if non_negative and n < 0:
        raise _IntegerError(f"Expected a positive number in: {shown}")
    if int32 and not _INT32_MIN <= n < _INT32_END:
        raise _IntegerError(f"Cannot represent {shown} in an int")
    return n


def _show_number(v: Any) -> str:
    """A number as MongoDB prints BSONElement::number() (a double, like C++'s default stream)."""
    x = float(v.to_decimal()) if type(v) is Decimal128 else float(v)
    return f"{x:g}"


def _show(v: Any) -> str:
    """A value roughly as MongoDB prints one in an error message."""
    if v is None:
        return "null"
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is str:
        return f'"{v}"'
    if t is int or t is Int64:
        return str(int(v))
    if t is float:
        if math.isfinite(v) and v.is_integer() and abs(v) < 1e16:
            return f"{v:.1f}"
        return repr(v)
    if t is Decimal128:
        return f'NumberDecimal("{v}")'
    if isinstance(v, list):
        return "[ " + ", ".join(_show(x) for x in v) + " ]" if v else "[]"
    if isinstance(v, Mapping):
        items = ", ".join(f"{k}: {_show(x)}" for k, x in v.items())
        return "{ " + items + " }" if v else "{}"
    return str(v)


__all__ = ["Predicate", "compile_filter"]
