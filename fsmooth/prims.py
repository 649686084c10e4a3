"""The scalar primitives of F̃: one table entry per primitive.

Each entry gives the arity, how it is printed, how it is evaluated (by every IR's
interpreter, with Python semantics) and how it is written in C.  A new scalar
primitive is one entry here plus, if the front end should accept a new spelling,
its name in ``PYTHON_NAMES``.

Typing (after the front end has inserted explicit casts) is:
- arithmetic ``add sub mul``: operands of one numeric type, result that type;
- ``div``: floating operands, result that type (int operands are cast to Double first);
- ``floordiv mod``: one numeric type, result that type (Python floor semantics);
- comparisons: operands of one type, result Bool; ``not``: Bool → Bool;
- ``sqrt exp log sin cos tan floor pow``: floating → same floating type, IEEE as the math library;
- ``abs min max``: one numeric type → that type;
- ``to_Double to_Float to_Index``: casts (the front end inserts them for promotion; ``float(x)``
  is ``to_Double``, ``int(x)`` of an integer or a Bool ``to_Index``);
- the math library ``tanh sinh cosh asin acos atan ceil trunc log1p expm1 log2 log10 lgamma erf
  erfc`` (floating → same floating type), ``atan2 hypot copysign`` (two operands of one floating
  type → that type) and ``isnan isinf isfinite`` (floating → Bool), with IEEE semantics: the
  Python implementations (``fsmooth.builtins``) give C's NaN or infinity where ``math`` raises;
- ``trunc_to_Index``: ``int(x)`` of a floating ``x``, truncation toward zero; a NaN, an infinity
  or a value outside int64 raises ValueError here and is run-time status 5 in generated code
  (``dpia.emit`` writes the check; ``fsmooth.artifact.STATUS``).

In ANF and later IRs the operands of a primitive are atoms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from . import builtins as ieee
from .types import Bool, Double, Float, Index, Scalar


def _py_floordiv(a, b):
    if b == 0:
        raise ZeroDivisionError("integer division or modulo by zero")
    return a // b


def _py_mod(a, b):
    if b == 0:
        raise ZeroDivisionError("integer division or modulo by zero")
    return a % b


def _py_div(a, b):
    if b == 0:
        # C (IEEE) semantics: the compiled code gives ±inf/nan; the interpreters agree.
        if a == 0 or a != a:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


INT64_LIMIT = 9223372036854775808.0  # 2**63: int64 holds the floats in [-2**63, 2**63)


def _py_trunc_to_index(x):
    """Python's ``int(x)`` of a float, as the compiled code does it: a NaN, an infinity or a
    value outside int64 is an error (generated code: status 5), never undefined behaviour."""
    if not -INT64_LIMIT <= x < INT64_LIMIT:  # also false for NaN
        raise ValueError(f"int() of {x!r}: not a finite value in the int64 range")
    return int(x)


# The math library: floating → floating, two floating operands → floating, floating → Bool.
FLOAT_FUNCTIONS = ("sqrt", "exp", "log", "sin", "cos", "tan", "floor")
MATH_UNARY = ("tanh", "sinh", "cosh", "asin", "acos", "atan", "ceil", "trunc", "log1p", "expm1", "log2",
              "log10", "lgamma", "erf", "erfc")
MATH_BINARY = ("atan2", "hypot", "copysign")
MATH_TESTS = ("isnan", "isinf", "isfinite")


def _ieee(name: str, arity: int) -> "Prim":
    """A math library function: the IEEE implementation of ``fsmooth.builtins`` (the reference
    semantics of ``fs.NAME``), the C helper ``fs_NAME_{t}`` of clib/fsmooth_scalar.h."""
    operands = ", ".join(f"{{{k}}}" for k in range(arity))
    return Prim(name, arity, name, False, getattr(ieee, name), f"fs_{name}_{{t}}({operands})")


@dataclass(frozen=True)
class Prim:
    name: str
    arity: int
    symbol: str  # infix symbol ('+') or function name ('sqrt') for printing
    infix: bool
    impl: Callable
    # C: a format string over the operand C expressions {0}, {1}; '{t}' is the C scalar type
    # suffix chosen by the code generator ('f64', 'f32', 'i64', 'bool').
    c: str


PRIMS: dict[str, Prim] = {
    p.name: p
    for p in [
        Prim("add", 2, "+", True, lambda a, b: a + b, "({0} + {1})"),
        Prim("sub", 2, "-", True, lambda a, b: a - b, "({0} - {1})"),
        Prim("mul", 2, "*", True, lambda a, b: a * b, "({0} * {1})"),
        Prim("div", 2, "/", True, _py_div, "({0} / {1})"),
        Prim("floordiv", 2, "//", True, _py_floordiv, "fs_floordiv_{t}({0}, {1})"),
        Prim("mod", 2, "%", True, _py_mod, "fs_mod_{t}({0}, {1})"),
        Prim("neg", 1, "-", False, lambda a: -a, "(-{0})"),
        Prim("lt", 2, "<", True, lambda a, b: a < b, "({0} < {1})"),
        Prim("le", 2, "<=", True, lambda a, b: a <= b, "({0} <= {1})"),
        Prim("gt", 2, ">", True, lambda a, b: a > b, "({0} > {1})"),
        Prim("ge", 2, ">=", True, lambda a, b: a >= b, "({0} >= {1})"),
        Prim("eq", 2, "==", True, lambda a, b: a == b, "({0} == {1})"),
        Prim("ne", 2, "!=", True, lambda a, b: a != b, "({0} != {1})"),
        Prim("not", 1, "not", False, lambda a: not a, "(!{0})"),
        Prim("abs", 1, "abs", False, abs, "fs_abs_{t}({0})"),
        Prim("min", 2, "min", False, min, "fs_min_{t}({0}, {1})"),
        Prim("max", 2, "max", False, max, "fs_max_{t}({0}, {1})"),
        Prim("to_Double", 1, "double", False, float, "((double)({0}))"),
        Prim("to_Float", 1, "float", False, float, "((float)({0}))"),
        Prim("to_Index", 1, "index", False, int, "((int64_t)({0}))"),
        Prim("trunc_to_Index", 1, "int", False, _py_trunc_to_index, "((int64_t)({0}))"),
    ] + [_ieee(name, 1) for name in FLOAT_FUNCTIONS + MATH_UNARY + MATH_TESTS]
      + [_ieee(name, 2) for name in ("pow",) + MATH_BINARY]
}

ARITHMETIC = ("add", "sub", "mul", "floordiv", "mod")
# On Index and Card, the primitives whose result may not fit int64 (INT64_MIN // -1 among them):
# an OverflowError in a reference run, checked arithmetic in the compiled code where not proven
MAY_OVERFLOW = ("add", "sub", "mul", "neg", "abs", "floordiv")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
CASTS = {Double: "to_Double", Float: "to_Float", Index: "to_Index"}

# Names a kernel may call as built-in scalar functions: fs.sqrt, math.sqrt, abs, min, max, ...
PYTHON_NAMES = {
    "sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tan": "tan",
    "floor": "floor", "pow": "pow", "abs": "abs", "fabs": "abs", "min": "min", "max": "max",
    **{name: name for name in MATH_UNARY + MATH_BINARY + MATH_TESTS},
}

C_SUFFIX = {"Double": "f64", "Float": "f32", "Index": "i64", "Card": "i64", "Bool": "bool"}


def c_suffix(t: Scalar) -> str:
    return C_SUFFIX[t.name]


def prim(op) -> Prim:
    """The primitive that a ``PrimApp``'s (``ScalarOp``'s) ``op`` names: a key of ``PRIMS``, or a
    foreign function (``fsmooth.foreign.Foreign``), which is its own entry."""
    return PRIMS[op] if isinstance(op, str) else op.prim


def evaluate(name, args: list, result_type: Scalar):
    """Evaluate a primitive with Python semantics, rounding to the result's precision."""
    value = prim(name).impl(*args)
    return coerce(value, result_type)


def coerce(value, t: Scalar):
    return coercer(t)(value)


def coercer(t: Scalar) -> Callable:
    """The function that rounds a Python value to ``t``'s precision (an integer type: int64),
    chosen once where an interpreter rounds many values to one type."""
    if t == Float:
        return _to_float32
    if t == Double:
        return float
    if t == Bool:
        return bool
    return _to_int64


def _to_float32(value) -> float:
    import numpy as np

    with np.errstate(over="ignore"):  # beyond float32's range: ±inf, as in C
        return float(np.float32(value))


def _to_int64(value) -> int:
    value = int(value)
    if not -2**63 <= value < 2**63:  # as the compiled code's checked arithmetic (status 6)
        raise OverflowError(f"integer overflows int64: {value}")
    return value
