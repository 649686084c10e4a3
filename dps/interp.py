"""An interpreter of DPS-F̃ over a flat byte arena, checking the memory discipline.

The arena is a numpy ``uint8`` buffer of exactly ``Kernel.scratch`` bytes (evaluated at
the call's sizes); the destination is a separate buffer.  Every region is a byte range
of the arena at its static offset (a C local, ``dps.local_arrays``, a buffer of its own); every read and write is checked to stay inside the
region (or parameter, or destination) it goes through, so a wrong offset or size is an
``AssertionError`` here rather than a corrupted result three stages later.  Reads that
the DPS stage left unchecked must be in range (else ``AssertionError``: a constraint is
missing); checked ones raise ``IndexError`` like the generated code's status 1.  Kernel
constraints are evaluated at every kernel entry (``ValueError``).  While a parallel build
runs, an arena byte that one of its threads writes and another one reads or writes is an
``AssertionError``: concurrent threads would race on it in the generated C.  The iterations are
dealt to the threads as OpenMP's static schedule deals them (``dps.parallel.static_thread``);
the thread count of a parallel program is ``run_kernel``'s ``threads``.
``Run.high_water`` is the measured peak, to compare with the computed ``Kernel.scratch``;
``Run.work`` counts the primitives evaluated (by name) and the loop trips (``"build trip"``,
``"ifold trip"``), so that a test can prove that an optimisation removes work.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import sympy

from fsmooth import prims
from fsmooth.core import Lit, Var, flatten_tuples
from fsmooth.types import ArrayT, BYTES, NUMPY_DTYPE, Scalar, TupleT, element_scalar

from fsmooth.artifact import result_components
from fsmooth.runtime import assemble

from . import ir
from .layout import region_bytes
from .parallel import THREAD, partial_stride, static_thread


@dataclass(frozen=True)
class Ptr:
    """A byte address in ``mem``, valid within the byte range [lo, hi) of its region."""

    mem: np.ndarray
    at: int
    lo: int
    hi: int

    def plus(self, nbytes: int) -> Ptr:
        return Ptr(self.mem, self.at + nbytes, self.lo, self.hi)


@dataclass(frozen=True)
class ArrayVal:
    ptr: Ptr
    elem: Scalar
    dims: tuple


KEPT = object()  # the value of ``ir.Keep``: what the destination holds stays


class _Concurrent:
    """The arena bytes the threads of one running parallel build have touched."""

    def __init__(self):
        self.iteration = 0  # the thread running (``dps.parallel.static_thread``)
        self.writer: dict = {}  # byte -> the thread that wrote it
        self.reader: dict = {}  # byte -> the thread that read it, or None once several did

    def touch(self, nbyte: int, writing: bool):
        k = self.iteration
        shared = self.writer.get(nbyte, k) != k or writing and self.reader.get(nbyte, k) != k
        assert not shared, f"arena byte {nbyte} is shared by concurrent threads of a parallel build"
        if writing:
            self.writer[nbyte] = k
        else:
            self.reader[nbyte] = k if self.reader.get(nbyte, k) == k else None


class Arena:
    def __init__(self, nbytes: int):
        self.mem = np.zeros(nbytes, dtype=np.uint8)
        self.high_water = 0
        self.concurrent: list[_Concurrent] = []  # the parallel builds running, outermost first
        # primitive name, loop trip or "store" (a scalar written, copies too) -> how many times
        self.work: Counter = Counter()

    def access(self, p: Ptr, elem: Scalar, writing: bool) -> slice:
        size = BYTES[elem]
        assert p.lo <= p.at and p.at + size <= p.hi, \
            f"access at byte {p.at} outside its region [{p.lo}, {p.hi})"
        assert p.at + size <= len(p.mem), f"access at byte {p.at} outside its buffer of {len(p.mem)} bytes"
        if p.mem is self.mem:
            for build in self.concurrent:
                for nbyte in range(p.at, p.at + size):
                    build.touch(nbyte, writing)
        return slice(p.at, p.at + size)

    def load(self, p: Ptr, elem: Scalar):
        return p.mem[self.access(p, elem, False)].view(NUMPY_DTYPE[elem])[0].item()

    def store(self, p: Ptr, elem: Scalar, value):
        self.work["store"] += 1
        p.mem[self.access(p, elem, True)] = np.array([value], dtype=NUMPY_DTYPE[elem]).view(np.uint8)

    def copy(self, dest: Ptr, src: Ptr, count: int, elem: Scalar):
        for k in range(count):
            self.store(dest.plus(k * BYTES[elem]), elem, self.load(src.plus(k * BYTES[elem]), elem))


def to_memory(value: np.ndarray, elem: Scalar) -> Ptr:
    mem = np.ascontiguousarray(value, dtype=NUMPY_DTYPE[elem]).reshape(-1).view(np.uint8).copy()
    return Ptr(mem, 0, 0, len(mem))


class _Frame:
    """One kernel activation: its sizes, variables, regions and scratch base."""

    def __init__(self, program: ir.Program, kernel: ir.Kernel, arena: Arena, base: int):
        self.program, self.kernel, self.arena, self.base = program, kernel, arena, base
        self.sizes: dict = {}
        self.env: dict = {}
        self.regions: dict = {}
        self.writing: dict = {}  # ifold state -> the buffer its current iteration writes

    def num(self, e) -> int:
        e = sympy.sympify(e)
        return int(e.xreplace({s: sympy.Integer(self.sizes[s.name]) for s in e.free_symbols}))

    def atom(self, a):
        match a:
            case Var(name):
                return self.env[name]
            case Lit(value):
                return value
        raise AssertionError(a)

    def numpy(self, value):
        """An array argument as a numpy array (a copy of its elements); a scalar as it is."""
        if not isinstance(value, ArrayVal):
            return value
        count = int(np.prod(value.dims, dtype=np.int64))
        elems = [self.arena.load(value.ptr.plus(k * BYTES[value.elem]), value.elem) for k in range(count)]
        return np.array(elems, dtype=NUMPY_DTYPE[value.elem]).reshape(value.dims)

    def ref(self, r: ir.Ref, elem: Scalar) -> Ptr | None:
        """The address of destination ``r`` (for a tuple: a tuple of them, None for a scalar)."""
        match r:
            case ir.RTuple(items):
                return tuple(self.ref(item, elem) for item in items)
            case ir.RVar(name):
                return self.regions[name]
            case ir.Bullet():
                return None
            case ir.Offset(base, elems):
                return self.ref(base, elem).plus(self.num(elems) * BYTES[elem])
            case ir.StateDest(state):
                return self.writing[state]
        raise AssertionError(r)

    def run(self, t: ir.Term):
        """The value of a scalar term; for an array-writing term, the pointer it wrote to."""
        match t:
            case ir.Atom_(a):
                return self.atom(a)
            case ir.Prim(op, args, ty):
                self.arena.work[op] += 1
                return prims.evaluate(op, [self.atom(a) for a in args], ty)
            case ir.CardOf(value):
                return self.num(value)
            case ir.Get(arr, idx, ty, checked):
                a, i = self.atom(arr), self.atom(idx)
                if not 0 <= i < a.dims[0]:
                    if checked:
                        raise IndexError(f"index {i} out of range for {arr.name} of length {a.dims[0]}")
                    raise AssertionError(f"unchecked read {arr.name}[{i}] outside length {a.dims[0]}")
                inner = int(np.prod(a.dims[1:], dtype=np.int64))
                p = a.ptr.plus(i * inner * BYTES[a.elem])
                if isinstance(ty, ArrayT):
                    return ArrayVal(p, a.elem, a.dims[1:])
                return self.arena.load(p, a.elem)
            case ir.Let(name, rhs, body, ty, dims):
                value = self.run(rhs)
                if isinstance(ty, ArrayT):
                    value = self.array(rhs, value, dims)
                self.env[name] = value
                return self.run(body)
            case ir.If(c, a, b):
                return self.run(a if self.atom(c) else b)
            case ir.Alloc(region, elem, n, body, None):  # a C local: memory of its own, outside the arena
                nbytes = self.num(n) * BYTES[elem]
                self.regions[region] = Ptr(np.zeros(nbytes, dtype=np.uint8), 0, 0, nbytes)
                return self.run(body)
            case ir.Alloc(region, elem, n, body, offset):
                lo = self.base + self.num(offset)
                nbytes = self.num(n) * BYTES[elem]
                assert lo + nbytes <= len(self.arena.mem), "region outside the arena"
                self.arena.high_water = max(self.arena.high_water, lo + self.num(region_bytes(elem, n)))
                self.regions[region] = Ptr(self.arena.mem, lo, lo, lo + nbytes)
                return self.run(body)
            case ir.Build(dest, n, i, body, ArrayT(elem_ty), parallel):
                out = self.ref(dest, element_scalar(elem_ty))
                concurrent = _Concurrent()
                if parallel:
                    self.arena.concurrent.append(concurrent)
                trips = self.num(n)
                for k in range(trips):
                    self.arena.work["build trip"] += 1
                    self.env[i] = self.sizes[i] = k
                    if parallel:  # the C runs the iterations of a thread in turn, the threads at once
                        thread = static_thread(k, trips, self.sizes[self.kernel.threads])
                        concurrent.iteration = self.sizes[THREAD.name] = thread
                    value = self.run(body)
                    if not isinstance(elem_ty, ArrayT) and value is not KEPT:
                        self.arena.store(out.plus(k * BYTES[elem_ty]), elem_ty, value)
                if parallel:
                    self.arena.concurrent.pop()
                return out
            case ir.Filter(dest, length, x, body, arr, ty):
                out, a, elem = self.ref(dest, element_scalar(ty)), self.atom(arr), element_scalar(ty)
                kept = 0
                for k in range(a.dims[0]):
                    self.arena.work["filter trip"] += 1
                    self.env[x] = self.arena.load(a.ptr.plus(k * BYTES[elem]), elem)
                    if self.run(body):
                        self.arena.store(out.plus(kept * BYTES[elem]), elem, self.env[x])
                        kept += 1
                self.env[length] = self.sizes[length] = kept
                return out
            case ir.Ifold(trace=ir.Ref()):
                return self.scan(t)
            case ir.Ifold(parallel=True):
                return self.parallel_reduction(t)
            case ir.Ifold(ty=TupleT()):
                return self.tuple_ifold(t)
            case ir.Ifold():
                return self.ifold(t)
            case ir.TupleOf(items, ty, dest, written):
                values = tuple(self.atom(a) for a in items)
                if dest == ir.Bullet():
                    return values
                return tuple(v if k in written else self.write(v, t, out)
                             for k, (v, t, out) in enumerate(zip(values, ty.items, self.ref(dest, None))))
            case ir.Proj(tup, index):
                return self.atom(tup)[index]
            case ir.Keep():
                return KEPT
            case ir.Copy(dest, src, n, elem):
                out, a = self.ref(dest, elem), self.atom(src)
                self.arena.copy(out, a.ptr, self.num(n), elem)
                return out
            case ir.Call(fn, dest, args, ty) if not isinstance(fn, str):  # a foreign function: its Python body
                elem = element_scalar(ty)
                out = self.ref(dest, elem)
                result = fn.result([self.numpy(self.atom(a)) for a in args], None).reshape(-1)
                for k, value in enumerate(result.tolist()):
                    self.arena.store(out.plus(k * BYTES[elem]), elem, value)
                return out
            case ir.Call(fn, dest, args, ty, offset):
                callee = self.program.kernels[fn]
                out = self.ref(dest, element_scalar(ty) if isinstance(ty, ArrayT) else None) \
                    if isinstance(ty, (ArrayT, TupleT)) else None
                frame = _Frame(self.program, callee, self.arena, self.base + self.num(offset))
                result = frame.enter([self.atom(a) for a in args], out)
                return out if isinstance(ty, ArrayT) else result
        raise AssertionError(t)

    def write(self, value, ty, out):
        """Store one component of a tuple at ``out`` (an array is copied; a scalar stays a value)."""
        if isinstance(ty, TupleT):
            return tuple(self.write(v, t, o) for v, t, o in zip(value, ty.items, out))
        if isinstance(value, ArrayVal):
            if out is not None:  # None: a view of a tuple, nothing to write
                self.arena.copy(out, value.ptr, int(np.prod(value.dims, dtype=np.int64)), value.elem)
                return ArrayVal(out, value.elem, value.dims)
        return value

    def tuple_ifold(self, t: ir.Ifold):
        """A tuple state: per array component two buffers that trade places, scalars as values."""
        n = self.num(t.count) if not isinstance(t.count, (Var, Lit)) else self.atom(t.count)

        def buffers(entry, which):
            if entry is None:
                return None
            if isinstance(entry[0], str):
                return self.regions[entry[which]]
            return tuple(buffers(e, which) for e in entry)

        def at(value, ptrs):  # the state's arrays as they lie in the buffers ``ptrs``
            if isinstance(value, tuple):
                return tuple(at(v, p) for v, p in zip(value, ptrs))
            return ArrayVal(ptrs, value.elem, value.dims) if isinstance(value, ArrayVal) else value

        pair = (buffers(t.buffers, 0), buffers(t.buffers, 1))
        state = at(self.run(t.init), pair[0])
        for k in range(n):
            self.arena.work["ifold trip"] += 1
            self.env[t.state], self.env[t.index], self.sizes[t.index] = state, k, k
            self.writing[t.state] = pair[(k + 1) % 2]
            state = at(self.run(t.body), pair[(k + 1) % 2])
        return self.write(state, t.ty, self.ref(t.dest, None))

    def scan(self, t: ir.Ifold):
        """An iscan: a scalar (or tuple of scalars) state, each new one stored at element k of
        the trace (per component); its value is the trace's arrays (a pointer for one array)."""
        n = self.num(t.count)

        def outputs(ref, ty):
            if isinstance(ty, TupleT):
                return tuple(outputs(r, x) for r, x in zip(ref.items, ty.items))
            return self.ref(ref, ty), ty

        def store(state, out, k):
            if isinstance(state, tuple):
                for s_, o in zip(state, out):
                    store(s_, o, k)
            else:
                self.arena.store(out[0].plus(k * BYTES[out[1]]), out[1], state)

        def arrays(out):
            if isinstance(out[0], tuple):
                return tuple(arrays(o) for o in out)
            return ArrayVal(out[0], out[1], (n,))

        out = outputs(t.trace, t.ty)
        state = self.run(t.init)
        for k in range(n):
            self.arena.work["ifold trip"] += 1
            self.env[t.state], self.env[t.index], self.sizes[t.index] = state, k, k
            state = self.run(t.body)
            store(state, out, k)
        return arrays(out) if isinstance(t.ty, TupleT) else out[0]

    def parallel_reduction(self, t: ir.Ifold):
        """A reduction on the threads, as the C runs it (``dps.parallel``): each thread folds the
        iterations ``static_thread`` deals it from the identities into a partial of its own and
        writes it to its element of the partials' regions; then the init and the partials, in
        thread order, are combined.  One iteration runs without a team."""
        n = self.num(t.count)
        team = self.sizes[self.kernel.threads] if n > 1 else 1
        tuple_state = isinstance(t.ty, TupleT)

        def components(value) -> tuple:
            return value if tuple_state else (value,)

        def value(components: tuple):
            return components if tuple_state else components[0]
        state = self.run(t.init)
        partials = [value(tuple(m.identity for m in t.monoids))] * team
        slots = [[self.regions[r].plus(thread * partial_stride(m.ty) * BYTES[m.ty])
                  for r, m in zip(t.partials, t.monoids)] for thread in range(team)]
        concurrent = _Concurrent()
        self.arena.concurrent.append(concurrent)
        for k in range(n):
            self.arena.work["ifold trip"] += 1
            thread = static_thread(k, n, team)
            concurrent.iteration = self.sizes[THREAD.name] = thread
            self.env[t.state], self.env[t.index], self.sizes[t.index] = partials[thread], k, k
            if tuple_state:  # the body's tuple is the new state: its scalars are values, not stored
                self.writing[t.state] = tuple(None for _ in t.monoids)
            partials[thread] = self.run(t.body)
        for thread in range(team):
            concurrent.iteration = thread
            for slot, m, v in zip(slots[thread], t.monoids, components(partials[thread])):
                self.arena.store(slot, m.ty, v)
        self.arena.concurrent.pop()
        result = list(components(state))
        for thread in range(team):
            for c, (slot, m) in enumerate(zip(slots[thread], t.monoids)):
                result[c] = prims.evaluate(m.op, [result[c], self.arena.load(slot, m.ty)], m.ty)
        return value(tuple(result))

    def array(self, rhs: ir.Term, value, dims) -> ArrayVal:
        if isinstance(value, ArrayVal):
            return value
        elem = _elem_of(rhs)
        return ArrayVal(value, elem, tuple(self.num(d) for d in dims))

    def ifold(self, t: ir.Ifold):
        n = self.num(t.count) if not isinstance(t.count, (Var, Lit)) else self.atom(t.count)
        n = max(int(n), 0)  # an Index count < 0 runs no iteration
        if t.buffers is None:
            state = self.run(t.init)
            for k in range(n):
                self.arena.work["ifold trip"] += 1
                self.env[t.state], self.env[t.index], self.sizes[t.index] = state, k, k
                state = self.run(t.body)
            return state
        elem = element_scalar(t.ty)
        dims = tuple(self.num(d) for d in t.dims)
        bufs = [self.regions[b] for b in t.buffers]
        self.run(t.init)
        for k in range(n):
            self.arena.work["ifold trip"] += 1
            self.env[t.state] = ArrayVal(bufs[k % 2], elem, dims)
            self.env[t.index], self.sizes[t.index] = k, k
            self.writing[t.state] = bufs[(k + 1) % 2]
            self.run(t.body)
        out = self.ref(t.dest, elem)
        self.arena.copy(out, bufs[n % 2], int(np.prod(dims, dtype=np.int64)), elem)
        return out

    def enter(self, args: list, out: Ptr | None):
        k = self.kernel
        for (name, ty, dims), value in zip(k.params, args):
            if isinstance(ty, ArrayT):
                self.sizes.update({str(d): s for d, s in zip(dims, value.dims)})
            elif dims == () and ty.name == "Card":
                self.sizes[name] = value
            self.env[name] = value
        for c in k.constraints:
            holds = c.cond.xreplace({s: sympy.Integer(self.sizes[s.name]) for s in c.cond.free_symbols})
            if not bool(holds):
                raise ValueError(f"{c.param}: {c.message}")
        if isinstance(k.result, TupleT):
            for (suffix, _, _), ptr in zip(result_components(k.result, k.result_dims), out):
                self.regions[f"{k.dest}{suffix}"] = ptr
        elif out is not None:
            self.regions[k.dest] = out
        return self.run(k.body)


def _elem_of(t: ir.Term) -> Scalar:
    match t:
        case ir.Alloc(_, _, _, body) | ir.Let(_, _, body):
            return _elem_of(body)
        case ir.If(_, a, b):
            return _elem_of(b if isinstance(a, ir.Keep) else a)
        case ir.Build(ty=ty) | ir.Ifold(ty=ty) | ir.Call(ty=ty):
            return element_scalar(ty)
        case ir.Copy(elem=elem):
            return elem
        case ir.Filter(ty=ty):
            return element_scalar(ty)
    raise AssertionError(t)


@dataclass(frozen=True)
class Run:
    result: object
    high_water: int  # the largest rounded end of a region on the arena, in bytes
    scratch: int  # Kernel.scratch at these sizes: the arena's exact size
    work: Counter = field(default_factory=Counter)  # primitive name or loop trip -> times run


def run_kernel(program: ir.Program, name: str, args: list, threads: int = 2) -> Run:
    """Run kernel ``name`` on numpy arrays / Python scalars, as the generated C would, on
    ``threads`` threads where the program is parallel (its kernels' last argument)."""
    k = program.kernels[name]
    args = flatten_tuples(args)  # a tuple parameter is passed as its components
    if k.threads is not None:
        args = [*args, threads]
    values = []
    sizes: dict = {}
    for (pname, ty, dims), a in zip(k.params, args):
        if isinstance(ty, ArrayT):
            a = np.asarray(a)
            sizes.update({str(d): s for d, s in zip(dims, a.shape)})
            values.append(ArrayVal(to_memory(a, element_scalar(ty)), element_scalar(ty), a.shape))
        else:
            if ty.name == "Card":
                sizes[pname] = a
            values.append(a)
    probe = _Frame(program, k, Arena(0), 0)
    probe.sizes = sizes
    scratch = probe.num(k.scratch)
    arena = Arena(scratch)
    outputs = []
    for _, ty, dims in result_components(k.result, k.result_dims):
        dims = tuple(probe.num(d) for d in dims)
        outputs.append((ty, dims, to_memory(np.zeros(dims), element_scalar(ty)) if isinstance(ty, ArrayT) else None))
    frame = _Frame(program, k, arena, 0)
    if isinstance(k.result, TupleT):
        values = frame.enter(values, tuple(out for _, _, out in outputs))
        leaves = iter(_leaves(values))
        result = assemble(k.result, iter(
            out.mem.view(NUMPY_DTYPE[element_scalar(ty)]).reshape(dims).copy() if out is not None else next(leaves)
            for ty, dims, out in outputs))
        if k.kept_length:  # a filter: its kept elements, as a call from Python gives them
            result = result[0][:result[1]]
        return Run(result, arena.high_water, scratch, arena.work)
    ((ty, dims, out),) = outputs
    result = frame.enter(values, out)
    if out is not None:
        result = out.mem.view(NUMPY_DTYPE[element_scalar(k.result)]).reshape(dims).copy()
    return Run(result, arena.high_water, scratch, arena.work)


def _leaves(value) -> list:
    """The scalar components of a tuple value, in order (array components skipped)."""
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [] if isinstance(value, ArrayVal) else [value]
