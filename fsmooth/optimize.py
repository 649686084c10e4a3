"""F̃ simplification, DPS paper §3.5 stage 1: the passes the options enable, to a fixed point.

    inline_kernels ─▶ inline_lets_and_fusion (filters too: ``fsmooth.filter_fusion``) ─▶ constant_folding ─▶ cse ─▶ dce ─▶ licm
    ─▶ guards_to_bounds ─▶ (again, until nothing changes)

each a named rewrite (``kernel_rewrites``), which the driver reports as its own pass.

Input and output are the ANF programs of ``fsmooth.anf.anf_program``.  Every pass is a
pure function of a kernel body; after each, ``anf_kernel`` renormalises (β-reduces the
``f i`` fusion leaves, flattens nested lets, renames apart), which on a kernel that is already
in ANF with unique binders changes nothing, so "nothing changed" is plain equality.

Kernels are optimised callees first, so a call is inlined with its callee's optimised body and
one sweep over the program suffices.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

from . import core
from .constant_folding import fold_constants
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .filter_fusion import fuse_filters
from .fusion import fuse, inline_lets
from .guards_to_bounds import bound_guarded_folds
from .licm import hoist_loop_invariants
from .inline_kernels import inline_small_kernels
from .options import Options
from .anf import anf_kernel


KernelRewrite = Callable[[core.Program, core.KernelDef], core.KernelDef]


def optimize_program(p: core.Program, options: Options,
                     after: Callable[[str, core.Program], None] = lambda rewrite, program: None) -> core.Program:
    """``after(name, program)`` is told the program each time the rewrite ``name`` changes a kernel
    (``fsmooth.driver`` verifies and records it)."""
    kernels = dict(p.kernels)
    for name in core.callees_first(p):
        kernels[name] = optimize_kernel(core.Program(kernels, p.entry), kernels[name], options,
                                        lambda rewrite, k: after(rewrite, core.Program({**kernels, k.name: k}, p.entry)))
    return core.Program(kernels, p.entry)


def optimize_kernel(program: core.Program, k: core.KernelDef, options: Options,
                    after: Callable[[str, core.KernelDef], None]) -> core.KernelDef:
    rewrites = kernel_rewrites(options)
    # Rounds of every rewrite in order until none changes k.  Each is a pure function of the
    # kernel, so once the rewrites since the last change, all of them, have each left k as it
    # is, a further round would too: the fixed point is found without finishing its round.
    unchanged = 0
    for name, rewrite in itertools.cycle(rewrites):
        if unchanged == len(rewrites):
            break
        rewritten = rewrite(program, k)
        unchanged = unchanged + 1 if rewritten == k else 0
        if not unchanged:
            after(name, rewritten)
        k = rewritten
    return k


def kernel_rewrites(options: Options) -> tuple[tuple[str, KernelRewrite], ...]:
    """The rewrites ``options`` enable, by name, in the order each round applies them."""
    def inline_and_fuse(e: core.Expr) -> core.Expr:
        # No renormalisation between the two: a build that inline_lets puts into its read must
        # meet fusion before ANF would let-bind it again, now inside the reader's loop.
        if options.inline_lets:
            e = inline_lets(e, into_reads=options.fusion)
        return fuse_filters(fuse(e)) if options.fusion else e

    def renormalised(rewrite: Callable[[core.Expr], core.Expr]) -> KernelRewrite:
        def run(program: core.Program, k: core.KernelDef) -> core.KernelDef:
            body = rewrite(k.body)
            # k is in ANF with unique binders (the optimiser's input, or anf_kernel's output), on
            # which anf_kernel is the identity: a body left as it was needs no renormalising
            return k if body == k.body else anf_kernel(program, replace(k, body=body))
        return run

    return tuple((name, rewrite) for enabled, name, rewrite in (
        (options.inline_kernels, "inline_kernels",
         lambda program, k: inline_small_kernels(program, k, in_place=options.update_in_place,
                                                 into_reductions=options.jam_reductions)),
        (options.inline_lets or options.fusion, "inline_lets_and_fusion", renormalised(inline_and_fuse)),
        (options.constant_folding, "constant_folding", renormalised(fold_constants)),
        (options.cse, "cse", renormalised(eliminate_common_subexpressions)),
        (options.dce, "dce", renormalised(eliminate_dead_code)),
        (options.licm, "licm", renormalised(hoist_loop_invariants)),
        (options.guards_to_bounds, "guards_to_bounds", renormalised(bound_guarded_folds)),
    ) if enabled)


REWRITES = tuple(name for name, _ in kernel_rewrites(Options()))
"""The names of every rewrite, in order (the default options enable them all)."""
