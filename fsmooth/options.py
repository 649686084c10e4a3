"""Compile options: which simplifications run and how the generated C gets its memory.

The DPS paper measures a ladder of variants (§5: CL, CLF, CG, D, DF, DFB, DFBS); each is a
preset here, so the benchmarks can compile one kernel every way.  The default is the top of
the ladder: fused, buffer-optimised, bump-allocated on one arena of exactly known size.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

ALLOCATIONS = ("arena", "malloc", "leaky", "gc")


@dataclass(frozen=True)
class Options:
    # F̃ simplification (DPS §3.5, stage 1)
    fusion: bool = True  # Fig. 4: (build n f)[i] ⇝ f i, length (build n f) ⇝ n
    inline_kernels: bool = True  # inline calls of small kernels
    inline_lets: bool = True  # inline single-use lets (what lets fusion fire)
    constant_folding: bool = True
    cse: bool = True
    dce: bool = True
    # DPS-F̃ simplification (Fig. 9)
    merge_allocs: bool = True
    hoist_allocs: bool = True  # out of build/ifold bodies: once per call, not per iteration
    # code generation
    allocation: str = "arena"  # one of ALLOCATIONS
    parallel: bool = False  # '#pragma omp parallel for' on outermost parfors, -fopenmp
    check_arena: bool = False  # canaries after the arena, high-water mark, loud overrun

    def __post_init__(self):
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"allocation must be one of {ALLOCATIONS}, not {self.allocation!r}")

    @property
    def simplifies(self) -> bool:
        return any((self.fusion, self.inline_kernels, self.inline_lets, self.constant_folding,
                    self.cse, self.dce))


_NO_F_SIMPLIFICATION = dict(fusion=False, inline_kernels=False, inline_lets=False,
                            constant_folding=False, cse=False, dce=False)
_NO_BUFFER_OPT = dict(merge_allocs=False, hoist_allocs=False)

# The DPS paper's variants (§5), by the names the benchmarks print.
VARIANTS = {
    "leaky": Options(allocation="leaky", **_NO_F_SIMPLIFICATION, **_NO_BUFFER_OPT),  # CL
    "leaky_fused": Options(allocation="leaky", **_NO_BUFFER_OPT),  # CLF
    "gc": Options(allocation="gc", **_NO_F_SIMPLIFICATION, **_NO_BUFFER_OPT),  # CG
    "malloc": Options(allocation="malloc", **_NO_F_SIMPLIFICATION, **_NO_BUFFER_OPT),  # D
    "fused": Options(allocation="malloc", **_NO_BUFFER_OPT),  # DF
    "buffers": Options(allocation="malloc"),  # DFB
    "arena": Options(),  # DFBS, the default
}


def default_options(**changes) -> Options:
    """The defaults, with ``FSMOOTH_CHECK_ARENA=1`` in the environment turning on arena checks."""
    base = Options(check_arena=os.environ.get("FSMOOTH_CHECK_ARENA", "") not in ("", "0"))
    return replace(base, **changes)
