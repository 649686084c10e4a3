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
(``NonzeroDivisor``) and the check 0 ≤ index < length that DPS asked for (``InRange``: proven, or
tested at run time, the place's offset then standing on the tested index, ``InRange.tested``).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from fsmooth.dps.ranges import Ranges, in_range, positive, simplify_index
from fsmooth.errors import CompileError, Loc
from fsmooth.types import Card, Index

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


def expression_needs_a_test(ph: p.Phrase, env: dict, ranges: Ranges, sizes: dict) -> bool:
    """Whether code generation of the scalar expression ``ph`` writes a run-time test."""
    match ph:
        case p.Literal() | p.NatExp():
            return False
        case p.ScalarOp(_, args):
            return (divides_unchecked(ph) or converts_to_index(ph)
                    or any(expression_needs_a_test(a, env, ranges, sizes) for a in args))
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
        elif s.name in sizes:
            table[s] = index_symbol(sizes[s.name])
        else:
            raise CompileError(f"the size {s} is not in scope")
    return e.xreplace(table)


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
                proof = in_range(simplify_index(at, ranges), length, ranges)
                tested = None if proof is not None else sympy.Dummy("tested", integer=True)
                needs += (InRange(at, length, loc, proof, tested),)
                at = at if tested is None else tested
            return _resolve(arr, element_offset(at, rename(p.elements(elem), env, sizes), offset), env, ranges,
                            sizes, needs)
        case p.Shift(base, shift):
            return _resolve(base, rename(shift, env, sizes) + offset, env, ranges, sizes, needs)
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


def index(ph: p.Phrase, env: dict, ranges: Ranges, sizes: dict) -> Value:
    """The integer ``ph`` as an index expression: integer arithmetic stays symbolic, so the ranges
    can simplify it; anything else is ``Opaque``."""
    match ph:
        case p.Ident(name) if isinstance(env.get(name), ScalarVariable):
            return Value(index_symbol(env[name].cname), (Reads(env[name].cname),))
        case p.Ident(name) if isinstance(env.get(name), SymbolicInteger):
            return Value(env[name].expr, ())
        case p.Literal(value):
            return Value(sympy.Integer(int(value)), ())
        case p.NatExp(value):
            return Value(rename(value, env, sizes), ())
        case p.ScalarOp("add" | "sub" | "mul" | "neg" | "min" | "max" as op, args) if integral(p.data_of(ph)):
            parts = [index(a, env, ranges, sizes) for a in args]
            xs = [part.expr for part in parts]
            expr = {"add": lambda: xs[0] + xs[1], "sub": lambda: xs[0] - xs[1],
                    "mul": lambda: xs[0] * xs[1], "neg": lambda: -xs[0],
                    "min": lambda: sympy.Min(*xs), "max": lambda: sympy.Max(*xs)}[op]()
            return Value(expr, sum((part.needs for part in parts), ()))
        case p.ScalarOp("to_Index", (arg,)) if integral(p.data_of(arg)):
            return index(arg, env, ranges, sizes)
        case p.ScalarOp("floordiv" | "mod" as op, (num, den), _, nonzero) if integral(p.data_of(num)):
            # Python's floor semantics are sympy's: kept symbolic, the loop ranges may
            # remove the division (fsmooth.dps.ranges); the zero test stays unless they prove d ≥ 1.
            x, d = index(num, env, ranges, sizes), index(den, env, ranges, sizes)
            needs = x.needs + d.needs
            if not nonzero and not positive(d.expr, ranges):
                needs += (NonzeroDivisor(d.expr),)
            if d.expr.is_zero:  # the test above always fails: sympy's quotient would be zoo
                return Value(sympy.Integer(0), needs)
            expr = sympy.floor(x.expr / d.expr) if op == "floordiv" else sympy.Mod(x.expr, d.expr)
            return Value(expr, needs)
    symbol = sympy.Dummy("opaque", integer=True)
    return Value(symbol, (Opaque(symbol, ph, env),))


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
