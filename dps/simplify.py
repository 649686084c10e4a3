"""Storage simplification of DPS-F̃ (DPS paper Fig. 9).

Each local rule is a function from a term (and the ``UseSets`` of the rewrite) to its rewrite, or
None where it does not apply; ``simplify_allocs`` applies ``RULES`` bottom-up until none applies.  Then, as the options
ask: the outermost builds are marked parallel and every kernel given a thread count
(``dps.parallel``), allocs are hoisted out of
loops (``dps.hoist``) and consecutive allocs merged (``dps.merge``), where for C the small
arrays of a constant size stay in place as C locals (``dps.local_arrays``); last, the regions are
laid out again (offsets and scratch shrink with every removed region).

Fig. 9's cardinality simplification needs no rule here: every size is built in sympy's canonical
form (the shape translation's partial evaluation, sympy's own evaluation of each operation).
``sympy.simplify`` of each size, the rule this was, took most of this pass's time (seconds for a
strategy kernel, issue 11) and changed two sizes of the whole corpus, a strategy's per-thread trip
count ``floor((1024 g + m - 1)/(1024 g))`` to ``floor((g + m/1024 - 1/1024)/g)``, which print as
the same C.
"""
from __future__ import annotations

from dataclasses import replace

from fsmooth.options import Options
from fsmooth.types import ArrayT

from . import ir
from .hoist import hoist_allocs
from .in_place import result_over_dead_array, update_in_place
from .layout import layout_program
from .local_arrays import local_arrays
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


RULES = (empty_allocation, dead_allocation, dead_cardinality)


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


def simplify_kernel(k: ir.Kernel, options: Options, locals_: bool = False, in_place: bool = False) -> ir.Kernel:
    """Hoisting and merging of allocs in ``k``, after the rules; ``in_place``: first its ifolds
    that can update their state in place do (``dps.in_place``); ``locals_``: its small arrays
    become C locals, which stay where they are (``dps.local_arrays``)."""
    body = update_in_place(k.body, row_locals=locals_) if in_place else k.body
    if in_place and isinstance(k.result, ArrayT):
        body = result_over_dead_array(body, k.dest, k.result_dims, row_locals=locals_)
    body = local_arrays(body) if locals_ else body
    if options.hoist_allocs:
        body = hoist_allocs(body, frozenset(s.name for s in k.sizes), k.threads)
    if options.merge_allocs:
        body = merge_allocs(body, frozenset(ifold_buffers(body)))
    return replace(k, body=body)


def simplify_allocs(p: ir.Program, options: Options = Options(), c_locals: bool = False) -> ir.Program:
    """The rules of Fig. 9 on every kernel, then the layout of its regions (``Kernel.scratch``);
    ``c_locals``: the program is for the C back end, whose ``arena`` variant keeps small arrays of
    a constant size in C locals (``dps.local_arrays``) and whose ifolds may update their state in
    place (``dps.in_place``, which the OpenCL back end does not print)."""
    p = ir.Program({name: replace(k, body=rewrite(k.body, UseSets(), emptied_regions(k.body)))
                    for name, k in p.kernels.items()}, p.entry)
    if options.parallel:  # a decision over the call graph: which kernels run inside a parallel loop
        p = parallelise(p)
    locals_ = c_locals and options.allocation == "arena"
    in_place = c_locals and options.update_in_place
    kernels = {name: simplify_kernel(k, options, locals_, in_place) for name, k in p.kernels.items()}
    return layout_program(ir.Program(kernels, p.entry))
