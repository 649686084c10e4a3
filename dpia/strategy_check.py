"""The strategy of an imperative DPIA kernel for OpenCL (DPIA paper §6.2; RISE & Shine's Rd/Wr
rule): every ``parfor`` gets its level, every region its address space, and what OpenCL cannot
run is a located ``CompileError``.

Levels.  A ``parfor`` whose build named no level gets the default strategy: global where it is
the outermost loop of an OpenCL kernel, or all of a global loop's body but for private scalars,
with a size the launch knows and not a constant below ``NESTED_GLOBAL_MIN`` (``_level``);
sequential inside anything else.  A named level must nest as
OpenCL's hierarchy does: global only inside global (one NDRange dimension per level, three at
most), workgroup only at the top of a kernel, local only inside a workgroup (a sequential loop
in between is fine: its bounds are the same for the whole group), and nothing parallel inside
a sequential kernel or a local loop.

Address spaces.  A region (an array intermediate, DPS's ``alloc``) lives where the build that
writes it says (``to_global``/``to_local``/``to_private``).  Unsaid, it is private where it is
small and one work-item's own (``private_by_default``: a 3-vector or a 2×2 matrix that a
work-item computes and reads itself is ``double v[3];``, not a hoisted global buffer with one slice
per work-item), else global, unless its writer is a parallel build that the program mapped
explicitly: then the program must say where the value goes (Shine: a ``mapLocal`` whose result is
stored needs ``toLocal``/``toGlobal``).  Local memory exists only inside a work-group; private
memory cannot be written by a parallel loop (each work-item has its own copy) and must have a size
known when compiling.

Races.  A parallel ``parfor`` body must be passive: it writes its own element (``out``) and
storage declared inside it, nothing else.
"""
from __future__ import annotations

import dataclasses

import sympy

from fsmooth.dps.local_arrays import small_constant_size
from fsmooth.errors import CompileError
from fsmooth.foreign import Foreign
from fsmooth.strategies import Strategy
from fsmooth.types import BYTES, Index

from . import phrases as p

PARALLEL = ("global", "workgroup", "local")
NESTED_GLOBAL_MIN = 32  # the least constant size of a nested loop the default strategy makes global


_WHAT = {"global": "build_global", "workgroup": "build_workgroup", "local": "build_local",
         "seq": "a sequential loop"}


def level_of(loop: p.ParFor) -> str | None:
    return loop.strategy.level if loop.strategy is not None else None


def _loc(loop: p.ParFor | None):
    return loop.strategy.loc if loop is not None and loop.strategy is not None else None


def root(ph: p.Phrase) -> str | None:
    """The identifier an acceptor or expression path starts from."""
    match ph:
        case p.Ident(name):
            return name
        case p.Idx(arr) | p.Shift(arr):
            return root(arr)
    return None


# ----------------------------------------------------------------------------- levels


def resolve_levels(c: p.Phrase, outer: tuple = (), sizes: frozenset | None = None,
                   nested: p.ParFor | None = None) -> p.Phrase:
    """``c`` with the level of every ``parfor`` decided; ``outer``: the levels of the loops
    around ``c`` (``("seq",)`` for the body of a sequential OpenCL kernel); ``sizes``: the
    kernel's size symbols, where the OpenCL kernel is one loop nest (None: no default loop
    but the outermost is global); ``nested``: the loop that is all of the enclosing global
    loop's body (``_nested_loop``)."""
    match c:
        case p.ParFor(strategy=strategy):
            level = _level(c, outer, sizes, c is nested)
            s = strategy or Strategy()
            resolved = dataclasses.replace(s, level=level)
            inner = _nested_loop(c.body) if level == "global" else None
            return dataclasses.replace(c, strategy=resolved, body=resolve_levels(c.body, outer + (level,), sizes, inner))
        case p.For() | p.DoubleBuffer():
            return p.map_children(lambda ph: resolve_levels(ph, outer + ("seq",), sizes), c)
    return p.map_children(lambda ph: resolve_levels(ph, outer, sizes, nested), c)


def _nested_loop(body: p.Phrase, scalars: frozenset = frozenset()) -> p.ParFor | None:
    """The parfor that is all of a loop's ``body`` but for private scalars (``scalars``) set
    without a loop: run by a work-item each, those scalars cost an element what they cost a row,
    and no two work-items write the same memory."""
    match body:
        case p.ParFor():
            return body
        case p.New(name, p.Num(), inner):
            return _nested_loop(inner, scalars | {name})
        case p.Seq((*first, last)) if all(isinstance(cmd, p.Assign) and root(cmd.acc) in scalars
                                          and not _has_loop(cmd) for cmd in first):
            return _nested_loop(last, scalars)
    return None


def _has_loop(c: p.Phrase) -> bool:
    return isinstance(c, (p.ParFor, p.For, p.DoubleBuffer, p.ParallelReduce)) or any(_has_loop(ph) for ph in p.children(c))


def _level(loop: p.ParFor, outer: tuple, sizes: frozenset | None, nested: bool) -> str:
    asked = level_of(loop)
    if asked is None:
        # the default strategy: the outermost loop global, and with it (one NDRange dimension
        # each, three at most) a loop nested in it alone whose size the launch knows, where the
        # kernel is that one nest (a second loop of its own would run once per work-item of the
        # other dimensions); the rest sequential
        if not outer:
            return "global"
        size = sympy.sympify(loop.size)
        if not (nested and sizes is not None and all(o == "global" for o in outer) and len(outer) < 3):
            return "seq"
        if size.is_number:
            # fewer elements than a warp add little parallelism, and multiply the buffers of
            # whatever each element stores
            return "global" if size >= NESTED_GLOBAL_MIN else "seq"
        return "global" if {s.name for s in size.free_symbols} <= sizes else "seq"
    inner = outer[-1] if outer else None
    ok = {
        "seq": True,
        "global": all(o == "global" for o in outer) and len(outer) < 3,
        "workgroup": not outer,
        "local": "workgroup" in outer and "local" not in outer and "global" not in outer,
    }[asked]
    if not ok:
        where = (f"inside {_WHAT[inner]}" if inner is not None
                 else "outside a build_workgroup" if asked == "local" else "here")
        if asked == "global" and len(outer) >= 3 and inner == "global":
            where = "nested more than three deep (OpenCL has three dimensions)"
        raise CompileError(f"illegal nesting: {_WHAT[asked]} {where}; OpenCL nests global in global, "
                           f"workgroup at the top of a kernel and local inside a workgroup", _loc(loop))
    return asked


# ----------------------------------------------------------------------------- address spaces


def region_spaces(c: p.Phrase, regions: frozenset, outer: tuple = ()) -> dict:
    """The address space of each region in ``regions`` (names of array ``new``s) that ``c``
    writes, checked against where it is declared and who writes it.  A region declared outside
    ``c`` is one that several OpenCL kernels share (``dpia.hoist_opencl``): unsaid, it is global,
    the only memory that outlives a kernel."""
    writers: dict = {}  # region -> [(ParFor, levels around the region's declaration)]
    declared: dict = {}  # region -> (levels around its ``new``, its data)
    foreign: set = set()  # regions a foreign function writes or reads (its arrays are in global memory)
    _collect(c, outer, regions, writers, declared, foreign)
    spaces = {}
    for region in regions:
        loops = writers.get(region, [])
        said = {lp.strategy.space for lp in loops if lp.strategy is not None and lp.strategy.space}
        if len(said) > 1:
            raise CompileError(f"the intermediate written by these builds is given two address spaces "
                               f"({', '.join(sorted(said))})", _loc(loops[0]))
        space = said.pop() if said else None
        around, data = declared.get(region, (outer, None))  # data None: declared outside c
        if space is None:
            mapped = [lp for lp in loops if level_of(lp) in PARALLEL and lp.strategy.loc is not None]
            if mapped:
                raise CompileError(f"the result of {_WHAT[level_of(mapped[0])]} is stored in memory, but "
                                   f"its address space is missing: wrap it in to_global(...) or "
                                   f"to_local(...) (Rd/Wr: a value written to memory needs a place)",
                                   _loc(mapped[0]))
            private = data is not None and region not in foreign and private_by_default(data, around, loops)
            space = "private" if private else "global"
        first = loops[0] if loops else None
        if space == "local" and "workgroup" not in around:
            raise CompileError("to_local outside a work-group: local memory belongs to one work-group, "
                               "so the build must be inside build_workgroup",
                               _loc(first) if first else None)
        if space == "private":
            parallel = [lp for lp in loops if level_of(lp) in PARALLEL]
            if parallel:
                raise CompileError(f"to_private of {_WHAT[level_of(parallel[0])]}: private memory belongs "
                                   f"to one work-item and cannot be written by a parallel loop",
                                   _loc(parallel[0]))
        spaces[region] = space
    return spaces


def private_by_default(data: p.Data, around: tuple, writers: list) -> bool:
    """Whether the default strategy keeps a region of ``data``, declared inside loops of the
    levels ``around`` and written by the loops ``writers``, in private memory: its size is known
    when compiling and small (``dps.local_arrays.small_constant_size``, the test that keeps a
    region of C in a local too), no parallel loop writes it, and it is one work-item's own, not
    shared by the work-items of a group (or of a launch)."""
    return (small_constant_size(p.elements(data), _element_bytes(data))
            and not any(level_of(lp) in PARALLEL for lp in writers) and _owned_by_one_work_item(around))


def _owned_by_one_work_item(around: tuple) -> bool:
    """Whether storage declared inside loops of the levels ``around`` belongs to one work-item:
    inside a global or local loop (an iteration is one work-item's) or anywhere in a sequential
    kernel (``around`` starts with its ``("seq",)``); not in a work-group outside its local loops,
    where the group shares it, nor at the top of a parallel kernel, outside its loop."""
    parallel = [level for level in around if level in PARALLEL]
    return parallel[-1] in ("global", "local") if parallel else around[:1] == ("seq",)


def _element_bytes(data: p.Data) -> int:
    match data:
        case p.Arr(_, elem):
            return _element_bytes(elem)
        case p.IdxT():
            return BYTES[Index]
    return BYTES[p.scalar_of(data)]


def _collect(c: p.Phrase, outer: tuple, regions: frozenset, writers: dict, declared: dict, foreign: set):
    match c:
        case p.New(name, data) if name in regions:
            declared[name] = (outer, data)
        case p.ParFor(acc=acc):
            r = root(acc)
            if r in regions:
                writers.setdefault(r, []).append(c)
            for ph in p.children(c):
                _collect(ph, outer + (level_of(c) or "seq",), regions, writers, declared, foreign)
            return
        case p.For() | p.DoubleBuffer():
            for ph in p.children(c):
                _collect(ph, outer + ("seq",), regions, writers, declared, foreign)
            return
        case p.CallCmd(fn, out, args) if isinstance(fn, Foreign):
            foreign |= {root(ph) for ph in (out, *args) if isinstance(p.data_of(ph), p.Arr)} & regions
    for ph in p.children(c):
        _collect(ph, outer, regions, writers, declared, foreign)


def private_count(data: p.Data, loc=None) -> int:
    count = sympy.sympify(p.elements(data))
    if not count.is_Integer:
        raise CompileError(f"to_private of an array of {count} elements: private arrays need a size "
                           f"known when compiling", loc)
    return int(count)


# ----------------------------------------------------------------------------- races


def check_passive(c: p.Phrase) -> None:
    """Raise where a parallel ``parfor``'s body writes storage declared outside it."""
    for loop in _parallel_loops(c):
        inside = _bound(loop.body) | {loop.out}
        for target, where in _writes(loop.body):
            if target is not None and target not in inside:
                raise CompileError(f"the body of {_WHAT[level_of(loop)]} is not passive: it writes "
                                   f"{target}, which is declared outside it, from every iteration "
                                   f"(a race); write only the build's own element", _loc(where) or _loc(loop))


def _parallel_loops(c: p.Phrase):
    if isinstance(c, p.ParFor) and level_of(c) in PARALLEL:
        yield c
    for ph in p.children(c):
        yield from _parallel_loops(ph)


def _bound(c: p.Phrase) -> set:
    names = set()
    match c:
        case p.New(name):
            names.add(name)
        case p.ParFor(out=out):
            names.add(out)
        case p.DoubleBuffer(state=state, out=out):
            names |= {state, out}
    for ph in p.children(c):
        names |= _bound(ph)
    return names


def _writes(c: p.Phrase, loop=None):
    """(root of each acceptor written, the loop it is written in) in ``c``."""
    match c:
        case p.Assign(acc):
            yield root(acc), loop
        case p.CallCmd(out=out):
            yield root(out), loop
        case p.DoubleBuffer(first=first, second=second):
            yield root(first), loop
            yield root(second), loop
        case p.ParFor(acc=acc):  # a nested loop writes through its acceptor
            yield root(acc), c
    inner = c if isinstance(c, p.ParFor) else loop
    for ph in p.children(c):
        if isinstance(c, p.ParFor) and ph is c.acc:
            continue
        yield from _writes(ph, inner)
