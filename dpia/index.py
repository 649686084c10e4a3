"""Index paths (DPIA paper Fig. 6) over flat buffers, and range-aware index simplification.

Code generation resolves an acceptor or expression into a buffer and one element offset: each
``idx``/``idxAcc`` on the way to the identifier adds ``i · |δ|`` (the elements of the indexed
element type), each ``Shift`` its offset.  This is Fig. 6's path [i, j, ...] applied to a
row-major layout.

Offsets that a layout change turns into ``floor((i·m + j)/m)`` or ``Mod(i·m + j, m)`` are
simplified with the ranges of the loop variables in scope (0 ≤ j < m gives i and j), and a
flattened read ``a[k // m][k % m]`` recombines ``m·floor(k/m) + Mod(k, m)`` into ``k``, so no such
division is left in the generated C.  The same ranges bound an index (``in_range``), which lets
code generation drop a run-time check the loops make redundant, and prove a divisor nonzero
(``positive``): inside ``for k < n·m`` the loop runs, so n·m ≥ 1 and m ≥ 1.
"""
from __future__ import annotations

import sympy

from fsmooth.shape.size_printer import NonnegativeMod, NonnegativeQuotient

Ranges = dict  # sympy Symbol -> (lo, hi), inclusive bounds


def element_offset(index: sympy.Expr, elem_size: sympy.Expr, inner: sympy.Expr) -> sympy.Expr:
    """The offset of scalar ``inner`` of element ``index`` of an array whose elements hold
    ``elem_size`` scalars each."""
    return index * elem_size + inner


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
    return _recombine(sympy.expand(e))


def _recombine(e: sympy.Expr) -> sympy.Expr:
    """c·d·floor(a/d) + c·Mod(a, d) ⤳ c·a: the quotient and remainder of one division."""
    terms = list(sympy.Add.make_args(e))
    for term in terms:
        for mod in term.atoms(sympy.Mod):
            a, d = mod.args
            coeff = sympy.cancel(term / mod)
            if coeff.has(sympy.Mod) or coeff.has(sympy.floor):
                continue
            partner = sympy.expand(coeff * d * sympy.floor(a / d))
            if partner in terms:
                rest = list(terms)
                rest.remove(term)
                rest.remove(partner)
                return _recombine(sympy.expand(sympy.Add(*rest) + coeff * a))
    return e


def _split(arg: sympy.Expr, ranges: Ranges):
    """For arg = num/den with num = q·den + r and 0 ≤ r < den provable: (q, r/den); with
    r = -1 and den ≥ 1 provable: (q - 1, (den - 1)/den)."""
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
    if lo == hi == -1 and positive(den, ranges):
        return quotient - 1, (remainder + den) / den
    return None


def truncating_divisions(e: sympy.Expr, ranges: Ranges) -> sympy.Expr:
    """``e`` with each division the ranges make sign-safe marked, for plain ``/`` and ``%`` in C."""
    def nonnegative(a):
        bounds = _bounds(a, ranges)
        return bounds is not None and _provably_nonnegative(bounds[0])

    def modulo(a, d):
        return NonnegativeMod(a, d) if nonnegative(a) and positive(d, ranges) else sympy.Mod(a, d)

    def quotient(arg):
        num, den = sympy.fraction(sympy.together(arg))
        if den != 1 and nonnegative(num) and positive(den, ranges):
            return NonnegativeQuotient(num, den)
        return sympy.floor(arg)

    return sympy.sympify(e).replace(sympy.Mod, modulo).replace(sympy.floor, quotient)


def positive(d: sympy.Expr, ranges: Ranges) -> bool:
    """d ≥ 1: a positive constant, or a factor of the trip count of a loop in scope (inside
    ``for k < d·q`` the loop runs, so d·q ≥ 1, and d, q are nonnegative integers)."""
    d = sympy.sympify(d)
    if d.is_Integer:
        return d >= 1
    for lo, hi in ranges.values():
        if lo != 0:
            continue
        q = sympy.cancel(sympy.expand(hi + 1) / d)
        if sympy.fraction(q)[1] == 1 and _provably_nonnegative(q) and _provably_nonnegative(d):
            return True
    return False


def guard(e: sympy.Expr, hi: sympy.Expr, ranges: Ranges) -> Ranges:
    """The fact e ≤ hi (from an enclosing ``if``), as an entry of ``Ranges``: keyed by the
    expression itself, with no lower bound (a loop variable's own range is kept as it is)."""
    e = sympy.expand(e)
    return {} if e in ranges else {e: (None, hi)}


def in_range(e: sympy.Expr, length: sympy.Expr, ranges: Ranges) -> bool:
    """0 ≤ e < length for every value of the loop variables in their ranges (and the guards
    of the enclosing ``if``s)."""
    bounds = _bounds(e, ranges)
    if bounds is None:
        return False
    highs = [bounds[1]]
    fact = ranges.get(sympy.expand(e))
    if fact is not None and fact[0] is None:
        highs.append(fact[1])
    return _provably_nonnegative(bounds[0]) and any(_provably_nonnegative(length - 1 - hi) for hi in highs)


def _bounds(e: sympy.Expr, ranges: Ranges, depth: int = 0):
    """Inclusive bounds of ``e`` over the ranges: affine in the loop variables, or in quotients
    and remainders of them by a positive divisor; None where a variable is unbounded.  A loop
    bound may be an expression of an enclosing loop variable (``for j < i``, an ifold counted by
    an index): such a bound is bounded in turn over that variable's range."""
    e = sympy.expand(e)
    for s in sorted(e.free_symbols, key=str):
        # a variable whose range depends on another (j < i): its end first, i is bounded after
        r = ranges.get(s)
        if depth >= 8 or r is None or r[0] is None or not e.is_polynomial(s) or sympy.degree(e, s) != 1:
            continue
        if not any(t in ranges for t in sympy.sympify(r[0]).free_symbols | sympy.sympify(r[1]).free_symbols):
            continue
        c = e.coeff(s)
        if any(t in ranges for t in c.free_symbols) or not (_provably_nonnegative(c) or _provably_nonnegative(-c)):
            continue
        low, high = (r[0], r[1]) if _provably_nonnegative(c) else (r[1], r[0])
        lower, upper = _bounds(e.subs(s, low), ranges, depth + 1), _bounds(e.subs(s, high), ranges, depth + 1)
        if lower is None or upper is None:
            return None
        return lower[0], upper[1]
    lo, hi = _affine_bounds(e, ranges)
    if lo is None:
        return None
    if depth < 8 and any(s in ranges for s in (lo.free_symbols | hi.free_symbols)):
        outer_lo, outer_hi = _bounds(lo, ranges, depth + 1), _bounds(hi, ranges, depth + 1)
        if outer_lo is None or outer_hi is None:
            return None
        lo, hi = outer_lo[0], outer_hi[1]
    return lo, hi


def _affine_bounds(e: sympy.Expr, ranges: Ranges):
    lo, hi = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(e)):
        coeff, rest = term.as_coeff_Mul()
        if rest == 1:
            lo, hi = lo + coeff, hi + coeff
            continue
        bounds = ranges.get(rest) or _division_bounds(rest, ranges) or _scaled_bounds(rest, ranges)
        if bounds is None or bounds[0] is None:
            return None, None
        r_lo, r_hi = bounds
        if coeff >= 0:
            lo, hi = lo + coeff * r_lo, hi + coeff * r_hi
        else:
            lo, hi = lo + coeff * r_hi, hi + coeff * r_lo
    return lo, hi


def _scaled_bounds(e: sympy.Expr, ranges: Ranges):
    """Bounds of i·s for a loop variable i and a nonnegative factor s free of loop variables
    (a stride such as ``j · 128 g`` with g a size)."""
    ranged = [f for f in e.as_ordered_factors() if f in ranges and ranges[f][0] is not None]
    if len(ranged) != 1:
        return None
    scale = sympy.cancel(e / ranged[0])
    if any(s in ranges for s in scale.free_symbols) or not _provably_nonnegative(scale):
        return None
    lo, hi = ranges[ranged[0]]
    return lo * scale, hi * scale


def _division_bounds(e: sympy.Expr, ranges: Ranges):
    """Bounds of floor(a/d) or Mod(a, d) for a positive divisor d and a bounded a ≥ 0."""
    match e:
        case sympy.Mod():
            a, d = e.args
            return (sympy.Integer(0), d - 1) if positive(d, ranges) else None
        case sympy.floor():
            num, d = sympy.fraction(sympy.together(e.args[0]))
            bounds = _bounds(num, ranges)
            if d == 1 or bounds is None or not positive(d, ranges) or not _provably_nonnegative(bounds[0]):
                return None
            hi = simplify_index(sympy.floor(bounds[1] / d), ranges)
            return sympy.Integer(0), (bounds[1] if hi.has(sympy.floor) else hi)
    return None


def _provably_nonnegative(e: sympy.Expr) -> bool:
    """True if ``e`` ≥ 0 whenever its symbols (sizes, loop variables) are nonnegative integers."""
    e = sympy.expand(e)
    nonneg = {s: sympy.Dummy(s.name, integer=True, nonnegative=True) for s in e.free_symbols}
    if e.xreplace(nonneg).is_nonnegative:
        return True
    # -c·Min(a, b) ≥ -c·a and ≥ -c·b: the bound a guard like ``k < min(length x, length y)`` gives
    return any(e.coeff(m).is_negative and any(_provably_nonnegative(e.subs(m, a)) for a in m.args)
               for m in e.atoms(sympy.Min))
