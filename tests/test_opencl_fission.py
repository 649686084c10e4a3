"""A fold's heavy row moved out of it (``fsmooth.map_fission``), a work-item's intermediate
interleaved with the others' (``dpia.hoist_opencl``) and a fold of ``acc + a - b`` made a sum
(``fsmooth.reassociate_folds``): results the reference's and numpy's on Intel's CPU device and
under Oclgrind's checks; the work is regrouped, not repeated (launch sizes, counts of the moved
build), and what does not qualify is left alone."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import opencl_fission_kernels as fk
from fsmooth import core
from fsmooth.driver import opencl_passes, run_passes
from opencl_oclgrind import run_under_oclgrind
from test_corpus import assert_close


def _trace(kernel, **changes):
    return run_passes(opencl_passes(kernel.with_options(**changes).options if changes else kernel.options),
                      kernel.program())


def _launch_sizes(artifact, **sizes) -> list[tuple]:
    """Each launch's global size, the size symbols given (``x_d0=…``)."""
    def at(e):
        e = sympy.sympify(e)
        return int(e.subs({s: sizes[s.name] for s in e.free_symbols}))
    return [tuple(at(g) for g in launch.global_size) for launch in artifact.launches]


def _builds_of_builds(program: core.Program) -> list[core.Build]:
    return [node for node in core.walk(program.main.body)
            if isinstance(node, core.Build) and any(isinstance(n, core.Build) for n in core.walk(node.fn.body))]


def test_row_logsumexp_equals_reference_and_numpy(intel_cpu_context):
    rng = np.random.default_rng(3)
    for n, m, d in ((0, 3, 2), (1, 1, 1), (7, 33, 5), (300, 40, 3)):
        x, w = rng.standard_normal((n, d)) * 0.3, rng.standard_normal((m, d)) * 0.3
        got = fk.row_logsumexp.opencl(x, w, context=intel_cpu_context)
        assert_close(got, fk.row_logsumexp.reference(x, w), rtol=1e-11, atol=1e-11 * max(1, n))
        assert_close(got, fk.row_logsumexp_oracle(x, w), rtol=1e-11, atol=1e-11 * max(1, n))


def test_the_row_is_built_once_per_point_outside_the_fold():
    """The scores of every (point, component) are one 2-D launch of n × m work-items (rounded to
    32 × 8 tiles), each computing its element once; the fold's iteration keeps only the
    logsumexp of its row, no build of its own.  Without the pass the fold builds the row itself."""
    trace = _trace(fk.row_logsumexp)
    moved = trace.last("map_fission")
    (matrix,) = [node for node in core.walk(moved.main.body)
                 if isinstance(node, core.Build) and isinstance(node.fn.body, (core.Let, core.Build))
                 and any(isinstance(n, core.Build) for n in core.walk(node.fn.body))]
    fold = next(node for node in core.walk(moved.main.body) if isinstance(node, core.Ifold)
                and not any(node is inner for inner in core.walk(matrix)))
    assert not any(isinstance(n, core.Build) for n in core.walk(fold.fn.body))
    sizes = _launch_sizes(fk.row_logsumexp.opencl_artifact(), x_d0=1000, x_d1=3, w_d0=100, w_d1=3)
    # n = 1000 points along the lanes, 2 a work-item (dpia.unroll_jam.jam_lanes: the components'
    # rows read once for both) × m = 100 components
    assert (32 * 16, 8 * 13) in sizes
    unmoved = _trace(fk.row_logsumexp, map_fission=False).last("map_fission")
    assert _builds_of_builds(unmoved) == []


def test_a_work_items_intermediate_is_interleaved(intel_cpu_context):
    """Element j of the centred point of work-item (i, k) sits at j·(w·m) + k·w + i, w = 32⌈n/64⌉
    work-items along the lanes (2 points each: dpia.unroll_jam.jam_lanes, an array for each):
    neighbouring work-items touch neighbouring doubles."""
    source = fk.centred_norms.opencl_artifact().source
    assert "(i + (32 * k * fs_ceildiv_i64(x_d0, 64)) + (32 * c_d0 * j * fs_ceildiv_i64(x_d0, 64)))" in source
    rng = np.random.default_rng(5)
    for n, m, d in ((0, 2, 3), (1, 1, 1), (9, 40, 4), (50, 3, 7)):
        x, c = rng.standard_normal((n, d)), rng.standard_normal((m, d))
        got = fk.centred_norms.opencl(x, c, context=intel_cpu_context)
        assert_close(got, np.asarray(fk.centred_norms.reference(x, c)).reshape(n, m), rtol=1e-13, atol=1e-13)
        assert_close(got, fk.centred_norms_oracle(x, c), rtol=1e-13, atol=1e-13)


def test_oclgrind_finds_no_race_or_bad_access():
    ok, report = run_under_oclgrind("""
        import numpy as np
        import opencl_fission_kernels as fk
        rng = np.random.default_rng(1)
        x, w = rng.standard_normal((5, 3)), rng.standard_normal((34, 3))
        assert abs(fk.row_logsumexp.opencl(x, w) - fk.row_logsumexp_oracle(x, w)) < 1e-9
        assert np.allclose(fk.centred_norms.opencl(x, w), fk.centred_norms_oracle(x, w))
        a, b = rng.standard_normal(300), rng.standard_normal(300)
        assert abs(fk.add_sub.opencl(a, b) - np.sum(a * a - b)) < 1e-9
    """)
    assert ok, report


def test_a_fold_adding_and_subtracting_is_a_parallel_sum(intel_cpu_context):
    notes = _trace(fk.add_sub).last("auto_reductions").notes
    assert "is a reduction of + on Double" in notes[0]
    rng = np.random.default_rng(8)
    for n in (0, 1, 257, 20_000):
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        got = fk.add_sub.opencl(a, b, context=intel_cpu_context)
        assert_close(got, fk.add_sub.reference(a, b), rtol=1e-11, atol=1e-11 * max(1, np.sqrt(n)))
        assert_close(got, np.sum(a * a - b), rtol=1e-11, atol=1e-11 * max(1, np.sqrt(n)))


@pytest.mark.parametrize("kernel", [fk.sub_first, fk.add_sub_index])
def test_what_is_not_a_sum_of_the_state_stays_as_written(kernel):
    """``a - acc + b`` negates the state each step; an Index sum must overflow where the
    sequential one does: neither is regrouped."""
    trace = _trace(kernel)
    assert trace.last("reassociate_folds") is trace.last("map_fission")
