"""Compile options: which simplifications run and how the generated C gets its memory.

The DPS paper measures a ladder of variants (§5: CL, CLF, CG, D, DF, DFB, DFBS); each is a
preset here, so the benchmarks can compile one kernel every way.  The default is the top of
the ladder: fused, buffer-optimised, bump-allocated on one arena of exactly known size.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace

from .cost_model import DeviceDescription

ALLOCATIONS = ("arena", "malloc", "leaky", "gc")


def _optimisation(stage: str, meaning: str):
    """A field that switches one optimisation, removing work only (``fsmooth explain --no-NAME``)."""
    return field(default=True, metadata={"optimisation": stage, "help": meaning})


@dataclass(frozen=True)
class OpenCLReduction:
    """The shape of an automatic two-phase reduction on OpenCL (``fsmooth.auto_reductions``), all
    its tunable constants in one place.  A work-group's ``local`` work-items each fold ``width``
    consecutive elements at a time (OpenCL vectors; scalars where the state is an integer) into a
    local array of ``local * width`` partial results, which the group halves in local memory down
    to one; there are ``min(ceil(n / (local * width * items)), groups)`` work-groups, so each lane
    folds at least ``items`` elements; then one work-group combines the partials: with
    ``launches=1`` the group that finishes last, in the same launch (``dpia.hoist_opencl``: every
    two-phase reduction, a user's written with strategies too), with ``launches=2`` a second launch.

    Written ``local=256,width=4,items=16,groups=1024,launches=1`` (any subset, the rest as here) in
    ``Options.opencl_reduction`` or the environment variable ``FSMOOTH_OPENCL_REDUCTION``, read
    when a kernel is decorated (``default_options``)."""

    local: int = 256
    width: int = 4
    items: int = 16
    groups: int = 1024
    launches: int = 1

    def __post_init__(self):
        powers = {"local": self.local, "width": self.width}
        for name, value in powers.items():
            if not (isinstance(value, int) and value >= 1 and value & (value - 1) == 0):
                raise ValueError(f"OpenCLReduction.{name} must be a power of two, not {value!r}")
        if self.width > 16:
            raise ValueError(f"OpenCLReduction.width must be at most 16 (OpenCL's widest vector), not {self.width}")
        if self.local * self.width < 2:
            raise ValueError("OpenCLReduction: local * width must be at least 2 (a tree of one element)")
        for name in ("items", "groups"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"OpenCLReduction.{name} must be a positive integer, not {value!r}")
        if self.launches not in (1, 2):
            raise ValueError(f"OpenCLReduction.launches must be 1 or 2, not {self.launches!r}")

    @classmethod
    def parse(cls, spec: str) -> "OpenCLReduction":
        """``local=256,width=4``: the named fields changed from the defaults (ValueError else)."""
        changes = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, sep, value = item.partition("=")
            if not sep or name.strip() not in {f.name for f in fields(cls)} or not value.strip().isdigit():
                raise ValueError(f"bad OpenCL reduction setting {item!r}: expected NAME=INT with NAME one of "
                                 f"{', '.join(f.name for f in fields(cls))}")
            changes[name.strip()] = int(value)
        return cls(**changes)

    @property
    def elements(self) -> int:
        """The elements of a group's local array: one per lane of each work-item."""
        return self.local * self.width

    def __str__(self) -> str:
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


@dataclass(frozen=True)
class Options:
    # F̃ simplification (DPS §3.5, stage 1)
    fusion: bool = _optimisation("F̃", "Fig. 4: (build n f)[i] ⇝ f i where no element is computed more often, length (build n f) ⇝ n")
    inline_kernels: bool = _optimisation("F̃", "inline calls of small kernels")
    inline_lets: bool = _optimisation("F̃", "inline single-use lets (what lets fusion fire)")
    constant_folding: bool = _optimisation("F̃", "fold constant arithmetic")
    cse: bool = _optimisation("F̃", "common-subexpression elimination")
    dce: bool = _optimisation("F̃", "dead-code elimination")
    licm: bool = _optimisation("F̃", "loop-invariant code motion: a let of a loop body that does not depend on the loop runs once, before it")
    guards_to_bounds: bool = _optimisation("F̃", "a fold of (e if j < i else 0) runs j over [0, min(i, n)), and a loop whose body tests A·j + r < b and does nothing otherwise runs the trips where it holds: guards on the index become bounds")
    # DPS-F̃ simplification (Fig. 9)
    merge_allocs: bool = _optimisation("DPS", "merge consecutive allocs")
    hoist_allocs: bool = _optimisation("DPS", "hoist allocs out of build/ifold bodies: once per call, not per iteration")
    update_in_place: bool = _optimisation("DPS", "for C, an ifold whose step reads its array state only where it writes it updates it in one buffer, an element it would copy to its own place is not written, and a loop that then acts at one index runs that trip only; a build that reads a dead array only where it writes (or only its own row, through a C-local copy of it) is written over it, and the call of a kernel's result over such an array is inlined for it (dps.in_place, dpia.single_trip, inline_kernels)")
    # OpenCL (fsmooth.map_fission, fsmooth.auto_reductions)
    map_fission: bool = _optimisation("OpenCL", "a program without strategy annotations builds a top-level fold's heavy map (its elements have loops, its size is not the iteration's) for every iteration at once, in parallel, before the fold")
    auto_reductions: bool = _optimisation("OpenCL", "a program without strategy annotations runs each reduction (an ifold acc ⊕ f(i), once per call) as a two-phase parallel reduction over work-groups, not on one work-item")
    single_pass_scan: bool = _optimisation("OpenCL", "a scan (float, or without overflow checks), and a filter where single_pass_filter says so, is one launch that reads its input once (decoupled look-back), not three phases that read it twice; needs cl_khr_int64_base_atomics, and a device without it gets the three phases")
    stage_rows: bool = _optimisation("OpenCL", "a row that a work-group reads in several of its loops, each work-item the same elements, is read from global memory once, into local memory (dpia.stage_rows); a per-group scratch row whose last reader writes the output row is kept there")
    stage_tiles: bool = _optimisation("OpenCL", "the rows of an input that the work-items of a nest of global loops walk in a loop, one row each along NDRange dimension 0, are copied once into local memory, transposed, so that a warp reads neighbours (dpia.stage_tiles)")
    # code generation
    hoist_checks: bool = _optimisation("C", "a loop body's checks that the loop does not change (bounds, integer overflow) run once, before it")
    reduce_strength: bool = _optimisation("C", "a subscript's part that is a polynomial of a loop's variable alone, or a remainder of a*i + b by a divisor that is not a constant, is kept running: an addition (and a comparison) per trip")
    interchange: bool = _optimisation("C", "a fold nested in builds that reads down columns runs outermost, each element's state in its place (dpia.interchange)")
    jam_reductions: bool = _optimisation("C", "a reduction acc ⊕ e(i) at the top of a kernel whose element has a loop that runs alike in every element and reads the element's values runs 4 elements at a time, their loops in one (unroll-and-jam: 4 independent chains, what they read alike read once), each element combined into acc in its order, so the result is bit-identical (dpia.unroll_jam.jam_reduction); with parallel, each thread's chunk so, into its partial; its calls are inlined for it (inline_kernels)")
    row_versions: bool = _optimisation("C", "a loop that strides or counts by the length of a parameter's rows, which the kernel reads at constant columns below K only, has a second version for rows of exactly K, taken where they are and the target has AVX-512 (FS_ROW_VERSIONS): constant strides and counts, which gcc loads as whole vectors (dpia.row_versions)")
    allocation: str = "arena"  # one of ALLOCATIONS
    parallel: bool = False  # '#pragma omp parallel for' on outermost parfors, -fopenmp
    check_arena: bool = False  # canaries after the arena, high-water mark, loud overrun
    # In-process builds (calling a kernel from Python) compile for this machine's CPU
    # (-march=native; the host CPU is part of the cache key, fsmooth.cache.host_flags), unless
    # this is off or the environment has FSMOOTH_NATIVE=0.  `fsmooth compile` is portable unless given --march.
    native: bool = True
    # Let the C compiler reassociate floating-point arithmetic (FASTMATH_FLAGS in dpia.codegen_c),
    # so that reductions vectorise: sums may round differently and lose the sign of a zero, but
    # NaN and inf are still computed and tested as IEEE says (README, "Integers and floats").
    fastmath: bool = False
    # A filter in one launch (the single pass of single_pass_scan: mask, scan and scatter per tile,
    # dpia.scan_opencl) rather than three. Off: on an H200 the three launches were the faster
    # (torch.masked_select's time over fsmooth's at 16 and 128 Mi floats, two runs: 1.39-1.50x,
    # against 0.77-1.01x in one launch, whose tiles wait longer on their predecessors).
    single_pass_filter: bool = False
    # The shape of the automatic parallel reductions (OpenCLReduction below; FSMOOTH_OPENCL_REDUCTION)
    opencl_reduction: OpenCLReduction = field(default_factory=lambda: OpenCLReduction())
    # The OpenCL device the program is built for, as the cost model (fsmooth.cost_model) knows it;
    # None: the device an executable runs on (Kernel.opencl_executable describes it), and
    # cost_model.GENERIC_GPU where there is none (opencl_artifact(), fsmooth compile and explain)
    opencl_device: DeviceDescription | None = None
    # debugging the compiler (FSMOOTH_VERIFY=1 also turns it on): fsmooth.driver verifies every
    # pass's output with its IR's verify
    verify_passes: bool = False

    def __post_init__(self):
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"allocation must be one of {ALLOCATIONS}, not {self.allocation!r}")
        if isinstance(self.opencl_reduction, dict):  # as dataclasses.asdict writes it
            object.__setattr__(self, "opencl_reduction", OpenCLReduction(**self.opencl_reduction))
        if isinstance(self.opencl_device, dict):  # as dataclasses.asdict writes it
            object.__setattr__(self, "opencl_device", DeviceDescription(**self.opencl_device))
        if not (self.opencl_device is None or isinstance(self.opencl_device, DeviceDescription)):
            raise TypeError(f"opencl_device must be a DeviceDescription or None, not {self.opencl_device!r}")
        if not isinstance(self.opencl_reduction, OpenCLReduction):
            raise TypeError(f"opencl_reduction must be an OpenCLReduction, not {self.opencl_reduction!r}")

    @property
    def simplifies(self) -> bool:
        return any(getattr(self, name) for name in optimisations("F̃"))


def optimisations(stage: str | None = None) -> tuple[str, ...]:
    """The names of the optimisation fields of ``Options`` (of one stage, "F̃" or "DPS")."""
    return tuple(f.name for f in fields(Options)
                 if "optimisation" in f.metadata and stage in (None, f.metadata["optimisation"]))


_NO_BUFFER_OPT = dict.fromkeys(optimisations("DPS"), False)
UNOPTIMISED = dict.fromkeys(optimisations(), False)
"""Every optimisation off: the forms of the DPS paper's §3.4, as translated."""

# The DPS paper's variants (§5), by the names the benchmarks print.
VARIANTS = {
    "leaky": Options(allocation="leaky", **UNOPTIMISED),  # CL
    "leaky_fused": Options(allocation="leaky", **_NO_BUFFER_OPT),  # CLF
    "gc": Options(allocation="gc", **UNOPTIMISED),  # CG
    "malloc": Options(allocation="malloc", **UNOPTIMISED),  # D
    "fused": Options(allocation="malloc", **_NO_BUFFER_OPT),  # DF
    "buffers": Options(allocation="malloc"),  # DFB
    "arena": Options(),  # DFBS, the default
}


def default_options(**changes) -> Options:
    """The defaults, with ``FSMOOTH_CHECK_ARENA=1`` in the environment turning on arena checks and
    ``FSMOOTH_OPENCL_REDUCTION`` (``OpenCLReduction.parse``) shaping the automatic reductions."""
    base = Options(check_arena=os.environ.get("FSMOOTH_CHECK_ARENA", "") not in ("", "0"),
                   opencl_reduction=OpenCLReduction.parse(os.environ.get("FSMOOTH_OPENCL_REDUCTION", "")))
    return replace(base, **changes)
