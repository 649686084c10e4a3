"""The launch shape of a nest of global loops, the cost model's choice where the program says
nothing (``fsmooth.cost_model.choose_nest``, ``dpia.nest_accesses``, ``dpia.hoist_opencl``):
which loop runs along the lanes (NDRange dimension 0) and the work-group's tile.  GMM's scores
run the points along the lanes (each lane of a warp reads the same component's Q_k: one
broadcast, and no lane idles where K = 5), an image's columns stay along them in 32 × 8 tiles;
an annotated nest keeps the innermost loop on dimension 0.  Results with the GPU's shape are the
reference's and numpy's on Intel's CPU device, and Oclgrind finds no race or bad access."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import sympy

import opencl_nest_kernels as nk
from corpus import adbench_gmm, image
from fsmooth.cost_model import GENERIC_GPU, LAUNCH, choose_nest
from fsmooth.driver import opencl_passes, run_passes
from fsmooth.dpia.codegen_opencl import strategy_comment
from fsmooth.opencl_executable import OpenCLExecutable
from opencl_oclgrind import run_under_oclgrind
from test_adbench_corpus import gmm_args
from test_corpus import assert_close


@functools.cache
def _trace(kernel):
    """``kernel`` compiled for OpenCL with no device named: for ``GENERIC_GPU``, as
    ``kernel.opencl_artifact()``."""
    return run_passes(opencl_passes(kernel.options), kernel.program())


def _nests(kernel) -> list:
    """The nests of global loops the cost model priced, in launch order."""
    return [phase.nest for phase in _trace(kernel).last("plan_opencl").kernels.phases if phase.nest is not None]


def _launches_2d(artifact, **sizes) -> list[tuple]:
    """The 2-D launches that run at ``sizes`` (their condition holds: ``Launch.when``), at them."""
    def at(e):
        e = sympy.sympify(e)
        return e.subs({s: sizes[s.name] for s in e.free_symbols})
    return [(tuple(int(at(g)) for g in launch.global_size), tuple(int(at(l)) for l in launch.local_size))
            for launch in artifact.launches
            if len(launch.global_size) == 2 and (launch.when is None or bool(at(launch.when)))]


@pytest.mark.parametrize("n, d, k, tile", [(10_000, 2, 5, (32, 8)), (2_500_000, 2, 5, (256, 1)),
                                           (10_000, 64, 200, (32, 8))])
def test_gmm_runs_the_points_along_the_lanes_at_adbench_sizes(n, d, k, tile):
    """At n = 10,000 and K = 5 every tile's work-items fit the device at once, so the model ties
    them (the first listed); at 2.5 M points 256 × 1 idles no row of a tile over 5 components."""
    (nest,) = [nest for nest in _nests(adbench_gmm.gmm_full_objective) if str(nest.sizes[0]) == "x_d0"]
    points, components = nest.loops
    sizes = dict(x_d0=n, x_d1=d, alphas_d0=k, means_d0=k, means_d1=d, icf_d0=k, icf_d1=d * (d + 1) // 2)
    choice = choose_nest(nest, GENERIC_GPU, sizes)
    assert (choice.chosen.lanes, choice.chosen.tile, choice.chosen.dimensions) == (points, tile, (0, 1))
    assert choice.launch_tiles == ((32, 8), (64, 4), (256, 1))
    work = choice.chosen.cost - LAUNCH["gpu"]
    along_components = min(c.cost for c in choice.candidates if c.lanes == components) - LAUNCH["gpu"]
    # Q_k's triangle read by every lane of a warp (one sector), not 32 rows; with K = 5 no warp
    # of 32 lanes over 5 components (the centred point, computed where read, reads x's rows
    # scattered along the points); each access also costs its issue, alike in both (the nest
    # can be jammed: cost_model.choose_nest)
    assert along_components > 1.4 * work
    patterns = {a.what: a.patterns for a in nest.accesses if not a.write}
    assert patterns["icf"] == ("independent", "scattered") and patterns["x"] == ("scattered", "independent")
    assert patterns["alphas"] == ("independent", "consecutive")


def test_gmm_launch_runs_the_points_on_dimension_0_and_says_why():
    """The per-point terms of every component (map_fission moved them out of the fold over the
    points) are one launch, the points along the lanes, in the least padded of the tiles."""
    artifact = _trace(adbench_gmm.gmm_full_objective).last("opencl")
    assert "map_fission" in [p.name for p in opencl_passes(adbench_gmm.gmm_full_objective.options)]

    def gmm_launches(n, d, k):
        return _launches_2d(artifact, x_d0=n, x_d1=d, alphas_d0=k, means_d0=k, means_d1=d, icf_d0=k,
                            icf_d1=d * (d + 1) // 2)

    # q_diagonals (K × d, d along the lanes, 32 × 8 as before), then the scores: the points along
    # the lanes, 2 a work-item (dpia.unroll_jam.jam_lanes), their rows staged in local memory, 64
    # a work-group of 32 × 8 (dpia.stage_tiles); its fallback, where they exceed local memory, as
    # the cost model shapes it: K = 5 or 25 components a row each of 256 × 1 tiles, 200 in 8-row
    # tiles of 32 × 8
    assert gmm_launches(10_000, 2, 5) == [((32, 8), (32, 8)), ((5_024, 8), (32, 8)), ((5_120, 5), (256, 1))]
    assert gmm_launches(10_000, 10, 25)[1:] == [((5_024, 32), (32, 8)), ((5_120, 25), (256, 1))]
    assert gmm_launches(10_000, 64, 200)[1:] == [((5_024, 200), (32, 8))] * 2
    fallback = next(launch.kernel for launch in artifact.launches if launch.fallback)
    for kernel in (fallback.replace("_fallback_k", "_k"), fallback):
        scores = artifact.source.split(f"{kernel}(", 1)[1].split("__kernel", 1)[0]
        assert "i_1_1 = get_global_id(0)" in scores and "k_2 = get_global_id(1)" in scores
    # what `fsmooth explain --stage opencl` prints first: the candidates, their costs, the choice
    note = next(line for line in strategy_comment(artifact.source).splitlines() if "over i_1_1, k_2" in line)
    assert ("runs i_1_1 along the lanes (NDRange dimension 0), in work-groups of the least padded for the "
            "call's sizes of 32 × 8, 64 × 4, 256 × 1") in note
    assert "reads icf (independent/scattered)" in note and "(chosen)" in note
    assert "lanes over i_1_1, tile 32×8 ≈" in note and "lanes over k_2, tile 256×1 ≈" in note


@pytest.mark.parametrize("n, k, d", [(1, 1, 1), (37, 5, 2), (300, 9, 6)])
def test_gmm_with_the_gpu_shape_equals_reference_and_numpy(intel_cpu_context, n, k, d):
    kernel = adbench_gmm.gmm_full_objective
    executable = OpenCLExecutable(_trace(kernel).last("opencl"), intel_cpu_context, kernel.program().main.params)
    args = gmm_args(np.random.default_rng(n + k + d), (n, k, d))
    got = executable.call(*args)
    scale = max(1.0, abs(adbench_gmm.np_gmm_full_objective(*args)))
    assert_close(got, kernel.reference(*args), rtol=1e-10, atol=1e-10 * scale)
    assert_close(got, adbench_gmm.np_gmm_full_objective(*args), rtol=1e-10, atol=1e-10 * scale)


def test_an_image_blur_keeps_its_columns_along_the_lanes():
    (nest,) = _nests(image.box_blur3)
    rows, columns = nest.loops
    choice = choose_nest(nest, GENERIC_GPU, dict(img_d0=4096, img_d1=4096))
    assert (choice.chosen.lanes, choice.chosen.tile) == (columns, (32, 8))
    work = choice.chosen.cost - LAUNCH["gpu"]
    assert min(c.cost for c in choice.candidates if c.lanes == rows) - LAUNCH["gpu"] > 2 * work
    (launch,) = _trace(image.box_blur3).last("opencl").launches
    assert tuple(map(str, launch.global_size)) == ("32*ceiling(img_d1/32)", "8*ceiling(img_d0/8)")
    assert launch.local_size == (32, 8)


def test_the_outer_loop_runs_along_the_lanes_where_it_reads_consecutive_elements(intel_cpu_context):
    """Lanes over i read a[k][i] and b[k][i] beside their neighbours' and write out[i][k] apart:
    two coalesced reads and a scattered write, against two scattered reads; the launch takes the
    least padded tile.  The annotated nest keeps the innermost loop on dimension 0 and 32 × 8."""
    artifact = _trace(nk.product_transposed).last("opencl")
    # i (a_d1 = 300) along the lanes, k (a_d0 = 9) along dimension 1: 64 × 4 pads least (320 × 12)
    assert _launches_2d(artifact, a_d0=9, a_d1=300, b_d0=9, b_d1=300) == [((320, 12), (64, 4))]
    (annotated,) = nk.product_transposed_global.opencl_artifact().launches
    assert tuple(map(str, annotated.global_size)) == ("32*ceiling(a_d0/32)", "8*ceiling(a_d1/8)")
    executable = OpenCLExecutable(artifact, intel_cpu_context, nk.product_transposed.program().main.params)
    rng = np.random.default_rng(4)
    for shape in ((3, 0), (1, 1), (5, 37), (300, 9)):  # a[0] is read: one row at least
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        np.testing.assert_array_equal(executable.call(a, b), nk.product_transposed_oracle(a, b))
        np.testing.assert_array_equal(np.array(nk.product_transposed.reference(a, b)).reshape(shape[::-1]),
                                      nk.product_transposed_oracle(a, b))


def test_a_work_items_intermediate_follows_the_lanes(intel_cpu_context):
    """GMM's shape: the points along the lanes, 2 a work-item (the weights read once for both:
    dpia.unroll_jam.jam_lanes), the centred point of work-item (i, k) (one array for each of its
    points) at l·(m·K) + k·m + i, m = 32⌈n/64⌉ work-items along the lanes, so that neighbouring
    lanes (i, i + 1) touch neighbouring doubles."""
    artifact = _trace(nk.weighted_scores).last("opencl")
    at = "(i + (32 * k * fs_ceildiv_i64(x_d0, 64)) + (32 * c_d0 * l * fs_ceildiv_i64(x_d0, 64)))"
    assert "i = get_global_id(0)" in artifact.source and f"r7_1_buf_1[{at}]" in artifact.source
    assert f"r7_2_buf_1[{at}]" in artifact.source
    executable = OpenCLExecutable(artifact, intel_cpu_context, nk.weighted_scores.program().main.params)
    rng = np.random.default_rng(6)
    for n, k, d in ((0, 2, 3), (1, 1, 1), (33, 5, 2), (70, 9, 6)):
        x, c, w = rng.standard_normal((n, d)), rng.standard_normal((k, d)), rng.standard_normal((k, d))
        got = executable.call(x, c, w)
        assert_close(got, np.asarray(nk.weighted_scores.reference(x, c, w)).reshape(n, k), rtol=1e-12, atol=1e-12)
        assert_close(got, nk.weighted_scores_oracle(x, c, w), rtol=1e-12, atol=1e-12)


def test_the_rows_a_nest_walks_are_read_once_into_local_memory_transposed(intel_cpu_context):
    """dpia.stage_tiles: each work-item's rows of x (2 points a work-item: dpia.unroll_jam.jam_lanes),
    which its loop over j walks, are copied once into its work-group's tile (x read once, outside
    every loop, before a barrier), element j of point s of lane l at 64·j + 32·s + l, where a
    warp's reads of column j are neighbours; the fallback, run where 64 rows exceed the device's
    local memory, reads x in the loop as before."""
    artifact = _trace(nk.squared_distances).last("opencl")
    staged, fallback = (artifact.source.split(f"squared_distances_{name}(", 1)[1].split("__kernel", 1)[0]
                        for name in ("k", "fallback_k"))
    assert staged.count("x[") == 1 and "tile_x_buf_1[(lane + (64 * j))]" in staged
    assert "tile_x_buf_1[(32 + lane + (64 * j))]" in staged
    assert staged.index("x[") < staged.index("barrier(CLK_LOCAL_MEM_FENCE)") < staged.index("for (int64_t i")
    assert "x[(j + (x_d1 * fs_mask_mod_i64(i, 31))" in fallback and "tile_" not in fallback and "barrier" not in fallback
    launch, backup = artifact.launches
    assert launch.local_size == (32, 8) and backup.fallback and not launch.fallback
    assert str(artifact.buffers["tile_x_buf"].count) == "64*x_d1" and artifact.buffers["tile_x_buf"].role == "local"
    executable = OpenCLExecutable(artifact, intel_cpu_context, nk.squared_distances.program().main.params)
    rows_fitting = intel_cpu_context.devices[0].local_mem_size // (64 * 8)
    rng = np.random.default_rng(8)
    for n, k, d in ((0, 3, 2), (1, 1, 1), (37, 5, 3), (9, 70, 4), (3, 33, 0), (65, 3, 2), (130, 9, 5),
                    (2, 3, rows_fitting + 1)):
        x, c = rng.standard_normal((n, d)), rng.standard_normal((k, d))
        got = executable.call(x, c)
        ran = [p.kernel for p in executable.last_profile]
        assert ran == ([(backup if d > rows_fitting else launch).kernel] if n * k else [])  # none for no result
        assert_close(got, np.asarray(nk.squared_distances.reference(x, c)).reshape(n, k), rtol=1e-12, atol=1e-12)
        assert_close(got, nk.squared_distances_oracle(x, c), rtol=1e-12, atol=1e-12)


def test_oclgrind_finds_no_race_or_bad_access():
    ok, report = run_under_oclgrind("""
        import numpy as np
        import opencl_nest_kernels as nk
        from fsmooth.cost_model import GENERIC_GPU
        rng = np.random.default_rng(2)
        x, c, w = rng.standard_normal((37, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
        got = nk.weighted_scores.with_options(opencl_device=GENERIC_GPU).opencl(x, c, w)
        assert np.allclose(got, nk.weighted_scores_oracle(x, c, w), rtol=1e-12, atol=1e-12)
        a, b = rng.standard_normal((9, 40)), rng.standard_normal((9, 40))
        got = nk.product_transposed.with_options(opencl_device=GENERIC_GPU).opencl(a, b)
        assert np.array_equal(got, nk.product_transposed_oracle(a, b))
        # staged rows (dpia.stage_tiles): 40 centres, the second group's last 24 lanes past the end
        x, c = rng.standard_normal((37, 3)), rng.standard_normal((40, 3))
        got = nk.squared_distances.with_options(opencl_device=GENERIC_GPU).opencl(x, c)
        assert np.allclose(got, nk.squared_distances_oracle(x, c), rtol=1e-12, atol=1e-12)
    """)
    assert ok, report
