"""D⟦e⟧r, alloc simplification and the arena layout: every corpus kernel, interpreted over a
byte arena of exactly its computed scratch after each pass, against the core interpreter."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import iterate, linalg
from fsmooth import Array, Card, Double, Index, build, core, length
from fsmooth.anf import anf_program
from fsmooth.shape.translate import shape_program
from fsmooth.dps import ir
from fsmooth.dps.interp import run_kernel
from fsmooth.dps.show import show_kernel
from fsmooth.dps.simplify import simplify_allocs
from fsmooth.dps.translate import dps_program
from test_corpus import CASES, arguments, assert_close


def stages(kernel: fs.Kernel):
    anf = anf_program(kernel.program())
    translated = dps_program(anf, shape_program(anf))
    return anf, translated, simplify_allocs(translated)


def check_run(program: ir.Program, name: str, args, expected):
    run = run_kernel(program, name, list(args))
    assert_close(run.result, expected, rtol=1e-12, atol=1e-12)
    assert run.high_water <= run.scratch
    return run


CASE_PARAMS = [pytest.param(c, c.variants[-1], id=f"{c.kernel.name}-{i}") for i, c in enumerate(CASES)
               if not c.single_precision]


@pytest.mark.parametrize("case, variant", CASE_PARAMS)
def test_each_pass_computes_the_reference(case, variant):
    args = arguments(case, variant)
    expected = core.run_kernel(case.kernel.program(), case.kernel.name, list(args))
    _, translated, simplified = stages(case.kernel)
    check_run(translated, case.kernel.name, args, expected)
    run = check_run(simplified, case.kernel.name, args, expected)
    assert run.scratch <= run_kernel(translated, case.kernel.name, list(args)).scratch


def test_running_example_prints_like_the_paper():
    _, _, dps = stages(linalg.f)
    assert show_kernel(dps.kernels["f"]) == (
        "f = λ out vec1 vec2 vec1_shp vec2_shp.\n"
        "  alloc (bytes vec1_shp) (λ r1.\n"
        "    let tmp = vector_add r1 vec1 vec2 vec1_shp vec2_shp in\n"
        "    vector_norm • tmp vec1_shp)")


@pytest.mark.parametrize("n", [1, 2, 7])
def test_running_example_scratch_is_exact(rng, n):
    _, _, dps = stages(linalg.f)
    rounded = 16 * ((8 * n + 15) // 16)
    k = dps.kernels["f"]
    # tmp = vector_add(vec1, vec2), then vector_dot's vector_emul(tmp, tmp) inside vector_norm
    n_sym = k.sizes[0]
    assert sympy.simplify(k.scratch - 2 * 16 * sympy.ceiling(n_sym / 2)) == 0
    run = run_kernel(dps, "f", [rng.standard_normal(n), rng.standard_normal(n)])
    assert run.high_water == run.scratch == 2 * rounded
    assert dps.kernels["vector_add"].scratch == 0 and dps.kernels["vector_sum"].scratch == 0


def test_views_are_neither_allocated_nor_copied():
    _, _, dps = stages(linalg.matrix_mul)
    text = show_kernel(dps.kernels["matrix_mul"])
    assert "copy" not in text
    assert text.count("alloc") == 1  # m2t only; the rows m1[i] and m2t[j] are views


def test_array_ifold_double_buffers():
    _, _, dps = stages(iterate.jacobi)
    k = dps.kernels["jacobi"]
    assert isinstance(k.body, ir.Alloc) and isinstance(k.body.body, ir.Alloc)
    loop = k.body.body.body
    assert isinstance(loop, ir.Ifold) and loop.buffers == (k.body.region, k.body.body.region)
    assert isinstance(loop.body, ir.Call) and loop.body.dest == ir.StateDest(loop.state)
    assert isinstance(loop.init, ir.Copy) and loop.init.dest == ir.RVar(loop.buffers[0])
    u = k.sizes[0]
    assert sympy.simplify(k.scratch - 2 * 16 * sympy.ceiling(u / 2)) == 0


def test_constraints_of_vector_add_name_the_shorter_vector(rng):
    _, _, dps = stages(linalg.vector_add)
    (c,) = dps.kernels["vector_add"].constraints
    assert c.param == "v2" and "v2 has length v2_d0" in c.message and "v1_d0 - 1" in c.message
    with pytest.raises(ValueError, match="v2"):
        run_kernel(dps, "vector_add", [rng.standard_normal(4), rng.standard_normal(3)])
    check_run(dps, "vector_add", [np.ones(3), np.ones(5)], np.full(3, 2.0))


@fs.kernel
def shift(a: Array[Double]) -> Array[Double]:
    return build(length(a), lambda i: a[i - 1] if i > 0 else 0.0)


@fs.kernel
def gather(a: Array[Double], b: Array[Index]) -> Array[Double]:
    return build(length(b), lambda i: a[b[i]])


@fs.kernel
def tail(a: Array[Double], k: Card) -> Array[Double]:
    return build(k, lambda i: a[i + 2])


def test_reads_under_branches_and_data_dependent_reads_are_checked(rng):
    _, _, dps = stages(shift)
    assert dps.kernels["shift"].constraints == ()
    check_run(dps, "shift", [np.arange(4.0)], np.array([0.0, 0.0, 1.0, 2.0]))
    _, _, dps = stages(gather)
    gets = [t for t in _terms(dps.kernels["gather"].body) if isinstance(t, ir.Get)]
    assert {g.arr.name: g.checked for g in gets} == {"b": False, "a": True}
    with pytest.raises(IndexError):
        run_kernel(dps, "gather", [np.ones(3), np.array([0, 5])])


def test_affine_read_constraint_is_guarded_by_the_loop_count(rng):
    _, _, dps = stages(tail)
    conds = {str(c.cond) for c in dps.kernels["tail"].constraints}
    assert conds == {"(k <= 0) | (k + 1 < a_d0)"}
    check_run(dps, "tail", [np.arange(5.0), 3], np.array([2.0, 3.0, 4.0]))
    check_run(dps, "tail", [np.arange(1.0), 0], np.zeros(0))
    with pytest.raises(ValueError, match="a has length a_d0"):
        run_kernel(dps, "tail", [np.arange(5.0), 4])


def _terms(t):
    return list(ir.walk(t))
