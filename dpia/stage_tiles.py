"""The rows of an input that the work-items of a nest of global loops walk in a loop, staged in
local memory, transposed (issue 12: GMM's points).

In GMM's main terms the nest runs the points i along the lanes (NDRange dimension 0) and the
components k along dimension 1; work-item (i, k) walks the triangle of Q_k, reading x[i][j]
d(d + 1)/2 times.  Along a warp those reads are d scalars apart, a memory transaction a lane, and
the work-group's other components read the same rows again.  Copied once into local memory,
transposed (element c of lane l's row at c · 32 + l), a warp's read of one column is 32
neighbouring scalars.  Measured on an H200 (float64, n = 10,000): the nest's launch at d = 64,
K = 200 went from 18.4 to 3.3 ms, at d = 20, K = 50 from 0.23 to 0.11 ms.

Where.  A phase that is a nest of global loops, on a device whose local memory is a scratchpad,
whose loop along dimension 0 (index i) reads rows ``source[i][c]`` of an input's rows of scalars
inside a sequential loop of its body: the row is walked, not one element read once.  A launch of
a nest rounds each dimension up to whole work-groups (``codegen_opencl._work_groups``), so each
work-item runs at most one trip of each loop, i being its global id along dimension 0: its row
can be copied before the nest by the whole work-group, with the barrier that orders the copy
before the reads outside every loop (``phrases.StagedRows``, which code generation prints).  The
launch's work-group is then 32 × 8: the tile holds 32 rows, and the group's 8 work-items along
dimension 1 copy them.

Fallback.  The tile holds 32·d scalars, d known only at the call: the phase as it was is its
fallback, run where the tile exceeds the device's local memory (``hoist_opencl``'s mechanism).
"""
from __future__ import annotations

import dataclasses

import sympy

from fsmooth.cost_model import DeviceDescription
from fsmooth.names import NameSupply
from fsmooth.types import ArrayT

from . import phrases as p
from .from_dps import as_exp
from .hoist_opencl import MAX_LOCAL, HoistedBuffer, nest_dimension

LANES = 32  # a tile's rows: the work-group's size along dimension 0


def stage_tiles(planned, device: DeviceDescription):
    """``planned`` (a ``codegen_opencl.OpenCLPlan``) with the rows that its nests walk staged in
    local memory where ``device``'s is a scratchpad (module docstring)."""
    if device.local_memory != "scratchpad":
        return planned
    k, plan = planned.kernel, planned.kernels
    inputs = frozenset(name for name, ty, _ in k.params if isinstance(ty, ArrayT))
    buffers = dict(plan.buffers)
    names = NameSupply(set(planned.taken) | set(buffers), suffix="_buf", separator="")
    phases, notes = [], list(plan.notes)
    for j, phase in enumerate(plan.phases):
        has_fallback = j + 1 < len(plan.phases) and plan.phases[j + 1].fallback
        staged = None
        if phase.nest is not None and not phase.fallback and not has_fallback:
            staged = _staged(phase, inputs, buffers, names, notes)
        if staged is None:
            phases.append(phase)
        else:
            phases += [staged, dataclasses.replace(phase, name=f"{phase.name[:-2]}_fallback_k", fallback=True)]
    return dataclasses.replace(planned, kernels=dataclasses.replace(plan, phases=tuple(phases), buffers=buffers,
                                                                    notes=tuple(notes)))


def _staged(phase, inputs: frozenset, buffers: dict, names: NameSupply, notes: list):
    """``phase`` with the rows its loop along dimension 0 walks staged, or None where it walks none."""
    count = len(phase.nest.loops)
    index = next(name for depth, name in enumerate(phase.nest.loops)
                 if nest_dimension(depth, count, phase.dimensions) == 0)
    loop = next(c for c in p.walk(phase.body) if isinstance(c, p.ParFor) and c.index == index)
    sources = dict.fromkeys(read.arr.arr for read in _walked_rows(loop.body, inputs, index, False))
    if not sources:
        return None
    taken = NameSupply(p.identifiers(phase.body))
    body, stages = loop.body, []
    for source in sources:
        row = source.type.data.elem  # Arr(d, num)
        buf = HoistedBuffer(names.fresh(f"tile_{source.name}"), "local", p.scalar_of(row),
                            sympy.Integer(LANES) * sympy.sympify(row.size))
        buffers[buf.name] = buf
        lane = taken.fresh("lane")
        flat = p.Arr(buf.count, p.Num(buf.elem))
        offset = sympy.Symbol(lane, integer=True)
        tile = p.Shift(p.Ident(buf.name, p.AccT(flat)), offset, row, sympy.Integer(LANES))
        body = _read_from(body, source, index, as_exp(tile))
        stages.append((source, tile, lane))
        notes.append(f"the rows of {source.name} that the nest's loop over {index} walks are staged in local memory, "
                     f"transposed: {LANES} rows a work-group of {LANES} × {MAX_LOCAL // LANES} (the kernel as it was where "
                     f"they exceed the device's local memory)")
    staged = p.replaced(phase.body, {id(loop): dataclasses.replace(loop, body=body)})
    for source, tile, lane in reversed(stages):
        staged = p.StagedRows(source, tile, LANES, lane, staged)
    tile = (LANES, MAX_LOCAL // LANES) + (1,) * (len(phase.global_size) - 2)
    return dataclasses.replace(phase, body=staged, tiles=(tile,))


def _walked_rows(c: p.Phrase, inputs: frozenset, index: str, in_loop: bool):
    """The reads ``source[index][c]`` of an input's rows of scalars inside a sequential loop of ``c``."""
    match c:
        case p.Idx(p.Idx(p.Ident(name, p.ExpT(p.Arr(_, p.Arr(_, p.Num())))), p.Ident(i)), _) if (
                in_loop and name in inputs and i == index):
            yield c
        case p.For():
            in_loop = True
    for child in p.children(c):
        yield from _walked_rows(child, inputs, index, in_loop)


def _read_from(c: p.Phrase, source: p.Ident, index: str, view: p.Shift) -> p.Phrase:
    """``c`` with each read of ``source[index][c]`` reading ``view[c]``."""
    match c:
        case p.Idx(p.Idx(p.Ident() as arr, p.Ident(i)), _) if arr == source and i == index:
            return dataclasses.replace(c, arr=view)
    return p.map_children(lambda child: _read_from(child, source, index, view), c)

