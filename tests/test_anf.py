"""Inlining and ANF (fsmooth.anf): the result computes what the input computes, is in ANF,
and binds every name once.  The programs are built as core IR by hand (``B`` below), in the
shape the front end gives them; ``LIBRARY`` is the DPS paper's Fig. 3 and running example."""
from __future__ import annotations

import numpy as np
import pytest

from fsmooth import core
from fsmooth.core import App, Build, Call, Get, If, Ifold, Lam, Length, Let, Lit, PrimApp, Var
from fsmooth.errors import CompileError
from fsmooth.anf import anf_program
from fsmooth.types import ArrayT, Bool, Card, Double, FunT, Index

VEC = ArrayT(Double)
MAT = ArrayT(VEC)
COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}


class B:
    """Small constructors of typed core IR."""

    @staticmethod
    def v(name, ty):
        return Var(name, ty)

    @staticmethod
    def lit(value, ty=Double):
        return Lit(value, ty)

    @staticmethod
    def p(op, *args):
        return PrimApp(op, args, Bool if op in COMPARE else args[0].ty)

    @staticmethod
    def get(a, i):
        return Get(a, i, a.ty.elem)

    @staticmethod
    def length(a):
        return Length(a)

    @staticmethod
    def lam(params, body_of):
        """``lam([("i", Index)], lambda i: ...)``"""
        body = body_of(*(Var(n, t) for n, t in params))
        return Lam(tuple(params), body, FunT(tuple(t for _, t in params), body.ty))

    @staticmethod
    def build(n, name, body_of):
        f = B.lam([(name, Index)], body_of)
        return Build(n, f, ArrayT(f.body.ty))

    @staticmethod
    def ifold(state, index, body_of, init, count):
        f = B.lam([(state, init.ty), (index, Index)], body_of)
        return Ifold(f, init, count, init.ty)

    @staticmethod
    def let(name, rhs, body_of):
        body = body_of(Var(name, rhs.ty))
        return Let(name, rhs, body, body.ty)

    @staticmethod
    def if_(c, a, b):
        return If(c, a, b, a.ty)


def kernel(name, params, result, body_of):
    return core.KernelDef(name, tuple(params), result, body_of(*(Var(n, t) for n, t in params)))


def program(entry, *kernels):
    return core.Program({k.name: k for k in kernels}, entry)


def call(k: core.KernelDef, *args):
    return Call(k.name, args, k.result)


# ----------------------------------------------------------------------------- DPS Fig. 3

F2 = FunT((Double, Double), Double)
vectorMap2 = kernel("vectorMap2", [("v1", VEC), ("v2", VEC), ("f", F2)], VEC,
                    lambda v1, v2, f: B.build(B.length(v1), "i",
                                              lambda i: App(f, (B.get(v1, i), B.get(v2, i)), Double)))
vectorAdd = kernel("vectorAdd", [("v1", VEC), ("v2", VEC)], VEC,
                   lambda v1, v2: call(vectorMap2, v1, v2,
                                       B.lam([("a", Double), ("b", Double)], lambda a, b: B.p("add", a, b))))
vectorEMul = kernel("vectorEMul", [("v1", VEC), ("v2", VEC)], VEC,
                    lambda v1, v2: call(vectorMap2, v1, v2,
                                        B.lam([("a", Double), ("b", Double)], lambda a, b: B.p("mul", a, b))))
vectorSum = kernel("vectorSum", [("v", VEC)], Double,
                   lambda v: B.ifold("sum", "idx", lambda s, idx: B.p("add", s, B.get(v, idx)),
                                     B.lit(0.0), B.length(v)))
vectorDot = kernel("vectorDot", [("v1", VEC), ("v2", VEC)], Double,
                   lambda v1, v2: call(vectorSum, call(vectorEMul, v1, v2)))
vectorNorm = kernel("vectorNorm", [("v", VEC)], Double,
                    lambda v: PrimApp("sqrt", (call(vectorDot, v, v),), Double))
f = kernel("f", [("vec1", VEC), ("vec2", VEC)], Double,
           lambda vec1, vec2: call(vectorNorm, call(vectorAdd, vec1, vec2)))
matrixTranspose = kernel("matrixTranspose", [("m", MAT)], MAT,
                         lambda m: B.build(B.length(B.get(m, B.lit(0, Index))), "i",
                                           lambda i: B.build(B.length(m), "j",
                                                             lambda j: B.get(B.get(m, j), i))))
matrixMul = kernel("matrixMul", [("m1", MAT), ("m2", MAT)], MAT,
                   lambda m1, m2: B.let("m2T", call(matrixTranspose, m2), lambda m2T: B.build(
                       B.length(m1), "i", lambda i: B.build(
                           B.length(m2T), "j", lambda j: call(vectorDot, B.get(m1, i), B.get(m2T, j))))))
vectorSlice = kernel("vectorSlice", [("v", VEC), ("s", Card), ("e", Card)], VEC,
                     lambda v, s, e: B.build(B.p("add", B.p("sub", e, s), B.lit(1, Card)), "i",
                                             lambda i: B.get(v, B.p("add", i, PrimApp("to_Index", (s,), Index)))))

LIBRARY = (vectorMap2, vectorAdd, vectorEMul, vectorSum, vectorDot, vectorNorm, f, matrixTranspose,
           matrixMul, vectorSlice)


def library(entry):
    return program(entry, *LIBRARY)


# ----------------------------------------------------------------------------- checks

def binders(e: core.Expr) -> list[str]:
    match e:
        case Let(name, rhs, body):
            return [name] + binders(rhs) + binders(body)
        case Lam(params, body):
            return [n for n, _ in params] + binders(body)
        case If(c, a, b):
            return binders(a) + binders(b)
        case Build(_, fn) | Ifold(fn, _, _) | core.Iscan(fn, _, _) | core.Filter(fn, _):
            return binders(fn)
    return []


def assert_anf(e: core.Expr):
    match e:
        case PrimApp(_, args) | Call(_, args) | core.Tuple(args):
            assert all(core.is_atom(a) for a in args), e
        case core.Proj(a):
            assert core.is_atom(a), e
        case Get(a, i):
            assert core.is_atom(a) and core.is_atom(i), e
        case Length(a):
            assert core.is_atom(a), e
        case If(c, a, b):
            assert core.is_atom(c), e
            assert_anf(a)
            assert_anf(b)
        case Let(_, rhs, body):
            assert_anf(rhs)
            assert_anf(body)
        case Build(n, Lam(_, body)):
            assert core.is_atom(n), e
            assert_anf(body)
        case Ifold(Lam(_, body), z, n) | core.Iscan(Lam(_, body), z, n):
            assert core.is_atom(z) and core.is_atom(n), e
            assert_anf(body)
        case core.Filter(Lam(_, body), a):
            assert core.is_atom(a), e
            assert_anf(body)
        case Var() | Lit():
            pass
        case _:
            raise AssertionError(f"not in ANF after simplification: {e}")


def check_simplified(p: core.Program, args_of, rng, trials=4):
    s = anf_program(p)
    assert not any(k.is_helper for k in s.kernels.values())
    for k in s.kernels.values():
        assert_anf(k.body)
        names = [n for n, _ in k.params] + binders(k.body)
        assert len(names) == len(set(names)), names
    for _ in range(trials):
        args = args_of(rng)
        expected = core.run_kernel(p, p.entry, args)
        np.testing.assert_allclose(core.run_kernel(s, s.entry, args), expected, rtol=1e-12)
    return s


def vec(rng, n):
    return rng.standard_normal(n)


@pytest.mark.parametrize("n", [1, 5])
def test_running_example(rng, n):
    s = check_simplified(library("f"), lambda r: [vec(r, n), vec(r, n)], rng)
    assert core.show(s.kernels["f"].body) == "let tmp = vectorAdd vec1 vec2 in\nvectorNorm tmp"
    assert "vectorMap2" not in s.kernels
    add = core.show(s.kernels["vectorAdd"].body)
    assert "build" in add and "vectorMap2" not in add and "λ" in add


def test_matrix_mul_and_slice(rng):
    check_simplified(library("matrixMul"), lambda r: [r.standard_normal((3, 4)), r.standard_normal((4, 2))], rng)
    check_simplified(library("vectorSlice"), lambda r: [vec(r, 6), 1, 4], rng)


def test_inlined_copies_are_renamed_apart(rng):
    # twice = λ g x. g (g x); both applications inline the same lambda, with fresh names each time
    twice = kernel("twice", [("g", FunT((Double,), Double)), ("x", Double)], Double,
                   lambda g, x: App(g, (App(g, (x,), Double),), Double))
    sq = B.lam([("y", Double)], lambda y: B.let("z", B.p("mul", y, y), lambda z: B.p("add", z, B.lit(1.0))))
    main = kernel("main", [("x", Double)], Double, lambda x: call(twice, sq, call(twice, sq, x)))
    s = check_simplified(program("main", twice, main), lambda r: [float(r.standard_normal())], rng)
    text = core.show(s.kernels["main"].body)
    assert "z_1" in text and "z_3" in text and "twice" not in text


def test_branch_work_stays_in_branch(rng):
    # a[i-1] if i > 0 else 0.0: the read must not be hoisted out of the branch
    k = kernel("shift", [("a", VEC)], VEC, lambda a: B.build(B.length(a), "i", lambda i: B.if_(
        B.p("gt", i, B.lit(0, Index)), B.get(a, B.p("sub", i, B.lit(1, Index))), B.lit(0.0))))
    s = check_simplified(program("shift", k), lambda r: [vec(r, 4)], rng)
    match s.kernels["shift"].body:
        case Let(_, Length(), Build(_, Lam(_, body))):
            pass
        case other:
            raise AssertionError(core.show(other))
    match body:
        case Let(_, PrimApp("gt"), If(_, Let(_, PrimApp("sub"), Get()), Lit())):
            pass
        case other:
            raise AssertionError(core.show(other))


def test_let_bound_lambda_and_kernel_as_function(rng):
    # g = lambda a, b: a * b + c; vectorMap2(v, w, g); vectorMap2(t, w, lambda a, b: plus(a, b))
    plus = kernel("plus", [("a", Double), ("b", Double)], Double, lambda a, b: B.p("add", a, b))
    k = kernel("k", [("v", VEC), ("w", VEC), ("c", Double)], VEC, lambda v, w, c: B.let(
        "g", B.lam([("a", Double), ("b", Double)], lambda a, b: B.p("add", B.p("mul", a, b), c)),
        lambda g: B.let("t", call(vectorMap2, v, w, g), lambda t: call(vectorMap2, t, w, B.lam(
            [("a", Double), ("b", Double)], lambda a, b: call(plus, a, b))))))
    s = check_simplified(program("k", vectorMap2, plus, k), lambda r: [vec(r, 3), vec(r, 3), 0.5], rng)
    text = core.show(s.kernels["k"].body)
    assert "plus a_1 b_1" in text and "let g " not in text


def test_function_value_used_as_data_is_an_error():
    g = B.lam([("a", Double)], lambda a: a)
    k = kernel("k", [("x", Double)], Double, lambda x: B.let("g", g, lambda gv: B.p("add", gv, x)))
    with pytest.raises(CompileError):
        anf_program(program("k", k))


# ----------------------------------------------------------------------------- the corpus, via the front end

from test_corpus import CASES, arguments, assert_close  # noqa: E402


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c.kernel.name}-{i}") for i, c in enumerate(CASES)])
def test_corpus_kernels_simplify_to_the_same_values(case):
    p = case.kernel.program()
    s = anf_program(p)
    for k in s.kernels.values():
        assert_anf(k.body)
        names = [n for n, _ in k.params] + binders(k.body)
        assert len(names) == len(set(names)), names
    for variant in case.variants[:2]:
        args = list(arguments(case, variant))
        assert_close(core.run_kernel(s, s.entry, args), core.run_kernel(p, p.entry, args), rtol=1e-7)
