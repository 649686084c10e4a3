"""The shape translation S⟦e⟧ and its partial evaluation: the paper's §3.4-3.5 forms, symbolic
result shapes, and the located compile errors of Fig. 8."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import linalg
from fsmooth import Array, Bool, Card, Double, build, core, ifold, length
from fsmooth.errors import CompileError
from fsmooth.anf import anf_program
from fsmooth.shape.ir import CIRC, VecShape, show_kernel, show_value
from fsmooth.shape.sizes import size_symbol
from fsmooth.shape.translate import shape_program


def shapes(kernel):
    return shape_program(anf_program(kernel.program()))


def test_running_example_in_the_papers_forms():
    p = shapes(linalg.f)
    assert show_kernel(p.kernels["vector_add"]) == "vector_add_shp = λ v1_shp v2_shp. v1_shp"
    assert show_kernel(p.kernels["vector_norm"]) == "vector_norm_shp = λ v_shp. ∘"
    assert show_kernel(p.kernels["f"], simplified=False) == (
        "f_shp = λ vec1_shp vec2_shp. let tmp_shp = vector_add_shp vec1_shp vec2_shp in\n"
        "  vector_norm_shp tmp_shp")
    translated = show_kernel(p.kernels["vector_add"], simplified=False)
    assert "fst v1_shp" in translated and "(λ i_shp." in translated
    assert show_value(p.kernels["vector_add"].result) == "(v1_d0, ∘)"


def test_symbolic_results():
    p = shapes(linalg.matrix_mul)
    m1_d0, m2_d1 = size_symbol("m1_d0"), size_symbol("m2_d1")
    assert p.kernels["matrix_mul"].result == VecShape(m1_d0, VecShape(m2_d1, CIRC))
    assert show_kernel(p.kernels["matrix_transpose"]) == "matrix_transpose_shp = λ m_shp. fst (snd m_shp), fst m_shp, ∘"
    s = shapes(linalg.vector_slice).kernels["vector_slice"]
    assert sympy.simplify(s.result.card - (size_symbol("e") - size_symbol("s") + 1)) == 0
    assert s.sizes == (size_symbol("v_d0"), size_symbol("s"), size_symbol("e"))


def test_card_results_are_values():
    p = shapes(linalg.matrix_cols)
    assert p.kernels["matrix_cols"].result == size_symbol("m_d1")


@fs.kernel
def branches_differ(a: Array[Double], c: Bool) -> Array[Double]:
    return a if c else build(length(a) + 1, lambda i: 0.0)


@fs.kernel
def branches_agree(a: Array[Double], c: Bool) -> Array[Double]:
    return a if c else build(length(a), lambda i: 2.0 * a[i])


@fs.kernel
def state_grows(a: Array[Double], n: Card) -> Array[Double]:
    return ifold(lambda s, i: build(length(s) + 1, lambda j: 0.0), a, n)


@fs.kernel
def size_from_data(a: Array[Card]) -> Array[Double]:
    return build(a[0], lambda i: 1.0)


def located(kernel, fragment):
    with pytest.raises(CompileError) as info:
        shapes(kernel)
    err = info.value
    assert err.lineno is not None and err.loc.source_line.strip().startswith("return")
    assert fragment in err.message
    return err


def test_shape_errors_are_located():
    located(branches_differ, "different shapes")
    located(state_grows, "changes shape")
    located(size_from_data, "must be computable from the input sizes")
    assert shapes(branches_agree).kernels["branches_agree"].result == VecShape(size_symbol("a_d0"), CIRC)


def test_anf_keeps_the_reference_semantics(rng):
    p = branches_agree.program()
    s = anf_program(p)
    a = rng.standard_normal(4)
    for c in (True, False):
        np.testing.assert_allclose(core.run_kernel(s, "branches_agree", [a, c]), branches_agree.reference(a, c))
