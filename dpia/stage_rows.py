"""A row that a work-group reads in several of its loops, read from global memory once; a row
whose last reader writes the group's output row element by element, kept in that output row.

A pass over the OpenCL kernels that ``dpia.hoist_opencl`` planned (``plan_opencl``: the levels
of the parfors are decided, the buffers hoisted and each launch's work-group size known), before
``dpia.vectorize``.  It looks at each workgroup loop (``for (i = get_group_id(0); ...)``, one row
a group: softmax's, ``fsmooth.auto_reductions``) and at the local loops at the top of its body.

Lanes.  A local loop of index t (width 1) is strided over the group's L work-items: work-item l
runs t = l, l + L, ...  An element index e computed in its body belongs to work-item t mod L
wherever e - t is L times an integer expression (``_owned``): e = t (a ``build_local`` of the
row writing or reading its own element) and e = 256·j + t (lane t's strided share of a
reduction, ``auto_reductions``, with L dividing 256) alike.  Two loops that touch the same
element e of a row in this way touch it on the same work-item, which orders the accesses by
program order alone: no barrier is needed between them, and none is added.

Staging.  A row of a global input whose place does not change inside the group (``m[i]``, i the
group's loop) read at owned elements by two or more of those loops is read from global memory
once: the first loop whose read covers every element of the row (e = t over the row's length,
or e = L'·j + t under ``if e < n`` with L'·J ≥ n) stores each element it reads into a local row
(``x := m[i][e]; S[e] := x``), and the later loops' owned reads of the row read S (their other
reads are left as they are).  Only on a device whose local memory is a scratchpad (a GPU's): where
it is global memory (a CPU's), the second read hits the same cache that the copy would be in, and
the copy is only more stores.  Where the last of those readers is a ``build_local`` of the same
length and type that writes its own element last from what it read (softmax's
``e[c] = exp(m[i][c] - mx)``) into a local row used by no earlier command, S is that row: the
element is read before it is overwritten, by the same work-item, so the group needs one row of
local memory, not two.  That row's accesses by other work-items than its elements' (Float
softmax's sum, from e[0], reads e[256·j + t + 1]) must each be followed by a barrier (after a local
loop that wrote an intermediate: code generation's) before the group's body ends, or the next row's
staging could overwrite an element another work-item has still to read (``_fenced``).  Otherwise S
is a local row of its own; a kernel that had no local row of a size known only at the call then
gets the kernel as it was for its fallback (``hoist_opencl``'s mechanism: the launcher runs it where
the local rows do not fit).  A fallback kernel, whose rows are in global memory because they do not
fit the device's local memory, stages nothing.

Output rows.  A row in global memory per group (the fallback's intermediate, one copy per row:
rows × row length elements) whose every access is owned, and whose last reader writes the
group's output row, its own element last, where nothing else touches that output row, is kept in
the output row itself: no scratch at all.  Each element is written and read by one work-item, so
the barrier after the loop that wrote the row in scratch is no longer needed (the output's writes
get none), and the output row holds the result once its last loop ends.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from fsmooth.cost_model import DeviceDescription
from fsmooth.names import NameSupply
from fsmooth.types import ArrayT

from . import index_paths as paths
from . import phrases as p
from .from_dps import as_exp
from .hoist_opencl import HoistedBuffer, free_identifiers
from .index_paths import Alias, BufferVariable, ScalarVariable, SymbolicInteger, index_symbol
from .strategy_check import root


def stage_rows(planned, device: DeviceDescription):
    """``planned`` (a ``codegen_opencl.OpenCLPlan``) with its rows staged where ``device``'s local
    memory is a scratchpad, and its per-group scratch rows kept in the output (module docstring)."""
    k, plan = planned.kernel, planned.kernels
    sizes, env, start = paths.kernel_bindings(k, plan.buffers)
    inputs = frozenset(name for name, ty, _ in k.params if isinstance(ty, ArrayT))
    buffers = dict(plan.buffers)
    names = NameSupply(set(planned.taken) | set(buffers), suffix="_buf", separator="")
    released: set = set()
    phases = []
    # the names each kernel mentions, one walk each (not one per other kernel that asks)
    mentioned = [frozenset().union(*(free_identifiers(part) for part in phase.parts())) for phase in plan.phases]
    for j, phase in enumerate(plan.phases):
        elsewhere = frozenset().union(*mentioned[:j], *mentioned[j + 1:])
        if (phase.last is None and phase.tail is None and not phase.sequential and phase.local_size is not None
                and len(phase.local_size) == 1 and sympy.sympify(phase.local_size[0]).is_Integer):
            before = set(buffers)
            staging = not phase.fallback and device.local_memory == "scratchpad"
            kernel = _Kernel(sizes, inputs, int(phase.local_size[0]), staging, buffers, names, released, elsewhere)
            staged = dataclasses.replace(phase, body=kernel.comm(phase.body, env, start))
            if not phase.fallback and not (j + 1 < len(plan.phases) and plan.phases[j + 1].fallback) and any(
                    not sympy.sympify(buffers[name].count).is_Integer for name in set(buffers) - before):
                # a staged row of a size known only at the call, in a kernel that had no such local
                # row: the kernel as it was is the fallback, where the row does not fit
                unstaged = _Kernel(sizes, inputs, kernel.lanes, False, buffers, names, released, elsewhere)
                phases += [staged, dataclasses.replace(phase, name=f"{phase.name[:-2]}_fallback_k", fallback=True,
                                                       body=unstaged.comm(phase.body, env, start))]
                continue
            phase = staged
        phases.append(phase)
    used = set().union(*(free_identifiers(part) for phase in phases for part in phase.parts()))
    buffers = {name: buf for name, buf in buffers.items() if name not in released or name in used}
    return dataclasses.replace(planned, kernels=dataclasses.replace(plan, phases=tuple(phases), buffers=buffers))


@dataclass(frozen=True)
class _Access:
    """An access to a row in a local loop at the top of a group's body: a read ``node`` (an
    ``Idx``) of ``base``, or the loop's write of its own element (``node`` the loop)."""

    base: p.Phrase  # the row: an exp phrase (a read) or the loop's acceptor (its write)
    node: p.Phrase
    element: sympy.Expr | None  # None: not index arithmetic, or a read under a condition
    owned: bool  # by work-item element mod L (module docstring: lanes)
    covers: sympy.Expr | None = None  # a read done at every element below this (staging)


@dataclass(frozen=True)
class _Site:
    """A local loop at the top of a group's body and its accesses to rows."""

    loop: p.ParFor
    accesses: tuple


@dataclass(frozen=True)
class _Kernel:
    sizes: dict  # size symbol -> its name (paths.rename)
    inputs: frozenset  # the kernel's array parameters
    lanes: int  # the launch's work-group size
    staging: bool  # not a fallback kernel: local rows are available
    buffers: dict  # name -> HoistedBuffer, extended with the staged rows
    names: NameSupply
    released: set  # buffers that may be used nowhere any more
    elsewhere: frozenset  # the names the other kernels use

    def comm(self, c: p.Phrase, env: dict, ranges) -> p.Phrase:
        """``c`` with each workgroup loop at its top rewritten (``_group``)."""
        match c:
            case p.Seq(cmds):
                return p.Seq(tuple(self.comm(x, env, ranges) for x in cmds))
            case p.New():
                return _scope(c, env, ranges, self.sizes, lambda body, inner, rs: self.comm(body, inner, rs))
            case p.ParFor(strategy=strategy) if strategy is not None and strategy.level == "workgroup":
                inner, inner_ranges = _inside(c, env, ranges, self.sizes)
                return dataclasses.replace(c, body=self._group(c, inner, inner_ranges))
        return c

    # -- a group's body
    def _group(self, loop: p.ParFor, env: dict, ranges) -> p.Phrase:
        body = loop.body
        if self.staging:
            rows = dict.fromkeys(a.base for s in self._sites(body, env, ranges) for a in s.accesses
                                 if self._input_row(a.base, loop.index))
            for row in rows:
                body = p.replaced(body, self._stage(row, self._sites(body, env, ranges), body))
        sites = self._sites(body, env, ranges)
        for name in dict.fromkeys(root(a.base) for s in sites for a in s.accesses):
            kept = self._into_output(name, loop, sites, body)
            if kept is not None:
                return kept  # the output row holds one
        return body

    def _sites(self, body: p.Phrase, env: dict, ranges) -> list:
        return [_Site(loop, self._accesses(loop, e, r)) for loop, e, r in _local_loops(body, env, ranges, self.sizes)]

    def _input_row(self, base: p.Phrase, group_index: str) -> bool:
        """Whether ``base`` is a row of scalars of an input whose place only the group's index decides."""
        idents = {node.name for node in p.walk(base) if isinstance(node, p.Ident)}
        data = p.data_of(base)
        return (isinstance(base, p.Idx) and root(base) in self.inputs and idents <= self.inputs | {group_index}
                and isinstance(data, p.Arr) and isinstance(data.elem, p.Num))

    def _stage(self, row: p.Phrase, sites: list, body: p.Phrase) -> dict:
        """The replacements (by the id of the loop) that stage ``row``, or none (module docstring)."""
        length = paths.rename(p.data_of(row).size, {}, self.sizes)
        first = next((j for j, s in enumerate(sites) for a in s.accesses
                      if a.base == row and a.covers is not None and sympy.expand(a.covers - length) == 0), None)
        if first is None:
            return {}
        later = [j for j in range(first + 1, len(sites)) if any(a.base == row and a.owned for a in sites[j].accesses)]
        if not later:
            return {}
        acc, exp = self._reused_row(row, sites, later[-1], body) or self._new_row(row)
        site = sites[first]
        read = next(a.node for a in site.accesses if a.base == row and a.covers is not None)
        replace = {id(site.loop): dataclasses.replace(site.loop, body=_store_after_read(site.loop.body, read, acc, exp))}
        for j in later:
            reads = {id(a.node): dataclasses.replace(a.node, arr=exp) for a in sites[j].accesses
                     if a.base == row and a.owned}
            replace[id(sites[j].loop)] = p.replaced(sites[j].loop, reads)
        return replace

    def _reused_row(self, row: p.Phrase, sites: list, last: int, body: p.Phrase):
        """(acceptor, expression) of the local row that the last reader of ``row`` writes, where
        the staged row can be that row (module docstring), else None."""
        loop = sites[last].loop
        target, name = loop.acc, root(loop.acc)
        buf = self.buffers.get(name)
        if not (buf is not None and buf.role == "local" and isinstance(target, p.Shift) and target.offset == 0
                and target.data == p.data_of(row) and sympy.expand(buf.count - p.elements(target.data)) == 0
                and _writes_own_element_last(loop)
                and all(a.element == index_symbol(loop.index) for a in sites[last].accesses if a.base == row)
                and not any(a.base == row for s in sites[last + 1:] for a in s.accesses)
                and _mentions_before(body, loop, name) == 0 and self._fenced(name, sites, body)):
            return None
        return target, as_exp(target)

    def _fenced(self, name: str, sites: list, body: p.Phrase) -> bool:
        """Whether a barrier follows every access to the row ``name`` of a work-item other than
        its elements' (softmax in Float: the sum from e[0], lane t reading e[256·j + t + 1]): the
        next row's staging then writes no element another work-item still reads."""
        owned = {id(s.loop): sum(a.owned for a in s.accesses if root(a.base) == name) for s in sites}
        fenced = True
        for leaf in p.leaves(body):
            if _mentions(leaf, name) > owned.get(id(leaf), 0):
                fenced = False
            if isinstance(leaf, p.ParFor) and leaf.strategy is not None and leaf.strategy.level == "local" and (
                    getattr(self.buffers.get(root(leaf.acc)), "role", None) in ("local", "temp")):
                fenced = True  # code generation's barrier after a local loop that wrote an intermediate
        return fenced

    def _new_row(self, row: p.Phrase):
        data = p.data_of(row)
        buf = HoistedBuffer(self.names.fresh(f"staged_{root(row)}"), "local", p.scalar_of(data), sympy.sympify(data.size))
        self.buffers[buf.name] = buf
        acc = p.Shift(p.Ident(buf.name, p.AccT(p.Arr(buf.count, data.elem))), sympy.Integer(0), data)
        return acc, as_exp(acc)

    def _into_output(self, name: str, loop: p.ParFor, sites: list, body: p.Phrase) -> p.Phrase | None:
        """``body`` with the global row ``name``, one copy per group, kept in the group's output
        row (module docstring), or None."""
        buf = self.buffers.get(name)
        if buf is None or buf.role != "temp" or name in self.elsewhere:
            return None
        accesses = [a for s in sites for a in s.accesses if root(a.base) == name]
        users = [s for s in sites if any(root(a.base) == name for a in s.accesses)]
        last = users[-1].loop
        if not (_mentions(body, name) == len(accesses) and all(a.owned for a in accesses)
                and _mentions(body, loop.out) == 1 and last.acc == p.Ident(loop.out, p.AccT(loop.elem))
                and _writes_own_element_last(last)
                and all(a.element == index_symbol(last.index) for a in users[-1].accesses if root(a.base) == name)
                and all(isinstance(a.base, p.Shift) and a.base.data == loop.elem for a in accesses)):
            return None
        self.released.add(name)
        out = {p.AccT: p.Ident(loop.out, p.AccT(loop.elem)), p.ExpT: p.Ident(loop.out, p.ExpT(loop.elem))}
        return p.replaced(body, {id(a.base): out[type(a.base.base.type)] for a in accesses})

    # -- a local loop's accesses to rows
    def _accesses(self, loop: p.ParFor, env: dict, ranges) -> tuple:
        if loop.strategy.width != 1:
            return ()
        inner, inner_ranges = _inside(loop, env, ranges, self.sizes)
        t = index_symbol(loop.index)
        found = [_Access(loop.acc, loop, t, True)]
        lane = (t, paths.rename(loop.size, env, self.sizes))
        self._reads(loop.body, inner, inner_ranges, lane, (), found)
        return tuple(found)

    def _reads(self, c: p.Phrase, env: dict, ranges, lane: tuple, path: tuple, found: list):
        """The reads of rows in command ``c``; ``path``: the loops and guards around it in the loop."""
        match c:
            case p.Seq(cmds):
                for x in cmds:
                    self._reads(x, env, ranges, lane, path, found)
            case p.New():
                _scope(c, env, ranges, self.sizes, lambda body, inner, rs: self._reads(body, inner, rs, lane, path, found))
            case p.For(count, index, body) if paths.is_size_arithmetic(count, env):
                j = index_symbol(index)
                n = paths.index(count, env, ranges, self.sizes).expr
                self._reads(body, {**env, index: ScalarVariable(index)}, ranges.inside(j, n - 1), lane,
                            path + (("for", j, n),), found)
            case p.IfCmd(p.ScalarOp("lt", (a, b)) as cond, then, orelse) if all(
                    paths.is_size_arithmetic(x, env) for x in (a, b)):
                guard = tuple(paths.index(x, env, ranges, self.sizes).expr for x in (a, b))
                self._reads(then, env, paths.guarded(cond, env, ranges, self.sizes), lane, path + (("if", *guard),), found)
                self._reads(orelse, env, ranges, lane, path + (("else",),), found)
            case p.Assign(_, e):
                every = list(_unconditional_reads(e))
                for node in every:
                    element = (paths.index(node.index, env, ranges, self.sizes).expr
                               if paths.is_size_arithmetic(node.index, env) else None)
                    owned = element is not None and _owned(element, lane[0], self.lanes)
                    found.append(_Access(node.arr, node, element, owned, _covers(element, lane, path) if owned else None))
                found += [_Access(node.arr, node, None, False) for node in _reads_of_scalars(e)
                          if not any(node is seen for seen in every)]
            case _:
                found += [_Access(node.arr, node, None, False) for node in _reads_of_scalars(c)]


# ----------------------------------------------------------------------------- helpers


def _scope(c: p.New, env: dict, ranges, sizes: dict, inside):
    """``inside(body, env, ranges)`` of the ``new`` ``c``, with its variable bound as code
    generation binds it (an integer let kept symbolic); ``c`` with the body it returns."""
    match c:
        case p.New(name, _, p.Seq((p.Assign(_, value) as first, *rest)), None) if paths.integer_let(c, env):
            symbolic = paths.index(value, env, ranges, sizes)
            body = inside(p.seq(*rest), {**env, name: SymbolicInteger(symbolic.expr)},
                          paths.past_tests(symbolic.needs, ranges))
            return dataclasses.replace(c, body=p.Seq((first, body))) if body is not None else None
        case p.New(name, data, body):
            binding = ScalarVariable(name) if isinstance(data, p.Num) else BufferVariable(name)
            body = inside(body, {**env, name: binding}, ranges)
            return dataclasses.replace(c, body=body) if body is not None else None


def _inside(loop: p.ParFor, env: dict, ranges, sizes: dict):
    """The environment and ranges of ``loop``'s body (as ``dpia.vectorize``'s walk)."""
    inner = {**env, loop.index: ScalarVariable(loop.index)}
    inner[loop.out] = Alias(p.Idx(loop.acc, p.Ident(loop.index, p.ExpT(p.IdxT(loop.size))), loop.elem, loop.size), inner)
    n = paths.rename(loop.size, env, sizes)
    return inner, ranges.inside(index_symbol(loop.index), n - 1)


def _local_loops(c: p.Phrase, env: dict, ranges, sizes: dict):
    """(loop, environment, ranges) of each local loop at the top of a group's body, in order."""
    match c:
        case p.Seq(cmds):
            for x in cmds:
                yield from _local_loops(x, env, ranges, sizes)
        case p.New():
            found = []
            _scope(c, env, ranges, sizes, lambda body, inner, rs: found.extend(_local_loops(body, inner, rs, sizes)))
            yield from found
        case p.ParFor(strategy=strategy) if strategy is not None and strategy.level == "local":
            yield c, env, ranges


def _owned(element: sympy.Expr, t: sympy.Symbol, lanes: int) -> bool:
    """Whether ``element`` - ``t`` is ``lanes`` times an integer: the element is work-item t mod
    lanes's, as ``t`` is in a local loop strided over the group's ``lanes`` work-items."""
    quotient = sympy.expand((element - t) / lanes)
    return all(coefficient.is_Integer for coefficient in quotient.as_coefficients_dict().values())


def _covers(element: sympy.Expr, lane: tuple, path: tuple) -> sympy.Expr | None:
    """n where the read of ``element`` at ``path`` in a local loop of index t over ``lane`` =
    (t, its count) is done at every element 0 .. n - 1: e = t unconditionally, or lane t's
    strided share, e = L·j + t in a loop of j over J with L·J ≥ n, under ``if e < n``."""
    t, count = lane
    match path:
        case () if element == t:
            return count
        case (("for", j, trips), ("if", guarded, bound)) if (
                count.is_Integer and sympy.expand(element - count * j - t) == 0
                and sympy.expand(guarded - element) == 0 and _at_least(trips * count, bound)):
            return bound
    return None


def _at_least(product: sympy.Expr, bound: sympy.Expr) -> bool:
    """Whether L·J ≥ ``bound`` for ``product`` = L·J, J = floor((bound + s) / L) with s ≥ L - 1
    (a count rounded up, as ``auto_reductions`` writes it) or J = ceiling(bound / L)."""
    coefficient, trips = product.as_coeff_Mul()
    if isinstance(trips, (sympy.floor, sympy.ceiling)):
        slack = sympy.expand(trips.args[0] * coefficient - bound)
        least = coefficient - 1 if isinstance(trips, sympy.floor) else 0
        return slack.is_Integer and slack >= least
    slack = sympy.expand(product - bound)
    return slack.is_Integer and slack >= 0


def _unconditional_reads(e: p.Phrase):
    """The reads of scalars in expression ``e`` that every evaluation of it does."""
    match e:
        case p.Cond(cond):
            yield from _unconditional_reads(cond)
        case p.Idx(_, index, p.Num()):
            yield e
            yield from _unconditional_reads(index)
        case _:
            for child in p.children(e):
                yield from _unconditional_reads(child)


def _reads_of_scalars(c: p.Phrase):
    return (node for node in p.walk(c) if isinstance(node, p.Idx) and isinstance(node.elem, p.Num))


def _store_after_read(body: p.Phrase, read: p.Idx, acc: p.Phrase, exp: p.Phrase) -> p.Phrase:
    """``body`` with the element ``read`` reads stored in the staged row too: after the read where
    it is the whole right-hand side of a private variable, else before the assignment, which then
    reads the staged element."""
    store = dataclasses.replace(read, arr=acc)

    def rewrite(c: p.Phrase) -> p.Phrase:
        match c:
            case p.Assign(p.Ident(name, p.AccT(p.Num() as data)), value) if value is read:
                return p.Seq((c, p.Assign(store, p.Ident(name, p.ExpT(data)))))
            case p.Assign(target, value) if any(node is read for node in p.walk(value)):
                staged = p.replaced(value, {id(read): dataclasses.replace(read, arr=exp)})
                return p.Seq((p.Assign(store, read), p.Assign(target, staged)))
        return p.map_children(rewrite, c)

    return rewrite(body)


def _writes_own_element_last(loop: p.ParFor) -> bool:
    """Whether ``loop``'s body writes its element once, as its last command (after every read)."""
    leaves = list(p.leaves(loop.body))
    writes = [c for leaf in leaves for c in p.walk(leaf) if isinstance(c, p.Assign) and root(c.acc) == loop.out]
    return bool(leaves) and len(writes) == 1 and writes[0] is leaves[-1]


def _mentions(c: p.Phrase, name: str) -> int:
    return sum(isinstance(node, p.Ident) and node.name == name for node in p.walk(c))


def _mentions_before(body: p.Phrase, loop: p.ParFor, name: str) -> int:
    """How often the commands of a group's ``body`` before ``loop`` mention ``name``."""
    count = 0
    for leaf in p.leaves(body):
        if leaf is loop:
            return count
        count += _mentions(leaf, name)
    return count
