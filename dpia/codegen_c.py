"""Imperative DPIA → C99 (DPIA paper Fig. 6), per the ABI of ``fsmooth.artifact``.

Commands become statements, acceptors l-values and expressions r-values; identifiers resolve
through the environment η to C names, and index paths to one offset into a flat buffer
(``dpia.index``), simplified with the ranges of the enclosing loops.  Every binder gets its own C
name (``Namer``), so ``new`` needs no block: C99 declarations go where the variable starts.

Run-time checks give a status (``fsmooth.artifact.STATUS``): 1 for a checked read out of range,
2 for an integer ``//``/``%`` by zero, 3 for violated size constraints, 4 for a failed ``malloc``.
Every failure takes one path (``_Exit``): set the status variable of its scope and ``goto`` that
scope's exit label, which frees what the scope allocated (``malloc`` variant) and passes the
status on to the enclosing exit; the function's own exit returns it.  An OpenMP loop body may not
be left early, so a parallel iteration has its own status variable and exit at the end of the
iteration, after which the status is written atomically to the shared one and checked after the
loop.  The same code therefore serves the sequential and the parallel build.

Allocation (``Options.allocation``): ``arena`` puts every region at its static offset in the
caller's scratch; ``malloc`` allocates each region at scope entry and frees it at scope exit,
``leaky`` never frees, ``gc`` takes it from Boehm's collector; the last three need no scratch, so
their ``K_scratch_bytes`` is 0.  ``Options.parallel`` puts ``#pragma omp parallel for`` on each
outermost ``parfor`` whose iterations share no storage (``_iterations_independent``).
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass

import sympy

from fsmooth import prims
from fsmooth.artifact import CArtifact, Constraint, KernelInterface, SizeSource
from fsmooth.errors import CompileError
from fsmooth.options import Options
from fsmooth.types import BYTES, C_TYPE, ArrayT, Card, Index, Scalar

from . import phrases as p
from .index import (NonnegativeMod, NonnegativeQuotient, Ranges, element_offset, guard, in_range, positive,
                    simplify_index, truncating_divisions)

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary
""".split())
# Object-like macros and typedefs that the runtime header's includes bring into scope.
HEADER_NAMES = frozenset("""
bool true false NULL NAN INFINITY HUGE_VAL HUGE_VALF HUGE_VALL EOF errno math_errhandling
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t intmax_t
uintmax_t size_t ptrdiff_t float_t double_t malloc free
""".split())
_LIMIT_MACRO = re.compile(r"^U?INT\w*_(MIN|MAX|C)$|^(SIZE|PTRDIFF|SIG_ATOMIC|WCHAR|WINT)_\w+$|^FP_\w+$|^MATH_\w+$")
# The exported kernels' own names are global too: the names a kernel may not have.
_MATH_FUNCTIONS = frozenset("""
acos asin atan atan2 cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 fabs fdim floor fma fmax
fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 log1p log2 logb lrint lround
modf nan nearbyint nextafter nexttoward pow remainder remquo rint round scalbln scalbn sin sinh
sqrt tan tanh tgamma trunc isnan isinf isfinite signbit fpclassify isnormal main
malloc calloc realloc free abort exit atexit getenv system qsort bsearch labs llabs div ldiv lldiv
atoi atol atoll atof strtod strtof strtol strtoll strtoul strtoull rand srand
""".split())

STATUS_OUT_OF_RANGE = 1
STATUS_DIVISION_BY_ZERO = 2
STATUS_SIZES = 3
STATUS_OUT_OF_MEMORY = 4

# What a variant adds to the build: compiler flags and libraries (fsmooth.cache uses them).
OPENMP = (("-fopenmp",), ("gomp",))
BOEHM_GC = ((), ("gc",))


def _reserved(name: str) -> bool:
    return (name in C_KEYWORDS or name in HEADER_NAMES or name.startswith(("fs_", "GC_"))
            or name.startswith("__") or re.match(r"^_[A-Z]", name) is not None
            or _LIMIT_MACRO.match(name) is not None)


class Namer:
    """Unique C identifiers for the names of one C function."""

    def __init__(self, taken=()):
        self.used = set(taken)

    def fresh(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
        if base[0].isdigit():
            base = "v" + base
        candidate, n = base, 0
        while candidate in self.used or _reserved(candidate):
            n += 1
            candidate = f"{base}_{n}"
        self.used.add(candidate)
        return candidate


# ----------------------------------------------------------------------------- sizes as C


def c_int(e, name_of) -> str:
    """An integer sympy expression as exact int64 C.  ``name_of(symbol)`` gives C names."""
    e = sympy.sympify(e)
    num, den = sympy.fraction(sympy.together(e))
    if den == 1:
        return _c(e, name_of)
    if den.is_Integer and den > 0:
        # the size is an integer, so num is a multiple of den: truncation is exact.
        return f"({_c(sympy.expand(num), name_of)} / {den})"
    return f"fs_floordiv_i64({_c(num, name_of)}, {_c(den, name_of)})"


def _c(e, name_of) -> str:
    match e:
        case sympy.Integer():
            return str(int(e)) if abs(int(e)) < 2**31 else f"INT64_C({int(e)})"
        case sympy.Symbol():
            return name_of(e)
        case sympy.Add():
            terms = sorted(e.args, key=lambda t: t.could_extract_minus_sign())
            text = _c(terms[0], name_of)
            for t in terms[1:]:
                text += f" - {_c(-t, name_of)}" if t.could_extract_minus_sign() else f" + {_c(t, name_of)}"
            return f"({text})"
        case sympy.Mul():
            coeff, rest = e.as_coeff_Mul()
            if coeff == -1:
                return f"(-{_c(rest, name_of)})"
            return f"({' * '.join(_c(f, name_of) for f in e.args)})"
        case sympy.Pow() if e.exp.is_Integer and e.exp > 0:
            return f"({' * '.join([_c(e.base, name_of)] * int(e.exp))})"
        case sympy.floor():
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return f"fs_floordiv_i64({c_int(num, name_of)}, {c_int(den, name_of)})"
        case sympy.ceiling():
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return f"(-fs_floordiv_i64({c_int(-num, name_of)}, {c_int(den, name_of)}))"
        case sympy.Mod():
            return f"fs_mod_i64({c_int(e.args[0], name_of)}, {c_int(e.args[1], name_of)})"
        case NonnegativeMod() | NonnegativeQuotient():
            op = "%" if isinstance(e, NonnegativeMod) else "/"
            return f"({c_int(e.args[0], name_of)} {op} {c_int(e.args[1], name_of)})"
        case sympy.Max() | sympy.Min():
            fn = "fs_max_i64" if isinstance(e, sympy.Max) else "fs_min_i64"
            text = c_int(e.args[0], name_of)
            for a in e.args[1:]:
                text = f"{fn}({text}, {c_int(a, name_of)})"
            return text
    raise CompileError(f"cannot express the size {e} in C")


_RELATIONS = {sympy.GreaterThan: ">=", sympy.StrictGreaterThan: ">", sympy.LessThan: "<=",
              sympy.StrictLessThan: "<", sympy.Equality: "==", sympy.Unequality: "!="}


def c_condition(cond, name_of) -> str:
    cond = sympy.sympify(cond)
    if cond is sympy.true:
        return "1"
    if cond is sympy.false:
        return "0"
    match cond:
        case sympy.And():
            return "(" + " && ".join(c_condition(a, name_of) for a in cond.args) + ")"
        case sympy.Or():
            return "(" + " || ".join(c_condition(a, name_of) for a in cond.args) + ")"
        case sympy.Not():
            return f"(!{c_condition(cond.args[0], name_of)})"
    op = _RELATIONS.get(type(cond))
    if op is None:
        raise CompileError(f"cannot express the size constraint {cond} in C")
    return f"({c_int(cond.lhs, name_of)} {op} {c_int(cond.rhs, name_of)})"


# ----------------------------------------------------------------------------- C of phrases


@dataclass(frozen=True)
class _Scalar:
    cname: str


@dataclass(frozen=True)
class _Buffer:
    cname: str


@dataclass(frozen=True)
class _Alias:
    phrase: p.Phrase
    env: dict


@dataclass(frozen=True)
class _Value:
    """An integer let kept as its symbolic value (over C names), never stored."""

    expr: sympy.Expr


@dataclass
class _Exit:
    """Where a failure in the current scope goes: set ``status``, jump to ``label``.  The label
    is written only if some failure uses it (an unused label is a warning)."""

    label: str
    status: str
    used: bool = False

    def fail(self, code) -> str:
        self.used = True
        return f"{{ {self.status} = {code}; goto {self.label}; }}"


def _ctype(d: p.Data) -> str:
    match d:
        case p.IdxT():
            return "int64_t"
    return C_TYPE[p.scalar_of(d)]


def _suffix(d: p.Data) -> str:
    return "i64" if isinstance(d, p.IdxT) else prims.c_suffix(p.scalar_of(d))


def c_literal(value, s: Scalar) -> str:
    if isinstance(value, bool) or s.name == "Bool":
        return "true" if value else "false"
    if s in (Index, Card):
        return f"INT64_C({int(value)})"
    v = float(value)
    if v != v:
        text = "NAN"
    elif v in (float("inf"), float("-inf")):
        text = "INFINITY" if v > 0 else "(-INFINITY)"
    else:
        text = repr(v)
    return text if s.name == "Double" else f"((float){text})"


class _KernelEmitter:
    def __init__(self, k: p.ImperativeKernel, globals_: frozenset, options: Options, scratch_free: frozenset):
        self.k = k
        self.options = options
        self.scratch_free = scratch_free  # the kernels that use no scratch: safe in a parallel loop
        self.namer = Namer(globals_ | {"scratch", "out"})
        # fs_ names are the runtime's (Namer never gives one out): labels and status variables
        self.exit = _Exit("fs_exit", "fs_status")
        self.internal = itertools.count(1)
        self.in_parallel = False
        self.param_names = {name: self.namer.fresh(name) for name, _, _ in k.params}
        self.dim_names = {}
        for name, ty, dims in k.params:
            for j in range(len(dims)):
                self.dim_names[(name, j)] = self.namer.fresh(f"{self.param_names[name]}_d{j}")
        self.sources, self.size_names = self._size_sources()
        self.opaque: dict = {}
        self.reads: dict = {}

    # -- sizes
    def _size_sources(self):
        sources, names = [], {}
        for s in self.k.sizes:
            src = None
            for name, ty, dims in self.k.params:
                if isinstance(ty, ArrayT):
                    j = next((j for j, dim in enumerate(dims) if str(dim) == s.name), None)
                    if j is not None:
                        src = SizeSource(s.name, name, j)
                        names[s.name] = self.dim_names[(name, j)]
                        break
                elif name == s.name:
                    src = SizeSource(s.name, name, None)
                    names[s.name] = self.param_names[name]
                    break
            if src is None:
                raise CompileError(f"{self.k.name}: the size {s} comes from no parameter")
            sources.append(src)
        return tuple(sources), names

    def size_name(self, symbol) -> str:
        if symbol in self.opaque:
            return self.opaque[symbol]
        return self.size_names.get(symbol.name) or symbol.name

    def size_params(self) -> str:
        return ", ".join(f"int64_t {self.size_names[s.name]}" for s in self.k.sizes) or "void"

    def size_args(self) -> str:
        return ", ".join(self.size_names[s.name] for s in self.k.sizes)

    # -- symbols
    def rename(self, e, env: dict) -> sympy.Expr:
        """A DPS/DPIA size expression with its symbols replaced by C-named symbols."""
        e = sympy.sympify(e)
        table = {}
        for s in e.free_symbols:
            binding = env.get(s.name)
            if isinstance(binding, _Scalar):
                table[s] = _sym(binding.cname)
            elif s.name in self.size_names:
                table[s] = _sym(self.size_names[s.name])
            elif s not in self.opaque:
                raise CompileError(f"{self.k.name}: the size {s} is not in scope")
        return e.xreplace(table)

    def cint(self, e, ranges: Ranges) -> str:
        return c_int(truncating_divisions(simplify_index(e, ranges), ranges), self.size_name)

    # -- expressions and acceptors
    def resolve(self, ph: p.Phrase, offset, env: dict, ranges: Ranges, checks: list):
        """(binding, offset): the buffer or scalar ``ph`` denotes, Fig. 6's path flattened."""
        match ph:
            case p.Ident(name):
                binding = env[name]
                if isinstance(binding, _Alias):
                    return self.resolve(binding.phrase, offset, binding.env, ranges, checks)
                return binding, offset
            case p.Idx(arr, index, elem, length, checked):
                i = self.index(index, env, ranges, checks)
                if checked and not in_range(simplify_index(i, ranges), self.rename(length, env), ranges):
                    text = self.cint(i, ranges)
                    if not re.fullmatch(r"[A-Za-z_]\w*|-?\d+", text):
                        # evaluated once, for the test and for the read
                        name = self.namer.fresh("index")
                        checks.append(f"const int64_t {name} = {_strip(text)};")
                        i, text = _sym(name), name
                    bound = self.cint(self.rename(length, env), ranges)
                    checks.append(f"if (!(0 <= {text} && {text} < {bound})) {self.exit.fail(STATUS_OUT_OF_RANGE)}")
                return self.resolve(arr, element_offset(i, self.rename(p.elements(elem), env), offset), env,
                                    ranges, checks)
            case p.Shift(base, shift):
                return self.resolve(base, self.rename(shift, env) + offset, env, ranges, checks)
        raise AssertionError(f"not a location: {ph}")

    def index(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> sympy.Expr:
        match ph:
            case p.Ident(name) if isinstance(env.get(name), _Scalar):
                self.reads[env[name].cname] = True
                return _sym(env[name].cname)
            case p.Ident(name) if isinstance(env.get(name), _Value):
                return env[name].expr
            case p.Literal(value):
                return sympy.Integer(int(value))
            case p.NatExp(value):
                return self.rename(value, env)
            case p.ScalarOp("add" | "sub" | "mul" | "neg" | "min" | "max" as op, args) if _integral(p.data_of(ph)):
                xs = [self.index(a, env, ranges, checks) for a in args]
                return {"add": lambda: xs[0] + xs[1], "sub": lambda: xs[0] - xs[1],
                        "mul": lambda: xs[0] * xs[1], "neg": lambda: -xs[0],
                        "min": lambda: sympy.Min(*xs), "max": lambda: sympy.Max(*xs)}[op]()
            case p.ScalarOp("to_Index", (arg,)) if _integral(p.data_of(arg)):
                return self.index(arg, env, ranges, checks)
            case p.ScalarOp("floordiv" | "mod" as op, (num, den), _, nonzero) if _integral(p.data_of(num)):
                # Python's floor semantics are sympy's: kept symbolic, the loop ranges may
                # remove the division (dpia.index); the zero test stays unless they prove d ≥ 1.
                x, d = (self.index(a, env, ranges, checks) for a in (num, den))
                if not nonzero and not positive(d, ranges):
                    checks.append(f"if ({_strip(self.cint(d, ranges))} == 0) {self.exit.fail(STATUS_DIVISION_BY_ZERO)}")
                return sympy.floor(x / d) if op == "floordiv" else sympy.Mod(x, d)
        symbol = sympy.Dummy("opaque", integer=True)
        self.opaque[symbol] = f"({self.exp(ph, env, ranges, checks)})"
        return symbol

    def _guarded(self, cond: p.Phrase, env: dict, ranges: Ranges) -> Ranges:
        """The ranges inside ``if (e < b)``: e's upper bound b - 1, so that a guarded read
        ``a[e] if e < length(a) else ...`` needs no second, run-time check."""
        match cond:
            case p.ScalarOp("lt", (a, b)) if _integral(p.data_of(a)) and all(
                    self._is_size_arithmetic(x, env) for x in (a, b)):
                e, bound = (simplify_index(self.index(x, env, ranges, []), ranges) for x in (a, b))
                return {**ranges, **guard(e, bound - 1, ranges)}
        return ranges

    def _is_size_arithmetic(self, ph: p.Phrase, env: dict) -> bool:
        """Integer arithmetic that ``index`` keeps symbolic (no reads, no calls)."""
        match ph:
            case p.Ident(name):
                return isinstance(env.get(name), (_Scalar, _Value)) and _integral(p.data_of(ph))
            case p.Literal(_, data):
                return _integral(data)
            case p.NatExp():
                return True
            case p.ScalarOp("add" | "sub" | "mul" | "neg" | "min" | "max" | "floordiv" | "mod" | "to_Index", args):
                return _integral(p.data_of(ph)) and all(self._is_size_arithmetic(a, env) for a in args)
        return False

    def lvalue(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> str:
        binding, offset = self.resolve(ph, sympy.Integer(0), env, ranges, checks)
        if isinstance(binding, _Scalar):
            assert offset == 0, (ph, offset)
            return binding.cname
        return f"{binding.cname}[{self.cint(offset, ranges)}]"

    def address(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> str:
        binding, offset = self.resolve(ph, sympy.Integer(0), env, ranges, checks)
        if isinstance(binding, _Scalar):
            return f"&{binding.cname}"
        offset = simplify_index(offset, ranges)
        return binding.cname if offset == 0 else f"({binding.cname} + {self.cint(offset, ranges)})"

    def exp(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> str:
        match ph:
            case p.Literal(value, p.Num(s)):
                return c_literal(value, s)
            case p.NatExp(value):
                return self.cint(self.rename(value, env), ranges)
            case p.ScalarOp(op, args, _, nonzero_divisor):
                texts = [self.exp(a, env, ranges, checks) for a in args]
                if op in ("floordiv", "mod") and not nonzero_divisor:
                    checks.append(f"if ({texts[1]} == 0) {self.exit.fail(STATUS_DIVISION_BY_ZERO)}")
                return prims.PRIMS[op].c.format(*texts, t=_suffix(p.data_of(args[0])))
            case p.Ident(name) if isinstance(env.get(name), _Value):
                return self.cint(env[name].expr, ranges)
            case p.Ident() | p.Idx() | p.Shift():
                text = self.lvalue(ph, env, ranges, checks)
                self.reads[text] = True
                return text
        raise AssertionError(f"not a scalar expression: {ph}")

    # -- commands
    def comm(self, c: p.Phrase, env: dict, ranges: Ranges) -> list[str]:
        match c:
            case p.Skip():
                return []
            case p.Seq(cmds):
                return [line for cmd in cmds for line in self.comm(cmd, env, ranges)]
            case p.Assign(acc, e):
                checks: list = []
                rhs = self.exp(e, env, ranges, checks)
                lhs = self.lvalue(acc, env, ranges, checks)
                return checks + [f"{lhs} = {rhs};"]
            case p.New(name, data, p.Seq((p.Assign(p.Ident(target), value), *rest)), None) if (
                    target == name and _integral(data) and self._is_size_arithmetic(value, env)
                    and not any(_writes(c, name) for c in rest)):
                # An integer let of index arithmetic (written once: not an ifold's accumulator) is
                # not stored: its uses see the expression,
                # which the loop ranges can then simplify (dpia.index); its checks stay here.
                checks: list = []
                symbolic = self.index(value, env, ranges, checks)
                return checks + self.comm(p.seq(*rest), {**env, name: _Value(symbolic)}, ranges)
            case p.New(name, data, body, None):
                assert isinstance(data, p.Num), f"array {name} outside the arena"
                cname = self.namer.fresh(name)
                lines = self.comm(body, {**env, name: _Scalar(cname)}, ranges)
                unused = [] if self.reads.get(cname) else [f"(void){cname};"]
                return [f"{_ctype(data)} {cname};"] + lines + unused
            case p.New(name, data, body, offset):
                cname = self.namer.fresh(name)
                t = _ctype(data)
                inner = {**env, name: _Buffer(cname)}
                if self.options.allocation == "arena":
                    where = self.cint(self.rename(offset, env), ranges)
                    return [f"{t} *{cname} = ({t} *)((char *)scratch + {where});"] + self.comm(body, inner, ranges)
                return self._heap_region(cname, data, body, inner, ranges)
            case p.For(count, index, body):
                checks = []
                n = self.index(count, env, ranges, checks)
                return checks + self._loop(index, n, body, env, ranges)
            case p.ParFor(size, acc, index, out, elem, body):
                n = self.rename(size, env)
                loop_var = p.Ident(index, p.ExpT(p.IdxT(size)))

                def with_out(inner: dict) -> dict:
                    return {**inner, out: _Alias(p.Idx(acc, loop_var, elem, size), inner)}
                if self.options.parallel and not self.in_parallel and self._iterations_independent(body, index):
                    return self._parallel_loop(index, n, body, env, ranges, with_out)
                return self._loop(index, n, body, env, ranges, scope=with_out)
            case p.IfCmd(cond, then, orelse):
                checks = []
                text = self.exp(cond, env, ranges, checks)
                then_ranges = self._guarded(cond, env, ranges)
                lines = checks + [f"if ({_strip(text)}) {{"] + _indent(self.comm(then, env, then_ranges))
                other = self.comm(orelse, env, ranges)
                return lines + (["} else {"] + _indent(other) + ["}"] if other else ["}"])
            case p.CallCmd(fn, out, args, _, scratch_offset, check_sizes):
                # the checking entry point where the DPS stage could not prove the callee's sizes
                return self._call(fn if check_sizes else f"{fn}_body", out, args, scratch_offset, env, ranges)
            case p.DoubleBuffer(count, first, second, index, state, out, data, body, after):
                checks = []
                n = self.index(count, env, ranges, checks)
                t = _ctype(data)
                s, o = self.namer.fresh(state), self.namer.fresh(out)
                head = [f"{t} *{s} = {self.address(first, env, ranges, checks)};",
                        f"{t} *{o} = {self.address(second, env, ranges, checks)};"]
                inner = {**env, state: _Buffer(s), out: _Buffer(o)}
                # the double buffer of RISE & Shine: the two buffers trade places, nothing is copied
                swap = [f"{{ {t} *fs_swap = {s}; {s} = {o}; {o} = fs_swap; }}"]
                loop = self._loop(index, n, body, inner, ranges, swap)
                return checks + head + loop + self.comm(after, {**env, state: _Buffer(s)}, ranges)
        raise AssertionError(f"not a command: {c}")

    def _loop(self, index, n, body, env, ranges, tail=(), scope=lambda inner: inner) -> list[str]:
        i = self.namer.fresh(index)
        inner_ranges = {**ranges, _sym(i): (sympy.Integer(0), n - 1)}
        lines = self.comm(body, scope({**env, index: _Scalar(i)}), inner_ranges) + list(tail)
        bound = self.cint(n, ranges)
        return [f"for (int64_t {i} = 0; {i} < {_strip(bound)}; {i}++) {{"] + _indent(lines) + ["}"]

    def _parallel_loop(self, index, n, body, env, ranges, scope) -> list[str]:
        """``#pragma omp parallel for``: a failing iteration records its status in its own
        variable and skips to its end; the first failure any iteration reports wins."""
        n_loop = next(self.internal)
        shared, self.exit = self.exit, _Exit(f"fs_next_{n_loop}", f"fs_status_{n_loop}")
        own, self.in_parallel = self.exit, True
        try:
            i = self.namer.fresh(index)
            inner_ranges = {**ranges, _sym(i): (sympy.Integer(0), n - 1)}
            lines = self.comm(body, scope({**env, index: _Scalar(i)}), inner_ranges)
        finally:
            self.exit, self.in_parallel = shared, False
        if own.used:
            lines = ([f"int {own.status} = 0;"] + lines
                     + [f"{own.label}:", f"if ({own.status} != 0) {{", "#pragma omp atomic write",
                        f"    {shared.status} = {own.status};", "}"])
        bound = self.cint(n, ranges)
        loop = ["#pragma omp parallel for",
                f"for (int64_t {i} = 0; {i} < {_strip(bound)}; {i}++) {{"] + _indent(lines) + ["}"]
        if own.used:
            loop.append(f"if ({shared.status} != 0) goto {shared.label};")
            shared.used = True
        return loop

    def _iterations_independent(self, body: p.Phrase, index: str) -> bool:
        """No two iterations of a parfor with this body share storage.  DPIA's parfor bodies are
        passive (each writes only its own element), so what remains is the scratch: in the arena
        variant a region or a callee's scratch inside the body sits at the same offset in every
        iteration unless that offset depends on the index (the DPS stage's per-iteration
        regions).  Boehm's collector is not told about OpenMP threads: no allocation under gc."""
        for c in _subphrases(body):
            match c:
                case p.New(_, _, _, offset) if offset is not None:
                    if self.options.allocation == "gc" or (self.options.allocation == "arena" and not _mentions(offset, index)):
                        return False
                case p.CallCmd(fn, _, _, _, offset) | p.CallExp(fn, _, _, offset):
                    if self.options.allocation == "gc" and fn not in self.scratch_free:
                        return False
                    if (self.options.allocation == "arena" and fn not in self.scratch_free
                            and not _mentions(offset, index)):
                        return False
        return True

    def _heap_region(self, cname, data, body, env, ranges) -> list[str]:
        """A region from the heap for the scope of ``body``: freed on the way out (``malloc``),
        failures included, or never (``leaky``, ``gc``)."""
        t = _ctype(data)
        nbytes = self.cint(BYTES[p.scalar_of(data)] * self.rename(p.elements(data), env), ranges)
        allocate = {"malloc": "fs_malloc", "leaky": "fs_malloc", "gc": "fs_gc_malloc"}[self.options.allocation]
        lines = [f"{t} *{cname} = ({t} *){allocate}({_strip(nbytes)});",
                 f"if ({cname} == NULL) {self.exit.fail(STATUS_OUT_OF_MEMORY)}"]
        if self.options.allocation != "malloc":
            return lines + self.comm(body, env, ranges)
        outer, self.exit = self.exit, _Exit(f"fs_free_{next(self.internal)}", self.exit.status)
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
        texts = [self.address(out, env, ranges, checks)]
        for a in args:
            data = p.data_of(a)
            if isinstance(data, p.Arr):
                texts.append(self.address(a, env, ranges, checks))
                texts.extend(self.cint(self.rename(dim, env), ranges) for dim in p.dims_of(data))
            else:
                texts.append(self.exp(a, env, ranges, checks))
        offset = self.cint(self.rename(scratch_offset, env), ranges)
        if self.options.allocation != "arena" or offset == "0":
            scratch = "scratch"  # a callee that allocates for itself ignores it
        else:
            scratch = f"(char *)scratch + {offset}"
        status, label = self.exit.status, self.exit.label
        self.exit.used = True
        return checks + [f"if (({status} = {fn}({', '.join([scratch] + texts)})) != 0) goto {label};"]

    # -- the four exported functions
    def signature(self, restrict: bool, function: str | None = None) -> str:
        r = "restrict " if restrict else ""
        result = C_TYPE[p.scalar_of(self.k.result_data)]
        params = [f"void *{r}scratch", f"{result} *{r}out"]
        for name, ty, dims in self.k.params:
            cname = self.param_names[name]
            if isinstance(ty, ArrayT):
                params.append(f"const {C_TYPE[p.scalar_of(self.k.param_phrases[name].type.data)]} *{r}{cname}")
                params.extend(f"int64_t {self.dim_names[(name, j)]}" for j in range(len(dims)))
            else:
                params.append(f"{C_TYPE[ty]} {cname}")
        return f"int {function or self.k.name}({', '.join(params)})"

    def call_args(self) -> list[str]:
        names = ["scratch", "out"]
        for name, ty, dims in self.k.params:
            names.append(self.param_names[name])
            names.extend(self.dim_names[(name, j)] for j in range(len(dims)))
        return names

    def prototypes(self, restrict: bool) -> list[str]:
        k, sizes = self.k.name, self.size_params()
        return [f"{self.signature(restrict)};",
                f"void {k}_shape(int64_t *dims_out{', ' + sizes if sizes != 'void' else ''});",
                f"int64_t {k}_scratch_bytes({sizes});",
                f"int {k}_check_sizes({sizes});"]

    def definitions(self) -> str:
        k = self.k
        sizes = self.size_params()
        void_sizes = [f"(void){self.size_names[s.name]};" for s in k.sizes]
        shape = [f"dims_out[{j}] = {self.cint(d, {})};" for j, d in enumerate(k.result_dims)]
        checks = [f"if (!{c_condition(c.cond, self.size_name)}) return {j + 1};"
                  for j, c in enumerate(k.constraints)]
        env = {name: (_Buffer if isinstance(ty, ArrayT) else _Scalar)(self.param_names[name])
               for name, ty, _ in k.params}
        env[k.dest] = _Buffer("out")
        body = self.comm(k.body, env, {})
        if self.exit.used:
            body = [f"int {self.exit.status} = 0;"] + body + [f"{self.exit.label}:", f"return {self.exit.status};"]
        else:
            body = body + ["return 0;"]
        unused = ["(void)scratch;"] + [f"(void){self.param_names[n]};" for n, _, _ in k.params]
        unused += [f"(void){name};" for name in self.dim_names.values()]
        out = []
        out.append(f"void {k.name}_shape(int64_t *dims_out{', ' + sizes if sizes != 'void' else ''}) {{")
        out += _indent(["(void)dims_out;"] + void_sizes + shape) + ["}", ""]
        out.append(f"int64_t {k.name}_scratch_bytes({sizes}) {{")
        out += _indent(void_sizes + [f"return {_strip(self.cint(self.scratch(), {}))};"]) + ["}", ""]
        out.append(f"int {k.name}_check_sizes({sizes}) {{")
        out += _indent(void_sizes + checks + ["return 0;"]) + ["}", ""]
        out.append(f"static {self.signature(True, f'{k.name}_body')} {{")
        out += _indent(unused + body) + ["}", ""]
        out.append(f"{self.signature(True)} {{")
        gc_init = ["fs_gc_init();"] if self.options.allocation == "gc" else []
        out += _indent(gc_init + [f"if ({k.name}_check_sizes({self.size_args()}) != 0) return {STATUS_SIZES};",
                        f"return {k.name}_body({', '.join(self.call_args())});"])
        out.append("}")
        return "\n".join(out)

    def scratch(self) -> sympy.Expr:
        """The caller's scratch for one call: the exact peak of the arena, none in the variants
        that take their regions from the heap."""
        return self.k.scratch if self.options.allocation == "arena" else sympy.Integer(0)

    def interface(self) -> KernelInterface:
        k = self.k
        constraints = tuple(Constraint(c_condition(c.cond, self.size_name), c.param, c.message)
                            for c in k.constraints)
        return KernelInterface(k.name, tuple((n, t) for n, t, _ in k.params), k.result, self.sources,
                               constraints, str(self.scratch()), tuple(str(d) for d in k.result_dims))


def _integral(d: p.Data) -> bool:
    return isinstance(d, p.IdxT) or (isinstance(d, p.Num) and d.scalar in (Index, Card))


def _writes(c: p.Phrase, name: str) -> bool:
    """Whether command ``c`` writes the variable ``name``."""
    for sub in _subphrases(c):
        match sub:
            case p.Assign(p.Ident(target)) | p.CallCmd(_, p.Ident(target)) if target == name:
                return True
    return False


def _mentions(e, name: str) -> bool:
    return any(s.name == name for s in sympy.sympify(e).free_symbols)


def _subphrases(ph: p.Phrase):
    """``ph`` and every phrase inside it."""
    yield ph
    for f in dataclasses.fields(ph):
        value = getattr(ph, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, p.Phrase):
                yield from _subphrases(item)


def _sym(cname: str) -> sympy.Symbol:
    return sympy.Symbol(cname, integer=True)


def _strip(text: str) -> str:
    """Drop one pair of outer parentheses where the whole text is the parenthesised group."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for j, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and j < len(text) - 1:
                return text
        return text[1:-1]
    return text


def _indent(lines) -> list[str]:
    return ["    " + line for line in lines]


def _check_exported_names(prog: p.ImperativeProgram) -> frozenset:
    names = set()
    for name in prog.kernels:
        exported = {name, f"{name}_shape", f"{name}_scratch_bytes", f"{name}_check_sizes", f"{name}_body"}
        if (_reserved(name) or name in _MATH_FUNCTIONS or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)):
            raise CompileError(f"the kernel name '{name}' cannot be a C function name; rename the kernel")
        clash = exported & names
        if clash:
            raise CompileError(f"the kernel name '{name}' clashes with the C function {sorted(clash)[0]}")
        names |= exported
    return frozenset(names)


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


def generate_c(prog: p.ImperativeProgram, options: Options = Options()) -> CArtifact:
    globals_ = _check_exported_names(prog)
    scratch_free = frozenset(name for name, k in prog.kernels.items() if sympy.sympify(k.scratch) == 0)
    emitters = [_KernelEmitter(k, globals_, options, scratch_free) for k in prog.kernels.values()]
    header = ["/* Generated by fsmooth from the kernel '" + prog.entry + "' and the kernels it calls.",
              f" * Allocation: {options.allocation}{'; OpenMP' if options.parallel else ''}.",
              " * ABI: see fsmooth/artifact.py.  Status codes: 0 ok, 1 index out of range,",
              " * 2 integer division by zero, 3 size constraint violated, 4 out of memory. */",
              '#include "fsmooth_rt.h"']
    header += ["", _GC_SUPPORT] if options.allocation == "gc" else []
    header += ["", "/* ---- exported functions */"]
    for e in emitters:
        header += e.prototypes(restrict=True)
    header += ["", "/* ---- internal: the kernels without their size checks */"]
    header += [f"static {e.signature(True, e.k.name + '_body')};" for e in emitters]
    parts = ["\n".join(header)]
    for e in emitters:
        parts.append(f"/* ---- {e.k.name} */\n{e.definitions()}")
    source = "\n\n".join(parts) + "\n"
    cdef = "\n".join(line for e in emitters for line in e.prototypes(restrict=False)) + "\n"
    flags, libraries = [], []
    for wanted, (more_flags, more_libraries) in ((options.parallel, OPENMP), (options.allocation == "gc", BOEHM_GC)):
        if wanted:
            flags += more_flags
            libraries += more_libraries
    return CArtifact(source, cdef, {e.k.name: e.interface() for e in emitters}, tuple(flags), tuple(libraries))

