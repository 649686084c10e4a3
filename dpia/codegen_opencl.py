"""Imperative DPIA with strategies → OpenCL C and the launch plan (``fsmooth.opencl_artifact``).

The kernels and their hoisted buffers come from ``dpia.hoist_opencl``; statements, acceptors,
index paths, size printing and names are those of the C generator (``dpia.codegen_c``), whose
emitter this one extends with the OpenCL primitives (DPIA paper §6.2):

    parforGlobal    for (i = get_global_id(d); i < n; i += get_global_size(d))
    parforWorkgroup for (g = get_group_id(0); g < n; g += get_num_groups(0))
    parforLocal     for (l = get_local_id(0); l < n; l += get_local_size(0)); then a barrier
                    when it wrote local or global intermediates that other work-items read
    for             as in C
    newPrivate      T x[n];   (newGlobal/newLocal were hoisted to kernel arguments)

A write inside a work-group but outside its local loops is done once for the group (by local
work-item 0, then a barrier), since every work-item computes the same value there.

``vectorize(w, build_global(n, f))`` with an element-wise body becomes, per work-item, ``w``
contiguous elements: ``vloadw``/``vstorew`` over the loop index and the scalars uniform; the
``n mod w`` last elements are done one at a time.

Run-time checks (a data-dependent index out of range, an integer division by zero) report
through the 'status' buffer (``fsmooth.opencl_artifact``), one ``int`` per launch: a failed check
does ``atomic_cmpxchg(fs_status + j, 0, code)`` in launch j (the first failure wins) and jumps
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

from fsmooth.errors import CompileError
from fsmooth.opencl_artifact import STATUS_ELEM, Buffer, Launch, OpenCLArtifact
from fsmooth.options import Options
from fsmooth.types import C_TYPE, ArrayT, Bool, Double, Scalar, element_scalar

from . import phrases as p
from .codegen_c import _Alias, _Buffer, _ctype, _Exit, _indent, _KernelEmitter, _Scalar, _strip, _sym
from .hoist_opencl import HoistedBuffer, Phase, plan_kernels
from .strategy_check import PARALLEL, children, private_count, root

# Names the generated OpenCL uses or reserves beyond C's (codegen_c keeps C's out).
OPENCL_NAMES = frozenset("""
kernel __kernel global __global local __local private __private constant __constant read_only
write_only half bool char uchar short ushort int uint long ulong float double size_t ptrdiff_t
intptr_t uintptr_t void event_t image2d_t image3d_t sampler_t barrier mem_fence get_global_id
get_global_size get_local_id get_local_size get_group_id get_num_groups get_work_dim vload2 vload4
vload8 vload16 vstore2 vstore4 vstore8 vstore16 CLK_LOCAL_MEM_FENCE CLK_GLOBAL_MEM_FENCE
float2 float4 float8 float16 double2 double4 double8 double16 long2 long4 long8 long16 int64_t
uint64_t INT64_C fmod copysign atomic_cmpxchg
""".split())

_IDS = {"global": ("get_global_id", "get_global_size"), "workgroup": ("get_group_id", "get_num_groups"),
        "local": ("get_local_id", "get_local_size")}
_FENCE = {"local": "CLK_LOCAL_MEM_FENCE", "global": "CLK_GLOBAL_MEM_FENCE"}


@dataclass(frozen=True)
class _Memory(_Buffer):
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
class _StatusExit(_Exit):
    """Where a failed check goes on the device: its code into this launch's element of the
    status buffer, unless an earlier failure is there already, then a jump to ``label``."""

    slot: int = 0

    def fail(self, code) -> str:
        self.used = True
        return f"{{ atomic_cmpxchg({_STATUS_PARAM} + {self.slot}, 0, {code}); goto {self.label}; }}"


def _qualifier(space: str) -> str:
    return {"global": "__global ", "local": "__local ", "private": ""}[space]


class _OpenCLEmitter(_KernelEmitter):
    """The C emitter with the OpenCL primitives: one instance per OpenCL kernel."""

    def __init__(self, k: p.ImperativeKernel, taken: frozenset, options: Options, slot: int):
        super().__init__(k, taken, dataclasses.replace(options, parallel=False, allocation="arena"), frozenset())
        self.levels: list = []  # the parallel levels around the code being written
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
    def kernel(self, phase: Phase, hoisted: dict, output: str, status: str,
               failing_before: tuple) -> tuple[str, tuple]:
        """The kernel's source and launch arguments.  ``status``: the status buffer's name;
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
                env[name] = _Scalar(cname)
            args.append(name)
        params.append(f"__global {_mem_type(p.scalar_of(k.result_data))} *restrict out")
        args.append(output)
        env[k.dest] = _Memory("out", "global", "output")
        used = _identifiers(phase.body)
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
        if failing_before:
            # those launches have finished: every work-item reads the same values, and no
            # work-item of this launch writes them
            failed = " || ".join(f"{_STATUS_PARAM}[{j}] != 0" for j in failing_before)
            body = [f"if ({failed}) return;  /* an earlier launch failed: its result is not there */"] + body
        head = f"__kernel void {phase.name}({', '.join(params)}) {{"
        return "\n".join([head] + _indent(body) + ["}"]), tuple(args)

    # -- commands
    def comm(self, c: p.Phrase, env: dict, ranges) -> list[str]:
        match c:
            case p.ParFor(strategy=strategy) if strategy is not None and strategy.level in PARALLEL:
                if strategy.width > 1:
                    return self._vector_parfor(c, env, ranges)
                return self._parallel_parfor(c, env, ranges)
            case p.ParFor(strategy=strategy) if strategy is not None and strategy.width > 1:
                raise CompileError("vectorize needs build_global (or the default strategy's outermost build)",
                                   strategy.loc)
            case p.New(name, data, body, None, "private") if not isinstance(data, p.Num):
                cname = self.namer.fresh(name)
                decl = f"{_ctype(data)} {cname}[{private_count(data)}];"
                return [decl] + self.comm(body, {**env, name: _Memory(cname, "private", "private")}, ranges)
            case p.New(_, data, _, offset) if offset is not None:
                raise AssertionError(f"an arena region left in OpenCL code: {c}")
            case p.Assign(acc) if "workgroup" in self.levels and "local" not in self.levels:
                target = self._binding(acc, env, ranges)
                if isinstance(target, _Memory) and target.space != "private":
                    # every work-item of the group holds this value: one of them writes it, and
                    # a failed check there must not take it past the barrier below
                    lines = self._with_scoped_exit(lambda: super(_OpenCLEmitter, self).comm(c, env, ranges))
                    guarded = ["if (get_local_id(0) == 0) {"] + _indent(lines) + ["}"]
                    if target.role == "output":
                        return guarded
                    return guarded + [f"barrier({_FENCE[target.space]});"]
                return super().comm(c, env, ranges)
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
        inner = {**env, c.index: _Scalar(i)}
        inner[c.out] = _Alias(p.Idx(c.acc, loop_var, c.elem, c.size), inner)
        return i, n, inner, {**ranges, _sym(i): (sympy.Integer(0), n - 1)}

    def _parallel_parfor(self, c: p.ParFor, env: dict, ranges) -> list[str]:
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
        bound = _strip(self.cint(n, ranges))
        head = f"for (int64_t {i} = {get_id}({dim}); {i} < {bound}; {i} += {get_size}({dim})) {{"
        loop = [head] + _indent(lines) + ["}"]
        if level == "local":
            target = self._binding(c.acc, env, ranges)
            if isinstance(target, _Memory) and target.role in ("temp", "local"):
                # other work-items of the group read what this loop wrote (DPIA §6.2)
                loop.append(f"barrier({_FENCE[target.space]});")
        return loop

    def _double_buffer(self, c: p.DoubleBuffer, env: dict, ranges) -> list[str]:
        checks: list = []
        n = self.index(c.count, env, ranges, checks)
        memory = self._binding(c.first, env, ranges)
        space = memory.space if isinstance(memory, _Memory) else "global"
        role = memory.role if isinstance(memory, _Memory) else "temp"
        scalar = p.scalar_of(c.data)
        t = f"{_qualifier(space)}{_ctype(c.data) if space == 'private' else _mem_type(scalar)}"
        s, o = self.namer.fresh(c.state), self.namer.fresh(c.out)
        head = [f"{t} *{s} = {self.address(c.first, env, ranges, checks)};",
                f"{t} *{o} = {self.address(c.second, env, ranges, checks)};"]
        inner = {**env, c.state: _Memory(s, space, role), c.out: _Memory(o, space, role)}
        # RISE & Shine's double buffer: the two buffers trade places, nothing is copied
        swap = [f"{{ {t} *fs_swap = {s}; {s} = {o}; {o} = fs_swap; }}"]
        loop = self._loop(c.index, n, c.body, inner, ranges, swap)
        return checks + head + loop + self.comm(c.after, {**env, c.state: _Memory(s, space, role)}, ranges)

    # -- vectors
    def _vector_parfor(self, c: p.ParFor, env: dict, ranges) -> list[str]:
        """``vectorize(w, ·)``: iteration v does elements w·v .. w·v + w - 1 with vector loads and
        stores; the remainder, n mod w elements, runs as scalar code in the same strided loop."""
        w, loc = c.strategy.width, c.strategy.loc
        if c.strategy.level != "global":
            raise CompileError("vectorize needs build_global (or the default strategy's outermost build)", loc)
        if not (isinstance(c.body, p.Assign) and c.body.acc == p.Ident(c.out, p.AccT(c.elem))
                and isinstance(c.elem, p.Num)):
            raise CompileError("vectorize needs a build whose elements are scalars computed without loops", loc)
        scalar = c.elem.scalar
        if scalar is Bool:
            raise CompileError("vectorize needs a build of numbers, not of Bools", loc)
        checks: list = []
        i, n, inner, inner_ranges = self._enter(c, env, ranges)
        vector = self._vector_exp(c.body.exp, c.index, inner, inner_ranges, w, loc, checks)
        if checks:
            raise CompileError("vectorize needs a body without run-time checks", loc)
        out_base, out_offset = self.resolve(c.acc, sympy.Integer(0), env, ranges, [])
        if not isinstance(out_base, _Buffer):
            raise CompileError("vectorize needs a build written to memory", loc)
        v = self.namer.fresh("v")
        n_text = _strip(self.cint(n, ranges))
        out_at = self.cint(sympy.Symbol(f"{v}", integer=True) * w + out_offset, inner_ranges) if out_offset != 0 \
            else f"{v} * {w}"
        scalar_loop = self._parallel_parfor(dataclasses.replace(c, strategy=dataclasses.replace(c.strategy, width=1)),
                                            env, ranges)
        # the remainder: the same loop, started after the vectors
        scalar_loop[0] = scalar_loop[0].replace("get_global_id(0)", f"({n_text} / {w}) * {w} + get_global_id(0)", 1)
        head = f"for (int64_t {v} = get_global_id(0); {v} < {n_text} / {w}; {v} += get_global_size(0)) {{"
        body = [f"const int64_t {i} = {v} * {w};",
                f"vstore{w}({vector}, 0, {out_base.cname} + {_strip(out_at)});"]
        return [head] + _indent(body) + ["}"] + scalar_loop

    def _vector_exp(self, e: p.Phrase, index: str, env: dict, ranges, w: int, loc, checks: list) -> str:
        match e:
            case p.Literal() | p.NatExp():
                return self.exp(e, env, ranges, checks)
            case p.Ident(name) if isinstance(env.get(name), _Scalar) and name != index:
                return self.exp(e, env, ranges, checks)
            case p.ScalarOp("add" | "sub" | "mul" | "div" | "neg" | "min" | "max" | "sqrt" | "exp" | "log"
                            | "sin" | "cos" | "abs" as op, args) if all(
                                isinstance(p.data_of(a), p.Num) and p.data_of(a).scalar is p.data_of(e).scalar
                                for a in args):
                texts = [self._vector_exp(a, index, env, ranges, w, loc, checks) for a in args]
                return _VECTOR_OPS[op].format(*texts)
            case p.Idx(arr, p.Ident(i), p.Num(), _, False) if i == index:
                base, offset = self.resolve(arr, sympy.Integer(0), env, ranges, checks)
                if isinstance(base, _Memory) and base.space != "private":
                    at = self.cint(_sym(env[index].cname) + offset, ranges) if offset != 0 else env[index].cname
                    return f"vload{w}(0, {base.cname} + {_strip(at)})"
        raise CompileError(f"vectorize needs an element-wise body: arithmetic on reads x[i] of the loop "
                           f"index and values the same for all elements, not {p.show(e)}", loc)


_VECTOR_OPS = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
               "neg": "(-{0})", "min": "fmin({0}, {1})", "max": "fmax({0}, {1})", "sqrt": "sqrt({0})",
               "exp": "exp({0})", "log": "log({0})", "sin": "sin({0})", "cos": "cos({0})",
               "abs": "fabs({0})"}


def _identifiers(c: p.Phrase) -> set:
    names = {c.name} if isinstance(c, p.Ident) else set()
    for ph in children(c):
        names |= _identifiers(ph)
    return names


# ----------------------------------------------------------------------------- the runtime


_PRELUDE = r"""/* fsmooth's scalar helpers (clib/fsmooth_rt.h) in OpenCL C. */
typedef long int64_t;
typedef ulong uint64_t;
#define INT64_C(x) (x##L)
static inline int64_t fs_floordiv_i64(int64_t a, int64_t b) {
    if (b == -1) return (int64_t)(0UL - (uint64_t)a);
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
static inline int64_t fs_mod_i64(int64_t a, int64_t b) {
    if (b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
static inline int64_t fs_abs_i64(int64_t a) { return a < 0 ? (int64_t)(0UL - (uint64_t)a) : a; }
static inline int64_t fs_min_i64(int64_t a, int64_t b) { return b < a ? b : a; }
static inline int64_t fs_max_i64(int64_t a, int64_t b) { return b > a ? b : a; }
static inline bool fs_min_bool(bool a, bool b) { return b < a ? b : a; }
static inline bool fs_max_bool(bool a, bool b) { return b > a ? b : a; }
"""

# Python's float // and %, and the math functions, per floating type (T, suffix).
_FLOATING = r"""
static inline T fs_mod_S(T a, T b) {
    T r = fmod(a, b);
    if (r != 0) { if ((b < 0) != (r < 0)) r += b; }
    else r = copysign((T)0, b);
    return r;
}
static inline T fs_floordiv_S(T a, T b) {
    T r = fmod(a, b);
    T q = (a - r) / b;
    if (r != 0 && ((b < 0) != (r < 0))) q -= 1;
    if (q != 0) {
        T f = floor(q);
        if (q - f > (T)0.5) f += 1;
        q = f;
    } else q = copysign((T)0, a / b);
    return q;
}
static inline T fs_sqrt_S(T x) { return sqrt(x); }
static inline T fs_exp_S(T x) { return exp(x); }
static inline T fs_log_S(T x) { return log(x); }
static inline T fs_sin_S(T x) { return sin(x); }
static inline T fs_cos_S(T x) { return cos(x); }
static inline T fs_tan_S(T x) { return tan(x); }
static inline T fs_floor_S(T x) { return floor(x); }
static inline T fs_abs_S(T x) { return fabs(x); }
static inline T fs_pow_S(T a, T b) { return pow(a, b); }
static inline T fs_min_S(T a, T b) { return b < a ? b : a; }
static inline T fs_max_S(T a, T b) { return b > a ? b : a; }
"""


def prelude(fp64: bool) -> str:
    parts = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"] if fp64 else []
    parts.append(_PRELUDE)
    parts.append(_FLOATING.replace("T", "float").replace("_S(", "_f32("))
    if fp64:
        parts.append(_FLOATING.replace("T", "double").replace("_S(", "_f64("))
    return "".join(parts)


# ----------------------------------------------------------------------------- the artifact


def generate_opencl(prog: p.ImperativeProgram, options: Options = Options()) -> OpenCLArtifact:
    """The OpenCL kernels, buffers and launches of ``prog``'s entry kernel (its callees are
    inlined into it)."""
    k = prog.kernels[prog.entry]
    params = {name for name, _, _ in k.params}
    symbols = {s.name for s in k.sizes}
    output = next(name for name in ("out", "result", "out_1", "out_2") if name not in params | symbols)
    taken = OPENCL_NAMES | params | symbols | {k.dest, output}
    plan = plan_kernels(k, set(taken))
    taken = taken | set(plan.buffers)
    status = next(name for name in ("status", "status_1", "status_2", "status_3") if name not in taken)
    texts, launches, interface, failing = [], [], None, []
    for j, phase in enumerate(plan.phases):
        # the parameters' and sizes' own names stay free for their C names (codegen_c's Namer)
        reserved = (taken - params - symbols) | {ph.name for ph in plan.phases}
        emitter = _OpenCLEmitter(k, frozenset(reserved), options, slot=j)
        text, args = emitter.kernel(phase, plan.buffers, output, status, tuple(failing))
        if emitter.may_fail:
            failing.append(j)
        texts.append(text)
        local = tuple(str(n) for n in phase.local_size) if phase.local_size is not None else None
        launches.append(Launch(phase.name, args, tuple(str(n) for n in phase.global_size), local))
        interface = emitter.interface()
    body = "\n\n".join(texts)
    scalars = {element_scalar(ty) for _, ty, _ in k.params} | {p.scalar_of(k.result_data)}
    fp64 = Double in scalars or re.search(r"\bdouble\b", body) is not None
    buffers = {}
    for name, ty, dims in k.params:
        if isinstance(ty, ArrayT):
            count = sympy.Mul(*(sympy.sympify(d) for d in dims))
            buffers[name] = Buffer(name, "input", element_scalar(ty), str(count))
    result_count = sympy.Mul(*(sympy.sympify(d) for d in k.result_dims)) if k.result_dims else sympy.Integer(1)
    buffers[output] = Buffer(output, "output", p.scalar_of(k.result_data), str(result_count))
    for name, buf in plan.buffers.items():
        buffers[name] = Buffer(name, buf.role, buf.elem, str(buf.count))
    buffers[status] = Buffer(status, "status", STATUS_ELEM, str(len(launches)))
    header = (f"/* Generated by fsmooth from the kernel '{k.name}': {len(launches)} OpenCL kernel(s), "
              f"run in order (see fsmooth/opencl_artifact.py). */\n")
    source = header + prelude(fp64) + "\n" + body + "\n"
    return OpenCLArtifact(source, buffers, tuple(launches), interface, fp64)
