"""A collection's validator: its filter parsed once, as a validator (storage/query/match.py), and
the error details MongoDB 5+'s doc_validation_error gives for a document it refuses, read off that
one tree by a visitor: each operator reports `operatorName`, `specifiedAs`, a `reason` and the
values it considered; `$and`, `$or` and `$nor` report the clauses that decided, `$not` its clause
seen the other way round. storage/catalog/schema.py applies it with the collection's
validationLevel and validationAction."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import type_name
from ebbdb.storage.query import expressions
from ebbdb.storage.query.match import node_predicate, parse_filter
from ebbdb.storage.query.match_tree import (
    Always,
    And,
    Annotation,
    Expr,
    JsonSchema,
    Node,
    Nor,
    Not,
    Or,
    Predicate,
)
from ebbdb.storage.query.paths import MISSING, split, values_at

_NUMERIC = frozenset({"double", "int", "long", "decimal"})

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
_CONSTANTS = frozenset({"$alwaysTrue", "$alwaysFalse"})


def _safely(pred: Predicate, doc: dict[str, Any]) -> bool:
    try:
        return pred(doc)
    except QueryError:
        return False  # MongoDB counts an operator that throws as failing validation


class Validator:
    """A parsed collection validator: whether a document matches it, and MongoDB's details of
    why one does not, both read off the one tree parse_filter gives for it."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.parsed = parse_filter(spec, {}, validator=True)
        # Each node's own test, built from the tree on first use (the tree lives as long as the
        # validator, so a node's id names it); an aggregation expression's, for $expr's details.
        self._tests: dict[int, Callable[[dict[str, Any]], bool]] = {}
        self._expressions: dict[int, Any] = {}

    def matches(self, doc: dict[str, Any]) -> bool:
        return self._matches(self.parsed.tree, doc)

    def details(self, doc: dict[str, Any]) -> dict[str, Any]:
        return self._details(self.parsed.tree, doc, False)

    # -- matching ---------------------------------------------------------------------------------

    def _matches(self, node: Node, doc: dict[str, Any]) -> bool:
        """Whether the document matches the node, a clause that throws counting as failing (so
        an `$or` may still hold through another clause)."""
        if isinstance(node, And):
            return all(self._matches(c, doc) for c in node.children)
        if isinstance(node, (Or, Nor)):
            found = any(self._matches(c, doc) for c in node.children)
            return found if isinstance(node, Or) else not found
        test = self._tests.get(id(node))
        if test is None:
            test = self._test(node)
            self._tests[id(node)] = test
        return test(doc)

    @staticmethod
    def _test(node: Node) -> Callable[[dict[str, Any]], bool]:
        pred = node_predicate(node, {})
        if isinstance(node, (JsonSchema, Always)):
            return pred  # neither throws
        return lambda doc: _safely(pred, doc)

    # -- details ----------------------------------------------------------------------------------

    def _details(self, node: Node, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        """Why the document fails the node (or, `inverted`, why it matches it), as MongoDB's
        doc_validation_error visitor reports it."""
        if isinstance(node, (And, Or, Nor)):
            return self._clauses(node, doc, inverted)
        note = node.annotation
        if isinstance(node, Not) and note is not None and note.operator == "$not":
            return {"operatorName": "$not", "details": self._details(node.child, doc, not inverted)}
        if isinstance(node, JsonSchema):
            if inverted:
                return {"operatorName": "$jsonSchema", "reason": "schema matched"}
            return node.parsed.details(doc)  # type: ignore[no-any-return]
        if isinstance(node, Expr):
            return self._expr(node, doc, inverted)
        assert note is not None, node  # a validator's other nodes are annotated
        if isinstance(node, Always) and note.operator in _CONSTANTS:
            return {
                "operatorName": note.operator,
                "specifiedAs": note.specified,
                "reason": f"expression always evaluates to {'true' if inverted else 'false'}",
            }
        negated = note.operator in _NEGATIONS or (
            note.operator == "$exists" and isinstance(node, Not)
        )
        return _leaf(note, doc, inverted ^ negated)

    def _clauses(self, node: And | Or | Nor, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        """`$and` (a document's conditions too), `$or`, `$nor`: the clauses that decided, by
        index."""
        op = "$and" if isinstance(node, And) else "$or" if isinstance(node, Or) else "$nor"
        inner = not inverted if op == "$nor" else inverted
        clauses = [
            {"index": i, "details": self._details(c, doc, inner)}
            for i, c in enumerate(node.children)
            if self._matches(c, doc) == inner
        ]
        key = "clausesSatisfied" if inverted else "clausesNotSatisfied"
        return {"operatorName": op, key: clauses}

    def _expr(self, node: Expr, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"operatorName": "$expr", "specifiedAs": {"$expr": node.spec}}
        expr = self._expressions.get(id(node))
        if expr is None:
            expr = expressions.compile_expression(node.spec, frozenset())
            self._expressions[id(node)] = expr
        try:
            result = expr(doc, {})
        except QueryError as exc:
            out["reason"] = "failed to evaluate aggregation expression"
            out["details"] = {"codeName": exc.code_name, "errmsg": exc.message}
            return out
        out["reason"] = "expression did match" if inverted else "expression did not match"
        out["expressionResult"] = None if result is MISSING else result
        return out


def _leaf(note: Annotation, doc: dict[str, Any], inverted: bool) -> dict[str, Any]:
    """One operator on a field, as written (`note`): MongoDB's reasons are those of the operator
    it negates for $ne and $nin, of `$eq` for one without its own (geo operators, DBRef fields)."""
    op = note.operator
    kind = _NEGATIONS.get(op, op if op in _LEAVES else "$eq")
    normal, flipped, expected, mode = _LEAVES[kind]
    out: dict[str, Any] = {"operatorName": op, "specifiedAs": note.specified}
    if kind == "$exists":
        out["reason"] = flipped if inverted else normal
        return out
    values = _values(doc, split(note.path), mode == "array")
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
        if kind == "$type":
            _types(out, "consideredType", values)
    return out


def _values(doc: dict[str, Any], parts: tuple[str, ...], whole: bool) -> list[Any] | None:
    """The values an operator considered (None: the path is missing). Arrays at the end of the
    path give their elements, unless the operator judges the array itself."""
    found = [v for v in values_at(doc, parts, False) if v is not MISSING]
    if not found:
        return None
    if whole:
        return found
    out: list[Any] = []
    for v in found:
        out.extend(v if type(v) is list else [v])
    return out


def _types(out: dict[str, Any], key: str, values: list[Any]) -> None:
    names = sorted({type_name(v) for v in values})
    if len(names) == 1:
        out[key] = names[0]
    elif names:
        out[key + "s"] = names


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
