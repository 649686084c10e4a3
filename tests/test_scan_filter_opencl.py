"""The parallel scan and filter of the OpenCL back end (``dpia.scan_opencl``: NOVA §5's three
phases, and mask, scan, scatter): on Intel's CPU runtime against numpy and the reference at the
sizes around a tile and a work-group (0, 1, 2, 255..257, 2047..2049, non-multiples, 1 Mi), under
Oclgrind at small sizes (no race, nothing out of bounds), and its plan: several work-groups for a
large n, the sequential loop where the scan is not regroupable or sits inside a parallel loop."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import scan_filter as sf
from fsmooth import Array, Double, Float, Index, iscan, length
from fsmooth.driver import compile_to_opencl
from fsmooth.dpia.scan_opencl import LOCAL, MAX_GROUPS
from opencl_oclgrind import run_under_oclgrind

# around a work-group and a tile (8 * LOCAL doubles, 16 * LOCAL floats), and non-multiples
SIZES = (0, 1, 2, LOCAL - 1, LOCAL, LOCAL + 1, 8 * LOCAL - 1, 8 * LOCAL, 8 * LOCAL + 1, 16 * LOCAL + 1, 5003, 70_001)
MI = 1 << 20


@fs.kernel
def f32(x: Float) -> Float:
    """``f32(0.0)`` is a Float zero: an F̃ literal alone is a Double."""
    return x


@fs.kernel
def float_cumsum(v: Array[Float]) -> Array[Float]:
    return iscan(lambda s, i: s + v[i], f32(0.0), length(v))


@fs.kernel
def prefix_min_max(v: Array[Double]) -> tuple[Array[Double], Array[Double]]:
    """A tuple state, componentwise min and max: the same bits as the sequential scan."""
    return iscan(lambda s, i: (fs.min(s[0], v[i]), fs.max(s[1], v[i])), (1e300, -1e300), length(v))


@fs.kernel
def index_running_max(v: Array[Index]) -> Array[Index]:
    return iscan(lambda m, i: fs.max(m, v[i]), -5, length(v))


@fs.kernel
def offset_products(v: Array[Double], start: Double) -> Array[Double]:
    return iscan(lambda p, i: p * v[i], start, length(v))


def test_scans_against_numpy_and_the_reference(rng):
    for n in SIZES:
        v = rng.uniform(-1.0, 1.0, n)
        np.testing.assert_allclose(sf.cumulative_sum.opencl(v), np.cumsum(v), rtol=1e-9, atol=1e-9)
        lo, hi = prefix_min_max.opencl(v)
        np.testing.assert_array_equal(lo, np.minimum.accumulate(np.minimum(v, 1e300)))
        np.testing.assert_array_equal(hi, np.maximum.accumulate(np.maximum(v, -1e300)))
        f = v.astype(np.float32)
        np.testing.assert_allclose(float_cumsum.opencl(f), np.cumsum(f, dtype=np.float64), rtol=1e-4, atol=1e-3)
        iv = rng.integers(-10**6, 10**6, n)
        np.testing.assert_array_equal(index_running_max.opencl(iv), np.maximum.accumulate(np.maximum(iv, -5)))
        w = rng.uniform(0.99, 1.01, n)
        np.testing.assert_allclose(offset_products.opencl(w, 2.0), 2.0 * np.cumprod(w), rtol=1e-9)
        if n <= 300:  # the reference is Python, one call per element
            np.testing.assert_array_equal(prefix_min_max.opencl(v)[1], prefix_min_max.reference(v)[1])
            np.testing.assert_allclose(sf.cumulative_sum.opencl(v), sf.cumulative_sum.reference(v), rtol=1e-12)


@fs.kernel
def gathered_cumsum(v: Array[Double], at: Array[Index]) -> Array[Double]:
    """A data-dependent read in the element: checked on the device, in every launch."""
    return iscan(lambda s, i: s + v[at[i]], 0.0, length(at))


@fs.kernel
def keep_below_next(v: Array[Double], at: Array[Index]) -> Array[Double]:
    return fs.filter(lambda x: x < v[at[0]], v)


def test_an_index_out_of_range_in_the_element_is_an_index_error(rng):
    v = rng.uniform(-1.0, 1.0, 5000)
    at = rng.integers(0, 5000, 7000)
    np.testing.assert_allclose(gathered_cumsum.opencl(v, at), np.cumsum(v[at]), rtol=1e-9, atol=1e-9)
    for bad in (0, 4000, 6999):  # in the first, a middle and the last group's chunk
        wrong = at.copy()
        wrong[bad] = 5000
        with pytest.raises(IndexError):
            gathered_cumsum.opencl(v, wrong)
    np.testing.assert_array_equal(keep_below_next.opencl(v, at), v[v < v[at[0]]])
    with pytest.raises(IndexError):
        keep_below_next.opencl(v, np.array([-1]))


def test_an_integer_scan_fails_exactly_where_the_sequential_one_does(rng):
    """Index +: an OverflowError iff a state leaves int64, wherever it is (in the first group's
    chunk, the last element of a later one), as in C and the reference; a group's partial that
    leaves int64 while every state fits is no error (computed modulo 2**64)."""
    big = 2**62
    tile = 8 * LOCAL  # of int64s
    wrapping = np.zeros(3 * tile, dtype=np.int64)
    wrapping[:2] = -big  # the state reaches INT64_MIN ...
    wrapping[tile:tile + 3] = big  # ... and the second group's partial 3 * 2**62 leaves int64
    expected = np.cumsum(wrapping)
    np.testing.assert_array_equal(sf.index_cumulative_sum.opencl(wrapping), expected)
    np.testing.assert_array_equal(sf.index_cumulative_sum(wrapping), expected)
    for where in (1, tile + 5, 3 * tile - 1):
        leaving = np.ones(3 * tile, dtype=np.int64)
        leaving[where - 1:where + 1] = big  # two 2**62 in a row: the state leaves int64 at `where`
        np.testing.assert_array_equal(sf.index_cumulative_sum.opencl(leaving[:where]), np.cumsum(leaving[:where]))
        for run in (sf.index_cumulative_sum.opencl, sf.index_cumulative_sum):
            with pytest.raises(OverflowError):
                run(leaving)
    iv = rng.integers(-2**40, 2**40, 100_003)
    np.testing.assert_array_equal(sf.index_cumulative_sum.opencl(iv), np.cumsum(iv))


def test_large_scans(rng):
    v = rng.uniform(-1.0, 1.0, MI + 3)
    np.testing.assert_allclose(sf.cumulative_sum.opencl(v), np.cumsum(v), rtol=1e-9, atol=1e-8)
    _, hi = prefix_min_max.opencl(v)
    np.testing.assert_array_equal(hi, np.maximum.accumulate(v))


def test_filters_against_boolean_indexing(rng):
    for n in SIZES + (MI + 5,):
        r = rng.uniform(-2.0, 2.0, n)
        for threshold in (0.0, 1.0, 3.0):  # nothing kept, some, all
            np.testing.assert_array_equal(sf.keep_inliers.opencl(r, threshold), r[np.abs(r) < threshold])
        if n > 100_000:
            continue
        np.testing.assert_array_equal(sf.positive_below.opencl(r, 1.5), r[(r > 0) & (r < 1.5)])
        kept, mean = sf.inlier_count_and_mean.opencl(r, 1.0)
        expected = r[np.abs(r) < 1.0]
        assert kept == len(expected)
        assert np.isclose(mean, expected.mean() if len(expected) else 0.0)
        iv = rng.integers(-50, 50, n)
        np.testing.assert_array_equal(sf.odd_indices.opencl(iv), iv[iv % 2 == 1])
        if n <= 300:
            np.testing.assert_array_equal(sf.keep_inliers.opencl(r, 1.0), sf.keep_inliers.reference(r, 1.0))


def _launches(kernel):
    return compile_to_opencl(kernel.program(), kernel.options).launches


def _groups(launch, n: int) -> int:
    size = sympy.sympify(launch.global_size[0])
    local = int(launch.local_size[0]) if launch.local_size else 1
    return int(size.subs({s: n for s in size.free_symbols})) // local


@pytest.mark.parametrize("kernel", [sf.cumulative_sum, sf.keep_inliers, prefix_min_max, float_cumsum,
                                    sf.index_cumulative_sum])
def test_a_large_scan_or_filter_runs_on_many_work_groups(kernel):
    """The plan: reduce, partials, down (a filter's kept length then copied out), the first and
    the last over many groups of LOCAL work-items for a large n, the partials' over one."""
    launches = _launches(kernel)
    assert len(launches) >= 3
    reduce_, partials, down = launches[:3]
    assert [int(x.local_size[0]) for x in (reduce_, partials, down)] == [LOCAL] * 3
    assert _groups(reduce_, 16 * MI) == _groups(down, 16 * MI) == MAX_GROUPS
    tile = next(n for n in (1024, 2048, 4096) if _groups(reduce_, n + 1) == 2)  # elements of a tile: 16 KiB
    assert _groups(reduce_, 1) == 1 and _groups(reduce_, 10 * tile) == 10  # one group per tile up to MAX_GROUPS
    assert _groups(partials, 16 * MI) == 1
    assert _groups(reduce_, 0) == 0  # nothing launched


@pytest.mark.parametrize("kernel", [sf.running_max, sf.sum_and_max_prefixes, sf.fibonacci])
def test_a_scan_that_cannot_be_regrouped_stays_one_work_item(kernel):
    """A fold with a branch on the index, or whose components trade places, is no reduction:
    one launch of one work-item."""
    launches = _launches(kernel)
    assert all(tuple(map(int, x.global_size)) == (1,) for x in launches)


def test_a_scan_inside_a_parallel_loop_stays_sequential():
    """integral_image's scans are elements of global builds: each work-item runs its own."""
    source = compile_to_opencl(sf.integral_image.program(), sf.integral_image.options).source
    assert "get_global_id" in source and "get_group_id" not in source and "__local" not in source


def test_parallel_scan_and_filter_under_oclgrind():
    """No race on local or global memory, nothing out of bounds, no uninitialised read: sizes
    around the work-group, a tuple state, a filter keeping nothing, some, all."""
    ok, report = run_under_oclgrind("""
        import numpy as np
        from corpus import scan_filter as sf
        from test_scan_filter_opencl import prefix_min_max
        rng = np.random.default_rng(7)
        for n in (1, 300, 0, 2):  # hoisted buffers grow, then are reused by smaller calls
            v = rng.uniform(-1, 1, n)
            assert np.allclose(sf.cumulative_sum.opencl(v), np.cumsum(v))
            lo, hi = prefix_min_max.opencl(v)
            assert np.array_equal(hi, np.maximum.accumulate(np.maximum(v, -1e300)))
            for t in (0.0, 0.5, 2.0):
                assert np.array_equal(sf.keep_inliers.opencl(v, t), v[np.abs(v) < t])
    """, timeout=600)
    assert ok, report
