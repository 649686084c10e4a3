"""Dead-code elimination: a let whose variable is not used is dropped.

Every F̃ expression is pure, so dropping an unused one changes no result.  One thing can be
lost: a read ``a[i]`` out of range (or a call whose size check would fail, integer arithmetic
that would overflow) that nothing uses no longer fails; that is accepted, as a C compiler drops
an unused load.
"""
from __future__ import annotations

from .core import Expr, Lam, Let, Var, map_children


def eliminate_dead_code(e: Expr) -> Expr:
    return _without_dead_lets(e)[0]


def _without_dead_lets(e: Expr) -> tuple[Expr, frozenset[str]]:
    """(``e`` without its dead lets, the free variables of that), made together bottom-up, so
    that each node is visited once: asking ``core.free_vars`` of every let's body anew made the
    pass quadratic in a chain of lets (issue 13)."""
    match e:
        case Var(name):
            return e, frozenset([name])
        case Let(name, rhs, body, ty):
            body, body_free = _without_dead_lets(body)
            if name not in body_free:
                return body, body_free
            rhs, rhs_free = _without_dead_lets(rhs)
            return Let(name, rhs, body, ty, e.loc), rhs_free | (body_free - {name})
    frees: list[frozenset[str]] = []

    def visit(child: Expr) -> Expr:
        child, free = _without_dead_lets(child)
        frees.append(free)
        return child

    e = map_children(visit, e)
    free = frozenset().union(*frees)
    return e, free - {n for n, _ in e.params} if isinstance(e, Lam) else free
