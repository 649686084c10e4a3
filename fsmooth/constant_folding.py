"""Constant folding: a primitive of literals becomes its value, a conditional on a literal its
branch, and a let of a literal is propagated into its body (so that folding continues through
ANF's temporaries).

Values come from ``fsmooth.prims.evaluate``, the one definition of the primitives' semantics.
A primitive whose Python evaluation raises (an integer division by zero, ``log 0``,
``exp 1000``) stays for run time, where the compiled code decides (a status code for integer
division by zero, IEEE infinities and NaNs otherwise).  So does one whose value is not finite:
a NaN literal is not equal to itself, which the optimiser's fixed point and CSE rely on.
"""
from __future__ import annotations

import math

from . import prims
from .core import Expr, If, Let, Lit, PrimApp, map_children, substitute


def fold_constants(e: Expr) -> Expr:
    e = map_children(fold_constants, e)
    match e:
        case PrimApp(op, args, ty) if all(isinstance(a, Lit) for a in args):
            value = _value(op, [a.value for a in args], ty)
            return e if value is None else Lit(value, ty, e.loc)
        case If(Lit(cond), then, orelse):
            return then if cond else orelse
        case Let(name, Lit() as rhs, body):
            return fold_constants(substitute(body, {name: rhs}))
    return e


def _value(op: str, args: list, ty):
    """The folded value, or None where folding must be left to run time."""
    try:
        value = prims.evaluate(op, args, ty)
    except (ArithmeticError, ValueError):  # ZeroDivisionError, OverflowError, math domain errors
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
