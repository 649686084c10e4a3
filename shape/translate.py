"""The shape translation S⟦e⟧ (DPS paper Fig. 8) from F̃ (in ANF) to Shape-F̃.

Every F̃ variable ``x`` gets a companion ``x_shp``; a kernel ``f`` gets the shape function
``f_shp``.  Scalars have shape ∘ (S-ExpNum, S-ExpBool); a Card's shape is its value
(S-ValCard, S-AddCard, S-MulCard, and likewise - // % min max).  ``shape_program`` then
partially evaluates each kernel's shape function over its size symbols (``shape.sizes``).
"""
from __future__ import annotations

import sympy

from fsmooth import core
from fsmooth.core import (App, Build, Call, Filter, ForeignCall, Get, If, Ifold, Iscan, Lam, Length, Let, Lit, PrimApp,
                          Proj, Tuple, Var)
from fsmooth.types import Card, TupleT

from . import sizes
from .filters import check_filters
from .ir import (CARD_OPS, SApp, SCard, SCardOp, SCirc, SExpr, SFilter, SFst, SIf, SIfold, SLam, SLet, SPair, SProj,
                 SSnd, STuple, SVar, ShapeKernel, ShapeProgram, VecShape)


def shp(name: str) -> str:
    return f"{name}_shp"


def shape_of(e: core.Expr) -> SExpr:
    """S⟦e⟧."""
    match e:
        case Var(name):
            return SVar(shp(name))  # S-Var
        case Lit(value, ty):
            return SCard(sympy.Integer(value)) if ty == Card else SCirc()  # S-ValCard, S-ExpNum
        case PrimApp(op, args, ty):
            if ty == Card and op in CARD_OPS:
                return SCardOp(op, tuple(shape_of(a) for a in args))  # S-AddCard, S-MulCard, ...
            return SCirc()
        case If(_, a, b):
            return SIf(shape_of(a), shape_of(b), e.loc)
        case Let(name, rhs, body):
            return SLet(shp(name), shape_of(rhs), shape_of(body))
        case Lam(params, body):
            return SLam(tuple(shp(n) for n, _ in params), shape_of(body))
        case Call(fn, args):
            return SApp(SVar(shp(fn)), tuple(shape_of(a) for a in args))
        case ForeignCall(_, _, dims):  # its shape function's dims, then scalars
            shape: SExpr = SCirc()
            for d in reversed(dims):
                shape = SPair(shape_of(d), shape, e.loc)
            return shape
        case App(fn, args):
            return SApp(shape_of(fn), tuple(shape_of(a) for a in args))
        case Build(size, fn):
            return SPair(shape_of(size), SApp(shape_of(fn), (SCirc(),)), e.loc)
        case Ifold(fn, init, _):
            return SIfold(shape_of(fn), shape_of(init), e.loc)
        case Iscan(_, _, count, ty):
            return _scan_shape(shape_of(count), ty, e.loc)
        case Filter(_, arr):
            return SFilter(shape_of(arr))
        case Length(arr):
            return SFst(shape_of(arr))
        case Get(arr, _):
            return SSnd(shape_of(arr))
        case Tuple(items):
            return STuple(tuple(shape_of(a) for a in items))
        case Proj(tup, index):
            return SProj(shape_of(tup), index)
    raise AssertionError(e)


def _scan_shape(count: SExpr, ty, loc) -> SExpr:
    """An iscan's states: ``count`` scalars (S-Build's shape, its size static as a build's), per
    component of a tuple state."""
    if isinstance(ty, TupleT):
        return STuple(tuple(_scan_shape(count, t, loc) for t in ty.items))
    return SPair(count, SCirc(), loc)


def kernel_functions(p: core.Program) -> dict:
    """The environment of shape functions: ``f_shp`` for every kernel of ``p``."""
    env: dict = {}
    for k in p.kernels.values():
        env[shp(k.name)] = sizes.Closure(tuple(shp(n) for n, _ in k.params), shape_of(k.body), env)
    return env


def shape_kernel(k: core.KernelDef, functions: dict, program: core.Program) -> ShapeKernel:
    check_filters(program, k)
    params = tuple(shp(n) for n, _ in k.params)
    param_shapes = tuple(sizes.param_shape(n, t) for n, t in k.params)
    function = SLam(params, shape_of(k.body))
    result = sizes.evaluate(function.body, {**functions, **dict(zip(params, param_shapes))})
    if isinstance(result, VecShape) and result.capacity is not None:
        result = VecShape(result.capacity, result.elem)  # a filter's result: the caller reserves its capacity
    simplified = sizes.reify(result, dict(zip(params, param_shapes)))
    symbols = tuple(s for v in param_shapes for s in sizes.shape_symbols(v))
    return ShapeKernel(k.name, params, function, simplified, param_shapes, result, symbols)


def shape_program(p: core.Program) -> ShapeProgram:
    """Every kernel's shape function, translated and partially evaluated."""
    functions = kernel_functions(p)
    return ShapeProgram({name: shape_kernel(k, functions, p) for name, k in p.kernels.items()}, p.entry)
