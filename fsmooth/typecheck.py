"""The front end's typing rules: numeric promotion, weak literals and explicit casts.

Every rule returns core IR in which the operands of a primitive have one type: where Python
would promote silently (``1.0 * i``), a ``to_Double``/``to_Float``/``to_Index`` cast is
inserted, so that no later stage has to know about promotion.

A literal is *weak*: ``3`` is a Card (an Index when negative) and ``2.5`` a Double, but next
to an operand of another type they take that type (``x * 2`` with a Float ``x`` is Float
arithmetic, ``i + 1`` with an Index ``i`` is Index arithmetic).
"""
from __future__ import annotations

from . import prims
from .core import Expr, Lit, PrimApp, Proj, Tuple, Var
from .errors import CompileError, Loc
from .types import ArrayT, Bool, Card, Double, Float, FunT, Index, Scalar, TupleT, Type, FLOATING, NUMERIC

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_weak(e: Expr) -> bool:
    """A numeric literal written in the source, whose type may still adapt to its context."""
    return isinstance(e, Lit) and type(e.value) in (int, float)


def literal(value, loc: Loc) -> Lit:
    """The core literal of a Python constant (``bool`` before ``int``: ``True`` is an int in Python)."""
    if isinstance(value, bool):
        return Lit(value, Bool, loc)
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise CompileError(f"integer literal {value} does not fit in 64 bits", loc)
        return Lit(value, Card if value >= 0 else Index, loc)
    if isinstance(value, float):
        return Lit(value, Double, loc)
    raise CompileError(f"a literal of type {type(value).__name__} is not part of F̃ "
                       "(only int, float and bool literals are)", loc)


def adopt(e: Expr, target: Type) -> Expr:
    """A weak literal takes ``target``'s type where it can represent it; anything else is unchanged."""
    if not is_weak(e):
        return e
    if isinstance(e.value, int) and target in (Index, Double, Float):
        return cast(e, target)
    if isinstance(e.value, float) and target == Float:
        return cast(e, target)
    return e


def join(a: Scalar, b: Scalar) -> Scalar:
    """The common type of two numeric operands: Double > Float > Index > Card."""
    for t in (Double, Float, Index):
        if t in (a, b):
            return t
    return Card


def cast(e: Expr, target: Scalar) -> Expr:
    """``e`` as a ``target``: a literal is converted in place, anything else gets a cast primitive."""
    if e.ty == target:
        return e
    if isinstance(e, Lit):
        return Lit(prims.coerce(e.value, target), target, e.loc)
    return PrimApp(prims.CASTS[target], (e,), target, e.loc)


def is_numeric(t: Type) -> bool:
    return t in NUMERIC


def require_numeric(e: Expr, what: str, loc: Loc) -> None:
    if not is_numeric(e.ty):
        raise CompileError(f"{what} needs a number, not {e.ty}", loc)


def promote_pair(a: Expr, b: Expr, what: str, loc: Loc) -> tuple[Expr, Expr, Scalar]:
    """Both operands in their common numeric type (after weak-literal adoption)."""
    if not (is_numeric(a.ty) and is_numeric(b.ty)):
        raise CompileError(f"{what} needs numbers, not {a.ty} and {b.ty}", loc)
    if is_weak(a) and not is_weak(b):
        a = adopt(a, b.ty)
    elif is_weak(b) and not is_weak(a):
        b = adopt(b, a.ty)
    t = join(a.ty, b.ty)
    return cast(a, t), cast(b, t), t


def floating(t: Scalar) -> Scalar:
    """The floating type an operation on ``t`` computes in: integers go to Double."""
    return t if t in FLOATING else Double


BINARY_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
                 "pow": "**"}


def arithmetic(op: str, a: Expr, b: Expr, loc: Loc) -> PrimApp:
    """``a op b`` for ``op`` in add sub mul div floordiv mod pow."""
    a, b, t = promote_pair(a, b, f"operator '{BINARY_SYMBOL.get(op, op)}'", loc)
    if op in ("div", "pow"):
        t = floating(t)
        a, b = cast(a, t), cast(b, t)
    return PrimApp(op, (a, b), t, loc)


def comparison(op: str, a: Expr, b: Expr, loc: Loc) -> PrimApp:
    symbol = prims.PRIMS[op].symbol
    if a.ty == Bool and b.ty == Bool and op in ("eq", "ne"):
        return PrimApp(op, (a, b), Bool, loc)
    a, b, _ = promote_pair(a, b, f"comparison '{symbol}'", loc)
    return PrimApp(op, (a, b), Bool, loc)


def negate(a: Expr, loc: Loc) -> Expr:
    require_numeric(a, "unary '-'", loc)
    if is_weak(a):
        return literal(-a.value, loc)
    t = Index if a.ty == Card else a.ty  # -n of a Card is not a cardinality
    return PrimApp("neg", (cast(a, t),), t, loc)


def scalar_function(op: str, args: list[Expr], loc: Loc) -> PrimApp:
    """``sqrt exp log sin cos tan floor pow abs min max`` and the math library (``tanh``, …,
    ``atan2 hypot copysign``, ``isnan isinf isfinite``) on already typed arguments."""
    if op in ("min", "max"):
        a, b, t = promote_pair(args[0], args[1], op, loc)
        return PrimApp(op, (a, b), t, loc)
    if op == "pow":
        return arithmetic("pow", args[0], args[1], loc)
    if op in prims.MATH_BINARY:  # both operands in their common floating type
        a, b, t = promote_pair(args[0], args[1], op, loc)
        t = floating(t)
        return PrimApp(op, (cast(a, t), cast(b, t)), t, loc)
    (a,) = args
    require_numeric(a, op, loc)
    if op == "abs":
        return PrimApp(op, (a,), a.ty, loc)
    t = floating(a.ty)
    if op in prims.MATH_TESTS:  # of a number, an integer as a Double: a Bool
        return PrimApp(op, (cast(a, t),), Bool, loc)
    return PrimApp(op, (cast(a, t),), t, loc)


def _require_convertible(a: Expr, what: str, loc: Loc) -> None:
    if not (is_numeric(a.ty) or a.ty == Bool):
        raise CompileError(f"{what} needs a number or a Bool, not {a.ty}", loc)


def to_double(a: Expr, loc: Loc) -> Expr:
    """Python's ``float(x)`` of a number or a Bool (``float(True)`` is 1.0): a Double."""
    _require_convertible(a, "float()", loc)
    if is_weak(a) or (isinstance(a, Lit) and a.ty == Bool):
        return Lit(float(a.value), Double, loc)
    return PrimApp("to_Double", (a,), Double, loc) if a.ty != Double else a


def to_index(a: Expr, loc: Loc) -> Expr:
    """Python's ``int(x)``: an Index.  An integer keeps its value, a Bool is 0 or 1, and a float
    is truncated toward zero (``trunc_to_Index``: a NaN, an infinity or a value outside int64 is
    a run-time error)."""
    _require_convertible(a, "int()", loc)
    if isinstance(a, Lit) and a.ty in (Index, Card, Bool):
        return Lit(int(a.value), Index, loc)
    if a.ty in FLOATING:
        return PrimApp("trunc_to_Index", (a,), Index, loc)
    return PrimApp("to_Index", (a,), Index, loc) if a.ty != Index else a


def conform(e: Expr, target: Type) -> Expr | None:
    """``e`` where a ``target`` is expected (an argument, a result, a declared binding), or None.

    Besides equal types this accepts a weak literal that can take ``target``'s type and a Card
    where an Index is expected (every cardinality is an index); nothing that loses information.
    A tuple conforms component by component."""
    return _componentwise(e, target, _conform_leaf)


def _conform_leaf(e: Expr, target: Type) -> Expr | None:
    if e.ty == target:
        return e
    e = adopt(e, target)
    if e.ty == target:
        return e
    if e.ty == Card and target == Index:
        return cast(e, Index)
    return None


def widen(e: Expr, target: Type) -> Expr | None:
    """``e`` as the wider ``target`` (an ifold's state after its function has widened it): what
    ``conform`` accepts, and numeric promotion (a Card state that becomes a Double)."""
    def leaf(x: Expr, t: Type) -> Expr | None:
        conformed = _conform_leaf(x, t)
        if conformed is None and is_numeric(x.ty) and is_numeric(t) and join(x.ty, t) == t:
            return cast(x, t)
        return conformed
    return _componentwise(e, target, leaf)


def _componentwise(e: Expr, target: Type, leaf) -> Expr | None:
    """``leaf`` applied to each component of a tuple ``e`` (a tuple display, or a variable whose
    components are projected), or to ``e`` itself."""
    if e.ty == target:
        return e
    if not (isinstance(e.ty, TupleT) and isinstance(target, TupleT)):
        return None if isinstance(e.ty, TupleT) or isinstance(target, TupleT) else leaf(e, target)
    if len(e.ty.items) != len(target.items):
        return None
    if isinstance(e, Tuple):
        parts = e.items
    elif isinstance(e, Var):
        parts = tuple(Proj(e, k, t, e.loc) for k, t in enumerate(e.ty.items))
    else:
        return None
    items = [_componentwise(x, t, leaf) for x, t in zip(parts, target.items)]
    if any(x is None for x in items):
        return None
    return Tuple(tuple(items), target, e.loc)


def unify_branches(a: Expr, b: Expr, loc: Loc) -> tuple[Expr, Expr, Type]:
    """The two branches of a conditional value, in one type (numbers promote, as in arithmetic;
    tuples component by component)."""
    if a.ty == b.ty:
        return a, b, a.ty
    if is_numeric(a.ty) and is_numeric(b.ty):
        return promote_pair(a, b, "conditional", loc)
    if isinstance(a.ty, TupleT) and isinstance(b.ty, TupleT) and len(a.ty.items) == len(b.ty.items):
        target = TupleT(tuple(_unified(x, y) for x, y in zip(a.ty.items, b.ty.items)))
        wa, wb = widen(a, target), widen(b, target)
        if wa is not None and wb is not None:
            return wa, wb, target
    raise CompileError(f"the branches of this conditional have different types: {a.ty} and {b.ty}", loc)


def _unified(a: Type, b: Type) -> Type:
    if a == b:
        return a
    if is_numeric(a) and is_numeric(b):
        return join(a, b)
    if isinstance(a, TupleT) and isinstance(b, TupleT) and len(a.items) == len(b.items):
        return TupleT(tuple(_unified(x, y) for x, y in zip(a.items, b.items)))
    return a  # widen then fails, and the caller reports both types


def is_data(t: Type) -> bool:
    """A type a value can have at run time: a scalar, a (nested) array of scalars, or a tuple of
    these (arrays of tuples are not: build each component)."""
    if isinstance(t, ArrayT):
        return not isinstance(t.elem, TupleT) and is_data(t.elem)
    if isinstance(t, TupleT):
        return all(is_data(item) for item in t.items)
    return isinstance(t, Scalar)


def is_function(t: Type) -> bool:
    return isinstance(t, FunT)
