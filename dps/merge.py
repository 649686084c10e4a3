"""Allocation merging (DPS paper Fig. 9):

    alloc t1 (λ r1. alloc t2 (λ r2. t3))  ⤳  alloc (t1 +c t2) (λ r1. t3[r2 ↦ stgOff r1 t1])

One region instead of two consecutive ones, the second at an offset in the first (one
``malloc`` where the allocation is a call; one alignment gap less on the arena).  Offsets
count elements of the accessor, so only regions of one element type merge, and the buffers
an array-state ifold names cannot move into another region, and a C local (``dps.local_arrays``)
stays one: it has no place in the arena, and merged into a region it would take one.  Applied bottom-up, a run of
consecutive allocs becomes one.
"""
from __future__ import annotations

from dataclasses import replace

from . import ir
from .terms import rebase


def merge_allocs(t: ir.Term, fixed: frozenset[str]) -> ir.Term:
    """``t`` with its consecutive allocs merged; ``fixed``: the regions that must stay apart."""
    t = ir.map_children(lambda u: merge_allocs(u, fixed), t)
    match t:
        case ir.Alloc(r1, elem, n1, ir.Alloc(r2, elem2, n2, body, o2), o1) \
                if elem == elem2 and r1 not in fixed and r2 not in fixed and None not in (o1, o2):
            return replace(t, count=n1 + n2, body=rebase(body, r2, ir.RVar(r1), n1), dims=None)
    return t
