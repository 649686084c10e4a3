"""Loop-invariant code motion: a let of a loop body that depends on neither the loop variable
nor the fold's state, nor on anything else bound inside the body, is evaluated once, before the
loop (``build(n, λi. v[i] / sqrt(Σ v²))`` computes the norm once, not n times).

Only the lets on the spine of a lambda body move (those evaluated on every trip): nothing leaves
an ``if`` branch, and a let moves just before its loop, so it stays inside every branch and
loop around that one.  Inner loops are treated first, so an invariant of two loops moves out of
both, over the optimiser's rounds.

Every F̃ expression is pure, but some can fail: a read out of range, an integer division by
zero, integer arithmetic that overflows int64, ``int`` of a NaN, a call whose size check fails,
a build of negative size. A loop that runs zero times evaluates none of its body, so a hoisted
let must not fail where the loop does not run. A let moves as is where its loop surely runs (a
literal count above zero) or where it cannot fail: its reads are at a loop variable whose loop
counts at most the array's length (``v[j]`` in ``ifold(..., length(v))``, or in a loop counted
by such a variable), its integer divisors are literals other than 0 (and -1 for ``//``), its
builds and foreign array results (``fsmooth.foreign``) are sized by literals or lengths, it calls
no kernel. A scalar that may fail and
contains a loop or a call (what is worth a branch) moves guarded, ``if 0 < n then e else 0``,
evaluated exactly when the loop runs at least once. Anything else stays. Where the loop runs and
the body fails at an earlier let, the hoisted let's error may come first: an error either way,
as for ``fsmooth.dce``.

Builds with an OpenCL strategy neither move nor lose lets: their bodies are the mapping the
program asked for.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from . import prims
from .core import (Build, Call, Expr, ForeignCall, Get, If, Ifold, Iscan, Lam, Length, Let, Lit, PrimApp, Var,
                   children, free_vars, has_strategy, is_atom, map_children, walk)
from .types import Bool, Card, Double, Float, Index, Scalar

_FAILING_PRIMITIVES = ("floordiv", "mod", "trunc_to_Index")
_ZERO = {Double: 0.0, Float: 0.0, Index: 0, Card: 0, Bool: False}


@dataclass(frozen=True)
class _Facts:
    """What the enclosing lets and loops say about indices: ``lengths[x] = a`` where
    ``x = length a``, ``bounds[j] = n`` where ``j`` is the variable of a loop counted by ``n``."""

    lengths: Mapping[str, str] = field(default_factory=dict)
    bounds: Mapping[str, Expr] = field(default_factory=dict)

    def with_length(self, name: str, arr: str) -> _Facts:
        return _Facts({**self.lengths, name: arr}, self.bounds)

    def with_bound(self, index: str, count: Expr) -> _Facts:
        return _Facts(self.lengths, {**self.bounds, index: count})

    def below_length(self, index: Expr, arr: str) -> bool:
        """``0 <= index < length arr`` wherever ``index`` is in scope."""
        if not isinstance(index, Var) or index.name not in self.bounds:
            return False
        count = self.bounds[index.name]
        return isinstance(count, Var) and (self.lengths.get(count.name) == arr or self.below_length(count, arr))

    def non_negative(self, size: Expr) -> bool:
        """``size`` (of a build, an iscan, a foreign result's dim) is known to be ≥ 0: a literal,
        or a length."""
        return (isinstance(size, Lit) and size.value >= 0) or (isinstance(size, Var) and size.name in self.lengths)


def hoist_loop_invariants(e: Expr, facts: _Facts = _Facts()) -> Expr:
    match e:
        case Let(name, Length(Var(arr)) as rhs, body, ty):
            return Let(name, rhs, hoist_loop_invariants(body, facts.with_length(name, arr)), ty, e.loc)
        case Let(name, rhs, body, ty):
            return Let(name, hoist_loop_invariants(rhs, facts), hoist_loop_invariants(body, facts), ty, e.loc)
        case Build(size, Lam(params, body) as fn) if e.strategy is None:
            body = hoist_loop_invariants(body, facts.with_bound(params[-1][0], size))
            return _hoisted(e, size, Lam(params, body, fn.ty, fn.loc), facts)
        case Ifold(Lam(params, body) as fn, _, count):
            body = hoist_loop_invariants(body, facts.with_bound(params[-1][0], count))
            return _hoisted(e, count, Lam(params, body, fn.ty, fn.loc), facts)
    return map_children(lambda child: hoist_loop_invariants(child, facts), e)


def _hoisted(loop: Build | Ifold, count: Expr, fn: Lam, facts: _Facts) -> Expr:
    """``loop`` with function ``fn``, its body's invariant lets moved before it."""
    inside = {name for name, _ in fn.params}
    moved: list[Let] = []
    kept: list[Let] = []
    e = fn.body
    while isinstance(e, Let):
        rhs = _movable(e.rhs, count, facts) if not (free_vars(e.rhs) & inside) else None
        if rhs is None:
            inside.add(e.name)
            kept.append(e)
        else:
            moved.append(Let(e.name, rhs, e.body, e.ty, e.loc))
        e = e.body
    if not moved:
        return _with_fn(loop, fn)
    for let in reversed(kept):
        e = Let(let.name, let.rhs, e, let.ty, let.loc)
    result = _with_fn(loop, Lam(fn.params, e, fn.ty, fn.loc))
    for let in reversed(moved):
        result = Let(let.name, let.rhs, result, result.ty, let.loc)
    return result


def _with_fn(loop: Build | Ifold, fn: Lam) -> Build | Ifold:
    if isinstance(loop, Build):
        return Build(loop.size, fn, loop.ty, loop.loc, loop.strategy)
    return Ifold(fn, loop.init, loop.count, loop.ty, loop.loc)


def _movable(rhs: Expr, count: Expr, facts: _Facts) -> Expr | None:
    """What to bind before the loop in place of the invariant ``rhs``: itself, itself guarded
    by ``0 < count``, or None where it stays."""
    if is_atom(rhs) or has_strategy(rhs):
        return None
    if (isinstance(count, Lit) and count.value > 0) or _cannot_fail(rhs, facts):
        return rhs
    if isinstance(rhs.ty, Scalar) and any(isinstance(t, (Build, Ifold, Call)) for t in walk(rhs)):
        runs = PrimApp("lt", (Lit(0, count.ty), count), Bool, rhs.loc)
        return If(runs, rhs, Lit(_ZERO[rhs.ty], rhs.ty, rhs.loc), rhs.ty, rhs.loc)
    return None


def _cannot_fail(e: Expr, facts: _Facts) -> bool:
    match e:
        case Var() | Lit() | Length():
            return True
        case Get(Var(arr), idx):
            return facts.below_length(idx, arr)
        case Get() | Call():
            return False
        case PrimApp(op, args, ty) if op in _FAILING_PRIMITIVES:
            # an integer x // -1 overflows at INT64_MIN
            divisors = (0, -1) if op == "floordiv" and ty in (Index, Card) else (0,)
            return op != "trunc_to_Index" and isinstance(args[1], Lit) and args[1].value not in divisors
        case PrimApp(op, _, ty) if op in prims.MAY_OVERFLOW and ty in (Index, Card):
            return False
        case Let(name, Length(Var(arr)), body):
            return _cannot_fail(body, facts.with_length(name, arr))
        case Build(size, Lam(params, body)):
            return facts.non_negative(size) and _cannot_fail(body, facts.with_bound(params[-1][0], size))
        case ForeignCall(_, _, dims):  # its result's dims, as a build's size, may be negative
            return all(facts.non_negative(d) for d in dims)
        case Ifold(Lam(params, body), init, count):
            return _cannot_fail(init, facts) and _cannot_fail(body, facts.with_bound(params[-1][0], count))
        case Iscan(Lam(params, body), init, size):  # a negative size fails, as a build's
            return (facts.non_negative(size) and _cannot_fail(init, facts)
                    and _cannot_fail(body, facts.with_bound(params[-1][0], size)))
    return all(_cannot_fail(child, facts) for child in children(e))
