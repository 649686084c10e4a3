"""DPIA: the functional phrases of hand-built DPS kernels, the acceptor/continuation translation
(its printed form against the paper's), and range-aware index simplification."""
from __future__ import annotations

import re

import pytest
import sympy

from fsmooth.dpia import phrases as p
from fsmooth.dpia.inline_scalar_lets import mark_beta_reducible
from fsmooth.dpia.translate import TRANSLATIONS, Translation, dpia_program
from fsmooth.dps.show import show_program as show_dps
from fsmooth.dps import ir as d
from fsmooth.dps.ranges import Ranges, in_range, positive, simplify_index
from fsmooth.core import Lit, Var
from fsmooth.types import Array, Bool, Card, Double, Index

A = Array[Double]
n, m = sympy.Symbol("n", integer=True, nonnegative=True), sympy.Symbol("m", integer=True, nonnegative=True)


def v(name, ty=Double):
    return Var(name, ty)


def kernel(name, params, result, result_dims, body, sizes, scratch=0):
    prog = d.Program({name: d.Kernel(name, "out", params, result, result_dims, body, sizes, (), scratch)}, name)
    return dpia_program(mark_beta_reducible(prog)).kernels[name]


def vector_add_body():
    return d.Build(d.RVar("out"), n, "i",
                   d.Let("x", d.Get(v("a", A), v("i", Index), Double),
                         d.Let("y", d.Get(v("b", A), v("i", Index), Double),
                               d.Prim("add", (v("x"), v("y")), Double), Double), Double), A)


def test_vector_add_reads_like_the_paper():
    k = kernel("vadd", (("a", A, (n,)), ("b", A, (n,))), A, (n,), vector_add_body(), (n,))
    assert re.fullmatch(r"parfor n out \(λ i (o'?)\. \1 := a\[i\] \+ b\[i\]\)", p.show(k.body))
    assert p.show(k.functional) == "build n (λ i.\n  a[i] + b[i])"
    assert p.show_type(k.param_phrases["a"].type) == "exp[n.double]"


def test_dot_is_a_new_accumulator_and_a_for():
    body = d.Ifold(d.Bullet(), "s", "i",
                   d.Let("x", d.Get(v("a", A), v("i", Index), Double),
                         d.Prim("add", (v("s"), v("x")), Double), Double),
                   d.Atom_(Lit(0.0, Double)), n, Double)
    k = kernel("total", (("a", A, (n,)),), Double, (), body, (n,))
    text = p.show(k.body)
    assert text == "new double (λ s.\n  s := 0.0;\n  for n (λ i.\n    s := s + a[i]);\n  out := s)"


def test_the_beta_reduction_pass_marks_the_lets_it_inlines():
    prog = d.Program({"vadd": d.Kernel("vadd", "out", (("a", A, (n,)), ("b", A, (n,))), A, (n,),
                                       vector_add_body(), (n,), (), 0)}, "vadd")
    marked = mark_beta_reducible(prog)
    assert "let x := a[i]" in show_dps(marked) and "let y := b[i]" in show_dps(marked)
    assert "let x = a[i]" in show_dps(prog)
    # unmarked, the translation binds each let
    assert p.show(dpia_program(prog).kernels["vadd"].functional).count("let") == 2


def test_a_value_used_twice_is_stored_once():
    body = d.Build(d.RVar("out"), n, "i",
                   d.Let("x", d.Get(v("a", A), v("i", Index), Double),
                         d.Prim("mul", (v("x"), v("x")), Double), Double), A)
    k = kernel("square", (("a", A, (n,)),), A, (n,), body, (n,))
    assert "new double (λ x.\n" in p.show(k.body)
    assert p.show(k.body).count("a[i]") == 1


def test_no_read_is_moved_past_a_write():
    # let x = a[0] in (let t = build r ... in x + t[0]): x must be read before the build writes
    inner = d.Let("t", d.Build(d.RVar("r"), n, "i", d.Atom_(Lit(1.0, Double)), A),
                  d.Let("t0", d.Get(v("t", A), Lit(0, Index), Double),
                        d.Prim("add", (v("x"), v("t0")), Double), Double), A, (n,))
    body = d.Alloc("r", Double, n, d.Let("x", d.Get(v("a", A), Lit(0, Index), Double), inner, Double))
    text = p.show(kernel("k", (("a", A, (n,)),), Double, (), body, (n,)).body)
    assert text.index("x := a[0]") < text.index("parfor n r")


def jacobi_body():
    step = d.Build(d.StateDest("x"), n, "i",
                   d.Let("l", d.Prim("max", (v("i", Index), Lit(1, Index)), Index),
                         d.Let("xl", d.Get(v("x", A), v("l", Index), Double, checked=True),
                               d.Prim("add", (v("xl"), Lit(1.0, Double)), Double), Double), Index), A)
    loop = d.Ifold(d.RVar("out"), "x", "t", step, d.Copy(d.RVar("b0"), v("a", A), n, Double),
                   v("k", Card), A, ("b0", "b1"))
    return d.Alloc("b0", Double, n, d.Alloc("b1", Double, n, loop, 8 * n), 0)


def _assigned(c: p.Phrase, under_double_buffer=False) -> list:
    """(acceptor identifier, inside a double buffer) of every assignment in ``c``."""
    match c:
        case p.Assign(acc, _):
            return [(_root(acc), under_double_buffer)]
        case p.Seq(cmds):
            return [x for cmd in cmds for x in _assigned(cmd, under_double_buffer)]
        case p.New(body=body) | p.For(body=body):
            return _assigned(body, under_double_buffer)
        case p.ParFor(_, acc, _, out, _, body):
            return [(_root(acc) if name == out else name, u) for name, u in _assigned(body, under_double_buffer)]
        case p.DoubleBuffer(body=body, after=after):
            return _assigned(body, True) + _assigned(after, under_double_buffer)
        case p.IfCmd(_, a, b):
            return _assigned(a, under_double_buffer) + _assigned(b, under_double_buffer)
    return []


def _root(acc: p.Phrase) -> str:
    match acc:
        case p.Ident(name):
            return name
        case p.Idx(arr) | p.Shift(arr):
            return _root(arr)
    raise AssertionError(acc)


def test_array_state_ifold_is_double_buffered():
    k = kernel("smooth", (("a", A, (n,)), ("k", Card, ())), A, (n,), jacobi_body(), (n, sympy.Symbol("k")))
    text = p.show(k.body)
    assert "newDoubleBuffer b0 b1 (λ x x_next." in text
    assert "x[max(i, 1)]!" in text  # the checked read survives into imperative DPIA
    assigned = _assigned(k.body)
    assert ("x_next", True) in assigned
    assert all(name != "x" for name, inside in assigned if inside)  # never written while read
    assert ("b0", False) in assigned and ("out", False) in assigned


def test_scalar_condition_goes_through_a_new_variable():
    body = d.Let("y", d.If(v("c", Bool), d.Atom_(Lit(1.0, Double)), d.Atom_(Lit(2.0, Double)), Double),
                 d.Prim("mul", (v("y"), v("y")), Double), Double)
    k = kernel("cond", (("c", Bool, ()),), Double, (), body, ())
    assert p.show(k.body) == ("new double (λ y.\n  if c then\n    y := 1.0\n  else\n    y := 2.0;\n"
                              "  out := y * y)")


def test_continuation_of_an_unstored_array_is_an_error():
    build = p.Build(n, "i", p.Literal(1.0, p.Num(Double)), p.Num(Double))
    with pytest.raises(AssertionError, match="without a region"):
        Translation().con(build, lambda x: p.Skip())


def test_every_functional_primitive_has_both_translations():
    functional = [p.Ident, p.Literal, p.NatExp, p.ScalarOp, p.Idx, p.Shift, p.Build, p.Ifold, p.Scan, p.Filter,
                  p.Cond, p.Kept, p.Let, p.Bind, p.Alloc, p.CallExp, p.Record, p.Proj]
    assert set(TRANSLATIONS) == set(functional)
    assert all(len(pair) == 2 and all(callable(f) for f in pair) for pair in TRANSLATIONS.values())


def test_data_types():
    d2 = p.array_data(Double, (n, m))
    assert p.show_data(d2) == "n.m.double"
    assert p.elements(d2) == n * m
    assert p.dims_of(d2) == (n, m)
    assert p.show_data(p.array_data(Double, (n + 1,))) == "(n + 1).double"


def test_index_simplification_uses_loop_ranges():
    i, j = sympy.symbols("i j", integer=True)
    ranges = Ranges().inside(i, n - 1).inside(j, m - 1)
    assert simplify_index(sympy.floor((i * m + j) / m), ranges) == i
    assert simplify_index(sympy.Mod(i * m + j, m), ranges) == j
    assert simplify_index(sympy.floor((i * m + j) / m) * m + sympy.Mod(i * m + j, m), ranges) == i * m + j
    # j may reach m: nothing to prove, nothing removed
    assert simplify_index(sympy.floor((i * m + j) / m), Ranges().inside(i, n - 1).inside(j, m)).has(sympy.floor)
    # an unknown variable: nothing removed
    assert simplify_index(sympy.Mod(i * m + j, m), Ranges().inside(i, n - 1)).has(sympy.Mod)


def test_quotient_and_remainder_of_one_division_recombine():
    k = sympy.Symbol("k", integer=True)
    ranges = Ranges().inside(k, n * m - 1)
    assert simplify_index(m * sympy.floor(k / m) + sympy.Mod(k, m), ranges) == k
    assert simplify_index(3 * m * sympy.floor(k / m) + 3 * sympy.Mod(k, m) + 1, Ranges()) == 3 * k + 1
    assert simplify_index(m * sympy.floor(k / m) + sympy.Mod(k, n), ranges).has(sympy.Mod)


def test_loop_ranges_bound_quotients_and_prove_divisors_nonzero():
    k = sympy.Symbol("k", integer=True)
    ranges = Ranges().inside(k, n * m - 1)  # inside `for k < n*m`: n*m >= 1, so m >= 1
    assert positive(m, ranges) and positive(n, ranges) and positive(sympy.Integer(2), Ranges())
    assert not positive(m, Ranges()) and not positive(m, Ranges().inside(k, n - 1))
    assert in_range(sympy.floor(k / m), n, ranges) and not in_range(sympy.floor(k / m), n - 1, ranges)
    assert in_range(sympy.Mod(k, m), m, ranges) and not in_range(sympy.Mod(k, m), m - 1, ranges)
    assert in_range(k, n * m, ranges) and not in_range(k + 1, n * m, ranges)
