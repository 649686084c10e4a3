"""Index paths (DPIA paper Fig. 6): from an acceptor or expression phrase to the place it denotes,
a buffer (or scalar) and one offset into it, and the run-time checks that reaching it needs.

Plain functions over (phrase, environment η, ``Ranges``), asked by the code generation that prints
the place (``dpia.emit``) and by the vectorisation pass that decides, before anything is printed,
whether the lanes' places are contiguous and check-free (``dpia.vectorize``).  The environment
binds each identifier of the phrase to what it is in the code (``ScalarVariable``,
``BufferVariable``, ...), named as the code names it; ``sizes`` maps each size symbol of the
kernel to its name there.  Index arithmetic stays symbolic (sympy), so the range analysis
(``fsmooth.dps.ranges``) can simplify it and prove checks away.

What a place or an index needs is a tuple of ``Need``s, in the order code generation meets them:
a scalar variable it reads (``Reads``), a value index arithmetic cannot see (``Opaque``: a read of
an array, a call), computed as an expression where it is needed, a nonzero test of a divisor
(``NonzeroDivisor``), sizes whose fitting int64 proves that index arithmetic cannot overflow
(``FitsInt64``, tested before the body) and the check 0 ≤ index < length that DPS asked for (``InRange``: proven, or
tested at run time, the place's offset then standing on the tested index, ``InRange.tested``).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from fsmooth.dps.ranges import (Ranges, checked_parts, in_range, nonnegative, overflow_conditions, positive,
                                simplify_index, substitute)
from fsmooth import prims
from fsmooth.errors import CompileError, Loc
from fsmooth.artifact import result_components
from fsmooth.types import ArrayT, Card, Index

from . import phrases as p

# ----------------------------------------------------------------------------- the environment η


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


def index_symbol(cname: str) -> sympy.Symbol:
    """The integer symbol that stands for the C variable ``cname`` in index expressions."""
    return sympy.Symbol(cname, integer=True)


# ----------------------------------------------------------------------------- what a path needs


@dataclass(frozen=True)
class Reads:
    """The path reads the scalar variable ``cname``."""

    cname: str


@dataclass(frozen=True)
class Opaque:
    """``symbol`` stands for the integer value of the expression ``phrase`` (in ``env``), which
    index arithmetic cannot see into: code generation computes it where it is needed."""

    symbol: sympy.Symbol
    phrase: p.Phrase
    env: dict


@dataclass(frozen=True)
class FitsInt64:
    """Integer arithmetic is computed plainly where these values, in sizes alone, fit int64: the
    bounds over the loops of what it computes on the way (``fsmooth.dps.ranges.overflow_conditions``).
    The kernel tests them once, before its body, and fails with an OverflowError where one does not
    fit, instead of testing every iteration's arithmetic."""

    values: tuple


@dataclass(frozen=True)
class NonzeroDivisor:
    """A run-time test that the integer ``divisor`` is not 0 (the ranges do not prove it ≥ 1)."""

    divisor: sympy.Expr


@dataclass(frozen=True)
class InRange:
    """The check 0 ≤ ``index`` < ``length`` that DPS asked for at ``loc``: ``proof`` where the range
    analysis proves it, else a run-time test, and the place's offset has ``tested`` where the
    index is (code generation puts the index, or a variable holding it, there)."""

    index: sympy.Expr
    length: sympy.Expr
    loc: Loc | None
    proof: object  # fsmooth.dps.ranges.Proof | None
    tested: sympy.Symbol | None


@dataclass(frozen=True)
class Value:
    """An integer as an index expression over C names, and what computing it needs."""

    expr: sympy.Expr
    needs: tuple


@dataclass(frozen=True)
class Place:
    """The buffer or scalar a phrase denotes, the offset of its element, and what reaching it needs."""

    binding: object
    offset: sympy.Expr
    needs: tuple


def kernel_bindings(k: p.ImperativeKernel, buffers) -> tuple[dict, dict, Ranges]:
    """Where a walk of ``k``'s planned OpenCL kernels starts, as code generation's does: each size
    symbol's name (``rename``), the bindings of its parameters, its result's components and its
    hoisted ``buffers`` (names), and the ranges in which every size is a natural number."""
    sizes = {s.name: s.name for s in k.sizes}  # phrase names stand for C names: each size keeps its own
    env: dict = {name: BufferVariable(name) if isinstance(ty, ArrayT) else ScalarVariable(name)
                 for name, ty, _ in k.params}
    env |= {f"{k.dest}{suffix}": BufferVariable(f"{k.dest}{suffix}")
            for suffix, _, _ in result_components(k.result, k.result_dims)}
    env |= {name: BufferVariable(name) for name in buffers}
    return sizes, env, Ranges(naturals=frozenset(index_symbol(name) for name in sizes.values()))


def past_tests(needs: tuple, ranges: Ranges) -> Ranges:
    """The ranges past the run-time tests of ``needs`` (written in their order): a divisor tested
    nonzero is ≥ 1 there where it is ≥ 0 (``Ranges.tested_nonzero``), so that ``v[i % length(v)]``
    is in range and its ``%`` is C's own once its zero test has passed."""
    for need in needs:
        if isinstance(need, NonzeroDivisor):
            ranges = ranges.tested_nonzero(need.divisor)
    return ranges


def needs_a_test(needs: tuple, ranges: Ranges, sizes: dict) -> bool:
    """Whether code generation of something that needs ``needs`` writes a run-time test."""
    for need in needs:
        match need:
            case NonzeroDivisor():
                return True
            case InRange(proof=None):
                return True
            case Opaque(_, phrase, env) if expression_needs_a_test(phrase, env, ranges, sizes):
                return True
    return False


def expression_needs_a_test(ph: p.Phrase, env: dict, ranges: Ranges, sizes: dict, memo: dict | None = None) -> bool:
    """Whether code generation of the scalar expression ``ph`` writes a run-time test (``memo``:
    as ``index``'s, one for the whole expression unless given)."""
    memo = {} if memo is None else memo
    match ph:
        case p.Literal() | p.NatExp():
            return False
        case p.ScalarOp(_, args):
            return (divides_unchecked(ph) or converts_to_index(ph) or may_overflow(ph, env, ranges, sizes, memo)
                    or any(expression_needs_a_test(a, env, ranges, sizes, memo) for a in args))
        case p.Ident(name) if isinstance(env.get(name), SymbolicInteger):
            return False
        case p.Ident() | p.Idx() | p.Shift() | p.Proj():
            return needs_a_test(resolve(ph, env, ranges, sizes).needs, ranges, sizes)
    raise AssertionError(f"not a scalar expression: {ph}")


def divides_unchecked(ph: p.ScalarOp) -> bool:
    """Whether ``ph`` is a ``//`` or ``%`` whose divisor is not known to be nonzero: the
    expression tests it at run time."""
    return ph.op in ("floordiv", "mod") and not ph.nonzero_divisor


def converts_to_index(ph: p.ScalarOp) -> bool:
    """Whether ``ph`` is ``int(x)`` of a float: defined in C only where x fits int64, tested at run time."""
    return ph.op == "trunc_to_Index"


# ----------------------------------------------------------------------------- paths


def rename(e, env: dict, sizes: dict) -> sympy.Expr:
    """A DPS/DPIA size expression with its symbols replaced by C-named symbols."""
    e = sympy.sympify(e)
    table = {}
    for s in e.free_symbols:
        binding = env.get(s.name)
        if isinstance(binding, ScalarVariable):
            table[s] = index_symbol(binding.cname)
        elif isinstance(binding, SymbolicInteger):  # a loop counted by an integer let (a jammed element's index)
            table[s] = binding.expr
        elif s.name in sizes:
            table[s] = index_symbol(sizes[s.name])
        else:
            raise CompileError(f"the size {s} is not in scope")
    return substitute(e, table)


def resolve(ph: p.Phrase, env: dict, ranges: Ranges, sizes: dict) -> Place:
    """The place ``ph`` denotes: Fig. 6's index path, flattened to one offset."""
    return _resolve(ph, sympy.Integer(0), env, ranges, sizes, ())


def _resolve(ph: p.Phrase, offset, env: dict, ranges: Ranges, sizes: dict, needs: tuple) -> Place:
    match ph:
        case p.Ident(name):
            binding = env[name]
            if isinstance(binding, Alias):
                return _resolve(binding.phrase, offset, binding.env, ranges, sizes, needs)
            return Place(binding, offset, needs)
        case p.Idx(p.AsScalar(vector), p.Literal(lane)):
            # lane k of a vector variable: its component, named as OpenCL C names it (x.sk)
            place = _resolve(vector, sympy.Integer(0), env, ranges, sizes, needs)
            return Place(ScalarVariable(f"{place.binding.cname}.s{lane:x}"), offset, place.needs)
        case p.Idx(arr, index_phrase, elem, length, checked, loc):
            i = index(index_phrase, env, ranges, sizes)
            needs += i.needs
            at = i.expr
            if checked:
                length = rename(length, env, sizes)
                tested_ranges = past_tests(needs, ranges)  # the tests of needs come first
                proof = in_range(simplify_index(at, tested_ranges), length, tested_ranges)
                tested = None if proof is not None else sympy.Dummy("tested", integer=True)
                needs += (InRange(at, length, loc, proof, tested),)
                at = at if tested is None else tested
            return _resolve(arr, element_offset(at, rename(p.elements(elem), env, sizes), offset), env, ranges,
                            sizes, needs)
        case p.Shift(base, shift, _, stride):
            return _resolve(base, rename(shift, env, sizes) + offset * rename(stride, env, sizes), env, ranges,
                            sizes, needs)
        case p.Proj(tup, component_index):
            record = _resolve(tup, sympy.Integer(0), env, ranges, sizes, needs)
            assert isinstance(record.binding, RecordVariable) and record.offset == 0, (ph, record.binding)
            component = record.binding.items[component_index]
            if isinstance(component, Alias):
                return _resolve(component.phrase, offset, component.env, ranges, sizes, record.needs)
            return Place(component, offset, record.needs)
    raise AssertionError(f"not a location: {ph}")


def element_offset(index: sympy.Expr, elem_size: sympy.Expr, inner: sympy.Expr) -> sympy.Expr:
    """The offset of scalar ``inner`` of element ``index`` of an array whose elements hold
    ``elem_size`` scalars each: Fig. 6's path [index, ...] in a row-major layout."""
    return index * elem_size + inner


def index(ph: p.Phrase, env: dict, ranges: Ranges, sizes: dict, memo: dict | None = None) -> Value:
    """The integer ``ph`` as an index expression: integer arithmetic stays symbolic, so the ranges
    can simplify it, where it cannot overflow int64 (``may_overflow``); anything else is
    ``Opaque``, computed as the program says (with checked arithmetic where it may overflow).

    ``memo`` keeps the values found, by phrase, environment and ranges, for an analysis that asks
    about every operation of a deep expression (``arithmetic_fits`` as code generation meets each):
    each operand's value is found once, not once per enclosing operation, and an opaque operand
    keeps one symbol, as it has one value."""
    if memo is None:
        return _index(ph, env, ranges, sizes, None)
    key = (id(ph), id(env), ranges)
    if key not in memo:  # ph and env kept with the value, so that their ids are not reused
        memo[key] = (ph, env, _index(ph, env, ranges, sizes, memo))
    return memo[key][2]


def _index(ph: p.Phrase, env: dict, ranges: Ranges, sizes: dict, memo: dict | None) -> Value:
    match ph:
        case p.Ident(name) if isinstance(env.get(name), ScalarVariable):
            return Value(index_symbol(env[name].cname), (Reads(env[name].cname),))
        case p.Ident(name) if isinstance(env.get(name), SymbolicInteger):
            return Value(env[name].expr, ())
        case p.Literal(value):
            return Value(sympy.Integer(int(value)), ())
        case p.NatExp(value) if (fits := _fits(renamed := rename(value, env, sizes), ranges)) is not None:
            return Value(renamed, fits)
        case p.ScalarOp("to_Index", (arg,)) if integral(p.data_of(arg)):
            return index(arg, env, ranges, sizes, memo)
        case p.ScalarOp(op, _) if op in SYMBOLIC and integral(p.data_of(ph)):
            value = _arithmetic(ph, env, ranges, sizes, memo)
            # sympy's algebra is that of unbounded integers: (a·b)//b is a only where a·b fits
            fits = _fits(value.expr, ranges) if op in prims.MAY_OVERFLOW else ()
            if fits is not None:
                return Value(value.expr, value.needs + fits)
    symbol = sympy.Dummy("opaque", integer=True)
    return Value(symbol, (Opaque(symbol, ph, env),))


SYMBOLIC = ("add", "sub", "mul", "neg", "min", "max", "floordiv", "mod")


def _arithmetic(ph: p.ScalarOp, env: dict, ranges: Ranges, sizes: dict, memo: dict | None) -> Value:
    """The integer operation ``ph`` (one of ``SYMBOLIC``) over the index expressions of its operands."""
    parts = [index(a, env, ranges, sizes, memo) for a in ph.args]
    xs, needs = [part.expr for part in parts], sum((part.needs for part in parts), ())
    match ph.op:
        case "floordiv" | "mod":
            # Python's floor semantics are sympy's: kept symbolic, the loop ranges may
            # remove the division (fsmooth.dps.ranges); the zero test stays unless they prove d ≥ 1.
            x, d = xs
            if not ph.nonzero_divisor and not positive(d, past_tests(needs, ranges)):
                needs += (NonzeroDivisor(d),)
            if d.is_zero:  # the test above always fails: sympy's quotient would be zoo
                return Value(sympy.Integer(0), needs)
            return Value(sympy.floor(x / d) if ph.op == "floordiv" else sympy.Mod(x, d), needs)
    expr = {"add": lambda: xs[0] + xs[1], "sub": lambda: xs[0] - xs[1], "mul": lambda: xs[0] * xs[1],
            "neg": lambda: -xs[0], "min": lambda: sympy.Min(*xs), "max": lambda: sympy.Max(*xs)}[ph.op]()
    return Value(expr, needs)


def arithmetic_fits(ph: p.Phrase, env: dict, ranges: Ranges, sizes: dict, memo: dict | None = None) -> tuple | None:
    """None where ``ph`` is the program's integer arithmetic whose int64 result may not fit where
    it is computed: code generation computes it with checked arithmetic, which fails the call
    there (an OverflowError, as in a reference run).  Else what its plain computation needs: a
    ``FitsInt64`` where the ranges bound it by sizes that the kernel tests before its body.
    ``memo``: as ``index``'s, where every operation of an expression is asked about."""
    match ph:
        case p.ScalarOp("abs", (arg,)) if integral(p.data_of(ph)):
            return () if nonnegative(index(arg, env, ranges, sizes, memo).expr, ranges) else None
        case p.ScalarOp(op, _) if op in prims.MAY_OVERFLOW and integral(p.data_of(ph)):
            return _fits(_arithmetic(ph, env, ranges, sizes, memo).expr, ranges)
    return ()


def may_overflow(ph: p.Phrase, env: dict, ranges: Ranges, sizes: dict, memo: dict | None = None) -> bool:
    """Whether code generation computes ``ph`` with checked arithmetic (``arithmetic_fits``)."""
    return arithmetic_fits(ph, env, ranges, sizes, memo) is None


def _fits(e: sympy.Expr, ranges: Ranges) -> tuple | None:
    conditions = overflow_conditions(e, ranges)
    return None if conditions is None else ((FitsInt64(conditions),) if conditions else ())


def body_ranges(size_names, checked: list) -> Ranges:
    """What is known at the start of a kernel's body: its sizes (``size_names``, as the code names
    them) are ≥ 0, and the expressions of them that the size check computed before the call
    (``checked``: result dims, the scratch size), and the values on their way, fit int64."""
    naturals = frozenset(index_symbol(c) for c in size_names)
    fitting = [*naturals, *(x for e in checked for x in checked_parts(e))]
    return Ranges(naturals=naturals, fitting=tuple(dict.fromkeys(fitting)))


def guarded(cond: p.Phrase, env: dict, ranges: Ranges, sizes: dict) -> Ranges:
    """The ranges inside ``if (cond)``: for ``e < b``, e's upper bound b - 1, so that a guarded
    read ``a[e] if e < length(a) else ...`` needs no second, run-time check."""
    match cond:
        case p.ScalarOp("lt", (a, b)) if integral(p.data_of(a)) and all(is_size_arithmetic(x, env) for x in (a, b)):
            e, bound = (simplify_index(index(x, env, ranges, sizes).expr, ranges) for x in (a, b))
            return ranges.given(e, bound - 1)
    return ranges


def integer_let(c: p.Phrase, env: dict) -> bool:
    """Whether ``c`` is ``new`` of an integer written once, at its start, with index arithmetic
    (not an ifold's accumulator): code generation keeps such a let symbolic (``SymbolicInteger``)."""
    match c:
        case p.New(name, data, p.Seq((p.Assign(p.Ident(target), value), *rest)), None):
            return (target == name and integral(data) and is_size_arithmetic(value, env)
                    and not any(_writes(cmd, name) for cmd in rest))
    return False


def is_size_arithmetic(ph: p.Phrase, env: dict) -> bool:
    """Integer arithmetic that ``index`` keeps symbolic (no reads, no calls)."""
    match ph:
        case p.Ident(name):
            return isinstance(env.get(name), (ScalarVariable, SymbolicInteger)) and integral(p.data_of(ph))
        case p.Literal(_, data):
            return integral(data)
        case p.NatExp():
            return True
        case p.ScalarOp("add" | "sub" | "mul" | "neg" | "min" | "max" | "floordiv" | "mod" | "to_Index", args):
            return integral(p.data_of(ph)) and all(is_size_arithmetic(a, env) for a in args)
    return False


def integral(d: p.Data) -> bool:
    return isinstance(d, p.IdxT) or (isinstance(d, p.Num) and d.scalar in (Index, Card))


def _writes(c: p.Phrase, name: str) -> bool:
    """Whether command ``c`` writes the variable ``name``."""
    for sub in p.walk(c):
        match sub:
            case p.Assign(p.Ident(target)) | p.CallCmd(_, p.Ident(target)) if target == name:
                return True
    return False
