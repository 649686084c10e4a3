"""The front end: Python kernels → typed core IR, checked against the reference semantics."""
from __future__ import annotations

import math
from math import exp
from typing import Callable

import numpy as np
import pytest

import fsmooth as fs
from fsmooth import Array, Bool, Card, Double, Float, Index, build, ifold, kernel, length
from fsmooth.core import (Build, Call, Get, If, Ifold, Lam, Let, Lit, PrimApp, Var, run_kernel, show_program,
                          walk)
from fsmooth.frontend import parse_program
from fsmooth.types import ArrayT, FunT


# ----------------------------------------------------------------------------- kernels under test

@kernel
def vector_add(a: Array[Double], b: Array[Double]) -> Array[Double]:
    return build(length(a), lambda i: a[i] + b[i])


@kernel
def dot(a: Array[Double], b: Array[Double]) -> Double:
    """Sum of products, folded from a literal 0 (the state widens to Double)."""
    return ifold(lambda s, i: s + a[i] * b[i], 0, length(a))


@kernel
def transpose(m: Array[Array[Double]]) -> Array[Array[Double]]:
    rows = length(m)
    return build(length(m[0]), lambda j: build(rows, lambda i: m[i][j]))


@kernel
def map_array(f: Callable[[Double], Double], a: Array[Double]) -> Array[Double]:
    return build(length(a), lambda i: f(a[i]))


@kernel
def shifted_squares(a: Array[Double], c: Double) -> Array[Double]:
    square = lambda x: x * x
    return map_array(lambda y: square(y) + c, a)


@kernel
def sign(x: Double) -> Index:
    if x > 0.0:
        return 1
    elif x < 0.0:
        return -1
    else:
        return 0


@kernel
def clamp01(x: Double) -> Double:
    if x < 0:
        return 0
    y = x if x < 1 else 1.0
    return y


@kernel
def positive_at(a: Array[Double], i: Index) -> Bool:
    return i < length(a) and a[i] > 0.0


@kernel
def outside_or_zero(a: Array[Double], i: Index) -> Bool:
    return i >= length(a) or not a[i] != 0.0


@kernel
def in_open_range(a: Array[Double], lo: Double, hi: Double) -> Array[Bool]:
    return build(length(a), lambda i: lo < a[i] < hi)


@kernel
def float_axpy(a: Array[Float], b: Array[Float], s: Float) -> Array[Float]:
    return build(length(a), lambda i: s * a[i] + b[i] / 2 + 0.5)


@kernel
def ramp(n: Card) -> Array[Double]:
    return build(n, lambda i: 1.0 * i / n)


@kernel
def reverse(a: Array[Double]) -> Array[Double]:
    n = length(a)
    return build(n, lambda i: a[n - 1 - i])


@kernel
def index_sum(n: Card) -> Index:
    return ifold(lambda s, i: s + i, 0, n)


@kernel
def math_mix(x: Double, k: Index) -> Double:
    return math.sqrt(abs(x)) + exp(-x * x) + fs.log(1 + x * x) + min(x, k) + max(k, 2) \
        + x ** 2 + fs.floor(x) + k // 3 + k % 4 + fs.pow(2, k % 5) + math.cos(k)


@kernel
def uses_later(a: Array[Double]) -> Double:
    return norm_squared(a) + defined_last(length(a))


@kernel
def norm_squared(a: Array[Double]) -> Double:
    return dot(a, a)


@kernel
def defined_last(n: Card) -> Double:
    return float(n)


@kernel
def matvec(m: Array[Array[Double]], v: Array[Double]) -> Array[Double]:
    return build(length(m), lambda i: ifold(lambda s, j: s + m[i][j] * v[j], 0.0, length(v)))


@kernel
def smooth(a: Array[Double], steps: Card) -> Array[Double]:
    n = length(a)
    step = lambda s, t: build(n, lambda i: (s[max(i - 1, 0)] + s[i] + s[min(i + 1, n - 1)]) / 3)
    return ifold(step, a, steps)


@kernel
def row_sums(m: Array[Array[Double]]) -> Array[Double]:
    return build(length(m), lambda i: sum_row(m[i]))


@kernel
def sum_row(r: Array[Double]) -> Double:
    return ifold(lambda s, j: s + r[j], 0, length(r))


@kernel
def apply_kernel(a: Array[Double]) -> Array[Double]:
    return build(length(a), lambda_free)  # a kernel passed as a function


@kernel
def lambda_free(i: Index) -> Double:
    return 2.0 * i


# ----------------------------------------------------------------------------- helpers

def body_nodes(k, name=None):
    program = parse_program(k)
    return list(walk(program.kernels[name or k.name].body))


def prim_ops(k):
    return [n.op for n in body_nodes(k) if isinstance(n, PrimApp)]


RNG = np.random.default_rng(20240601)


def assert_same(program_result, reference_result, rtol=1e-12):
    if isinstance(reference_result, np.ndarray):
        assert isinstance(program_result, np.ndarray)
        assert program_result.shape == reference_result.shape
        np.testing.assert_allclose(program_result, reference_result, rtol=rtol)
    else:
        assert program_result == pytest.approx(reference_result, rel=rtol)


def check(k, *args, rtol=1e-12):
    program = parse_program(k)
    got = run_kernel(program, k.name, list(args))
    want = k.reference(*args)
    assert_same(got, want, rtol)
    return got


# ----------------------------------------------------------------------------- agreement with the reference

@pytest.mark.parametrize("n", [1, 2, 7])
def test_vector_add_dot_transpose_matvec(n):
    a, b = RNG.standard_normal(n), RNG.standard_normal(n)
    m = RNG.standard_normal((n, n + 2))
    np.testing.assert_allclose(check(vector_add, a, b), a + b)
    assert check(dot, a, b) == pytest.approx(float(a @ b))
    np.testing.assert_array_equal(check(transpose, m), m.T)
    np.testing.assert_allclose(check(matvec, m.T, a), m.T @ a)
    np.testing.assert_allclose(check(row_sums, m), m.sum(axis=1))
    np.testing.assert_allclose(check(reverse, a), a[::-1])
    np.testing.assert_allclose(check(shifted_squares, a, 0.5), a * a + 0.5)
    np.testing.assert_allclose(check(apply_kernel, a), 2.0 * np.arange(n))


@pytest.mark.parametrize("n", [1, 3, 6])
def test_ifold_with_array_state(n):
    a = RNG.standard_normal(n)
    expected = a.copy()
    for _ in range(3):
        expected = np.array([(expected[max(i - 1, 0)] + expected[i] + expected[min(i + 1, n - 1)]) / 3
                             for i in range(n)])
    np.testing.assert_allclose(check(smooth, a, 3), expected)
    np.testing.assert_allclose(check(smooth, a, 0), a)


def test_conditionals():
    for x in (-2.5, 0.0, 3.0):
        assert check(sign, x) == (x > 0) - (x < 0)
    for x in (-1.0, 0.25, 7.0):
        assert check(clamp01, x) == min(max(x, 0.0), 1.0)


def test_and_or_short_circuit():
    a = np.array([1.0, -2.0, 0.0])
    # i == length(a): the right operand would index out of range; it must not be evaluated.
    for i in range(4):
        assert check(positive_at, a, i) == (i < 3 and a[i] > 0)
        assert check(outside_or_zero, a, i) == (i >= 3 or a[i] == 0)
    lo_hi = check(in_open_range, np.array([-1.0, 0.5, 2.0]), 0.0, 1.0)
    assert lo_hi.tolist() == [False, True, False]


def test_reference_rejects_what_numpy_would_wrap():
    a = np.array([1.0, 2.0])
    with pytest.raises(IndexError):
        positive_at.reference(a, -1)
    with pytest.raises(IndexError):
        run_kernel(parse_program(positive_at), "positive_at", [a, -1])
    with pytest.raises(IndexError):
        outside_or_zero.reference(a, -5)
    assert type(dot.reference(a, a)) is float
    assert type(vector_add.reference(a, a)) is np.ndarray


def test_float_arithmetic_stays_float():
    a = RNG.standard_normal(5).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    got = check(float_axpy, a, b, 1.5, rtol=1e-6)
    assert got.dtype == np.float32
    nodes = body_nodes(float_axpy)
    assert all(n.ty != Double for n in nodes)
    assert {n.op for n in nodes if isinstance(n, PrimApp)} == {"add", "mul", "div"}  # no casts
    assert {(n.value, n.ty) for n in nodes if isinstance(n, Lit)} == {(2.0, Float), (0.5, Float)}


def test_index_to_double_promotion_inserts_casts():
    np.testing.assert_allclose(check(ramp, 4), [0.0, 0.25, 0.5, 0.75])
    casts = [n for n in body_nodes(ramp) if isinstance(n, PrimApp) and n.op == "to_Double"]
    assert [c.args[0] for c in casts] == [Var("i", Index), Var("n", Card)]
    for n in body_nodes(ramp):
        if isinstance(n, PrimApp) and n.op in ("mul", "div"):
            assert all(arg.ty == Double for arg in n.args)


def test_index_and_card_arithmetic():
    nodes = body_nodes(reverse)
    (get,) = [n for n in nodes if isinstance(n, Get)]
    assert get.idx.ty == Index
    inner_sub, = [n for n in nodes if isinstance(n, PrimApp) and n.op == "sub" and n.ty == Card]
    assert inner_sub.args == (Var("n", Card), Lit(1, Card))  # n - 1: Card - Card stays Card
    assert any(isinstance(n, PrimApp) and n.op == "to_Index" for n in nodes)
    assert check(index_sum, 5) == 10
    (fold,) = [n for n in body_nodes(index_sum) if isinstance(n, Ifold)]
    assert fold.ty == Index and fold.init == Lit(0, Index)
    (fold,) = [n for n in body_nodes(dot) if isinstance(n, Ifold)]
    assert fold.ty == Double and fold.init == Lit(0.0, Double)


def test_math_builtins():
    for x, k in ((0.5, 3), (-1.25, 7), (2.0, 0)):
        check(math_mix, x, k)
    ops = prim_ops(math_mix)
    for op in ("sqrt", "abs", "exp", "log", "min", "max", "pow", "floor", "floordiv", "mod", "cos"):
        assert op in ops
    for n in body_nodes(math_mix):
        if isinstance(n, PrimApp) and n.op in ("floordiv", "mod"):
            assert n.ty == Index  # k // 3 stays integral
        if isinstance(n, PrimApp) and n.op == "cos":
            assert n.args[0] == PrimApp("to_Double", (Var("k", Index),), Double)


def test_kernels_calling_kernels_defined_later():
    a = RNG.standard_normal(4)
    assert check(uses_later, a) == pytest.approx(float(a @ a) + 4.0)
    program = parse_program(uses_later)
    assert list(program.kernels) == ["dot", "norm_squared", "defined_last", "uses_later"]
    assert program.entry == "uses_later"
    calls = [n for n in walk(program.main.body) if isinstance(n, Call)]
    assert [(c.fn, c.ty) for c in calls] == [("norm_squared", Double), ("defined_last", Double)]


def test_kernels_in_a_closure_resolve_at_compile_time():
    @kernel
    def outer(x: Double) -> Double:
        return inner(x) * 2.0

    @kernel
    def inner(y: Double) -> Double:
        return y + 1.0

    assert check(outer, 1.5) == 5.0
    assert set(parse_program(outer).kernels) == {"inner", "outer"}


def test_helper_kernel_and_lambdas_are_typed():
    program = parse_program(shifted_squares)
    helper = program.kernels["map_array"]
    assert helper.is_helper and not program.main.is_helper
    assert helper.params[0] == ("f", FunT((Double,), Double))
    body = program.main.body
    assert isinstance(body, Let) and body.name == "square"
    assert body.rhs.ty == FunT((Double,), Double) and isinstance(body.rhs, Lam)
    (call,) = [n for n in walk(body) if isinstance(n, Call)]
    assert isinstance(call.args[0], Lam) and call.args[0].ty == FunT((Double,), Double)


def test_transpose_types_and_locations():
    program = parse_program(transpose)
    builds = [n for n in walk(program.main.body) if isinstance(n, Build)]
    assert [b.ty for b in builds] == [ArrayT(ArrayT(Double)), ArrayT(Double)]
    assert builds[0].fn.params == (("j", Index),)
    source = open(__file__).read().splitlines()
    for n in walk(program.main.body):
        assert n.ty is not None and n.loc is not None
        assert n.loc.filename == __file__
        assert source[n.loc.lineno - 1] == n.loc.source_line
    (get_ij,) = [n for n in walk(program.main.body) if isinstance(n, Get) and isinstance(n.arr, Get)]
    line = get_ij.loc.source_line
    assert line[get_ij.loc.col_offset:get_ij.loc.end_col_offset] == "m[i][j]"


def test_shadowing_lambda_parameters_are_renamed():
    program = parse_program(shadowing)
    binders = [p for n in walk(program.main.body) if isinstance(n, Lam) for p, _ in n.params]
    assert len(binders) == len(set(binders)) and "n" not in binders
    assert check(shadowing, 3).tolist() == [[0, 1, 2]] * 3


@kernel
def shadowing(n: Card) -> Array[Array[Index]]:
    return build(n, lambda i: build(n, lambda i: i + 0 * (lambda n: n)(i)))


def test_conditional_branches_unify_and_if_statement_types():
    nodes = body_nodes(clamp01)
    ifs = [n for n in nodes if isinstance(n, If)]
    assert all(i.ty == Double and i.cond.ty == Bool for i in ifs)
    assert Lit(0.0, Double) in nodes and Lit(1.0, Double) in nodes  # weak literals adopted Double
    for n in nodes:
        if isinstance(n, PrimApp) and n.op == "lt":
            assert n.args[0].ty == n.args[1].ty == Double


def test_printer_shows_every_kernel():
    text = show_program(parse_program(uses_later))
    for name in ("dot", "norm_squared", "defined_last", "uses_later"):
        assert f"{name} = λ" in text
