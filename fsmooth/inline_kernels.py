"""Inlining of calls of small kernels (DPS paper §2.2: fusion across library functions).

Helper kernels (those taking functions) are always inlined by ``fsmooth.anf``; this pass
also inlines a call of a non-helper kernel whose body, already optimised, is small.  That is
what lets fusion see through ``vectorNorm (vectorAdd vec1 vec2)``; a kernel too big to inline
keeps its call, and its argument and result arrays stay intermediates that DPS allocates (the
paper's "library function that is too big to inline").

The callee kept in the program is unchanged: it is still compiled and exported on its own.
"""
from __future__ import annotations

from . import core
from .anf import anf_kernel
from .core import Expr, called_kernels, children
from fsmooth.shape.filters import returns_filter

SMALL_KERNEL = 100
"""Largest body, in expression nodes after its own optimisation (its callees inlined), of a kernel
whose calls are inlined: a body this size is a few dozen lines of C, so the copies stay cheap.
Not raised, by callgrind's count on ADBench's objectives (portable builds, issue 11): at 600,
BA's objective runs 9 % fewer instructions (Rodrigues' rotation, 298 nodes, and ``project``, 429
with it, inlined into the loop over the observations), GMM 27 % fewer at d=2, K=5 and LSTM 3 %
fewer, but GMM 17 % more at d=20, K=25 (``main_terms``, 141, inlined into the fold over the
points): a limit on size alone cannot take the first without the last."""


def size(e: Expr) -> int:
    return 1 + sum(size(child) for child in children(e))


def inline_small_kernels(program: core.Program, k: core.KernelDef) -> core.KernelDef:
    """``k`` with every call of a small kernel of ``program`` replaced by the callee's body
    (renamed apart, arguments bound by let), in ANF."""
    # a filter's length is known only at run time: one returned is always inlined (shape.filters)
    small = frozenset(name for name in called_kernels(k.body)
                      if size(program.kernels[name].body) <= SMALL_KERNEL or returns_filter(program.kernels[name].body))
    return anf_kernel(program, k, inline=small) if small else k
