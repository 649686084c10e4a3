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

``vectorize(w, ·)`` comes as vector phrases (``dpia.vectorize`` decided what runs in lock step),
which print as they read: ``VectorParFor`` as a strided loop over the vectors (a sequential one
from 0 by 1, and its kernel hinted ``vec_type_hint`` of its vector: ``_vector_hint``), ``const int64_t
i = v * w`` its first lane's element, then the scalar loop of the ``n mod w`` last elements; a
``num<w>`` as ``floatw``/``doublew``; ``AsVector`` read as ``vloadw``, written as ``vstorew``;
lane k of a vector (``Idx(AsScalar(x), k)``) as ``x.sk``; ``Lane(k, P)`` as P in a block of its own,
the index shifted by k; ``AllLanes(c)`` as c of every lane joined by ``&&``.

On a CPU device a sequential loop's count, where it is an expression, is computed once into a
variable before the loop (``_OpenCLEmitter.loop_count``).

A kernel of a single work-group may end with sequential commands (``Phase.tail``): after a barrier,
work-item 0 runs them, unless the body failed a check.

A two-phase reduction in one launch (``Phase.last``, ``dpia.hoist_opencl``): after its body and a
barrier each group's work-item 0 fences its global writes (``mem_fence``) and takes a ticket
(``atomic_inc`` of the 'counter' buffer); the group with the last one sets the counter back to 0
and, unless a check failed, runs the second body (and the tail).  The buffers handed over are
written and read through ``fs_handover_store_T``/``fs_handover_load_T``, 32-bit atomics word by
word (core OpenCL 1.1), so no access crosses work-groups without an atomic (Oclgrind's race
check) and the last group reads the values in global memory, not a stale cache.  The partials
are combined in the same fixed order as by a second launch, so results are the same bits run
to run.

Run-time checks (a data-dependent index out of range, an integer division by zero, ``int(x)`` of
a NaN, an infinity or a float outside int64) report through the 'status' buffer
(``fsmooth.opencl_artifact``), one ``int`` per launch: a failed check does
``atomic_cmpxchg(fs_status + j, 0, code)`` in launch j (the first failure wins) and jumps
past the work it guards, so nothing out of range is read or written after it.  Where no barrier
can be skipped (a global kernel, or code every work-item of a group runs alike) the jump leaves
the work-item; inside a local loop or a write done by local work-item 0 it goes to the end of
that iteration or write, so the work-item still reaches the group's barriers; in a local loop
whose iteration writes its own element from a private variable, to just before that write, so
that the element is written (the value so far: the call fails anyway) and the group's later reads
of it in local memory read a written value.  A kernel after a
launch that can fail starts by testing that launch's status and returns when it is set.
Calls of kernels too large to inline are not supported here.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import sympy

from fsmooth.clib import HEADER_DIR, SCALAR_HEADER
from fsmooth.cost_model import GENERIC_GPU, DeviceDescription
from fsmooth import prims
from fsmooth.artifact import result_components
from fsmooth.dps.ranges import substitute
from fsmooth.errors import CompileError
from fsmooth.foreign import called_foreign, foreign_names
from fsmooth.names import NameSupply
from fsmooth.opencl_artifact import STATUS_ELEM, Buffer, Launch, OpenCLArtifact
from fsmooth.options import Options
from fsmooth.shape.size_printer import OPENCL_C
from fsmooth.types import C_TYPE, ArrayT, Bool, Card, Double, Float, Index, Scalar, element_scalar

from . import phrases as p
from . import index_paths as paths
from .codegen_c import size_divisors
from .emit import STATUS_INTEGER_OVERFLOW, FailureExit, KernelEmitter, c_type, exported_name, indent, strip_parentheses
from .index_paths import Alias, BufferVariable, ScalarVariable, index_symbol
from .hoist_opencl import MAX_LOCAL, KernelPlan, Phase, nest_dimension, plan_kernels
from .phrases import free_identifiers
from .scan_opencl import LOOKBACK_EXTENSION, emit_group_scan, scan_notes
from .strategy_check import PARALLEL, private_count, root
from .vectorize import VECTOR_OPS, Lanes

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
    atomic: bool = False  # handed between work-groups: its elements written and read atomically


def _where_computed(e: sympy.Expr) -> sympy.Expr:
    """The size ``e`` where its divisors are nonzero, else 0.  A kernel's body divides only by a
    divisor that is nonzero where the division runs (a group count where the group has work, a
    divisor tested first), so on the host, which tests every call, a zero divisor marks a
    computation that does not happen; inner divisors are tested first."""
    divisors = sorted(set(size_divisors(e)), key=sympy.count_ops)
    if not divisors:
        return e
    return sympy.Piecewise(*((0, sympy.Eq(d, 0)) for d in divisors), (e, True))


def _handover(op: str, ph: p.Phrase) -> str:
    """The ``fs_handover_{store,load}_T`` (``HANDOVER_HELPERS``) of ``ph``'s element type."""
    return f"fs_handover_{op}_{_HANDOVER_SUFFIX[p.scalar_of(p.data_of(ph))]}"


def _mem_type(s: Scalar) -> str:
    """The element type of an array in memory: Bool arrays are bytes (opencl_artifact)."""
    return "uchar" if s is Bool else C_TYPE[s]


def _arg_type(s: Scalar) -> str:
    return "uchar" if s is Bool else C_TYPE[s]


# The kernel parameter of the status buffer (fs_ names are never given to program variables).
_STATUS_PARAM = "fs_status"
# The suffix of fs_handover_store_T/fs_handover_load_T (HANDOVER_HELPERS) per element type.
_HANDOVER_SUFFIX = {Float: "float", Double: "double", Index: "long", Card: "long"}

# What a program with a one-launch reduction adds to the prelude: a value handed from a launch's
# work-groups to its last group, stored and loaded word by word with 32-bit atomics (core OpenCL
# 1.1; 64-bit atomics are an extension).  Loads are atomic_or(0): OpenCL 1.x has no atomic load.
HANDOVER_HELPERS = r"""static inline void fs_handover_store_float(__global float *p, float v) {
    atomic_xchg((volatile __global int *)p, as_int(v));
}
static inline float fs_handover_load_float(__global float *p) {
    return as_float(atomic_or((volatile __global int *)p, 0));
}
#define FS_HANDOVER_64(T) \
    static inline void fs_handover_store_##T(__global T *p, T v) { \
        volatile __global int *q = (volatile __global int *)p; \
        long bits = as_long(v); \
        atomic_xchg(q, (int)bits); \
        atomic_xchg(q + 1, (int)(bits >> 32)); \
    } \
    static inline T fs_handover_load_##T(__global T *p) { \
        volatile __global int *q = (volatile __global int *)p; \
        return as_##T((long)(uint)atomic_or(q, 0) | ((long)atomic_or(q + 1, 0) << 32)); \
    }
FS_HANDOVER_64(long)
"""


@dataclass
class _StatusExit(FailureExit):
    """Where a failed check goes on the device: its code into this launch's element of the
    status buffer, unless an earlier failure is there already, then a jump to ``label``."""

    slot: int = 0

    def fail(self, code) -> str:
        self.used = True
        return f"{{ {self.record(code)} goto {self.label}; }}"

    def record(self, code) -> str:
        """The status only, no jump."""
        return f"atomic_cmpxchg({_STATUS_PARAM} + {self.slot}, 0, {code});"


def _vector_hint(phase: Phase) -> str:
    """``__attribute__((vec_type_hint(floatw)))`` where a work-item computes in vectors of its
    own (a vectorised sequential build): the kernel's width is the work-item's.  Intel's CPU
    compiler otherwise vectorises across work-items as well, each of its lanes one work-item, which
    turns every vector load into a gather (gemv 4096², the row's fold in 16-wide vectors: 6 ms
    without the hint, 2.4 ms with it, on a loaded machine)."""
    for part in phase.parts():
        for c in p.walk(part):
            if isinstance(c, p.VectorParFor) and c.strategy.level == "seq":
                return f"__attribute__((vec_type_hint({C_TYPE[c.elem.scalar]}{c.width}))) "
    return ""


def _qualifier(space: str) -> str:
    return {"global": "__global ", "local": "__local ", "private": ""}[space]


class _OpenCLEmitter(KernelEmitter):
    """The C emitter with the OpenCL primitives: one instance per OpenCL kernel."""

    size_target = OPENCL_C

    def integer_overflow(self, flag: str) -> str:
        # The status only, no jump: checked arithmetic that overflows gives 0 (fs_checked_*_i64),
        # so a loop it counts runs nothing on every work-item alike, and an index it computes is
        # range-checked as any other.  A goto out of a loop with a barrier in it is divergent
        # control flow, on which PoCL's work-groups hang.
        return f"if ({flag}) {self.exit.record(STATUS_INTEGER_OVERFLOW)}"

    def unless(self, flag: str, body: list[str]) -> list[str]:
        # a branch around the body, not a jump over its barriers: every work-item takes the same one
        return [f"if ({flag}) {{", f"    {self.exit.record(STATUS_INTEGER_OVERFLOW)}", "} else {"] + indent(body) + ["}"]

    def __init__(self, k: p.ImperativeKernel, symbol: str, taken: frozenset, options: Options, slot: int):
        # every region is a kernel argument (dpia.hoist_opencl): the interface's scratch is the arena's
        super().__init__(k, symbol, taken, dataclasses.replace(options, allocation="arena"))
        self.levels: list = []  # the parallel levels around the code being written
        self.own_element: str | None = None  # the acceptor of the local loop iteration's element
        self.lanes: Lanes | None = None  # the vectorised build whose body is being written
        self.slot = slot  # this launch's element of the status buffer
        self.exit = _StatusExit("fs_exit", _STATUS_PARAM, slot=slot)
        self.exits = [self.exit]  # every exit made: whether any check can fail
        self.handing_over = False  # whether the kernel has buffers handed between groups
        self.one_group = False  # writing the last group's part: a launch of one group's body
        self.fitting_on_host: dict = {}  # what before_the_body leaves to the host, in C names

    @property
    def may_fail(self) -> bool:
        """Whether the kernel written has a run-time check (known once ``kernel`` ran)."""
        return any(e.used for e in self.exits)

    def _scoped_exit(self) -> _StatusExit:
        """An exit to the end of a piece of code that only some work-items of a group run."""
        scoped = _StatusExit(f"fs_next{self.fresh_number()}", _STATUS_PARAM, slot=self.slot)
        self.exits.append(scoped)
        return scoped

    def _with_scoped_exit(self, write_lines, own: str | None = None) -> list[str]:
        """``write_lines()`` with its failures jumping to a label after its lines; ``own``: the
        element a local loop's iteration writes (``_own_element_write``)."""
        outer, self.exit = self.exit, self._scoped_exit()
        outer_own, self.own_element = self.own_element, own
        try:
            lines = write_lines()
        finally:
            scoped, self.exit = self.exit, outer
            self.own_element = outer_own
        return lines + [f"{scoped.label}: ;"] if scoped.used else lines

    def call_address(self, fn, ph, is_destination, env, ranges, checks) -> str:
        # a foreign function's arrays are in global memory, as its prototype says (fsmooth.foreign)
        binding, offset, tested_ranges = self.resolve(ph, env, ranges, checks)
        if not (isinstance(binding, _Memory) and binding.space == "global"):
            raise CompileError(f"on OpenCL, the arrays of a foreign function are in global memory, but "
                               f"{'the result' if is_destination else 'an argument'} of {fn.name} is not: leave "
                               "it to the default strategy, without to_local or to_private")
        return self.address_of(binding, offset, tested_ranges)

    def _own_element_write(self, c: p.Assign) -> bool:
        """``c`` writes a private variable to the element of the local loop's iteration, after a
        check that may fail: the check's jump then lands before it, so the element is written (the
        value so far; the call fails anyway) and the group's later reads of it, in local memory,
        read a value someone wrote (a two-phase reduction's tree: Oclgrind checks that)."""
        acc = c.acc.at if isinstance(c.acc, p.AsVector) else c.acc
        return (self.own_element is not None and self.exit.used and isinstance(c.exp, p.Ident)
                and root(acc) == self.own_element)

    # -- the kernel function
    def kernel(self, phase: Phase, hoisted: dict, outputs: list, status: str,
               failing_before: tuple) -> tuple[str, tuple]:
        """The kernel's source and launch arguments.  ``outputs``: the output buffers' names (one,
        or one per component of a tuple result); ``status``: the status buffer's name;
        ``failing_before``: the earlier launches that can fail (their elements are tested first)."""
        k = self.k
        self.global_dims = len(phase.global_size)
        self.dimensions = phase.dimensions
        self.local_size = phase.local_size
        self.handing_over = phase.last is not None
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
        used = set().union(*(free_identifiers(part) for part in phase.parts()))
        # NVIDIA's OpenCL (driver 580, H200) miscompiles a single-pass scan whose local arrays are
        # restrict-qualified: lanes read a stale ticket, the group's tile index, that work-item 0
        # wrote before a barrier (wrong tiles, then an illegal address or a hang at a barrier)
        local_restrict = "" if any(isinstance(c, p.GroupScan) and c.words is not None for c in p.walk(phase.body)) else "restrict "
        tickets, flag = (phase.last.counter, phase.last.flag) if phase.last is not None else (None, None)
        for name, buf in hoisted.items():
            if name == tickets:
                counter = self.namer.fresh(name)
                params.append(f"__global int *restrict {counter}")
                args.append(name)
            elif name == flag:
                last_group = self.namer.fresh(name)
                params.append(f"__local int64_t *restrict {last_group}")
                args.append(name)
            elif name in used:
                space = "local" if buf.role == "local" else "global"
                cname = self.namer.fresh(name)
                restrict = local_restrict if space == "local" else "restrict "
                params.append(f"{_qualifier(space)}{_mem_type(buf.elem)} *{restrict}{cname}")
                args.append(name)
                role = "temp" if buf.role == "handover" else buf.role
                env[name] = _Memory(cname, space, role, atomic=buf.role == "handover")
        for src in self.sources:
            if src.dim is not None:
                params.append(f"long {self.size_names[src.symbol]}")
                args.append(src.symbol)
        params.append(f"__global int *restrict {_STATUS_PARAM}")
        args.append(status)
        ranges = self.kernel_ranges()
        if phase.last is not None:
            body = self._one_launch(phase, env, ranges, counter, f"{last_group}[0]")
            tail = None
        else:
            body = self.comm(phase.body, env, ranges)
            tail = None if phase.tail is None else self._with_scoped_exit(lambda: self.comm(phase.tail, env, ranges))
            body = self.before_the_body(body)
            if self.exit.used:
                body = body + [f"{self.exit.label}: ;"]
        if tail is not None:
            # the launch is one work-group (hoist_opencl): after the barrier its writes are
            # there for work-item 0, which runs the sequential tail unless the body failed
            body += ["barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);",
                     f"if (get_local_id(0) == 0 && {_STATUS_PARAM}[{self.slot}] == 0) {{"] + indent(tail) + ["}"]
        if failing_before:
            # those launches have finished: every work-item reads the same values, and no
            # work-item of this launch writes them
            failed = " || ".join(f"{_STATUS_PARAM}[{j}] != 0" for j in failing_before)
            body = [f"if ({failed}) return;  /* an earlier launch failed: its result is not there */"] + body
        head = f"__kernel {_vector_hint(phase)}void {phase.name}({', '.join(params)}) {{"
        return "\n".join([head] + indent(body) + ["}"]), tuple(args)

    def before_the_body(self, body: list[str]) -> list[str]:
        """``body`` as it is: the sizes bounding its index arithmetic are the same for every
        work-item, so the host tests once a call that they fit int64 (``OpenCLArtifact.fitting``,
        in the executable's and the C host code's size check), not every work-item."""
        self.fitting_on_host.update(self.fitting_before_the_body)
        self.fitting_before_the_body = {}
        return body

    def fitting(self) -> tuple:
        """What the host tests for this kernel (``before_the_body``), in the kernel's size symbols."""
        size_of = {self.size_names[s.name]: s for s in self.k.sizes}
        return tuple(_where_computed(substitute(e, {c: size_of[c.name] for c in e.free_symbols}))
                     for e in map(sympy.sympify, self.fitting_on_host))

    def loop_count(self, bound: str) -> tuple[list[str], str]:
        """On a CPU device a count that is an expression gets a variable before its loop: Intel's
        CPU compiler evaluates it on every trip where it calls the prelude's helpers (fs_min_i64,
        fs_shift_floor_i64): gemv at 4096² took 1.7 ms with them in the condition, 1.3 ms with
        the count in a variable."""
        if (self.options.opencl_device or GENERIC_GPU).kind != "cpu" or re.fullmatch(r"\w+", bound):
            return [], bound
        trips = f"fs_trips{self.fresh_number()}"
        return [f"const int64_t {trips} = {bound};"], trips

    def _one_launch(self, phase: Phase, env: dict, ranges, counter: str, last_group: str) -> list[str]:
        """Every group's ``phase.body``, then its ticket, then the last group's part: ``phase.last.body``
        and the tail (module docstring).  Each part after its own test that its sizes fit
        (``before_the_body``), run only where it runs: the groups' part by the groups that have an
        iteration (the launch has one group where there is none, for the last part)."""
        groups = strip_parentheses(self.cint(self.rename(phase.last.groups, {}), ranges))
        body = self.before_the_body(self.comm(phase.body, env, ranges))
        if self.exit.used:
            body += [f"{self.exit.label}: ;"]  # a failed check still takes its ticket
        self.one_group = True
        try:
            last = self._with_scoped_exit(lambda: self.comm(phase.last.body, env, ranges))
            if phase.tail is not None:
                # after the barrier the group's writes are there for work-item 0
                tail = self._with_scoped_exit(lambda: self.comm(phase.tail, env, ranges))
                last += ["barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);",
                         f"if (get_local_id(0) == 0 && atomic_or({_STATUS_PARAM} + {self.slot}, 0) == 0) {{"]
                last += indent(tail) + ["}"]
        finally:
            self.one_group = False
        last = self.before_the_body(last)
        # the last ticket: every other group has written its partials; a failed check (the
        # status, atomic: other groups write it) leaves them unwritten, and the call fails
        ticket = [f"{last_group} = atomic_inc({counter}) == get_num_groups(0) - 1;",
                  f"if ({last_group}) atomic_xchg({counter}, 0);  /* every group has had its ticket */",
                  f"if ({last_group} && atomic_or({_STATUS_PARAM} + {self.slot}, 0) != 0) {last_group} = 0;"]
        # the barrier orders the group's writes before work-item 0's, whose fence orders them
        # before its ticket (one fence a group: one a work-item cost a quarter of asum's time on
        # Intel's CPU runtime)
        return ([f"if (get_group_id(0) < {groups}) {{"] + indent(body) + ["}",
                "barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);",
                "if (get_local_id(0) == 0) {",
                "    mem_fence(CLK_GLOBAL_MEM_FENCE);  /* the group's writes before its ticket */"]
                + indent(ticket) + ["}", "barrier(CLK_LOCAL_MEM_FENCE);", f"if ({last_group}) {{"]
                + indent(last) + ["}"])

    def _atomic(self, ph: p.Phrase, env: dict, ranges) -> bool:
        """Whether ``ph`` is in a buffer handed between work-groups (``_Memory.atomic``)."""
        binding = self._binding(ph, env, ranges)
        return isinstance(binding, _Memory) and binding.atomic

    def _assignment(self, c: p.Assign, env: dict, ranges) -> list[str]:
        """``c``, an atomic store where its target is handed between work-groups."""
        if not (self.handing_over and self._atomic(c.acc, env, ranges)):
            return super().comm(c, env, ranges)
        checks: list = []
        value = self.exp(c.exp, env, ranges, checks)
        target = self.lvalue(c.acc, env, ranges, checks)
        return checks + [f"{_handover('store', c.exp)}(&{target}, {value});"]

    # -- commands
    def comm(self, c: p.Phrase, env: dict, ranges) -> list[str]:
        match c:
            case p.ParFor(strategy=strategy) if strategy is not None and strategy.level in PARALLEL:
                return self._parallel_parfor(c, env, ranges)
            case p.VectorParFor():
                return self._vector_parfor(c, env, ranges)
            case p.GroupScan():
                return emit_group_scan(self, c, env, ranges)
            case p.StagedRows():
                return self._staged_rows(c, env, ranges)
            case p.CallCmd(fn) if not isinstance(fn, str):  # a foreign function (KernelEmitter's)
                return super().comm(c, env, ranges)
            case p.New(name, p.Vec(scalar, w), body):
                cname = self.namer.fresh(name)
                return [f"{C_TYPE[scalar]}{w} {cname};"] + self.comm(body, {**env, name: ScalarVariable(cname)}, ranges)
            case p.Assign() if self._own_element_write(c):
                # the label of the failed checks so far; later ones (none, where the write ends the
                # iteration) jump to the end as before
                label, self.exit = self.exit.label, self._scoped_exit()
                return [f"{label}: ;"] + self.comm(c, env, ranges)
            case p.Assign(p.AsVector(w, at), e) if self.handing_over and self._atomic(at, env, ranges):
                checks: list = []
                value = self.exp(e, env, ranges, checks)
                address = self.address(at, env, ranges, checks)
                vector = self.namer.fresh("lanes")
                store = _handover("store", e)
                return checks + [f"{{ {C_TYPE[p.scalar_of(p.data_of(e))]}{w} {vector} = {value};"] + [
                    f"  {store}({address} + {k}, {vector}.s{k:x});" for k in range(w)] + ["}"]
            case p.Assign(p.AsVector(w, at), e):
                checks: list = []
                value = self.exp(e, env, ranges, checks)
                return checks + [f"vstore{w}({value}, 0, {self.address(at, env, ranges, checks)});"]
            case p.IfCmd(p.AllLanes()):
                return self._all_lanes_if(c, env, ranges)
            case p.Lane(k, body):
                # scalar code, in a block of its own
                lanes, self.lanes = self.lanes, None
                try:
                    return ["{"] + indent(self.comm(body, lanes.env(env, k), ranges)) + ["}"]
                finally:
                    self.lanes = lanes
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
                    lines = self._with_scoped_exit(lambda: self._assignment(c, env, ranges))
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
            case p.Assign():
                return self._assignment(c, env, ranges)
        return super().comm(c, env, ranges)

    def _binding(self, ph: p.Phrase, env: dict, ranges):
        # only the binding is wanted: the checks on the way are written where the phrase is
        # resolved for its value
        return paths.resolve(ph, env, ranges, self.size_names).binding

    def _enter(self, c: p.ParFor, env: dict, ranges):
        """(C name of the index, inner environment, inner ranges) of a parfor."""
        i = self.namer.fresh(c.index)
        n = self.rename(c.size, env)
        loop_var = p.Ident(c.index, p.ExpT(p.IdxT(c.size)))
        inner = {**env, c.index: ScalarVariable(i)}
        inner[c.out] = Alias(p.Idx(c.acc, loop_var, c.elem, c.size), inner)
        return i, n, inner, ranges.inside(index_symbol(i), n - 1)

    def _parallel_parfor(self, c: p.ParFor, env: dict, ranges) -> list[str]:
        return self._strided_loop(c, env, ranges) + self._barrier_after(c, env, ranges)

    def _strided_loop(self, c: p.ParFor, env: dict, ranges, start: str = "") -> list[str]:
        """The loop of a parallel ``parfor`` over its work-items, from ``start`` on."""
        level = c.strategy.level
        first, step = self._first_and_step(level)
        i, n, inner, inner_ranges = self._enter(c, env, ranges)
        self.levels.append(level)
        try:
            if level == "local":
                # a failed check ends this iteration only: the work-item still meets the barriers
                lines = self._with_scoped_exit(lambda: self.comm(c.body, inner, inner_ranges), c.out)
            else:
                lines = self.comm(c.body, inner, inner_ranges)
        finally:
            self.levels.pop()
        bound = strip_parentheses(self.cint(n, ranges))
        if level == "local" and not self.one_group and not sympy.sympify(n).is_number:
            step = self._group_size(self._dimension(level)) or step
        head = f"for (int64_t {i} = {start}{first}; {i} < {bound}; {i} += {step}) {{"
        return [head] + indent(lines) + ["}"]

    def _staged_rows(self, c: p.StagedRows, env: dict, ranges) -> list[str]:
        """The copy of each work-item's row into the tile, by its group's work-items along
        dimension 1, and the barrier after it, outside every loop (``dpia.stage_tiles``), then the
        nest."""
        lane, row, column = (self.namer.fresh(name) for name in (c.lane, "row", "column"))
        rows = p.data_of(c.source)
        length = rows.elem.size
        n, d = self.rename(rows.size, env), self.rename(length, env)
        inside = ranges.inside(index_symbol(lane), c.lanes - 1)
        copying = inside.inside(index_symbol(row), n - 1).inside(index_symbol(column), d - 1)
        scalars = {**env, c.lane: ScalarVariable(lane), row: ScalarVariable(row), column: ScalarVariable(column)}
        part = c.part and self.namer.fresh(c.part)
        if part is not None:
            copying = copying.inside(index_symbol(part), c.jam - 1)
            scalars[c.part] = ScalarVariable(part)
        at = lambda name, size: p.Ident(name, p.ExpT(p.IdxT(size)))  # noqa: E731
        copy = p.Assign(p.Idx(c.tile, at(column, length), rows.elem.elem, length),
                        p.Idx(p.Idx(c.source, at(row, rows.size), rows.elem, rows.size), at(column, length),
                              rows.elem.elem, length))
        head = (f"for (int64_t {column} = get_local_id(1); {column} < {strip_parentheses(self.cint(d, ranges))}; "
                f"{column} += get_local_size(1)) {{")
        staging = [f"if ({row} < {strip_parentheses(self.cint(n, ranges))}) {{", *indent([head]),
                   *indent(indent(self.comm(copy, scalars, copying))), "    }", "}"]
        if part is not None:  # the work-item's rows (``p.StagedRows.jam``)
            staging = [f"for (int64_t {part} = 0; {part} < {c.jam}; {part}++) {{",
                       f"    const int64_t {row} = {c.jam} * (get_global_id(0) - {lane}) + {lane} + {c.lanes} * {part};",
                       *indent(staging), "}"]
        else:
            staging = [f"const int64_t {row} = get_global_id(0);", *staging]
        return ([f"const int64_t {lane} = get_local_id(0);", *staging, "barrier(CLK_LOCAL_MEM_FENCE);"]
                + self.comm(c.body, {**env, c.lane: ScalarVariable(lane)}, inside))

    def _first_and_step(self, level: str) -> tuple[str, str]:
        """The first iteration and the stride of a work-item's loop at ``level``: its id and the
        count of its kind, or 0 and 1 for the last group's part of a one-launch reduction, which
        runs every iteration of what was a launch of one group."""
        if level == "seq" or (level == "workgroup" and self.one_group):
            return "0", "1"
        get_id, get_size = _IDS[level]
        dim = self._dimension(level)
        return f"{get_id}({dim})", f"{get_size}({dim})"

    def _group_size(self, dim: int) -> str | None:
        """The launch's work-group size in NDRange dimension ``dim`` where code generation fixes it
        (the executable launches that size or fails), else None.  As the stride of a loop over a
        row it lets the device's compiler unroll the loop and keep several of its loads in flight
        (H200: 8% on a softmax row, float32 and float64).  A loop over a constant count keeps
        get_local_size: it runs at most once, and NVIDIA's compiler made slower code of the
        constant there (a softmax's trees: 15%)."""
        if self.local_size is None or dim >= len(self.local_size):
            return None
        size = sympy.sympify(self.local_size[dim])
        return str(size) if size.is_Integer else None

    def _dimension(self, level: str) -> int:
        """The NDRange dimension of a loop at ``level`` inside ``self.levels``: a global loop's
        by its depth in the nest (``Phase.dimensions``)."""
        if level == "global":
            return nest_dimension(self.levels.count(level), self.global_dims, self.dimensions)
        return self.levels.count(level)

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

    # -- vectors (dpia.vectorize made them)
    def _vector_parfor(self, c: p.VectorParFor, env: dict, ranges) -> list[str]:
        """Iteration v does the elements w·v .. w·v + w - 1 at once; the remainder, n mod w
        elements, runs as scalar code in the same strided loop."""
        w, level = c.width, c.strategy.level
        first, step = self._first_and_step(level)
        i, n, inner, _ = self._enter(c, env, ranges)
        v = self.namer.fresh("v")
        # the first lane's index: the last lane's is at most n - 1
        vector_ranges = ranges.inside(index_symbol(i), n - w)
        self.lanes, self.levels = Lanes(i, w, c.out, inner[c.out].phrase), self.levels + [level]
        try:
            write = lambda: self.comm(c.body, inner, vector_ranges)  # noqa: E731
            lines = self._with_scoped_exit(write, c.out) if level == "local" else write()
        finally:
            self.lanes, self.levels = None, self.levels[:-1]
        n_text = strip_parentheses(self.cint(n, ranges))
        loop = ([f"for (int64_t {v} = {first}; {v} < {n_text} / {w}; {v} += {step}) {{",
                 f"    const int64_t {i} = {v} * {w};"] + indent(lines) + ["}"])
        if c.remainder is not None:
            loop += self._strided_loop(c.remainder, env, ranges, start=f"({n_text} / {w}) * {w} + ")
        return loop + self._barrier_after(c, env, ranges)

    def _all_lanes_if(self, c: p.IfCmd, env: dict, ranges) -> list[str]:
        """The branch as vector code where its condition holds for every lane, with the guard's
        ranges of every lane."""
        every = self.exp(c.cond, env, ranges, [])
        inside = ranges
        for k in range(self.lanes.width):
            inside = paths.guarded(c.cond.cond, self.lanes.env(env, k), inside, self.size_names)
        return ([f"if ({every}) {{"] + indent(self.comm(c.then, env, inside)) + ["} else {"]
                + indent(self.comm(c.orelse, env, ranges)) + ["}"])

    def exp(self, ph: p.Phrase, env: dict, ranges, checks: list) -> str:
        match ph:
            case p.ScalarOp(op, args, p.Vec(scalar, w)):
                # a broadcast operand is one more parenthesised group
                texts = [f"({self.exp(x, env, ranges, checks)})" if isinstance(x, p.Broadcast)
                         else self.exp(x, env, ranges, checks) for x in args]
                return VECTOR_OPS[op].format(*texts, vec=f"{C_TYPE[scalar]}{w}")
            case p.Broadcast(e, p.Vec(scalar, w)):
                return f"({C_TYPE[scalar]}{w})({self.exp(e, env, ranges, checks)})"
            case p.AsVector(w, at) if self.handing_over and self._atomic(at, env, ranges):
                address = self.address(at, env, ranges, checks)
                load = _handover("load", ph)
                return f"({C_TYPE[p.scalar_of(p.data_of(ph))]}{w})({', '.join(f'{load}({address} + {k})' for k in range(w))})"
            case p.AsVector(w, at):
                return f"vload{w}(0, {self.address(at, env, ranges, checks)})"
            case p.Ident() | p.Idx() | p.Shift() | p.Proj() if self.handing_over and self._atomic(ph, env, ranges):
                text = super().exp(ph, env, ranges, checks)
                return f"{_handover('load', ph)}(&{text})"
            case p.AllLanes(cond):
                return " && ".join(f"({self.exp(cond, self.lanes.env(env, k), ranges, checks)})"
                                   for k in range(self.lanes.width))
        return super().exp(ph, env, ranges, checks)


# ----------------------------------------------------------------------------- the runtime


# What clib/fsmooth_scalar.h needs from its includer (see there), in OpenCL C.
_SCALAR_HEADER_ENVIRONMENT = r"""typedef long int64_t;
typedef ulong uint64_t;
#define INT64_C(x) (x##L)
#define INT64_MIN LONG_MIN
#define INT64_MAX LONG_MAX
#define FS_FLOAT_MATH(name) name
"""


def prelude(fp64: bool, one_launch: bool = False, int64_atomics: bool = False) -> str:
    """What every OpenCL program of fsmooth starts with: the scalar helpers of the C runtime
    (``clib/fsmooth_scalar.h``, one text for both back ends), those of double only where the
    program uses double, since a device may have no fp64; with ``one_launch`` (a one-launch
    reduction) the atomic stores and loads of its partials (``HANDOVER_HELPERS``); the 64-bit
    atomics where a single-pass scan uses them (``dpia.scan_opencl``)."""
    parts = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"] if fp64 else []
    if int64_atomics:
        parts.append(f"#pragma OPENCL EXTENSION {LOOKBACK_EXTENSION} : enable\n")
    parts.append(_SCALAR_HEADER_ENVIRONMENT)
    if fp64:
        parts.append("#define FS_HAVE_F64\n")
    parts.append((HEADER_DIR / SCALAR_HEADER).read_text())
    parts.append("#undef FS_FLOAT_MATH\n#undef FS_HAVE_F64\n")
    parts.append(_VECTOR_MIN_MAX)
    parts += [f"FS_VECTOR_MIN_MAX({t}{w})\n" for t in ("float", "double")[:2 if fp64 else 1] for w in (2, 4, 8, 16)]
    if one_launch:
        parts += [HANDOVER_HELPERS, "FS_HANDOVER_64(double)\n" if fp64 else ""]
    return "".join(parts)


# Python's min and max (b only if b < a), as clib/fsmooth_scalar.h's fs_min/fs_max, for vectors.
_VECTOR_MIN_MAX = r"""#define FS_VECTOR_MIN_MAX(V) \
    static inline V fs_min_##V(V a, V b) { return select(a, b, b < a); } \
    static inline V fs_max_##V(V a, V b) { return select(a, b, b > a); }
"""


# ----------------------------------------------------------------------------- the artifact


@dataclass(frozen=True)
class OpenCLPlan:
    """A program's entry kernel planned as OpenCL kernels (``dpia.hoist_opencl``), with the names of
    its result buffers and the names generated code must leave alone: what ``dpia.vectorize``
    rewrites and ``generate_opencl`` prints."""

    kernel: p.ImperativeKernel
    symbol: str  # the kernel's exported name (dpia.emit.exported_name), the OpenCL kernels' stem
    kernels: KernelPlan
    outputs: tuple  # the result buffers' names, one per component of the result
    taken: frozenset


def show_program(plan: OpenCLPlan) -> str:
    """The plan in the DPIA paper's notation: each OpenCL kernel's NDRange and body (``fsmooth
    explain --pass plan_opencl`` and ``--pass vectorize``), then the hoisted buffers."""
    def sizes(dims) -> str:
        return "×".join(str(d) for d in dims)

    lines = []
    for phase in plan.kernels.phases:
        local = "" if phase.local_size is None else f", local {sizes(phase.local_size)}"
        lines.append(f"kernel {phase.name} (global {sizes(phase.global_size)}{local}"
                     f"{', sequential' if phase.sequential else ''}):")
        lines += ["  " + line for line in p.show(phase.body).splitlines()]
        if phase.last is not None:
            lines += [f"  then the last work-group to take a ticket of {phase.last.counter} (reading "
                      f"{', '.join(sorted(phase.last.handover))} atomically):"]
            lines += ["    " + line for line in p.show(phase.last.body).splitlines()]
        if phase.tail is not None:
            lines += ["  then work-item 0:"] + ["    " + line for line in p.show(phase.tail).splitlines()]
    lines += [f"buffer {b.name}: {b.role} {b.elem.name}[{b.count}]" for b in plan.kernels.buffers.values()]
    return "\n".join(lines)


def plan_opencl(prog: p.ImperativeProgram, module: str, one_launch: bool = True,
                device: DeviceDescription = GENERIC_GPU) -> OpenCLPlan:
    """The OpenCL kernels of ``prog``'s entry kernel (its callees are inlined into it), named
    after its exported name in ``module``; ``one_launch``: a two-phase reduction's phases in one
    launch (``dpia.hoist_opencl``); ``device``: the one whose cost model shapes the launches of
    nests of global loops."""
    k = prog.kernels[prog.entry]
    params = {name for name, _, _ in k.params}
    symbols = {s.name for s in k.sizes}
    components = result_components(k.result, k.result_dims)
    base = next(name for name in ("out", "result", "output", "fs_out")
                if not {f"{name}{suffix}" for suffix, _, _ in components} & (params | symbols))
    outputs = tuple(f"{base}{suffix}" for suffix, _, _ in components)
    taken = OPENCL_NAMES | params | symbols | {k.dest} | set(outputs)
    symbol = exported_name(module, k.name)
    return OpenCLPlan(k, symbol, plan_kernels(k, symbol, set(taken), one_launch, device), outputs, frozenset(taken))


NESTED_LOCAL = (32, MAX_LOCAL // 32)  # a 2-D launch's work-group where the program names its strategy


def _work_groups(global_size: tuple, tiles: tuple | None = None) -> tuple[tuple, tuple]:
    """(global size, local size) of a launch of global loops.  Left to the implementation, the
    local size must divide the global size: for a prime count of work-items, groups of one
    (NVIDIA's, for BA's 5,001,946 observations: groups of two).  So each dimension is rounded up
    to whole groups of ``MAX_LOCAL`` work-items, the largest group hoist_opencl plans; the loops
    are strided, and a work-item past the end does no iteration.  A 2-D or 3-D launch takes the
    least padded of ``tiles`` for the call's sizes (the first of equals), the cost model's choice
    where the program says nothing of its strategy (``hoist_opencl._nest_shape``), else
    ``NESTED_LOCAL`` tiles: a row of 256 would leave most lanes idle where the size along
    dimension 0 is short, and 32 consecutive elements still make whole 128-byte reads."""
    if len(global_size) == 1:
        tiles = ((MAX_LOCAL,),)
    else:
        tiles = tiles or (NESTED_LOCAL + (1,) * (len(global_size) - len(NESTED_LOCAL)),)

    def rounded(tile) -> tuple:
        return tuple(sympy.Integer(l) * sympy.ceiling(g / l) if l > 1 else g for g, l in zip(global_size, tile))

    def padded(tile) -> sympy.Expr:
        return sympy.Mul(*rounded(tile))

    # the first tile that pads no more than every one after it (a Piecewise takes the first case
    # that holds): the least padded, the first of equals
    cases = [(tile, sympy.And(*(padded(tile) <= padded(other) for other in tiles[j + 1:])))
             for j, tile in enumerate(tiles)]

    def launch_time(values) -> sympy.Expr:
        return sympy.Piecewise(*((value, cond) for value, (_, cond) in zip(values[:-1], cases)), (values[-1], True))

    if len(tiles) == 1:
        return rounded(tiles[0]), tuple(sympy.Integer(l) for l in tiles[0])
    return (tuple(launch_time([rounded(t)[d] for t in tiles]) for d in range(len(global_size))),
            tuple(launch_time([sympy.Integer(t[d]) for t in tiles]) for d in range(len(global_size))))


def _strategy_comment(notes: tuple[str, ...], launches: list) -> str:
    """The strategy chosen and why, and each launch's NDRange, as a comment."""
    def sizes(dims) -> str:
        return "×".join(str(d) for d in dims)

    lines = ["Strategy:", *(f"- {note}" for note in notes), "Launches (global size, work-group size):",
             *(f"- {launch.kernel}: {sizes(launch.global_size)}, "
               f"{sizes(launch.local_size) if launch.local_size is not None else 'chosen by the runtime'}"
               + (f"; instead of {before.kernel} where its local arrays exceed the device's local memory"
                  if launch.fallback else "")
               + (f"; where {launch.when}" if launch.when is not None else "")
               for before, launch in zip([None, *launches], launches))]
    return "/* " + "\n * ".join(line.replace("*/", "* /") for line in lines) + " */\n"


def _variant(planned: OpenCLPlan, variant: OpenCLPlan, n: int, taken: set) -> tuple[OpenCLPlan, dict]:
    """``variant``, the ``n``-th plan of ``planned``'s kernel nested otherwise (``generate_opencl``),
    its OpenCL kernels named as ``planned``'s with ``_v<n>`` after the stem, and the names its
    buffers take in the artifact: their own, or where ``taken`` (which gets them) has it already,
    a fresh one.  The kernels' text keeps the buffers' own names: a launch passes the buffer."""
    stem = planned.symbol
    phases = tuple(dataclasses.replace(ph, name=f"{stem}_v{n}{ph.name[len(stem):]}") for ph in variant.kernels.phases)
    names = NameSupply(taken, separator="_v")
    renamed = {name: names.fresh(name) for name in variant.kernels.buffers}
    taken |= set(renamed.values())
    return dataclasses.replace(variant, kernels=dataclasses.replace(variant.kernels, phases=phases)), renamed


def strategy_comment(source: str) -> str:
    """The strategy comment of a kernel's OpenCL ``source`` (``_strategy_comment``), or ''."""
    start = source.find("/* Strategy:")
    return source[start:source.index("*/", start) + 3] if start >= 0 else ""


def generate_opencl(planned: OpenCLPlan, options: Options = Options(), notes: tuple[str, ...] = (),
                    variants: tuple = ()) -> OpenCLArtifact:
    """The OpenCL source, buffers and launches of the planned kernels; ``notes``: why the strategy
    is what it is (``fsmooth.auto_reductions``), the first comment of the source with the launches;
    ``variants``: ``(when, plan)`` pairs, plans of the same kernel nested otherwise, whose launches
    run where ``when`` (a condition on the sizes) holds, ``planned``'s where none does
    (``Launch.when``): their kernels follow ``planned``'s in the one program, named apart
    (``_variant``), and their buffers are the artifact's too, renamed where a name is taken."""
    k, outputs = planned.kernel, list(planned.outputs)
    otherwise = sympy.Not(sympy.Or(*(when for when, _ in variants))) if variants else None
    taken = set(planned.taken) | set(planned.kernels.buffers)
    variants = ((otherwise, planned, {}), *((when, *_variant(planned, v, n, taken)) for n, (when, v) in enumerate(variants, 1)))
    phases = [phase for _, v, _ in variants for phase in v.kernels.phases]
    params = {name for name, _, _ in k.params}
    symbols = {s.name for s in k.sizes}
    components = result_components(k.result, k.result_dims)
    status = next(name for name in ("status", "status_1", "status_2", "status_3") if name not in taken)
    texts, launches, interfaces, range_checks, fitting = [], [], [], [], {}
    foreign = called_foreign(node for phase in phases for part in (phase.body, phase.tail)
                             if part is not None for node in p.walk(part))
    clash = foreign_names(foreign) & {ph.name for ph in phases}
    if clash:
        raise CompileError(f"the kernel {k.name} would be the OpenCL kernel {sorted(clash)[0]}, the name of a "
                           "foreign function; rename the kernel")
    for when, variant, renamed in variants:
        failing = []  # the launches of this variant that can fail: those of another do not run
        for phase in variant.kernels.phases:
            # the parameters' and sizes' own names stay free for their C names (emit's Namer), unless
            # a foreign function has the name
            reserved = (taken - params - symbols) | {ph.name for ph in phases} | foreign_names(foreign)
            emitter = _OpenCLEmitter(variant.kernel, planned.symbol, frozenset(reserved), options, slot=len(launches))
            text, args = emitter.kernel(phase, variant.kernels.buffers, outputs, status, tuple(failing))
            if emitter.may_fail:
                failing.append(len(launches))
            texts.append(text)
            global_size = tuple(sympy.sympify(n) for n in phase.global_size)
            if phase.local_size is None:
                global_size, local = _work_groups(global_size, phase.tiles)
            else:
                local = tuple(sympy.sympify(n) for n in phase.local_size)
            launches.append(Launch(phase.name, tuple(renamed.get(arg, arg) for arg in args), global_size, local,
                                   phase.fallback, when))
            interface = emitter.interface()
            range_checks += interface.range_checks
            fitting.update(dict.fromkeys(emitter.fitting()))
        interfaces.append(interface)
    # the call is refused where any variant's would be (the variants read the same elements, so
    # their constraints are the same but for their order)
    first, *others = interfaces
    interface = dataclasses.replace(first, constraints=first.constraints + tuple(dict.fromkeys(
        c for i in others for c in i.constraints if c not in first.constraints)))
    interface = dataclasses.replace(interface, range_checks=tuple(range_checks))
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
    for _, variant, renamed in variants:
        for name, buf in variant.kernels.buffers.items():
            buffers[renamed.get(name, name)] = Buffer(renamed.get(name, name), buf.role, buf.elem, sympy.sympify(buf.count))
    buffers[status] = Buffer(status, "status", STATUS_ELEM, sympy.Integer(len(launches)))
    header = (f"/* Generated by fsmooth from the kernel '{k.name}': {len(launches)} OpenCL kernel(s), "
              f"run in order (see fsmooth/opencl_artifact.py). */\n")
    notes = (*notes, *scan_notes(phase.body for phase in phases), *planned.kernels.notes,
             *dict.fromkeys(note for _, v, _ in variants[1:] for note in v.kernels.notes if note not in planned.kernels.notes))
    if notes:
        header += _strategy_comment(notes, launches)
    if foreign:  # fsmooth.foreign: their sources come last, so nothing in them changes the generated code
        body = "\n".join(f.prototype(opencl=True) for f in foreign) + "\n\n" + body + "".join(
            f"\n\n/* ---- foreign function {f.name} */\n{f.opencl_source.strip()}" for f in foreign)
    one_launch = any(phase.last is not None for phase in phases)
    extensions = (LOOKBACK_EXTENSION,) if any(b.role == "lookback" for b in buffers.values()) else ()
    source = header + prelude(fp64, one_launch, bool(extensions)) + "\n" + body + "\n"
    return OpenCLArtifact(source, buffers, tuple(launches), interface, fp64, needs_atomics=one_launch,
                          extensions=extensions, fitting=tuple(fitting))
