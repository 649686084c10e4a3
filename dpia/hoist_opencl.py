"""An imperative DPIA kernel as OpenCL kernels (DPIA paper §6.4): kernels split at global
synchronisation points, every global and local ``new`` hoisted to a kernel argument.

Kernels.  The top of the body is a sequence of commands under ``new``s.  A top-level ``parfor``
(default or global or workgroup) is one OpenCL kernel: its iterations are the NDRange.  Every
run of other top-level commands (an ``ifold``'s loop, a scalar assignment, a parfor the program
mapped sequentially) is one kernel of a single work-item: the second phase of a reduction, say.
Kernels run in order, so what one writes the next reads.  Sequential commands after a kernel of
a single work-group join it as its ``tail`` (after a barrier, one work-item runs them): the copy
of a reduction's total into the result costs no launch of its own.  A top-level ``new`` used by one
kernel stays in it; one shared by several becomes a 'temp' buffer (a scalar: of one element).
A scalar ``let`` at the top that is pure arithmetic of sizes (``n = length(x)``, ``(n + 2047) //
2048``, GMM's ``-0.5 · double(n) · double(d) · log 2π``: written once, from sizes, scalar parameters
and other such lets, with no read of memory, no call and no floating-point division) is neither:
each kernel that uses it recomputes it, which costs a few operations where a one work-item kernel
and a temp buffer would cost a launch (some 6 µs of device time on an H200, the time of the
launch that GMM's objective then no longer has).

One launch for a two-phase reduction.  A kernel of work-groups (a workgroup loop: the first phase
of a reduction, one partial per group) followed by a kernel of one work-group that reads what
they wrote in 'temp' buffers (the second phase, combining the partials) are one launch
(``_one_launch``): each group runs the first body and takes a ticket from a 'counter' buffer (one
``int``, zeroed when allocated); the group that takes the last ticket, when every other group's
partials are written, runs the second body (``Phase.last``) and its tail, and sets the counter
back to zero for the next call.  The buffers handed over (``LastGroup.handover``) are written and
read with atomics (``dpia.codegen_opencl``): they cross work-groups; their role is 'handover', a
'temp' that the launcher zeroes when it allocates it (an atomic store reads the old value, which
Oclgrind would otherwise report as uninitialised; every element the last group reads is written
first in the same launch).  The launch has at least one group, so the second body runs where the
first has no iteration (a sum of nothing is its init).

Hoisting.  Inside a kernel, a ``new`` in global memory becomes a 'temp' buffer with one copy
per iteration of every enclosing parallel loop (its element count times theirs), indexed by
their loop variables; a ``new`` in local memory becomes a 'local' buffer with one copy per
iteration of the enclosing local loops (one work-group holds one).  A local array whose size is
known only at the call (a row of softmax's exponentials, ``fsmooth.auto_reductions``) may not fit
the device's local memory, so its kernel has a fallback planned with it in global memory: a second
``Phase`` (``fallback``, named ``<kernel>_fallback_k``), which the launcher runs instead of the first
where that one's local buffers exceed the device's local memory (``fsmooth.opencl_artifact``).
Private arrays (``to_private``, and the small ones a work-item computes for itself where the
program says nothing: ``strategy_check.private_by_default``) stay in the kernel (``T x[n]``);
scalars are private variables.

Launch sizes (sympy over the size symbols).  Global loops are strided (``for (i = gid; i < n;
i += gsize)``), so any NDRange is correct; the kernel runs one work-item per iteration of the
outermost global loops (one dimension per nesting level).  A workgroup kernel runs one group
per iteration of its workgroup loop, each of as many work-items as its widest local loop of
known size (at most ``MAX_LOCAL``; ``DEFAULT_LOCAL`` when none is known).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import sympy

from fsmooth.cost_model import GENERIC_GPU, DeviceDescription, Nest, choose_nest
from fsmooth.errors import CompileError
from fsmooth.names import NameSupply
from fsmooth.opencl_artifact import STATUS_ELEM
from fsmooth.shape.sizes import same_size
from fsmooth.types import Card, Double, Float, Index, Scalar

from . import phrases as p
from .nest_accesses import global_nest
from .phrases import free_identifiers, loops_at_top
from .strategy_check import PARALLEL, check_passive, level_of, private_count, region_spaces, resolve_levels, root
from .unroll_jam import jam_lanes

MAX_LOCAL = 256
DEFAULT_LOCAL = 64


@dataclass(frozen=True)
class HoistedBuffer:
    name: str
    role: str  # 'temp' (global), 'local', 'counter' (a launch's tickets: LastGroup.counter),
    # 'handover' (a 'temp' that crosses the work-groups of a launch: LastGroup.handover) or
    # 'lookback' (global, zeroed once: dpia.scan_opencl)
    elem: Scalar
    count: sympy.Expr  # elements, over the size symbols


@dataclass(frozen=True)
class LastGroup:
    """The second launch of a two-phase reduction, of one work-group, run in the first (module
    docstring): the group that takes the last ticket of the 'counter' buffer ``counter`` runs
    ``body``, reading the 'temp' buffers ``handover`` that the groups wrote; ``groups``: the
    iterations of the first body's workgroup loop; ``flag``: a 'local' buffer, whether this group
    took the last ticket."""

    body: p.Phrase
    handover: frozenset
    counter: str
    groups: sympy.Expr
    flag: str


@dataclass(frozen=True)
class Phase:
    """One OpenCL kernel: its body (free identifiers: parameters, the result, size symbols and
    hoisted buffers) and its NDRange.  ``tail``: sequential commands that one work-item runs
    after the body, in the same launch (only where the NDRange is a single work-group, whose
    barrier orders them after the body; with ``last``, they follow it in the last group)."""

    name: str
    body: p.Phrase
    sequential: bool
    global_size: tuple  # sympy
    local_size: tuple | None
    tail: p.Phrase | None = None
    # the phase before this one with its local arrays of a size known only at the call in global
    # memory, run instead of it where those do not fit the device's local memory (``_fallback``)
    fallback: bool = False
    last: LastGroup | None = None
    # a nest of global loops: the NDRange dimension of the loop at each depth (outermost first;
    # None: the innermost is dimension 0, the next 1, ...) and the work-group tiles the launch
    # picks among, the least padded for the call's sizes (None: ``codegen_opencl.NESTED_LOCAL``),
    # the cost model's choice where the program says nothing (``_nest_shape``)
    dimensions: tuple | None = None
    tiles: tuple | None = None
    nest: Nest | None = None  # the nest the cost model priced for them
    jam: int = 1  # the elements of its loop along the lanes a work-item runs (``dpia.unroll_jam.jam_lanes``)

    def parts(self) -> tuple:
        """The phrases the launch runs: the body, then the last group's and the tail where present."""
        return tuple(part for part in (self.body, self.tail, self.last and self.last.body) if part is not None)


@dataclass(frozen=True)
class KernelPlan:
    phases: tuple  # Phase, in launch order
    buffers: dict  # name -> HoistedBuffer, in order of hoisting
    notes: tuple = ()  # the launch shapes the cost model chose, and why (``_nest_shape``)


@dataclass(frozen=True)
class _Loop:
    index: str
    size: sympy.Expr
    level: str


def plan_kernels(k: p.ImperativeKernel, symbol: str, taken: set, one_launch: bool = True,
                 device: DeviceDescription = GENERIC_GPU) -> KernelPlan:
    """``k``'s body as OpenCL kernels; ``taken``: names buffers must not have; ``one_launch``:
    whether a two-phase reduction is one launch (module docstring); ``device``: the device
    whose cost model picks the launch shape of a nest of global loops."""
    sizes = frozenset(s.name for s in k.sizes)
    read_only = sizes | {name for name, _, _ in k.params}  # the kernel's parameters and sizes
    names = NameSupply(taken, suffix="_buf", separator="")  # r_buf, r_buf1, ...
    news, leaves = _spine(_forms(k.body))
    scalar_params = {name for name, ty, _ in k.params if isinstance(ty, Scalar)}
    lets = _recomputed_lets(news, leaves, scalar_params)
    groups = _phases([leaf for leaf in leaves if not any(leaf is let for let in lets.values())])
    buffers: dict = {}
    bodies = [p.seq(*cmds) for _, cmds in groups]
    mentioned = [free_identifiers(body) for body in bodies]  # kept as bodies change: one walk each
    for new in reversed(news):
        users = [j for j, names_of_body in enumerate(mentioned) if new.name in names_of_body]
        if new.name in lets:
            # inner lets were placed first, so this one ends up outside them, as in the program
            for j in users:
                bodies[j] = replace(new, body=p.seq(lets[new.name], bodies[j]))
                mentioned[j] = free_identifiers(bodies[j])
        elif len(users) == 1:
            bodies[users[0]] = replace(new, body=bodies[users[0]])
            mentioned[users[0]] = free_identifiers(bodies[users[0]])
        elif users:
            # shared between kernels: global memory outlives a kernel, local and private do not
            if new.arena_offset is not None:
                space = region_spaces(p.seq(*bodies), frozenset([new.name]), ("seq",))[new.name]
                if space != "global":
                    raise CompileError(f"the {space} array {new.name} is used by several OpenCL kernels: "
                                       f"only global memory outlives a kernel")
            buf = _buffer(names, new.name, "temp", new.data, sympy.Integer(1), sizes)
            buffers[buf.name] = buf
            acc, exp = _views(buf, new.data, sympy.Integer(0))
            for j in users:
                if new.name in _size_names(bodies[j]) and new.name not in _written(bodies[j]):
                    # a size of that kernel (a filter's kept length, counting a loop): a copy of
                    # the buffer's value under its name, which the sizes then name
                    bodies[j] = replace(new, body=p.seq(p.Assign(p.Ident(new.name, p.AccT(new.data)), exp), bodies[j]))
                else:
                    bodies[j] = p.substitute_variable(bodies[j], new.name, acc, exp)
                mentioned[j] = free_identifiers(bodies[j])
    phases, notes = [], []
    for (sequential, _), body in zip(groups, bodies):
        outer = ("seq",) if sequential else ()
        said = not sequential and any(level_of(lp) is not None for lp in _all_loops(body))
        body = resolve_levels(body, outer, sizes if len(list(loops_at_top(body))) == 1 else None)
        check_passive(body)
        regions = frozenset(n.name for n in _news(body) if n.arena_offset is not None)
        spaces = region_spaces(body, regions, outer)
        contiguous = _contiguous_regions(body)
        shape = {} if sequential or said else _nest_shape(body, device, notes)
        if shape.get("jam", 1) > 1:
            body = jam_lanes(body, shape["jam"], NameSupply(set(taken) | p.identifiers(body) | sizes | read_only))
        hoisted = _hoisted(body, spaces, names, buffers, sizes, contiguous, shape.get("dimensions"))
        global_size, local_size = _ndrange(hoisted, sequential, sizes, shape.get("dimensions"))
        if sequential and phases and _single_group(phases[-1]) and phases[-1].tail is None and not phases[-1].fallback:
            phases[-1] = replace(phases[-1], tail=hoisted)  # sequential: no local arrays, so no fallback
            continue
        if sequential and phases and not phases[-1].fallback and _after_the_total(phases[-1], hoisted, read_only):
            phases[-1] = replace(phases[-1], body=_total_then(phases[-1].body, hoisted))
            continue
        phases.append(Phase("", hoisted, sequential, global_size, local_size, **shape))
        fallback = _fallback(body, spaces)
        if fallback is not None:
            phases.append(Phase("", _hoisted(body, fallback, names, buffers, sizes, contiguous, shape.get("dimensions")),
                                sequential, global_size, local_size, fallback=True, **shape))
    if one_launch:
        phases = _one_launch(phases, buffers, names)
    # the OpenCL kernels are named after the kernel's exported C name (dpia.emit.exported_name), a
    # fallback after the phase it replaces
    alone = sum(not ph.fallback for ph in phases) == 1
    named, j = [], -1
    for ph in phases:
        j += not ph.fallback
        stem = symbol if alone else f"{symbol}_{j}"
        named.append(replace(ph, name=f"{stem}_fallback_k" if ph.fallback else f"{stem}_k"))
    return KernelPlan(tuple(named), buffers, tuple(notes))


def _nest_shape(body: p.Phrase, device: DeviceDescription, notes: list) -> dict:
    """The launch shape of ``body`` where it is a nest of global loops of the default strategy:
    the loop along the lanes and the tile that ``cost_model.choose_nest`` finds cheapest on
    ``device`` (the ``Phase`` fields ``dimensions``, ``tiles`` and ``nest``), with a note of the
    choice; {} where it is not such a nest."""
    nest = global_nest(body)
    if nest is None:
        return {}
    choice = choose_nest(nest, device)
    chosen = choice.chosen
    tiles = [" × ".join(map(str, tile)) for tile in choice.launch_tiles]
    groups = tiles[0] if len(tiles) == 1 else f"the least padded for the call's sizes of {', '.join(tiles)}"
    notes.append(f"the nest of global loops over {', '.join(nest.loops)} runs {chosen.lanes} along the lanes "
                 f"(NDRange dimension 0), in work-groups of {groups} ({choice.explain()})")
    return {"dimensions": chosen.dimensions, "tiles": choice.launch_tiles, "nest": nest, "jam": chosen.jam}


def _fallback(body: p.Phrase, spaces: dict) -> dict | None:
    """The address spaces of ``body``'s fallback phase, or None where it needs none: its local
    arrays whose size is known only at the call (a row of softmax's exponentials, one per
    work-group) may not fit the device's local memory, so the launcher runs, in their place, the
    phase with those arrays in global memory (a copy per iteration of the enclosing parallel
    loops, as ``to_global`` would place them)."""
    sized_at_call = {n.name for n in _news(body) if spaces.get(n.name) == "local"
                     and not sympy.sympify(p.elements(n.data)).is_Integer}
    if not sized_at_call:
        return None
    return {**spaces, **dict.fromkeys(sized_at_call, "global")}


def _single_group(phase: Phase) -> bool:
    """Whether ``phase`` runs as one work-group (the second phase of a reduction), so that a
    barrier can order commands after its body without another launch."""
    return (not phase.sequential and phase.local_size is not None
            and same_size(sympy.sympify(phase.global_size[0]), sympy.sympify(phase.local_size[0])))


def _one_launch(phases: list, buffers: dict, names: NameSupply) -> list:
    """``phases`` with each launch of work-groups that a launch of one work-group reading what
    they wrote follows joined with it: the last group to finish runs the second (module docstring)."""
    joined: list = []
    for j, phase in enumerate(phases):
        # a phase with a fallback (the launcher runs one of the two) or a fallback is no half
        replaced = j + 1 < len(phases) and phases[j + 1].fallback
        handover = _handover(joined[-1], phase, buffers) if joined and not replaced else None
        if handover is None:
            joined.append(phase)
            continue
        groups = joined[-1]
        counter = HoistedBuffer(names.fresh("tickets"), "counter", STATUS_ELEM, sympy.Integer(1))
        flag = HoistedBuffer(names.fresh("last_group"), "local", Index, sympy.Integer(1))
        buffers[counter.name], buffers[flag.name] = counter, flag
        for name in handover:
            buffers[name] = replace(buffers[name], role="handover")
        last, tail = _reuse_locals(groups.body, (phase.body, phase.tail), buffers)
        # one group at least: the last group's body runs where the groups' loop has no iteration
        iterations = sympy.sympify(next(loops_at_top(groups.body)).size)
        size = groups.local_size[0] * sympy.Max(iterations, 1)
        joined[-1] = replace(groups, global_size=(size,), tail=tail,
                             last=LastGroup(last, handover, counter.name, iterations, flag.name))
    return joined


def _handover(groups: Phase, single: Phase, buffers: dict) -> frozenset | None:
    """The 'temp' buffers that ``groups`` (a launch of a workgroup loop) writes and ``single`` (a
    launch of one work-group after it) reads, where that is all that passes between them, so that
    the two can be one launch; else None."""
    if not (_workgroup_launch(groups) and not _single_group(groups) and groups.last is None
            and groups.tail is None and len(groups.global_size) == 1 and not groups.fallback
            and _workgroup_launch(single) and _single_group(single) and not single.fallback):
        return None
    second = p.seq(single.body, single.tail if single.tail is not None else p.Skip())
    # a buffer's name: a variable of both bodies is each one's own (a let of a size, bound in each)
    written = _written(groups.body)
    handed = {name for name in free_identifiers(second) if name in buffers and name in written}
    if not handed or any(buffers[name].role != "temp" or name in _written(second)
                         or buffers[name].elem not in (Float, Double, Index, Card) for name in handed):
        return None  # an output, a buffer both write, or of Bools (no atomics on bytes): no partials
    return frozenset(handed)


def _workgroup_launch(phase: Phase) -> bool:
    """A launch of a workgroup loop (a group per iteration), no scan."""
    top = next(loops_at_top(phase.body), None)
    return (not phase.sequential and top is not None and level_of(top) == "workgroup"
            and not any(isinstance(c, p.GroupScan) for c in p.walk(phase.body)))


def _reuse_locals(first: p.Phrase, second: tuple, buffers: dict) -> tuple:
    """The phrases ``second`` with each of their local buffers replaced by one of ``first``'s of
    the same element and count (dropped from ``buffers``): the second body runs after the first,
    so the launch needs the larger phase's local memory, not both phases'."""
    used = set().union(*(free_identifiers(c) for c in second if c is not None))
    firsts = free_identifiers(first)
    spare = [name for name in buffers if buffers[name].role == "local" and name in firsts]
    views = {}  # each phase's local buffers are its own (_hoisted): no name is both replaced and a replacement
    for name in [name for name in buffers if buffers[name].role == "local" and name in used]:
        buf = buffers[name]
        match = next((other for other in spare if (buffers[other].elem, buffers[other].count) == (buf.elem, buf.count)), None)
        if match is None:
            continue
        spare.remove(match)
        del buffers[name]
        flat = p.Arr(buf.count, p.Num(buf.elem))  # the same flat array as the buffer replaced (_views)
        views[name] = (p.Ident(match, p.AccT(flat)), p.Ident(match, p.ExpT(flat)))
    return tuple(None if c is None or not views else p.substitute_variables(c, views) for c in second)


def _after_the_total(phase: Phase, tail: p.Phrase, read_only: frozenset) -> bool:
    """Whether the sequential commands ``tail`` may run at the end of ``phase``'s single-pass
    scan, in its ``total`` (``dpia.scan_opencl``: work-item 0 of the group of the last tile,
    while other groups may still be writing their states): only where the phase is that scan
    (under ``new``s) and ``tail`` names nothing the scan's other commands name but the kernel's
    parameters and sizes (a filter's kept length copied out), so that no launch is spent on it."""
    _, leaves = _spine(phase.body)
    if phase.tail is not None or len(leaves) != 1 or not isinstance(leaves[0], p.GroupScan) or leaves[0].words is None:
        return False
    scan = leaves[0]
    return not (free_identifiers(tail) & free_identifiers(p.seq(scan.start, scan.element, scan.write))) - read_only


def _total_then(body: p.Phrase, tail: p.Phrase) -> p.Phrase:
    """``body`` with ``tail`` after its single-pass scan's total."""
    if isinstance(body, p.GroupScan):
        return replace(body, total=p.seq(body.total, tail))
    return p.map_children(lambda ph: _total_then(ph, tail), body)


# ----------------------------------------------------------------------------- kernels


def _spine(body: p.Phrase):
    """(the top-level ``new``s, outermost first; the other top-level commands, in order)."""
    news, leaves = [], []

    def spine(c: p.Phrase):
        match c:
            case p.Seq(cmds):
                for cmd in cmds:
                    spine(cmd)
            case p.New():
                news.append(c)
                spine(c.body)
            case p.Skip():
                pass
            case _:
                leaves.append(c)

    spine(body)
    return news, leaves


def _forms(c: p.Phrase, top: bool = True) -> p.Phrase:
    """``c`` with each ``TopLevel`` in its parallel form where it is a top-level command (under
    ``seq``s and ``new``s only), in its sequential form elsewhere (``dpia.scan_opencl``)."""
    match c:
        case p.TopLevel(parallel, sequential):
            return _forms(parallel, True) if top else _forms(sequential, False)
        case p.Seq(cmds) if top:
            return p.seq(*(_forms(cmd, True) for cmd in cmds))
        case p.New(body=body) if top:
            return replace(c, body=_forms(body, True))
    return p.map_children(lambda ph: _forms(ph, False), c)


def _phases(leaves: list):
    """The kernels, as (sequential, commands), of the top-level commands ``leaves``."""
    groups: list = []
    for leaf in leaves:
        sequential = not (isinstance(leaf, p.GroupScan)
                          or (isinstance(leaf, p.ParFor) and level_of(leaf) in (None, *PARALLEL)))
        if sequential and groups and groups[-1][0]:
            groups[-1][1].append(leaf)
        else:
            groups.append((sequential, [leaf]))
    return groups or [(True, [p.Skip()])]


def _recomputed_lets(news: list, leaves: list, scalar_params: set) -> dict:
    """name -> its one assignment, for the top-level scalar ``new``s that each kernel using
    them can recompute: written once, at the top, with pure arithmetic of sizes."""
    lets: dict = {}
    written = [_written(leaf) for leaf in leaves]
    for new in news:  # outermost first: a let's value may use the lets around it
        if new.arena_offset is not None or not _scalar(new.data):
            continue
        writes = [leaf for leaf, names in zip(leaves, written) if new.name in names]
        if len(writes) == 1 and isinstance(writes[0], p.Assign) and writes[0].acc == p.Ident(
                new.name, p.AccT(new.data)) and _size_arithmetic(writes[0].exp, scalar_params | set(lets)):
            lets[new.name] = writes[0]
    return lets


def _integer(d: p.Data) -> bool:
    return isinstance(d, p.IdxT) or (isinstance(d, p.Num) and d.scalar in (Index, Card))


def _scalar(d: p.Data) -> bool:
    return _integer(d) or (isinstance(d, p.Num) and d.scalar in (Double, Float))


def _written(c: p.Phrase) -> set:
    """The names that ``c`` writes (as an acceptor), found in one walk."""
    return {ph.name for ph in p.walk(c) if isinstance(ph, p.Ident) and isinstance(ph.type, p.AccT)}


def _size_arithmetic(e: p.Phrase, scalars: set) -> bool:
    """Arithmetic on sizes and the scalars ``scalars``: no memory read, no call; integers as
    ``dpia.codegen_c`` keeps them symbolic (a division by zero is still checked), floating-point
    numbers by + - * and conversions, which cannot fail."""
    match e:
        case p.Ident(name):
            return name in scalars
        case p.Literal(_, data):
            return _scalar(data)
        case p.NatExp():
            return True
        case p.ScalarOp("add" | "sub" | "mul" | "neg", args):
            return _scalar(p.data_of(e)) and all(_size_arithmetic(a, scalars) for a in args)
        case p.ScalarOp("floordiv" | "mod" | "to_Index", args):
            return _integer(p.data_of(e)) and all(_size_arithmetic(a, scalars) for a in args)
        case p.ScalarOp("to_Double" | "to_Float", args):
            return all(_size_arithmetic(a, scalars) for a in args)
    return False


def _news(c: p.Phrase):
    if isinstance(c, p.New):
        yield c
    for ph in p.children(c):
        yield from _news(ph)


def _size_names(c: p.Phrase) -> set:
    """The symbols of the sizes in ``c`` (its phrases' sympy fields and data types)."""
    def of(value) -> set:
        match value:
            case sympy.Basic():
                return {s.name for s in value.free_symbols}
            case p.Arr(size, elem):
                return of(size) | of(elem)
            case p.IdxT(size):
                return of(size)
            case p.Rec(items) | tuple(items):
                return set().union(*map(of, items))
            case p.ExpT(data) | p.AccT(data):
                return of(data)
        return set()
    return set().union(*(of(getattr(node, f.name)) for node in p.walk(c) for f in fields(node)))


# ----------------------------------------------------------------------------- hoisting


def _buffer(names: NameSupply, region: str, role: str, data: p.Data, copies: sympy.Expr, sizes) -> HoistedBuffer:
    count = sympy.expand(p.elements(data) * copies)
    unknown = {s.name for s in count.free_symbols} - sizes
    if unknown:
        raise CompileError(f"the intermediate {region} has {count} elements, which depends on "
                           f"{', '.join(sorted(unknown))}: OpenCL buffers need sizes known from the "
                           f"input sizes")
    base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in region).strip("_") or "buf"
    return HoistedBuffer(names.fresh(base), role, p.scalar_of(data), count)


def _views(buf: HoistedBuffer, data: p.Data, offset: sympy.Expr, stride: sympy.Expr = sympy.Integer(1)):
    """The acceptor and expression of one copy of ``data`` at ``offset`` in ``buf``, its scalars
    ``stride`` apart."""
    flat = p.Arr(buf.count, p.Num(buf.elem))
    return (p.Shift(p.Ident(buf.name, p.AccT(flat)), offset, data, stride),
            p.Shift(p.Ident(buf.name, p.ExpT(flat)), offset, data, stride))


def _contiguous_regions(c: p.Phrase) -> set:
    """The regions whose copies must be contiguous: what a pointer walks (a double buffer's
    two, a foreign function's arrays), not the index paths."""
    found = set()
    for node in p.walk(c):
        match node:
            case p.DoubleBuffer(first=first, second=second):
                found |= {root(first), root(second)}
            case p.CallCmd(out=out, args=args):
                found |= {root(ph) for ph in (out, *args)}
    return found


def _hoisted(body: p.Phrase, spaces: dict, names: NameSupply, buffers: dict, sizes, contiguous: set,
             dimensions: tuple | None) -> p.Phrase:
    """``body`` with its ``new``s in global and local memory hoisted to ``buffers`` (those in
    private memory marked so), each variable read and written through its buffer's view: the
    views of every ``new`` substituted in one walk of the body, not one walk of each ``new``'s body
    (nested ``new``s walked again for each one around them).  A body binds each name once, as
    ``spaces`` and ``contiguous``, by name, already take it to."""
    views: dict = {}
    hoisted = _hoist(body, (), spaces, names, buffers, sizes, contiguous, dimensions, views)
    return p.substitute_variables(hoisted, views) if views else hoisted


def _hoist(c: p.Phrase, loops: tuple, spaces: dict, names: NameSupply, buffers: dict, sizes,
           contiguous: set, dimensions: tuple | None, views: dict) -> p.Phrase:
    """``c`` with its ``new``s in global and local memory removed, the views of their variables
    in their buffers added to ``views`` (``_hoisted``)."""
    match c:
        case p.New(name, data, body, offset) if offset is not None:
            inner = _hoist(body, loops, spaces, names, buffers, sizes, contiguous, dimensions, views)
            space = spaces.get(name, "global")
            if space == "private":
                private_count(data)
                return replace(c, body=inner, arena_offset=None, space="private")
            if space == "local":
                after = max((j for j, lp in enumerate(loops) if lp.level == "workgroup"), default=-1)
                copies_of = [lp for lp in loops[after + 1:] if lp.level == "local"]
            else:
                copies_of = [lp for lp in loops if lp.level in PARALLEL]
            copies = math.prod((lp.size for lp in copies_of), start=sympy.Integer(1))
            nest = bool(copies_of) and all(lp.level == "global" for lp in copies_of)
            if nest:  # the enclosing global loops, outermost first: from the highest NDRange dimension
                depth = {lp.index: j for j, lp in enumerate(copies_of)}
                copies_of.sort(key=lambda lp: -nest_dimension(depth[lp.index], len(copies_of), dimensions))
            linear = sympy.Integer(0)
            for lp in copies_of:  # row-major over the loops, dimension 0 (or the innermost) fastest
                linear = linear * lp.size + sympy.Symbol(lp.index, integer=True)
            buf = _buffer(names, name, "local" if space == "local" else "temp", data, copies, sizes)
            buffers[buf.name] = buf
            if space == "global" and nest and name not in contiguous:
                # interleaved, scalar k of copy c at k·copies + c: the work-items of a warp, whose
                # NDRange dimension 0 runs over neighbours, then read neighbouring scalars in one
                # access, where copies side by side cost a memory transaction per work-item
                views[name] = _views(buf, data, linear, copies)
            else:
                views[name] = _views(buf, data, linear * p.elements(data))
            return inner
        case p.ParFor(size, _, index, _, _, body, strategy):
            inner = loops + (_Loop(index, sympy.sympify(size), strategy.level),)
            return replace(c, body=_hoist(body, inner, spaces, names, buffers, sizes, contiguous, dimensions, views))
        case p.GroupScan(tiles=tiles, sums=sums, words=words, window=window):
            # its local arrays: one per work-group; a single pass's look-back words: one per launch
            arrays = [(local, "local") for local in (*tiles, *sums, *window)]
            for array, role in arrays + ([(words, "lookback")] if words is not None else []):
                data = array.type.data
                buf = _buffer(names, array.name, role, data, sympy.Integer(1), sizes)
                buffers[buf.name] = buf
                views[array.name] = _views(buf, data, sympy.Integer(0))
    return p.map_children(lambda ph: _hoist(ph, loops, spaces, names, buffers, sizes, contiguous, dimensions, views), c)


# ----------------------------------------------------------------------------- NDRange


def nest_dimension(depth: int, count: int, dimensions: tuple | None) -> int:
    """The NDRange dimension of the global loop at ``depth`` of a nest of ``count``
    (``Phase.dimensions``; None: the innermost is dimension 0)."""
    return count - 1 - depth if dimensions is None else dimensions[depth]


def _ndrange(body: p.Phrase, sequential: bool, sizes, dimensions: tuple | None = None) -> tuple:
    if sequential:
        return (sympy.Integer(1),), (sympy.Integer(1),)
    scan = next((c for c in p.walk(body) if isinstance(c, p.GroupScan)), None)
    if scan is not None:
        return (_known(scan.groups, sizes) * scan.local,), (sympy.Integer(scan.local),)
    top = next(loops_at_top(body))
    if top.strategy.level == "global":
        dims: list = []
        _global_dims(body, 0, dims)
        # dimension 0's neighbouring work-items run together (a warp): by default the innermost
        # loop, whose neighbouring elements are neighbours in memory (``Phase.dimensions``)
        ordered = sorted(range(len(dims)), key=lambda depth: nest_dimension(depth, len(dims), dimensions))
        return tuple(_known(dims[depth], sizes) for depth in ordered), None
    # a vectorised loop needs one work-item per vector
    widths = [-(-int(lp.size) // lp.strategy.width) for lp in _all_loops(top)
              if level_of(lp) == "local" and sympy.sympify(lp.size).is_Integer]
    local = min(max(widths, default=DEFAULT_LOCAL), MAX_LOCAL) or 1
    groups = _known(top.size, sizes)
    return (groups * local,), (sympy.Integer(local),)


def _known(n, sizes) -> sympy.Expr:
    n = sympy.sympify(n)
    unknown = {s.name for s in n.free_symbols} - sizes
    if unknown:
        raise CompileError(f"a parallel loop of {n} iterations: the NDRange needs sizes known from the "
                           f"input sizes, not {', '.join(sorted(unknown))}")
    return n


def _all_loops(c: p.Phrase):
    if isinstance(c, p.ParFor):
        yield c
    for ph in p.children(c):
        yield from _all_loops(ph)


def _global_dims(c: p.Phrase, depth: int, dims: list):
    """The size of the first global loop at each nesting depth."""
    if isinstance(c, p.ParFor) and level_of(c) == "global":
        if len(dims) == depth:  # a vectorised loop has one work-item per vector
            width = c.strategy.width
            dims.append(c.size if width == 1 else sympy.ceiling(sympy.sympify(c.size) / width))
        _global_dims(c.body, depth + 1, dims)
        return
    for ph in p.children(c):
        _global_dims(ph, depth, dims)
