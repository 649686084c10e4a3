"""F̃ simplification (DPS §3.5 stage 1): the running example fuses into the paper's form, every
corpus kernel keeps its meaning under each pass on and off, each pass is idempotent, each
option really switches its pass off, and the rules about where work may move hold."""
from __future__ import annotations

import importlib.util
import pathlib
from dataclasses import asdict, replace

import numpy as np
import pytest

import fsmooth as fs
from corpus import iterate, linalg, ml
from fsmooth import Array, Bool, Card, Double, build, core, length
from fsmooth.core import Build, Call, Get, If, Ifold, Lit, PrimApp, show_kernel
from fsmooth.optimize import optimize_program
from fsmooth.options import VARIANTS, Options
from fsmooth.anf import anf_program
from test_corpus import CASES, arguments, assert_close

PASSES = ("fusion", "inline_kernels", "inline_lets", "constant_folding", "cse", "dce", "licm", "guards_to_bounds")
ALL_ON = Options()
ALL_OFF = Options(**{name: False for name in PASSES})
# The DPS paper's D variant (no F̃ simplification) with the default arena allocation.
UNFUSED = replace(VARIANTS["malloc"], allocation="arena")

CONFIGS = {"all-on": ALL_ON, "all-off": ALL_OFF}
CONFIGS |= {f"only-{name}": replace(ALL_OFF, **{name: True}) for name in PASSES}
CONFIGS |= {f"no-{name}": replace(ALL_ON, **{name: False}) for name in PASSES}


def _load_micro_kernels():
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "micro_kernels.py"
    spec = importlib.util.spec_from_file_location("micro_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


micro_kernels = _load_micro_kernels()


def optimized(kernel: fs.Kernel, options: Options = ALL_ON) -> core.Program:
    return optimize_program(anf_program(kernel.program()), options)


def count(e: core.Expr, node_type) -> int:
    return sum(isinstance(t, node_type) for t in core.walk(e))


def compiled(kernel: fs.Kernel, options: Options) -> fs.Kernel:
    return kernel.with_options(**asdict(options))


def test_unfused_options_are_the_malloc_variants_switches():
    assert all(getattr(UNFUSED, name) is False for name in PASSES)
    assert UNFUSED.allocation == "arena" and not UNFUSED.simplifies
    assert optimized(linalg.f, UNFUSED) == anf_program(linalg.f.program())


# ----------------------------------------------------------------------------- running example

FUSED_F = """\
f = λ vec1 vec2.
  let tmp_1 = length vec1 in
  let tmp_2 = ifold (λ acc idx.
      let a = vec1[idx] in
      let b = vec2[idx] in
      let a_1 = (a + b) in
      let tmp_1_1_1 = (a_1 * a_1) in
      (acc + tmp_1_1_1)) 0.0 tmp_1 in
  sqrt(tmp_2)"""


def test_running_example_fuses_into_the_papers_form():
    f = optimized(linalg.f).kernels["f"]
    assert show_kernel(f) == FUSED_F
    assert count(f.body, Build) == 0 and count(f.body, Call) == 0 and count(f.body, Ifold) == 1
    (loop,) = (t for t in core.walk(f.body) if isinstance(t, Ifold))
    assert loop.count == core.Var("tmp_1", Card)  # length vec1
    # tmp = vec1[idx] + vec2[idx] is computed once and squared: CSE merged the two reads of it
    assert count(loop.fn.body, Get) == 2


def test_running_example_dps_has_no_alloc(rng):
    from fsmooth.dps.interp import run_kernel
    from fsmooth.dps.show import show_kernel as show_dps
    from fsmooth.dps.simplify import simplify_allocs
    from fsmooth.dps.translate import dps_program
    from fsmooth.shape.translate import shape_program

    anf = optimized(linalg.f)
    dps = simplify_allocs(dps_program(anf, shape_program(anf)), ALL_ON)
    assert "alloc" not in show_dps(dps.kernels["f"]) and dps.kernels["f"].scratch == 0
    vec1, vec2 = rng.standard_normal(9), rng.standard_normal(9)
    run = run_kernel(dps, "f", [vec1, vec2])
    assert run.result == pytest.approx(np.linalg.norm(vec1 + vec2), rel=1e-12)
    assert run.high_water == 0


def test_running_example_compiled_fused_and_unfused(rng):
    vec1, vec2 = rng.standard_normal(50), rng.standard_normal(50)
    fused, unfused = compiled(linalg.f, ALL_ON), compiled(linalg.f, UNFUSED)
    assert "malloc" not in fused.c_source()
    for kernel in (fused, unfused):
        assert kernel(vec1, vec2) == pytest.approx(np.linalg.norm(vec1 + vec2), rel=1e-12)
    assert fused.scratch_bytes(vec1, vec2) == 0 < unfused.scratch_bytes(vec1, vec2)
    with pytest.raises(ValueError, match="'vec2'"):  # fusion keeps vectorAdd's size check
        fused(np.ones(3), np.ones(2))


# ----------------------------------------------------------------------------- the corpus

CASE_PARAMS = [pytest.param(c, id=f"{c.kernel.name}-{i}") for i, c in enumerate(CASES)]


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_each_configuration_computes_the_reference(case):
    args = arguments(case, case.variants[-1])
    expected = core.run_kernel(case.kernel.program(), case.kernel.name, list(args))
    for name, options in CONFIGS.items():
        got = core.run_kernel(optimized(case.kernel, options), case.kernel.name, list(args))
        assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_optimized_dps_computes_the_reference_in_its_scratch(case):
    from fsmooth.dps.interp import run_kernel
    from fsmooth.dps.simplify import simplify_allocs
    from fsmooth.dps.translate import dps_program
    from fsmooth.shape.translate import shape_program

    args = arguments(case, case.variants[-1])
    expected = core.run_kernel(case.kernel.program(), case.kernel.name, list(args))
    anf = optimized(case.kernel)
    dps = simplify_allocs(dps_program(anf, shape_program(anf)), ALL_ON)
    run = run_kernel(dps, case.kernel.name, list(args))
    assert_close(run.result, expected, **case.tol)
    assert run.high_water <= run.scratch


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_each_pass_is_idempotent(case):
    for name in ("all-on", *(f"only-{p}" for p in PASSES)):
        once = optimized(case.kernel, CONFIGS[name])
        assert optimize_program(once, CONFIGS[name]) == once, name


def _vectors_and_count(rng):
    return rng.standard_normal(7), rng.standard_normal(7), rng.standard_normal(7), 20


@pytest.mark.parametrize("kernel, make_args", [
    (ml.softmax, lambda rng: (rng.standard_normal(9),)),
    (iterate.jacobi, lambda rng: (rng.standard_normal(6), 4)),
    (micro_kernels.add3_loop, _vectors_and_count),
], ids=["softmax", "jacobi", "add3_loop"])
def test_compiled_under_each_switch(rng, kernel, make_args):
    args = make_args(rng)
    expected = kernel.reference(*args)
    for name in ("all-on", "all-off", "no-fusion", "no-cse"):
        np.testing.assert_allclose(compiled(kernel, CONFIGS[name])(*args), expected,
                                   rtol=1e-12, atol=1e-12, err_msg=name)


# ----------------------------------------------------------------------------- each switch

@fs.kernel
def scaled(a: Array[Double]) -> Array[Double]:
    k = 2.0 * 3.0
    return build(length(a), lambda i: a[i] * k)


@fs.kernel
def squares(a: Array[Double]) -> Array[Double]:
    return build(length(a), lambda i: a[i] * a[i])


@fs.kernel
def second_first(a: Array[Double], b: Array[Double]) -> Double:
    unused = a[0] + 1.0
    return b[0]


@fs.kernel
def renamed(a: Array[Double]) -> Double:
    b = a
    return b[0]


def _literal_products(e):
    return [t for t in core.walk(e) if isinstance(t, PrimApp) and all(isinstance(x, Lit) for x in t.args)]


def _reads_of(e, name):
    return [t for t in core.walk(e) if isinstance(t, Get) and t.arr.name == name]


@pytest.mark.parametrize("switch, kernel, applied", [
    ("fusion", linalg.f, lambda k: count(k.body, Build) == 0),
    ("inline_lets", linalg.f, lambda k: count(k.body, Build) == 0),
    ("inline_kernels", linalg.f, lambda k: count(k.body, Call) == 0),
    ("constant_folding", scaled, lambda k: not _literal_products(k.body)),
    ("cse", squares, lambda k: count(k.body, Get) == 1),
    ("dce", second_first, lambda k: not _reads_of(k.body, "a")),
    ("inline_lets", renamed, lambda k: _reads_of(k.body, "a")),
])
def test_each_switch_turns_its_pass_off(switch, kernel, applied):
    on = optimized(kernel).main
    off = optimized(kernel, replace(ALL_ON, **{switch: False})).main
    assert applied(on) and not applied(off)
    args = [np.arange(1.0, 5.0)] * len(kernel.program().main.params)
    assert core.run_kernel(optimized(kernel), kernel.name, args) == pytest.approx(kernel.reference(*args))


# ----------------------------------------------------------------------------- where work may move

@fs.kernel
def normalised(v: Array[Double]) -> Array[Double]:
    s = linalg.vector_sum(v)
    return build(length(v), lambda i: v[i] / s)


@fs.kernel
def branches(a: Array[Double], c: Bool) -> Double:
    return a[0] * 2.0 if c else a[0] * 2.0 + 1.0


@fs.kernel
def literal_division(a: Array[Double]) -> Card:
    n = 7
    zero = 0
    return n // zero


@fs.kernel
def folded(a: Array[Double]) -> Double:
    w = 2.0
    h = 3.0 + 1.0
    return a[0] * (w * h) if w < h else 0.0


def test_a_reduction_read_in_a_build_stays_outside_it():
    k = optimized(normalised).main
    (outer,) = (t for t in core.walk(k.body) if isinstance(t, Build))
    assert count(outer.fn.body, Ifold) == 0 and count(k.body, Ifold) == 1


def test_an_intermediate_read_twice_exists_and_its_producer_is_fused():
    k = optimized(micro_kernels.add3_loop).main
    (loop,) = (t for t in core.walk(k.body) if isinstance(t, Ifold))
    # add3's vector_add(a, b) fused into the second vector_add: one build, read twice
    (t,) = (t for t in core.walk(loop.fn.body) if isinstance(t, core.Let) and isinstance(t.rhs, Build))
    assert len(_reads_of(t.body, t.name)) == 2
    assert count(k.body, Build) == 1 and count(k.body, Call) == 0


def test_nothing_leaves_a_branch():
    k = optimized(branches).main
    assert isinstance(k.body, If)  # a[0] * 2.0, in both branches, is not hoisted before the If
    assert len(_reads_of(k.body.then, "a")) == len(_reads_of(k.body.orelse, "a")) == 1


def test_integer_division_by_zero_is_not_folded():
    k = optimized(literal_division).main
    assert isinstance(k.body, PrimApp) and k.body.op == "floordiv"
    assert k.body.args == (Lit(7, Card), Lit(0, Card))
    with pytest.raises(ZeroDivisionError):
        core.run_kernel(optimized(literal_division), "literal_division", [np.ones(1)])


def test_constants_fold_through_lets_and_conditionals():
    k = optimized(folded).main
    assert show_kernel(k) == "folded = λ a.\n  let tmp_1 = a[0] in\n  (tmp_1 * 8.0)"


def test_a_kernel_returning_a_small_constant_size_array_is_inlined_up_to_its_larger_limit():
    # BA: project (a 2-vector) and Rodrigues' rotation (a 3-vector) are bigger than SMALL_KERNEL,
    # yet no call is left in the loop over the observations; GMM's main_terms is as small, but
    # its result has K elements (a run-time size), so its call stays in the fold over the points,
    # unless the points are jammed (Options.jam_reductions: inlined into the fold's element).
    from corpus import adbench_ba, adbench_gmm
    from fsmooth.inline_kernels import SMALL_KERNEL, SMALL_RESULT_KERNEL, size

    ba = optimized(adbench_ba.ba_objective)
    for name in ("project", "rodrigues_rotate_point"):
        assert SMALL_KERNEL < size(ba.kernels[name].body) <= SMALL_RESULT_KERNEL, name
    assert core.called_kernels(ba.main.body) == set()
    gmm = optimized(adbench_gmm.gmm_full_objective, Options(jam_reductions=False))
    assert SMALL_KERNEL < size(gmm.kernels["main_terms"].body) <= SMALL_RESULT_KERNEL
    assert "main_terms" in core.called_kernels(gmm.main.body)
    assert "main_terms" not in core.called_kernels(optimized(adbench_gmm.gmm_full_objective).main.body)


def test_the_call_of_a_result_over_a_dead_argument_it_reads_row_wise_is_inlined():
    # Hand's global transform (over SMALL_KERNEL, its result V x 3) reads its positions row by row:
    # inlined, DPS writes it over them (test_in_place); image's blur_cols reads the rows around
    # each of its rows, so its call stays, as it does with update_in_place off
    from corpus import adbench_hand, image
    from fsmooth.inline_kernels import SMALL_KERNEL, size

    hand = optimized(adbench_hand.get_skinned_vertex_positions)
    assert size(hand.kernels["apply_global_transform"].body) > SMALL_KERNEL
    assert "apply_global_transform" not in core.called_kernels(hand.main.body)
    off = optimized(adbench_hand.get_skinned_vertex_positions, replace(ALL_ON, update_in_place=False))
    assert "apply_global_transform" in core.called_kernels(off.main.body)
    assert "blur_cols" in core.called_kernels(optimized(image.gaussian_blur3).main.body)


def test_whether_a_callee_returns_a_small_array_is_translated_once_per_kernel(monkeypatch):
    # The optimiser asks it of each callee at every round of every caller; the answer depends on the
    # callee and what it calls only, so each callee's shape is translated once, not once per question.
    from corpus import adbench_hand
    from fsmooth import inline_kernels
    from fsmooth.types import ArrayT

    asked, translated = [], []
    ask, translate = inline_kernels.returns_small_array, inline_kernels.shape_kernel
    monkeypatch.setattr(inline_kernels, "returns_small_array", lambda p, k: asked.append(k.name) or ask(p, k))
    monkeypatch.setattr(inline_kernels, "shape_kernel", lambda k, *a: translated.append(k.name) or translate(k, *a))
    inline_kernels.constant_result_count.cache_clear()
    program = optimized(adbench_hand.hand_objective)
    # each asked more than once (20 questions of 9 callees); those returning an array translated once
    arrays = {name for name in asked if isinstance(program.kernels[name].result, ArrayT)}
    assert len(asked) > len(set(asked)) and sorted(translated) == sorted(arrays)
    # and memoised, the answers are those of a fresh translation
    inline_kernels.constant_result_count.cache_clear()
    assert optimized(adbench_hand.hand_objective) == program
