"""Imperative DPIA with strategies → OpenCL C and the launch plan (``fsmooth.opencl_artifact``).

The kernels and their hoisted buffers come from ``dpia.hoist_opencl``; statements, acceptors,
index paths, size printing and names are those the C back end writes too (``dpia.emit``), whose
emitter this one extends with the OpenCL primitives (DPIA paper §6.2):

    parforGlobal    for (i = get_global_id(d); i < n; i += get_global_size(d))
    parforWorkgroup for (g = get_group_id(0); g < n; g += get_num_groups(0))
    parforLocal     for (l = get_local_id(0); l < n; l += get_local_size(0)); then a barrier
                    when it wrote local or global intermediates that other work-items read
    for             as in C
    newPrivate      T x[n];   (newGlobal/newLocal were hoisted to kernel arguments)

A write inside a work-group but outside its local loops is done once for the group (by local
work-item 0, then a barrier), since every work-item computes the same value there.

``vectorize(w, ·)`` of a global or local build of Float or Double: work-item iteration v does the
elements w·v .. w·v + w - 1 together, each private scalar of the body a vector of w lanes,
contiguous reads and writes ``vloadw``/``vstorew``, a guard on the index run as vector code where
it holds for every lane; any command the lanes cannot run together runs once per lane (a lane
sees the index shifted by its number and its component of each vector).  The ``n mod w`` last
elements are done one at a time.

A kernel of a single work-group may end with sequential commands (``Phase.tail``): after a barrier,
work-item 0 runs them, unless the body failed a check.

Run-time checks (a data-dependent index out of range, an integer division by zero, ``int(x)`` of
a NaN, an infinity or a float outside int64) report through the 'status' buffer
(``fsmooth.opencl_artifact``), one ``int`` per launch: a failed check does
``atomic_cmpxchg(fs_status + j, 0, code)`` in launch j (the first failure wins) and jumps
past the work it guards, so nothing out of range is read or written after it.  Where no barrier
can be skipped (a global kernel, or code every work-item of a group runs alike) the jump leaves
the work-item; inside a local loop or a write done by local work-item 0 it goes to the end of
that iteration or write, so the work-item still reaches the group's barriers.  A kernel after a
launch that can fail starts by testing that launch's status and returns when it is set.
Calls of kernels too large to inline are not supported here.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import sympy

from fsmooth.clib import HEADER_DIR, SCALAR_HEADER
from fsmooth import prims
from fsmooth.artifact import result_components
from fsmooth.errors import CompileError
from fsmooth.opencl_artifact import STATUS_ELEM, Buffer, Launch, OpenCLArtifact
from fsmooth.options import Options
from fsmooth.shape.size_printer import OPENCL_C
from fsmooth.types import C_TYPE, ArrayT, Bool, Double, Float, Scalar, element_scalar

from . import phrases as p
from .emit import (Alias, BufferVariable, FailureExit, KernelEmitter, ScalarVariable, SymbolicInteger, c_type, indent,
                   index_symbol, strip_parentheses)
from .hoist_opencl import Phase, free_identifiers, plan_kernels
from .strategy_check import PARALLEL, private_count

# Names the generated OpenCL uses or reserves beyond C's (emit's Namer keeps C's out).
OPENCL_NAMES = frozenset("""
kernel __kernel global __global local __local private __private constant __constant read_only
write_only half bool char uchar short ushort int uint long ulong float double size_t ptrdiff_t
intptr_t uintptr_t void event_t image2d_t image3d_t sampler_t barrier mem_fence get_global_id
get_global_size get_local_id get_local_size get_group_id get_num_groups get_work_dim vload2 vload4
vload8 vload16 vstore2 vstore4 vstore8 vstore16 CLK_LOCAL_MEM_FENCE CLK_GLOBAL_MEM_FENCE
float2 float4 float8 float16 double2 double4 double8 double16 long2 long4 long8 long16 int64_t
uint64_t INT64_C fmod copysign atomic_cmpxchg sqrt exp log sin cos fmin fmax fabs
""".split()) | frozenset(prims.MATH_UNARY + prims.MATH_BINARY)  # functions vectorised code calls

_IDS = {"global": ("get_global_id", "get_global_size"), "workgroup": ("get_group_id", "get_num_groups"),
        "local": ("get_local_id", "get_local_size")}
_FENCE = {"local": "CLK_LOCAL_MEM_FENCE", "global": "CLK_GLOBAL_MEM_FENCE"}


@dataclass(frozen=True)
class _Memory(BufferVariable):
    """A buffer with its OpenCL address space and its role in the artifact."""

    space: str = "global"  # 'global', 'local' or 'private'
    role: str = "temp"  # 'input', 'output', 'temp', 'local' or 'private'


def _mem_type(s: Scalar) -> str:
    """The element type of an array in memory: Bool arrays are bytes (opencl_artifact)."""
    return "uchar" if s is Bool else C_TYPE[s]


def _arg_type(s: Scalar) -> str:
    return "uchar" if s is Bool else C_TYPE[s]


# The kernel parameter of the status buffer (fs_ names are never given to program variables).
_STATUS_PARAM = "fs_status"


@dataclass
class _StatusExit(FailureExit):
    """Where a failed check goes on the device: its code into this launch's element of the
    status buffer, unless an earlier failure is there already, then a jump to ``label``."""

    slot: int = 0

    def fail(self, code) -> str:
        self.used = True
        return f"{{ atomic_cmpxchg({_STATUS_PARAM} + {self.slot}, 0, {code}); goto {self.label}; }}"


def _qualifier(space: str) -> str:
    return {"global": "__global ", "local": "__local ", "private": ""}[space]


class _OpenCLEmitter(KernelEmitter):
    """The C emitter with the OpenCL primitives: one instance per OpenCL kernel."""

    size_target = OPENCL_C

    def __init__(self, k: p.ImperativeKernel, taken: frozenset, options: Options, slot: int):
        # every region is a kernel argument (dpia.hoist_opencl): the interface's scratch is the arena's
        super().__init__(k, taken, dataclasses.replace(options, allocation="arena"))
        self.levels: list = []  # the parallel levels around the code being written
        self.lanes: _Lanes | None = None  # the build being vectorised, in its body
        self.slot = slot  # this launch's element of the status buffer
        self.exit = _StatusExit("fs_exit", _STATUS_PARAM, slot=slot)
        self.exits = [self.exit]  # every exit made: whether any check can fail

    @property
    def may_fail(self) -> bool:
        """Whether the kernel written has a run-time check (known once ``kernel`` ran)."""
        return any(e.used for e in self.exits)

    def _scoped_exit(self) -> _StatusExit:
        """An exit to the end of a piece of code that only some work-items of a group run."""
        scoped = _StatusExit(f"fs_next_{next(self.internal)}", _STATUS_PARAM, slot=self.slot)
        self.exits.append(scoped)
        return scoped

    def _with_scoped_exit(self, write_lines) -> list[str]:
        """``write_lines()`` with its failures jumping to a label after its lines."""
        outer, self.exit = self.exit, self._scoped_exit()
        try:
            lines = write_lines()
        finally:
            scoped, self.exit = self.exit, outer
        return lines + [f"{scoped.label}: ;"] if scoped.used else lines

    # -- the kernel function
    def kernel(self, phase: Phase, hoisted: dict, outputs: list, status: str,
               failing_before: tuple) -> tuple[str, tuple]:
        """The kernel's source and launch arguments.  ``outputs``: the output buffers' names (one,
        or one per component of a tuple result); ``status``: the status buffer's name;
        ``failing_before``: the earlier launches that can fail (their elements are tested first)."""
        k = self.k
        params, args, env = [], [], {}
        for name, ty, _ in k.params:
            cname = self.param_names[name]
            if isinstance(ty, ArrayT):
                params.append(f"__global const {_mem_type(element_scalar(ty))} *restrict {cname}")
                env[name] = _Memory(cname, "global", "input")
            else:
                params.append(f"{_arg_type(ty)} {cname}")
                env[name] = ScalarVariable(cname)
            args.append(name)
        for (suffix, ty, _), buffer in zip(self.outputs, outputs):
            params.append(f"__global {_mem_type(element_scalar(ty))} *restrict out{suffix}")
            args.append(buffer)
            env[f"{k.dest}{suffix}"] = _Memory(f"out{suffix}", "global", "output")
        used = free_identifiers(phase.body) | (free_identifiers(phase.tail) if phase.tail is not None else set())
        for name, buf in hoisted.items():
            if name in used:
                space = "local" if buf.role == "local" else "global"
                cname = self.namer.fresh(name)
                params.append(f"{_qualifier(space)}{_mem_type(buf.elem)} *restrict {cname}")
                args.append(name)
                env[name] = _Memory(cname, space, buf.role)
        for src in self.sources:
            if src.dim is not None:
                params.append(f"long {self.size_names[src.symbol]}")
                args.append(src.symbol)
        params.append(f"__global int *restrict {_STATUS_PARAM}")
        args.append(status)
        body = self.comm(phase.body, env, {})
        if self.exit.used:
            body = body + [f"{self.exit.label}: ;"]
        if phase.tail is not None:
            # the launch is one work-group (hoist_opencl): after the barrier its writes are
            # there for work-item 0, which runs the sequential tail unless the body failed
            tail = self._with_scoped_exit(lambda: self.comm(phase.tail, env, {}))
            body += ["barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);",
                     f"if (get_local_id(0) == 0 && {_STATUS_PARAM}[{self.slot}] == 0) {{"] + indent(tail) + ["}"]
        if failing_before:
            # those launches have finished: every work-item reads the same values, and no
            # work-item of this launch writes them
            failed = " || ".join(f"{_STATUS_PARAM}[{j}] != 0" for j in failing_before)
            body = [f"if ({failed}) return;  /* an earlier launch failed: its result is not there */"] + body
        head = f"__kernel void {phase.name}({', '.join(params)}) {{"
        return "\n".join([head] + indent(body) + ["}"]), tuple(args)

    # -- commands
    def comm(self, c: p.Phrase, env: dict, ranges) -> list[str]:
        if self.lanes is not None:
            return self._vector_comm(c, env, ranges)
        match c:
            case p.ParFor(strategy=strategy) if strategy is not None and strategy.level in PARALLEL:
                if strategy.width > 1:
                    return self._vector_parfor(c, env, ranges)
                return self._parallel_parfor(c, env, ranges)
            case p.ParFor(strategy=strategy) if strategy is not None and strategy.width > 1:
                raise CompileError("vectorize needs build_global or build_local (or the default strategy's "
                                   "outermost build)", strategy.loc)
            case p.New(name, data, body, None, "private") if not isinstance(data, p.Num):
                cname = self.namer.fresh(name)
                decl = f"{c_type(data)} {cname}[{private_count(data)}];"
                return [decl] + self.comm(body, {**env, name: _Memory(cname, "private", "private")}, ranges)
            case p.New(_, data, _, offset) if offset is not None:
                raise AssertionError(f"an arena region left in OpenCL code: {c}")
            case p.Assign(acc) if "workgroup" in self.levels and "local" not in self.levels:
                target = self._binding(acc, env, ranges)
                if isinstance(target, _Memory) and target.space != "private":
                    # every work-item of the group holds this value: one of them writes it, and
                    # a failed check there must not take it past the barrier below
                    lines = self._with_scoped_exit(lambda: super(_OpenCLEmitter, self).comm(c, env, ranges))
                    guarded = ["if (get_local_id(0) == 0) {"] + indent(lines) + ["}"]
                    if target.role == "output":
                        return guarded
                    return guarded + [f"barrier({_FENCE[target.space]});"]
                return super().comm(c, env, ranges)
            case p.DoubleBuffer(data=p.Rec()):
                return self.record_double_buffer(c, env, ranges)
            case p.DoubleBuffer():
                return self._double_buffer(c, env, ranges)
            case p.CallCmd(fn) | p.CallExp(fn):
                raise CompileError(f"{self.k.name} calls the kernel {fn}, which is too large to inline: the "
                                   f"OpenCL back end needs every call inlined")
        return super().comm(c, env, ranges)

    def _binding(self, ph: p.Phrase, env: dict, ranges):
        # only the binding is wanted: the checks made on the way are dropped, and their exit too
        real, self.exit = self.exit, _StatusExit("fs_unused", _STATUS_PARAM)
        try:
            binding, _ = self.resolve(ph, sympy.Integer(0), env, ranges, [])
        finally:
            self.exit = real
        return binding

    def _enter(self, c: p.ParFor, env: dict, ranges):
        """(C name of the index, inner environment, inner ranges) of a parfor."""
        i = self.namer.fresh(c.index)
        n = self.rename(c.size, env)
        loop_var = p.Ident(c.index, p.ExpT(p.IdxT(c.size)))
        inner = {**env, c.index: ScalarVariable(i)}
        inner[c.out] = Alias(p.Idx(c.acc, loop_var, c.elem, c.size), inner)
        return i, n, inner, {**ranges, index_symbol(i): (sympy.Integer(0), n - 1)}

    def _parallel_parfor(self, c: p.ParFor, env: dict, ranges) -> list[str]:
        return self._strided_loop(c, env, ranges) + self._barrier_after(c, env, ranges)

    def _strided_loop(self, c: p.ParFor, env: dict, ranges, start: str = "") -> list[str]:
        """The loop of a parallel ``parfor`` over its work-items, from ``start`` on."""
        level = c.strategy.level
        dim = self.levels.count(level)
        get_id, get_size = _IDS[level]
        i, n, inner, inner_ranges = self._enter(c, env, ranges)
        self.levels.append(level)
        try:
            if level == "local":
                # a failed check ends this iteration only: the work-item still meets the barriers
                lines = self._with_scoped_exit(lambda: self.comm(c.body, inner, inner_ranges))
            else:
                lines = self.comm(c.body, inner, inner_ranges)
        finally:
            self.levels.pop()
        bound = strip_parentheses(self.cint(n, ranges))
        head = f"for (int64_t {i} = {start}{get_id}({dim}); {i} < {bound}; {i} += {get_size}({dim})) {{"
        return [head] + indent(lines) + ["}"]

    def _barrier_after(self, c: p.ParFor, env: dict, ranges) -> list[str]:
        if c.strategy.level == "local":
            target = self._binding(c.acc, env, ranges)
            if isinstance(target, _Memory) and target.role in ("temp", "local"):
                # other work-items of the group read what this loop wrote (DPIA §6.2)
                return [f"barrier({_FENCE[target.space]});"]
        return []

    def buffer_pointer(self, acc: p.Phrase, data: p.Data, env: dict, ranges):
        memory = self._binding(acc, env, ranges)
        space = memory.space if isinstance(memory, _Memory) else "global"
        role = memory.role if isinstance(memory, _Memory) else "temp"
        t = f"{_qualifier(space)}{c_type(data) if space == 'private' else _mem_type(p.scalar_of(data))}"
        return t, lambda cname: _Memory(cname, space, role)

    def _double_buffer(self, c: p.DoubleBuffer, env: dict, ranges) -> list[str]:
        checks: list = []
        n = self.index(c.count, env, ranges, checks)
        memory = self._binding(c.first, env, ranges)
        space = memory.space if isinstance(memory, _Memory) else "global"
        role = memory.role if isinstance(memory, _Memory) else "temp"
        scalar = p.scalar_of(c.data)
        t = f"{_qualifier(space)}{c_type(c.data) if space == 'private' else _mem_type(scalar)}"
        s, o = self.namer.fresh(c.state), self.namer.fresh(c.out)
        head = [f"{t} *{s} = {self.address(c.first, env, ranges, checks)};",
                f"{t} *{o} = {self.address(c.second, env, ranges, checks)};"]
        inner = {**env, c.state: _Memory(s, space, role), c.out: _Memory(o, space, role)}
        # RISE & Shine's double buffer: the two buffers trade places, nothing is copied
        swap = [f"{{ {t} *fs_swap = {s}; {s} = {o}; {o} = fs_swap; }}"]
        loop = self.loop(c.index, n, c.body, inner, ranges, swap)
        return checks + head + loop + self.comm(c.after, {**env, c.state: _Memory(s, space, role)}, ranges)

    # -- vectors
    def _vector_parfor(self, c: p.ParFor, env: dict, ranges) -> list[str]:
        """``vectorize(w, ·)``: iteration v does the elements w·v .. w·v + w - 1 at once, each
        private scalar of the body an OpenCL vector of w lanes (``_vector_comm``); the remainder,
        n mod w elements, runs as scalar code in the same strided loop."""
        strategy = c.strategy
        w, level = strategy.width, strategy.level
        if level not in ("global", "local"):
            raise CompileError("vectorize needs build_global or build_local (or the default strategy's "
                               "outermost build)", strategy.loc)
        if not (isinstance(c.elem, p.Num) and c.elem.scalar in VECTOR_SCALARS):
            raise CompileError("vectorize needs a build of Float or Double elements", strategy.loc)
        dim = self.levels.count(level)
        get_id, get_size = _IDS[level]
        i, n, inner, _ = self._enter(c, env, ranges)
        v = self.namer.fresh("v")
        # the first lane's index: the last lane's is at most n - 1
        vector_ranges = {**ranges, index_symbol(i): (sympy.Integer(0), n - w)}
        self.lanes, self.levels = _Lanes(c.index, i, w, c.out, inner[c.out].phrase), self.levels + [level]
        try:
            write = lambda: self.comm(c.body, inner, vector_ranges)  # noqa: E731
            lines = self._with_scoped_exit(write) if level == "local" else write()
        finally:
            self.lanes, self.levels = None, self.levels[:-1]
        n_text = strip_parentheses(self.cint(n, ranges))
        loop = ([f"for (int64_t {v} = {get_id}({dim}); {v} < {n_text} / {w}; {v} += {get_size}({dim})) {{",
                 f"    const int64_t {i} = {v} * {w};"] + indent(lines) + ["}"])
        scalar = dataclasses.replace(c, strategy=dataclasses.replace(strategy, width=1))
        if sympy.Mod(n, w) != 0:
            loop += self._strided_loop(scalar, env, ranges, start=f"({n_text} / {w}) * {w} + ")
        return loop + self._barrier_after(scalar, env, ranges)

    def _vector_comm(self, c: p.Phrase, env: dict, ranges) -> list[str]:
        """A command of a vectorised body: vector code where the lanes can run in lock step,
        else the command once per lane (``_by_lane``), which is always correct."""
        lanes = self.lanes
        match c:
            case p.Skip() | p.Seq():
                return KernelEmitter.comm(self, c, env, ranges)
            case p.New() if self.integer_let(c, env):
                # symbolic: an index of the first lane, which each lane shifts (_Lanes.env)
                return KernelEmitter.comm(self, c, env, ranges)
            case p.New(name, p.Num(scalar), body, None) if scalar in VECTOR_SCALARS:
                cname = self.namer.fresh(name)
                lines = self.comm(body, {**env, name: _VectorVariable(cname)}, ranges)
                return [f"{C_TYPE[scalar]}{lanes.width} {cname};"] + lines
            case p.For(count) if not self._varying(count, env):
                return KernelEmitter.comm(self, c, env, ranges)
            case p.IfCmd(cond) if not self._varying(cond, env):
                return KernelEmitter.comm(self, c, env, ranges)
            case p.IfCmd(cond, then) if not self._varying(cond, env, through_index=False):
                # the condition varies with the element's index only: where it holds for every
                # lane (the bulk of a guarded loop) the lanes run the branch together
                every = self._lock_step(lambda: " && ".join(
                    f"({self._checked_free(self.exp, cond, lanes.env(env, k), ranges)})" for k in range(lanes.width)))
                if every is None:
                    return self._by_lane(c, env, ranges)
                inside = ranges
                for k in range(lanes.width):
                    inside = self._guarded(cond, lanes.env(env, k), inside)
                return ([f"if ({every}) {{"] + indent(self.comm(then, env, inside)) + ["} else {"]
                        + indent(self._by_lane(c, env, ranges)) + ["}"])
            case p.Assign(acc, e):
                def assignment() -> str:
                    value, varying = self._vector_exp(e, env, ranges)
                    value = value if varying else f"({C_TYPE[p.data_of(e).scalar]}{lanes.width})({value})"
                    return self._vector_target(acc, env, ranges).format(value)
                line = self._lock_step(assignment)
                if line is not None:
                    return [line]
        return self._by_lane(c, env, ranges)

    def _lock_step(self, write):
        """``write()``, or None where it found that the lanes cannot run together; the checks it
        wrote on the way are then forgotten, with the failures they would have reported."""
        saved = ([x.used for x in self.exits], dict(self.reads))
        try:
            return write()
        except _NotVectorisable:
            for x, used in zip(self.exits, saved[0]):
                x.used = used
            self.reads = saved[1]
            return None

    def _checked_free(self, write, *args):
        """``write(*args, checks)`` for code that must need no run-time check."""
        checks: list = []
        text = write(*args, checks)
        if checks:
            raise _NotVectorisable
        return text

    def _by_lane(self, c: p.Phrase, env: dict, ranges) -> list[str]:
        """``c`` as scalar code, once per lane, each in a block of its own."""
        lanes, self.lanes = self.lanes, None
        try:
            return [line for k in range(lanes.width)
                    for line in ["{"] + indent(self.comm(c, lanes.env(env, k), ranges)) + ["}"]]
        finally:
            self.lanes = lanes

    def _varying(self, ph: p.Phrase, env: dict, through_index: bool = True) -> bool:
        """Whether ``ph`` may differ between the lanes: it mentions a vector variable (or, with
        ``through_index``, the element's index or an integer let of it)."""
        first = index_symbol(self.lanes.first)
        for name in free_identifiers(ph):
            match env.get(name):
                case _VectorVariable() | Alias():
                    return True
                case ScalarVariable(cname) if through_index and cname == self.lanes.first:
                    return True
                case SymbolicInteger(expr) if through_index and first in expr.free_symbols:
                    return True
        return False

    def _vector_exp(self, e: p.Phrase, env: dict, ranges) -> tuple[str, bool]:
        """(OpenCL text, whether it is a vector) of ``e``; _NotVectorisable where the lanes
        cannot compute it together."""
        if not self._varying(e, env):
            return self._checked_free(self.exp, e, env, ranges), False
        match e:
            case p.Ident(name) if isinstance(env.get(name), _VectorVariable):
                return env[name].cname, True
            case p.ScalarOp(op, args, p.Num(scalar)) if op in _VECTOR_OPS and scalar in VECTOR_SCALARS and all(
                    p.data_of(a) == p.Num(scalar) for a in args):
                parts = [self._vector_exp(a, env, ranges) for a in args]
                vector = f"{C_TYPE[scalar]}{self.lanes.width}"
                texts = [text if varying else f"(({vector})({text}))" for text, varying in parts]
                return _VECTOR_OPS[op].format(*texts), True
            case p.Idx(elem=p.Num(scalar)) | p.Shift(data=p.Num(scalar)) if scalar in VECTOR_SCALARS:
                return f"vload{self.lanes.width}(0, {self._lanes_address(e, env, ranges)})", True
        raise _NotVectorisable

    def _vector_target(self, acc: p.Phrase, env: dict, ranges) -> str:
        """The assignment of a vector ``{}`` to ``acc``: a vector variable, or the lanes'
        contiguous elements in memory."""
        if isinstance(acc, p.Ident) and isinstance(env.get(acc.name), _VectorVariable):
            return f"{env[acc.name].cname} = {{}};"
        return f"vstore{self.lanes.width}({{}}, 0, {self._lanes_address(acc, env, ranges)});"

    def _lanes_address(self, ph: p.Phrase, env: dict, ranges) -> str:
        """The address of the first lane's element of ``ph``, whose lanes' elements must be
        contiguous and need no run-time check."""
        lane_envs = [self.lanes.env(env, k) for k in range(self.lanes.width)]
        places = self._checked_free(lambda checks: [self.resolve(ph, sympy.Integer(0), lane, ranges, checks)
                                                    for lane in lane_envs])
        base, offset = places[0]
        if not isinstance(base, BufferVariable) or any(
                b != base or sympy.expand(o - offset) != k for k, (b, o) in enumerate(places)):
            raise _NotVectorisable
        return self.address(ph, lane_envs[0], ranges, [])


VECTOR_SCALARS = (Float, Double)

_VECTOR_OPS = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
               "neg": "(-{0})", "min": "fmin({0}, {1})", "max": "fmax({0}, {1})", "sqrt": "sqrt({0})",
               "exp": "exp({0})", "log": "log({0})", "sin": "sin({0})", "cos": "cos({0})",
               "abs": "fabs({0})"}
# The math library: OpenCL's built-ins of the same names are overloaded for float and double vectors
# (isnan, isinf and isfinite give int vectors: their Bool results run lane by lane).
_VECTOR_OPS.update({name: f"{name}({{0}})" for name in prims.MATH_UNARY})
_VECTOR_OPS.update({name: f"{name}({{0}}, {{1}})" for name in prims.MATH_BINARY})


class _NotVectorisable(Exception):
    """The lanes of a vectorised body cannot compute this together (the command runs by lane)."""


@dataclass(frozen=True)
class _VectorVariable:
    """A private scalar of a vectorised body: one lane per element, an OpenCL vector."""

    cname: str


@dataclass(frozen=True)
class _Lanes:
    """The build being vectorised: its index (``first``: the C name of the first lane's), its
    width, and its element acceptor ``out``, bound to ``out_phrase``."""

    index: str
    first: str
    width: int
    out: str
    out_phrase: p.Phrase

    def env(self, env: dict, k: int) -> dict:
        """``env`` as lane ``k`` sees it: the index and its integer lets shifted by k, each
        vector variable's component k."""
        first = index_symbol(self.first)
        lane = {}
        for name, binding in env.items():
            match binding:
                case _VectorVariable(cname):
                    binding = ScalarVariable(f"{cname}.s{k:x}")
                case ScalarVariable(cname) if cname == self.first:
                    binding = SymbolicInteger(first + k)
                case SymbolicInteger(expr) if first in expr.free_symbols:
                    binding = SymbolicInteger(expr.subs(first, first + k))
            lane[name] = binding
        lane[self.out] = Alias(self.out_phrase, lane)
        return lane


# ----------------------------------------------------------------------------- the runtime


# What clib/fsmooth_scalar.h needs from its includer (see there), in OpenCL C.
_SCALAR_HEADER_ENVIRONMENT = r"""typedef long int64_t;
typedef ulong uint64_t;
#define INT64_C(x) (x##L)
#define FS_FLOAT_MATH(name) name
"""


def prelude(fp64: bool) -> str:
    """What every OpenCL program of fsmooth starts with: the scalar helpers of the C runtime
    (``clib/fsmooth_scalar.h``, one text for both back ends), those of double only where the
    program uses double, since a device may have no fp64."""
    parts = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"] if fp64 else []
    parts.append(_SCALAR_HEADER_ENVIRONMENT)
    if fp64:
        parts.append("#define FS_HAVE_F64\n")
    parts.append((HEADER_DIR / SCALAR_HEADER).read_text())
    parts.append("#undef FS_FLOAT_MATH\n#undef FS_HAVE_F64\n")
    return "".join(parts)


# ----------------------------------------------------------------------------- the artifact


def generate_opencl(prog: p.ImperativeProgram, options: Options = Options()) -> OpenCLArtifact:
    """The OpenCL kernels, buffers and launches of ``prog``'s entry kernel (its callees are
    inlined into it)."""
    k = prog.kernels[prog.entry]
    params = {name for name, _, _ in k.params}
    symbols = {s.name for s in k.sizes}
    components = result_components(k.result, k.result_dims)
    base = next(name for name in ("out", "result", "output", "fs_out")
                if not {f"{name}{suffix}" for suffix, _, _ in components} & (params | symbols))
    outputs = [f"{base}{suffix}" for suffix, _, _ in components]
    taken = OPENCL_NAMES | params | symbols | {k.dest} | set(outputs)
    plan = plan_kernels(k, set(taken))
    taken = taken | set(plan.buffers)
    status = next(name for name in ("status", "status_1", "status_2", "status_3") if name not in taken)
    texts, launches, interface, failing = [], [], None, []
    for j, phase in enumerate(plan.phases):
        # the parameters' and sizes' own names stay free for their C names (emit's Namer)
        reserved = (taken - params - symbols) | {ph.name for ph in plan.phases}
        emitter = _OpenCLEmitter(k, frozenset(reserved), options, slot=j)
        text, args = emitter.kernel(phase, plan.buffers, outputs, status, tuple(failing))
        if emitter.may_fail:
            failing.append(j)
        texts.append(text)
        local = tuple(sympy.sympify(n) for n in phase.local_size) if phase.local_size is not None else None
        launches.append(Launch(phase.name, args, tuple(sympy.sympify(n) for n in phase.global_size), local))
        interface = emitter.interface()
    body = "\n\n".join(texts)
    scalars = {element_scalar(ty) for _, ty, _ in k.params} | {element_scalar(ty) for _, ty, _ in components}
    fp64 = Double in scalars or re.search(r"\bdouble\b", body) is not None
    buffers = {}
    for name, ty, dims in k.params:
        if isinstance(ty, ArrayT):
            count = sympy.Mul(*(sympy.sympify(d) for d in dims))
            buffers[name] = Buffer(name, "input", element_scalar(ty), count)
    for output, (_, ty, dims) in zip(outputs, components):
        count = sympy.Mul(*(sympy.sympify(d) for d in dims)) if dims else sympy.Integer(1)
        buffers[output] = Buffer(output, "output", element_scalar(ty), count)
    for name, buf in plan.buffers.items():
        buffers[name] = Buffer(name, buf.role, buf.elem, sympy.sympify(buf.count))
    buffers[status] = Buffer(status, "status", STATUS_ELEM, sympy.Integer(len(launches)))
    header = (f"/* Generated by fsmooth from the kernel '{k.name}': {len(launches)} OpenCL kernel(s), "
              f"run in order (see fsmooth/opencl_artifact.py). */\n")
    source = header + prelude(fp64) + "\n" + body + "\n"
    return OpenCLArtifact(source, buffers, tuple(launches), interface, fp64)
