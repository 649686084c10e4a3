"""Storage simplification of DPS-F̃ (DPS paper Fig. 9).

Each local rule is a function from a term (and the ``UseSets`` of the rewrite) to its rewrite, or
None where it does not apply; ``simplify_allocs`` applies ``RULES`` bottom-up until none applies.  Then, as the options
ask: the outermost builds are marked parallel and every kernel given a thread count
(``dps.parallel``), allocs are hoisted out of
loops (``dps.hoist``) and consecutive allocs merged (``dps.merge``); last, the regions are
laid out again (offsets and scratch shrink with every removed region).
"""
from __future__ import annotations

import functools
from dataclasses import replace

import sympy

from fsmooth.options import Options

from . import ir
from .hoist import hoist_allocs
from .layout import layout_program
from .merge import merge_allocs
from .parallel import parallelise
from .terms import UseSets, ifold_buffers, map_own_refs


# ----------------------------------------------------------------------------- rules

def empty_allocation(t: ir.Term, uses: UseSets) -> ir.Term | None:
    """alloc ∘ (λ r. t1)  ⤳  t1[r ↦ •]: the substitution is made as ``rewrite`` rebuilds each
    term of t1 (``emptied_regions``), so that removing a run of n empty allocs walks no body n
    times; here the alloc only goes."""
    match t:
        case ir.Alloc(_, _, _, body, _, ()):
            return body
    return None


def dead_allocation(t: ir.Term, uses: UseSets) -> ir.Term | None:
    """alloc t1 (λ r. t2)  ⤳  t2   if r ∉ FV t2"""
    match t:
        case ir.Alloc(region, _, _, body) if region not in uses.regions(body):
            return body
    return None


def cardinality(t: ir.Term, uses: UseSets) -> ir.Term | None:
    """Cardinality simplification: every size in its simplest sympy form."""
    def card(e):
        return simplest(e) if isinstance(e, sympy.Basic) else e

    def ref(r):
        return ir.Offset(r.base, card(r.elems)) if isinstance(r, ir.Offset) else r

    match t:
        case ir.Alloc(_, _, n) if card(n) != n:
            return replace(t, count=card(n))
        case ir.Build(dest, n) if card(n) != n or ref(dest) != dest:
            return replace(t, dest=ref(dest), size=card(n))
        case ir.Copy(dest, _, n) if card(n) != n or ref(dest) != dest:
            return replace(t, dest=ref(dest), count=card(n))
        case ir.CardOf(value) if card(value) != value:
            return ir.CardOf(card(value))
    return None


@functools.lru_cache(maxsize=4096)
def simplest(e: sympy.Basic) -> sympy.Basic:
    """``sympy.simplify(e)``, once per expression: the rules meet the same sizes again and again
    (every rewrite revisits the terms below it), and simplify is by far their dearest step."""
    return sympy.simplify(e)


def dead_cardinality(t: ir.Term, uses: UseSets) -> ir.Term | None:
    """let x = e in t  ⤳  t   if x ∉ FV t and e only computes a shape: a cardinality known
    symbolically, or the view or element that ``length`` was taken of (an unchecked read, in
    range by the kernel's size constraints).  After D⟦·⟧ every size is a symbolic expression,
    so the ANF's ``let tmp = length v`` is left dead: removing it leaves no shape computation
    at run time (§3.5)."""
    match t:
        case ir.Let(name, ir.CardOf() | ir.Get(checked=False), body) if name not in uses.names(body):
            return body
    return None


RULES = (empty_allocation, dead_allocation, cardinality, dead_cardinality)


def rewrite(t: ir.Term, uses: UseSets, emptied: frozenset[str]) -> ir.Term:
    """``t`` with ``RULES`` applied until none applies, and the refs of the ``emptied`` regions
    (``empty_allocation``) made •.  Each node is rewritten once, after its children: a rule's
    result needs the rules again only at its root, because its sub-terms are rewritten ones (the
    body of the removed alloc or let; the same children with simpler sizes)."""
    t = ir.map_children(lambda u: rewrite(u, uses, emptied), t)
    t = map_own_refs(t, lambda ref: ir.Bullet() if isinstance(ref, ir.RVar) and ref.name in emptied else ref)
    while True:
        for rule in RULES:
            new = rule(t, uses)
            if new is not None:
                t = new
                break
        else:
            return t


def emptied_regions(t: ir.Term) -> frozenset[str]:
    """The regions of the empty allocations in ``t`` (``empty_allocation``): D⟦·⟧ names every
    region of a kernel afresh, so each name is bound once and its refs are all inside its alloc."""
    return frozenset(u.region for u in ir.walk(t) if isinstance(u, ir.Alloc) and u.dims == ())


def simplify_kernel(k: ir.Kernel, options: Options) -> ir.Kernel:
    """Hoisting and merging of allocs in ``k``, after the rules."""
    body = k.body
    if options.hoist_allocs:
        body = hoist_allocs(body, frozenset(s.name for s in k.sizes), k.threads)
    if options.merge_allocs:
        body = merge_allocs(body, frozenset(ifold_buffers(body)))
    return replace(k, body=body)


def simplify_allocs(p: ir.Program, options: Options = Options()) -> ir.Program:
    """The rules of Fig. 9 on every kernel, then the layout of its regions (``Kernel.scratch``)."""
    p = ir.Program({name: replace(k, body=rewrite(k.body, UseSets(), emptied_regions(k.body)))
                    for name, k in p.kernels.items()}, p.entry)
    if options.parallel:  # a decision over the call graph: which kernels run inside a parallel loop
        p = parallelise(p)
    kernels = {name: simplify_kernel(k, options) for name, k in p.kernels.items()}
    return layout_program(ir.Program(kernels, p.entry))
