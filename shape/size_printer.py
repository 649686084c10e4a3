"""Size expressions and size conditions (sympy, over the size symbols of ``shape.sizes``) as text
of a target language: C and OpenCL C (exact int64 with the helpers of ``clib/fsmooth_scalar.h``;
``C_CHECKED`` for the size checks before a call, ``overflow_checked_c`` for a size computed in a
kernel body), Python (exact integers; ``PYTHON_CHECKED``, within int64 as ``C_CHECKED``, for the
OpenCL launcher's host-side size functions) and JSON (a tree for the embed manifest).

One walk over the expression (``print_size``, ``print_condition``) serves every target; a
``SizeTarget`` says how each operation is written.  Integer divisions come in three kinds:
``floor``/``ceiling`` of a quotient (floor or ceiling division with any signs), a fraction whose
value is known to be an integer (a size formula such as ``n*(n + 1)/2``), and the quotients and
remainders that an index computation has proven to have a nonnegative dividend and a positive
divisor (``NonnegativeQuotient``, ``NonnegativeMod``), where C's truncating ``/`` and ``%`` are
right.  Where the divisor is a positive power of two, C divides by shifting and takes the
remainder by masking (``SizeTarget.shift_quotient``, ``mask_modulo``): the same value for every
dividend, without the general helper's division and sign tests.
"""
from __future__ import annotations

import dataclasses
import json
import operator
from dataclasses import dataclass
from typing import Callable

import sympy

from fsmooth.errors import CompileError

from .sizes import fraction


class NonnegativeMod(sympy.Function):
    """Mod(a, d) where a ≥ 0 and d ≥ 1 are proven: there C's ``%`` is Python's, no helper needed."""


class NonnegativeQuotient(sympy.Function):
    """floor(a / d) where a ≥ 0 and d ≥ 1 are proven: there C's ``/`` is Python's ``//``."""


@dataclass(frozen=True)
class SizeTarget:
    """How one target writes each operation of a size expression.  Templates take the printed
    operands as ``{0}``, ``{1}``; a sum, product, minimum or maximum of several operands, and a
    conjunction or disjunction, fold left over them and ``group`` wraps the fold once."""

    name: str
    integer: Callable[[int], str]
    symbol: Callable[[str], str]
    group: str
    add: str
    subtract: str
    multiply: str
    negate: str
    exact_quotient: str  # num / den where den is a positive integer constant dividing num
    quotient: str  # num / den, den symbolic: a size that is an integer
    floor_quotient: str
    ceiling_quotient: str
    modulo: str  # the sign of the divisor, as Python's %
    truncating_quotient: str  # NonnegativeQuotient
    truncating_modulo: str  # NonnegativeMod
    maximum: str
    minimum: str
    relations: dict  # sympy relation class -> template
    conjunction: str
    disjunction: str
    negation: str
    true: str
    false: str
    select: str  # {1} where the condition {0} holds, else {2} (sympy.Piecewise)
    # where the divisor is a constant 2**k (k >= 1), any quotient above (exact, floor, proven
    # nonnegative) as {0} shifted right by k = {1}, and any remainder (modulo, truncating modulo)
    # as {0} masked by 2**k - 1 = {1}; None: the templates above
    shift_quotient: str | None = None
    mask_modulo: str | None = None


_RELATION_SYMBOLS = {sympy.GreaterThan: ">=", sympy.StrictGreaterThan: ">", sympy.LessThan: "<=",
                     sympy.StrictLessThan: "<", sympy.Equality: "==", sympy.Unequality: "!="}

C = SizeTarget(
    name="C",
    integer=lambda n: str(n) if abs(n) < 2**31 else f"INT64_C({n})",
    symbol=lambda name: name,
    group="({0})", add="{0} + {1}", subtract="{0} - {1}", multiply="{0} * {1}", negate="(-{0})",
    # the size is an integer, so num is a multiple of den: truncation is exact
    exact_quotient="({0} / {1})", quotient="fs_floordiv_i64({0}, {1})",
    floor_quotient="fs_floordiv_i64({0}, {1})", ceiling_quotient="fs_ceildiv_i64({0}, {1})",
    modulo="fs_mod_i64({0}, {1})", truncating_quotient="({0} / {1})", truncating_modulo="({0} % {1})",
    maximum="fs_max_i64({0}, {1})", minimum="fs_min_i64({0}, {1})",
    relations={r: f"({{0}} {op} {{1}})" for r, op in _RELATION_SYMBOLS.items()},
    conjunction="{0} && {1}", disjunction="{0} || {1}", negation="(!{0})", true="1", false="0",
    select="({0} ? {1} : {2})",
    # floor(a / 2**k) and Python's a % 2**k for every a, neither overflowing nor testing a sign
    # (clib/fsmooth_scalar.h: an arithmetic shift and a mask)
    shift_quotient="fs_shift_floor_i64({0}, {1})", mask_modulo="fs_mask_mod_i64({0}, {1})",
)

# C whose every operation is checked (clib/fsmooth_rt.h): an overflow or a division by zero gives
# FS_SIZE_POISON, passed on by every operation and failing every relation.  The shape, scratch
# and size-check functions use it, so sizes that overflow are refused before anything runs.
C_CHECKED = dataclasses.replace(
    C, name="checked C",
    add="fs_size_add({0}, {1})", subtract="fs_size_sub({0}, {1})", multiply="fs_size_mul({0}, {1})",
    negate="fs_size_neg({0})",
    exact_quotient="fs_size_floordiv({0}, {1})", quotient="fs_size_floordiv({0}, {1})",
    floor_quotient="fs_size_floordiv({0}, {1})", ceiling_quotient="fs_size_ceildiv({0}, {1})",
    modulo="fs_size_mod({0}, {1})", truncating_quotient="fs_size_floordiv({0}, {1})",
    truncating_modulo="fs_size_mod({0}, {1})", maximum="fs_size_max({0}, {1})", minimum="fs_size_min({0}, {1})",
    relations={r: f"fs_size_{name}({{0}}, {{1}})" for r, name in (
        (sympy.GreaterThan, "ge"), (sympy.StrictGreaterThan, "gt"), (sympy.LessThan, "le"),
        (sympy.StrictLessThan, "lt"), (sympy.Equality, "eq"), (sympy.Unequality, "ne"))},
    shift_quotient=None, mask_modulo=None,  # a shift or a mask would not pass FS_SIZE_POISON on
    # a condition on a poisoned size fails, so the value is the other's, which passes the poison on
    # where it comes from those sizes; int64_t: a choice of two small constants is still a size
    select="((int64_t)({0} ? {1} : {2}))",
)


def overflow_checked_c(flag: str) -> SizeTarget:
    """C (and OpenCL C) that computes a size exactly or sets the ``bool`` variable ``flag``
    (``fs_checked_*_i64`` in clib/fsmooth_scalar.h): for a size computed inside a kernel body,
    whose every value, INT64_MIN included, is a size, so no value can be the poison.  Only the
    operations that can overflow are checked: a proven quotient or remainder, an exact quotient
    by a positive constant, a minimum and a maximum cannot."""
    def checked(name: str, arity: int = 2) -> str:
        operands = ", ".join(f"{{{k}}}" for k in range(arity))
        return f"fs_checked_{name}_i64({operands}, &{flag})"
    return dataclasses.replace(
        C, name="overflow-checked C",
        add=checked("add"), subtract=checked("sub"), multiply=checked("mul"), negate=checked("neg", 1),
        quotient=checked("floordiv"), floor_quotient=checked("floordiv"), ceiling_quotient=checked("ceildiv"),
        modulo=checked("mod"))


# The OpenCL prelude carries clib/fsmooth_scalar.h, so OpenCL C writes sizes as C does.
OPENCL_C = C

# Python's // and % are floor division and the divisor's sign: fs_floordiv_i64 and fs_mod_i64.
# ``_exact_div`` (``compile_size_function``) raises where a fraction is not an integer after all.
PYTHON = SizeTarget(
    name="Python",
    integer=str,
    symbol=lambda name: f"_s[{name!r}]",
    group="({0})", add="{0} + {1}", subtract="{0} - {1}", multiply="{0} * {1}", negate="(-{0})",
    exact_quotient="_exact_div({0}, {1})", quotient="_exact_div({0}, {1})",
    floor_quotient="({0} // {1})", ceiling_quotient="(-((-{0}) // {1}))",
    modulo="({0} % {1})", truncating_quotient="({0} // {1})", truncating_modulo="({0} % {1})",
    maximum="max({0}, {1})", minimum="min({0}, {1})",
    relations={r: f"({{0}} {op} {{1}})" for r, op in _RELATION_SYMBOLS.items()},
    conjunction="{0} and {1}", disjunction="{0} or {1}", negation="(not {0})", true="True", false="False",
    select="({1} if {0} else {2})",
)

# Python whose every operation is checked as C_CHECKED's: a value outside int64 (or INT64_MIN, the
# C poison) is SIZE_OVERFLOW, passed on by every operation and failing every relation, so the
# OpenCL launcher refuses the sizes that K_check_sizes refuses.  A zero divisor raises
# ZeroDivisionError, as K_check_sizes' divisor tests give status 2.
PYTHON_CHECKED = dataclasses.replace(
    PYTHON, name="checked Python",
    add="_add({0}, {1})", subtract="_sub({0}, {1})", multiply="_mul({0}, {1})", negate="_neg({0})",
    exact_quotient="_exact_div({0}, {1})", quotient="_exact_div({0}, {1})",
    floor_quotient="_floordiv({0}, {1})", ceiling_quotient="_ceildiv({0}, {1})",
    modulo="_mod({0}, {1})", truncating_quotient="_floordiv({0}, {1})", truncating_modulo="_mod({0}, {1})",
    maximum="_max({0}, {1})", minimum="_min({0}, {1})",
    relations={r: f"_relation({op!r}, {{0}}, {{1}})" for r, op in _RELATION_SYMBOLS.items()},
)


class _SizeOverflow:
    """The value of a size that overflows int64 (``PYTHON_CHECKED``)."""

    def __repr__(self) -> str:
        return "SIZE_OVERFLOW"


SIZE_OVERFLOW = _SizeOverflow()


def _fits(x: int):
    return x if -2**63 < x < 2**63 else SIZE_OVERFLOW


def _checked(op, divides: bool = False):
    def checked(*xs):
        if divides and xs[1] == 0:
            raise ZeroDivisionError("a size divides by zero")
        return SIZE_OVERFLOW if any(x is SIZE_OVERFLOW for x in xs) else _fits(op(*xs))
    return checked


_RELATIONS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq,
              "!=": operator.ne}
_CHECKED_OPERATIONS = {
    "_add": _checked(lambda a, b: a + b), "_sub": _checked(lambda a, b: a - b), "_mul": _checked(lambda a, b: a * b),
    "_neg": _checked(lambda a: -a), "_floordiv": _checked(lambda a, b: a // b, divides=True),
    "_ceildiv": _checked(lambda a, b: -(-a // b), divides=True), "_mod": _checked(lambda a, b: a % b, divides=True),
    "_max": _checked(max), "_min": _checked(min),
    "_relation": lambda op, a, b: a is not SIZE_OVERFLOW and b is not SIZE_OVERFLOW and _RELATIONS[op](a, b),
}

# JSON text of a tree: a number, a size symbol's name, or [operation, operands...] with the
# operations named as in C ("floordiv" and "ceildiv" round toward -inf and +inf, "mod" takes
# the divisor's sign, "/" is exact).
JSON = SizeTarget(
    name="JSON",
    integer=str,
    symbol=json.dumps,
    group="{0}", add='["+", {0}, {1}]', subtract='["-", {0}, {1}]', multiply='["*", {0}, {1}]',
    negate='["neg", {0}]',
    exact_quotient='["/", {0}, {1}]', quotient='["/", {0}, {1}]',
    floor_quotient='["floordiv", {0}, {1}]', ceiling_quotient='["ceildiv", {0}, {1}]',
    modulo='["mod", {0}, {1}]', truncating_quotient='["floordiv", {0}, {1}]', truncating_modulo='["mod", {0}, {1}]',
    maximum='["max", {0}, {1}]', minimum='["min", {0}, {1}]',
    relations={r: f'["{op}", {{0}}, {{1}}]' for r, op in _RELATION_SYMBOLS.items()},
    conjunction='["&&", {0}, {1}]', disjunction='["||", {0}, {1}]', negation='["!", {0}]',
    true="true", false="false", select='["if", {0}, {1}, {2}]',
)


def print_size(e, target: SizeTarget, name_of=None) -> str:
    """The integer sympy expression ``e`` in ``target``'s syntax; ``name_of(symbol)`` gives a
    symbol's name there (default: the symbol's own name)."""
    return _Printer(target, name_of or (lambda s: s.name)).integer(sympy.sympify(e))


def print_condition(cond, target: SizeTarget, name_of=None) -> str:
    """The sympy condition ``cond`` (relations of integer expressions under And, Or, Not)."""
    return _Printer(target, name_of or (lambda s: s.name)).condition(sympy.sympify(cond))


def size_json(e):
    """The JSON tree (``JSON``) of a size expression, as Python data."""
    return json.loads(print_size(e, JSON))


def condition_json(cond):
    """The JSON tree (``JSON``) of a size condition, as Python data."""
    return json.loads(print_condition(cond, JSON))


def _power_of_two(den) -> int:
    """k where ``den`` is the integer 2**k with k >= 1, else 0."""
    if not (isinstance(den, sympy.Integer) and den > 1):
        return 0
    value = int(den)
    return value.bit_length() - 1 if value & (value - 1) == 0 else 0


@dataclass(frozen=True)
class _Printer:
    target: SizeTarget
    name_of: Callable

    def _fold(self, template: str, operands: list[str]) -> str:
        text = operands[0]
        for operand in operands[1:]:
            text = template.format(text, operand)
        return text

    def integer(self, e) -> str:
        """``e``, whose value is an integer though a term of it may be a fraction."""
        t = self.target
        num, den = fraction(e)
        if den == 1:
            return self.term(e)
        if den.is_Integer and den > 0:
            return self._divide(t.exact_quotient, self.term(sympy.expand(num)), den)
        return t.quotient.format(self.term(num), self.term(den))

    def _quotient(self, template: str, arg, rounds_down: bool) -> str:
        num, den = fraction(arg)
        if not rounds_down:
            return template.format(self.integer(num), self.integer(den))
        return self._divide(template, self.integer(num), den)

    def _divide(self, template: str, num: str, den) -> str:
        """``num`` (printed) divided by ``den`` as ``template`` says, or shifted where ``den`` is
        a power of two and the target shifts (a quotient rounded down: floor, or exact)."""
        shift = _power_of_two(den)
        if shift and self.target.shift_quotient:
            return self.target.shift_quotient.format(num, self.target.integer(shift))
        return template.format(num, self.integer(den))

    def _remainder(self, template: str, num, den) -> str:
        if _power_of_two(den) and self.target.mask_modulo:
            return self.target.mask_modulo.format(self.integer(num), self.target.integer(int(den) - 1))
        return template.format(self.integer(num), self.integer(den))

    def term(self, e) -> str:
        t = self.target
        match e:
            case sympy.Integer():
                return t.integer(int(e))
            case sympy.Symbol():
                return t.symbol(self.name_of(e))
            case sympy.Add():
                terms = sorted(e.args, key=lambda a: a.could_extract_minus_sign())
                text = self.term(terms[0])
                for a in terms[1:]:
                    text = (t.subtract.format(text, self.term(-a)) if a.could_extract_minus_sign()
                            else t.add.format(text, self.term(a)))
                return t.group.format(text)
            case sympy.Mul():
                coeff, rest = e.as_coeff_Mul()
                if coeff == -1:
                    return t.negate.format(self.term(rest))
                return t.group.format(self._fold(t.multiply, [self.term(f) for f in e.args]))
            case sympy.Pow() if e.exp.is_Integer and e.exp > 0:
                return t.group.format(self._fold(t.multiply, [self.term(e.base)] * int(e.exp)))
            case sympy.floor():
                return self._quotient(t.floor_quotient, e.args[0], rounds_down=True)
            case sympy.ceiling():
                return self._quotient(t.ceiling_quotient, e.args[0], rounds_down=False)
            case sympy.Mod():
                return self._remainder(t.modulo, *e.args)
            case NonnegativeMod():
                return self._remainder(t.truncating_modulo, *e.args)
            case NonnegativeQuotient():
                return self._divide(t.truncating_quotient, self.integer(e.args[0]), e.args[1])
            case sympy.Max():
                return self._fold(t.maximum, [self.integer(a) for a in e.args])
            case sympy.Min():
                return self._fold(t.minimum, [self.integer(a) for a in e.args])
            case sympy.Piecewise():  # the first value whose condition holds (the last's is true)
                (value, cond), *rest = e.args
                if not rest:
                    return self.integer(value)
                return t.select.format(self.condition(cond), self.integer(value),
                                       self.integer(sympy.Piecewise(*rest)))
        raise CompileError(f"cannot express the size {e} in {t.name}")

    def condition(self, cond) -> str:
        t = self.target
        if cond is sympy.true:
            return t.true
        if cond is sympy.false:
            return t.false
        match cond:
            case sympy.And():
                return t.group.format(self._fold(t.conjunction, [self.condition(a) for a in cond.args]))
            case sympy.Or():
                return t.group.format(self._fold(t.disjunction, [self.condition(a) for a in cond.args]))
            case sympy.Not():
                return t.negation.format(self.condition(cond.args[0]))
        template = t.relations.get(type(cond))
        if template is None:
            raise CompileError(f"cannot express the size constraint {cond} in {t.name}")
        return template.format(self.integer(cond.lhs), self.integer(cond.rhs))


# ----------------------------------------------------------------------------- Python functions

def _exact_div(where: str):
    def exact_div(num: int, den: int) -> int:
        if den == 0:
            raise ZeroDivisionError(f"{where}: a size divides by zero")
        if num is SIZE_OVERFLOW or den is SIZE_OVERFLOW:
            return SIZE_OVERFLOW
        quotient, remainder = divmod(num, den)
        if remainder:
            raise RuntimeError(f"{where}: the size formula gave the non-integer {num}/{den}")
        return quotient
    return exact_div


def _python_function(symbols, body: str, where: str, what: str):
    source = (f"def _f(_values):\n"
              f"    _s = dict(zip({tuple(symbols)!r}, _values))\n"
              f"{body}")
    namespace = {"_exact_div": _exact_div(where), **_CHECKED_OPERATIONS, "__builtins__": {"zip": zip, "dict": dict}}
    exec(compile(source, f"<{what} of {where}>", "exec"), namespace)
    return namespace["_f"]


def _check_symbols(symbols, exprs, where: str) -> None:
    for e in exprs:
        unknown = {s.name for s in sympy.sympify(e).free_symbols} - set(symbols)
        if unknown:
            raise ValueError(f"{where}: the size formula {e} uses {', '.join(sorted(unknown))}, "
                             f"which are not size symbols of the kernel")


def compile_size_function(symbols, exprs, where: str):
    """A function from a tuple of the size symbols' values (in ``symbols`` order, by name) to the
    tuple of the integer values of ``exprs``, built once: no sympy in the call.  Computed as
    ``K_shape`` and ``K_scratch_bytes`` do (``PYTHON_CHECKED``): a value that overflows int64 is
    ``SIZE_OVERFLOW``, a zero divisor a ZeroDivisionError."""
    _check_symbols(symbols, exprs, where)
    terms = "".join(print_size(e, PYTHON_CHECKED) + ", " for e in exprs)
    return _python_function(symbols, f"    return ({terms})\n", where, "sizes")


def compile_constraint_check(symbols, conditions, where: str):
    """A function from the size symbols' values (in ``symbols`` order) to 0 when every condition
    holds, else 1 + the index of the first that fails: the answer of ``K_check_sizes`` (a condition
    whose sizes overflow int64 fails, a zero divisor is a ZeroDivisionError)."""
    _check_symbols(symbols, conditions, where)
    body = "".join(f"    if not {print_condition(c, PYTHON_CHECKED)}:\n        return {k + 1}\n"
                   for k, c in enumerate(conditions))
    return _python_function(symbols, body + "    return 0\n", where, "size checks")
