"""Imperative DPIA → C99 (DPIA paper Fig. 6), per the ABI of ``fsmooth.artifact``.

The statements, expressions and names come from ``dpia.emit``, shared with the OpenCL back end;
this module adds what is C's own: the four exported functions of each kernel and their size
checks, named ``<module>_<kernel>`` (``exported_name``), calls of kernels too large to inline, regions from the heap, and OpenMP.

Run-time checks give a status (``fsmooth.artifact.STATUS``): 1 for a checked read out of range,
2 for an integer ``//``/``%`` by zero, 3 for violated size constraints, 4 for a failed ``malloc``,
5 for ``int(x)`` of a NaN, an infinity or a float outside int64, 6 for a size that overflows int64
(a result dim or the scratch size, which ``K_check_sizes`` computes with checked arithmetic, or a
loop count or a region's bytes computed in the body: ``KernelEmitter.checked_size``); a size
divided by zero is status 2, found by ``K_check_sizes`` before anything runs.
Every failure takes one path (``FailureExit``): set the status variable of its scope and ``goto``
that scope's exit label, which frees what the scope allocated (``malloc`` variant) and passes the
status on to the enclosing exit; the function's own exit returns it.  An OpenMP loop body may not
be left early, so a parallel iteration has its own status variable and exit at the end of the
iteration, after which the status is written atomically to the shared one and checked after the
loop.  The same code therefore serves the sequential and the parallel build.

Allocation (``Options.allocation``): ``arena`` puts every region at its static offset in the
caller's scratch; ``malloc`` allocates each region at scope entry and frees it at scope exit,
``leaky`` never frees, ``gc`` takes it from Boehm's collector; the last three need no scratch, so
their ``K_scratch_bytes`` is 0.  ``Options.parallel`` puts ``#pragma omp parallel for`` on each
``parfor`` the DPS stage marked parallel (the outermost loops, ``fsmooth.dps.parallel``) whose
threads share no storage (``_iterations_independent``), on at most the kernel's thread count of
threads (its last parameter), each using the slice of the scratch its number selects; a
parallel reduction (``ParallelReduce``) is a ``#pragma omp parallel`` region in which each thread
folds its static chunk into a partial, the partials combined in thread order after it
(``reduction_loop``; never OpenMP's ``reduction`` clause, whose order is unspecified).
"""
from __future__ import annotations

import re
from contextlib import contextmanager

import sympy

from fsmooth import prims
from fsmooth.artifact import CArtifact, result_components
from fsmooth.dps.parallel import THREAD, partial_stride
from fsmooth.dps.ranges import Ranges
from fsmooth.errors import CompileError
from fsmooth.foreign import ForeignUse, called_foreign, foreign_names
from fsmooth.options import Options
from fsmooth.shape.size_printer import C_CHECKED, print_condition
from fsmooth.shape.sizes import fraction, size_symbol
from fsmooth.types import BYTES, C_TYPE, ArrayT, element_scalar

from . import phrases as p
from .emit import (STATUS_OUT_OF_MEMORY, FailureExit, KernelEmitter, c_literal, c_type, exported_name, indent,
                   is_reserved, strip_parentheses)
from .index_paths import BufferVariable, ScalarVariable, index_symbol

# What a variant adds to the build: compiler flags and libraries (fsmooth.cache uses them).
OPENMP = (("-fopenmp",), ("gomp",))
THREAD_C = "fs_thread"  # the C of dps.parallel.THREAD: fs_ names are the runtime's, Namer gives none
BOEHM_GC = ((), ("gc",))
# A build whose element is arithmetic on reads (add3's a[i] + b[i] + c[i]) of a length known at run
# time: gcc -O3 vectorises its loop but runs one vector per trip, so a short array (add3's 100
# doubles: 13 trips of 8 lanes) spends as many instructions on the loop's count, compare and
# branch as on its additions.  Unrolled 4 times (what Numba's LLVM does to the same loop), the
# vector loop does 4 vectors a trip: callgrind counts 27 % fewer instructions for add3's loop
# (AVX2).  Only such loops: -funroll-loops would unroll every loop, the folds with branches and
# calls too, for code size and no fewer instructions; a loop of a constant count gcc unrolls fully
# on its own.
UNROLL = "#pragma GCC unroll 4"
ARITHMETIC = (p.ScalarOp, p.Idx, p.Ident, p.Literal, p.NatExp, p.Proj)


def elementwise(body: p.Phrase) -> bool:
    """Whether a build's element is one assignment of arithmetic on reads: no loop, branch,
    call or local array, so that its loop is gcc's to vectorise whole."""
    return isinstance(body, p.Assign) and all(isinstance(t, ARITHMETIC) for t in p.walk(body.exp))


# Options.fastmath: reassociation, so that a floating-point reduction vectorises, and a multiply
# and an add contracted into one fused multiply-add (rounded once: what g++ does by default, and
# ADBench's manual C++ with it; -std=c99 alone contracts nothing).  Not -ffast-math:
# -ffinite-math-only would let the compiler assume no NaN or inf (isnan folded to false), so NaN
# and inf stay IEEE and only the order of additions and multiplications and their rounding (and
# the sign of a zero result) may change.
FASTMATH = (("-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-ffp-contract=fast"), ())


class CKernelEmitter(KernelEmitter):
    """One kernel as C functions: the shared emitter with calls of other kernels, regions from
    the heap and OpenMP loops."""

    def __init__(self, k: p.ImperativeKernel, symbols: dict, globals_: frozenset, options: Options,
                 scratch_free: frozenset):
        super().__init__(k, symbols[k.name], globals_, options)
        self.symbols = symbols  # kernel name -> exported C name, for calls
        self.scratch_free = scratch_free  # the kernels that use no scratch: safe in a parallel loop
        self.in_parallel = False

    # -- commands
    def comm(self, c: p.Phrase, env: dict, ranges: Ranges) -> list[str]:
        match c:
            case p.CallCmd(fn, out, args, _, scratch_offset, check_sizes) if isinstance(fn, str):
                # the checking entry point where the DPS stage could not prove the callee's sizes
                callee = self.symbols[fn]
                return self._call(callee if check_sizes else f"{callee}_body", out, args, scratch_offset, env, ranges)
        return super().comm(c, env, ranges)

    def region(self, cname: str, data: p.Data, offset, body: p.Phrase, env: dict, ranges: Ranges) -> list[str]:
        if self.options.allocation == "arena":
            return super().region(cname, data, offset, body, env, ranges)
        return self._heap_region(cname, data, body, env, ranges)

    def parfor_loop(self, index, n, body, env, ranges, scope, parallel: bool = False) -> list[str]:
        if parallel and self.options.parallel and not self.in_parallel and self._iterations_independent(body):
            return self._parallel_loop(index, n, body, env, ranges, scope)
        pragmas = [UNROLL] if elementwise(body) and not sympy.sympify(n).is_number else []
        return self.loop(index, n, body, env, ranges, scope=scope, pragmas=pragmas)

    def _parallel_loop(self, index, n, body, env, ranges, scope) -> list[str]:
        """``#pragma omp parallel for`` on at most the kernel's thread count of threads, scheduled
        statically, each thread's number in ``fs_thread`` (the slice of the scratch its iterations
        use, ``dps.parallel``); one iteration runs without a team.  A failing iteration records
        its status in its own variable and skips to its end; the first failure any iteration
        reports wins."""
        count: list = []
        bound = strip_parentheses(self.checked_size(n, ranges, count))
        threads_size = self.rename(size_symbol(self.k.threads), env)
        threads = self.cint(threads_size, ranges)
        with self._thread_failures(self.fresh_number()) as (shared, own):
            i = self.namer.fresh(index)
            inner_ranges = ranges.inside(index_symbol(i), n - 1).inside(index_symbol(THREAD_C), threads_size - 1)
            inner_env = {**env, index: ScalarVariable(i), THREAD.name: ScalarVariable(THREAD_C)}
            lines = self.comm(body, scope(inner_env), inner_ranges)
        if any(THREAD_C in line for line in lines):
            lines = [f"const int64_t {THREAD_C} = omp_get_thread_num();"] + lines
        lines = _own_status(own) + lines + _thread_failure(own, shared)
        return (count + [f"#pragma omp parallel for num_threads({threads}) schedule(static) if({bound} > 1)",
                         f"for (int64_t {i} = 0; {i} < {strip_parentheses(bound)}; {i}++) {{"]
                + indent(lines) + ["}"] + _team_failure(own, shared))

    @contextmanager
    def _thread_failures(self, k: int):
        """(shared exit, the thread's own): inside, a failing iteration records its status in
        the thread's own variable and skips to the end of its share of the iterations."""
        shared, self.exit = self.exit, FailureExit(f"fs_next{k}", f"fs_status{k}")
        own, self.in_parallel = self.exit, True
        try:
            yield shared, own
        finally:
            self.exit, self.in_parallel = shared, False

    def reduction_loop(self, c: p.ParallelReduce, env: dict, ranges: Ranges) -> list[str]:
        """A reduction on at most the kernel's thread count of threads (``dps.parallel``): thread
        t of a team of T folds the iterations OpenMP's static schedule would deal it (one chunk,
        the first ``n % T`` chunks one longer) into C variables of its own that start at the
        identities, and writes them to element t of the partials; after the team, the
        accumulator, which holds the init, takes the partials in thread order.  A body that folds
        a chunk (``ParallelReduce.chunk``, the jam) runs once for the thread's.  One iteration
        runs without a team.  A failing iteration records its status in the thread's own variable
        and ends the thread's chunk; the first failure any thread reports wins, as in a parallel
        build (``_parallel_loop``)."""
        if not (self.options.parallel and not self.in_parallel and self._iterations_independent(c.body)):
            return super().reduction_loop(c, env, ranges)
        k = self.fresh_number()
        trips, team, size, chunk, longer, first, end, t, length = (
            f"fs_{name}{k}" for name in ("trips", "team", "threads", "chunk", "longer", "first", "end", "t", "length"))
        checks: list = []
        n = self.index(c.count, env, ranges, checks)
        checks.append(f"const int64_t {trips} = {strip_parentheses(self.checked_size(n, ranges, checks))};")
        leaves = p.record_leaves(p.data_of(c.accumulator))
        accumulators = [p.proj_path(c.accumulator, path) for path, _ in leaves]
        totals = [self.lvalue(a, env, ranges, checks) for a in accumulators]
        partials = [self.resolve(partial, env, ranges, checks)[0].cname for partial in c.partials]
        strides = [partial_stride(monoid.ty) for monoid in c.monoids]
        threads_size = self.rename(size_symbol(self.k.threads), env)
        with self._thread_failures(k) as (shared, own):
            mine = [self.namer.fresh(a.name) for a in accumulators]  # the thread's accumulators
            inner_env = {**env, **{a.name: ScalarVariable(m) for a, m in zip(accumulators, mine)},
                         THREAD.name: ScalarVariable(THREAD_C)}
            if c.chunk is None:
                i = self.namer.fresh(c.index)
                inner_ranges = ranges.inside(index_symbol(i), n - 1).inside(index_symbol(THREAD_C), threads_size - 1)
                body = self.comm(c.body, {**inner_env, c.index: ScalarVariable(i)}, inner_ranges)
                fold = [f"for (int64_t {i} = {first}; {i} < {end}; {i}++) {{"] + indent(body) + ["}"]
            else:  # the chunk first .. end - 1, of at most n iterations
                inner_ranges = (ranges.inside(index_symbol(first), n).inside(index_symbol(length), n)
                                .inside(index_symbol(THREAD_C), threads_size - 1))
                fold = [f"const int64_t {length} = {end} - {first};"] + self.comm(
                    c.body, {**inner_env, c.index: ScalarVariable(first), c.chunk: ScalarVariable(length)}, inner_ranges)
        lines = [f"const int64_t {THREAD_C} = omp_get_thread_num();",
                 f"const int64_t {size} = omp_get_num_threads();",
                 f"const int64_t {chunk} = {trips} / {size}, {longer} = {trips} % {size};",
                 f"const int64_t {first} = {THREAD_C} * {chunk} + ({THREAD_C} < {longer} ? {THREAD_C} : {longer});",
                 f"const int64_t {end} = {first} + {chunk} + ({THREAD_C} < {longer});"]
        lines += [f"{c_type(leaf)} {m} = {c_literal(monoid.identity, monoid.ty)};"
                  for (_, leaf), m, monoid in zip(leaves, mine, c.monoids)]
        lines += _own_status(own)
        lines += fold
        lines += _thread_failure(own, shared)
        lines += [f"{partial}[{self.cint(stride * index_symbol(THREAD_C), inner_ranges)}] = {m};"
                  for partial, m, stride in zip(partials, mine, strides)]
        lines += [f"if ({THREAD_C} == 0) {team} = {size};"]
        loop = checks + [f"int64_t {team} = 1;",
                         f"#pragma omp parallel num_threads({self.cint(threads_size, ranges)}) if({trips} > 1)",
                         "{"] + indent(lines) + ["}"] + _team_failure(own, shared)
        combine = []
        for total, partial, stride, monoid, (_, leaf) in zip(totals, partials, strides, c.monoids, leaves):
            place = f"{partial}[{self.cint(stride * index_symbol(t), ranges)}]"
            combine.append(f"{total} = {prims.PRIMS[monoid.op].c.format(total, place, t=prims.c_suffix(leaf.scalar))};")
        self.reads.update(dict.fromkeys(totals, True))
        return loop + [f"for (int64_t {t} = 0; {t} < {team}; {t}++) {{"] + indent(combine) + ["}"]

    def _iterations_independent(self, body: p.Phrase) -> bool:
        """No two threads running a parfor with this body share storage.  DPIA's parfor bodies
        are passive (each writes only its own element), so what remains is the scratch: in the
        arena variant a region or a callee's scratch inside the body sits at the same offset in
        every thread unless that offset depends on the thread's number (the DPS stage's
        per-thread slices).  Boehm's collector is not told about OpenMP threads: no allocation
        under gc."""
        for c in p.walk(body):
            match c:
                case p.New(_, _, _, offset) if offset is not None:
                    if self.options.allocation == "gc" or (self.options.allocation == "arena" and not _mentions(offset, THREAD.name)):
                        return False
                case p.CallCmd(fn, _, _, _, offset) | p.CallExp(fn, _, _, offset) if isinstance(fn, str):
                    if self.options.allocation == "gc" and fn not in self.scratch_free:
                        return False
                    if (self.options.allocation == "arena" and fn not in self.scratch_free
                            and not _mentions(offset, THREAD.name)):
                        return False
        return True

    def _heap_region(self, cname, data, body, env, ranges) -> list[str]:
        """A region from the heap for the scope of ``body``: freed on the way out (``malloc``),
        failures included, or never (``leaky``, ``gc``)."""
        t = c_type(data)
        lines: list = []
        nbytes = self.checked_size(BYTES[p.scalar_of(data)] * self.rename(p.elements(data), env), ranges, lines)
        allocate = {"malloc": "fs_malloc", "leaky": "fs_malloc", "gc": "fs_gc_malloc"}[self.options.allocation]
        lines += [f"{t} *{cname} = ({t} *){allocate}({strip_parentheses(nbytes)});",
                 f"if ({cname} == NULL) {self.exit.fail(STATUS_OUT_OF_MEMORY)}"]
        if self.options.allocation != "malloc":
            return lines + self.comm(body, env, ranges)
        outer, self.exit = self.exit, FailureExit(f"fs_free{self.fresh_number()}", self.exit.status)
        try:
            lines += self.comm(body, env, ranges)
        finally:
            inner, self.exit = self.exit, outer
        if not inner.used:
            return lines + [f"free({cname});"]
        outer.used = True
        return lines + [f"{inner.label}:", f"free({cname});", f"if ({inner.status} != 0) goto {outer.label};"]

    def _call(self, fn, out, args, scratch_offset, env, ranges) -> list[str]:
        checks: list = []
        texts = self.call_arguments(fn, out, args, env, ranges, checks)
        offset = self.cint(self.rename(scratch_offset, env), ranges)
        if self.options.allocation != "arena" or offset == "0":
            scratch = "scratch"  # a callee that allocates for itself ignores it
        else:
            scratch = f"(char *)scratch + {offset}"
        status, label = self.exit.status, self.exit.label
        self.exit.used = True
        return checks + [f"if (({status} = {fn}({', '.join([scratch] + texts)})) != 0) goto {label};"]

    # -- the four exported functions
    def size_params(self) -> str:
        return ", ".join(f"int64_t {self.size_names[s.name]}" for s in self.k.sizes) or "void"

    def size_args(self) -> str:
        return ", ".join(self.size_names[s.name] for s in self.k.sizes)

    def signature(self, restrict: bool, function: str | None = None) -> str:
        r = "restrict " if restrict else ""
        params = [f"void *{r}scratch"] + [f"{C_TYPE[element_scalar(ty)]} *{r}out{suffix}"
                                          for suffix, ty, _ in self.outputs]
        for name, ty, dims in self.k.params:
            cname = self.param_names[name]
            if isinstance(ty, ArrayT):
                params.append(f"const {C_TYPE[p.scalar_of(self.k.param_phrases[name].type.data)]} *{r}{cname}")
                params.extend(f"int64_t {self.dim_names[(name, j)]}" for j in range(len(dims)))
            else:
                params.append(f"{C_TYPE[ty]} {cname}")
        return f"int {function or self.symbol}({', '.join(params)})"

    def call_args(self) -> list[str]:
        names = ["scratch"] + [f"out{suffix}" for suffix, _, _ in self.outputs]
        for name, ty, dims in self.k.params:
            names.append(self.param_names[name])
            names.extend(self.dim_names[(name, j)] for j in range(len(dims)))
        return names

    def prototypes(self, restrict: bool) -> list[str]:
        k, sizes = self.symbol, self.size_params()
        shapes = [f"void {k}_shape{suffix}(int64_t *dims_out{', ' + sizes if sizes != 'void' else ''});"
                  for suffix, _, _ in self.outputs]
        return [f"{self.signature(restrict)};", *shapes,
                f"int64_t {k}_scratch_bytes({sizes});",
                f"int {k}_check_sizes({sizes});"]

    def definitions(self) -> str:
        k = self.k
        sizes = self.size_params()
        size_names = [self.size_names[s.name] for s in k.sizes]
        checks = size_checks([c.cond for c in k.constraints],
                             [d for _, _, dims in self.outputs for d in dims] + [self.scratch()],
                             lambda e: self.cint(e, Ranges(), C_CHECKED),
                             lambda c: print_condition(c, C_CHECKED, self.size_name))
        env = {name: (BufferVariable if isinstance(ty, ArrayT) else ScalarVariable)(self.param_names[name])
               for name, ty, _ in k.params}
        env.update({f"{k.dest}{suffix}": BufferVariable(f"out{suffix}") for suffix, _, _ in self.outputs})
        body = self.comm(k.body, env, self.kernel_ranges())
        body = self.before_the_body(body)
        if self.exit.used:
            body = [f"int {self.exit.status} = 0;"] + body + [f"{self.exit.label}:", f"return {self.exit.status};"]
        else:
            body = body + ["return 0;"]
        params = ["scratch"] + [self.param_names[n] for n, _, _ in k.params] + list(self.dim_names.values())
        out = []
        for suffix, _, dims in self.outputs:
            shape = [f"dims_out[{j}] = {self.cint(d, Ranges(), C_CHECKED)};" for j, d in enumerate(dims)]
            out.append(f"void {self.symbol}_shape{suffix}(int64_t *dims_out{', ' + sizes if sizes != 'void' else ''}) {{")
            out += indent(unused_parameters(["dims_out"] + size_names, shape) + shape) + ["}", ""]
        out.append(f"int64_t {self.symbol}_scratch_bytes({sizes}) {{")
        scratch = [f"return {strip_parentheses(self.cint(self.scratch(), Ranges(), C_CHECKED))};"]
        out += indent(unused_parameters(size_names, scratch) + scratch) + ["}", ""]
        out.append(f"int {self.symbol}_check_sizes({sizes}) {{")
        out += indent(unused_parameters(size_names, checks) + checks + ["return 0;"]) + ["}", ""]
        out.append(f"static {self.signature(True, f'{self.symbol}_body')} {{")
        out += indent(unused_parameters(params, body) + body) + ["}", ""]
        out.append(f"{self.signature(True)} {{")
        gc_init = ["fs_gc_init();"] if self.options.allocation == "gc" else []
        out += indent(gc_init + [f"int fs_failed = {self.symbol}_check_sizes({self.size_args()});",
                                 f"if (fs_failed != 0) return fs_size_status(fs_failed, {len(k.constraints)});",
                                 f"return {self.symbol}_body({', '.join(self.call_args())});"])
        out.append("}")
        return "\n".join(out)


def size_checks(constraints, sized, print_size_checked, print_condition_checked) -> list[str]:
    """The body of ``K_check_sizes`` but its ``return 0``: 1 + j where the constraint j fails;
    two more codes: a size of ``sized`` that overflows int64 (#constraints + 1), and (first, as
    the reference computes the quotient before it uses it) one whose divisor is zero
    (#constraints + 2).  The printers write a size and a condition in checked C (``C_CHECKED``)."""
    checks = [f"if (!{print_condition_checked(c)}) return {j + 1};" for j, c in enumerate(constraints)]
    sized = dict.fromkeys(sympy.sympify(e) for e in sized)
    divisors = dict.fromkeys(d for e in list(constraints) + list(sized) for d in size_divisors(e))
    checks = [f"if (fs_size_eq({print_size_checked(d)}, 0)) return {len(constraints) + 2};"
              for d in divisors] + checks
    return checks + [f"if ({print_size_checked(e)} == FS_SIZE_POISON) return {len(constraints) + 1};"
                     for e in sized if not e.is_Integer]


def size_divisors(e) -> list:
    """The divisors of the quotients and remainders of a size expression or condition that are
    not constants: each may be zero at a call.  Of a ``Piecewise``, only its conditions': a value
    is computed only where its condition holds (``OpenCLArtifact.fitting`` guards its quotients
    so)."""
    found = []

    def visit(sub):
        match sub:
            case sympy.Piecewise():
                for _, cond in sub.args:
                    visit(cond)
                return
            case sympy.floor() | sympy.ceiling():
                found.append(fraction(sub.args[0])[1])
            case sympy.Mod():
                found.append(sub.args[1])
            case sympy.Expr() if sub.is_Add or sub.is_Mul:
                found.append(fraction(sub)[1])
        for arg in sub.args:
            visit(arg)

    visit(sympy.sympify(e))
    return [d for d in found if not d.is_Integer]


def unused_parameters(names, lines) -> list[str]:
    """``(void)p;`` for each parameter in ``names`` that the function body ``lines`` never mentions:
    what -Wunused-parameter asks, and nothing for the parameters that are used."""
    text = "\n".join(lines)
    return [f"(void){name};" for name in names if not re.search(rf"\b{re.escape(name)}\b", text)]


def _mentions(e, name: str) -> bool:
    return any(s.name == name for s in sympy.sympify(e).free_symbols)


def c_functions(symbol: str, k: p.ImperativeKernel) -> set:
    """The C functions of the kernel exported as ``symbol``."""
    shapes = {f"{symbol}_shape{suffix}" for suffix, _, _ in result_components(k.result, k.result_dims)}
    return {symbol, *shapes, f"{symbol}_scratch_bytes", f"{symbol}_check_sizes", f"{symbol}_body"}


def exported_symbols(prog: p.ImperativeProgram, module: str, foreign: frozenset = frozenset()) -> dict:
    """Each kernel's exported C name (``exported_name``), checked to be a name no other function of
    the translation unit has (the foreign functions' among them) and that no macro can expand."""
    symbols, functions = {}, set(foreign)
    for name, k in prog.kernels.items():
        symbol = exported_name(module, name)
        exported = c_functions(symbol, k)
        reserved = sorted(filter(is_reserved, exported))
        if reserved:
            raise CompileError(f"the kernel '{name}' of the module '{module}' would be the C function {reserved[0]}, "
                               "a name reserved to C; rename the kernel or the module")
        clash = exported & functions
        if clash:
            raise CompileError(f"the kernel name '{name}' clashes with the C function {sorted(clash)[0]}; "
                               "rename the kernel")
        symbols[name] = symbol
        functions |= exported
    return symbols


# The collector for the gc variant; GC_INIT runs once, at the first call of an exported kernel.
# Arrays hold no pointers, so the collector need neither scan nor clear them (the _ATOMIC form).
_GC_SUPPORT = """#include <gc.h>

static void fs_gc_init(void) {
    static bool fs_gc_ready = false;
    if (!fs_gc_ready) {
        GC_INIT();
        fs_gc_ready = true;
    }
}

static void *fs_gc_malloc(int64_t bytes) {
    return GC_MALLOC_ATOMIC(bytes > 0 ? (size_t)bytes : 1);
}"""


def generate_c(prog: p.ImperativeProgram, module: str, options: Options = Options()) -> CArtifact:
    """The C of ``prog``, its kernels exported as ``<module>_<kernel>``."""
    foreign = called_foreign(node for k in prog.kernels.values() for node in p.walk(k.body))
    foreign_cnames = foreign_names(foreign)
    symbols = exported_symbols(prog, module, foreign_cnames)
    globals_ = frozenset().union(foreign_cnames,
                                 *(c_functions(symbols[name], k) for name, k in prog.kernels.items()))
    scratch_free = frozenset(name for name, k in prog.kernels.items() if sympy.sympify(k.scratch) == 0)
    emitters = [CKernelEmitter(k, symbols, globals_, options, scratch_free) for k in prog.kernels.values()]
    header = ["/* Generated by fsmooth from the kernel '" + prog.entry + "' and the kernels it calls.",
              f" * Allocation: {options.allocation}{'; OpenMP' if options.parallel else ''}.",
              " * ABI: see fsmooth/artifact.py.  Status codes: 0 ok, 1 index out of range,",
              " * 2 integer division by zero, 3 size constraint violated, 4 out of memory,",
              " * 5 integer conversion out of range (int() of a NaN, an infinity or a float outside int64),",
              " * 6 integer overflows int64 (a size or the program's Index/Card arithmetic). */",
              '#include "fsmooth_rt.h"']
    header += ["#include <omp.h>"] if options.parallel else []
    header += ["", _GC_SUPPORT] if options.allocation == "gc" else []
    if foreign:  # fsmooth.foreign: their sources come last, so nothing in them changes the generated code
        header += ["", "/* ---- foreign functions (their C sources are at the end) */"]
        header += [line for f in foreign for line in f.include()] + [f.prototype() for f in foreign]
    header += ["", "/* ---- exported functions */"]
    for e in emitters:
        header += e.prototypes(restrict=True)
    header += ["", "/* ---- internal: the kernels without their size checks */"]
    header += [f"static {e.signature(True, e.symbol + '_body')};" for e in emitters]
    parts = ["\n".join(header)]
    for e in emitters:
        parts.append(f"/* ---- {e.k.name} */\n{e.definitions()}")
    parts += [f"/* ---- foreign function {f.name} */\n{f.c_source.strip()}" for f in foreign if f.c_source is not None]
    source = "\n\n".join(parts) + "\n"
    cdef = "\n".join(line for e in emitters for line in e.prototypes(restrict=False)) + "\n"
    if options.parallel:  # the Python runtime passes OpenMP's thread count (fsmooth.runtime)
        cdef += "int omp_get_max_threads(void);\n"
    flags, libraries = [], []
    for wanted, (more_flags, more_libraries) in ((options.parallel, OPENMP), (options.allocation == "gc", BOEHM_GC),
                                                  (options.fastmath, FASTMATH)):
        if wanted:
            flags += more_flags
            libraries += more_libraries
    uses = []
    for f in foreign:
        more_flags, more_libraries = f.build_needs()
        flags += more_flags
        libraries += more_libraries
        uses.append(ForeignUse(f.name, f.prototype(), f.header_path(), more_libraries))
    uses = tuple(uses)
    return CArtifact(source, cdef, {e.k.name: e.interface() for e in emitters}, tuple(flags), tuple(libraries), uses)


def _own_status(own: FailureExit) -> list[str]:
    return [f"int {own.status} = 0;"] if own.used else []


def _thread_failure(own: FailureExit, shared: FailureExit) -> list[str]:
    """The end of a thread's share: its failure, if any, becomes the team's (the first to be
    written wins)."""
    if not own.used:
        return []
    return [f"{own.label}:", f"if ({own.status} != 0) {{", "#pragma omp atomic write",
            f"    {shared.status} = {own.status};", "}"]


def _team_failure(own: FailureExit, shared: FailureExit) -> list[str]:
    """After the team: a failure of any thread leaves through the enclosing exit."""
    if not own.used:
        return []
    shared.used = True
    return [f"if ({shared.status} != 0) goto {shared.label};"]
