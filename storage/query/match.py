"""The matcher: parses a filter document once into a tree of typed nodes (storage/query/match_tree.py)
and, in the same pass, compiles the one predicate over decoded documents, with MongoDB 7.0's
semantics (operators, array rules, errors), under the query's collation. Every query answer passes
through the predicate, whatever index narrowed the candidates; the planner, upsert seeding,
positional projection, pipeline pushdown, `$text` planning and a validator's error details read the
tree. A query operator is one entry in `_OPERATORS` (and its node and test)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from bson import DBRef, Int64, ObjectId

from ebbdb.storage.core.collation import Collation
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import DBREF_FIELDS, IntegerError
from ebbdb.storage.query import expressions, json_schema
from ebbdb.storage.query.compare import (
    RANK_BINDATA,
    RANK_BOOL,
    RANK_DATE,
    RANK_NUMBER,
    RANK_OBJECTID,
    RANK_STRING,
    RANK_TIMESTAMP,
    is_nan,
    rank,
)
from ebbdb.storage.query.geo_match import NEAR_REFUSED, parse_distance, parse_geo
from ebbdb.storage.query.javascript import refuse_in_validator
from ebbdb.storage.query.javascript_operators import where_predicate
from ebbdb.storage.query.match_leaves import (
    bit_positions,
    bits_test,
    collated_in_test,
    compare_test,
    element_document,
    eq_test,
    exists_test,
    integer_argument,
    is_operator_doc,
    is_regex,
    mod_arguments,
    mod_test,
    regex_document,
    regex_source,
    regex_test,
    size_argument,
    size_test,
    true_value,
    type_codes,
    type_test,
)
from ebbdb.storage.query.match_tree import (
    All,
    Always,
    And,
    Annotation,
    Bits,
    Compare,
    ElemMatchObject,
    ElemMatchValue,
    Exists,
    Expr,
    In,
    JsonSchema,
    Leaf,
    Mod,
    Node,
    Nor,
    Not,
    Or,
    ParsedFilter,
    Predicate,
    Regex,
    Size,
    Test,
    Text,
    TextSite,
    Type,
    Where,
    conditions,
    path_of,
    uses_expr,
)
from ebbdb.storage.query.paths import MISSING, split, values_at
from ebbdb.storage.query.text_search import TextBinding, parse_text

_ValuesTest = Callable[[list[Any], list[Any]], bool]


def _always(_doc: dict[str, Any]) -> bool:
    return True


def _never(_doc: dict[str, Any]) -> bool:
    return False


_NOTHING = And(())


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
    cx = _Parse(None, False)
    _tree, predicate = _parse_doc(flt, variables if variables is not None else {}, cx)
    cx.text_site()
    return predicate


def parse_filter(
    flt: Mapping[str, Any] | None,
    variables: Mapping[str, Any] | None = None,
    *,
    collation: Collation | None = None,
    validator: bool = False,
    javascript: bool = True,
) -> ParsedFilter:
    """Parse a filter once: its tree and its predicate (compile_filter's), from one pass, and
    where its `$text` sits. Under `collation` (None: the simple one) its comparisons ($eq, ranges,
    $ne, $in, $nin, $all's values, inside $elemMatch too) are built on the collation's sort keys
    as they are parsed; the tree keeps the values as written (the planner collates bounds itself).
    With `validator`, the filter is a collection's validator, parsed as MongoDB parses one: it
    refuses $where, $text and the proximity operators there, keeps each `$and` it is written
    with, opens a field's operators into the document's conditions, and annotates every operator
    for the validation error's details (storage/query/validator.py). Without `javascript` (a
    pipeline's $match) it refuses $where, as MongoDB does there. Raises what compile_filter
    raises."""
    if not flt:
        return ParsedFilter({} if flt is None else flt, _NOTHING, _always, collation=collation)
    cx = _Parse(collation, validator, javascript)
    tree, predicate = _parse_doc(flt, variables if variables is not None else {}, cx)
    return ParsedFilter(flt, tree, predicate, cx.text_site(), collation, cx.geo)


def node_predicate(node: Node, variables: Mapping[str, Any] | None = None) -> Predicate:
    """The predicate of one node of a parsed filter on its own, for a reader that tests part of a
    filter (positional projection tries each condition on each array element)."""
    if isinstance(node, (Leaf, All)):
        return _field_predicate(node.path, node)
    if isinstance(node, Not):
        return _field_predicate(path_of(node) or "", node)
    if isinstance(node, Always):
        return _always if node.value else _never
    if isinstance(node, Expr):
        return _expr_predicate(node.spec, variables if variables is not None else {})
    if isinstance(node, JsonSchema):
        schema = node.parsed if node.parsed is not None else json_schema.parse(node.schema)
        return schema.matches
    if isinstance(node, Text):
        return node.binding.matches
    if isinstance(node, Where):
        return node.predicate
    preds = [node_predicate(c, variables) for c in node.children]
    if isinstance(node, And):
        return _all_of(preds)
    either = _any_of(preds)
    if isinstance(node, Or):
        return either
    return lambda doc: not either(doc)


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
_UNSUPPORTED_TOP = frozenset({"$sampleRate"})


class _Parse:
    """What one parse carries down the filter: the collation its comparisons are built under,
    whether it is a validator (MongoDB's refusals there, and annotated nodes), and what it finds
    of `$text`, so that nothing walks the tree again to look for it."""

    # Class defaults: a parse sets only what it meets (most filters have no $or and no $text).
    texts: list[Text] | None = None
    geo = False  # a geo operator anywhere (the planner then asks the geo kinds' planner)
    or_depth = 0  # the `$or` and `$nor` clauses around what is being parsed
    nor_depth = 0
    text_in_nor = False
    #: The outermost `$or` holding the `$text`: its clauses, and which one holds it.
    text_or: tuple[tuple[ParsedFilter, ...], int] | None = None

    def __init__(
        self, collation: Collation | None, validator: bool, javascript: bool = True
    ) -> None:
        self.collation = collation
        self.validator = validator
        self.javascript = javascript  # $where allowed (not in a pipeline's $match, as mongod)

    def text_count(self) -> int:
        return len(self.texts) if self.texts is not None else 0

    def found_text(self, text: Text) -> None:
        if self.texts is None:
            self.texts = []
        self.texts.append(text)
        self.text_in_nor = self.text_in_nor or self.nor_depth > 0

    def text_site(self) -> TextSite | None:
        """Where the filter's `$text` sits (None: it has none), once the whole filter is parsed:
        MongoDB's rules, one `$text` at most and none under `$nor`, are checked here."""
        if not self.texts:
            return None
        if len(self.texts) > 1:
            raise QueryError("BadValue", "Too many text expressions")
        if self.text_in_nor:
            raise QueryError("BadValue", "text expression not allowed in nor")
        clauses, index = self.text_or if self.text_or is not None else (None, -1)
        return TextSite(self.texts[0], clauses, index)

    def annotated(self, node: Node, op: str, path: str, specified: Mapping[str, Any]) -> Node:
        """The node with how a validator wrote it (only a validator's nodes carry it)."""
        if not self.validator:
            return node
        return replace(node, annotation=Annotation(op, path, specified))


#: Values that are neither operator documents nor regular expressions: an equality on a field.
_SCALARS = frozenset({int, float, str, bool, Int64, ObjectId, datetime.datetime, type(None)})


def _and_node(nodes: list[Node]) -> Node:
    """A conjunction: the one node alone, else an And (an empty And always holds)."""
    return nodes[0] if len(nodes) == 1 else And(tuple(nodes))


def _parse_doc(
    flt: Mapping[str, Any], variables: Mapping[str, Any] | None, cx: _Parse
) -> tuple[Node, Predicate]:
    """A filter document: its node and predicate. `variables` is None below the top level (in
    $elemMatch), where MongoDB refuses $expr; $and, $or and $nor pass theirs on."""
    nodes: list[Node] = []
    preds: list[Predicate] = []
    collation = cx.collation
    for key, value in flt.items():
        if key.startswith("$"):
            parsed = _parse_top_operator(key, value, variables, cx)
            if parsed is not None:
                nodes.append(parsed[0])
                preds.append(parsed[1])
        elif type(value) in _SCALARS and "." not in key:
            # {field: value}, the commonest filter of all (an `_id` lookup): straight to the
            # predicate _field_predicate makes of the leaf _parse_field would give.
            test = eq_test(value) if collation is None else compare_test(value, "$eq", collation)
            leaf = Compare(key, test, "$eq", value)
            nodes.append(cx.annotated(leaf, "$eq", key, {key: value}) if cx.validator else leaf)
            preds.append(_top_field_terms(key, (test,), ()))
        else:
            node = _parse_field(key, value, cx)
            if cx.validator and isinstance(node, And):
                # MongoDB's validator details list a field's operators as the document's clauses.
                nodes.extend(node.children)
            else:
                nodes.append(node)
            preds.append(_field_predicate(key, node))
    return _and_node(nodes), _all_of(preds)


def _parse_top_operator(
    op: str, value: Any, variables: Mapping[str, Any] | None, cx: _Parse
) -> tuple[Node, Predicate] | None:
    if op == "$comment":
        return None
    if op == "$expr":
        if variables is None:
            raise QueryError("BadValue", "$expr can only be applied to the top-level document")
        if cx.validator:
            refuse_in_validator(value)
        return Expr(value), _expr_predicate(value, variables)
    if op in ("$and", "$or", "$nor"):
        return _parse_logical(op, value, variables, cx)
    if op in ("$alwaysTrue", "$alwaysFalse"):
        try:
            n = integer_argument(value, op)
        except IntegerError as exc:
            raise QueryError("FailedToParse", exc.reason) from None
        if n != 1:
            raise QueryError("FailedToParse", f"{op} must be an integer value of 1")
        always = op == "$alwaysTrue"
        return cx.annotated(Always(always), op, "", {op: value}), _always if always else _never
    if op == "$jsonSchema":
        schema = json_schema.parse(value)
        return JsonSchema(value, schema), schema.matches
    if op in ("$ref", "$id", "$db"):
        # DBRef fields: MongoDB compares them by plain equality, whatever the value looks like.
        leaf = Compare(op, compare_test(value, "$eq", cx.collation), "$eq", value)
        return cx.annotated(leaf, "$eq", op, {op: value}), _field_predicate(op, leaf)
    if op == "$text":
        if variables is None:
            raise QueryError("BadValue", "$text can only be applied to the top-level document")
        if cx.validator:
            raise QueryError("BadValue", f"{op} is not allowed in this context")
        binding = TextBinding(parse_text(value))
        text = Text(binding.args, binding)
        cx.found_text(text)
        return text, binding.matches
    if op == "$where":
        if cx.validator or not cx.javascript:
            raise QueryError("BadValue", f"{op} is not allowed in this context")
        if variables is None:
            raise QueryError("BadValue", "$where can only be applied to the top-level document")
        where = where_predicate(value)
        return Where(value, where), where
    if op in _UNSUPPORTED_TOP:
        raise QueryError("NotImplemented", f"{op} is not supported")
    hint = (
        ". If you are trying to negate an entire expression, use $nor."
        if op == "$not"
        else ". If you have a field name that starts with a '$' symbol, consider using "
        "$getField or $setField."
    )
    raise QueryError("BadValue", f"unknown top level operator: {op}{hint}")


def _parse_logical(
    op: str, value: Any, variables: Mapping[str, Any] | None, cx: _Parse
) -> tuple[Node, Predicate]:
    """`$and`, `$or`, `$nor`: their clauses, each a filter document. The outermost `$or` holding
    the `$text` records its clauses for the planner, which reads the others through indexes."""
    if not isinstance(value, list):
        raise QueryError("BadValue", f"{op} must be an array")
    if not value:
        raise QueryError("BadValue", "$and/$or/$nor must be a nonempty array")
    nodes: list[Node] = []
    preds: list[Predicate] = []
    nested = op != "$and"
    cx.or_depth += nested
    cx.nor_depth += op == "$nor"
    texts = cx.text_count()
    holder = -1  # the clause that holds the $text
    geo: list[bool] = []  # which clauses hold a geo operator (planned alone beside a $text)
    for i, clause in enumerate(value):
        if not isinstance(clause, Mapping):
            raise QueryError("BadValue", "$or/$and/$nor entries need to be full objects")
        before, cx.geo = cx.geo, False
        node, pred = _parse_doc(clause, variables, cx)
        geo.append(cx.geo)
        cx.geo = before or cx.geo
        if holder < 0 and cx.text_count() > texts:
            holder = i
        nodes.append(node)
        preds.append(pred)
    cx.or_depth -= nested
    cx.nor_depth -= op == "$nor"
    if op == "$and":
        # A validator keeps a one-clause $and: MongoDB's details name it.
        return And(tuple(nodes)) if cx.validator else _and_node(nodes), _all_of(preds)
    either = _any_of(preds)
    if op == "$nor":
        return Nor(tuple(nodes)), lambda doc: not either(doc)
    if holder >= 0 and cx.or_depth == 0:
        c = cx.collation
        clauses = tuple(
            ParsedFilter(f, n, p, collation=c, geo=g)
            for f, n, p, g in zip(value, nodes, preds, geo, strict=True)
        )
        cx.text_or = (clauses, holder)
    return Or(tuple(nodes)), either


def _expr_predicate(spec: Any, variables: Mapping[str, Any]) -> Predicate:
    """{$expr: <aggregation expression>}: a document matches when the expression is truthy."""
    expr = expressions.compile_expression(spec, frozenset(variables))
    truthy = expressions.truthy
    return lambda doc: truthy(expr(doc, variables))


# -- a field's operators ----------------------------------------------------------------------------


def _parse_field(path: str, value: Any, cx: _Parse) -> Node:
    if is_operator_doc(value):
        return _parse_operators(path, value, cx)
    leaf: Leaf
    if is_regex(value):
        leaf, op = _regex_leaf(path, *regex_source(value)), "$regex"
    else:
        leaf, op = Compare(path, compare_test(value, "$eq", cx.collation), "$eq", value), "$eq"
    return cx.annotated(leaf, op, path, {path: value}) if cx.validator else leaf


#: The proximity operators, which sort by distance: a validator cannot hold one.
_NEAR = frozenset({"$near", "$nearSphere", "$geoNear"})


def _parse_operators(path: str, ops: Mapping[str, Any], cx: _Parse) -> Node:
    nodes: list[Node] = []
    for op, arg in ops.items():
        if cx.validator and op in _NEAR:
            raise QueryError("Location5626500", NEAR_REFUSED)
        parse = _OPERATORS.get(op)
        if parse is None:
            if op == "$where":
                raise QueryError("BadValue", "$where cannot be applied to a field")
            raise QueryError("BadValue", f"unknown operator: {op}")
        node = parse(op, path, arg, ops, cx)
        if node is not None:
            if cx.validator:
                # As MongoDB shows it: $regex with its $options, any other operator alone.
                written = (
                    {k: v for k, v in ops.items() if k in ("$regex", "$options")}
                    if op == "$regex"
                    else {op: arg}
                )
                node = cx.annotated(node, op, path, {path: written})
            nodes.append(node)
    return _and_node(nodes)


def _regex_leaf(path: str, pattern: str, options: str) -> Regex:
    return Regex(path, regex_test(pattern, options), pattern, "".join(sorted(options)))


def _parse_eq(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    return Compare(path, compare_test(arg, op, cx.collation), op, arg)


def _parse_range(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    if is_regex(arg):
        raise QueryError("BadValue", f"Can't have RegEx as arg to predicate over field '{path}'.")
    return Compare(path, compare_test(arg, op, cx.collation), op, arg)


def _parse_ne(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    if is_regex(arg):
        raise QueryError("BadValue", "Can't have regex as arg to $ne.")
    return Not(Compare(path, compare_test(arg, "$eq", cx.collation), "$eq", arg))


def _parse_in(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    if not isinstance(arg, list):
        raise QueryError("BadValue", f"{op} needs an array")
    leaf = In(path, collated_in_test(arg, cx.collation), tuple(arg))
    return leaf if op == "$in" else Not(leaf)


def _parse_exists(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    exists = Exists(path, exists_test)
    return exists if true_value(arg) else Not(exists)


def _parse_not(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    if is_regex(arg):
        regex = _regex_leaf(path, *regex_source(arg))
        return Not(cx.annotated(regex, "$regex", path, {path: arg}))
    if not isinstance(arg, Mapping):
        raise QueryError("BadValue", "$not needs a regex or a document")
    if not arg:
        raise QueryError("BadValue", "$not cannot be empty")
    return Not(_parse_operators(path, arg, cx))


def _parse_regex(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    return _regex_leaf(path, *regex_document(ops))


def _parse_options(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node | None:
    if "$regex" in ops:
        return None  # read together with its $regex
    raise QueryError("BadValue", "$options needs a $regex")


def _parse_type(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    codes = type_codes(path, arg)
    return Type(path, type_test(codes), codes)


def _parse_size(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    n = size_argument(arg)
    return Size(path, size_test(n), n)


def _parse_elem_match(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
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
        child = _parse_operators("", arg, cx)
        return ElemMatchValue(path, elem_match_value_test(_element_test(child)), child)
    tree, sub = _parse_doc(arg, None, cx)
    return ElemMatchObject(path, elem_match_object_test(sub), tree)


def elem_match_value_test(each: Test) -> Test:
    """$elemMatch's value form: some element of the array passes `each`."""

    def value_form(v: Any) -> bool:
        return type(v) is list and any(map(each, v))

    return value_form


def elem_match_object_test(sub: Predicate) -> Test:
    """$elemMatch's document form: some element, as a document, matches `sub`."""

    def document_form(v: Any) -> bool:
        if type(v) is not list:
            return False
        for e in v:
            d = element_document(e)
            if d is not None and sub(d):
                return True
        return False

    return document_form


def _parse_all(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    if not isinstance(arg, list):
        raise QueryError("BadValue", "$all needs an array")
    if not arg:
        return Always(False, path)  # {$all: []} matches nothing
    nodes: list[Node] = []
    if _first_key(arg[0]) == "$elemMatch":
        for element in arg:
            if _first_key(element) != "$elemMatch":
                raise QueryError("BadValue", "$all/$elemMatch has to be consistent")
            nodes.append(_parse_elem_match("$elemMatch", path, element["$elemMatch"], element, cx))
        return All(path, tuple(nodes))
    for element in arg:
        if is_regex(element):
            nodes.append(_regex_leaf(path, *regex_source(element)))
        elif _first_key(element) in _PATH_OPERATORS:
            raise QueryError("BadValue", "no $ expressions in $all")
        else:
            nodes.append(Compare(path, compare_test(element, "$eq", cx.collation), "$eq", element))
    return All(path, tuple(nodes))


def _first_key(value: Any) -> str | None:
    if isinstance(value, Mapping) and value:
        return str(next(iter(value)))
    return None


def _parse_mod(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    divisor, remainder = mod_arguments(arg)
    return Mod(path, mod_test(divisor, remainder), divisor, remainder)


def _parse_bits(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    positions = bit_positions(path, op, arg)
    return Bits(path, bits_test(op, positions), op, positions)


def _unsupported(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    raise QueryError("NotImplemented", f"{op} is not supported")


#: The operators MongoDB accepts on a field: each parses its argument (with the field's whole
#: operator document at hand, for $regex and $options, and the parse's state) into a node, or None
#: for nothing to test.
def _parse_geo(op: str, path: str, arg: Any, ops: Mapping[str, Any], cx: _Parse) -> Node:
    cx.geo = True  # recorded, so that the planner need not walk the tree for one
    return parse_geo(op, path, arg, ops, cx)


_OPERATORS: dict[str, Callable[[str, str, Any, Mapping[str, Any], _Parse], Node | None]] = {
    "$eq": _parse_eq,
    "$gt": _parse_range,
    "$gte": _parse_range,
    "$lt": _parse_range,
    "$lte": _parse_range,
    "$ne": _parse_ne,
    "$in": _parse_in,
    "$nin": _parse_in,
    "$exists": _parse_exists,
    "$not": _parse_not,
    "$regex": _parse_regex,
    "$options": _parse_options,
    "$type": _parse_type,
    "$size": _parse_size,
    "$elemMatch": _parse_elem_match,
    "$all": _parse_all,
    "$mod": _parse_mod,
    "$bitsAllSet": _parse_bits,
    "$bitsAllClear": _parse_bits,
    "$bitsAnySet": _parse_bits,
    "$bitsAnyClear": _parse_bits,
    "$geoIntersects": _parse_geo,
    "$geoNear": _unsupported,
    "$geoWithin": _parse_geo,
    "$near": _parse_geo,
    "$nearSphere": _parse_geo,
    "$within": _parse_geo,
    "$maxDistance": parse_distance,
    "$minDistance": parse_distance,
}
#: What makes an $all element an (illegal) operator document rather than a value to equal.
_PATH_OPERATORS = frozenset(_OPERATORS) - {"$not"}
#: For the README's compatibility table (server/compat.py): each operator -> whether ebbdb runs it.
FIELD_OPERATORS = {op: parse is not _unsupported for op, parse in _OPERATORS.items()}
TOP_LEVEL_OPERATORS = {op: op not in _UNSUPPORTED_TOP for op in _PATHLESS - DBREF_FIELDS}


# -- from nodes to predicates -----------------------------------------------------------------------
#
# MongoDB evaluates each operator twice over: against a document (any value its path yields) and
# against one value (matchesSingleElement, which $elemMatch's value form and $not inside it need).
# Each leaf says how it meets a path ending at an array (`expand`): most test the elements and the
# array itself; $size and $elemMatch test only the array.


def _element_test(node: Node) -> Test:
    """The node against one value, as $elemMatch's value form applies it to each element."""
    if isinstance(node, Leaf):
        return node.test
    if isinstance(node, Not):
        inner = _element_test(node.child)
        return lambda v: not inner(v)
    if isinstance(node, (And, All)):
        tests = tuple(_element_test(c) for c in node.children)

        def all_hold(v: Any) -> bool:
            for t in tests:
                if not t(v):
                    return False
            return True

        return all_hold
    assert isinstance(node, Always)
    const = node.value
    return lambda v: const


def _values_test(node: Node) -> _ValuesTest:
    """The node against a path's values: `ev` expanded (leaf arrays' elements too), `nv` not."""
    if isinstance(node, Leaf):
        test = node.test
        if node.expand:
            return lambda ev, nv: any(map(test, ev))
        return lambda ev, nv: any(map(test, nv))
    if isinstance(node, Not):
        inner = _values_test(node.child)
        return lambda ev, nv: not inner(ev, nv)
    if isinstance(node, (And, All)):
        tests = tuple(_values_test(c) for c in node.children)

        def all_hold(ev: list[Any], nv: list[Any]) -> bool:
            for t in tests:
                if not t(ev, nv):
                    return False
            return True

        return all_hold
    assert isinstance(node, Always)
    const = node.value
    return lambda ev, nv: const


def _modes(node: Node) -> tuple[bool, bool]:
    """Which value lists the node reads: (expanded, not expanded)."""
    if isinstance(node, Leaf):
        return node.expand, not node.expand
    if isinstance(node, Not):
        return _modes(node.child)
    if isinstance(node, (And, All)):
        e = n = False
        for c in node.children:
            ce, cn = _modes(c)
            e, n = e or ce, n or cn
        return e, n
    return False, False


_EMPTY: list[Any] = []


def _field_predicate(path: str, node: Node) -> Predicate:
    """The predicate for one field's operators. Most filters are a few plain operators on a field
    (equality, ranges, $in, $ne, ...): those get closures that read the field once and touch no
    list unless the value is an array. Everything else goes through the general tree walk."""
    if isinstance(node, Always):
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
        if isinstance(node, Leaf):  # $size, $elemMatch: the value itself, never its elements
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


def _plain_terms(node: Node) -> tuple[tuple[Test, ...], tuple[Test, ...]] | None:
    """The node as a conjunction of leaves that test a value and, if it is an array, its elements:
    (the positive tests, the negated ones); None for any other shape."""
    positives: list[Test] = []
    negatives: list[Test] = []
    pending = [node]
    while pending:
        c = pending.pop()
        if isinstance(c, (And, All)):
            pending.extend(reversed(c.children))
        elif isinstance(c, Leaf) and c.expand:
            positives.append(c.test)
        elif isinstance(c, Not) and isinstance(c.child, Leaf) and c.child.expand:
            negatives.append(c.child.test)
        else:
            return None
    return tuple(positives), tuple(negatives)


def _holds(
    positives: tuple[Test, ...], negatives: tuple[Test, ...]
) -> tuple[Test, Callable[[list[Any]], bool]]:
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
    key: str, positives: tuple[Test, ...], negatives: tuple[Test, ...]
) -> Predicate:
    if len(positives) + len(negatives) == 1:
        # One operator: the commonest filter of all gets the shortest path. A negated one
        # ($ne, $nin, $not) holds where its inner test finds nothing on the path.
        test, found = (positives[0], True) if positives else (negatives[0], False)
        missed = not found

        def one(doc: dict[str, Any]) -> bool:
            v = doc.get(key, MISSING)
            if test(v):
                return found
            if type(v) is list:
                for e in v:
                    if test(e):
                        return found
            return missed

        return one
    on_value, on_values = _holds(positives, negatives)

    def several(doc: dict[str, Any]) -> bool:
        v = doc.get(key, MISSING)
        if type(v) is list:
            return on_values([v, *v])
        return on_value(v)

    return several


def _dotted_terms(
    parts: tuple[str, ...], positives: tuple[Test, ...], negatives: tuple[Test, ...]
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


# -- what a filter implies, for the pipeline's read -------------------------------------------------


def implied_filters(parsed: ParsedFilter, variables: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Filters that every document matching `parsed` also matches and that do not depend on the
    variables, for a pipeline to push into its first read when the $match itself cannot go (it
    uses $expr): the top-level conditions without $expr, as written, and the equalities each
    top-level $expr states between a field and a value `variables` fix ({$eq: ["$f", "$$v"]}, the
    usual $lookup join; MongoDB's RewriteExpr). A superset: the $match still runs after the read."""
    out: list[dict[str, Any]] = []
    for key, value, node in conditions(parsed):
        if isinstance(node, Expr):
            out += [{path: {"$eq": v}} for path, v in _expr_equalities(node.spec, variables)]
        elif not uses_expr(node):
            out.append({key: value})
    return out


def _expr_equalities(spec: Any, variables: Mapping[str, Any]) -> list[tuple[str, Any]]:
    if not isinstance(spec, Mapping) or len(spec) != 1:
        return []
    op, arg = next(iter(spec.items()))
    if op == "$and" and isinstance(arg, list):
        return [c for a in arg for c in _expr_equalities(a, variables)]
    if op != "$eq" or not isinstance(arg, list) or len(arg) != 2:
        return []
    for path, other in (arg, arg[::-1]):
        if not (isinstance(path, str) and path.startswith("$") and not path.startswith("$$")):
            continue
        value = _fixed_value(other, variables)
        # Only scalars: for them {$expr: {$eq: ["$f", v]}} implies the matcher's {f: v} (an array or
        # a path through arrays gives an array in $expr, never equal to a scalar), while null,
        # arrays, documents and regexes mean other things to the matcher.
        if value is not MISSING and rank(value) in _IMPLIED_RANKS and not is_nan(value):
            return [(path[1:], value)]
    return []


_IMPLIED_RANKS = frozenset(
    (RANK_NUMBER, RANK_STRING, RANK_OBJECTID, RANK_BOOL, RANK_DATE, RANK_BINDATA, RANK_TIMESTAMP)
)


def _fixed_value(spec: Any, variables: Mapping[str, Any]) -> Any:
    """The value of an expression that does not depend on the document, or MISSING."""
    if isinstance(spec, str) and spec.startswith("$$"):
        name = spec[2:].partition(".")[0]
        if name in ("ROOT", "CURRENT") or name not in variables:
            return MISSING
        try:
            return expressions.compile_expression(spec, frozenset(variables))({}, variables)
        except QueryError:
            return MISSING
    if isinstance(spec, str):
        return MISSING if spec.startswith("$") else spec
    if isinstance(spec, (Mapping, list)) or spec is None:
        return MISSING
    return spec


__all__ = [
    "ParsedFilter",
    "Predicate",
    "compile_filter",
    "implied_filters",
    "node_predicate",
    "parse_filter",
]
