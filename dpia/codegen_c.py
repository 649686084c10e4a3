"""Imperative DPIA → C99 (DPIA paper Fig. 6), per the ABI of ``fsmooth.artifact``.

Commands become statements, acceptors l-values and expressions r-values; identifiers resolve
through the environment η to C names, and index paths to one offset into a flat buffer
(``dpia.index``), simplified with the ranges of the enclosing loops.  Every binder gets its own C
name (``Namer``), so ``new`` needs no block: C99 declarations go where the variable starts.

Run-time checks return a status (``fsmooth.artifact.STATUS``) from the kernel: 1 for a checked
read out of range, 2 for an integer ``//``/``%`` by zero, 3 for violated size constraints.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import sympy

from fsmooth import prims
from fsmooth.artifact import CArtifact, Constraint, KernelInterface, SizeSource
from fsmooth.errors import CompileError
from fsmooth.options import Options
from fsmooth.types import C_TYPE, ArrayT, Card, Index, Scalar

from . import phrases as p
from .index import Ranges, element_offset, simplify_index

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary
""".split())
# Object-like macros and typedefs that the runtime header's includes bring into scope.
HEADER_NAMES = frozenset("""
bool true false NULL NAN INFINITY HUGE_VAL HUGE_VALF HUGE_VALL EOF errno math_errhandling
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t intmax_t
uintmax_t size_t ptrdiff_t float_t double_t
""".split())
_LIMIT_MACRO = re.compile(r"^U?INT\w*_(MIN|MAX|C)$|^(SIZE|PTRDIFF|SIG_ATOMIC|WCHAR|WINT)_\w+$|^FP_\w+$|^MATH_\w+$")
# The exported kernels' own names are global too: the names a kernel may not have.
_MATH_FUNCTIONS = frozenset("""
acos asin atan atan2 cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 fabs fdim floor fma fmax
fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 log1p log2 logb lrint lround
modf nan nearbyint nextafter nexttoward pow remainder remquo rint round scalbln scalbn sin sinh
sqrt tan tanh tgamma trunc isnan isinf isfinite signbit fpclassify isnormal main
""".split())

STATUS_OUT_OF_RANGE = 1
STATUS_DIVISION_BY_ZERO = 2
STATUS_SIZES = 3


def _reserved(name: str) -> bool:
    return (name in C_KEYWORDS or name in HEADER_NAMES or name.startswith("fs_")
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
    def __init__(self, k: p.ImperativeKernel, globals_: frozenset):
        self.k = k
        self.namer = Namer(globals_ | {"scratch", "out"})
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
        return c_int(simplify_index(e, ranges), self.size_name)

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
                if checked:
                    text = self.cint(i, ranges)
                    if not re.fullmatch(r"[A-Za-z_]\w*|-?\d+", text):
                        # evaluated once, for the test and for the read
                        name = self.namer.fresh("index")
                        checks.append(f"const int64_t {name} = {_strip(text)};")
                        i, text = _sym(name), name
                    bound = self.cint(self.rename(length, env), ranges)
                    checks.append(f"if (!(0 <= {text} && {text} < {bound})) return {STATUS_OUT_OF_RANGE};")
                return self.resolve(arr, element_offset(i, elem, offset), env, ranges, checks)
            case p.Shift(base, shift):
                return self.resolve(base, self.rename(shift, env) + offset, env, ranges, checks)
        raise AssertionError(f"not a location: {ph}")

    def index(self, ph: p.Phrase, env: dict, ranges: Ranges, checks: list) -> sympy.Expr:
        match ph:
            case p.Ident(name) if isinstance(env.get(name), _Scalar):
                self.reads[env[name].cname] = True
                return _sym(env[name].cname)
            case p.Literal(value):
                return sympy.Integer(int(value))
            case p.NatExp(value):
                return self.rename(value, env)
            case p.ScalarOp("add" | "sub" | "mul" | "neg" as op, args):
                xs = [self.index(a, env, ranges, checks) for a in args]
                return {"add": lambda: xs[0] + xs[1], "sub": lambda: xs[0] - xs[1],
                        "mul": lambda: xs[0] * xs[1], "neg": lambda: -xs[0]}[op]()
        symbol = sympy.Dummy("opaque", integer=True)
        self.opaque[symbol] = f"({self.exp(ph, env, ranges, checks)})"
        return symbol

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
                    checks.append(f"if ({texts[1]} == 0) return {STATUS_DIVISION_BY_ZERO};")
                return prims.PRIMS[op].c.format(*texts, t=_suffix(p.data_of(args[0])))
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
            case p.New(name, data, body, None):
                assert isinstance(data, p.Num), f"array {name} outside the arena"
                cname = self.namer.fresh(name)
                lines = self.comm(body, {**env, name: _Scalar(cname)}, ranges)
                unused = [] if self.reads.get(cname) else [f"(void){cname};"]
                return [f"{_ctype(data)} {cname};"] + lines + unused
            case p.New(name, data, body, offset):
                cname = self.namer.fresh(name)
                t = _ctype(data)
                where = self.cint(self.rename(offset, env), ranges)
                lines = self.comm(body, {**env, name: _Buffer(cname)}, ranges)
                return [f"{t} *{cname} = ({t} *)((char *)scratch + {where});"] + lines
            case p.For(count, index, body):
                checks = []
                n = self.index(count, env, ranges, checks)
                return checks + self._loop(index, n, body, env, ranges)
            case p.ParFor(size, acc, index, out, elem, body):
                n = self.rename(size, env)
                loop_var = p.Ident(index, p.ExpT(p.IdxT(size)))

                def with_out(inner: dict) -> dict:
                    return {**inner, out: _Alias(p.Idx(acc, loop_var, elem, size), inner)}
                return self._loop(index, n, body, env, ranges, scope=with_out)
            case p.IfCmd(cond, then, orelse):
                checks = []
                text = self.exp(cond, env, ranges, checks)
                lines = checks + [f"if ({_strip(text)}) {{"] + _indent(self.comm(then, env, ranges))
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
        scratch = "scratch" if offset == "0" else f"(char *)scratch + {offset}"
        return checks + [f"{{ int fs_status = {fn}({', '.join([scratch] + texts)});",
                         "  if (fs_status != 0) return fs_status; }"]

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
        unused = ["(void)scratch;"] + [f"(void){self.param_names[n]};" for n, _, _ in k.params]
        unused += [f"(void){name};" for name in self.dim_names.values()]
        out = []
        out.append(f"void {k.name}_shape(int64_t *dims_out{', ' + sizes if sizes != 'void' else ''}) {{")
        out += _indent(["(void)dims_out;"] + void_sizes + shape) + ["}", ""]
        out.append(f"int64_t {k.name}_scratch_bytes({sizes}) {{")
        out += _indent(void_sizes + [f"return {_strip(self.cint(k.scratch, {}))};"]) + ["}", ""]
        out.append(f"int {k.name}_check_sizes({sizes}) {{")
        out += _indent(void_sizes + checks + ["return 0;"]) + ["}", ""]
        out.append(f"static {self.signature(True, f'{k.name}_body')} {{")
        out += _indent(unused + body + ["return 0;"]) + ["}", ""]
        out.append(f"{self.signature(True)} {{")
        out += _indent([f"if ({k.name}_check_sizes({self.size_args()}) != 0) return {STATUS_SIZES};",
                        f"return {k.name}_body({', '.join(self.call_args())});"])
        out.append("}")
        return "\n".join(out)

    def interface(self) -> KernelInterface:
        k = self.k
        constraints = tuple(Constraint(c_condition(c.cond, self.size_name), c.param, c.message)
                            for c in k.constraints)
        return KernelInterface(k.name, tuple((n, t) for n, t, _ in k.params), k.result, self.sources,
                               constraints, str(k.scratch), tuple(str(d) for d in k.result_dims))


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


def generate_c(prog: p.ImperativeProgram, options: Options = Options()) -> CArtifact:
    globals_ = _check_exported_names(prog)
    emitters = [_KernelEmitter(k, globals_) for k in prog.kernels.values()]
    header = ["/* Generated by fsmooth from the kernel '" + prog.entry + "' and the kernels it calls.",
              " * ABI: see fsmooth/artifact.py.  Status codes: 0 ok, 1 index out of range,",
              " * 2 integer division by zero, 3 size constraint violated. */",
              '#include "fsmooth_rt.h"', "", "/* ---- exported functions */"]
    for e in emitters:
        header += e.prototypes(restrict=True)
    header += ["", "/* ---- internal: the kernels without their size checks */"]
    header += [f"static {e.signature(True, e.k.name + '_body')};" for e in emitters]
    parts = ["\n".join(header)]
    for e in emitters:
        parts.append(f"/* ---- {e.k.name} */\n{e.definitions()}")
    source = "\n\n".join(parts) + "\n"
    cdef = "\n".join(line for e in emitters for line in e.prototypes(restrict=False)) + "\n"
    return CArtifact(source, cdef, {e.k.name: e.interface() for e in emitters})

