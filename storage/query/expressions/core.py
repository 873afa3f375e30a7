"""The expression compiler and the operator registry every family module registers into: literals,
field paths and variables, object and array expressions, argument parsing, and the declared operand
checks (`Check`, `check`, `function`) that raise MongoDB's exact code and message for an operand of
the wrong type."""

from __future__ import annotations

import contextvars
import datetime
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from bson import DBRef, Decimal128, Int64
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core import limits, values
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.compare import UNDEFINED, compare
from ebbdb.storage.query.expressions import budget
from ebbdb.storage.query.paths import MISSING, split

Variables = Mapping[str, Any]
Expression = Callable[[dict[str, Any], Variables], Any]


class Accumulator(Protocol):
    def add(self, doc: dict[str, Any], variables: Variables) -> None: ...

    def result(self) -> Any: ...


# -- the registry ----------------------------------------------------------------------------------

#: compile(spec, defined, op) -> Expression; `op` is the name it was registered under.
Compiler = Callable[[Any, frozenset[str], str], Expression]
OPERATORS: dict[str, Compiler] = {}


def operator(*names: str) -> Callable[[Compiler], Compiler]:
    """Register a compiler under each of `names` (an alias compiles with its own name as `op`)."""

    def register(fn: Compiler) -> Compiler:
        for name in names:
            if name in OPERATORS:
                raise ValueError(f"expression operator {name!r} registered twice")
            OPERATORS[name] = fn
        return fn

    return register


def fail(code: int | str, message: str) -> NoReturn:
    """Raise MongoDB's error: a codeName, or a bare number as `Location<code>`."""
    raise QueryError(code if isinstance(code, str) else f"Location{code}", message)


# -- values as expressions see them ----------------------------------------------------------------


def nullish(v: Any) -> bool:
    """Value::nullish: null, missing or undefined."""
    return v is None or v is MISSING or v is UNDEFINED


def truthy(value: Any) -> bool:
    """MongoDB's coercion to boolean: false, null, missing, undefined and numeric zero are false
    (NaN, empty strings and empty arrays are true)."""
    if value is MISSING or value is None or value is False or value is UNDEFINED:
        return False
    t = type(value)
    if t is int or t is float or t is Int64:
        return bool(value != 0)
    if t is Decimal128:
        return not value.to_decimal().is_zero()
    return True


def type_name(v: Any) -> str:
    """The name $type gives a value ("missing" for a field that is not there)."""
    if v is MISSING or v is UNDEFINED:
        return "missing" if v is MISSING else "undefined"
    return values.type_name(v)


def show(v: Any) -> str:
    """A value as Value::toString prints it in expression errors (`MISSING` for a missing one)."""
    return "MISSING" if v is MISSING else "undefined" if v is UNDEFINED else values.render_value(v)


def fmt_double(x: float) -> str:
    """A double as MongoDB streams one into a message (C's %g: six significant digits)."""
    return f"{x:g}"


def is_array(v: Any) -> bool:
    return type(v) is list


def is_string(v: Any) -> bool:
    return type(v) is str


def is_object(v: Any) -> bool:
    return type(v) is dict or isinstance(v, (Mapping, DBRef))


def is_date(v: Any) -> bool:
    return type(v) is DatetimeMS or isinstance(v, datetime.datetime)


def as_doc(v: Any) -> dict[str, Any] | None:
    """An object as a dict (a DBRef as its document); None for anything else."""
    if type(v) is dict:
        return v
    if type(v) is DBRef:
        return dict(v.as_doc())
    if isinstance(v, Mapping):
        return dict(v)
    return None


def cmp(a: Any, b: Any) -> int:
    """BSON order for expressions, where a missing value sorts with undefined, below null."""
    return compare(UNDEFINED if a is MISSING else a, UNDEFINED if b is MISSING else b)


# -- declared operand checks -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """One condition an operand must meet, and the error MongoDB raises when it does not.

    `message` is a str.format template: {op} is the operator, {type} and {value} the operand's
    type name and rendering ({raw}: the operand as it is, a string unquoted), {double} the
    number as MongoDB streams a double, {index} its 1-based position, and {0}, {1}, ... the type
    names of all the operands. A check made by `Check.typed` tests the operand's exact type,
    which the evaluator does inline."""

    test: Callable[[Any], bool]
    code: int | str
    message: str
    types: frozenset[type] | None = None

    @classmethod
    def typed(cls, types: Iterable[type], code: int | str, message: str) -> Check:
        """The operand's exact type must be one of `types` (a bool is not an int here)."""
        accepted = frozenset(types)
        return cls(lambda x: type(x) in accepted, code, message, accepted)

    def reject(self, op: str, x: Any, operands: Sequence[Any] = (), index: int = 0) -> NoReturn:
        fail(
            self.code,
            self.message.format(
                *(type_name(o) for o in (operands or (x,))),
                op=op,
                type=type_name(x),
                value=show(x),
                raw=x,
                double=fmt_double(values.to_float(x)) if values.is_number(x) else "",
                index=index + 1,
            ),
        )


#: The exact types of numbers (int, long, double, decimal).
NUMBER_TYPES = frozenset((int, float, Int64, Decimal128))

#: What one operand must be: its checks, in the order MongoDB makes them.
Operand = tuple[Check, ...]


def check(op: str, x: Any, operand: Operand, operands: Sequence[Any] = (), index: int = 0) -> None:
    """Raise the first of `operand`'s checks that `x` fails."""
    for c in operand:
        if not c.test(x):
            c.reject(op, x, operands, index)


def _gate(operand: Operand) -> tuple[frozenset[type] | None, Callable[[Any], bool] | None]:
    """An operand's checks as one fast test: the exact types of a lone typed check, or a
    predicate that holds when every check passes (None, None: nothing to check)."""
    if not operand:
        return None, None
    if len(operand) == 1:
        only = operand[0]
        return (only.types, None) if only.types is not None else (None, only.test)
    tests = [c.test for c in operand]
    if len(tests) == 2:
        a, b = tests
        return None, lambda x: a(x) and b(x)
    return None, lambda x: all(t(x) for t in tests)


#: What `checked` gives for a nullish value: the operator's result is null.
NULL: Any = object()


def checked(op: str, x: Any, operand: Operand) -> Any:
    """`x` once it passes `operand`'s checks, or NULL when it is nullish (MongoDB's usual "null
    in, null out" for an operator's leading argument)."""
    if x is None or x is MISSING or x is UNDEFINED:
        return NULL
    check(op, x, operand)
    return x


def evaluator(
    op: str,
    args: Sequence[Expression],
    fn: Callable[..., Any],
    operands: Sequence[Operand] = (),
    *,
    nulls: bool = True,
    variadic: bool = False,
) -> Expression:
    """The evaluation most operators share. Fixed arguments: evaluate them all; with `nulls`, a
    nullish one makes the result null; then check each against its operand and return
    `fn(op, *values)`. Variadic (`operands[0]` applies to each): evaluate in order, a nullish one
    ends with null (with `nulls`), each is checked as it comes, and the result is
    `fn(op, values)`."""
    # Each closure tests an operand with its gate and calls `check` only to raise.
    if variadic:
        each = operands[0] if operands else ()
        te, pe = _gate(each)

        def evaluate_all(doc: dict[str, Any], v: Variables) -> Any:
            got = []
            for i, f in enumerate(args):
                x = f(doc, v)
                if nulls and (x is None or x is MISSING or x is UNDEFINED):
                    return None
                if (te is not None and type(x) not in te) or (pe is not None and not pe(x)):
                    check(op, x, each, (x,), i)
                got.append(x)
            return fn(op, got)

        return evaluate_all

    checks = [*operands, *[()] * (len(args) - len(operands))]
    if len(args) == 1:
        (f,), (first,) = args, checks
        t1, p1 = _gate(first)

        def evaluate_one(doc: dict[str, Any], v: Variables) -> Any:
            x = f(doc, v)
            if nulls and (x is None or x is MISSING or x is UNDEFINED):
                return None
            if (t1 is not None and type(x) not in t1) or (p1 is not None and not p1(x)):
                check(op, x, first)
            return fn(op, x)

        return evaluate_one

    if len(args) == 2:
        (f, g), (first, second) = args, checks
        (t1, p1), (t2, p2) = _gate(first), _gate(second)

        def evaluate_two(doc: dict[str, Any], v: Variables) -> Any:
            x, y = f(doc, v), g(doc, v)
            if nulls and (
                x is None
                or x is MISSING
                or x is UNDEFINED
                or y is None
                or y is MISSING
                or y is UNDEFINED
            ):
                return None
            if (t1 is not None and type(x) not in t1) or (p1 is not None and not p1(x)):
                check(op, x, first, (x, y), 0)
            if (t2 is not None and type(y) not in t2) or (p2 is not None and not p2(y)):
                check(op, y, second, (x, y), 1)
            return fn(op, x, y)

        return evaluate_two

    def evaluate(doc: dict[str, Any], v: Variables) -> Any:
        got = [f(doc, v) for f in args]
        if nulls and any(x is None or x is MISSING or x is UNDEFINED for x in got):
            return None
        for i, (x, operand) in enumerate(zip(got, checks)):
            check(op, x, operand, got, i)
        return fn(op, *got)

    return evaluate


def function(
    *names: str, arity: int | None, operands: Sequence[Operand] = (), nulls: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn` as the operator(s) `names`, evaluated by `evaluator`: `arity` arguments
    exactly (16020 otherwise), or any number when it is None."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        def compile_call(spec: Any, defined: frozenset[str], op: str) -> Expression:
            if arity is None:
                args = arguments(spec, defined)
            else:
                args = fixed(spec, defined, op, arity)
            return evaluator(op, args, fn, operands, nulls=nulls, variadic=arity is None)

        operator(*names)(compile_call)
        return fn

    return register


# -- paths and variables ---------------------------------------------------------------------------


def check_field_name(name: str) -> None:
    """FieldPath::uassertValidFieldName, for path components and object literal keys."""
    if not name:
        fail(15998, "FieldPath field names may not be empty strings.")
    if name[0] == "$" and name not in values.DBREF_FIELDS:
        fail(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        )
    if "\0" in name:
        fail(16411, "FieldPath field names may not contain '\0'.")


def _field_path(path: str) -> tuple[str, ...]:
    if not path:
        fail(40352, "FieldPath cannot be constructed with empty string")
    if path.endswith("."):
        fail(40353, "FieldPath must not end with a '.'.")
    parts = split(path)
    for part in parts:
        check_field_name(part)
    return parts


def check_variable_name(name: str, write: bool) -> None:
    """Variables' name rules: users define names that start with a lowercase letter (or a
    non-ASCII character); reads also accept the uppercase system names."""
    if write and name == "CURRENT":
        return
    if not name:
        fail(16866, "empty variable names are not allowed")
    first = name[0]
    if not ("a" <= first <= "z" or (not write and "A" <= first <= "Z") or ord(first) > 127):
        fail(16867, f"'{name}' starts with an invalid character for a user variable name")
    for ch in name[1:]:
        if not (ch.isascii() and (ch.isalnum() or ch == "_")) and ord(ch) <= 127:
            fail(16868, f"'{name}' contains an invalid character for a variable name: '{ch}'")


def _walk(value: Any, parts: tuple[str, ...], i: int) -> Any:
    """ExpressionFieldPath's evaluation from `parts[i]` on: documents are descended, an array maps
    the rest of the path over its document elements (dropping the ones that lack it), and
    anything else yields MISSING."""
    n = len(parts)
    while True:
        doc = value if type(value) is dict else as_doc(value)
        if doc is None:
            if type(value) is list:
                out = []
                for element in value:
                    if is_object(element):
                        x = _walk(element, parts, i)
                        if x is not MISSING:
                            out.append(x)
                return out
            return MISSING
        value = doc.get(parts[i], MISSING)
        i += 1
        if i == n or value is MISSING:
            return value


def compile_path(spec: str, defined: frozenset[str]) -> Expression:
    """A "$field.path" or "$$VAR.path" string."""
    if len(spec) < 2:
        fail(16872, "'$' by itself is not a valid FieldPath")
    if spec[1] != "$":
        parts = _field_path(spec[1:])
        return var_path("CURRENT", parts, defined)
    body = spec[2:]
    name = body.partition(".")[0]
    check_variable_name(name, write=False)
    parts = _field_path(body)[1:]
    return var_path(name, parts, defined)


def var_path(name: str, parts: tuple[str, ...], defined: frozenset[str]) -> Expression:
    """The variable `name` (a user one if `defined` holds it, else a system one), then `parts`."""
    if name in defined:
        if not parts:
            return lambda doc, v: v.get(name, MISSING)
        return lambda doc, v: _walk(v.get(name, MISSING), parts, 0)
    if name in ("CURRENT", "ROOT"):
        if not parts:
            return lambda doc, v: doc
        if len(parts) == 1:
            key = parts[0]
            return lambda doc, v: doc.get(key, MISSING)
        return lambda doc, v: _walk(doc, parts, 0)
    if name == "REMOVE":
        return lambda doc, v: MISSING
    if name == "CLUSTER_TIME":
        # ebbdb runs as a standalone server, where MongoDB has no cluster time to give.
        def cluster_time(doc: Any, v: Variables) -> Any:
            if name not in v:
                fail(51144, "Builtin variable '$$CLUSTER_TIME' is not available")
            return _walk(v[name], parts, 0) if parts else v[name]

        return cluster_time
    if name == "NOW":
        # Without a value from the caller, one instant for the whole statement: the one its
        # compilation started at (each reference taking its own could straddle a millisecond).
        fallback = _COMPILED_AT.get() or _now()
        return lambda doc, v: (
            _walk(v.get(name, fallback), parts, 0) if parts else v.get(name, fallback)
        )
    if name == "USER_ROLES":
        return lambda doc, v: _walk(v.get(name, []), parts, 0) if parts else v.get(name, [])
    if name == "SEARCH_META":
        return lambda doc, v: MISSING
    fail(17276, f"Use of undefined variable: {name}")


# -- the compiler ----------------------------------------------------------------------------------


#: When the outermost compile_expression running in this context started ($$NOW's fallback).
_COMPILED_AT: contextvars.ContextVar[DatetimeMS | None] = contextvars.ContextVar(
    "ebbdb_compiled_at", default=None
)


def _now() -> DatetimeMS:
    return DatetimeMS(int(time.time() * 1000))


def compile_expression(spec: Any, defined: frozenset[str] = frozenset()) -> Expression:
    """Compile an expression: literals, "$field.path", "$$VAR.path", {field: expr} objects,
    [expr, ...] arrays and {$operator: args}. Raises QueryError for a malformed expression;
    evaluating one raises QueryError where MongoDB fails at run time."""
    if _COMPILED_AT.get() is not None:
        return _compile(spec, defined)
    token = _COMPILED_AT.set(_now())
    try:
        return _compile(spec, defined)
    finally:
        _COMPILED_AT.reset(token)


def _compile(spec: Any, defined: frozenset[str]) -> Expression:
    t = type(spec)
    if t is str:
        if spec.startswith("$"):
            return compile_path(spec, defined)
        return const(spec)
    if t is list:
        return _compile_array(spec, defined)
    if t is dict or isinstance(spec, Mapping):
        if not spec:
            return lambda doc, v: {}
        first = next(iter(spec))
        if first.startswith("$"):
            if len(spec) != 1:
                fail(
                    15983,
                    "An object representing an expression must have exactly one field: "
                    + values.render(spec),
                )
            compiler = OPERATORS.get(first)
            if compiler is None:
                fail("InvalidPipelineOperator", f"Unrecognized expression '{first}'")
            compiled = compiler(spec[first], defined, first)
            if first not in HOLDING:
                return compiled
            # An operator that can build a large value is held to MongoDB's limits on what it
            # builds (GROWING), and what it builds is charged to the operation (budget.py).
            _holding[0] += 1
            return budget.guarded(first, compiled, first in limits.GROWING)
        return _compile_object(spec, defined)
    return const(spec)


#: The operators whose result may be large: those that grow values, and those that pick from or
#: reorder a large input (their result replaces what their input held).
HOLDING = limits.GROWING | frozenset(
    "$range $filter $sortArray $setIntersection $setDifference $slice $firstN $lastN $maxN"
    " $minN".split()
)
_holding = [0]  # operators of HOLDING compiled so far


def compile_top(spec: Any, defined: frozenset[str] = frozenset()) -> Expression:
    """`compile_expression` for an expression a stage or an accumulator evaluates once per
    document: when it can build large values, each evaluation is a scope of its own, whose
    charges are given back when it returns (budget.py)."""
    before = _holding[0]
    compiled = compile_expression(spec, defined)
    return budget.scoped(compiled) if _holding[0] != before else compiled


def const(value: Any) -> Expression:
    return lambda doc, v: value


def _compile_array(spec: list[Any], defined: frozenset[str]) -> Expression:
    items = [compile_expression(s, defined) for s in spec]

    def array(doc: dict[str, Any], v: Variables) -> Any:
        out = []
        for f in items:
            x = f(doc, v)
            out.append(None if x is MISSING else x)  # an array cannot hold a missing value
        return out

    return array


def _compile_object(spec: Mapping[str, Any], defined: frozenset[str]) -> Expression:
    fields = []
    for key, sub in spec.items():
        check_field_name(key)
        if "." in key:
            fail(
                16412,
                "FieldPath field names may not contain '.'. Consider using $getField or $setField.",
            )
        fields.append((key, compile_expression(sub, defined)))

    def obj(doc: dict[str, Any], v: Variables) -> Any:
        out = {}
        for k, f in fields:
            x = f(doc, v)
            if x is not MISSING:
                out[k] = x
        return out

    return obj


# -- arguments -------------------------------------------------------------------------------------


def arguments(spec: Any, defined: frozenset[str]) -> list[Expression]:
    """ExpressionNary::parseArguments: an array is the argument list; anything else is one
    argument."""
    items = spec if type(spec) is list else [spec]
    return [compile_expression(s, defined) for s in items]


def fixed(spec: Any, defined: frozenset[str], op: str, n: int) -> list[Expression]:
    args = arguments(spec, defined)
    if len(args) != n:
        fail(16020, f"Expression {op} takes exactly {n} arguments. {len(args)} were passed in.")
    return args


def ranged(spec: Any, defined: frozenset[str], op: str, lo: int, hi: int) -> list[Expression]:
    args = arguments(spec, defined)
    if not lo <= len(args) <= hi:
        fail(
            28667,
            f"Expression {op} takes at least {lo} arguments, and at most {hi}, but "
            f"{len(args)} were passed in.",
        )
    return args


def named_args(
    spec: Any,
    allowed: Iterable[str],
    not_object: tuple[int | str, str],
    unknown: tuple[int | str, str],
) -> dict[str, Any]:
    """The {name: expr} argument object of $filter, $trim, $dateToString and the like, with the
    operator's own codes for a non-object and for an unknown name (`{key}` in the message is the
    name)."""
    if not isinstance(spec, Mapping):
        fail(not_object[0], not_object[1])
    names = frozenset(allowed)
    for key in spec:
        if key not in names:
            fail(unknown[0], unknown[1].format(key=key))
    return dict(spec)


def require(
    args: Mapping[str, Any],
    op: str,
    codes: Mapping[str, int | str],
    message: str = "Missing '{key}' parameter to {op}",
) -> None:
    """Fail for the first argument of `codes` that `args` lacks, with its code (`{key}` and
    `{op}` in the message are the argument and the operator)."""
    for key, code in codes.items():
        if key not in args:
            fail(code, message.format(key=key, op=op))


def present(fs: Iterable[Expression], doc: dict[str, Any], v: Variables) -> list[Any] | None:
    """The values of `fs`, evaluated in order; None as soon as one is nullish (MongoDB returns
    null there without evaluating the rest)."""
    got = []
    for f in fs:
        x = f(doc, v)
        if x is None or x is MISSING or x is UNDEFINED:
            return None
        got.append(x)
    return got


def optional(args: Mapping[str, Any], key: str, defined: frozenset[str]) -> Expression | None:
    """The compiled argument `key`, or None when it is absent."""
    return compile_expression(args[key], defined) if key in args else None


def compile_args(
    spec: Any,
    defined: frozenset[str],
    op: str,
    required: Mapping[str, int | str],
    optional_names: Sequence[str],
    not_object: tuple[int | str, str],
    unknown: tuple[int | str, str],
    missing: str = "Missing '{key}' parameter to {op}",
) -> tuple[list[Expression], list[Expression | None]]:
    """An operator's {name: expr} arguments compiled (named_args, then require): the `required`
    ones in their order (the first absent fails with its code and `missing`), then the optional
    ones in theirs (None when absent)."""
    args = named_args(spec, (*required, *optional_names), not_object, unknown)
    require(args, op, required, missing)
    return (
        [compile_expression(args[k], defined) for k in required],
        [optional(args, k, defined) for k in optional_names],
    )


def command_variables(let: Mapping[str, Any] | None, now_ms: int) -> dict[str, Any]:
    """The variables a command's `let` defines, each a constant expression evaluated once (it may
    use $$NOW and the variables before it), with NOW, the command's time."""
    variables: dict[str, Any] = {"NOW": DatetimeMS(now_ms)}
    for name, spec in (let or {}).items():
        check_variable_name(name, write=True)
        value = compile_top(spec, frozenset(variables))({}, variables)
        variables[name] = None if value is MISSING else value
    return variables
