"""The code generation that the C and OpenCL back ends share: imperative DPIA phrases as C
statements, l-values and expressions (DPIA paper Fig. 6), in the part of C99 that is OpenCL C too.

Commands become statements, acceptors l-values and expressions r-values; identifiers resolve
through the environment η to C names, and index paths to one offset into a flat buffer with the
checks that reaching it needs (``dpia.index_paths``, which asks the range analysis
``fsmooth.dps.ranges`` which checks DPS asked for are proven); this module prints them
(``write_needs``), simplified with the ranges of the enclosing loops.  Every binder gets its own
C name (``Namer``), so ``new`` needs no block: C99 declarations go where the variable starts.
Sizes print as exact int64 C (``fsmooth.shape.size_printer``) with the helpers of
``clib/fsmooth_scalar.h``, which both back ends carry.

Run-time checks give a status (``fsmooth.artifact.STATUS``): 1 for a checked read out of range,
2 for an integer ``//``/``%`` by zero, 5 for ``int(x)`` of a NaN, an infinity or a float outside
int64 (whose cast would be undefined behaviour in C), 6 for integer arithmetic that overflows
int64: the program's own ``+ - * // -x abs`` on Index and Card (``exp``) and a size computed in
the body (a loop count, a region's bytes: ``checked_size``), each wherever the range analysis
cannot prove that it fits (``fsmooth.dps.ranges.overflow_conditions``).  Every failure takes one path
(``FailureExit``): set the status variable of its scope and ``goto`` that scope's exit label.

``KernelEmitter`` writes one kernel's body; each back end subclasses it with its own functions
and primitives: ``dpia.codegen_c`` (the C ABI, heap allocation, OpenMP, calls of kernels) and
``dpia.codegen_opencl`` (work-items, address spaces, the status buffer).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files

import sympy

from fsmooth import prims
from fsmooth.artifact import Constraint, KernelInterface, RangeCheck, SizeSource, result_components
from fsmooth.dps.ranges import (Ranges, nonnegative, overflow_conditions, positive, simplify_index,
                                truncating_divisions)
from fsmooth.errors import CompileError
from fsmooth.names import NameSupply
from fsmooth.options import Options
from fsmooth.shape.size_printer import C, SizeTarget, overflow_checked_c, print_size
from fsmooth.types import C_TYPE, ArrayT, Card, Index, Scalar

from . import index_paths as paths
from . import phrases as p
from .index_paths import Alias, BufferVariable, RecordVariable, ScalarVariable, SymbolicInteger, index_symbol
from .loop_checks import Check, RangeTest, hoist_invariant_checks, records_moved
from .strength_reduction import RunningRemainder, RunningTerm, affine_remainder, reduction, varying_part

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
STATUS_INTEGER_OVERFLOW = 6


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


# The C libraries' functions named like <module>_<kernel> (pthread_create, getc_unlocked, ...)
C_LIBRARY_SYMBOLS = frozenset(
    line for line in files(__package__).joinpath("c_library_symbols.txt").read_text().splitlines()
    if line and not line.startswith("#"))
# what a kernel's symbol S also exports: S_shape, S_shape_0, ..., S_scratch_bytes, S_check_sizes
_EXPORTED_SUFFIXES = ("", "_shape", "_scratch_bytes", "_check_sizes", "_body")


def exported_name(module: str, kernel: str) -> str:
    """The C symbol of a kernel, ``<module>_<kernel>`` (as Futhark's ``futhark_entry_``), so no
    kernel name is a C library function: each byte of a character outside ASCII letters, digits and
    ``_`` written ``_XX`` (``größe`` → ``gr_C3_B6_C3_9Fe``).  Where the module and kernel together
    spell a C library function or one of the functions exported beside it (module ``pthread``,
    kernel ``create``), ``m_`` goes before it: no library function begins with ``m_``, and the
    kernels of one module cannot meet, since the others' symbols begin with the module's name."""
    escaped = "".join(c if re.fullmatch(r"[A-Za-z0-9_]", c) else "".join(f"_{b:02X}" for b in c.encode())
                      for c in kernel)
    symbol = f"{module}_{escaped}"
    return f"m_{symbol}" if any(symbol + s in C_LIBRARY_SYMBOLS for s in _EXPORTED_SUFFIXES) else symbol


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
# What an identifier of a phrase is bound to in the environment η: ``dpia.index_paths``.


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
        # int64's extremes by name: the literal of INT64_MIN is no C integer constant
        return {-2**63: "INT64_MIN", 2**63 - 1: "INT64_MAX"}.get(int(value), f"INT64_C({int(value)})")
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
        # numbers for the runtime's fs_ names (labels, status and size variables), from one supply
        self.runtime_numbers = NameSupply(numbered=True)
        self.param_names = {name: self.namer.fresh(name) for name, _, _ in k.params}
        self.dim_names = {}
        for name, ty, dims in k.params:
            for j in range(len(dims)):
                self.dim_names[(name, j)] = self.namer.fresh(f"{self.param_names[name]}_d{j}")
        self.sources, self.size_names = self._size_sources()
        self.opaque: dict = {}
        self.reads: dict = {}
        self.range_checks: list = []  # RangeCheck per checked read written, emitted or proven
        self.fitting_before_the_body: dict = {}  # sizes tested before the body (paths.FitsInt64)
        # per enclosing sequential loop, its variable, the ranges before it and the parts of
        # subscripts kept running (dpia.strength_reduction), innermost last
        self.running: list[tuple[sympy.Symbol, Ranges, dict]] = []
        # the operands' index values that ``exp`` has asked ``paths.arithmetic_fits`` about, so that
        # a deep expression's operations are each analysed once, not once per enclosing operation
        self.arithmetic_values: dict = {}

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

    def kernel_ranges(self) -> Ranges:
        """What is known at the start of the kernel's body: its sizes are ≥ 0, and what the size
        check computed before the call fits int64 (result dims, the scratch size)."""
        sized = [d for _, _, dims in self.outputs for d in dims] + [self.scratch()]
        return paths.body_ranges(self.size_names.values(), [self.rename(e, {}) for e in sized])

    def size_name(self, symbol) -> str:
        if symbol in self.opaque:
            return self.opaque[symbol]
        return self.size_names.get(symbol.name) or symbol.name

    # -- symbols
    def rename(self, e, env: dict) -> sympy.Expr:
        """A DPS/DPIA size expression with its symbols replaced by C-named symbols."""
        try:
            return paths.rename(e, env, self.size_names)
        except CompileError as error:
            raise CompileError(f"{self.k.name}: {error}") from None

    def cint(self, e, ranges: Ranges, target: SizeTarget | None = None) -> str:
        simplified = truncating_divisions(simplify_index(e, ranges), ranges)
        return print_size(simplified, target or self.size_target, self.size_name)

    def fresh_number(self) -> str:
        """``_k`` for the next k: the suffix of a group of the runtime's fs_ names (a label and
        its status variable share one), which Namer never gives out."""
        return self.runtime_numbers.fresh("")

    def checked_size(self, n: sympy.Expr, ranges: Ranges, checks: list) -> str:
        """The C of ``n``, a size computed in the body (a loop count, a region's bytes, a size
        argument of a call): plain where it cannot overflow int64 or where the sizes that bound
        what it computes are tested before the body (``overflow_conditions``), else computed with
        checked arithmetic where it is (``checked_value``)."""
        conditions = overflow_conditions(n, ranges)
        if conditions is not None:
            self.fitting_before_the_body.update(dict.fromkeys(conditions))
            return self.cint(n, ranges)
        if sympy.sympify(n).is_Integer:  # folded from literals, beyond int64
            checks.append(Check(self.integer_overflow("true")))
            return "0"
        return self.checked_value(lambda flag: strip_parentheses(self.cint(n, ranges, overflow_checked_c(flag))), checks)

    def checked_value(self, text, checks: list) -> str:
        """A variable holding an integer computed with checked arithmetic (``text(flag)``, the C
        calling ``fs_checked_*_i64`` with ``&flag``), ``checks`` failing the call with
        STATUS_INTEGER_OVERFLOW where it overflows int64, as a reference ``Int64`` raises
        OverflowError."""
        k = self.fresh_number()
        flag, name = f"fs_overflow{k}", f"fs_int{k}"
        checks += map(Check, [f"bool {flag} = false;", f"const int64_t {name} = {text(flag)};",
                              self.integer_overflow(flag)])
        return name

    def before_the_body(self, body: list[str]) -> list[str]:
        """``body`` after the test, once, that the sizes bounding its index arithmetic fit int64
        (``paths.FitsInt64``), computed with checked arithmetic: where one does not, the call
        fails (status 6) without running the body."""
        if not self.fitting_before_the_body:
            return body
        flag = f"fs_overflow{self.fresh_number()}"
        return ([f"bool {flag} = false;"]
                + [f"(void){self.cint(e, Ranges(), overflow_checked_c(flag))};" for e in self.fitting_before_the_body]
                + self.unless(flag, body))

    def unless(self, flag: str, body: list[str]) -> list[str]:
        """``body``, run unless ``flag`` says that integer arithmetic overflowed."""
        return [self.integer_overflow(flag)] + body

    def integer_overflow(self, flag: str) -> str:
        """The C that fails the call where checked arithmetic overflowed (``flag``)."""
        return f"if ({flag}) {self.exit.fail(STATUS_INTEGER_OVERFLOW)}"

    # -- expressions and acceptors
    def resolve(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list):
        """(binding, offset, ranges): the buffer or scalar ``ph`` denotes (``dpia.index_paths``),
        its checks written to ``checks``, and the ranges past them, to print the offset with."""
        place = paths.resolve(ph, env, ranges, self.size_names)
        tested = self.write_needs(place.needs, ranges, checks)
        return place.binding, place.offset.xreplace(tested), paths.past_tests(place.needs, ranges)

    def index(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> sympy.Expr:
        """The integer ``ph`` as an index expression (``dpia.index_paths``), its checks written to ``checks``."""
        value = paths.index(ph, env, ranges, self.size_names)
        self.write_needs(value.needs, ranges, checks)
        return value.expr

    def write_needs(self, needs: tuple, ranges: Ranges, checks: list) -> dict:
        """Write what an index path needs (``dpia.index_paths``), in order: the expressions of its
        opaque values, its tests into ``checks``; record each check DPS asked for
        (``range_checks``).  The index each tested place stands on, by its ``tested`` symbol."""
        tested = {}
        for need in needs:
            match need:
                case paths.Reads(cname):
                    self.reads[cname] = True
                case paths.Opaque(symbol, phrase, env):
                    self.opaque[symbol] = f"({self.exp(phrase, env, ranges, checks)})"
                case paths.FitsInt64(values):
                    self.fitting_before_the_body.update(dict.fromkeys(values))
                case paths.NonzeroDivisor(d):
                    checks.append(Check(f"if ({strip_parentheses(self.cint(d, ranges))} == 0) "
                                        f"{self.exit.fail(STATUS_DIVISION_BY_ZERO)}"))
                    ranges = paths.past_tests((need,), ranges)
                case paths.InRange(i, length, loc, proof, None):
                    facts = (f"0 <= {proof.low}", f"{proof.high} <= {length} - 1") + proof.facts
                    self.range_checks.append(RangeCheck(loc, self.cint(i, ranges), self.cint(length, ranges),
                                                        False, facts))
                case paths.InRange(i, length, loc, None, symbol):
                    index_nonnegative = nonnegative(i, ranges)
                    text = self.cint(i, ranges)
                    if not re.fullmatch(r"[A-Za-z_]\w*|-?\d+", text):
                        # evaluated once, for the test and for the read
                        name = self.namer.fresh("index")
                        checks.append(Check(f"const int64_t {name} = {strip_parentheses(text)};"))
                        i, text = index_symbol(name), name
                    bound = self.cint(length, ranges)
                    record = RangeCheck(loc, text, bound, True)
                    checks.append(RangeTest(text, bound, self.exit.fail(STATUS_OUT_OF_RANGE), record,
                                            index_nonnegative, nonnegative(length, ranges)))
                    self.range_checks.append(record)
                    tested[symbol] = i
        return tested

    def lvalue(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> str:
        binding, offset, tested_ranges = self.resolve(ph, env, ranges, checks)
        if isinstance(binding, ScalarVariable):
            assert offset == 0, (ph, offset)
            return binding.cname
        return f"{binding.cname}[{self.subscript(offset, tested_ranges)}]"

    def subscript(self, offset, ranges: Ranges) -> str:
        """The C of the subscript ``offset``, its parts that an enclosing loop keeps running
        (``dpia.strength_reduction``) read from their variables."""
        e = simplify_index(offset, ranges)
        loop_variables = [v for v, _, _ in ranges.loops]
        for variable, at_the_loop, terms in self.running:
            if variable not in e.free_symbols:
                continue
            depth = loop_variables.index(variable)
            invariant = set(ranges.naturals) | set(loop_variables[:depth])
            e = self.running_remainders(e, variable, invariant, terms, ranges, at_the_loop)
            part = varying_part(e, variable, invariant)
            if part == 0:
                continue
            if part not in terms:
                found = reduction(part, variable)
                if found is None:
                    continue
                conditions = [overflow_conditions(x, ranges) for x in (part, found[1])]
                if None in conditions:
                    continue
                self.fitting_before_the_body.update(dict.fromkeys(conditions[0] + conditions[1]))
                terms[part] = RunningTerm(self.namer.fresh("running"), variable, part, *found)
            e = e - part + index_symbol(terms[part].name)
        return print_size(truncating_divisions(e, ranges), self.size_target, self.size_name)

    def running_remainders(self, e: sympy.Expr, variable: sympy.Symbol, invariant: set, terms: dict,
                           ranges: Ranges, at_the_loop: Ranges) -> sympy.Expr:
        """``e`` with its remainders (a·v + b) mod n of the loop's ``variable`` read from their
        running variables (``dpia.strength_reduction.RunningRemainder``), added to ``terms``.
        Only where n ≥ 1 is proven here (``ranges``), so that the remainder is read only where
        a division by n would not fail, and n ≥ 0 before the loop (``at_the_loop``), where a
        divisor 0 (the call then fails in the body before the read) makes the running value a
        constant 0; and where computing a and b before the loop needs no test that the body's
        arithmetic did not have (``overflow_conditions``): the call fails where it failed."""
        for mod in sorted(e.atoms(sympy.Mod), key=sympy.default_sort_key):
            if mod in terms:
                e = e.xreplace({mod: _remainder_symbol(terms[mod].name)})
                continue
            found = affine_remainder(mod, variable, invariant)
            n = mod.args[1]
            if found is None or not (positive(n, ranges) and nonnegative(n, at_the_loop)):
                continue
            if any(overflow_conditions(x, at_the_loop) != () for x in found):
                continue
            name = self.namer.fresh("remainder")
            b, a = found
            terms[mod] = RunningRemainder(name, self.namer.fresh(f"{name}_step"), variable, mod, b, a, n)
            e = e.xreplace({mod: _remainder_symbol(name)})
        return e

    def address(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> str:
        return self.address_of(*self.resolve(ph, env, ranges, checks))

    def address_of(self, binding, offset, ranges: Ranges) -> str:
        """The address of ``offset`` elements into ``binding``, ``ranges`` what holds there."""
        if isinstance(binding, ScalarVariable):
            return f"&{binding.cname}"
        offset = simplify_index(offset, ranges)
        return binding.cname if offset == 0 else f"({binding.cname} + {self.cint(offset, ranges)})"

    def call_arguments(self, fn, out, args, env, ranges: Ranges, checks: list) -> list[str]:
        """The C arguments of a call of ``fn``: the destinations, then per argument its address
        and dims (an array) or its value."""
        texts = [self.call_address(fn, p.proj_path(out, path), True, env, ranges, checks)
                 for path, _ in p.record_leaves(p.data_of(out))]
        return texts + self.argument_texts(fn, args, env, ranges, checks)

    def argument_texts(self, fn, args, env, ranges: Ranges, checks: list) -> list[str]:
        """Per argument of a call of ``fn``, its address and dims (an array) or its value."""
        texts = []
        for a in args:
            data = p.data_of(a)
            if isinstance(data, p.Arr):
                texts.append(self.call_address(fn, a, False, env, ranges, checks))
                texts.extend(self.cint(self.rename(dim, env), ranges) for dim in p.dims_of(data))
            else:
                texts.append(self.exp(a, env, ranges, checks))
        return texts

    def call_address(self, fn, ph: p.Phrase, is_destination: bool, env: dict, ranges: Ranges, checks: list) -> str:
        """The address an array argument (or destination) of a call of ``fn`` is passed as."""
        return self.address(ph, env, ranges, checks)

    def exp(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> str:
        match ph:
            case p.Literal(value, p.Num(s)):
                return c_literal(value, s)
            case p.NatExp(value):
                return self.checked_size(self.rename(value, env), ranges, checks)
            case p.TargetFlag(macro):
                return macro
            case p.ScalarOp(op, args) if not isinstance(op, str):  # a foreign function's scalar result
                return f"{op.c_name}({', '.join(self.argument_texts(op, args, env, ranges, checks))})"
            case p.ScalarOp(op, args):
                texts = [self.exp(a, env, ranges, checks) for a in args]
                if paths.divides_unchecked(ph):
                    checks.append(Check(f"if ({texts[1]} == 0) {self.exit.fail(STATUS_DIVISION_BY_ZERO)}"))
                if paths.converts_to_index(ph):
                    # the cast is defined only in int64's range: test first (operand evaluated once)
                    if not re.fullmatch(r"[A-Za-z_]\w*", texts[0]):
                        name = self.namer.fresh("converted")
                        checks.append(Check(f"const {c_type(p.data_of(args[0]))} {name} = "
                                            f"{strip_parentheses(texts[0])};"))
                        texts[0] = name
                    checks.append(Check(f"if (!fs_int_fits_{_suffix(p.data_of(args[0]))}({texts[0]})) "
                                        f"{self.exit.fail(STATUS_INTEGER_CONVERSION)}"))
                fits = paths.arithmetic_fits(ph, env, ranges, self.size_names, self.arithmetic_values)
                if fits is None:
                    return self.checked_value(lambda flag: f"fs_checked_{op}_i64({', '.join(texts)}, &{flag})", checks)
                self.write_needs(fits, ranges, checks)
                return prims.prim(op).c.format(*texts, t=_suffix(p.data_of(args[0])))
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
            case p.CallCmd(fn, out, args) if not isinstance(fn, str):  # a foreign function writes out
                checks: list = []
                texts = self.call_arguments(fn, out, args, env, ranges, checks)
                return checks + [f"{fn.c_name}({', '.join(texts)});"]
            case p.Seq(cmds):
                return [line for cmd in cmds for line in self.comm(cmd, env, ranges)]
            case p.Assign(acc, e):
                checks: list = []
                rhs = self.exp(e, env, ranges, checks)
                lhs = self.lvalue(acc, env, ranges, checks)
                return checks + [f"{lhs} = {rhs};"]
            case p.New() if paths.integer_let(c, env):
                checks: list = []
                rest, inner, after = self.integer_let(c, env, ranges, checks)
                return checks + self.comm(rest, inner, after)
            case p.New(name, p.Arr() as data, body, None):
                # a small array of a constant size (fsmooth.dps.local_arrays): a local of the function
                cname = self.namer.fresh(name)
                return [f"{c_type(data)} {cname}[{p.elements(data)}];"] + self.comm(body, {**env, name: BufferVariable(cname)}, ranges)
            case p.New(name, data, body, None):
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
            case p.ParallelReduce():
                return self.reduction_loop(c, env, ranges)
            case p.ParFor(size, acc, index, out, elem, body) as c:
                n = self.rename(size, env)
                loop_var = p.Ident(index, p.ExpT(p.IdxT(size)))

                def with_out(inner: dict) -> dict:
                    return {**inner, out: Alias(p.Idx(acc, loop_var, elem, size), inner)}
                return self.parfor_loop(index, n, body, env, ranges, with_out, c.parallel)
            case p.IfCmd(cond, then, orelse):
                checks = []
                text = self.exp(cond, env, ranges, checks)
                then_ranges = paths.guarded(cond, env, ranges, self.size_names)
                lines = checks + [f"if ({strip_parentheses(text)}) {{"] + indent(self.comm(then, env, then_ranges))
                other = self.comm(orelse, env, ranges)
                return lines + (["} else {"] + indent(other) + ["}"] if other else ["}"])
            case p.DoubleBuffer(count, first, second, index, state, out, p.Rec() as data, body, after):
                return self.record_double_buffer(c, env, ranges)
            case p.DoubleBuffer(count, first, second, index, state, out, data, body, after):
                checks = []
                n = self.index(count, env, ranges, checks)
                t = c_type(data)
                s = self.namer.fresh(state)
                head = [f"{t} *{s} = {self.address(first, env, ranges, checks)};"]
                if first == second:  # one buffer: each iteration updates the state in place (dps.in_place)
                    inner, swap = {**env, state: BufferVariable(s), out: BufferVariable(s)}, []
                else:
                    o = self.namer.fresh(out)
                    head.append(f"{t} *{o} = {self.address(second, env, ranges, checks)};")
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

    def reduction_loop(self, c: p.ParallelReduce, env: dict, ranges: Ranges) -> list[str]:
        """The loop of a parallel reduction where its iterations run one after another: the
        accumulator, which holds the init, folds every element itself (one chunk of them all,
        where the body folds a chunk) and the partials stay unused.  A back end with threads
        overrides it."""
        checks: list = []
        n = self.index(c.count, env, ranges, checks)
        unused = [f"(void){self.resolve(partial, env, ranges, checks)[0].cname};" for partial in c.partials]
        if c.chunk is not None:
            whole = {c.index: SymbolicInteger(sympy.Integer(0)), c.chunk: SymbolicInteger(n)}
            return checks + unused + self.comm(c.body, {**env, **whole}, ranges)
        return checks + unused + self.loop(c.index, n, c.body, env, ranges)

    def loop(self, index, n, body, env, ranges, tail=(), scope=lambda inner: inner, pragmas=()) -> list[str]:
        """A sequential loop of ``index`` over 0 .. n-1, ``tail`` after the body in each iteration,
        ``pragmas`` the lines just before its ``for``.
        The count is checked where it may overflow (``checked_size``); the body's ranges keep its
        expression, which is its value wherever the loop runs.  The body's loop-invariant checks
        run once, before it (``dpia.loop_checks``), where the loop runs at least once: under
        ``if (0 < n)`` unless the ranges prove n ≥ 1."""
        count: list = []
        bound = strip_parentheses(self.checked_size(n, ranges, count))
        i = self.namer.fresh(index)
        inner_env, inner_ranges = scope({**env, index: ScalarVariable(i)}), ranges.inside(index_symbol(i), n - 1)
        # (a tail, a double buffer's swap, runs on every trip: none may be left out)
        guarded = self.guarded_trips(body, inner_env, inner_ranges, index_symbol(i), ranges) if not tail else None
        if guarded is not None:
            trips, body, inner_env, body_ranges = guarded
            bound = f"fs_min_i64({bound}, {trips})"
        before, bound = self.loop_count(bound)
        count += before
        running: dict = {}
        if self.options.reduce_strength:
            self.running.append((index_symbol(i), ranges, running))
        try:
            lines = self.comm(body, inner_env, body_ranges if guarded else inner_ranges) + list(tail)
        finally:
            if self.options.reduce_strength:
                self.running.pop()
        starts, updates = [], []
        for r in running.values():
            match r:
                case RunningTerm():
                    starts.append(f"int64_t {r.name} = {self.cint(r.start, ranges)};")
                    # wrapping: after the last trip the value may leave int64, and is not read
                    updates.append(f"{r.name} = (int64_t)((uint64_t){r.name} + "
                                   f"(uint64_t){self.cint(r.step, inner_ranges)});")
                case RunningRemainder():
                    starts += self.remainder_starts(r, ranges)
                    d, s = strip_parentheses(self.cint(r.divisor, ranges)), r.step_name
                    # r + s < 2n may not fit int64: compare first, then stay in 0 .. n-1
                    updates.append(f"{r.name} = {r.name} >= {d} - {s} ? {r.name} - ({d} - {s}) : {r.name} + {s};")
        lines += updates
        hoisted = []
        if self.options.hoist_checks:
            last = (None if sympy.sympify(n).is_number and not guarded else f"{bound} - 1" if count or guarded
                    else strip_parentheses(self.cint(n - 1, ranges)))
            moved, hoisted, lines = hoist_invariant_checks(lines, i, self.exit.status, last)
            changed = records_moved(moved, hoisted)
            self.range_checks = [changed.get(r, r) for r in self.range_checks]
        loop = starts + list(pragmas) + [f"for (int64_t {i} = 0; {i} < {bound}; {i}++) {{"] + indent(lines) + ["}"]
        # a loop of no trips computes no running remainder's start (a division)
        remainders = any(isinstance(r, RunningRemainder) for r in running.values())
        if (hoisted or remainders) and (guarded or not positive(n, ranges)):
            return count + [f"if (0 < {bound}) {{"] + indent(hoisted + loop) + ["}"]
        return count + hoisted + loop

    def integer_let(self, c: p.New, env: dict, ranges: Ranges, checks: list) -> tuple[p.Phrase, dict, Ranges]:
        """A ``new`` of an integer written once, at its start (``paths.integer_let``), not stored:
        the commands after its assignment, the environment in which its uses see its expression
        (which the loop ranges can then simplify: ``fsmooth.dps.ranges``) and the ranges past its
        checks, which go to ``checks``, here."""
        symbolic = paths.index(c.body.cmds[0].exp, env, ranges, self.size_names)
        self.write_needs(symbolic.needs, ranges, checks)
        return (p.seq(*c.body.cmds[1:]), {**env, c.name: SymbolicInteger(symbolic.expr)},
                paths.past_tests(symbolic.needs, ranges))

    def guarded_trips(self, body: p.Phrase, env: dict, ranges: Ranges, i: sympy.Symbol, outside: Ranges):
        """A loop body that tests an affine function of the loop's variable and does nothing
        where the test fails: integer lets with no checks, then ``if (A·i + r < b) P`` whose
        else-branch changes nothing (``acc := acc``), A > 0 a constant, r and b the same on
        every trip (the strided share of a work-item in ``fsmooth.auto_reductions``, lane t's
        elements 256·j + t of a row).  The trips whose test holds are the first ⌈(b − r)/A⌉:
        (that count in C, P, its environment and its ranges, those under the test), or None.
        The loop then runs those trips only and P without a test, each printed as before (the
        ranges of P stay those of the loop's own count and the test), so only trips that did
        nothing are left out.  A test in a loop kept NVIDIA's OpenCL compiler from unrolling
        it, and its loads then waited on each other: softmax's rows took 18% longer on an H200."""
        if not self.options.guards_to_bounds:
            return None
        while paths.integer_let(body, env):
            checks: list = []
            body, env, ranges = self.integer_let(body, env, ranges, checks)
            if checks:
                return None
        match body:
            case p.IfCmd(p.ScalarOp("lt", (a, b)) as cond, then, p.Skip() | p.Assign(p.Ident(), p.Ident()) as orelse) \
                    if orelse == p.Skip() or orelse.acc.name == orelse.exp.name:
                operands, checks = [paths.index(x, env, ranges, self.size_names) for x in (a, b)], []
                for x in operands:
                    self.write_needs(x.needs, ranges, checks)
                then_ranges = paths.guarded(cond, env, ranges, self.size_names)
                if then_ranges is ranges or checks:
                    return None
                e, bound = sympy.expand(simplify_index(operands[0].expr, ranges)), operands[1].expr
                step = e.coeff(i)
                rest = sympy.expand(e - step * i)
                if not (step.is_Integer and step > 0) or i in rest.free_symbols or i in bound.free_symbols \
                        or any(x.has(sympy.floor, sympy.ceiling, sympy.Mod) for x in (rest, bound)):
                    return None  # (a quotient in the count would leave the range analysis too little)
                # ≤ 0 where no trip's test holds (a C quotient or a floor alike); checked_size's
                # checks, where it cannot prove that the count fits, would be new failures
                trips = strip_parentheses(self.checked_size(sympy.floor((bound - rest + step - 1) / step), outside, checks))
                return None if checks else (trips, then, env, then_ranges)
        return None

    def loop_count(self, bound: str) -> tuple[list[str], str]:
        """The lines before a loop and what its condition compares with: here the count itself
        (a back end may compute it into a variable first)."""
        return [], bound

    def remainder_starts(self, r: RunningRemainder, ranges: Ranges) -> list[str]:
        """The declarations of a running remainder and its step before its loop (``ranges``):
        b mod n and a mod n, a division only where that is not b (a) itself, and 0 where n is
        0 (the body then fails before it reads the remainder, and the update keeps it 0): no
        division by 0 runs, and no more divisions than the loop's first trip did, but one for a
        step a ≥ n."""
        n = strip_parentheses(self.cint(r.divisor, ranges))

        def value(x: sympy.Expr) -> str:
            text = self.cint(x, ranges)
            return "0" if text == "0" else f"fs_running_mod_i64({strip_parentheses(text)}, {n})"
        return [f"int64_t {r.name} = {value(r.start)};", f"const int64_t {r.step_name} = {value(r.step)};"]

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
                               tuple(dict.fromkeys(self.range_checks)), k.threads, k.kept_length)


def _remainder_symbol(cname: str) -> sympy.Symbol:
    """The symbol of a running remainder's C variable: ≥ 0, as the remainder it stands for, so
    that an expression around it keeps C's plain ``%`` and ``/`` (``truncating_divisions``)."""
    return sympy.Symbol(cname, integer=True, nonnegative=True)


def _dims(dims) -> tuple:
    return tuple(_dims(d) if isinstance(d, tuple) else sympy.sympify(d) for d in dims)


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


