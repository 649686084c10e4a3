"""Shape-F̃ (DPS paper Fig. 10): the expressions that compute shapes, and shape values.

Expressions:
  x_shp | ∘ | N (a cardinality) | s0, s1 (vecShp) | fst s | snd s | s0 op s1 (cardinality
  arithmetic: + * - // % min max) | let x = s in s | λ x̄. s | s s̄
  | s2 ≅ s3 (S-If: the shapes of both branches, which must agree)
  | ifold_shp f z (S-Ifold: the state shape, which the step function must preserve)
  | ⟨s, ..., s⟩ (the shape of a tuple is the tuple of its components' shapes) | s.k
  | filter_shp s (a filter of an array of shape s: its length ∘, known at run time; its capacity s's)

Values (what partial evaluation, ``shape.sizes``, computes):
  ∘ (``CIRC``)            the shape of a scalar; also a Card whose value is known only at run time
  a sympy expression      the value of a Card (its shape *is* its value, S-ValCard)
  ``VecShape(card, elem)``   the shape of an array: its length and the shape of every element
  ``TupleShape(items)``      the shape of a tuple: its components' shapes
  closures                the shape functions of lambdas and kernels
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from fsmooth.errors import IRError, Loc
from fsmooth.traversal import Traversal


class SExpr:
    def __str__(self) -> str:
        return show(self)


def _loc():
    return field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class SVar(SExpr):
    name: str


@dataclass(frozen=True)
class SCirc(SExpr):
    pass


@dataclass(frozen=True)
class SCard(SExpr):
    value: sympy.Expr


@dataclass(frozen=True)
class SPair(SExpr):
    """``card, elem`` -- from S-Build, whose size must be static (hence the loc)."""

    card: SExpr
    elem: SExpr
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class SFst(SExpr):
    arg: SExpr


@dataclass(frozen=True)
class SSnd(SExpr):
    arg: SExpr


@dataclass(frozen=True)
class SCardOp(SExpr):
    op: str  # a key of CARD_OPS
    args: tuple


@dataclass(frozen=True)
class SLet(SExpr):
    name: str
    rhs: SExpr
    body: SExpr


@dataclass(frozen=True)
class SLam(SExpr):
    params: tuple  # names
    body: SExpr


@dataclass(frozen=True)
class SApp(SExpr):
    fn: SExpr
    args: tuple


@dataclass(frozen=True)
class SIf(SExpr):
    then: SExpr
    orelse: SExpr
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class SIfold(SExpr):
    fn: SExpr
    init: SExpr
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class SFilter(SExpr):
    arr: SExpr


@dataclass(frozen=True)
class STuple(SExpr):
    items: tuple


@dataclass(frozen=True)
class SProj(SExpr):
    arg: SExpr
    index: int


_traversal = Traversal(SExpr)
children = _traversal.children
map_children = _traversal.map_children
walk = _traversal.walk


CARD_OPS = {
    "add": ("+", lambda a, b: a + b),
    "sub": ("-", lambda a, b: a - b),
    "mul": ("*", lambda a, b: a * b),
    "floordiv": ("//", lambda a, b: sympy.floor(a / b)),
    "mod": ("%", lambda a, b: sympy.Mod(a, b)),
    "min": ("min", sympy.Min),
    "max": ("max", sympy.Max),
}


# ----------------------------------------------------------------------------- values

@dataclass(frozen=True)
class Circ:
    def __str__(self) -> str:
        return "∘"


CIRC = Circ()


@dataclass(frozen=True)
class VecShape:
    card: sympy.Expr
    elem: object  # a shape value
    # a filtered array's: card is ∘ (its length is known at run time), capacity what it filters'
    capacity: sympy.Expr | None = None

    def __str__(self) -> str:
        return show_value(self)


@dataclass(frozen=True)
class TupleShape:
    items: tuple  # shape values

    def __str__(self) -> str:
        return show_value(self)


def show_value(v) -> str:
    """``(a_d0, (a_d1, ∘))``, ``∘``, ``⟨∘, (n, ∘)⟩``, or a cardinality."""
    match v:
        case TupleShape(items):
            return f"⟨{', '.join(show_value(x) for x in items)}⟩"
        case Circ():
            return "∘"
        case VecShape(card, elem):
            return f"({card}, {show_value(elem)})"
        case sympy.Basic():
            return str(v)
    return repr(v)


def dims_of(v) -> tuple:
    """The cardinalities of an array shape, outermost first (() for ∘)."""
    dims = []
    while isinstance(v, VecShape):
        dims.append(v.card)
        v = v.elem
    return tuple(dims)


def from_dims(dims) -> object:
    v = CIRC
    for d in reversed(dims):
        v = VecShape(d, v)
    return v


# ----------------------------------------------------------------------------- printing

def show(s: SExpr, indent: int = 0) -> str:
    pad = "  " * indent
    match s:
        case SVar(name):
            return name
        case SCirc():
            return "∘"
        case SCard(value):
            return str(value)
        case SPair(card, elem):
            first = show(card, indent)
            if isinstance(card, (SPair, SLet, SLam, SIf)):
                first = f"({first})"
            return f"{first}, {show(elem, indent)}"
        case SFst(arg):
            return f"fst {_atomic(arg, indent)}"
        case SSnd(arg):
            return f"snd {_atomic(arg, indent)}"
        case SCardOp(op, (a, b)) if CARD_OPS[op][0] in "+-*//%":
            return f"{_atomic(a, indent)} {CARD_OPS[op][0]}c {_atomic(b, indent)}"
        case SCardOp(op, args):
            return f"{CARD_OPS[op][0]} {' '.join(_atomic(a, indent) for a in args)}"
        case SLet(name, rhs, body):
            return f"let {name} = {show(rhs, indent + 1)} in\n{pad}{show(body, indent)}"
        case SLam(params, body):
            return f"λ {' '.join(params)}. {show(body, indent)}"
        case SApp(fn, args):
            return f"{_atomic(fn, indent)} {' '.join(_atomic(a, indent) for a in args)}"
        case SIf(a, b):
            return f"{_atomic(a, indent)} ≅ {_atomic(b, indent)}"
        case SIfold(fn, init):
            return f"ifold_shp {_atomic(fn, indent)} {_atomic(init, indent)}"
        case SFilter(arr):
            return f"filter_shp {_atomic(arr, indent)}"
        case STuple(items):
            return f"⟨{', '.join(show(x, indent) for x in items)}⟩"
        case SProj(arg, index):
            return f"{_atomic(arg, indent)}.{index}"
    raise AssertionError(s)


def _atomic(s: SExpr, indent: int) -> str:
    text = show(s, indent)
    if isinstance(s, (SVar, SCirc, STuple, SProj)) or (isinstance(s, SCard) and s.value.is_Atom):
        return text
    return f"({text})"


@dataclass(frozen=True)
class ShapeKernel:
    """A kernel's shape function: S⟦λ params. body⟧, its partially evaluated form, and its
    result shape over the kernel's size symbols."""

    name: str
    params: tuple  # the names of the parameters' shapes, x_shp
    function: SLam  # S⟦body⟧ as translated (Fig. 8)
    simplified: SExpr  # the result shape in terms of the parameters' shapes (§3.5)
    param_shapes: tuple  # the symbolic shape value of each parameter
    result: object  # the shape value of the result over the size symbols
    sizes: tuple  # the size symbols, in parameter order


@dataclass(frozen=True)
class ShapeProgram:
    kernels: dict  # name -> ShapeKernel
    entry: str

    def __str__(self) -> str:
        return show_program(self)


def show_kernel(k: ShapeKernel, simplified: bool = True) -> str:
    body = k.simplified if simplified else k.function.body
    return f"{k.name}_shp = λ {' '.join(k.params)}. {show(body, 1)}"


def show_program(p: ShapeProgram, simplified: bool = True) -> str:
    return "\n".join(show_kernel(k, simplified) for k in p.kernels.values())


def verify(program: ShapeProgram) -> None:
    """Raise ``IRError`` unless every variable of every shape function is in scope (its
    parameters, its lets and lambdas, the shape functions ``f_shp`` of the program's kernels)."""
    functions = frozenset(f"{name}_shp" for name in program.kernels)
    for k in program.kernels.values():
        _check_scope(k.function, functions, k.name)
        _check_scope(k.simplified, functions | set(k.params), k.name)


def _check_scope(s: SExpr, scope: frozenset, kernel: str) -> None:
    match s:
        case SVar(name) if name not in scope:
            raise IRError(f"kernel {kernel}: shape variable '{name}' is not in scope")
        case SLet(name, rhs, body):
            _check_scope(rhs, scope, kernel)
            _check_scope(body, scope | {name}, kernel)
            return
        case SLam(params, body):
            _check_scope(body, scope | set(params), kernel)
            return
    for child in children(s):
        _check_scope(child, scope, kernel)
