"""Unroll-and-jam of the loop along the lanes of a nest of global loops (``dpia.unroll_jam.jam_lanes``,
the cost model's jam factor: ``fsmooth.cost_model.choose_nest``): GMM's scores run 2 points a
work-item, the reads of Q_k and the means, which do not depend on the point, made once for both,
each point's row staged in local memory (``dpia.stage_tiles``: 64 rows a work-group).  Compiled for
the GPU (``GENERIC_GPU``), run on Intel's CPU device: the reference's and numpy's results at every
n around the blocks of 32·2 points, d and K small and large, the fallback where the tile does not
fit; Oclgrind finds no race or bad access with partial work-groups."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import opencl_nest_kernels as nk
from corpus import adbench_gmm, gmm, image
from fsmooth import cost_model
from fsmooth.cost_model import GENERIC_GPU, choose_nest
from fsmooth.driver import opencl_passes, run_passes
from fsmooth.dpia.codegen_opencl import strategy_comment
from fsmooth.opencl_executable import OpenCLExecutable
from opencl_oclgrind import run_under_oclgrind
from test_adbench_corpus import gmm_args
from test_corpus import assert_close
from test_corpus import gmm_args as corpus_gmm_args


@functools.cache
def _trace(kernel):
    return run_passes(opencl_passes(kernel.options), kernel.program())


def _gmm_scores():
    """GMM's scores kernel (the one with a fallback) and its fallback, as source."""
    artifact = _trace(adbench_gmm.gmm_full_objective).last("opencl")
    fallback = next(launch.kernel for launch in artifact.launches if launch.fallback)
    return artifact, [artifact.source.split(f"{kernel}(", 1)[1].split("__kernel", 1)[0]
                      for kernel in (fallback.replace("_fallback_k", "_k"), fallback)]


def test_gmm_scores_run_two_points_a_work_item_reading_q_once_for_both():
    artifact, (staged, fallback) = _gmm_scores()
    for source in (staged, fallback):
        whole, rest = source.split("} else {", 1)
        # the whole blocks: icf[k][…] and means[k][j] read once in the triangle, for both points
        assert whole.count("icf[") == 1 and whole.count("means[(j + ") == 1
        assert "acc_2_1 = (acc_2_1 + (icf_1 * (" in whole and "acc_2_2 = (acc_2_2 + (icf_1 * (" in whole
        # the last, partial block: each work-item's points below n one after another
        assert rest.count("icf[") == 1 and "for (int64_t part = 0; part < 2; part++)" in rest
        assert "i_1_1 < 32 * fs_ceildiv_i64(x_d0, 64)" in source
    # the points' rows staged: 64 a work-group, element c of the point 32·s + l at l + 32·s + 64·c
    assert "tile_x_buf_1[(lane + (64 * j))]" in staged and "tile_x_buf_1[(32 + lane + (64 * j))]" in staged
    assert "x[" not in staged.split("barrier(CLK_LOCAL_MEM_FENCE)", 1)[1] and "tile_" not in fallback
    assert str(artifact.buffers["tile_x_buf"].count) == "64*x_d1"
    note = next(line for line in strategy_comment(artifact.source).splitlines() if "over i_1_1, k_2" in line)
    assert "lanes over i_1_1, tile 32×8, 2 of i_1_1 a work-item jammed ≈" in note
    assert note.index("2 of i_1_1 a work-item jammed") < note.index("(chosen)") < note.index("lanes over i_1_1, tile 32×8 ≈")


@pytest.mark.parametrize("n, d, k, jam", [(10_000, 2, 5, 1), (10_000, 20, 50, 2), (10_000, 64, 200, 2)])
def test_the_model_jams_gmm_points_at_adbench_sizes(n, d, k, jam):
    """Q_k's triangle is read by both points of a work-item: half the loads a point.  At d = 2,
    K = 5 and 10,000 points every work-item runs at once: half as many, each taking twice as long,
    take longer (measured on an H200: 6.5 µs, 6.6 jammed)."""
    plan = _trace(adbench_gmm.gmm_full_objective).last("plan_opencl").kernels
    (nest,) = [ph.nest for ph in plan.phases if ph.nest is not None and str(ph.nest.sizes[0]) == "x_d0"][:1]
    sizes = dict(x_d0=n, x_d1=d, alphas_d0=k, means_d0=k, means_d1=d, icf_d0=k, icf_d1=d * (d + 1) // 2)
    choice = choose_nest(nest, GENERIC_GPU, sizes)
    assert (choice.chosen.lanes, choice.chosen.jam, nest.jammable) == ("i_1_1", jam, 0)
    if jam > 1:
        assert min(c.cost for c in choice.candidates if c.jam == 1) > 1.1 * choice.chosen.cost
    # compiled for sizes not known until the call (taken as large), the launch runs 2 a work-item
    assert choose_nest(nest, GENERIC_GPU).chosen.jam == 2


def test_nests_without_reads_shared_in_a_loop_are_not_jammed():
    """a[k][i] · b[k][i] reads nothing in a loop; a blur's neighbours depend on both loops."""
    for kernel in (nk.product_transposed, image.box_blur3):
        for phase in _trace(kernel).last("plan_opencl").kernels.phases:
            assert phase.jam == 1
            if phase.nest is not None:
                assert all(c.jam == 1 for c in choose_nest(phase.nest, GENERIC_GPU).candidates)


@pytest.mark.parametrize("d, k", [(0, 1), (1, 1), (2, 3), (20, 2)])
def test_gmm_jammed_equals_reference_and_numpy(intel_cpu_context, d, k):
    kernel = adbench_gmm.gmm_full_objective
    executable = OpenCLExecutable(_trace(kernel).last("opencl"), intel_cpu_context, kernel.program().main.params)
    # GMM reads x[0] (d = length(x[0])): no points is a size error, before anything runs
    with pytest.raises(ValueError, match="x has length x_d0 but is read at index 0"):
        executable.call(*gmm_args(np.random.default_rng(0), (0, k, d)))
    # J - 1, J + 1, odd, below, at and past 32·J, not a multiple of it
    for n in (1, 3, 31, 33, 63, 64, 65, 97, 130):
        args = gmm_args(np.random.default_rng(n + 10 * d + 100 * k), (n, k, d))
        got = executable.call(*args)
        expected = adbench_gmm.np_gmm_full_objective(*args)
        scale = max(1.0, abs(expected))
        assert_close(got, kernel.reference(*args), rtol=1e-10, atol=1e-10 * scale)
        assert_close(got, expected, rtol=1e-10, atol=1e-10 * scale)


def test_diagonal_gmm_jammed_equals_reference_and_numpy(intel_cpu_context):
    """corpus.gmm's objective (diagonal Q_k): exp(qs[k][j]) and means[k][j] computed once for 2 points."""
    kernel = gmm.gmm_objective
    artifact = _trace(kernel).last("opencl")
    scores = artifact.source.split("gmm_gmm_objective_0_k(", 1)[1].split("barrier(CLK_LOCAL_MEM_FENCE)", 1)[1]
    scores = scores.split("} else {", 1)[0]  # the whole blocks
    assert scores.count("fs_exp_f64(qs[") == 1 and scores.count("tile_x_buf_1[") == 2
    executable = OpenCLExecutable(artifact, intel_cpu_context, kernel.program().main.params)
    rng = np.random.default_rng(12)
    for n, k, d in ((1, 1, 1), (3, 2, 2), (33, 5, 3), (65, 1, 20), (130, 4, 0), (97, 3, 7)):
        args = corpus_gmm_args(rng, (n, k, d))
        got = executable.call(*args)
        expected = gmm.np_gmm_objective(*args)
        assert_close(got, kernel.reference(*args), rtol=1e-10, atol=1e-10 * max(1.0, abs(expected)))
        assert_close(got, expected, rtol=1e-10, atol=1e-10 * max(1.0, abs(expected)))


def test_gmm_jammed_runs_its_fallback_where_64_rows_exceed_local_memory(intel_cpu_context):
    kernel = adbench_gmm.gmm_full_objective
    artifact = _trace(kernel).last("opencl")
    executable = OpenCLExecutable(artifact, intel_cpu_context, kernel.program().main.params)
    # the variant for sum_qs' short rows of d (d < 667 here: test_opencl_row_variants)
    staged = next(launch for launch in artifact.launches if launch.kernel.endswith("_v1_2_k"))
    d = intel_cpu_context.devices[0].local_mem_size // (64 * 8) + 1
    for n, fits in ((67, True), (67, False)):
        args = gmm_args(np.random.default_rng(n), (n, 2, 8 if fits else d))
        got = executable.call(*args)
        ran = [p.kernel for p in executable.last_profile]
        assert (staged.kernel in ran) == fits and (staged.kernel[:-2] + "_fallback_k" in ran) != fits
        expected = adbench_gmm.np_gmm_full_objective(*args)
        if fits:  # the interpreted reference takes minutes at d = 65; numpy's oracle checks that case
            assert_close(got, kernel.reference(*args), rtol=1e-10, atol=1e-10 * max(1.0, abs(expected)))
        assert_close(got, expected, rtol=1e-10, atol=1e-10 * max(1.0, abs(expected)))


def test_oclgrind_finds_no_race_or_bad_access_in_the_jammed_gmm():
    ok, report = run_under_oclgrind("""
        import numpy as np
        from corpus import adbench_gmm, gmm, image
        from fsmooth.cost_model import GENERIC_GPU
        from test_adbench_corpus import gmm_args
        kernel = adbench_gmm.gmm_full_objective.with_options(opencl_device=GENERIC_GPU)
        # 37 points: one partial block of 64; 70: a whole block and a partial one, its second
        # group's lanes and half its first past the end
        for n, k, d in ((37, 3, 3), (70, 2, 4)):
            args = gmm_args(np.random.default_rng(n), (n, k, d))
            got = kernel.opencl(*args)
            expected = adbench_gmm.np_gmm_full_objective(*args)
            assert abs(got - expected) <= 1e-10 * max(1.0, abs(expected)), (n, got, expected)
    """)
    assert ok, report


def test_without_the_jam_a_work_item_stages_its_one_row(intel_cpu_context, monkeypatch):
    """The cost model with no jam factor (``NEST_JAMS`` empty) prices and stages as before it had
    one: squared distances run the centres along the lanes, each work-item's row of c copied into
    a tile of 32 rows, element j of lane l at 32·j + l; the results are the reference's and numpy's."""
    monkeypatch.setattr(cost_model, "NEST_JAMS", ())
    artifact = run_passes(opencl_passes(nk.squared_distances.options), nk.squared_distances.program()).last("opencl")
    staged = artifact.source.split("squared_distances_k(", 1)[1].split("__kernel", 1)[0]
    assert staged.count("c[") == 1 and "tile_c_buf_1[(lane + (32 * j))]" in staged and "part" not in staged
    assert "jammed" not in strategy_comment(artifact.source)
    assert str(artifact.buffers["tile_c_buf"].count) == "32*c_d1"
    executable = OpenCLExecutable(artifact, intel_cpu_context, nk.squared_distances.program().main.params)
    rng = np.random.default_rng(9)
    for n, k, d in ((1, 1, 1), (37, 5, 3), (9, 70, 4), (3, 33, 0)):
        x, c = rng.standard_normal((n, d)), rng.standard_normal((k, d))
        got = executable.call(x, c)
        assert_close(got, np.asarray(nk.squared_distances.reference(x, c)).reshape(n, k), rtol=1e-12, atol=1e-12)
        assert_close(got, nk.squared_distances_oracle(x, c), rtol=1e-12, atol=1e-12)
