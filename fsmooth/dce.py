"""Dead-code elimination: a let whose variable is not used is dropped.

Every F̃ expression is pure, so dropping an unused one changes no result.  One thing can be
lost: a read ``a[i]`` out of range (or a call whose size check would fail) that nothing uses no
longer fails; that is accepted, as a C compiler drops an unused load.
"""
from __future__ import annotations

from .core import Expr, Let, free_vars, map_children


def eliminate_dead_code(e: Expr) -> Expr:
    match e:
        case Let(name, rhs, body, ty):
            body = eliminate_dead_code(body)
            if name not in free_vars(body):
                return body
            return Let(name, eliminate_dead_code(rhs), body, ty, e.loc)
    return map_children(eliminate_dead_code, e)
