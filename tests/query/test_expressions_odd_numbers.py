"""The numeric operators on the values where arithmetic goes wrong: decimal and double NaN and
infinities, decimal zero, the least long (-2^63), 0 and -1. Every case pins MongoDB 7's result (its
BSON type and value, NaN equal to NaN, a zero's sign kept) or its error code, as MongoDB's code and
the Intel decimal library it uses give them:
- a double operator works in C doubles ($sqrt of a negative is 28714, $ln/$log10 of a number that
  is not positive 28766/28761, NaN gives NaN, C's pow and fmod for the rest);
- with a decimal operand the operation is decimal (an int, long or double widened to it), and
  follows IEEE 754: x**0 and 1**y are 1 even for NaN, an infinity to a power takes the exponent's
  sign, x / -inf is a zero with the quotient's sign, and -1 * 0 is -0; a decimal $pow is widened to
  34 digits; $ceil/$floor quantize a decimal, which makes an infinity NaN;
- $ln, $log10 and $log of a decimal work in decimal only for positive operands (and a base not
  1); anything else, NaN included, falls back to doubles, so a decimal NaN gives a double NaN;
- $divide by zero is BadValue, $mod by zero 16610 (5733415 in decimal), $pow of zero to a
  negative exponent 28764, $abs of the least long 28680;
- $add and $multiply keep the narrowest type and widen to double when a long overflows.
"""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64

from tests.case_tables import CASES
from tests.query.expr_support import exact, raises, run

VALUES: dict[str, Any] = {
    "dNaN": Decimal128("NaN"),
    "d-Inf": Decimal128("-Infinity"),
    "d0": Decimal128("0"),
    "nan": float("nan"),
    "inf": float("inf"),
    "lmin": Int64(-(2**63)),
    "0": 0,
    "-1": -1,
}


def expected(token: str) -> Any:
    """A table cell: `E<code>` an error (a number is `Location<code>`), `d<x>` a decimal,
    `i<n>` an int, `L<n>` a long, anything else a double."""
    if token.startswith("E"):
        code = token[1:]
        return ("error", f"Location{code}" if code.isdigit() else code)
    if token.startswith("d"):
        return exact(Decimal128(token[1:]))
    if token.startswith("i") and token != "inf":
        return exact(int(token[1:]))
    if token.startswith("L"):
        return exact(Int64(int(token[1:])))
    return exact(float(token))


def outcome(spec: Any) -> Any:
    try:
        return exact(run(spec))
    except Exception:
        return ("error", raises(spec)[0])


# One row an operator, one column a value.
SINGLE = (CASES / "odd_numbers_single.txt").read_text(encoding="utf-8")

# One table an operator: a row a first operand, a column a second.
BINARY = (CASES / "odd_numbers_binary.txt").read_text(encoding="utf-8")


def _single() -> dict[tuple[str, str], str]:
    header, *rows = (line.split() for line in SINGLE.strip().splitlines())
    return {(op, name): cell for op, *cells in rows for name, cell in zip(header, cells)}


def _binary() -> dict[tuple[str, str, str], str]:
    table: dict[tuple[str, str, str], str] = {}
    for block in BINARY.strip().split("\n\n"):
        (op, *header), *rows = (line.split() for line in block.splitlines())
        for a, *cells in rows:
            table.update({(op, a, b): cell for b, cell in zip(header, cells)})
    return table


SINGLE_CASES = _single()
BINARY_CASES = _binary()


def test_the_tables_are_whole() -> None:
    assert len(SINGLE_CASES) == 7 * 8
    assert len(BINARY_CASES) == 6 * 8 * 8


@pytest.mark.parametrize(
    ("op", "value"), list(SINGLE_CASES), ids=[" ".join(k) for k in SINGLE_CASES]
)
def test_one_operand(op: str, value: str) -> None:
    spec = {op: {"$literal": VALUES[value]}}
    assert outcome(spec) == expected(SINGLE_CASES[op, value])


@pytest.mark.parametrize(
    ("op", "a", "b"), list(BINARY_CASES), ids=[" ".join(k) for k in BINARY_CASES]
)
def test_two_operands(op: str, a: str, b: str) -> None:
    spec = {op: [{"$literal": VALUES[a]}, {"$literal": VALUES[b]}]}
    assert outcome(spec) == expected(BINARY_CASES[op, a, b])
