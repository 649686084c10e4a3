"""Common-subexpression elimination on ANF: a let whose right-hand side is already bound in
scope reuses that binding.

Every F̃ expression is pure, so equal right-hand sides (equal as trees, which in ANF means
equal operands) have equal values.  What is available flows into lambda bodies and branches,
where reusing an outer binding moves no work; what is bound inside a lambda or a branch is not
available after it, so nothing is hoisted out of a loop or a branch.
"""
from __future__ import annotations

from .core import Expr, Let, Var, is_atom, map_children, show, substitute


def eliminate_common_subexpressions(e: Expr, available: dict | None = None) -> Expr:
    available = available or {}
    match e:
        case Let(name, rhs, body, ty):
            rhs = eliminate_common_subexpressions(rhs, available)
            key = _key(rhs)
            if key in available:
                return eliminate_common_subexpressions(substitute(body, {name: available[key]}), available)
            inner = available if is_atom(rhs) else {**available, key: Var(name, rhs.ty, e.loc)}
            return Let(name, rhs, eliminate_common_subexpressions(body, inner), ty, e.loc)
    return map_children(lambda child: eliminate_common_subexpressions(child, available), e)


def _key(rhs: Expr) -> tuple:
    """Equal keys, equal values.  The printed form joins the tree because ``0.0 == -0.0`` in
    Python (so ``x * 0.0`` and ``x * -0.0`` are equal trees), while the tree keeps the types
    that printing drops."""
    return rhs, show(rhs)
