"""Allocation hoisting out of lambdas (DPS paper Fig. 9):

    λ x. alloc t1 (λ r. t2)  ⤳  alloc t1 (λ r. λ x. t2)    if x ∉ FV t1

The lambdas that matter are the bodies of ``build`` and ``ifold``: a region allocated in one,
whose size depends on the kernel's sizes only, is allocated once around the loop instead of
once per iteration.  An alloc floats up to the loop through the lets, conditionals and other
allocs of the body; applied bottom-up, a region in nested loops floats out of all of them.

A sequential loop (a build or an ifold that is not parallel) shares the one region among
its iterations: what an iteration keeps in it is dead when the iteration ends (its result is
in the build's element or the ifold's state).  A parallel loop's threads (a build's, or a
reduction's, ``dps.parallel``) run at once, so a region hoisted out of it holds one copy per
thread, each ``count`` elements padded to whole pages (``dps.parallel.PAGE``), ``threads`` of them (the kernel's
thread count), the thread numbered ``THREAD`` using ``Offset(r, THREAD × slice)`` for each of
its iterations in turn (``dps.parallel``): DPIA §6.4 hoists ``new`` out of ``parfor`` the same
way, per work-item.  The two buffers of an array-state ifold are named by the ifold rather than
ref'd, so they cannot be given an offset: they stay in a parallel build's body, where the
layout gives each thread a frame of its own.
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from fsmooth.shape.sizes import size_symbol
from fsmooth.types import BYTES

from . import ir
from .parallel import THREAD, thread_slice
from .terms import ifold_buffers, rebase


def hoist_allocs(t: ir.Term, sizes: frozenset[str], threads: str | None = None) -> ir.Term:
    """``t`` with every alloc whose size is over ``sizes`` (the kernel's size symbols) out of
    the loops around it; ``threads``: the kernel's thread count, where it has parallel builds."""
    t = ir.map_children(lambda u: hoist_allocs(u, sizes, threads), t)
    if not isinstance(t, (ir.Build, ir.Ifold, ir.Filter)):  # a filter's predicate runs per element
        return t
    # a parallel build or reduction: its threads run at once (a filter never does)
    parallel = not isinstance(t, ir.Filter) and t.parallel
    body, lifted = _float(t.body, sizes, ifold_buffers(t.body) if parallel else frozenset())
    if parallel:
        for a in lifted:
            body = rebase(body, a.region, ir.RVar(a.region), THREAD * _slice_elems(a))
        lifted = [_per_thread(a, size_symbol(threads)) for a in lifted]
    loop: ir.Term = replace(t, body=body)
    for a in reversed(lifted):
        loop = replace(a, body=loop)
    return loop


def _per_thread(a: ir.Alloc, threads: sympy.Symbol) -> ir.Alloc:
    """The region ``a`` once for each of ``threads`` threads, side by side, each on pages
    of its own (the last one unpadded; no dims: padding is not part of a value)."""
    return replace(a, count=_slice_elems(a) * (threads - 1) + a.count, dims=None, per_thread=True)


def _slice_elems(a: ir.Alloc) -> sympy.Expr:
    """The elements of one thread's copy of region ``a``: whole pages (``thread_slice``)."""
    return thread_slice(a.count * BYTES[a.elem]) / BYTES[a.elem]


def _float(t: ir.Term, sizes: frozenset[str], fixed: frozenset[str]) -> tuple[ir.Term, list[ir.Alloc]]:
    """(``t`` without the allocs that can leave the loop body it is in, those allocs, outermost
    first; each still carries its old body, which the caller replaces)."""
    match t:
        case ir.Alloc(region, _, n, body, offset):
            body, lifted = _float(body, sizes, fixed)
            # a C local (offset None, dps.local_arrays) stays where it is: it costs no allocation
            if offset is not None and region not in fixed and {s.name for s in n.free_symbols} <= sizes:
                return body, [t, *lifted]
            return replace(t, body=body), lifted
        case ir.Let(_, rhs, body):
            rhs, lifted_rhs = _float(rhs, sizes, fixed)
            body, lifted_body = _float(body, sizes, fixed)
            return replace(t, rhs=rhs, body=body), lifted_rhs + lifted_body
        case ir.If(_, a, b):
            a, lifted_a = _float(a, sizes, fixed)
            b, lifted_b = _float(b, sizes, fixed)
            return replace(t, then=a, orelse=b), lifted_a + lifted_b
        case ir.Ifold(init=init):  # a nested loop: its init runs once per iteration of ours
            init, lifted = _float(init, sizes, fixed)
            return replace(t, init=init), lifted
    return t, []
