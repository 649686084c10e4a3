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

Jammed.  Where each work-item runs J points (``dpia.unroll_jam.jam_lanes``: point s of lane l of
group g is 32·J·g + l + 32·s), the tile holds the 32·J rows of the group, point s of lane l at
l + 32·s, element c at + 32·J·c: a warp's read of one column of its s-th points is still 32
neighbouring scalars.  Each work-item copies its J rows.

Fallback.  The tile holds 32·J·d scalars, d known only at the call: the phase as it was is its
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
from .unroll_jam import LANES, lane_rows  # a tile's rows: the work-group's size along dimension 0


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
    parts = _parts(loop, phase.jam)
    sources = dict.fromkeys(read.arr.arr for read in _walked_rows(loop.body, inputs, parts, False))
    if not sources:
        return None
    taken = NameSupply(p.identifiers(phase.body))
    body, stages = loop.body, []
    rows = LANES * phase.jam
    for source in sources:
        row = source.type.data.elem  # Arr(d, num)
        buf = HoistedBuffer(names.fresh(f"tile_{source.name}"), "local", p.scalar_of(row),
                            sympy.Integer(rows) * sympy.sympify(row.size))
        buffers[buf.name] = buf
        lane, part = taken.fresh("lane"), taken.fresh("part") if phase.jam > 1 else None
        flat = p.Arr(buf.count, p.Num(buf.elem))

        def view(offset: sympy.Expr) -> p.Shift:
            """The tile's row of the element ``offset`` rows of ``LANES`` after the lane's first."""
            at = sympy.Symbol(lane, integer=True) + LANES * offset
            return p.Shift(p.Ident(buf.name, p.AccT(flat)), at, row, sympy.Integer(rows))

        body = _read_from(body, source, {name: as_exp(view(offset)) for name, offset in parts.items()})
        stages.append((source, view(sympy.Symbol(part, integer=True) if part else sympy.Integer(0)), lane, part))
        notes.append(f"the rows of {source.name} that the nest's loop over {index} walks are staged in local memory, "
                     f"transposed: {rows} rows a work-group of {LANES} × {MAX_LOCAL // LANES} (the kernel as it was where "
                     f"they exceed the device's local memory)")
    staged = p.replaced(phase.body, {id(loop): dataclasses.replace(loop, body=body)})
    for source, tile, lane, part in reversed(stages):
        staged = p.StagedRows(source, tile, LANES, lane, staged, phase.jam, part)
    tile = (LANES, MAX_LOCAL // LANES) + (1,) * (len(phase.global_size) - 2)
    return dataclasses.replace(phase, body=staged, tiles=(tile,))


def _parts(loop: p.ParFor, jam: int) -> dict:
    """The variables that name the elements of ``loop``'s work-item: its index, or where it runs
    ``jam`` > 1 of them (``dpia.unroll_jam.jam_lanes``), each element's index, assigned the
    work-item's first element plus ``LANES`` times this part (an integer, or a loop's index):
    name -> part."""
    if jam == 1:
        return {loop.index: sympy.Integer(0)}
    first = lane_rows(sympy.Symbol(loop.index, integer=True), jam)
    parts = {}
    for c in p.walk(loop.body):
        match c:
            case p.New(name, body=p.Seq((p.Assign(p.Ident(target), p.NatExp(value)), *_))) if target == name:
                part = sympy.simplify((value - first) / LANES)
                if part.is_Integer or part.is_Symbol:
                    parts[name] = part
    return parts


def _walked_rows(c: p.Phrase, inputs: frozenset, parts: dict, in_loop: bool):
    """The reads ``source[i][c]`` of an input's rows of scalars inside a sequential loop of ``c``,
    i one of ``parts``."""
    match c:
        case p.Idx(p.Idx(p.Ident(name, p.ExpT(p.Arr(_, p.Arr(_, p.Num())))), p.Ident(i)), _) if (
                in_loop and name in inputs and i in parts):
            yield c
        case p.For():
            in_loop = True
    for child in p.children(c):
        yield from _walked_rows(child, inputs, parts, in_loop)


def _read_from(c: p.Phrase, source: p.Ident, views: dict) -> p.Phrase:
    """``c`` with each read of ``source[i][c]`` reading ``views[i][c]``."""
    match c:
        case p.Idx(p.Idx(p.Ident() as arr, p.Ident(i)), _) if arr == source and i in views:
            return dataclasses.replace(c, arr=views[i])
    return p.map_children(lambda child: _read_from(child, source, views), c)

