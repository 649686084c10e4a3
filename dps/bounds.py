"""Size constraints from symbolic index ranges.

A read ``a[i]`` executed unconditionally, whose index is a polynomial in the enclosing loop
variables (build index in [0, n), ifold index in [0, count), where a count may be an
expression of an enclosing index: ``0 ≤ j ≤ i - 1``), possibly with floor divisions by
positive constants, and monotone in each variable over its range (``fsmooth.dps.ranges``, the
range analysis that code generation uses too), is in range
for every iteration iff its smallest index is ≥ 0 and its largest is < length(a): two
relations over the kernel's size symbols, checked once before the kernel runs.  Each holds
only if the loops around the read run at all, hence the guard ``n <= 0 or ...`` where that
is not provable.  Reads that do not fit (under a branch, data-dependent, not monotone) are
marked ``checked``: code generation tests them where they happen or proves them with the
loops and ``if``s around them (``KernelInterface.range_checks`` records which).
Relations that sympy proves true are dropped.  Calls carry their callee's constraints
over to the caller, in the caller's sizes.
"""
from __future__ import annotations

from contextlib import contextmanager

import sympy

from fsmooth.types import ArrayT
from fsmooth import core

from . import ir
from .ranges import Ranges, bounds, relation, tighten


class Bounds:
    def __init__(self, params):
        self.params = params  # (name, type, dims)
        self.origin = {n: n for n, t, _ in params if isinstance(t, ArrayT)}
        self.ranges = Ranges()  # of the enclosing loops whose counts are known
        self.unknown_counts = 0  # enclosing loops whose counts are not
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
        outer = self.ranges
        if count is None:
            self.unknown_counts += 1
        else:
            self.ranges = outer.inside(index, sympy.expand(count - 1))
        try:
            yield
        finally:
            self.ranges = outer
            self.unknown_counts -= count is None

    def alias(self, name: str, rhs: core.Expr | None):
        """``name`` is a view of (or another name for) an array: blame the same parameter."""
        match rhs:
            case core.Var(a) | core.Get(core.Var(a), _) if a in self.origin:
                self.origin[name] = self.origin[a]

    def constraints(self) -> tuple:
        return tuple(self.found.values())

    # ------------------------------------------------------------------ sources of constraints

    def nonnegative(self, n: sympy.Expr, what: str = "a build"):
        guarded = self.guard(relation(sympy.Ge, n, 0))
        if guarded is not None:
            self.add(guarded, None, f"the size of {what}, {n}, must be ≥ 0")

    def read(self, arr: str, length: sympy.Expr, index: sympy.Expr | None) -> bool:
        """Record the constraints of a read; True when it must be checked at the access instead."""
        if self.branches or index is None:
            return True
        extent = self.range(index)
        if extent is None:
            return True
        lo, hi = extent
        low, high = self.guard(relation(sympy.Ge, lo, 0)), self.guard(relation(sympy.Lt, hi, length))
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
        """(min, max) of an index over the enclosing loops, attained (``ranges.bounds``, exact), or None."""
        domain = self.domain()
        extent = None if domain is None else bounds(index, domain[0])
        return (extent.lo, extent.hi) if extent is not None and extent.exact else None

    def domain(self):
        """The iterations that reach the current point: ``tighten`` of the enclosing loops."""
        return None if self.unknown_counts else tighten(self.ranges)

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
        if cond is not sympy.true and any(s in cond.free_symbols for s, _, _ in self.ranges.loops):
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
