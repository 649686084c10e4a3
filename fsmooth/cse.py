"""Common-subexpression elimination on ANF: a let whose right-hand side is already bound in
scope reuses that binding.

Every F̃ expression is pure, so equal right-hand sides (equal as trees, which in ANF means
equal operands) have equal values.  What is available flows into lambda bodies and branches,
where reusing an outer binding moves no work; what is bound inside a lambda or a branch is not
available after it, so nothing is hoisted out of a loop or a branch.
"""
from __future__ import annotations

from .core import Expr, Let, Var, is_atom, map_children, show


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
    return map_children(lambda child: eliminate_common_subexpressions(child, available, reused), e)


def _key(rhs: Expr) -> tuple:
    """Equal keys, equal values.  The printed form joins the tree because ``0.0 == -0.0`` in
    Python (so ``x * 0.0`` and ``x * -0.0`` are equal trees), while the tree keeps the types
    that printing drops."""
    return rhs, show(rhs)
