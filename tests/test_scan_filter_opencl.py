"""The parallel scan and filter of the OpenCL back end (``dpia.scan_opencl``: the single pass of
decoupled look-back, NOVA §5's three phases where a state is checked for overflow or the device
lacks 64-bit atomics, and mask, scan, scatter): on Intel's CPU runtime against numpy and the
reference at the sizes around a tile and a work-group (0, 1, 2, 255..257, 2047..2049,
4095..4097, non-multiples, 300 k, 1 Mi), over repeated calls whose sizes change (the look-back's
words stay consistent), under Oclgrind at small sizes (no race, nothing out of bounds), and its
plan: one launch of a group per tile, or three over several work-groups for a large n, the
sequential loop where the scan is not regroupable or sits inside a parallel loop."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyopencl as cl
import pytest
import sympy

import fsmooth as fs
from corpus import scan_filter as sf
from fsmooth import Array, Double, Float, Index, iscan, length
from fsmooth.cost_model import GENERIC_GPU
from fsmooth.driver import compile_to_opencl
from fsmooth.dpia.scan_opencl import LOCAL, LOOKBACK_EXTENSION, MAX_GROUPS, SINGLE_PASS_TILE_BYTES
from fsmooth.opencl_device import DeviceCapabilityError, default_context, require_capabilities
from fsmooth.opencl_executable import OpenCLExecutable
from opencl_oclgrind import run_under_oclgrind

# around a work-group and a tile (8 * LOCAL doubles, 16 * LOCAL floats), and non-multiples
SIZES = (0, 1, 2, LOCAL - 1, LOCAL, LOCAL + 1, 8 * LOCAL - 1, 8 * LOCAL, 8 * LOCAL + 1, 16 * LOCAL - 1, 16 * LOCAL,
         16 * LOCAL + 1, 5003, 70_001)
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
            np.testing.assert_allclose(float_cumsum.opencl(f), float_cumsum.reference(f), rtol=1e-4, atol=1e-5)


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


def test_filters_in_one_launch_against_boolean_indexing(rng):
    """Options.single_pass_filter: the filter's mask, scan and scatter in the single pass."""
    keep_inliers, count_and_mean = (k.with_options(single_pass_filter=True) for k in (sf.keep_inliers,
                                                                                    sf.inlier_count_and_mean))
    assert len(keep_inliers.opencl_artifact().launches) == 1
    for n in SIZES + (MI + 5,):
        r = rng.uniform(-2.0, 2.0, n)
        for threshold in (0.0, 1.0, 3.0):  # nothing kept, some, all
            np.testing.assert_array_equal(keep_inliers.opencl(r, threshold), r[np.abs(r) < threshold])
        kept, mean = count_and_mean.opencl(r, 1.0)
        expected = r[np.abs(r) < 1.0]
        assert kept == len(expected) and np.isclose(mean, expected.mean() if len(expected) else 0.0)


def _launches(kernel, **options):
    return compile_to_opencl(kernel.program(), replace(kernel.options, **options)).launches


def _groups(launch, n: int) -> int:
    size = sympy.sympify(launch.global_size[0])
    local = int(launch.local_size[0]) if launch.local_size else 1
    return int(size.subs({s: n for s in size.free_symbols})) // local


@pytest.mark.parametrize("kernel, options", [(sf.cumulative_sum, {}), (sf.keep_inliers, {"single_pass_filter": True}),
                                             (prefix_min_max, {}), (float_cumsum, {})])
def test_a_float_scan_or_a_filter_is_one_launch_of_a_group_per_tile(kernel, options):
    """The single pass: one launch of LOCAL work-items per tile of SINGLE_PASS_TILE_BYTES of states
    (on the generic GPU's 48 KiB of local memory; half as many for no device named: the next test),
    one group for n = 0 (it writes a filter's kept length, and
    copies it out: no launch of its own); the look-back's words need the 64-bit atomics."""
    scan, = _launches(kernel, opencl_device=GENERIC_GPU, **options)
    assert int(scan.local_size[0]) == LOCAL
    state_bytes = {float_cumsum: 4, prefix_min_max: 16}.get(kernel, 8)
    tile = SINGLE_PASS_TILE_BYTES // state_bytes
    for n, groups in ((0, 1), (1, 1), (tile, 1), (tile + 1, 2), (16 * MI, 16 * MI // tile)):
        assert _groups(scan, n) == groups
    assert compile_to_opencl(kernel.program(), replace(kernel.options, **options)).extensions == (LOOKBACK_EXTENSION,)
    assert _groups(_launches(kernel, **options)[0], tile) == 2  # 16 KiB tiles: OpenCL's least local memory


def test_the_single_pass_tile_fits_the_device_local_memory():
    """32 KiB tiles where a group has 48 KiB of local memory, 16 KiB where it has OpenCL's minimum
    (and where no device is named: fsmooth compile's host code may run on any)."""
    small = replace(GENERIC_GPU, name="a GPU of 32 KiB local memory", local_memory_bytes=32 * 1024)
    for device, tile_bytes in ((GENERIC_GPU, SINGLE_PASS_TILE_BYTES), (small, SINGLE_PASS_TILE_BYTES // 2)):
        scan, = _launches(float_cumsum, opencl_device=device)
        assert _groups(scan, tile_bytes // 4) == 1 and _groups(scan, tile_bytes // 4 + 1) == 2
        artifact = compile_to_opencl(float_cumsum.program(), replace(float_cumsum.options, opencl_device=device))
        local_bytes = sum(int(b.count) * (4 if b.elem is Float else 8) for b in artifact.buffers.values()
                          if b.role == "local")
        assert tile_bytes < local_bytes <= device.local_memory_bytes


@pytest.mark.parametrize("kernel, options", [(sf.cumulative_sum, {"single_pass_scan": False}),
                                             (sf.keep_inliers, {}),  # Options.single_pass_filter is off
                                             (float_cumsum, {"single_pass_scan": False}),
                                             (sf.index_cumulative_sum, {})])
def test_a_checked_scan_or_one_without_the_single_pass_is_three_launches(kernel, options):
    """The plan: reduce, partials, down (a filter's kept length then copied out), the first and
    the last over many groups of LOCAL work-items for a large n, the partials' over one."""
    launches = _launches(kernel, **options)
    assert len(launches) >= 3
    reduce_, partials, down = launches[:3]
    assert [int(x.local_size[0]) for x in (reduce_, partials, down)] == [LOCAL] * 3
    assert _groups(reduce_, 16 * MI) == _groups(down, 16 * MI) == MAX_GROUPS
    tile = next(n for n in (1024, 2048, 4096) if _groups(reduce_, n + 1) == 2)  # elements of a tile: 16 KiB
    assert _groups(reduce_, 1) == 1 and _groups(reduce_, 10 * tile) == 10  # one group per tile up to MAX_GROUPS
    assert _groups(partials, 16 * MI) == 1
    assert _groups(reduce_, 0) == 0  # nothing launched


def test_a_kept_length_used_beside_the_filter_waits_for_its_launch():
    """inlier_count_and_mean folds over the kept elements, which every group writes: a launch of
    its own after the single pass, not the last group's total."""
    scan, fold = _launches(sf.inlier_count_and_mean, single_pass_filter=True)
    assert _groups(scan, 10**6) > 1 and tuple(map(int, fold.global_size)) == (1,)


def test_explain_says_which_scan_was_chosen(capsys):
    """The OpenCL source's strategy comment: the single pass, or the three phases and why."""
    from fsmooth.cli import main

    for kernel, flags, said in ((sf.cumulative_sum, [], "one launch, the single-pass scan (decoupled look-back"),
                                (sf.keep_inliers, [], "three launches (NOVA §5: reduce, scan of the partials, "
                                 "down-sweep), since it is a filter's and single_pass_filter is off"),
                                (sf.cumulative_sum, ["--no-single-pass-scan"],
                                 "three launches (NOVA §5: reduce, scan of the partials, down-sweep), since "
                                 f"single_pass_scan is off or the device lacks {LOOKBACK_EXTENSION}"),
                                (sf.index_cumulative_sum, [], "three launches (NOVA §5: reduce, scan of the partials, "
                                 "down-sweep), since its states are checked for integer overflow")):
        assert main(["explain", f"{sf.__file__}:{kernel.name}", "--target", "opencl", "--stage", "opencl",
                     *flags]) == 0
        assert said in capsys.readouterr().out.split("*/")[1]  # the strategy comment


class _DeviceWithout64BitAtomics:
    """This machine's OpenCL device, said to lack 64-bit atomics."""
    name = "a device without 64-bit atomics"
    extensions = "cl_khr_fp64 cl_khr_global_int32_base_atomics"

    def __getattr__(self, attribute):
        return getattr(default_context().devices[0], attribute)


def test_a_device_without_64_bit_atomics_gets_the_three_phases(rng):
    """Decided where the program is built: for such a device the kernel compiles to the three
    phases, which still scan right; the single pass's artifact is refused there."""
    device = _DeviceWithout64BitAtomics()
    three = float_cumsum.opencl_artifact(device)
    assert len(three.launches) == 3 and three.extensions == () and "atom_" not in three.source
    with pytest.raises(DeviceCapabilityError, match=LOOKBACK_EXTENSION):
        require_capabilities(float_cumsum.opencl_artifact(), device)
    run = OpenCLExecutable(three, None, float_cumsum.program().main.params)
    for n in (0, 1, 16 * LOCAL + 1, 70_001):
        f = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        np.testing.assert_allclose(run(f), np.cumsum(f, dtype=np.float64), rtol=1e-4, atol=1e-3)


def _lookback_counter(executable) -> tuple:
    """(the look-back's buffer, its counter's epoch, the tickets taken): word 0 of the buffer."""
    name = next(b.name for b in executable.artifact.buffers.values() if b.role == "lookback")
    buffer = executable.temp_buffer(name)
    if buffer is None:  # not called yet: its words will start zeroed
        return None, 0, 0
    word = np.empty(1, dtype=np.uint64)
    cl.enqueue_copy(executable.queue, word, buffer, is_blocking=True)
    return buffer, int(word[0]) >> 32, int(word[0]) & 0xFFFFFFFF


def test_the_single_pass_over_repeated_calls_of_changing_sizes(rng):
    """Each call leaves the look-back's words ready for the next: no ticket left taken, one more
    epoch (a buffer grown for a larger call starts zeroed, at epoch 0); sizes larger, then smaller, then larger again (a word of an earlier, larger call is
    never taken for this call's), 300 k elements (many tiles) included; integer-valued elements,
    so that every grouping of the sums gives the same, exact states: the same bits every call."""
    for kernel, dtype in ((float_cumsum, np.float32), (sf.cumulative_sum, np.float64)):
        executable = kernel.opencl_executable()
        buffer, epoch, _ = _lookback_counter(executable)
        for n in (300_001, 5, 0, 1, 300_001, 2 * 16 * LOCAL + 1, 300_001, 300_001):
            v = rng.integers(-3, 4, n).astype(dtype)
            np.testing.assert_array_equal(kernel.opencl(v), np.cumsum(v, dtype=np.float64).astype(dtype))
            now, epoch_now, taken = _lookback_counter(executable)
            assert (epoch_now, taken) == ((epoch if now is buffer else 0) + 1, 0)
            buffer, epoch = now, epoch_now
        assert epoch >= 7  # grown once at most, for the first 300 k
        r = rng.uniform(-1.0, 1.0, 300_001)
        assert np.array_equal(*(prefix_min_max.opencl(r)[1] for _ in range(2)))
        np.testing.assert_array_equal(prefix_min_max.opencl(r)[0], np.minimum.accumulate(np.minimum(r, 1e300)))
        one_launch = sf.keep_inliers.with_options(single_pass_filter=True)
        for n in (300_001, 3, 300_001):
            np.testing.assert_array_equal(one_launch.opencl(r[:n], 0.5), r[:n][np.abs(r[:n]) < 0.5])


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
        from test_scan_filter_opencl import float_cumsum, prefix_min_max
        rng = np.random.default_rng(7)
        # three tiles, so that the look-back runs: 16 KiB tiles in Oclgrind's 32 KiB of local memory
        f = rng.uniform(-1, 1, 2 * 4096 + 3).astype(np.float32)
        assert np.allclose(float_cumsum.opencl(f), np.cumsum(f, dtype=np.float64), rtol=1e-4, atol=1e-3)
        d = f[:5000].astype(np.float64)
        assert np.array_equal(sf.keep_inliers.with_options(single_pass_filter=True).opencl(d, 0.5), d[np.abs(d) < 0.5])
        for n in (1, 300, 0, 2):  # hoisted buffers grow, then are reused by smaller calls
            v = rng.uniform(-1, 1, n)
            assert np.allclose(sf.cumulative_sum.opencl(v), np.cumsum(v))
            lo, hi = prefix_min_max.opencl(v)
            assert np.array_equal(hi, np.maximum.accumulate(np.maximum(v, -1e300)))
            for t in (0.0, 0.5, 2.0):
                assert np.array_equal(sf.keep_inliers.opencl(v, t), v[np.abs(v) < t])
    """, timeout=600)
    assert ok, report
