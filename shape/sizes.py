"""Partial evaluation of Shape-F̃ (DPS paper §3.5) over symbolic sizes.

Every size a kernel can see is a sympy symbol: dimension k of array parameter ``a`` is
``a_dk``, a Card parameter ``n`` is ``n``; both are nonnegative integers.  Evaluating a
shape expression with the parameters' shapes bound to these symbols inlines every shape
function, β-reduces and folds constants: what is left is a shape value whose
cardinalities are polynomials (and floor/Mod/Min/Max) over the size symbols.  This is
where the shape checks of Fig. 8 happen (S-If, S-Ifold, static build sizes).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import sympy

from fsmooth.errors import CompileError
from fsmooth.types import ArrayT, Card, TupleT, Type, rank

from .ir import (CARD_OPS, CIRC, Circ, SApp, SCard, SCardOp, SCirc, SExpr, SFilter, SFst, SIf, SIfold, SLam, SLet,
                 SPair, SProj, SSnd, STuple, SVar, TupleShape, VecShape, show_value)


def size_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


_NATURAL = set(size_symbol("n").assumptions0.items())  # what a natural number satisfies
_LARGE = sympy.Integer(2**20)
_HUGE = sympy.Integer(2**62)  # beyond the constants of a program (a strategy's 1024 groups of 16384)


def natural_samples(e: sympy.Expr) -> list[sympy.Number] | None:
    """The values of ``e`` at a few points where each of its symbols is a natural number (all 0,
    all large, each large alone, all huge), or None unless every symbol may be any natural number by its
    assumptions (a size, a loop variable, an integer of unknown sign) and every value is a finite
    number.  Evaluating at a point is cheap, where sympy's simplification and assumption queries
    on a large expression take milliseconds; sympy proves nothing that a point contradicts, so
    the values refute what they contradict."""
    e = sympy.sympify(e)
    symbols = sorted(e.free_symbols, key=sympy.default_sort_key)
    if any(not set(s.assumptions0.items()) <= _NATURAL for s in symbols):
        return None
    zero = {s: sympy.Integer(0) for s in symbols}
    points = (zero, {s: _LARGE for s in symbols}, *({**zero, s: _LARGE} for s in symbols), {s: _HUGE for s in symbols})
    try:
        values = [sympy.Rational(v.numerator, v.denominator) for v in
                  (_value_at(e, {s: int(x) for s, x in point.items()}, {}) for point in points)]
    except _Unknown:
        try:
            values = [e.xreplace(point) for point in points]
        except ValueError:  # sympy refuses a Min of a number it cannot compare (NonnegativeQuotient(1, 2))
            return None
    return values if all(v.is_Number and v.is_finite for v in values) else None


class _Unknown(Exception):
    """What ``_value_at`` leaves to sympy: an operation it does not know, or a division by 0
    (whose value, infinite, undefined or an error, is sympy's to say)."""


def _value_at(e: sympy.Expr, point: dict, memo: dict) -> Fraction:
    """The exact value of ``e`` where each symbol takes its value in ``point``, as sympy's
    ``e.xreplace(point)`` would find it, in Python's rationals (each distinct sub-expression once:
    a group count occurs in every term of a kernel's peak) instead of sympy numbers built and
    evaluated node by node.  ``_Unknown`` where ``e`` has an operation other than a sum,
    product, integer power, floor, ceiling, Min, Max, Mod, or divides by 0."""
    if e in memo:
        return memo[e]
    if e.is_Rational:
        value = Fraction(int(e.p), int(e.q))
    elif e.is_Symbol:
        value = Fraction(point[e])
    else:
        args = [_value_at(a, point, memo) for a in e.args]
        match e:
            case sympy.Add():
                value = sum(args, Fraction(0))
            case sympy.Mul():
                value = math.prod(args, start=Fraction(1))
            case sympy.Pow() if e.exp.is_Integer and (args[0] != 0 or e.exp >= 0):
                value = args[0] ** int(e.exp)
            case sympy.floor():
                value = Fraction(math.floor(args[0]))
            case sympy.ceiling():
                value = Fraction(math.ceil(args[0]))
            case sympy.Min():
                value = min(args)
            case sympy.Max():
                value = max(args)
            case sympy.Mod() if args[1] != 0:
                value = args[0] % args[1]  # the divisor's sign, as sympy's
            case _:
                raise _Unknown(type(e).__name__)
    memo[e] = value
    return value


def param_shape(name: str, ty: Type):
    """The symbolic shape of a parameter: a_d0.. for an array, the symbol n for a Card n."""
    if isinstance(ty, ArrayT):
        v = CIRC
        for k in reversed(range(rank(ty))):
            v = VecShape(size_symbol(f"{name}_d{k}"), v)
        return v
    if ty == Card:
        return size_symbol(name)
    if isinstance(ty, TupleT):
        return TupleShape(tuple(param_shape(f"{name}_{k}", t) for k, t in enumerate(ty.items)))
    return CIRC


def shape_symbols(v) -> tuple:
    """The size symbols a parameter's shape introduces, outermost first."""
    if isinstance(v, VecShape):
        return (v.card, *shape_symbols(v.elem))
    if isinstance(v, sympy.Symbol):
        return (v,)
    if isinstance(v, TupleShape):
        return tuple(s for item in v.items for s in shape_symbols(item))
    return ()


@dataclass(frozen=True)
class Closure:
    params: tuple
    body: SExpr
    env: dict


def is_card(v) -> bool:
    return isinstance(v, sympy.Basic)


def equal(a, b) -> bool:
    """Shape equality, deciding cardinalities by sympy (≅ of Fig. 8)."""
    match a, b:
        case Circ(), Circ():
            return True
        case VecShape(c1, e1), VecShape(c2, e2):
            return equal(c1, c2) and equal(e1, e2)
        case TupleShape(xs), TupleShape(ys):
            return len(xs) == len(ys) and all(equal(x, y) for x, y in zip(xs, ys))
        case sympy.Basic(), sympy.Basic():
            return a == b or same_size(a, b)
    return False


@functools.lru_cache(maxsize=4096)
def fraction(e: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """(numerator, denominator) of ``e`` over one denominator: ``sympy.fraction(sympy.together(e))``,
    memoised, as the range analysis, code generation and the size printers each ask it of the
    same quotients (a two-phase reduction's ``(n + 16383)/16384`` in every index of its loops)."""
    return sympy.fraction(sympy.together(e))


@functools.lru_cache(maxsize=4096)
def same_size(a: sympy.Expr, b: sympy.Expr) -> bool:
    """``simplify(a - b) == 0``, refuted first where ``a - b`` is nonzero at a natural point
    (``natural_samples``): shapes are compared with every parameter's and every branch's, mostly
    unequal, and simplify takes long to say so."""
    if any(v != 0 for v in natural_samples(a - b) or ()):
        return False
    return sympy.simplify(a - b) == 0


def evaluate(s: SExpr, env: dict):
    match s:
        case SVar(name):
            return env[name]
        case SCirc():
            return CIRC
        case SCard(value):
            return value
        case SPair(card, elem, loc):
            n = evaluate(card, env)
            if not is_card(n):
                raise CompileError("the size of build must be computable from the input sizes, "
                                   "not from the data nor by dividing by zero", loc)
            return VecShape(n, evaluate(elem, env))
        case SFst(arg):
            return evaluate(arg, env).card
        case SSnd(arg):
            return evaluate(arg, env).elem
        case SCardOp(op, args):
            values = [evaluate(a, env) for a in args]
            if not all(is_card(v) for v in values):
                return CIRC  # a Card computed from data: known only at run time
            if op in ("floordiv", "mod") and values[1].is_zero:
                return CIRC  # a division by zero, which the run time reports where it happens
            return CARD_OPS[op][1](*values)
        case SLet(name, rhs, body):
            return evaluate(body, {**env, name: evaluate(rhs, env)})
        case SLam(params, body):
            return Closure(params, body, env)
        case SApp(fn, args):
            f = evaluate(fn, env)
            values = [evaluate(a, env) for a in args]
            return evaluate(f.body, {**f.env, **dict(zip(f.params, values))})
        case SIf(then, orelse, loc):
            a, b = evaluate(then, env), evaluate(orelse, env)
            joined = join(a, b)
            if joined is None:
                raise CompileError(f"the branches of this conditional have different shapes: "
                                   f"{show_value(a)} and {show_value(b)}", loc)
            return joined
        case SIfold(fn, init, loc):
            f, z = evaluate(fn, env), evaluate(init, env)
            # A Card in the state that the step changes is known only at run time (∘); the state's
            # shape is then that join, which one more step must preserve.
            for _ in range(2):
                step = evaluate(f.body, {**f.env, **dict(zip(f.params, (z, CIRC)))})
                joined = join(step, z)
                if joined is None:
                    raise CompileError(f"the state of this ifold changes shape: from {show_value(z)} "
                                       f"to {show_value(step)}", loc)
                if equal(joined, z):
                    return z
                z = joined
            raise CompileError(f"the state of this ifold changes shape: from {show_value(z)} "
                               f"to {show_value(step)}", loc)
        case SFilter(arr):
            a = evaluate(arr, env)  # a filter of a filter: the first one's capacity
            return VecShape(CIRC, a.elem, a.card if a.capacity is None else a.capacity)
        case STuple(items):
            return TupleShape(tuple(evaluate(x, env) for x in items))
        case SProj(arg, index):
            return evaluate(arg, env).items[index]
    raise AssertionError(s)


def join(a, b):
    """The shape of a value that is ``a`` or ``b`` (S-If; a Card chosen at run time is ∘), or
    None where they cannot agree (arrays of different shapes)."""
    if equal(a, b):
        return a
    if _scalar(a) and _scalar(b):
        return CIRC
    if isinstance(a, TupleShape) and isinstance(b, TupleShape) and len(a.items) == len(b.items):
        items = tuple(join(x, y) for x, y in zip(a.items, b.items))
        return None if any(x is None for x in items) else TupleShape(items)
    return None


def _scalar(v) -> bool:
    return isinstance(v, Circ) or is_card(v)


def reify(value, params: dict) -> SExpr:
    """A shape value as a Shape-F̃ expression over the parameters' shapes (§3.5 form).

    ``params`` maps each parameter shape's name (``v_shp``) to its symbolic value."""
    for name, pv in params.items():
        if isinstance(value, VecShape) and equal(value, pv):
            return SVar(name)
    match value:
        case Circ():
            return SCirc()
        case VecShape(card, elem):
            return SPair(reify(card, params), reify(elem, params))
        case TupleShape(items):
            return STuple(tuple(reify(x, params) for x in items))
        case sympy.Symbol():
            for name, pv in params.items():
                path = _path_to(value, pv, SVar(name))
                if path is not None:
                    return path
            return SCard(value)
        case sympy.Basic():
            return SCard(value)
    raise AssertionError(value)


def _path_to(symbol, pv, at: SExpr):
    match pv:
        case sympy.Symbol() if pv == symbol:
            return at
        case VecShape(card, elem):
            if card == symbol:
                return SFst(at)
            return _path_to(symbol, elem, SSnd(at))
    return None
