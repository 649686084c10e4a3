"""Small arrays of a size known when compiling stay out of the arena: each is a local array of its
kernel's C function (``double r[3];``), declared where its alloc is, with no arena offset
(``Alloc.offset`` None).

What is small is decided here for both back ends (``small_constant_size``): the OpenCL strategy
keeps such an array in a work-item's private memory (``dpia.strategy_check.private_by_default``),
the C back end in a local of the function.  Either way the array is one loop iteration's own and
the C compiler can keep its elements in registers (scalar replacement), which it cannot do for a
region at an offset in the caller's scratch: those stores and loads are memory.  In C every
alloc is its own scope's (a local declared in a loop body is one place that each trip reuses, a
local in an OpenMP loop body is each thread's), so only the size decides.

Only the ``arena`` variant has locals: the ``malloc``, ``leaky`` and ``gc`` variants take every
region from the heap, which is what the DPS paper's ladder of variants measures (§5).  A local is
neither hoisted out of its loops (``dps.hoist``: hoisting saves only arena offsets and heap
calls, and a local costs neither) nor merged with another region (``dps.merge``), and the layout
gives it no bytes of the scratch (``dps.layout``), so ``Kernel.scratch`` shrinks by exactly the
bytes of the regions that became locals.

The stack a call needs stays bounded: each local is at most ``SMALL_ARRAY_BYTES``, a C function
holds its own locals in one frame (however deeply nested in loops: one place per local), and F̃
has no recursion, so a call's stack is at most the limit times the locals of each kernel on its
call chain, whose depth the call graph bounds.
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from fsmooth.types import BYTES

from . import ir

# The largest array, in bytes, kept out of the arena in C and in a work-item's private memory on
# OpenCL.  Private memory is registers: a GPU work-item has about 1 KiB of them (255 32-bit
# registers on NVIDIA, 256 VGPRs on AMD), which its scalars need too, and a private array beyond
# them spills to per-work-item memory that costs occupancy; a C local beyond a few vector
# registers is stack memory, no cheaper than the arena.  512 bytes (64 doubles) takes the
# fixed-size intermediates of geometry (3-vectors, cross products, 3×3 and 4×4 matrices: 24 to
# 128 bytes) with room to spare and leaves larger arrays in the arena or a global buffer.
SMALL_ARRAY_BYTES = 512


def small_constant_size(count, element_bytes: int, limit: int | None = None) -> bool:
    """Whether ``count`` elements of ``element_bytes`` each are a small array of a size known when
    compiling: a positive integer count (C has no array of no elements) of at most ``limit``
    bytes (``SMALL_ARRAY_BYTES`` where None)."""
    count = sympy.sympify(count)
    limit = SMALL_ARRAY_BYTES if limit is None else limit
    return bool(count.is_Integer and 0 < int(count) * element_bytes <= limit)


def local_arrays(t: ir.Term) -> ir.Term:
    """``t`` with every alloc of a small constant size (``small_constant_size``) made a C local:
    its offset None.  A thread's copy of a region hoisted out of a parallel loop (``per_thread``)
    is sized by the thread count, never constant, and so never a local."""
    t = ir.map_children(local_arrays, t)
    match t:
        case ir.Alloc(_, elem, count) if not t.per_thread and small_constant_size(count, BYTES[elem]):
            return replace(t, offset=None)
    return t
