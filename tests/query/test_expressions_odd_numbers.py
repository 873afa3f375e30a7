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
SINGLE = """
         dNaN   d-Inf   d0      nan  inf  lmin                   0       -1
$sqrt    dNaN   E28714  d0      nan  inf  E28714                 0.0     E28714
$ln      nan    E28766  E28766  nan  inf  E28766                 E28766  E28766
$log10   nan    E28761  E28761  nan  inf  E28761                 E28761  E28761
$exp     dNaN   d0      d1      nan  inf  0.0                    1.0     0.36787944117144233
$abs     dNaN   dInf    d0      nan  inf  E28680                 i0      i1
$ceil    dNaN   dNaN    d0      nan  inf  L-9223372036854775808  i0      i-1
$floor   dNaN   dNaN    d0      nan  inf  L-9223372036854775808  i0      i-1
"""

# One table an operator: a row a first operand, a column a second.
BINARY = """
$pow   dNaN  d-Inf   d0   nan   inf   lmin    0    -1
dNaN   dNaN  dNaN    d1   dNaN  dNaN  dNaN    d1   dNaN
d-Inf  dNaN  d0      d1   dNaN  dInf  d0      d1   d0
d0     dNaN  E28764  d1   dNaN  d0    E28764  d1   E28764
nan    dNaN  dNaN    d1   nan   nan   nan     1.0  nan
inf    dNaN  d0      d1   nan   inf   0.0     1.0  0.0
lmin   dNaN  d0      d1   nan   inf   0.0     L1   -1.0842021724855044e-19
0      dNaN  E28764  d1   nan   0.0   E28764  i1   E28764
-1     dNaN  d1      d1   nan   1.0   L1      i1   i-1

$log   dNaN    d-Inf   d0      nan     inf     lmin    0       -1
dNaN   nan     E28759  E28759  nan     nan     E28759  E28759  E28759
d-Inf  E28758  E28758  E28758  E28758  E28758  E28758  E28758  E28758
d0     E28758  E28758  E28758  E28758  E28758  E28758  E28758  E28758
nan    nan     E28759  E28759  nan     nan     E28759  E28759  E28759
inf    nan     E28759  E28759  nan     nan     E28759  E28759  E28759
lmin   E28758  E28758  E28758  E28758  E28758  E28758  E28758  E28758
0      E28758  E28758  E28758  E28758  E28758  E28758  E28758  E28758
-1     E28758  E28758  E28758  E28758  E28758  E28758  E28758  E28758

$mod   dNaN  d-Inf                   d0        nan   inf                     lmin  0       -1
dNaN   dNaN  dNaN                    E5733415  dNaN  dNaN                    dNaN  E5733415  dNaN
d-Inf  dNaN  dNaN                    E5733415  dNaN  dNaN                    dNaN  E5733415  dNaN
d0     dNaN  d0                      E5733415  dNaN  d0                      d0    E5733415  d0
nan    dNaN  dNaN                    E5733415  nan   nan                     nan   E16610  nan
inf    dNaN  dNaN                    E5733415  nan   nan                     nan   E16610  nan
lmin   dNaN  d-9223372036854775808   E5733415  nan   -9.223372036854776e+18  L0    E16610  L0
0      dNaN  d0                      E5733415  nan   0.0                     L0    E16610  i0
-1     dNaN  d-1                     E5733415  nan   -1.0                    L-1   E16610  i0

$divide  dNaN  d-Inf  d0         nan   inf   lmin                    0          -1
dNaN     dNaN  dNaN   EBadValue  dNaN  dNaN  dNaN                    EBadValue  dNaN
d-Inf    dNaN  dNaN   EBadValue  dNaN  dNaN  dInf                    EBadValue  dInf
d0       dNaN  d-0    EBadValue  dNaN  d0    d-0                     EBadValue  d-0
nan      dNaN  dNaN   EBadValue  nan   nan   nan                     EBadValue  nan
inf      dNaN  dNaN   EBadValue  nan   nan   -inf                    EBadValue  -inf
lmin     dNaN  d0     EBadValue  nan   -0.0  1.0                     EBadValue  9.223372036854776e+18
0        dNaN  d-0    EBadValue  nan   0.0   -0.0                    EBadValue  -0.0
-1       dNaN  d0     EBadValue  nan   -0.0  1.0842021724855044e-19  EBadValue  1.0

$add   dNaN  d-Inf  d0                     nan   inf   lmin                     0                      -1
dNaN   dNaN  dNaN   dNaN                   dNaN  dNaN  dNaN                     dNaN                   dNaN
d-Inf  dNaN  d-Inf  d-Inf                  dNaN  dNaN  d-Inf                    d-Inf                  d-Inf
d0     dNaN  d-Inf  d0                     dNaN  dInf  d-9223372036854775808    d0                     d-1
nan    dNaN  dNaN   dNaN                   nan   nan   nan                      nan                    nan
inf    dNaN  dNaN   dInf                   nan   inf   inf                      inf                    inf
lmin   dNaN  d-Inf  d-9223372036854775808  nan   inf   -1.8446744073709552e+19  L-9223372036854775808  -9.223372036854776e+18
0      dNaN  d-Inf  d0                     nan   inf   L-9223372036854775808    i0                     i-1
-1     dNaN  d-Inf  d-1                    nan   inf   -9.223372036854776e+18   i-1                    i-2

$multiply  dNaN  d-Inf  d0    nan   inf   lmin                    0     -1
dNaN       dNaN  dNaN   dNaN  dNaN  dNaN  dNaN                    dNaN  dNaN
d-Inf      dNaN  dInf   dNaN  dNaN  d-Inf dInf                    dNaN  dInf
d0         dNaN  dNaN   d0    dNaN  dNaN  d-0                     d0    d-0
nan        dNaN  dNaN   dNaN  nan   nan   nan                     nan   nan
inf        dNaN  d-Inf  dNaN  nan   inf   -inf                    nan   -inf
lmin       dNaN  dInf   d-0   nan   -inf  8.507059173023462e+37   L0    9.223372036854776e+18
0          dNaN  dNaN   d0    nan   nan   L0                      i0    i0
-1         dNaN  dInf   d-0   nan   -inf  9.223372036854776e+18   i0    i1
"""


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
