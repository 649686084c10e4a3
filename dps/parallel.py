"""Which builds run their iterations concurrently (``options.parallel``).

A build not nested in another build of its kernel is parallel: the back end puts
``#pragma omp parallel for`` on it.  Builds inside it run sequentially within one of its
iterations.  The flag decides the memory layout (``dps.hoist``, ``dps.layout``): storage
used inside a parallel build is private to an iteration, never shared.
"""
from __future__ import annotations

from dataclasses import replace

from . import ir


def mark_parallel(t: ir.Term) -> ir.Term:
    """``t`` with its outermost builds marked parallel."""
    if isinstance(t, ir.Build):
        return replace(t, parallel=True)
    return ir.map_children(mark_parallel, t)
