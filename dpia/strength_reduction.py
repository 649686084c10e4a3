"""Strength reduction of subscripts (issue 11): where the part S(v) of an array subscript that
varies with a loop's variable v is not affine in v, S(v) is kept in a variable that starts at
S(0) and grows by S(v + 1) - S(v) after every trip, instead of being computed from v on every
trip.  GMM's packed triangle reads icf_k[d + j(2d - j - 1)/2 + (i - j - 1)], whose subscript
varies with j as S(j) = jd - j + floor(j(-1 - j)/2): a multiplication and a shift per entry,
and three induction variables for the C compiler; S(j + 1) - S(j) is d - 2 - j, so the running
S costs one addition (the C compiler keeps d - 2 - j running itself, as every affine value).

S is the sum of the subscript's terms that contain v and otherwise only what the loop does not
change (sizes, the variables of the loops around it); each is a polynomial with integer
coefficients, or the floor of a polynomial in v alone over a constant c that divides it at
every integer v (a product of consecutive integers over 2, ...: checked at v = 0 .. c-1, as a
polynomial with integer coefficients is periodic modulo c), so S is a polynomial in v; the
reduction takes place where S(0) is a constant and the step is affine in v with integer
coefficients.  An affine S is left to the C compiler.  The running value is updated in wrapping
(unsigned) arithmetic: it is S(v) modulo 2**64, which is S(v) on every trip, where computing
S(v) is proven not to overflow (``overflow_conditions``, as the subscript's own arithmetic); the
update after the last trip may wrap, and is never read.

A remainder (a·v + b) mod n of the loop's variable, with a, b and n what the loop does not
change and n ≥ 1 where it is read (``fsmooth.dps.ranges.positive``: a constant, a loop count, or
a divisor tested nonzero), is kept running too (``RunningRemainder``): a division per trip (gcc
divides in 64 bits where n is not a constant) becomes a comparison and an addition.  It starts
at b mod n and adds a mod n after every trip, less n where that reaches n; both computed once,
before the loop, with Python's floor semantics, as ``%`` has.  The value stays in 0 .. n-1, so
nothing overflows: ``r ≥ n - s`` is compared before anything is added.  A constant divisor is
left to the C compiler, which multiplies instead of dividing.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from fsmooth.shape.sizes import fraction


@dataclass(frozen=True)
class RunningTerm:
    """T(v) of the loop over ``variable``, in the C variable ``name``: ``start`` = T(0), ``step``
    = T(v + 1) - T(v), affine in v."""

    name: str
    variable: sympy.Symbol
    term: sympy.Expr
    start: sympy.Integer
    step: sympy.Expr


@dataclass(frozen=True)
class RunningRemainder:
    """``remainder`` = (a·v + b) mod n of the loop over ``variable``, in the C variable ``name``,
    which starts at ``start`` mod n (``start`` = b) and adds ``step`` mod n (``step`` = a; kept
    in the C variable ``step_name``), less n where it reaches n; ``divisor`` = n."""

    name: str
    step_name: str
    variable: sympy.Symbol
    remainder: sympy.Mod
    start: sympy.Expr
    step: sympy.Expr
    divisor: sympy.Expr


def affine_remainder(mod: sympy.Mod, v: sympy.Symbol, invariant: set) -> tuple[sympy.Expr, sympy.Expr] | None:
    """(b, a) of ``mod`` = (a·v + b) mod n where a ≠ 0, a, b and n are polynomials with integer
    coefficients in ``invariant`` symbols (what the loop over v does not change) and n is not a
    constant, else None."""
    dividend, divisor = mod.args
    if divisor.is_number or not divisor.free_symbols <= invariant or not _integer_polynomial(divisor):
        return None
    dividend = sympy.expand(dividend)
    if v not in dividend.free_symbols or not _affine(dividend, v):
        return None
    a, b = dividend.coeff(v, 1), dividend.coeff(v, 0)
    if not all(x.free_symbols <= invariant and _integer_polynomial(x) for x in (a, b)):
        return None
    return b, a


def _integer_polynomial(t: sympy.Expr) -> bool:
    t = sympy.expand(t)
    if t.is_Integer:
        return True
    return t.is_polynomial(*t.free_symbols) and all(
        c.is_Integer for c in sympy.Poly(t, *sorted(t.free_symbols, key=str)).coeffs())


def varying_part(e: sympy.Expr, v: sympy.Symbol, invariant: set) -> sympy.Expr:
    """The sum of the terms of ``e`` (expanded) that depend on ``v`` and otherwise only on
    ``invariant`` symbols (what the loop over v does not change), where it is not affine in v
    (the C compiler reduces an affine one itself); 0 where there is none."""
    terms = [t for t in sympy.Add.make_args(sympy.expand(e))
             if v in t.free_symbols and t.free_symbols <= invariant | {v}]
    part = sympy.Add(*terms)
    return sympy.Integer(0) if _affine(part, v) else part


def reduction(part: sympy.Expr, v: sympy.Symbol) -> tuple[sympy.Integer, sympy.Expr] | None:
    """(S(0), S(v + 1) - S(v)) of ``part`` = S(v) where it is a polynomial in v (the module) whose
    step is affine in v and has integer coefficients, else None."""
    polynomial = _as_polynomial(part, v)
    if polynomial is None:
        return None
    start = polynomial.subs(v, 0)
    step = sympy.expand(polynomial.subs(v, v + 1) - polynomial)
    if not (start.is_Integer and _affine(step, v)):
        return None
    if not all(c.is_Integer for c in sympy.Poly(step, *sorted(step.free_symbols | {v}, key=str)).coeffs()):
        return None
    return start, step


def _affine(t: sympy.Expr, v: sympy.Symbol) -> bool:
    return t.is_polynomial(v) and sympy.degree(t, v) <= 1


def _as_polynomial(t: sympy.Expr, v: sympy.Symbol) -> sympy.Expr | None:
    """``t`` as a polynomial in ``v`` (its coefficients in the other symbols), its floors of
    exact quotients of polynomials in v alone replaced by the quotients."""
    exact = {}
    for f in t.atoms(sympy.floor):
        num, den = fraction(f.args[0])
        if not (den.is_Integer and den > 0 and num.free_symbols <= {v} and num.is_polynomial(v)):
            return None
        if not all(c.is_Integer for c in sympy.Poly(num, v).all_coeffs()):
            return None
        if any(num.subs(v, x) % den != 0 for x in range(int(den))):
            return None
        exact[f] = num / den
    polynomial = sympy.expand(t.xreplace(exact))
    return polynomial if polynomial.is_polynomial(*polynomial.free_symbols) else None
