"""Storage simplification of DPS-F̃ (DPS paper Fig. 9).

Each rule is a function from a term to its rewrite, or None where it does not apply;
``simplify_allocs`` applies ``RULES`` bottom-up until none applies, then lays the regions
out again (offsets and scratch shrink with every removed region).  Allocation merging
and hoisting are further entries of ``RULES``.
"""
from __future__ import annotations

import sympy

from fsmooth.options import Options

from . import ir
from .layout import layout_program


# ----------------------------------------------------------------------------- traversal

def _children(t: ir.Term, f) -> ir.Term:
    """``t`` with ``f`` applied to each sub-term."""
    match t:
        case ir.Let(name, rhs, body, ty, dims):
            return ir.Let(name, f(rhs), f(body), ty, dims)
        case ir.If(c, a, b, ty):
            return ir.If(c, f(a), f(b), ty)
        case ir.Alloc(region, elem, n, body, offset, dims):
            return ir.Alloc(region, elem, n, f(body), offset, dims)
        case ir.Build(dest, n, i, body, ty):
            return ir.Build(dest, n, i, f(body), ty)
        case ir.Ifold(dest, s, i, body, init, n, ty, buffers, dims):
            return ir.Ifold(dest, s, i, f(body), f(init), n, ty, buffers, dims)
    return t


def _refs(t: ir.Term, f) -> ir.Term:
    """``t`` with ``f`` applied to every destination ref in it."""
    match t:
        case ir.Build(dest, n, i, body, ty):
            return ir.Build(f(dest), n, i, _refs(body, f), ty)
        case ir.Ifold(dest, s, i, body, init, n, ty, buffers, dims):
            return ir.Ifold(f(dest), s, i, _refs(body, f), _refs(init, f), n, ty, buffers, dims)
        case ir.Copy(dest, src, n, elem):
            return ir.Copy(f(dest), src, n, elem)
        case ir.Call(fn, dest, args, ty, offset, check):
            return ir.Call(fn, f(dest), args, ty, offset, check)
    return _children(t, lambda u: _refs(u, f))


def _base(ref: ir.Ref) -> ir.Ref:
    return _base(ref.base) if isinstance(ref, ir.Offset) else ref


def subterms(t: ir.Term):
    """``t`` and every term inside it."""
    yield t
    inner: list = []
    _children(t, lambda u: inner.append(u) or u)
    for u in inner:
        yield from subterms(u)


def regions_used(t: ir.Term) -> set[str]:
    used: set[str] = set()

    def see(ref):
        if isinstance(_base(ref), ir.RVar):
            used.add(_base(ref).name)
        return ref

    _refs(t, see)
    for u in subterms(t):
        if isinstance(u, ir.Ifold) and u.buffers:
            used.update(u.buffers)
    return used


# ----------------------------------------------------------------------------- rules

def empty_allocation(t: ir.Term) -> ir.Term | None:
    """alloc ∘ (λ r. t1)  ⤳  t1[r ↦ •]"""
    match t:
        case ir.Alloc(region, _, _, body, _, ()):
            return _refs(body, lambda ref: ir.Bullet() if ref == ir.RVar(region) else ref)
    return None


def dead_allocation(t: ir.Term) -> ir.Term | None:
    """alloc t1 (λ r. t2)  ⤳  t2   if r ∉ FV t2"""
    match t:
        case ir.Alloc(region, _, _, body) if region not in regions_used(body):
            return body
    return None


def cardinality(t: ir.Term) -> ir.Term | None:
    """Cardinality simplification: every size in its simplest sympy form."""
    def card(e):
        return sympy.simplify(e) if isinstance(e, sympy.Basic) else e

    def ref(r):
        return ir.Offset(r.base, card(r.elems)) if isinstance(r, ir.Offset) else r

    match t:
        case ir.Alloc(region, elem, n, body, offset, dims) if card(n) != n:
            return ir.Alloc(region, elem, card(n), body, offset, dims)
        case ir.Build(dest, n, i, body, ty) if card(n) != n or ref(dest) != dest:
            return ir.Build(ref(dest), card(n), i, body, ty)
        case ir.Copy(dest, src, n, elem) if card(n) != n or ref(dest) != dest:
            return ir.Copy(ref(dest), src, card(n), elem)
        case ir.CardOf(value) if card(value) != value:
            return ir.CardOf(card(value))
    return None


RULES = (empty_allocation, dead_allocation, cardinality)


def rewrite(t: ir.Term) -> ir.Term:
    t = _children(t, rewrite)
    for rule in RULES:
        new = rule(t)
        if new is not None:
            return rewrite(new)
    return t


def simplify_allocs(p: ir.Program, options: Options = Options()) -> ir.Program:
    kernels = {name: ir.Kernel(k.name, k.dest, k.params, k.result, k.result_dims, rewrite(k.body), k.sizes,
                               k.constraints)
               for name, k in p.kernels.items()}
    return layout_program(ir.Program(kernels, p.entry))
