"""The query language's JavaScript: the `$where` predicate, the `$function` expression and the
`$accumulator` accumulator, with mongod's parse errors (codes and messages) and its run-time
rules. Each compiled use owns one JavaScript context (storage/query/javascript_engine.py), made
when it first runs: nothing is shared between operations."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bson import Code

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.expressions.core import (
    Expression,
    Variables,
    compile_expression,
    fail,
    operator,
    show,
    type_name,
)
from ebbdb.storage.query.javascript import check_scripting, runtime
from ebbdb.storage.query.paths import MISSING

if TYPE_CHECKING:
    from ebbdb.storage.query.javascript_engine import Runtime

#: How many accumulate calls $accumulator gathers before one trip into JavaScript (mongod
#: gathers its pending calls the same way).
_BATCH = 256


class _Function:
    """A function source, compiled in a context of its own at its first call."""

    __slots__ = ("_fn", "_rt", "feature", "scope", "source")

    def __init__(self, feature: str, source: str, scope: Mapping[str, Any] | None = None) -> None:
        self.feature, self.source, self.scope = feature, source, scope
        self._rt: Runtime | None = None
        self._fn = 0

    def context(self) -> tuple[Runtime, int]:
        rt = self._rt
        if rt is None:
            rt = runtime(self.feature, self.scope)
            self._fn = rt.define(self.source)
            self._rt = rt
        else:
            check_scripting(self.feature)
        return rt, self._fn


# -- $where ----------------------------------------------------------------------------------------


def where_predicate(spec: Any) -> Callable[[Mapping[str, Any]], bool]:
    """`{$where: code}`: a string or Code (its scope's variables defined); the document is
    `this` and `obj`. Refused at parse, as mongod does, when scripting is off or the engine is
    missing; a function that does not compile fails here too."""
    if isinstance(spec, Code):
        source, scope = str(spec), spec.scope
    elif isinstance(spec, str):
        source, scope = spec, None
    else:
        raise QueryError("BadValue", "$where got bad type")
    function = _Function("$where", source, scope)
    rt, fn = function.context()

    def where(doc: Mapping[str, Any]) -> bool:
        check_scripting("$where")
        return rt.test(fn, doc)

    return where


# -- $function -------------------------------------------------------------------------------------


def _constant_code(spec: Any, defined: frozenset[str]) -> Any:
    """The value of a constant operand (a literal, or an expression of constants)."""
    if isinstance(spec, str) and spec.startswith("$"):
        return MISSING
    if isinstance(spec, (str, Code)):
        return spec
    try:
        return compile_expression(spec, defined)({}, {})
    except QueryError:
        return MISSING


@operator("$function")
def _function(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(31260, f"$function requires an object as an argument, found: {type_name(spec)}")
    if "body" not in spec:
        fail(31261, "The body function must be specified.")
    body = _constant_code(spec["body"], defined)
    if body is MISSING:
        fail(31432, "The body function must be a constant expression")
    if not isinstance(body, (str, Code)):
        fail(31262, "The body function must evaluate to type string or code")
    if "args" not in spec:
        fail(31263, "The args field must be specified.")
    args_f = compile_expression(spec["args"], defined)
    if "lang" not in spec:
        fail(31418, "The lang field must be specified.")
    if spec["lang"] != "js":
        fail(31419, "Currently the only supported language specifier is 'js'.")
    function = _Function("$function", str(body))

    def evaluate(doc: dict[str, Any], v: Variables) -> Any:
        rt, fn = function.context()
        args = args_f(doc, v)
        if type(args) is not list:
            fail(31266, "The args field must be of type array")
        return rt.call(fn, [None if a is MISSING else a for a in args])

    return evaluate


# -- $accumulator ----------------------------------------------------------------------------------

_ACCUMULATOR_FIELDS = ("init", "accumulate", "merge", "finalize")


def compile_js_accumulator(arg: Any, defined: frozenset[str]) -> Callable[[], Any]:
    """A factory of `$accumulator` states for $group (compile_accumulator's, for this operator).
    Its initArgs are evaluated against the group's first document (mongod evaluates them against
    the group key as a document: the same values when they name the key's fields)."""
    if not isinstance(arg, Mapping):
        fail(4544703, f"$accumulator expects an object as an argument; found: {type_name(arg)}")
    sources: dict[str, str] = {}
    init_args: Expression = lambda doc, v: []  # noqa: E731
    accumulate_args: Expression | None = None
    for name, value in arg.items():
        if name in _ACCUMULATOR_FIELDS:
            code = _constant_code(value, defined)
            if code is MISSING:
                fail(4544701, f"$accumulator '{name}' must be a constant expression")
            if not isinstance(code, (str, Code)):
                fail(4544702, f"$accumulator '{name}' must be a String or Code")
            sources[name] = str(code)
        elif name == "initArgs":
            init_args = compile_expression(value, defined)
        elif name == "accumulateArgs":
            accumulate_args = compile_expression(value, defined)
        elif name == "lang":
            if not isinstance(value, str):
                fail(4544704, f"$accumulator lang must be a string; found: {type_name(value)}")
            if value != "js":
                fail(4544705, "$accumulator only supports lang: 'js'")
        else:
            fail(4544706, f"$accumulator got an unexpected field: {name}")
    for number, name in ((4544707, "init"), (4544708, "accumulate"), (4544709, "merge")):
        if name not in sources:
            fail(number, f"$accumulator missing required argument '{name}'")
    if accumulate_args is None:
        fail(4544710, "$accumulator missing required argument 'accumulateArgs'")
    functions = {name: _Function("$accumulator", source) for name, source in sources.items()}
    shared: dict[str, Runtime] = {}

    def context(name: str) -> tuple[Runtime, int]:
        check_scripting("$accumulator")
        rt = shared.get("rt")
        if rt is None:
            rt = shared["rt"] = runtime("$accumulator")
        return rt, rt.define(functions[name].source)

    assert accumulate_args is not None
    return lambda: _JsAccumulator(context, init_args, accumulate_args, "finalize" in sources)


class _JsAccumulator:
    """One group's $accumulator state: made by init at the first document, folded through
    accumulate in batches, finished by finalize."""

    __slots__ = (
        "_context",
        "_finalize",
        "_init_args",
        "_accumulate_args",
        "_pending",
        "_state",
        "_started",
    )

    def __init__(
        self,
        context: Callable[[str], tuple[Runtime, int]],
        init_args: Expression,
        accumulate_args: Expression,
        finalize: bool,
    ) -> None:
        self._context = context
        self._init_args, self._accumulate_args = init_args, accumulate_args
        self._finalize = finalize
        self._pending: list[list[Any]] = []
        self._state: Any = None
        self._started = False

    def add(self, doc: dict[str, Any], variables: Variables) -> None:
        if not self._started:
            args = self._init_args(doc, variables)
            if type(args) is not list:
                fail(4544711, f"$accumulator initArgs must evaluate to an array: {show(args)}")
            rt, fn = self._context("init")
            self._state = rt.call(fn, [None if a is MISSING else a for a in args])
            self._started = True
        args = self._accumulate_args(doc, variables)
        if type(args) is not list:
            fail(4544712, f"$accumulator accumulateArgs must evaluate to an array: {show(args)}")
        self._pending.append([None if a is MISSING else a for a in args])
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            rt, fn = self._context("accumulate")
            self._state = rt.fold(fn, self._state, self._pending)
            self._pending = []

    def result(self) -> Any:
        self._flush()
        if not self._finalize:
            return self._state
        rt, fn = self._context("finalize")
        return rt.call(fn, [self._state])


__all__ = ["compile_js_accumulator", "where_predicate"]
