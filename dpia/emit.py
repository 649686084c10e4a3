"""The code generation that the C and OpenCL back ends share: imperative DPIA phrases as C
statements, l-values and expressions (DPIA paper Fig. 6), in the part of C99 that is OpenCL C too.

Commands become statements, acceptors l-values and expressions r-values; identifiers resolve
through the environment η to C names, and index paths to one offset into a flat buffer
(``element_offset``), simplified with the ranges of the enclosing loops (``fsmooth.dps.ranges``,
which also decides each run-time check DPS asked for: ``range_check``).  Every binder gets its own
C name (``Namer``), so ``new`` needs no block: C99 declarations go where the variable starts.
Sizes print as exact int64 C (``fsmooth.shape.size_printer``) with the helpers of
``clib/fsmooth_scalar.h``, which both back ends carry.

Run-time checks give a status (``fsmooth.artifact.STATUS``): 1 for a checked read out of range,
2 for an integer ``//``/``%`` by zero, 5 for ``int(x)`` of a NaN, an infinity or a float outside
int64 (whose cast would be undefined behaviour in C).  Every failure takes one path (``FailureExit``): set the
status variable of its scope and ``goto`` that scope's exit label.

``KernelEmitter`` writes one kernel's body; each back end subclasses it with its own functions
and primitives: ``dpia.codegen_c`` (the C ABI, heap allocation, OpenMP, calls of kernels) and
``dpia.codegen_opencl`` (work-items, address spaces, the status buffer).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import sympy

from fsmooth import prims
from fsmooth.artifact import Constraint, KernelInterface, RangeCheck, SizeSource, result_components
from fsmooth.dps.ranges import (Ranges, in_range, positive, simplify_index,
                                truncating_divisions)
from fsmooth.errors import CompileError, Loc
from fsmooth.names import NameSupply
from fsmooth.options import Options
from fsmooth.shape.size_printer import C, SizeTarget, print_size
from fsmooth.types import C_TYPE, ArrayT, Card, Index, Scalar

from . import phrases as p

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary
""".split())
# Object-like macros and typedefs that the runtime header's includes bring into scope.
HEADER_NAMES = frozenset("""
bool true false NULL NAN INFINITY HUGE_VAL HUGE_VALF HUGE_VALL EOF errno math_errhandling
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t intmax_t
uintmax_t size_t ptrdiff_t float_t double_t malloc free stdin stdout stderr alloca linux unix i386
static_assert sched_priority st_atime st_ctime st_mtime
""".split())
# The functions that generated code or the runtime headers call: a variable of the name would
# shadow the function where the code calls it.
C_FUNCTIONS = frozenset("""
acos asin atan atan2 cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 fabs fdim floor fma fmax
fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 log1p log2 logb lrint lround
modf nan nearbyint nextafter nexttoward pow remainder remquo rint round scalbln scalbn sin sinh
sqrt tan tanh tgamma trunc isnan isinf isfinite signbit fpclassify isnormal
calloc realloc abort exit memcpy memset
""".split())
# The macros of the C library and of Python.h (which cffi's build includes first) by their naming
# rules: an upper-case letter and another, a digit or an underscore (EIO, E2BIG, M_PI, PRId64), and
# the prefixes Py and PY; the Namer's number (``_1``) does not count, so ``N`` and ``N_1`` stay free.
_MACRO_LIKE = re.compile(r"^[A-Z][A-Z0-9_]")
_RESERVED_PREFIXES = ("fs_", "GC_", "__", "Py", "PY")

# The status codes of generated code (fsmooth.artifact.STATUS).
STATUS_OUT_OF_RANGE = 1
STATUS_DIVISION_BY_ZERO = 2
STATUS_SIZES = 3
STATUS_OUT_OF_MEMORY = 4
STATUS_INTEGER_CONVERSION = 5


def is_reserved(name: str) -> bool:
    """Whether ``name`` is a C keyword, a macro, typedef or function of the runtime header's or
    Python.h's includes, a name reserved to the runtime (``fs_``), Boehm's collector, CPython or
    the C implementation."""
    return (name in C_KEYWORDS or name in HEADER_NAMES or name in C_FUNCTIONS
            or name.startswith(_RESERVED_PREFIXES) or re.match(r"^_[A-Z]", name) is not None
            or _MACRO_LIKE.match(re.sub(r"_[0-9]+$", "", name)) is not None)


def c_module_name(name: str) -> str:
    """The C prefix of a Python module's exported symbols (``blur`` → ``blur``): its name as a C
    identifier without leading or trailing underscores, ``m_`` before it where that would be empty,
    begin with a digit or be reserved (``fs`` → ``m_fs``)."""
    ident = re.sub(r"\W", "_", name, flags=re.ASCII).strip("_")
    return ident if ident and not ident[0].isdigit() and not is_reserved(f"{ident}_") else f"m_{ident}"


def exported_name(module: str, kernel: str) -> str:
    """The C symbol of a kernel, ``<module>_<kernel>`` (as Futhark's ``futhark_entry_``), so no
    kernel name is a C library function: each byte of a character outside ASCII letters, digits and
    ``_`` written ``_XX`` (``größe`` → ``gr_C3_B6_C3_9Fe``)."""
    escaped = "".join(c if re.fullmatch(r"[A-Za-z0-9_]", c) else "".join(f"_{b:02X}" for b in c.encode())
                      for c in kernel)
    return f"{module}_{escaped}"


class Namer(NameSupply):
    """Unique C identifiers for the names of one C function: the name made a C identifier, then
    numbered (``x_1``) where it is taken or reserved.  A name whose numbered forms are reserved too
    (``__x``, ``fs_t``, ``M_PI``: a reserved prefix or macro rule) gets a ``v`` before it first
    (``v__x``), so numbering ends: beyond those rules, only finitely many names are reserved."""

    def __init__(self, taken=()):
        super().__init__(taken, forbidden=is_reserved)

    def fresh(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
        while base[0].isdigit() or is_reserved(f"{base}_1"):
            base = "v" + base
        return super().fresh(base)


# ----------------------------------------------------------------------------- C of phrases
# What an identifier of a phrase is bound to in the environment η.


@dataclass(frozen=True)
class ScalarVariable:
    """A C variable holding a scalar."""

    cname: str


@dataclass(frozen=True)
class BufferVariable:
    """A C pointer to the first element of a flat buffer."""

    cname: str


@dataclass(frozen=True)
class RecordVariable:
    """A record (F̃ tuple): the binding of each component (C variables and buffers)."""

    items: tuple


@dataclass(frozen=True)
class Alias:
    """Another name of ``phrase`` (a parfor's element acceptor), resolved in ``env``."""

    phrase: p.Phrase
    env: dict


@dataclass(frozen=True)
class SymbolicInteger:
    """An integer let kept as its symbolic value (over C names), never stored."""

    expr: sympy.Expr


@dataclass
class FailureExit:
    """Where a failure in the current scope goes: set ``status``, jump to ``label``.  The label
    is written only if some failure uses it (an unused label is a warning)."""

    label: str
    status: str
    used: bool = False

    def fail(self, code) -> str:
        self.used = True
        return f"{{ {self.status} = {code}; goto {self.label}; }}"


def c_type(d: p.Data) -> str:
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


class KernelEmitter:
    """The C of one imperative kernel's body, without the function around it; the back ends
    subclass it (``CKernelEmitter``, the OpenCL emitter) and add their own commands."""

    size_target: SizeTarget = C  # how sizes print (fsmooth.shape.size_printer)

    def __init__(self, k: p.ImperativeKernel, symbol: str, globals_: frozenset, options: Options):
        self.k = k
        self.symbol = symbol
        self.options = options
        self.outputs = result_components(k.result, k.result_dims)
        self.namer = Namer(globals_ | {"scratch", "dims_out"} | {f"out{suffix}" for suffix, _, _ in self.outputs})
        # fs_ names are the runtime's (Namer never gives one out): labels and status variables
        self.exit = FailureExit("fs_exit", "fs_status")
        self.internal = itertools.count(1)
        self.param_names = {name: self.namer.fresh(name) for name, _, _ in k.params}
        self.dim_names = {}
        for name, ty, dims in k.params:
            for j in range(len(dims)):
                self.dim_names[(name, j)] = self.namer.fresh(f"{self.param_names[name]}_d{j}")
        self.sources, self.size_names = self._size_sources()
        self.opaque: dict = {}
        self.reads: dict = {}
        self.range_checks: list = []  # RangeCheck per checked read written, emitted or proven

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

    # -- symbols
    def rename(self, e, env: dict) -> sympy.Expr:
        """A DPS/DPIA size expression with its symbols replaced by C-named symbols."""
        e = sympy.sympify(e)
        table = {}
        for s in e.free_symbols:
            binding = env.get(s.name)
            if isinstance(binding, ScalarVariable):
                table[s] = index_symbol(binding.cname)
            elif s.name in self.size_names:
                table[s] = index_symbol(self.size_names[s.name])
            elif s not in self.opaque:
                raise CompileError(f"{self.k.name}: the size {s} is not in scope")
        return e.xreplace(table)

    def cint(self, e, ranges: Ranges, target: SizeTarget | None = None) -> str:
        simplified = truncating_divisions(simplify_index(e, ranges), ranges)
        return print_size(simplified, target or self.size_target, self.size_name)

    # -- expressions and acceptors
    def resolve(self, ph: p.Phrase, offset, env: dict, ranges: Ranges, checks: list):
        """(binding, offset): the buffer or scalar ``ph`` denotes, Fig. 6's path flattened."""
        match ph:
            case p.Ident(name):
                binding = env[name]
                if isinstance(binding, Alias):
                    return self.resolve(binding.phrase, offset, binding.env, ranges, checks)
                return binding, offset
            case p.Idx(arr, index, elem, length, checked, loc):
                i = self.index(index, env, ranges, checks)
                if checked:
                    i = self.range_check(i, self.rename(length, env), loc, ranges, checks)
                return self.resolve(arr, element_offset(i, self.rename(p.elements(elem), env), offset), env,
                                    ranges, checks)
            case p.Shift(base, shift):
                return self.resolve(base, self.rename(shift, env) + offset, env, ranges, checks)
            case p.Proj(tup, index):
                binding, at = self.resolve(tup, sympy.Integer(0), env, ranges, checks)
                assert isinstance(binding, RecordVariable) and at == 0, (ph, binding)
                component = binding.items[index]
                if isinstance(component, Alias):
                    return self.resolve(component.phrase, offset, component.env, ranges, checks)
                return component, offset
        raise AssertionError(f"not a location: {ph}")

    def range_check(self, i: sympy.Expr, length: sympy.Expr, loc: Loc | None, ranges: Ranges,
                    checks: list) -> sympy.Expr:
        """The check 0 <= i < length that DPS asked for: proven by the range analysis, or
        written to ``checks``; recorded either way (``range_checks``).  The index to read at."""
        proof = in_range(simplify_index(i, ranges), length, ranges)
        if proof is not None:
            facts = (f"0 <= {proof.low}", f"{proof.high} <= {length} - 1") + proof.facts
            self.range_checks.append(RangeCheck(loc, self.cint(i, ranges), self.cint(length, ranges), False, facts))
            return i
        text = self.cint(i, ranges)
        if not re.fullmatch(r"[A-Za-z_]\w*|-?\d+", text):
            # evaluated once, for the test and for the read
            name = self.namer.fresh("index")
            checks.append(f"const int64_t {name} = {strip_parentheses(text)};")
            i, text = index_symbol(name), name
        bound = self.cint(length, ranges)
        checks.append(f"if (!(0 <= {text} && {text} < {bound})) {self.exit.fail(STATUS_OUT_OF_RANGE)}")
        self.range_checks.append(RangeCheck(loc, text, bound, True))
        return i

    def index(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> sympy.Expr:
        match ph:
            case p.Ident(name) if isinstance(env.get(name), ScalarVariable):
                self.reads[env[name].cname] = True
                return index_symbol(env[name].cname)
            case p.Ident(name) if isinstance(env.get(name), SymbolicInteger):
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
                # remove the division (fsmooth.dps.ranges); the zero test stays unless they prove d ≥ 1.
                x, d = (self.index(a, env, ranges, checks) for a in (num, den))
                if not nonzero and not positive(d, ranges):
                    checks.append(f"if ({strip_parentheses(self.cint(d, ranges))} == 0) {self.exit.fail(STATUS_DIVISION_BY_ZERO)}")
                if d.is_zero:  # the check above always fails: sympy's quotient would be zoo
                    return sympy.Integer(0)
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
                return ranges.given(e, bound - 1)
        return ranges

    def integer_let(self, c: p.Phrase, env: dict) -> bool:
        """Whether ``c`` is ``new`` of an integer written once, at its start, with index
        arithmetic (not an ifold's accumulator): ``comm`` keeps such a let symbolic."""
        match c:
            case p.New(name, data, p.Seq((p.Assign(p.Ident(target), value), *rest)), None):
                return (target == name and _integral(data) and self._is_size_arithmetic(value, env)
                        and not any(_writes(cmd, name) for cmd in rest))
        return False

    def _is_size_arithmetic(self, ph: p.Phrase, env: dict) -> bool:
        """Integer arithmetic that ``index`` keeps symbolic (no reads, no calls)."""
        match ph:
            case p.Ident(name):
                return isinstance(env.get(name), (ScalarVariable, SymbolicInteger)) and _integral(p.data_of(ph))
            case p.Literal(_, data):
                return _integral(data)
            case p.NatExp():
                return True
            case p.ScalarOp("add" | "sub" | "mul" | "neg" | "min" | "max" | "floordiv" | "mod" | "to_Index", args):
                return _integral(p.data_of(ph)) and all(self._is_size_arithmetic(a, env) for a in args)
        return False

    def lvalue(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> str:
        binding, offset = self.resolve(ph, sympy.Integer(0), env, ranges, checks)
        if isinstance(binding, ScalarVariable):
            assert offset == 0, (ph, offset)
            return binding.cname
        return f"{binding.cname}[{self.cint(offset, ranges)}]"

    def address(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> str:
        binding, offset = self.resolve(ph, sympy.Integer(0), env, ranges, checks)
        if isinstance(binding, ScalarVariable):
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
                if op == "trunc_to_Index":
                    # the cast is defined only in int64's range: test first (operand evaluated once)
                    if not re.fullmatch(r"[A-Za-z_]\w*", texts[0]):
                        name = self.namer.fresh("converted")
                        checks.append(f"const {c_type(p.data_of(args[0]))} {name} = {strip_parentheses(texts[0])};")
                        texts[0] = name
                    checks.append(f"if (!fs_int_fits_{_suffix(p.data_of(args[0]))}({texts[0]})) "
                                  f"{self.exit.fail(STATUS_INTEGER_CONVERSION)}")
                return prims.PRIMS[op].c.format(*texts, t=_suffix(p.data_of(args[0])))
            case p.Ident(name) if isinstance(env.get(name), SymbolicInteger):
                return self.cint(env[name].expr, ranges)
            case p.Ident() | p.Idx() | p.Shift() | p.Proj():
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
            case p.New(name, _, p.Seq((p.Assign(_, value), *rest)), None) if self.integer_let(c, env):
                # not stored: its uses see the expression, which the loop ranges can then
                # simplify (fsmooth.dps.ranges); its checks stay here
                checks: list = []
                symbolic = self.index(value, env, ranges, checks)
                return checks + self.comm(p.seq(*rest), {**env, name: SymbolicInteger(symbolic)}, ranges)
            case p.New(name, data, body, None):
                assert isinstance(data, p.Num), f"array {name} outside the arena"
                cname = self.namer.fresh(name)
                lines = self.comm(body, {**env, name: ScalarVariable(cname)}, ranges)
                unused = [] if self.reads.get(cname) else [f"(void){cname};"]
                return [f"{c_type(data)} {cname};"] + lines + unused
            case p.New(name, data, body, offset):
                cname = self.namer.fresh(name)
                return self.region(cname, data, offset, body, {**env, name: BufferVariable(cname)}, ranges)
            case p.For(count, index, body):
                checks = []
                n = self.index(count, env, ranges, checks)
                return checks + self.loop(index, n, body, env, ranges)
            case p.ParFor(size, acc, index, out, elem, body) as c:
                n = self.rename(size, env)
                loop_var = p.Ident(index, p.ExpT(p.IdxT(size)))

                def with_out(inner: dict) -> dict:
                    return {**inner, out: Alias(p.Idx(acc, loop_var, elem, size), inner)}
                return self.parfor_loop(index, n, body, env, ranges, with_out, c.parallel)
            case p.IfCmd(cond, then, orelse):
                checks = []
                text = self.exp(cond, env, ranges, checks)
                then_ranges = self._guarded(cond, env, ranges)
                lines = checks + [f"if ({strip_parentheses(text)}) {{"] + indent(self.comm(then, env, then_ranges))
                other = self.comm(orelse, env, ranges)
                return lines + (["} else {"] + indent(other) + ["}"] if other else ["}"])
            case p.DoubleBuffer(count, first, second, index, state, out, p.Rec() as data, body, after):
                return self.record_double_buffer(c, env, ranges)
            case p.DoubleBuffer(count, first, second, index, state, out, data, body, after):
                checks = []
                n = self.index(count, env, ranges, checks)
                t = c_type(data)
                s, o = self.namer.fresh(state), self.namer.fresh(out)
                head = [f"{t} *{s} = {self.address(first, env, ranges, checks)};",
                        f"{t} *{o} = {self.address(second, env, ranges, checks)};"]
                inner = {**env, state: BufferVariable(s), out: BufferVariable(o)}
                # the double buffer of RISE & Shine: the two buffers trade places, nothing is copied
                swap = [f"{{ {t} *fs_swap = {s}; {s} = {o}; {o} = fs_swap; }}"]
                loop = self.loop(index, n, body, inner, ranges, swap)
                return checks + head + loop + self.comm(after, {**env, state: BufferVariable(s)}, ranges)
        raise AssertionError(f"not a command: {c}")

    def record_double_buffer(self, c: p.DoubleBuffer, env: dict, ranges: Ranges) -> list[str]:
        """The double buffer of a record state: per array component two buffers whose pointers
        trade places, per scalar component two variables whose values do."""
        checks: list = []
        n = self.index(c.count, env, ranges, checks)
        head, swap, reading, writing = [], [], {}, {}
        for path, leaf in p.record_leaves(c.data):
            a, b = p.proj_path(c.first, path), p.proj_path(c.second, path)
            t = c_type(leaf)
            if isinstance(leaf, p.Arr):
                s, o = self.namer.fresh(c.state), self.namer.fresh(c.out)
                t, variable = self.buffer_pointer(a, leaf, env, ranges)
                head += [f"{t} *{s} = {self.address(a, env, ranges, checks)};",
                         f"{t} *{o} = {self.address(b, env, ranges, checks)};"]
                swap.append(f"{{ {t} *fs_swap = {s}; {s} = {o}; {o} = fs_swap; }}")
                reading[path], writing[path] = variable(s), variable(o)
            else:
                s, o = self.lvalue(a, env, ranges, checks), self.lvalue(b, env, ranges, checks)
                self.reads[s] = self.reads[o] = True
                swap.append(f"{{ {t} fs_swap = {s}; {s} = {o}; {o} = fs_swap; }}")
                reading[path], writing[path] = ScalarVariable(s), ScalarVariable(o)

        def record(bindings: dict, d: p.Data, path=()):
            if isinstance(d, p.Rec):
                return RecordVariable(tuple(record(bindings, x, path + (k,)) for k, x in enumerate(d.items)))
            return bindings[path]
        state = record(reading, c.data)
        inner = {**env, c.state: state, c.out: record(writing, c.data)}
        loop = self.loop(c.index, n, c.body, inner, ranges, swap)
        return checks + head + loop + self.comm(c.after, {**env, c.state: state}, ranges)

    def buffer_pointer(self, acc: p.Phrase, data: p.Data, env: dict, ranges: Ranges):
        """(the C type a pointer into the buffer behind ``acc`` points at, the binding of such a
        pointer): a back end with address spaces (OpenCL) qualifies it."""
        return c_type(data), BufferVariable

    def region(self, cname: str, data: p.Data, offset, body: p.Phrase, env: dict, ranges: Ranges) -> list[str]:
        """``new`` of an array as ``cname`` for ``body`` (``env`` binds it): at its static
        ``offset`` in the caller's scratch arena."""
        t = c_type(data)
        where = self.cint(self.rename(offset, env), ranges)
        return [f"{t} *{cname} = ({t} *)((char *)scratch + {where});"] + self.comm(body, env, ranges)

    def parfor_loop(self, index, n, body, env, ranges, scope, parallel: bool = False) -> list[str]:
        """The loop of a ``parfor``; ``scope`` adds the element acceptor to the body's environment;
        ``parallel``: the DPS build's mark (``dps.parallel``), which a back end with threads uses."""
        return self.loop(index, n, body, env, ranges, scope=scope)

    def loop(self, index, n, body, env, ranges, tail=(), scope=lambda inner: inner) -> list[str]:
        """A sequential loop of ``index`` over 0 .. n-1, ``tail`` after the body in each iteration."""
        i = self.namer.fresh(index)
        inner_ranges = ranges.inside(index_symbol(i), n - 1)
        lines = self.comm(body, scope({**env, index: ScalarVariable(i)}), inner_ranges) + list(tail)
        bound = self.cint(n, ranges)
        return [f"for (int64_t {i} = 0; {i} < {strip_parentheses(bound)}; {i}++) {{"] + indent(lines) + ["}"]

    # -- what the kernel's caller needs
    def scratch(self) -> sympy.Expr:
        """The caller's scratch for one call: the exact peak of the arena, none in the variants
        that take their regions from the heap."""
        return self.k.scratch if self.options.allocation == "arena" else sympy.Integer(0)

    def interface(self) -> KernelInterface:
        k = self.k
        constraints = tuple(Constraint(c.cond, c.param, c.message) for c in k.constraints)
        return KernelInterface(k.name, self.symbol, tuple((n, t) for n, t, _ in k.params), k.result, self.sources,
                               constraints, self.scratch(), _dims(k.result_dims),
                               # once each: a vector access resolves its first lane twice
                               tuple(dict.fromkeys(self.range_checks)), k.threads)


def element_offset(index: sympy.Expr, elem_size: sympy.Expr, inner: sympy.Expr) -> sympy.Expr:
    """The offset of scalar ``inner`` of element ``index`` of an array whose elements hold
    ``elem_size`` scalars each: Fig. 6's path [index, ...] in a row-major layout."""
    return index * elem_size + inner


def _dims(dims) -> tuple:
    return tuple(_dims(d) if isinstance(d, tuple) else sympy.sympify(d) for d in dims)


def _integral(d: p.Data) -> bool:
    return isinstance(d, p.IdxT) or (isinstance(d, p.Num) and d.scalar in (Index, Card))


def _writes(c: p.Phrase, name: str) -> bool:
    """Whether command ``c`` writes the variable ``name``."""
    for sub in p.walk(c):
        match sub:
            case p.Assign(p.Ident(target)) | p.CallCmd(_, p.Ident(target)) if target == name:
                return True
    return False


def index_symbol(cname: str) -> sympy.Symbol:
    """The integer symbol that stands for the C variable ``cname`` in index expressions."""
    return sympy.Symbol(cname, integer=True)


def strip_parentheses(text: str) -> str:
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


def indent(lines) -> list[str]:
    return ["    " + line for line in lines]


