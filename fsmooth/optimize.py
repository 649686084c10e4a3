"""F̃ simplification, DPS paper §3.5 stage 1: the passes the options enable, to a fixed point.

    inline_kernels ─▶ inline_lets ─▶ fusion ─▶ constant_folding ─▶ cse ─▶ dce ─▶ (again, until
    nothing changes)

Input and output are the ANF programs of ``fsmooth.anf.anf_program``.  Every pass is a
pure function of a kernel body; after each, ``anf_kernel`` renormalises (β-reduces the
``f i`` fusion leaves, flattens nested lets, renames apart), which on a kernel that is already
in ANF with unique binders changes nothing, so "nothing changed" is plain equality.

Kernels are optimised callees first, so a call is inlined with its callee's optimised body and
one sweep over the program suffices.
"""
from __future__ import annotations

from dataclasses import replace

from . import core
from .constant_folding import fold_constants
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fusion import fuse, inline_lets
from .inline_kernels import inline_small_kernels
from .options import Options
from .anf import anf_kernel


def optimize_program(p: core.Program, options: Options) -> core.Program:
    kernels = dict(p.kernels)
    for name in core.callees_first(p):
        kernels[name] = optimize_kernel(core.Program(kernels, p.entry), kernels[name], options)
    return core.Program(kernels, p.entry)


def optimize_kernel(program: core.Program, k: core.KernelDef, options: Options) -> core.KernelDef:
    def inline_and_fuse(e: core.Expr) -> core.Expr:
        # No renormalisation between the two: a build that inline_lets puts into its read must
        # meet fusion before ANF would let-bind it again, now inside the reader's loop.
        if options.inline_lets:
            e = inline_lets(e, into_reads=options.fusion)
        return fuse(e) if options.fusion else e

    rewrites = [rewrite for enabled, rewrite in (
        (options.inline_lets or options.fusion, inline_and_fuse),
        (options.constant_folding, fold_constants),
        (options.cse, eliminate_common_subexpressions),
        (options.dce, eliminate_dead_code),
    ) if enabled]
    while True:
        before = k
        if options.inline_kernels:
            k = inline_small_kernels(program, k)
        for rewrite in rewrites:
            k = anf_kernel(program, replace(k, body=rewrite(k.body)))
        if k == before:
            return k
