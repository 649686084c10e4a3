"""The cost model that picks the OpenCL strategy of a program without annotations
(``fsmooth.auto_reductions``): for each top-level parallel nest it lists the candidate
strategies, estimates each from the sizes and a description of the device, and picks the
cheapest.  Pure functions of their arguments; a user's strategy annotations never reach here.

The device (``DeviceDescription``) is the one the OpenCL program is built for: an OpenCL
program is compiled for one device anyway, so ``Kernel.opencl_artifact(device)`` (which
``Kernel.opencl_executable`` calls with its context's device) describes it with
``fsmooth.opencl_device.describe``; without a device
(``kernel.opencl_artifact()``, ``fsmooth compile --target opencl``, ``fsmooth explain``) the
description is ``GENERIC_GPU``, whose choices are those the rules made before this model
(measured on the H100).  ``Options.opencl_device`` names another.

Estimates are in *lane steps*: the time one lane takes to read one element and combine it.
A launch of ``W`` work-items whose lanes each take ``s`` steps costs

    launch + max(1, W / lanes) · s          lanes = compute_units · resident_lanes

(``max(1, ·)``: fewer work-items than lanes leave lanes idle, they do not go faster), where

- ``resident_lanes``: work-items one compute unit keeps in flight: a GPU's 2048 (what hides its
  memory latency), a CPU core's SIMD width (Intel's runtime runs a group as a loop of vectors
  over its work-items, one vector lane each);
- ``launch``: a kernel launch, ``LAUNCH`` lane steps (a few microseconds);
- a barrier costs ``BARRIER`` steps of each lane (a GPU synchronises a group in hardware; a
  CPU runtime ends the vector loop over the group's work-items there and starts another);
- a lane that reads (or writes) its own row, while the lanes beside it read other rows, moves
  more than it uses: on a GPU each lone access costs a 32-byte sector (``SECTOR_BYTES``), so a
  float's read is 8 steps; a CPU core keeps the line in cache until the lane reads the rest of
  it, so a read is 1 step (``CPU_GATHER`` where a map of reductions is known to read along its
  rows: its vector's lanes then load their elements one by one), but a write of a row is a
  scatter, one lane at a time (``simd_width`` steps); lanes reading consecutive elements move
  what they use (1 step).

A symbolic size is decided when compiling, as the launch's shape is, taken to be
``SYMBOLIC_SIZE`` (sizes not known until the call are taken to be large); a constant is itself.
The two-phase reduction's group count is still computed at launch from the sizes.  One choice is
made for both: a map of reductions whose rows' length is symbolic, where the model nests short
rows and long ones apart, is compiled both ways (``rows_by_length`` finds the length at which
the choice changes, evaluating ``choose_rows`` at lengths below ``SYMBOLIC_SIZE``), and the
launch runs the one for the call's length (``fsmooth.auto_reductions``).

A nest of global loops (a 2-D or 3-D NDRange: GMM's points × components, an image's rows ×
columns) is priced per candidate launch shape (``choose_nest``): which loop runs along dimension 0
(the lanes: ``simd_width`` consecutive work-items of dimension 0 are one warp) and the work-group's
tile (``NEST_TILES``, at most ``max_work_group`` work-items).  A warp of a tile ``tx × ty`` spans
``w0 = min(tx, simd_width)`` iterations of the lanes' loop and ``simd_width / w0`` of dimension 1's.
Two things differ between candidates:

- idle lanes: a launch runs ``ceil(n0 / tx) · tx × ceil(n1 / ty) · ty × …`` work-items, those
  past the sizes holding their lanes while their group runs (K = 5 components along the lanes
  leave 27 of 32 lanes idle; along dimension 1 of a 32 × 8 tile, 3 rows of 8);
- memory: each global read (and the nest's own write) of the body, as many times as the
  sequential loops around it run (a symbolic trip count taken as ``SYMBOLIC_SIZE``), by how its
  index depends on the lanes' loop (``Access``): not at all, one sector a warp (a broadcast);
  as the last index, plus what does not depend on it, the warp's neighbouring elements
  (coalesced: 1 step a lane); otherwise one sector a lane (``_own_row``; a row of a CPU
  lane's own stays in its cache until it reads the rest of it).  Where the warp spans several
  rows of dimension 1, each row's places are counted apart (whether the hardware merges equal
  addresses across rows is not modelled: simple, and it keeps a tile narrower than a warp from
  being chosen for that alone).

One more dimension where the nest's outermost loop runs along the lanes and all its body does for
an element is the next loop (``Nest.jammable``: GMM's points, around the components), and the body
reads, inside a sequential loop, what does not depend on that loop (GMM's Q_k and means, the same
for every lane of a warp): a work-item per ``J`` of its elements (``NEST_JAMS``), their bodies
unrolled and jammed (``dpia.unroll_jam.jam_lanes``), each such read made once for the J.  What that
saves is instructions, not memory: a broadcast moves one sector a warp, but each lane still issues
the load and its index arithmetic.  So in such a nest every access also costs each lane ``issue``
(1 step), an access the J elements share is counted once for the J, the others J times, with the
body's own step, and the launch has ``ceil(n0 / J)`` of the elements along the lanes.  J = 2
(measured on an H200, GMM's scores at n = 10,000, a hand-written kernel: d = 10, K = 25 23.8 ->
18.5 µs; d = 20, K = 50 104.8 -> 73.0 µs; d = 64, K = 200 3.33 -> 2.22 ms; d = 2, K = 5 6.5 ->
6.6 µs).  J = 4 is better at d = 20 (65.8 µs), but its tile of 128 staged rows exceeds 48 KiB of
local memory past d = 48, where the kernel would fall back to reading its rows from global memory
(``dpia.stage_tiles``); 2 fits d ≤ 96.

The body's own computation is the same in every candidate (1 step).  Ties keep the order listed:
the innermost loop along the lanes and a 32 × 8 tile first, the shape of every nest before this
model (an image's columns along the lanes, reading neighbouring pixels).  The tiles whose rows are
whole warps (``tx`` a multiple of ``simd_width``) read alike, so only their padding tells them
apart, and it depends on sizes that may be known only at the call: where the chosen tile is one of
them and an outer loop runs along the lanes, the launch takes the least padded of them for the
call's sizes, the first of equals (``NestChoice.launch_tiles``; the kernel's text does not depend
on its tile): dimension 1 is then the inner loop, which may be short (GMM's K = 5 components:
256 × 1, no row of a tile idle; K = 200: 32 × 8).  Where the innermost loop runs along the lanes
(an image's columns) the tile stays the one chosen, 32 × 8: its rows share a stencil's pixels
through the cache, which the model does not price.

On a CPU a map of reductions of scalars whose folds read contiguous elements (gemv's row and
``x``: ``Rows.contiguous``) has one more candidate: a work-item per element whose reductions run
in its own vectors of the core's w elements (``simd_width`` floats, half as many doubles;
``auto_reductions._in_vectors``: lane t folds the elements t, t + w, …, each step one vector
load of each array read; then the lanes are combined, w steps, and the last ``n mod w`` elements
added one by one).  Such a work-item takes its vector's w lanes, and nothing is gathered.  Where
the folds' steps also read what every element shares (gemv's ``x``: ``Rows.shared_reads``, beside
``Rows.own_reads``, the row), one more: a work-item per ``JAM`` elements in such vectors, their
folds unrolled and jammed (``dpia.unroll_jam``: one loop steps the ``JAM`` folds, so a shared
vector is loaded once for them), an element's step taking its share of the loads,
``(own + shared / JAM) / (own + shared)`` of the unjammed step.  ``JAM`` is 4: 4 accumulators, 4
row loads and the shared one fit a core's vector registers with room to spare; the 4 rows streamed
together are what the module's last paragraph measured.

What the CPU parameters rest on (Intel's CPU runtime on a 2-core AVX-512 Xeon, loaded machine,
device time, best of interleaved runs): softmax over 1024² floats takes 1.3-1.4 ms with a group of
16 per row, 1.8-3.2 ms with 256, 16-20 ms with a work-item per row; gemv at 4096² takes 5-8.5 ms
with a work-item per row, 17 ms with a group of 16 or 256 per row.  Later, on the same machine
at a load average below 1 (medians of interleaved runs, numpy's OpenBLAS spin after its calls
waited out): gemv at 4096² takes 1.9 ms with a work-item per row whose lanes gather their rows'
elements, 1.36 ms with the row's fold in the work-item's own 16-wide vectors, numpy 1.26 ms
(``CPU_GATHER``: the gathering lanes' extra time); at 8192² 11.6 ms gathering, 12.6 ms in own
vectors, numpy 9.5 ms: there the gather's 16 rows streamed at once outrun one row a core, which
the model does not price.  A hand-written kernel folding 4 rows a work-item, interleaved in one
loop of 16-wide vectors, takes 1.18 and 8.7 ms: the jammed candidate, which the model prices by
its loads alone (the rows streamed together, as the gather's, are not priced).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

SYMBOLIC_SIZE = 2 ** 16  # a size not known when compiling, as the estimates take it
LAUNCH = {"gpu": 1000.0, "cpu": 5000.0}  # lane steps a launch costs
BARRIER = {"gpu": 4.0, "cpu": 16.0}  # lane steps a barrier costs each lane
GPU_RESIDENT_LANES = 2048  # work-items a GPU compute unit keeps in flight
SECTOR_BYTES = 32  # what a GPU lane's lone access moves
CPU_GATHER = 2.0  # lane steps of a CPU vector lane's read of its own row (module docstring)
JAM = 4  # elements a CPU work-item folds in one loop of vectors where they share reads (module docstring)


@dataclass(frozen=True)
class DeviceDescription:
    """What the cost model knows of a device (``fsmooth.opencl_device.describe`` reads it from
    OpenCL's device queries)."""

    name: str
    kind: str  # "gpu" or "cpu": how work-items map onto the hardware (module docstring)
    compute_units: int
    max_work_group: int
    local_memory: str  # "scratchpad" (on-chip, OpenCL's CL_LOCAL) or "global" (cached RAM, CL_GLOBAL)
    local_memory_bytes: int
    work_group_multiple: int  # CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE
    simd_width: int  # lanes of one instruction: a warp, or a CPU vector of floats

    def __post_init__(self):
        if self.kind not in ("gpu", "cpu"):
            raise ValueError(f"DeviceDescription.kind must be 'gpu' or 'cpu', not {self.kind!r}")
        if self.local_memory not in ("scratchpad", "global"):
            raise ValueError(f"DeviceDescription.local_memory must be 'scratchpad' or 'global', not {self.local_memory!r}")
        for field in ("compute_units", "max_work_group", "local_memory_bytes", "work_group_multiple", "simd_width"):
            value = getattr(self, field)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"DeviceDescription.{field} must be a positive integer, not {value!r}")

    @property
    def lanes(self) -> int:
        """Lanes the device runs at once."""
        resident = GPU_RESIDENT_LANES if self.kind == "gpu" else self.simd_width
        return self.compute_units * resident

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}, {self.compute_units} compute units, {self.lanes} lanes)"


# An H100-class GPU: the device the rules before this model were measured on.
GENERIC_GPU = DeviceDescription("generic GPU", "gpu", compute_units=132, max_work_group=1024,
                                local_memory="scratchpad", local_memory_bytes=48 * 1024,
                                work_group_multiple=32, simd_width=32)


@dataclass(frozen=True)
class Candidate:
    """One strategy considered: what it is, its work-group size where it has one, its estimate."""

    strategy: str  # "work-item per element", "work-group per element", "one work-item", "two-phase"
    local: int | None
    cost: float
    width: int = 1  # a work-item per element's vectors of its reductions (1: none)
    jam: int = 1  # a work-item's elements, their folds in one loop (``dpia.unroll_jam``; 1: one)

    def __str__(self) -> str:
        size = f" of {self.local}" if self.local is not None and self.strategy == "work-group per element" else ""
        vectors = f" in {self.width}-wide vectors" if self.width > 1 else ""
        what = f"work-item per {self.jam} elements jammed" if self.jam > 1 else self.strategy
        return f"{what}{size}{vectors} ≈ {self.cost:.3g}"


@dataclass(frozen=True)
class Choice:
    """The candidates estimated, cheapest first (ties: in the order listed), and the sizes
    they were estimated at."""

    candidates: tuple[Candidate, ...]
    device: DeviceDescription
    sizes: str

    @property
    def chosen(self) -> Candidate:
        return self.candidates[0]

    def explain(self) -> str:
        return (f"cost model on {self.device}, {self.sizes}: "
                + ", ".join(f"{c}{' (chosen)' if c is self.chosen else ''}" for c in self.candidates)
                + " lane steps"
                + ("; no work-group size considered has a reduction at least that long and room for its trees"
                   " in local memory" if len(self.candidates) == 1 else ""))


@dataclass(frozen=True)
class Rows:
    """A map of reductions: ``elements`` elements, each folding its reductions over ``counts``
    and, where it is a row, writing ``row_builds`` builds of ``row_length`` scalars (the row and
    its intermediates); sizes None where not known when compiling."""

    elements: int | None
    counts: tuple[int | None, ...]
    row_length: int | None
    row_builds: int
    elem_bytes: int
    # every reduction is of floats whose element reads are contiguous in its index (or do not
    # depend on it): each element reads rows of its own, which a work-item can fold in vectors
    contiguous: bool = False
    # of the reads of a step of those reductions (all of them together), those of the element's
    # own rows and those every element shares (gemv: m's row and x, one each)
    own_reads: int = 1
    shared_reads: int = 0


def _size(n: int | None, symbolic: int = SYMBOLIC_SIZE) -> int:
    return symbolic if n is None else n


def _said(n: int | None, symbolic: int = SYMBOLIC_SIZE) -> str:
    return f"symbolic (taken as {symbolic})" if n is None else str(n)


def _launch(device: DeviceDescription, work_items: float, steps: float, launched: bool = True) -> float:
    """``work_items`` taking ``steps`` each, plus a launch where they are ``launched`` on their own
    (not the part of a launch that its last group runs)."""
    return (LAUNCH[device.kind] if launched else 0.0) + max(1.0, work_items / device.lanes) * steps


def _own_row(device: DeviceDescription, elem_bytes: int, write: bool) -> float:
    """Steps a lane takes for one element of its own row (module docstring)."""
    if device.kind == "gpu":
        return max(1.0, SECTOR_BYTES / elem_bytes)
    return float(device.simd_width) if write else 1.0


def _tree(device: DeviceDescription, local: int) -> float:
    """Steps of each lane in a group's tree in local memory: a step and a barrier per halving."""
    return math.log2(local) * (1 + BARRIER[device.kind])


def group_sizes(device: DeviceDescription, local: int) -> tuple[int, ...]:
    """The work-group sizes considered, ``local`` (``OpenCLReduction.local``) first.  Where local
    memory is a scratchpad (a GPU) only ``local``, the size measured there (occupancy, which the
    model does not know, decides between the others); where it is global memory (a CPU) also the
    multiples of the SIMD width below it: a group is one core's loop of vectors, so a group of one
    vector is the least overhead whose lanes are all used."""
    if device.local_memory == "scratchpad":
        return (local,)
    smaller, size = [], 1 << (device.simd_width - 1).bit_length()  # a tree halves: powers of two
    while size < min(local, device.max_work_group):
        smaller.append(size)
        size *= 2
    return (local, *smaller)


def choose_rows(rows: Rows, device: DeviceDescription, local: int, length: int = SYMBOLIC_SIZE) -> Choice:
    """A map of reductions (``Rows``) as a work-item per element (each folds its reductions
    alone, reading its own row; on a CPU, where the reductions read contiguous elements and the
    element is a scalar, also in vectors of its own, and ``JAM`` elements a work-item so where
    the reductions share reads) or a work-group per element of each size of ``group_sizes`` (its
    lanes fold strided shares of each reduction, reading consecutive elements, then a tree each;
    a row's builds strided over the lanes, a barrier after each), a size only where at least one
    reduction is that long and the trees fit in local memory.  ``length``: what the reductions'
    counts and the row's length are taken to be where they are symbolic (``rows_by_length``); the
    number of elements, where symbolic, is ``SYMBOLIC_SIZE``."""
    m = _size(rows.elements)
    counts = [_size(n, length) for n in rows.counts]
    k = _size(rows.row_length, length) if rows.row_builds else 0
    read, write = _own_row(device, rows.elem_bytes, False), _own_row(device, rows.elem_bytes, True)
    if device.kind == "cpu" and rows.contiguous:
        read = CPU_GATHER  # the lanes' rows side by side: each vector load a gather
    # a scalar element's write is one per lane, beside its neighbours': 1 step
    per_item = sum(counts) * read + (rows.row_builds * k * write if rows.row_builds else 1)
    candidates = [Candidate("work-item per element", None, _launch(device, m, per_item))]
    w = device.simd_width * 4 // rows.elem_bytes  # the elements a vector of the core holds
    if device.kind == "cpu" and rows.contiguous and not rows.row_builds and w > 1:
        # its own vectors: a vector load a step, the lanes combined, the last n mod w one by one;
        # a work-item takes the w lanes of its vector
        per_vector_item = sum(n // w + w + n % w for n in counts) + 1
        candidates.append(Candidate("work-item per element", None, _launch(device, m * w, per_vector_item), w))
        if rows.shared_reads:
            # JAM elements a work-item, their vector loops one: a shared read is one load for
            # the JAM elements, so an element's step takes its share of the loads
            loads = (rows.own_reads + rows.shared_reads / JAM) / (rows.own_reads + rows.shared_reads)
            per_jammed = sum(n // w * loads + w + n % w for n in counts) + 1
            candidates.append(Candidate("work-item per element", None, _launch(device, m * w, per_jammed), w, JAM))
    for E in group_sizes(device, local):
        # a count known when compiling and below E every lane folds alike (auto_reductions._rows)
        folded = [n for n, known in zip(counts, rows.counts) if known is None or known >= E]
        # the tree's local arrays, E elements and their halves, one set per reduction, must fit
        if not folded or 2 * E * rows.elem_bytes * len(folded) > device.local_memory_bytes:
            continue
        per_lane = (sum(math.ceil(n / E) + _tree(device, E) for n in folded) + sum(counts) - sum(folded)
                    + rows.row_builds * (math.ceil(k / E) + BARRIER[device.kind]))
        candidates.append(Candidate("work-group per element", E, _launch(device, m * E, per_lane)))
    sizes = (f"{_said(rows.elements)} elements" + (f" of rows of {_said(rows.row_length, length)}" if rows.row_builds else "")
             + f", reductions over {', '.join(_said(n, length) for n in rows.counts)}")
    return Choice(_cheapest(candidates), device, sizes)


@dataclass(frozen=True)
class RowsByLength:
    """A map of reductions whose nesting depends on its symbolic row length n: below
    ``threshold`` the ``short`` choice, from it on the ``long`` one (``SYMBOLIC_SIZE``'s)."""

    threshold: int
    short: Choice
    long: Choice


def rows_by_length(rows: Rows, device: DeviceDescription, local: int) -> RowsByLength | None:
    """Where the reductions' counts not known when compiling (and the row's length, where it is
    not known either) are one length n, known only at the call: the least n from which the model
    nests the map as it does for long rows (``SYMBOLIC_SIZE``), a work-group per element or a
    work-item per element, and the choice just below it, for short rows; None where it nests the
    map alike for every n from 1 on.  The threshold is found by evaluating ``choose_rows`` (a
    bisection: both estimates grow with n, the work-item's by a whole row's steps, the group's by
    one step per ``local`` elements, so the choice switches once, where the group's fixed cost,
    its tree and its lanes' launch, is paid back)."""
    if all(n is not None for n in rows.counts):
        return None

    def nesting(choice: Choice) -> str:
        return choice.chosen.strategy

    long = choose_rows(rows, device, local)
    short = choose_rows(rows, device, local, 1)
    if nesting(short) == nesting(long):
        return None
    below, at = 1, SYMBOLIC_SIZE  # nesting(below) differs from the long rows', nesting(at) does not
    while at - below > 1:
        middle = (below + at) // 2
        if nesting(choose_rows(rows, device, local, middle)) == nesting(long):
            at = middle
        else:
            below = middle
    return RowsByLength(at, choose_rows(rows, device, local, below), long)


def choose_fold(count: int | None, device: DeviceDescription, local: int, width: int, items: int, groups: int,
                launches: int = 1) -> Choice:
    """A reduction of ``count`` elements on one work-item, or as the two-phase reduction of ``OpenCLReduction`` (its
    ``local``, ``width``, ``items``, ``groups``, ``launches``): ``g = min(ceil(n / (E · items)), groups)``
    groups whose lanes fold their shares, a tree each, then one group combining the partials (in
    the same launch, the last group to finish, where ``launches`` is 1)."""
    n = _size(count)
    E = local * width
    g = max(1, min(math.ceil(n / (E * items)), groups))
    phase1 = _launch(device, g * local, math.ceil(n / (g * local)) + _tree(device, E))
    phase2 = _launch(device, local, math.ceil(g / E) + _tree(device, E), launched=launches == 2)
    candidates = [Candidate("one work-item", None, LAUNCH[device.kind] + n),
                  Candidate("two-phase", local, phase1 + phase2)]
    return Choice(_cheapest(candidates), device, f"count {_said(count)}")


def _cheapest(candidates: list[Candidate]) -> tuple[Candidate, ...]:
    return tuple(sorted(candidates, key=lambda c: c.cost))  # stable: ties keep the order listed


# A work-group's tile of a nest of global loops (along dimension 0, along dimension 1), the
# first the shape every nest had before the model (``dpia.codegen_opencl.NESTED_LOCAL``).
NEST_TILES = ((32, 8), (64, 4), (256, 1), (8, 32), (1, 256))
# The jam factors of a nest's loop along the lanes (module docstring): 2 fits rows of up to 96 doubles
# staged for 32 × 2 elements in 48 KiB of local memory (``dpia.stage_tiles``)
NEST_JAMS = (2,)

PATTERNS = ("independent", "consecutive", "scattered")


@dataclass(frozen=True)
class Access:
    """A global read, or the nest's write, in the body of a nest of global loops: how its index
    depends on each loop of the nest, outermost first (one of ``PATTERNS``: not at all; as the
    last index, plus what does not depend on it; otherwise), the trip counts of the sequential
    loops around it in the body (sympy over the sizes, or None: read from data) and the bytes of
    its element."""

    what: str  # the array, as printed in ``explain``
    patterns: tuple[str, ...]
    trips: tuple
    elem_bytes: int
    write: bool = False

    def times(self, at: dict) -> float:
        """How many times one work-item makes the access, the sizes ``at`` (``_at``)."""
        return float(math.prod(_at(n, at) for n in self.trips))

    def __post_init__(self):
        if any(pattern not in PATTERNS for pattern in self.patterns):
            raise ValueError(f"Access.patterns must each be one of {PATTERNS}, not {self.patterns!r}")


@dataclass(frozen=True)
class Nest:
    """A nest of global loops, outermost first: their indices, their sizes (sympy over the
    kernel's sizes) and the global accesses of the body."""

    loops: tuple[str, ...]
    sizes: tuple
    accesses: tuple[Access, ...]
    # the depth of the loop whose elements a work-item may run jammed (``dpia.unroll_jam.jam_lanes``:
    # the outermost, where the next loop is all its body does for an element), or None
    jammable: int | None = None


def _at(n, at: dict) -> int:
    """The size ``n`` (sympy; None: read from data) at the sizes ``at`` (name -> value), a size
    not given (or data) taken as ``SYMBOLIC_SIZE``."""
    if n is None:
        return SYMBOLIC_SIZE
    n = sympy.sympify(n).subs({s: at[s.name] for s in sympy.sympify(n).free_symbols if s.name in at})
    return int(n) if n.is_number else SYMBOLIC_SIZE


@dataclass(frozen=True)
class NestCandidate:
    """One launch shape of a nest: the loop along dimension 0 (its depth, outermost 0), the order
    of the NDRange dimensions of the loops (``dimensions[depth]``), the tile, the estimate."""

    lanes: str
    dimensions: tuple[int, ...]
    tile: tuple[int, ...]
    cost: float
    jam: int = 1  # the lanes' loop's elements a work-item runs jammed (``dpia.unroll_jam.jam_lanes``)

    def __str__(self) -> str:
        jammed = f", {self.jam} of {self.lanes} a work-item jammed" if self.jam > 1 else ""
        return f"lanes over {self.lanes}, tile {'×'.join(map(str, self.tile))}{jammed} ≈ {self.cost:.3g}"


@dataclass(frozen=True)
class NestChoice:
    """The candidates estimated, cheapest first (ties: in the order listed)."""

    candidates: tuple[NestCandidate, ...]
    device: DeviceDescription
    sizes: str

    @property
    def chosen(self) -> NestCandidate:
        return self.candidates[0]

    @property
    def launch_tiles(self) -> tuple[tuple[int, ...], ...]:
        """The tiles the launch picks among for the call's sizes (module docstring), in the
        order of ``NEST_TILES``: the chosen one where its rows are not whole warps."""
        def whole_warps(tile) -> bool:
            return tile[0] % self.device.simd_width == 0

        innermost_along_lanes = self.chosen.dimensions[-1] == 0
        if innermost_along_lanes or not whole_warps(self.chosen.tile):
            return (self.chosen.tile,)
        return tuple(c.tile for c in sorted(self.candidates, key=lambda c: NEST_TILES.index(c.tile[:2]))
                     if c.dimensions == self.chosen.dimensions and c.jam == self.chosen.jam and whole_warps(c.tile))

    def explain(self) -> str:
        return (f"cost model on {self.device}, {self.sizes}: "
                + ", ".join(f"{c}{' (chosen)' if c is self.chosen else ''}" for c in self.candidates)
                + " lane steps")


def _access_steps(access: Access, lanes: int, w0: int, device: DeviceDescription) -> float:
    """Steps of one lane for one ``access`` where the loop at depth ``lanes`` runs along the lanes,
    a warp spanning ``w0`` of its iterations (and ``simd_width / w0`` rows)."""
    warp = device.simd_width
    rows = warp // w0
    along = access.patterns[lanes]
    if along == "scattered":
        return _own_row(device, access.elem_bytes, access.write)
    if device.kind == "cpu":  # a vector of the lanes: one load, or one broadcast load per row
        return 1.0 if along == "consecutive" else rows / warp
    sectors = rows * (1 if along == "independent" else math.ceil(w0 * access.elem_bytes / SECTOR_BYTES))
    return sectors * SECTOR_BYTES / (warp * access.elem_bytes)


def choose_nest(nest: Nest, device: DeviceDescription, at: dict | None = None) -> NestChoice:
    """The launch shape of a nest of global loops (module docstring): each loop along the lanes,
    the innermost first, times each tile of ``NEST_TILES`` that fits a work-group; the sizes
    ``at`` (name -> value; by default, and for a size not given, ``SYMBOLIC_SIZE``)."""
    at = at or {}
    depth = len(nest.loops)
    sizes = [_at(n, at) for n in nest.sizes]
    warp = device.simd_width
    jams = _jams(nest, device)
    issue = 1.0 if len(jams) > 1 else 0.0
    candidates = []
    for lanes in reversed(range(depth)):
        # the other loops keep their order, the innermost of them dimension 1
        rest = [d for d in reversed(range(depth)) if d != lanes]
        order = [lanes, *rest]  # order[dim] = depth
        dimensions = tuple(order.index(d) for d in range(depth))
        for jam in jams if lanes == nest.jammable else (1,):
            for tile in NEST_TILES:
                if tile[0] * tile[1] > device.max_work_group or (jam > 1 and tile[0] % warp):
                    continue
                w0 = min(tile[0], warp)
                work_items = (math.ceil(sizes[lanes] / (jam * tile[0])) * tile[0]
                              * math.ceil(sizes[rest[0]] / tile[1]) * tile[1] * math.prod(sizes[d] for d in rest[1:]))
                steps = jam + sum(a.times(at) * (issue + _access_steps(a, lanes, w0, device))
                                  * (1 if _shared(a, lanes) else jam) for a in nest.accesses)
                candidates.append(NestCandidate(nest.loops[lanes], dimensions, tile + (1,) * (depth - 2),
                                                _launch(device, work_items, steps), jam))
    said = " × ".join(f"{loop} < {n} ({_at(n, at)})" for loop, n in zip(nest.loops, nest.sizes))
    reads = ", ".join(f"{'writes' if a.write else 'reads'} {a.what} ({'/'.join(a.patterns)}) ×{a.times(at):.3g}"
                      for a in nest.accesses)
    return NestChoice(_cheapest(candidates), device, f"loops {said}, accesses {reads or 'none'}")


def _shared(access: Access, lanes: int) -> bool:
    """Whether the jammed elements of the loop at depth ``lanes`` share ``access``: a read inside a
    sequential loop of the body whose index does not depend on that loop."""
    return not access.write and bool(access.trips) and access.patterns[lanes] == "independent"


def _jams(nest: Nest, device: DeviceDescription) -> tuple[int, ...]:
    """The jam factors of ``nest``'s candidates (module docstring): ``NEST_JAMS`` on a GPU where
    its jammable loop's elements share a read inside a sequential loop, else 1 alone."""
    if device.kind != "gpu" or nest.jammable is None or not any(_shared(a, nest.jammable) for a in nest.accesses):
        return (1,)
    return (1, *NEST_JAMS)
