"""``fsmooth explain``: the kernel's options and the flags that change them, one pass's output,
the list of passes, the §3.4 forms with every optimisation off, and the OpenCL path."""
from __future__ import annotations

import pytest

from corpus import linalg
from fsmooth.cli import explain, main
from fsmooth.optimize import REWRITES
from fsmooth.options import optimisations

F = "fsmooth.examples:f"


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["explain", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_list_passes_shows_each_rewrite_under_the_optimisations(capsys):
    status, out, _ = run(capsys, F, "--list-passes")
    assert status == 0
    assert out.split() == ["core", "anf", *REWRITES, "optimise", "shape", "dps", "simplify_allocs", "beta_reduce_scalar_lets", "dpia", "interchange", "single_trip", "row_versions", "jam_reductions", "c"]
    assert "  cse\n" in out
    _, out, _ = run(capsys, F, "--list-passes", "--no-cse", "--no-dce")
    assert "cse" not in out.split() and "dce" not in out.split() and "constant_folding" in out.split()
    _, out, _ = run(capsys, F, "--list-passes", "--unoptimised")
    assert not set(REWRITES) & set(out.split())


def test_list_passes_of_the_opencl_path(capsys):
    _, out, _ = run(capsys, F, "--list-passes", "--target", "opencl")
    names = out.split()
    assert names[:3] == ["core", "anf", "inline_every_call"]
    assert names[-7:] == ["dpia_strategies", "unroll_jam", "plan_opencl", "stage_rows", "stage_tiles", "vectorize", "opencl"] and "c" not in names


def test_a_no_flag_for_every_optimisation_field_and_no_other(capsys):
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    out = capsys.readouterr().out
    assert set(optimisations()) == {"fusion", "inline_kernels", "inline_lets", "constant_folding", "cse", "dce",
                                    "licm", "guards_to_bounds", "merge_allocs", "hoist_allocs", "hoist_checks",
                                    "reduce_strength", "interchange", "row_versions", "jam_reductions", "map_fission", "auto_reductions",
                                    "single_pass_scan", "stage_rows", "stage_tiles", "update_in_place"}
    for name in optimisations():
        assert f"--no-{name.replace('_', '-')}" in out
    assert "--no-parallel" not in out and "--no-check-arena" not in out and "--no-verify" not in out


def test_one_pass_output(capsys):
    status, out, _ = run(capsys, F, "--pass", "dps")
    assert status == 0 and "alloc (bytes" in out and "f = λ out vec1 vec2" in out
    _, simplified, _ = run(capsys, F, "--pass", "simplify_allocs")
    assert simplified != out
    _, stage, _ = run(capsys, F, "--stage", "dps")
    assert stage.strip() == simplified.strip()


def test_a_rewrite_shows_each_change_it_made(capsys):
    _, out, _ = run(capsys, F, "--pass", "inline_lets_and_fusion")
    assert out.startswith("== inline_lets_and_fusion, change 1 of ")
    _, out, _ = run(capsys, F, "--pass", "constant_folding")
    assert out.strip() == "(the pass constant_folding changed nothing)"
    status, _, err = run(capsys, F, "--pass", "cse", "--no-cse")  # cse off: no such pass
    assert status == 1 and "no pass 'cse'" in err


def test_an_unknown_pass_names_the_passes(capsys):
    status, _, err = run(capsys, F, "--pass", "llvm")
    assert status == 1 and "no pass 'llvm'" in err and "simplify_allocs" in err


def test_unoptimised_shows_the_papers_section_3_4_forms(capsys):
    _, anf, _ = run(capsys, F, "--unoptimised", "--pass", "anf")
    _, stage, _ = run(capsys, F, "--unoptimised", "--stage", "anf")
    assert stage == anf and "let tmp = vector_add vec1 vec2 in" in stage  # nothing inlined or fused
    _, dps, _ = run(capsys, F, "--unoptimised", "--stage", "dps")
    # D⟦e⟧r as translated: the allocs of scalars (bytes ∘) the rules of Fig. 9 remove
    assert "alloc (bytes ∘)" in dps and "alloc (bytes vec1_shp)" in dps
    _, shape, _ = run(capsys, F, "--unoptimised", "--stage", "shape")
    assert "f_shp = λ vec1_shp vec2_shp. let tmp_shp = vector_add_shp vec1_shp vec2_shp in" in shape
    _, optimised, _ = run(capsys, F, "--stage", "dps")
    assert "alloc (bytes ∘)" not in optimised


def test_the_flags_and_the_kernels_own_options_reach_the_passes(capsys):
    assert "Allocation: malloc." in run(capsys, F, "--variant", "malloc", "--stage", "c")[1]
    assert "#pragma omp parallel for" in run(capsys, "fsmooth.examples:vector_add", "--parallel", "--stage", "c")[1]
    assert "vector_add" not in run(capsys, F, "--stage", "anf")[1].split("f = λ")[1]
    assert "vector_add" in run(capsys, F, "--stage", "anf", "--no-inline-kernels")[1].split("f = λ")[1]
    own = explain(linalg.f.with_options(inline_kernels=False), "anf")
    assert "vector_add" in own.split("f = λ")[1]


def test_the_opencl_path(capsys):
    status, out, _ = run(capsys, "corpus.blas:scal", "--target", "opencl", "--stage", "opencl")
    assert status == 0 and "__kernel" in out
    _, out, _ = run(capsys, "corpus.blas:scal", "--target", "opencl", "--pass", "dpia_strategies")
    assert "parfor" in out
    status, _, err = run(capsys, "corpus.blas:scal", "--target", "opencl", "--stage", "c")
    assert status == 1 and "no stage 'c'" in err
    # the planned kernels in DPIA's notation, before and after vectorisation
    _, planned, _ = run(capsys, "corpus.blas:scal", "--target", "opencl", "--pass", "plan_opencl")
    _, vectorised, _ = run(capsys, "corpus.blas:scal", "--target", "opencl", "--pass", "vectorize")
    assert planned.startswith("kernel ") and "global" in planned and "asVector" not in planned
    assert "asVector 4" in vectorised and "OpenCLPlan(" not in vectorised
