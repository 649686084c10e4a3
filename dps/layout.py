"""Regions on the arena: static offsets (stack discipline) and each kernel's exact peak.

A region lives for the scope of its ``alloc``, so the regions live at a point are
exactly those of the enclosing allocs: the offset of a region is the sum of their sizes
(each rounded up to ``ALIGN``), a callee's scratch starts at the top of the stack at the
call, and the peak of a kernel is the largest top over all points -- a sympy ``Max``
over branches and sequential parts.  Sequential loop bodies reuse one place per iteration;
each thread of a parallel build or reduction has a frame of its own (the body's peak, rounded up to whole
pages, ``dps.parallel.PAGE``), side by side, which its iterations reuse one after another, so no arena byte is
shared by concurrent iterations (``dps.parallel``): the peak is the kernel's thread count less
one times the frame, plus the body's peak (the last frame needs no padding), not the build's
trip count times it.  A region kept in a C local (``dps.local_arrays``) takes no arena bytes.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import sympy

from fsmooth.core import Var
from fsmooth.errors import CompileError
from fsmooth.types import BYTES, Card
from fsmooth.shape.sizes import size_symbol

from . import ir
from .parallel import THREAD, thread_slice
from .ranges import min_max, signs_taken, substitute


def region_bytes(elem, count) -> sympy.Expr:
    """The bytes of ``count`` scalars of ``elem``, rounded up to ALIGN."""
    return ir.ALIGN * sympy.ceiling(sympy.Integer(BYTES[elem]) * count / ir.ALIGN)


def _max(*xs) -> sympy.Expr:
    """Max, dropping every term another one provably bounds (sympy cannot see through ceiling)."""
    terms = []
    for x in xs:
        terms.extend(x.args if isinstance(x, sympy.Max) else (x,))
    kept: list = []
    for x in terms:
        if any(y == x or at_least(y, x) for y in kept):
            continue
        kept = [y for y in kept if not at_least(x, y)] + [x]
    return kept[0] if len(kept) == 1 else min_max(sympy.Max, kept)


@lru_cache(maxsize=4096)
def at_least(a: sympy.Expr, b: sympy.Expr) -> bool:
    """a ≥ b for all sizes, treating each ceiling (of a byte count, nonnegative) as an unknown
    nonnegative integer.  Memoised, and refuted at a few points first (``ranges.signs_taken``):
    the peaks of a kernel's branches are compared pairwise, and sympy takes long to find a large
    sum not provably nonnegative.  A point where a < b, each ceiling at its value there, is one
    where the difference with unknown ceilings is negative too: refuted before anything is expanded."""
    if signs_taken(a - b)[1]:
        return False
    diff = sympy.expand(a - b)
    ceilings = {c: sympy.Dummy(integer=True, nonnegative=True) for c in diff.atoms(sympy.ceiling)}
    diff = sympy.expand(substitute(diff, ceilings))
    if signs_taken(diff)[1]:
        return False
    return bool(diff.is_nonnegative)


class _Scope:
    """What a call needs to size its callee's scratch: the dims and Card values of atoms."""

    def __init__(self, kernel: ir.Kernel, kernels: dict):
        self.kernels = kernels
        # The thread count less one, as a symbol of its own while the peaks are compared: it is
        # nonnegative (the thread count is at least 1), which ``at_least`` can then see.
        self.threads = None if kernel.threads is None else size_symbol(kernel.threads)
        self.other_threads = None if kernel.threads is None else size_symbol(f"{kernel.threads}−1")
        self.dims = {n: d for n, _, d in kernel.params if d}
        self.cards = {n: sympy.Symbol(n, integer=True, nonnegative=True) for n, t, d in kernel.params
                      if t == Card}

    def callee_scratch(self, call: ir.Call) -> sympy.Expr:
        if not isinstance(call.fn, str):  # a foreign function never allocates
            return sympy.Integer(0)
        callee = self.kernels[call.fn]
        mapping = {}
        for (pname, pty, pdims), a in zip(callee.params, call.args):
            if pdims:
                mapping.update(zip(pdims, self.dims[a.name]))
            elif pty == Card:
                value = self.cards.get(a.name) if isinstance(a, Var) else sympy.Integer(a.value)
                if value is None:
                    raise CompileError(f"the memory that {call.fn} needs depends on the data passed as "
                                       f"its argument {pname}")
                mapping[sympy.Symbol(pname, integer=True, nonnegative=True)] = value
        return substitute(callee.scratch, mapping)


def _layout(t: ir.Term, top: sympy.Expr, scope: _Scope) -> tuple[ir.Term, sympy.Expr]:
    """(t with offsets filled, the peak arena use of t when the stack top is ``top``)."""
    match t:
        case ir.Alloc(offset=None):  # a C local (dps.local_arrays): none of the arena
            body2, peak = _layout(t.body, top, scope)
            return replace(t, body=body2), peak
        case ir.Alloc(region, elem, n, body, _, dims, per_thread):
            # threads' copies a page apart (parallel.PAGE; the arena starts on a cache line): copies that
            # shared a line, or a page, would have two cores taking its lines from each other
            start = thread_slice(top) if per_thread else top
            end = start + region_bytes(elem, n)
            body2, peak = _layout(body, end, scope)
            return ir.Alloc(region, elem, n, body2, start, dims, per_thread), _max(end, peak)
        case ir.Call():
            return ir.Call(t.fn, t.dest, t.args, t.ty, top, t.check_sizes), top + scope.callee_scratch(t)
        case ir.Let(name, rhs, body, ty, dims):
            if dims:
                scope.dims[name] = dims
            if isinstance(rhs, ir.CardOf):
                scope.cards[name] = rhs.value
            rhs2, p1 = _layout(rhs, top, scope)
            body2, p2 = _layout(body, top, scope)
            return ir.Let(name, rhs2, body2, ty, dims), _max(p1, p2)
        case ir.If(c, a, b, ty):
            a2, p1 = _layout(a, top, scope)
            b2, p2 = _layout(b, top, scope)
            return ir.If(c, a2, b2, ty), _max(p1, p2)
        case ir.Build(parallel=True) | ir.Ifold(parallel=True):
            # concurrent iterations: each thread gets its own frame, the body's peak, on pages
            # of its own above top (a reduction's init runs before, at top)
            init, init_peak = _layout(t.init, top, scope) if isinstance(t, ir.Ifold) else (None, top)
            _, peak = _layout(t.body, sympy.Integer(0), scope)
            if peak == 0:  # no frames
                body, frames = _layout(t.body, top, scope)[0], top
            else:
                frame, base = thread_slice(peak), thread_slice(top)
                body, _ = _layout(t.body, base + THREAD * frame, scope)
                # the last thread's slice needs no padding after it
                frames = base + scope.other_threads * frame + peak
            if isinstance(t, ir.Ifold):
                return replace(t, body=body, init=init), _max(init_peak, frames)
            return replace(t, body=body), frames
        case ir.Build(_, _, _, body) | ir.Filter(body=body):
            body2, peak = _layout(body, top, scope)
            return replace(t, body=body2), peak
        case ir.Ifold(state=s, body=body, init=init, dims=dims):
            if dims:
                scope.dims[s] = dims
            body2, p1 = _layout(body, top, scope)
            init2, p2 = _layout(init, top, scope)
            return replace(t, body=body2, init=init2), _max(p1, p2)
    return t, top


def layout_kernel(k: ir.Kernel, kernels: dict) -> ir.Kernel:
    """``k`` with its offsets and scratch; ``kernels`` holds its callees, already laid out."""
    scope = _Scope(k, kernels)
    body, peak = _layout(k.body, sympy.Integer(0), scope)
    if scope.threads is not None:
        peak = peak.xreplace({scope.other_threads: scope.threads - 1})
    return replace(k, body=body, scratch=peak)


def layout_program(p: ir.Program) -> ir.Program:
    """Offsets of every region and call, and the scratch of every kernel (callees first)."""
    kernels: dict = {}
    for name, k in p.kernels.items():
        kernels[name] = layout_kernel(k, kernels)
    return ir.Program(kernels, p.entry)
