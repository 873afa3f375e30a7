"""Aggregation expressions: compiles an expression spec once into a function of (document,
variables), with MongoDB 7.0's semantics, and the $group accumulators. Used by aggregation stages
and by `$expr` in the matcher.

Interface (stable; the implementation grows behind it):
- `compile_expression(spec, defined)` -> Expression, a callable `(doc, variables) -> value`
  (core's `compile_top`: each evaluation's large values are charged to the operation, budget.py).
  `doc` is $$CURRENT and $$ROOT; `variables` maps user variable names (no `$$`) to values and may
  hold "NOW". A field path that reaches nothing yields `MISSING` (storage.query.paths).
- `truthy(value)`: MongoDB's boolean coercion.
- `compile_accumulator(op, arg, defined)` -> a factory of Accumulator objects for $group.
- `type_name(value)`: the name $type gives a value ("missing" for MISSING).
- `command_variables(let, now_ms)`: the variables a command's `let` defines.
Errors are QueryError with MongoDB's codeName (or `Location<code>`).

The compiler and the operator registry live in `core`; each family module registers its
operators there (`@operator` for a compiler of its own, `@function` for the common evaluation
with declared operand checks): `logic`, `arithmetic`, `strings`, `arrays`, `sets`, `conversion`,
`datetimes`, `objects`, `percentiles` and `accumulators`. Importing this package registers them all.

Values an expression returns may share structure with the document and the spec; a caller that
mutates a result in place must copy it first.
"""

from ebbdb.storage.query import javascript_operators  # noqa: F401  ($function)
from ebbdb.storage.query.expressions import (  # noqa: F401  (each registers its operators)
    accumulators,
    arithmetic,
    arrays,
    conversion,
    datetimes,
    logic,
    objects,
    percentiles,
    sets,
    strings,
)
from ebbdb.storage.query.expressions.accumulators import compile_accumulator
from ebbdb.storage.query.expressions.core import (
    Accumulator,
    Expression,
    Variables,
    command_variables,
    truthy,
    type_name,
)
from ebbdb.storage.query.expressions.core import compile_top as compile_expression

__all__ = [
    "Accumulator",
    "Expression",
    "Variables",
    "command_variables",
    "compile_accumulator",
    "compile_expression",
    "truthy",
    "type_name",
]
