"""Index paths (DPIA paper Fig. 6) over flat buffers, and range-aware index simplification.

Code generation resolves an acceptor or expression into a buffer and one element offset: each
``idx``/``idxAcc`` on the way to the identifier adds ``i · |δ|`` (the elements of the indexed
element type), each ``Shift`` its offset.  This is Fig. 6's path [i, j, ...] applied to a
row-major layout.

Offsets that a layout change turns into ``floor((i·m + j)/m)`` or ``Mod(i·m + j, m)`` are
simplified with the ranges of the loop variables in scope (0 ≤ j < m gives i and j), so no such
division is left in the generated C.
"""
from __future__ import annotations

import sympy

from . import phrases as p

Ranges = dict  # sympy Symbol -> (lo, hi), inclusive bounds


def element_offset(index: sympy.Expr, elem: p.Data, inner: sympy.Expr) -> sympy.Expr:
    """The offset of element ``inner`` of element ``index`` of an array of ``elem``."""
    return index * p.elements(elem) + inner


def simplify_index(e: sympy.Expr, ranges: Ranges) -> sympy.Expr:
    """Remove the floor divisions and modulos of ``e`` that the ranges make exact."""
    e = sympy.sympify(e)

    def floor_div(arg):
        split = _split(arg, ranges)
        return split[0] if split is not None else sympy.floor(arg)

    def modulo(a, m):
        split = _split(a / m, ranges)
        return split[1] * m if split is not None else sympy.Mod(a, m)

    e = e.replace(sympy.floor, floor_div)
    e = e.replace(sympy.Mod, modulo)
    return sympy.expand(e)


def _split(arg: sympy.Expr, ranges: Ranges):
    """For arg = num/den with num = q·den + r and 0 ≤ r < den provable: (q, r/den)."""
    num, den = sympy.fraction(sympy.together(arg))
    if den == 1:
        return None
    quotient, remainder = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(num)):
        q = sympy.cancel(term / den)
        if sympy.fraction(q)[1] == 1:
            quotient += q
        else:
            remainder += term
    bounds = _bounds(remainder, ranges)
    if bounds is None:
        return None
    lo, hi = bounds
    if _provably_nonnegative(lo) and _provably_nonnegative(den - 1 - hi):
        return quotient, remainder / den
    return None


def _bounds(e: sympy.Expr, ranges: Ranges):
    """Inclusive bounds of an affine ``e`` over the ranges; None if a variable is unbounded."""
    lo, hi = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(e)):
        coeff, rest = term.as_coeff_Mul()
        if rest == 1:
            lo, hi = lo + coeff, hi + coeff
            continue
        if rest not in ranges:
            return None
        r_lo, r_hi = ranges[rest]
        if coeff >= 0:
            lo, hi = lo + coeff * r_lo, hi + coeff * r_hi
        else:
            lo, hi = lo + coeff * r_hi, hi + coeff * r_lo
    return lo, hi


def _provably_nonnegative(e: sympy.Expr) -> bool:
    """True if ``e`` ≥ 0 whenever its symbols (sizes, loop variables) are nonnegative integers."""
    e = sympy.expand(e)
    nonneg = {s: sympy.Dummy(s.name, integer=True, nonnegative=True) for s in e.free_symbols}
    return bool(e.xreplace(nonneg).is_nonnegative)
