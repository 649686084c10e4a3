"""The call graph of an F̃ program: which kernels a body calls, and an order of the kernels
with every callee before its callers (F̃ has no recursion)."""
from __future__ import annotations

from . import core
from .anf import children


def called_kernels(e: core.Expr) -> frozenset[str]:
    here = frozenset([e.fn]) if isinstance(e, core.Call) else frozenset()
    return here.union(*(called_kernels(child) for child in children(e)))


def callees_first(p: core.Program) -> list[str]:
    """The kernels of ``p``, each after every kernel it calls."""
    order: list[str] = []

    def visit(name: str):
        if name not in order:
            for callee in sorted(called_kernels(p.kernels[name].body)):
                visit(callee)
            order.append(name)

    for name in p.kernels:
        visit(name)
    return order
