"""Size constraints from symbolic index ranges.

A read ``a[i]`` executed unconditionally, whose index is a polynomial in the enclosing loop
variables (build index in [0, n), ifold index in [0, count), where a count may be an
expression of an enclosing index: ``0 ≤ j ≤ i - 1``), possibly with floor divisions by
positive constants, and monotone in each variable over its range (``extreme``), is in range
for every iteration iff its smallest index is ≥ 0 and its largest is < length(a): two
relations over the kernel's size symbols, checked once before the kernel runs.  Each holds
only if the loops around the read run at all, hence the guard ``n <= 0 or ...`` where that
is not provable.  Reads that do not fit (under a branch, data-dependent, not monotone) are
marked ``checked`` and tested where they happen.
Relations that sympy proves true are dropped.  Calls carry their callee's constraints
over to the caller, in the caller's sizes.
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache

import sympy

from fsmooth.types import ArrayT
from fsmooth import core

from . import ir


class Bounds:
    def __init__(self, params):
        self.params = params  # (name, type, dims)
        self.origin = {n: n for n, t, _ in params if isinstance(t, ArrayT)}
        self.loops: list[tuple[sympy.Symbol, sympy.Expr | None]] = []
        self.branches = 0
        self.found: dict = {}  # cond -> SizeConstraint, in order of discovery

    @contextmanager
    def branch(self):
        self.branches += 1
        try:
            yield
        finally:
            self.branches -= 1

    @contextmanager
    def loop(self, index: sympy.Symbol, count: sympy.Expr | None):
        self.loops.append((index, count))
        try:
            yield
        finally:
            self.loops.pop()

    def alias(self, name: str, rhs: core.Expr | None):
        """``name`` is a view of (or another name for) an array: blame the same parameter."""
        match rhs:
            case core.Var(a) | core.Get(core.Var(a), _) if a in self.origin:
                self.origin[name] = self.origin[a]

    def constraints(self) -> tuple:
        return tuple(self.found.values())

    # ------------------------------------------------------------------ sources of constraints

    def nonnegative(self, n: sympy.Expr):
        guarded = self.guard(sympy.Ge(n, 0))
        if guarded is not None:
            self.add(guarded, None, f"the size of a build, {n}, must be ≥ 0")

    def read(self, arr: str, length: sympy.Expr, index: sympy.Expr | None) -> bool:
        """Record the constraints of a read; True when it must be checked at the access instead."""
        if self.branches or index is None:
            return True
        extent = self.range(index)
        if extent is None:
            return True
        lo, hi = extent
        low, high = self.guard(sympy.Ge(lo, 0)), self.guard(sympy.Lt(hi, length))
        if low is None or high is None:
            return True
        origin = self.origin.get(arr)
        name = arr if origin in (None, arr) else f"{arr} (from {origin})"
        where = f"index {lo}" if lo == hi else f"indices {lo}..{hi}"
        message = f"{name} has length {length} but is read at {where}"
        self.add(low, origin, message)
        self.add(high, origin, message)
        return False

    def call(self, callee: ir.Kernel, mapping: dict, args) -> bool:
        """Carry the callee's constraints over; True when they must be checked at the call."""
        if not callee.constraints:
            return False
        if self.branches or any(v is None for v in mapping.values()):
            return True
        carried = []
        for c in callee.constraints:
            cond = self.guard(c.cond.xreplace(mapping))
            if cond is None:
                return True
            carried.append((cond, c))
        names = [n for n, _, _ in callee.params]
        for cond, c in carried:
            arg = args[names.index(c.param)] if c.param in names else None
            origin = self.origin.get(arg.name) if isinstance(arg, core.Var) else None
            self.add(cond, origin, f"{c.message} (in {callee.name})")
        return False

    # ------------------------------------------------------------------ helpers

    def range(self, index: sympy.Expr):
        """(min, max) of an index over the enclosing loops, or None: a polynomial in the loop
        variables (with floor divisions by positive constants) that is monotone in each of them
        over its range (``extremes``), and a nonnegative such index modulo a positive constant
        (``a[(i + 1) % 3]``)."""
        if isinstance(index, sympy.Mod) and index.args[1].is_Integer and index.args[1] > 0:
            inner = self.range(index.args[0])
            if inner is None or not inner[0].is_nonnegative:
                return None
            lo, hi = inner
            if (hi - index.args[1]).is_negative:
                return lo, hi  # never wraps around
            return sympy.Integer(0), index.args[1] - 1
        domain = self.domain()
        if domain is None:
            return None
        ranges, _ = domain
        lo, hi = extreme(index, False, ranges), extreme(index, True, ranges)
        if lo is None or hi is None:
            return None
        return sympy.expand(lo), sympy.expand(hi)

    def domain(self):
        """The iterations that reach the current point: ``tighten`` of the enclosing loops."""
        if any(n is None for _, n in self.loops):
            return None
        return tighten(tuple((sym, sympy.Integer(0), sympy.expand(n - 1)) for sym, n in self.loops))

    def guard(self, cond):
        """``cond`` where every enclosing loop runs at least once; None if a loop count is unknown
        (or the guarded relation still depends on a loop variable)."""
        domain = self.domain()
        if domain is None:
            return None
        for n in domain[1]:
            if sympy.Ge(n, 1) is sympy.true or cond is sympy.true:
                continue
            if isinstance(n, sympy.Symbol) and cond.subs(n, 0) is sympy.true:
                continue
            cond = sympy.Or(sympy.Le(n, 0), cond)
        if cond is not sympy.true and any(s in cond.free_symbols for s, _ in self.loops):
            return None
        return cond

    def add(self, cond, origin: str | None, message: str):
        if cond is sympy.true or cond in self.found:
            return
        param = origin if origin is not None else self.blame(cond)
        self.found[cond] = ir.SizeConstraint(cond, param, message)

    def blame(self, cond) -> str:
        """The first parameter whose sizes the constraint mentions."""
        symbols = cond.free_symbols
        for name, _, dims in self.params:
            if any(d in symbols for d in dims) or any(s.name == name for s in symbols):
                return name
        return self.params[0][0] if self.params else ""


# ---------------------------------------------------------------------- nested ranges

Range = tuple  # (loop variable, lo, hi): inclusive bounds, in sizes and enclosing loop variables


@lru_cache(maxsize=4096)
def tighten(ranges: tuple):
    """The nonempty part of nested ranges, outermost first: (ranges, counts) or None.

    An inner loop whose count depends on an enclosing loop variable t (``ifold`` counted by
    ``i``, or by ``i - 5``) runs only for some values of t: t's range is narrowed to those
    (``i ≥ 1``, ``i ≥ 6``), innermost first, so that every iteration of the narrowed ranges
    reaches the point inside.  ``counts`` are the trip counts left over, in sizes only: the
    point is reached iff each is ≥ 1.  None where a count is not ±t plus terms of outer
    variables, or where the narrowed bound cannot be compared with t's own."""
    ranges = list(ranges)
    syms = [r[0] for r in ranges]
    counts = []
    for k in reversed(range(len(ranges))):
        _, lo, hi = ranges[k]
        count = sympy.expand(hi - lo + 1)
        outer = [j for j in range(k) if syms[j] in count.free_symbols]
        if not outer:
            counts.append(count)
            continue
        j = max(outer)
        t, t_lo, t_hi = ranges[j]
        a = count.coeff(t)
        rest = sympy.expand(count - a * t)
        if a not in (1, -1) or t in rest.free_symbols:
            return None
        if a == 1:  # t + rest ≥ 1
            bound = sympy.expand(1 - rest)
            if _nonnegative(bound - t_lo):
                t_lo = bound
            elif not _nonnegative(t_lo - bound):
                return None
        else:  # rest - t ≥ 1
            bound = sympy.expand(rest - 1)
            if _nonnegative(t_hi - bound):
                t_hi = bound
            elif not _nonnegative(bound - t_hi):
                return None
        ranges[j] = (t, t_lo, t_hi)
    return tuple(ranges), tuple(reversed(counts))


@lru_cache(maxsize=4096)
def extreme(f: sympy.Expr, maximise: bool, ranges: tuple):
    """The maximum (or minimum) of ``f`` over nested ``tighten``ed ranges, attained, in sizes;
    None if not found.  Variables are eliminated innermost first: where ``f`` is monotone in
    one over its range (``direction``), its maximising end is substituted."""
    for k in reversed(range(len(ranges))):
        s, lo, hi = ranges[k]
        if s not in f.free_symbols:
            continue
        d = direction(f, s, ranges[:k + 1])
        if d is None:
            return None
        f = f.xreplace({s: hi if (d > 0) == maximise else lo})
    return f


@lru_cache(maxsize=4096)
def direction(f: sympy.Expr, s: sympy.Symbol, ranges: tuple):
    """1 if ``f`` is nondecreasing in ``s`` (the last of ``ranges``) over its range, -1 if
    nonincreasing, None if not proven: the sign of the finite difference f(s+1) - f(s) over
    the ranges with s < hi, proven from its own extremes."""
    proxy = _difference(f, s)
    if proxy is None:
        return None
    if not any(r[0] in proxy.free_symbols for r in ranges):
        for sign in (1, -1):
            if _nonnegative(sign * proxy):
                return sign
        return None
    _, lo, hi = ranges[-1]
    domain = tighten(ranges[:-1] + ((s, lo, sympy.expand(hi - 1)),))
    if domain is None:
        return None
    inner, counts = domain
    for sign in (1, -1):
        m = extreme(sympy.expand(sign * proxy), False, inner)
        if m is not None and _nonnegative(m, counts):
            return sign
    return None


def _difference(f: sympy.Expr, s: sympy.Symbol):
    """An expression with the sign of f(s+1) - f(s) wherever that is nonzero: the difference
    itself for a polynomial; for ``R ± floor(A)`` (R integer) the difference of ``A ± R``, as
    floor is monotone."""
    if any(s in m.free_symbols for m in f.atoms(sympy.Mod)):
        return None
    floors = [a for a in f.atoms(sympy.floor) if s in a.free_symbols]
    if not floors:
        return sympy.expand(f.xreplace({s: s + 1}) - f)
    if len(floors) > 1:
        return None
    (F,) = floors
    x = sympy.Dummy("floor")
    g = sympy.expand(f.xreplace({F: x}))
    c = g.coeff(x)
    rest = sympy.expand(g - c * x)
    if c not in (1, -1) or x in rest.free_symbols or rest.is_integer is not True \
            or any(s in a.free_symbols for a in rest.atoms(sympy.floor)):
        return None
    inner = F.args[0] + c * rest  # f = c·floor(inner)
    return sympy.expand(c * (inner.xreplace({s: s + 1}) - inner))


def _nonnegative(e: sympy.Expr, counts: tuple = ()) -> bool:
    """``e`` ≥ 0 for all nonnegative integer sizes (and loop variables) with every count ≥ 1:
    a count ``x + b`` in one size x raises x's lower bound to 1 - b; a constant count < 1
    means that there is nothing to prove."""
    e = sympy.sympify(e)
    if e.is_nonnegative:
        return True
    least = {}
    for c in counts:
        if c.is_Integer:
            if c < 1:
                return True
            continue
        syms = c.free_symbols
        if len(syms) != 1:
            continue
        (x,) = syms
        if c.coeff(x) != 1 or not (c - x).is_Integer:
            continue
        least[x] = max(least.get(x, 0), int(1 - (c - x)))
    if not least:
        return False
    shifted = sympy.expand(e.xreplace({x: x + b for x, b in least.items() if b > 0}))
    return shifted.is_nonnegative is True
