"""Guards become bounds: a fold whose every trip adds a term guarded by a comparison of its index
with an invariant runs only the trips whose guard holds, with no branch.

    ifold (λ a j. … a + (if j < i then e else 0.0)) z n   ⇝   ifold (λ a j. … a + e) z (min(i, n))
    ifold (λ a j. … a + (if j > i then e else 0.0)) z n   ⇝   (j from lo = clamp(i + 1, 0, n) to n)
                                                               ifold (λ a k. let j = k + lo in … a + e) z (n - lo)

for ``<``, ``<=``, ``>``, ``>=`` on either side, the guarded term in either branch (the other
being the identity literal), and ``*`` with 1 as for ``+`` with 0.  F̃'s ``ifold`` counts from
0, so a range that starts at ``lo`` is the fold shifted by ``lo`` (the index-shifting form of the
README), and a count that comes out negative runs nothing, as a negative ``ifold`` count does.
Bounds are computed on the clamped count ``max(n, 0)``, in ways that cannot overflow int64 even
for an extreme ``i``.

Exactness: a skipped trip computed ``a + 0`` (or ``a * 1``); the rewrite gives ``a``.  That is the
same value bit for bit for integers, for ``a * 1.0`` and for ``a + -0.0``, always; ``a + 0.0``
differs only for ``a = -0.0`` (the sum is ``+0.0``).  An IEEE sum is ``-0.0`` only when both
operands are, so the accumulator is never ``-0.0`` when the fold starts from a literal other than
``-0.0``: only then is a fold with ``+ 0.0`` rewritten.  The other lets of a skipped trip are
pure and their values unused, so skipping them changes no result (a read that would have failed
there no longer does, as for ``fsmooth.dce``).
"""
from __future__ import annotations

import math

from .core import Build, Expr, If, Ifold, Lam, Length, Let, Lit, PrimApp, Var, free_vars, map_children, walk
from .names import NameSupply
from .types import Card, Index

_IDENTITY = {"add": 0, "mul": 1}
_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}


def bound_guarded_folds(e: Expr) -> Expr:
    taken = {n.name for n in walk(e) if isinstance(n, Var)} | {
        name for n in walk(e) for name in ((n.name,) if isinstance(n, Let) else
                                            tuple(p for p, _ in n.params) if isinstance(n, Lam) else ())}
    naturals = {n.name for n in walk(e) if isinstance(n, Let) and isinstance(n.rhs, Length)} | {
        n.params[-1][0] for n in walk(e) if isinstance(n, Lam)}
    return _rewrite(e, NameSupply(taken), naturals, {})


def _rewrite(e: Expr, names: NameSupply, naturals: set[str], loops: dict[str, Expr]) -> Expr:
    """``naturals``: the variables known to be ≥ 0 (lengths and loop variables); ``loops``: the
    count of each enclosing loop, by its variable."""
    match e:
        case Build(count, Lam(params) as fn) | Ifold(Lam(params) as fn, _, count):
            inner = {**loops, params[-1][0]: count}
            e = map_children(lambda child: _rewrite(child, names, naturals, inner if child is fn else loops), e)
        case _:
            e = map_children(lambda child: _rewrite(child, names, naturals, loops), e)
    match e:
        case Ifold(Lam(((acc, _), (j, _))) as fn, init, count):
            guard = _guarded_term(fn.body, acc, j, init)
            if guard is not None:
                natural = (isinstance(count, Lit) and count.value >= 0) or (isinstance(count, Var) and count.name in naturals)
                # the bound is the variable of an enclosing loop of the same count: 0 <= i < n
                within = isinstance(guard[3], Var) and loops.get(guard[3].name) == count
                return _bounded(e, *guard, names, natural, within)
    return e


def _guarded_term(body: Expr, acc: str, j: str, init: Expr):
    """``(t, e, op, bound)`` where ``body`` ends in ``acc ⊕ t``, ``t = if c then e else identity``
    (or the other way round) and ``c`` is ``j op bound``; None where it has not that form."""
    inside, lets = {acc, j}, {}
    while isinstance(body, Let):
        lets[body.name] = body.rhs
        inside.add(body.name)
        body = body.body
    match body:
        case PrimApp(fold_op, (Var(x), Var(y))) if fold_op in _IDENTITY and acc in (x, y):
            t = y if x == acc else x
        case _:
            return None
    if t not in lets or lets[t].ty != body.ty:
        return None
    match lets[t]:
        case If(Var(c), then, orelse) if c in lets and t != c:
            pass
        case _:
            return None
    if _is_identity(orelse, fold_op, init):
        term, negate = then, False
    elif _is_identity(then, fold_op, init):
        term, negate = orelse, True
    else:
        return None
    match lets[c]:
        case PrimApp(op, (Var(x), bound)) if x == j and op in _FLIPPED:
            pass
        case PrimApp(op, (bound, Var(x))) if x == j and op in _FLIPPED:
            op = _FLIPPED[op]
        case _:
            return None
    if bound.ty not in (Index, Card) or free_vars(bound) & inside:
        return None
    return t, term, _NEGATED[op] if negate else op, bound


def _is_identity(e: Expr, fold_op: str, init: Expr) -> bool:
    """``a ⊕ e`` is ``a`` bit for bit for every accumulator the fold can hold."""
    if not isinstance(e, Lit) or e.ty != init.ty or isinstance(e.value, bool) or e.value != _IDENTITY[fold_op]:
        return False
    if fold_op == "mul" or not isinstance(e.value, float) or math.copysign(1.0, e.value) < 0:
        return True  # a * 1, integer a + 0 and a + -0.0 are exact for every a
    # a + 0.0 is exact unless a = -0.0, which a sum reaches only from a -0.0 start
    return isinstance(init, Lit) and not (init.value == 0 and math.copysign(1.0, init.value) < 0)


def _bounded(fold: Ifold, t: str, term: Expr, op: str, bound: Expr, names: NameSupply, natural: bool,
             within: bool) -> Expr:
    """``natural``: the count n is known to be ≥ 0 (a length, a loop variable), so it needs no
    clamp; ``within``: 0 ≤ i < n, so the bounds need none either (i, i + 1: affine, which the
    range analysis proves reads in range with)."""
    acc_param, (j, _) = fold.fn.params
    body = _unguarded(fold.fn.body, t, term)
    loc = fold.loc

    def prim(name, *args):
        return PrimApp(name, args, Index, loc)

    def index(x):
        return prim("to_Index", x) if x.ty == Card else x

    def let(base, value, scope):  # scope: the body, given the bound variable
        name = names.fresh(base)
        inner = scope(Var(name, Index, loc))
        return Let(name, value, inner, inner.ty, loc)

    one, zero = Lit(1, Index, loc), Lit(0, Index, loc)
    trips = index(fold.count) if natural else prim("max", index(fold.count), zero)  # what the fold runs
    i = index(bound)
    if op in ("lt", "le"):  # j from 0 to min(i, n) (exclusive), or to min(i, n - 1) inclusive
        def counted(n):
            if within:
                hi = i if op == "lt" else prim("add", i, one)
            else:
                hi = prim("min", i, n) if op == "lt" else prim("add", prim("min", i, prim("sub", n, one)), one)
            return Ifold(Lam(fold.fn.params, body, fold.fn.ty, fold.fn.loc), fold.init, hi, fold.ty, loc)
        return let("trips", trips, counted)

    def shifted(n):  # j from lo = clamp(i, 0, n) (or clamp(i + 1, 0, n) for >) to n
        if within:
            lo = i if op == "ge" else prim("add", i, one)
        elif op == "ge":
            lo = prim("min", prim("max", i, zero), n)
        else:
            lo = prim("add", prim("min", prim("max", i, Lit(-1, Index, loc)), prim("sub", n, one)), one)

        def fold_from(lo):
            k = names.fresh(j)
            shifted_body = Let(j, prim("add", Var(k, Index, loc), lo), body, body.ty, loc)
            fn = Lam((acc_param, (k, Index)), shifted_body, fold.fn.ty, fold.fn.loc)
            return Ifold(fn, fold.init, prim("sub", n, lo), fold.ty, loc)
        return let("lo", lo, fold_from)
    return let("trips", trips, shifted)


def _unguarded(body: Expr, t: str, term: Expr) -> Expr:
    """``body`` with the let of ``t`` bound to the guarded ``term`` itself."""
    match body:
        case Let(name, _, rest, ty) if name == t:
            return Let(name, term, rest, ty, body.loc)
        case Let(name, rhs, rest, ty):
            return Let(name, rhs, _unguarded(rest, t, term), ty, body.loc)
    raise AssertionError(f"no let of {t}")
