"""Common-subexpression elimination on ANF: a let whose right-hand side is already bound in
scope reuses that binding.

Every F̃ expression is pure, so equal right-hand sides (equal as trees, which in ANF means
equal operands) have equal values.  What is available flows into lambda bodies and branches,
where reusing an outer binding moves no work; what is bound inside a lambda or a branch is not
available after it, so nothing is hoisted out of a loop.  Out of a branch only what both branches
bind first, before anything else (``_hoist_common_lets``): it runs whichever branch is taken, so
hoisting it moves no work and no failing read, and a read of a build in both branches becomes one
read, which fusion then consumes (Hand's ``-skinned[v][r] if mirrored else skinned[v][r]``).
"""
from __future__ import annotations

from .core import Expr, If, Let, Var, is_atom, map_children, show, substitute


def eliminate_common_subexpressions(e: Expr, available: dict | None = None, reused: dict | None = None) -> Expr:
    """``e`` with each let whose right-hand side is ``available`` (by ``_key``) removed, its
    variable replaced by the binding it reuses (``reused``, by name): as the walk meets each
    variable, so that no body is rewritten once per removed let.  Binders are unique within a
    kernel (``fsmooth.anf``), so one table of replacements serves every scope."""
    available = available or {}
    reused = {} if reused is None else reused
    match e:
        case Var(name):
            return reused.get(name, e)
        case Let(name, rhs, body, ty):
            rhs = eliminate_common_subexpressions(rhs, available, reused)
            key = _key(rhs)
            if key in available:
                reused[name] = available[key]
                return eliminate_common_subexpressions(body, available, reused)
            inner = available if is_atom(rhs) else {**available, key: Var(name, rhs.ty, e.loc)}
            return Let(name, rhs, eliminate_common_subexpressions(body, inner, reused), ty, e.loc)
        case If(cond, then, orelse, ty) if _common_first_let(then, orelse):
            return eliminate_common_subexpressions(_hoist_common_lets(cond, then, orelse, ty, e.loc), available,
                                                   reused)
    return map_children(lambda child: eliminate_common_subexpressions(child, available, reused), e)


def _common_first_let(then: Expr, orelse: Expr) -> bool:
    """Whether both branches begin by binding the same right-hand side (which, first in its
    branch, reads only what is bound outside the if)."""
    return isinstance(then, Let) and isinstance(orelse, Let) and _key(then.rhs) == _key(orelse.rhs)


def _hoist_common_lets(cond: Expr, then: Let, orelse: Let, ty, loc) -> Expr:
    """``let x = e in if c then a else b[y := x]`` for ``if c then (let x = e in a) else (let y = e
    in b)``, and so on while the branches' next lets agree."""
    if not _common_first_let(then, orelse):
        return If(cond, then, orelse, ty, loc)
    rest = substitute(orelse.body, {orelse.name: Var(then.name, then.rhs.ty, then.loc)})
    return Let(then.name, then.rhs, _hoist_common_lets(cond, then.body, rest, ty, loc), then.ty, then.loc)


def _key(rhs: Expr) -> tuple:
    """Equal keys, equal values.  The printed form joins the tree because ``0.0 == -0.0`` in
    Python (so ``x * 0.0`` and ``x * -0.0`` are equal trees), while the tree keeps the types
    that printing drops."""
    return rhs, show(rhs)
