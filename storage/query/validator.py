"""A collection's validator parsed into a tree of operators that match a document and say why one
fails, as MongoDB 5+'s doc_validation_error details it: each operator reports `operatorName`,
`specifiedAs`, a `reason` and the values it considered; `$and`, `$or` and `$nor` report the
clauses that decided, `$not` its clause seen the other way round. storage/catalog/schema.py applies it
with the collection's validationLevel and validationAction."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import type_name
from ebbdb.storage.query import expressions, json_schema
from ebbdb.storage.query.geo_match import NEAR_REFUSED
from ebbdb.storage.query.match import compile_filter
from ebbdb.storage.query.match_leaves import is_operator_doc, is_regex, true_value
from ebbdb.storage.query.paths import MISSING, split, values_at

_NUMERIC = frozenset({"double", "int", "long", "decimal"})


# -- the tree ----------------------------------------------------------------------------


class _Node:
    """One operator of the validator: whether a document matches it, and why not (or, inverted,
    why it does) as MongoDB details it."""

    def matches(self, doc: dict[str, Any]) -> bool:
        raise NotImplementedError

    def error(self, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        raise NotImplementedError


def _safely(pred: Callable[[dict[str, Any]], bool], doc: dict[str, Any]) -> bool:
    try:
        return pred(doc)
    except QueryError:
        return False  # MongoDB counts an operator that throws as failing validation


class _Tree(_Node):
    """`$and` (a document's clauses too), `$or` and `$nor`: the clauses that decided, by index."""

    def __init__(self, op: str, children: list[_Node]) -> None:
        self.op = op
        self.children = children

    def matches(self, doc: dict[str, Any]) -> bool:
        if self.op == "$and":
            return all(c.matches(doc) for c in self.children)
        found = any(c.matches(doc) for c in self.children)
        return found if self.op == "$or" else not found

    def error(self, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        inner = not inverted if self.op == "$nor" else inverted
        clauses = [
            {"index": i, "details": c.error(doc, inner)}
            for i, c in enumerate(self.children)
            if c.matches(doc) == inner
        ]
        key = "clausesSatisfied" if inverted else "clausesNotSatisfied"
        return {"operatorName": self.op, key: clauses}


class _Not(_Node):
    def __init__(self, child: _Node, pred: Callable[[dict[str, Any]], bool]) -> None:
        self.child = child
        self.pred = pred

    def matches(self, doc: dict[str, Any]) -> bool:
        return _safely(self.pred, doc)

    def error(self, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        return {"operatorName": "$not", "details": self.child.error(doc, not inverted)}


class _Schema(_Node):
    def __init__(self, schema: json_schema.Schema) -> None:
        self.schema = schema

    def matches(self, doc: dict[str, Any]) -> bool:
        return self.schema.matches(doc)

    def error(self, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        if inverted:
            return {"operatorName": "$jsonSchema", "reason": "schema matched"}
        return self.schema.details(doc)


class _Expr(_Node):
    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.pred = compile_filter({"$expr": spec})
        self.expr = expressions.compile_expression(spec, frozenset())

    def matches(self, doc: dict[str, Any]) -> bool:
        return _safely(self.pred, doc)

    def error(self, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"operatorName": "$expr", "specifiedAs": {"$expr": self.spec}}
        try:
            result = self.expr(doc, {})
        except QueryError as exc:
            out["reason"] = "failed to evaluate aggregation expression"
            out["details"] = {"codeName": exc.code_name, "errmsg": exc.message}
            return out
        out["reason"] = "expression did match" if inverted else "expression did not match"
        out["expressionResult"] = None if result is MISSING else result
        return out


class _Always(_Node):
    def __init__(self, op: str, value: Any) -> None:
        self.op = op
        self.value = value

    def matches(self, doc: dict[str, Any]) -> bool:
        return self.op == "$alwaysTrue"

    def error(self, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        reason = "true" if inverted else "false"
        return {
            "operatorName": self.op,
            "specifiedAs": {self.op: self.value},
            "reason": f"expression always evaluates to {reason}",
        }


#: A leaf operator's reasons (failing, and matching when inverted), the types it expects and
#: whether it judges an array itself ("array") or its elements ("elements").
_LEAVES: dict[str, tuple[str, str, frozenset[str] | None, str]] = {
    **{
        op: ("comparison failed", "comparison succeeded", None, "elements")
        for op in ("$eq", "$gt", "$gte", "$lt", "$lte")
    },
    "$in": ("no matching value found in array", "matching value found in array", None, "elements"),
    "$regex": (
        "regular expression did not match",
        "regular expression did match",
        frozenset({"string", "symbol", "regex"}),
        "elements",
    ),
    "$mod": (
        "$mod did not evaluate to expected remainder",
        "$mod did evaluate to expected remainder",
        _NUMERIC,
        "elements",
    ),
    "$size": (
        "array length was not equal to given size",
        "array length was equal to given size",
        frozenset({"array"}),
        "array",
    ),
    "$elemMatch": (
        "array did not satisfy the child predicate",
        "array did satisfy the child predicate",
        frozenset({"array"}),
        "array",
    ),
    "$all": (
        "array did not contain all specified values",
        "array did contain all specified values",
        None,
        "array",
    ),
    "$type": ("type did not match", "type did match", None, "elements"),
    "$exists": ("path does not exist", "path does exist", None, "elements"),
    **{
        op: (
            "bitwise operator failed to match",
            "bitwise operator matched successfully",
            _NUMERIC | {"binData"},
            "elements",
        )
        for op in ("$bitsAllSet", "$bitsAllClear", "$bitsAnySet", "$bitsAnyClear")
    },
}
#: Operators MongoDB parses as the negation of another: $ne of $eq, $nin of $in, {$exists: false}.
_NEGATIONS = {"$ne": "$eq", "$nin": "$in"}


class _Leaf(_Node):
    """One operator on a field: `specified` is how MongoDB shows it ({path: {op: arg}}); `kind`
    is the operator whose reasons it gives, and `negated` says it is that operator's negation."""

    def __init__(self, op: str, kind: str, path: str, specified: dict[str, Any], negated: bool):
        self.op = op
        self.kind = kind
        self.parts = split(path)
        self.specified = specified
        self.negated = negated
        self.pred = compile_filter(specified)

    def matches(self, doc: dict[str, Any]) -> bool:
        return _safely(self.pred, doc)

    def _values(self, doc: dict[str, Any], whole: bool) -> list[Any] | None:
        """The values the operator considered (None: the path is missing). Arrays at the end of
        the path give their elements, unless the operator judges the array itself."""
        found = [v for v in values_at(doc, self.parts, False) if v is not MISSING]
        if not found:
            return None
        if whole:
            return found
        out: list[Any] = []
        for v in found:
            out.extend(v if type(v) is list else [v])
        return out

    def error(self, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        inverted ^= self.negated
        normal, flipped, expected, mode = _LEAVES[self.kind]
        out: dict[str, Any] = {"operatorName": self.op, "specifiedAs": self.specified}
        if self.kind == "$exists":
            out["reason"] = flipped if inverted else normal
            return out
        values = self._values(doc, mode == "array")
        if values is None:
            out["reason"] = "field was missing"
        elif expected is not None and not any(type_name(v) in expected for v in values):
            out["reason"] = "type did not match"
            _types(out, "consideredType", values)
            names = sorted(expected)
            if len(names) == 1:
                out["expectedType"] = names[0]
            else:
                out["expectedTypes"] = names
        if "reason" not in out:
            out["reason"] = flipped if inverted else normal
        if values is not None:
            if len(values) == 1:
                out["consideredValue"] = values[0]
            else:
                out["consideredValues"] = values
            if self.kind == "$type":
                _types(out, "consideredType", values)
        return out


def _types(out: dict[str, Any], key: str, values: list[Any]) -> None:
    names = sorted({type_name(v) for v in values})
    if len(names) == 1:
        out[key] = names[0]
    elif names:
        out[key + "s"] = names


# -- parsing ---------------------------------------------------------------------------------------


def _parse_doc(flt: Mapping[str, Any]) -> _Node:
    nodes: list[_Node] = []
    for key, value in flt.items():
        if key.startswith("$"):
            node = _parse_top(key, value)
            if node is not None:
                nodes.append(node)
        elif is_operator_doc(value):
            nodes += _parse_field(key, value)
        elif is_regex(value):
            nodes.append(_Leaf("$regex", "$regex", key, {key: value}, False))
        else:
            nodes.append(_Leaf("$eq", "$eq", key, {key: value}, False))
    return nodes[0] if len(nodes) == 1 else _Tree("$and", nodes)


def _parse_top(op: str, value: Any) -> _Node | None:
    if op == "$comment":
        return None
    if op in ("$where", "$text"):
        raise QueryError("BadValue", f"{op} is not allowed in this context")
    if op == "$jsonSchema":
        return _Schema(json_schema.parse(value))
    if op == "$expr":
        return _Expr(value)
    if op in ("$and", "$or", "$nor"):
        compile_filter({op: value})  # MongoDB's refusals of a malformed clause list
        return _Tree(op, [_parse_doc(clause) for clause in value])
    if op in ("$alwaysTrue", "$alwaysFalse"):
        compile_filter({op: value})
        return _Always(op, value)
    compile_filter({op: value})  # refuses it with MongoDB's words, or matches a DBRef field
    return _Leaf("$eq", "$eq", op, {op: value}, False)


def _parse_field(path: str, ops: Mapping[str, Any]) -> list[_Node]:
    nodes: list[_Node] = []
    for op, arg in ops.items():
        if op in ("$near", "$nearSphere", "$geoNear"):
            raise QueryError("Location5626500", NEAR_REFUSED)
        if op == "$options":
            if "$regex" not in ops:
                compile_filter({path: {op: arg}})
            continue
        if op == "$regex":
            regex = {k: v for k, v in ops.items() if k in ("$regex", "$options")}
            nodes.append(_Leaf(op, op, path, {path: regex}, False))
        elif op == "$not":
            pred = compile_filter({path: {op: arg}})
            inner = _parse_doc({path: arg})
            nodes.append(_Not(inner, pred))
        elif op == "$exists":
            nodes.append(_Leaf(op, op, path, {path: {op: arg}}, not true_value(arg)))
        elif op in _NEGATIONS:
            nodes.append(_Leaf(op, _NEGATIONS[op], path, {path: {op: arg}}, True))
        elif op in _LEAVES:
            nodes.append(_Leaf(op, op, path, {path: {op: arg}}, False))
        else:
            compile_filter({path: {op: arg}})  # MongoDB's refusal of this operator
            nodes.append(_Leaf(op, "$eq", path, {path: {op: arg}}, False))
    return nodes


class Validator:
    """A parsed collection validator."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self._root = _parse_doc(spec)

    def matches(self, doc: dict[str, Any]) -> bool:
        return self._root.matches(doc)

    def details(self, doc: dict[str, Any]) -> dict[str, Any]:
        return self._root.error(doc, False)


def parse_validator(spec: Mapping[str, Any]) -> Validator:
    """The validator of create and collMod. Raises QueryError with MongoDB's code, the message
    prefixed as MongoDB prefixes it."""
    try:
        return Validator(spec)
    except QueryError as exc:
        raise QueryError(
            exc.code_name, f"Parsing of collection validator failed :: caused by :: {exc.message}"
        ) from None


__all__ = ["Validator", "parse_validator"]
