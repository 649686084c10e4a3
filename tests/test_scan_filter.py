"""Issue 14's ``fs.iscan``: the states of a fold as an array (a tuple of arrays for a tuple state),
against numpy (``np.cumsum``, ``np.maximum.accumulate``) and the reference, through C, the two IR
interpreters, OpenCL under Oclgrind and the sanitizers; its errors located in the source.  The
corpus kernels are tests/corpus/scan_filter.py (sizes 1 .. 5000 in tests/test_corpus.py)."""
from __future__ import annotations

import linecache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import fsmooth as fs
from corpus import scan_filter as sf
from fsmooth import Array, Double, Index, iscan, length
from fsmooth.cli import explain
from fsmooth.core import run_kernel as run_core
from fsmooth.driver import compile_to_c, run_pipeline
from fsmooth.dps.interp import run_kernel as run_dps
from fsmooth.options import Options
from opencl_oclgrind import run_under_oclgrind
from test_codegen_c import ASAN, Runner, run_under_address_sanitizer
from test_corpus import assert_close

SIZES = (0, 1, 2, 1000, 200_000)


@pytest.mark.parametrize("n", SIZES)
def test_scans_against_numpy_and_the_reference(n, rng):
    v = rng.uniform(-1.0, 1.0, n)
    for kernel, oracle in ((sf.cumulative_sum, np.cumsum), (sf.running_max, np.maximum.accumulate)):
        got = kernel(v)
        assert got.dtype == np.float64 and got.shape == (n,)
        np.testing.assert_allclose(got, oracle(v), rtol=1e-9, atol=1e-9)
        if n <= 1000:  # the reference is Python, one call per element
            np.testing.assert_array_equal(got, kernel.reference(v))  # the same order of additions
    iv = rng.integers(-10**6, 10**6, n)
    np.testing.assert_array_equal(sf.index_cumulative_sum(iv), np.cumsum(iv))
    sums, maxima = sf.sum_and_max_prefixes(v)
    np.testing.assert_allclose(sums, np.cumsum(v), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(maxima, np.maximum.accumulate(v))


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.integers(0, 64), elements=st.floats(-1e6, 1e6, allow_nan=False)))
def test_cumulative_sum_is_the_reference_bit_for_bit(v):
    np.testing.assert_array_equal(sf.cumulative_sum(v), sf.cumulative_sum.reference(v))
    np.testing.assert_allclose(sf.cumulative_sum(v), np.cumsum(v), rtol=1e-9, atol=1e-3)


def test_an_index_sum_leaving_int64_is_an_overflow_error_in_both():
    v = np.array([2**62, 2**62, -5], dtype=np.int64)
    with pytest.raises(OverflowError):
        sf.index_cumulative_sum.reference(v)
    with pytest.raises(OverflowError):
        sf.index_cumulative_sum(v)
    with pytest.raises(OverflowError):
        sf.fibonacci.reference(100)
    with pytest.raises(OverflowError):
        sf.fibonacci(92)  # its last state holds F(93) > 2**63 - 1
    assert sf.fibonacci(91)[1][-1] == 7540113804746346429  # F(92), the last that fits


@pytest.mark.parametrize("kernel, args", [
    (sf.cumulative_sum, (np.linspace(-1.0, 2.0, 7),)),
    (sf.sum_and_max_prefixes, (np.linspace(3.0, -2.0, 6),)),
    (sf.fibonacci, (11,)),
    (sf.integral_image, (np.arange(12.0).reshape(3, 4),)),
    (sf.total_of_prefix_sums, (np.linspace(0.0, 1.0, 9),)),
])
def test_every_interpreter_agrees_with_the_reference(kernel, args):
    expected = kernel.reference(*args)
    stages = run_pipeline(kernel.program())
    assert_close(run_core(kernel.program(), kernel.name, list(args)), expected, rtol=1e-12)
    assert_close(run_core(stages.anf, kernel.name, list(args)), expected, rtol=1e-12)
    run = run_dps(stages.dps, kernel.name, list(args))
    assert_close(run.result, expected, rtol=1e-12)
    assert run.high_water <= run.scratch


def test_a_scan_writes_each_state_once_in_one_loop():
    """n trips of one loop: a scan is linear, never a fold per element."""
    stages = run_pipeline(sf.cumulative_sum.program())
    for n in (10, 40):
        run = run_dps(stages.dps, "cumulative_sum", [np.ones(n)])
        assert run.work["ifold trip"] == n and run.work["add"] == n
    c = stages.c.source
    assert c.count("for (") == 1 and "out[i] = acc;" in c


def test_explain_shows_the_scan_at_every_stage():
    text = explain(sf.cumulative_sum, "all")
    for stage in ("== core ==", "== anf ==", "== shape ==", "== dps ==", "== dpia ==", "== c =="):
        assert stage in text
    assert text.count("iscan (λ acc i.") == 2  # core and anf
    assert "iscan out (λ acc i." in text  # dps: the states go to the destination
    assert "out[i] := acc" in text  # dpia
    assert "cumulative_sum_shp = λ v_shp. v_shp" in text
    assert "for v_d0 (λ i." in explain(sf.cumulative_sum, "dpia", target="opencl")


def test_scratch_of_a_scan_read_by_a_fold_is_its_array():
    k = sf.total_of_prefix_sums
    assert k.scratch_bytes(np.ones(100)) == 800  # the prefix sums: n doubles, nothing else


# ----------------------------------------------------------------------------- errors

def _error(fn) -> fs.CompileError:
    with pytest.raises(fs.CompileError) as info:
        compile_to_c(fs.kernel(fn).program())
    return info.value


def test_a_scan_of_an_array_state_is_a_located_error():
    def array_state(v: Array[Double]) -> Array[Array[Double]]:
        return iscan(lambda s, i: s, v, length(v))
    err = _error(array_state)
    assert "the state of iscan must be a number or a tuple of numbers" in err.message
    assert err.filename == __file__ and err.lineno == array_state.__code__.co_firstlineno + 1
    assert linecache.getline(__file__, err.lineno)[err.col_offset:].startswith("v, length(v))")
    assert str(err).splitlines()[-1].strip().startswith("^")  # the caret under it


def test_a_scan_sized_by_an_index_is_a_located_error():
    def index_sized(v: Array[Double], k: Index) -> Array[Double]:
        return iscan(lambda s, i: s + v[i], 0.0, k)
    err = _error(index_sized)
    assert "iscan size must be a Card" in err.message
    assert linecache.getline(__file__, err.lineno)[err.col_offset:] == "k)\n"


def test_a_scan_of_a_negative_size_is_refused_before_it_runs():
    @fs.kernel
    def shifted(v: Array[Double], m: fs.Card) -> Array[Double]:
        return iscan(lambda s, i: s + v[i], 0.0, length(v) - m)
    with pytest.raises(ValueError):
        shifted(np.ones(3), 5)
    with pytest.raises(ValueError):
        shifted.reference(np.ones(3), 5)
    np.testing.assert_array_equal(shifted(np.ones(3), 1), [1.0, 2.0])


# ----------------------------------------------------------------------------- OpenCL, sanitizers

def test_scans_on_opencl_under_oclgrind():
    """On OpenCL a regroupable scan is the three-phase parallel scan (tests/test_scan_filter_opencl.py),
    the others the C's sequential loop, in a kernel of one work-item or in a work-item of a build:
    no race, no access out of bounds, sizes 0, 1 and larger."""
    ok, report = run_under_oclgrind("""
        import numpy as np
        from corpus import scan_filter as sf
        rng = np.random.default_rng(3)
        for n in (1, 333, 0):  # hoisted buffers grow, then are reused by smaller calls
            v = rng.uniform(-1, 1, n)
            assert np.allclose(sf.cumulative_sum.opencl(v), np.cumsum(v))
            assert np.array_equal(sf.running_max.opencl(v), np.maximum.accumulate(v))
            s, m = sf.sum_and_max_prefixes.opencl(v)
            assert np.allclose(s, np.cumsum(v)) and np.array_equal(m, np.maximum.accumulate(v))
            iv = rng.integers(-1000, 1000, n)
            assert np.array_equal(sf.index_cumulative_sum.opencl(iv), np.cumsum(iv))
        img = rng.uniform(-1, 1, (5, 7))
        assert np.allclose(sf.integral_image.opencl(img), np.cumsum(np.cumsum(img, 0), 1))
        assert np.array_equal(sf.fibonacci.opencl(20)[1], sf.fibonacci.reference(20)[1])
    """, timeout=600)
    assert ok, report


SANITIZED = {
    sf.cumulative_sum: lambda rng, n: (rng.uniform(-1, 1, n),),
    sf.running_max: lambda rng, n: (rng.uniform(-1, 1, n),),
    sf.total_of_prefix_sums: lambda rng, n: (rng.uniform(-1, 1, n),),
}


@pytest.mark.parametrize("kernel", list(SANITIZED), ids=[k.name for k in SANITIZED])
def test_scan_c_through_the_abi(kernel, tmp_path, rng):
    """Built by hand with -fsanitize (address under ASAN, undefined always), called by the ABI."""
    run_c = Runner(compile_to_c(kernel.program(), Options()), tmp_path, kernel.name)
    for n in (0, 1, 300):
        args = SANITIZED[kernel](rng, n)
        np.testing.assert_allclose(run_c(*args), kernel.reference(*args), rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_scan_c_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "through_the_abi")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


# ============================================================================= filter

FILTER_SIZES = (0, 1, 2, 1000, 200_000)


@pytest.mark.parametrize("n", FILTER_SIZES)
def test_filters_against_boolean_indexing_and_the_reference(n, rng):
    r = rng.uniform(-2.0, 2.0, n)
    kept = sf.keep_inliers(r, 1.0)
    assert kept.dtype == np.float64 and kept.ndim == 1
    np.testing.assert_array_equal(kept, r[np.abs(r) < 1.0])
    np.testing.assert_array_equal(sf.positive_below(r, 1.5), r[(r > 0) & (r < 1.5)])
    np.testing.assert_allclose(sf.inlier_cost(r, 1.0), np.sum(r[np.abs(r) < 1.0] ** 2), rtol=1e-9, atol=1e-12)
    count, mean = sf.inlier_count_and_mean(r, 1.0)
    assert count == np.count_nonzero(np.abs(r) < 1.0)
    iv = rng.integers(-100, 100, n)
    np.testing.assert_array_equal(sf.odd_indices(iv), iv[iv % 2 == 1])
    if n <= 1000:
        np.testing.assert_array_equal(kept, sf.keep_inliers.reference(r, 1.0))
        assert (count, mean) == sf.inlier_count_and_mean.reference(r, 1.0)


def test_a_filter_keeping_all_or_nothing():
    v = np.linspace(-1.0, 1.0, 101)
    np.testing.assert_array_equal(sf.keep_inliers(v, 10.0), v)
    assert sf.keep_inliers(v, -1.0).shape == (0,)
    assert sf.inlier_count_and_mean(v, -1.0) == (0, 0.0)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.integers(0, 64), elements=st.floats(-4, 4, allow_nan=False)),
       st.floats(0.0, 3.0, allow_nan=False))
def test_keep_inliers_is_boolean_indexing(r, threshold):
    np.testing.assert_array_equal(sf.keep_inliers(r, threshold), r[np.abs(r) < threshold])
    np.testing.assert_array_equal(sf.keep_inliers.reference(r, threshold), r[np.abs(r) < threshold])
    np.testing.assert_array_equal(sf.positive_below(r, threshold), r[(r > 0) & (r < threshold)])


@pytest.mark.parametrize("kernel, args", [
    (sf.keep_inliers, (np.linspace(-2.0, 2.0, 9), 1.0)),
    (sf.inlier_cost, (np.linspace(-2.0, 2.0, 9), 1.0)),
    (sf.positive_below, (np.linspace(-2.0, 2.0, 9), 1.5)),
    (sf.inlier_count_and_mean, (np.linspace(-2.0, 2.0, 9), 1.0)),
    (sf.inliers_per_row, (np.linspace(-2.0, 2.0, 12).reshape(3, 4), 1.0)),
])
def test_every_interpreter_agrees_on_filters(kernel, args):
    expected = kernel.reference(*args)
    stages = run_pipeline(kernel.program())
    assert_close(run_core(kernel.program(), kernel.name, list(args)), expected, rtol=1e-12)
    assert_close(run_core(stages.anf, kernel.name, list(args)), expected, rtol=1e-12)
    run = run_dps(stages.dps, kernel.name, list(args))
    assert_close(run.result, expected, rtol=1e-12)  # a filter's: its kept elements
    assert run.high_water <= run.scratch


def _filters(dps) -> list:
    from fsmooth.dps import ir
    return [t for k in dps.kernels.values() for t in ir.walk(k.body) if isinstance(t, ir.Filter)]


def test_a_filter_folded_over_is_never_stored():
    """NOVA's filter fusion: with it the cost is one loop over the residuals and no scratch; without
    it the filter is stored in a region of the capacity and read again."""
    r = np.linspace(-2.0, 2.0, 1000)
    kept = int(np.count_nonzero(np.abs(r) < 1.0))
    fused = run_pipeline(sf.inlier_cost.program())
    stored = run_pipeline(sf.inlier_cost.program(), Options(fusion=False))
    assert not _filters(fused.dps) and len(_filters(stored.dps)) == 1
    assert sf.inlier_cost.scratch_bytes(r, 1.0) == 0
    assert sf.inlier_cost.with_options(fusion=False).scratch_bytes(r, 1.0) == 8 * 1000  # the capacity
    one, two = run_dps(fused.dps, "inlier_cost", [r, 1.0]), run_dps(stored.dps, "inlier_cost", [r, 1.0])
    assert one.high_water == 0 and one.work["ifold trip"] == 1000 and one.work["filter trip"] == 0
    assert two.work["filter trip"] == 1000 and two.work["ifold trip"] == kept
    assert one.result == pytest.approx(two.result, rel=1e-12)
    assert "alloc" not in explain(sf.inlier_cost, "dps") and "filter" not in explain(sf.inlier_cost, "dps")
    assert "(char *)scratch +" not in explain(sf.inlier_cost, "c")  # no region: no buffer in the C
    assert "(char *)scratch +" in explain(sf.inlier_cost.with_options(fusion=False), "c")


def test_a_filter_of_a_filter_is_one_pass():
    v = np.linspace(-2.0, 2.0, 400)
    fused = run_pipeline(sf.positive_below.program())
    stored = run_pipeline(sf.positive_below.program(), Options(fusion=False))
    assert len(_filters(fused.dps)) == 1 and len(_filters(stored.dps)) == 2
    one, two = run_dps(fused.dps, "positive_below", [v, 1.5]), run_dps(stored.dps, "positive_below", [v, 1.5])
    assert one.work["filter trip"] == 400 and two.work["filter trip"] == 400 + np.count_nonzero(v > 0)
    assert sf.positive_below.scratch_bytes(v, 1.5) == 0  # written straight into the result
    assert sf.positive_below.with_options(fusion=False).scratch_bytes(v, 1.5) == 8 * 400


def test_a_filter_whose_length_is_used_is_stored_at_its_capacity():
    r = np.linspace(-2.0, 2.0, 1001)
    assert sf.inlier_count_and_mean.scratch_bytes(r, 1.0) == 8016  # 1001 doubles (8008 bytes), to 16 bytes
    assert sf.inliers_per_row.scratch_bytes(np.ones((3, 5)), 1.0) == 0  # fused in each row


def test_the_kept_length_is_length_inside_a_kernel():
    @fs.kernel
    def last_kept(v: Array[Double]) -> Double:
        kept = fs.filter(lambda x: x > 0.0, v)
        return kept[length(kept) - 1]
    v = np.array([1.0, -1.0, 3.0, -2.0])
    assert last_kept(v) == last_kept.reference(v) == 3.0
    with pytest.raises(IndexError):
        last_kept(-v[:1])  # nothing kept: the read of kept[-1] is checked against the kept length
    with pytest.raises(IndexError):
        last_kept.reference(-v[:1])


# ----------------------------------------------------------------------------- filter errors

def _source_at(err) -> str:
    return linecache.getline(err.filename, err.lineno)[err.col_offset:]


def test_a_filter_as_a_build_element_is_a_located_error():
    def rows_kept(m: Array[Array[Double]]) -> Array[Array[Double]]:
        return fs.build(length(m), lambda i: fs.filter(lambda x: x > 0.0, m[i]))
    err = _error(rows_kept)
    assert "cannot be an element of a build" in err.message
    assert err.filename == __file__ and _source_at(err).startswith("fs.filter(lambda x: x > 0.0, m[i])")
    assert str(err).splitlines()[-1].strip().startswith("^~")


def test_a_filtered_array_where_a_static_size_is_needed_is_a_located_error():
    def in_a_tuple(v: Array[Double]) -> tuple[Array[Double], Double]:
        kept = fs.filter(lambda x: x > 0.0, v)
        return kept, 1.0
    err = _error(in_a_tuple)
    assert "a tuple's component" in err.message and _source_at(err).startswith("fs.filter(lambda x: x > 0.0, v)")

    def sized_by_it(v: Array[Double]) -> Array[Double]:
        kept = fs.filter(lambda x: x > 0.0, v)
        return fs.build(length(kept), lambda i: kept[i] * 2.0)
    err = _error(sized_by_it)
    assert "the size of build must be computable from the input sizes" in err.message
    assert _source_at(err).startswith("fs.build(length(kept)")


def test_a_filter_of_rows_is_a_located_error():
    def rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
        return fs.filter(lambda row: row[0] > 0.0, m)
    err = _error(rows)
    assert "filter needs an array of numbers" in err.message and _source_at(err).startswith("m)")


# ----------------------------------------------------------------------------- the C ABI of a filter

def test_the_header_and_manifest_describe_the_kept_length(tmp_path):
    import json
    import subprocess
    import sys
    out = tmp_path / "lib"
    subprocess.run([sys.executable, "-m", "fsmooth", "compile", sf.__file__, "-o", str(out)], check=True,
                   capture_output=True, text=True)
    header = (out / "scan_filter.h").read_text()
    assert "int scan_filter_keep_inliers(void *scratch, double *out_0, int64_t *out_1, const double *residuals, " \
           "int64_t residuals_d0, double threshold);" in header
    assert "out_1 (int64_t *) receives how many were kept" in header
    manifest = json.loads((out / "scan_filter.json").read_text())["kernels"]
    assert manifest["keep_inliers"]["kept_length"] and not manifest["inlier_cost"]["kept_length"]
    assert manifest["keep_inliers"]["result"]["components"][0]["dims"] == ["residuals_d0"]


def call_filter_abi(kernel, tmp_path, v, threshold):
    """The kernel called as the C ABI says: out_0 of the capacity (K_shape_0), out_1 the count."""
    from test_codegen_c import compile_and_load, ptr
    artifact = compile_to_c(kernel.program(), Options())
    folder = tmp_path / kernel.name  # one library a folder: dlopen of a path loaded before reuses it
    folder.mkdir(exist_ok=True)
    ffi, lib = compile_and_load(artifact, folder)
    symbol = artifact.interfaces[kernel.name].symbol
    capacity = ffi.new("int64_t[1]")
    getattr(lib, f"{symbol}_shape_0")(capacity, len(v))
    assert capacity[0] == len(v)
    scratch = np.zeros(max(getattr(lib, f"{symbol}_scratch_bytes")(len(v)), 1), dtype=np.uint8)
    out, count = np.full(capacity[0], np.nan), ffi.new("int64_t *")
    status = getattr(lib, symbol)(ffi.from_buffer(scratch), ptr(ffi, out), count, ptr(ffi, v), len(v), threshold)
    assert status == 0
    return out[:count[0]]


def test_filter_c_through_the_abi(tmp_path, rng):
    for n in (0, 1, 300):
        r = rng.uniform(-2, 2, n)
        np.testing.assert_array_equal(call_filter_abi(sf.keep_inliers, tmp_path, r, 1.0), r[np.abs(r) < 1.0])
        np.testing.assert_array_equal(call_filter_abi(sf.positive_below, tmp_path, r, 1.5), r[(r > 0) & (r < 1.5)])


def test_filters_on_opencl_under_oclgrind():
    """On OpenCL a stored filter is mask, scan, scatter (tests/test_scan_filter_opencl.py), a fused
    one runs as the fold it became, one in a build's element the sequential loop; the kept
    elements come back at their length."""
    ok, report = run_under_oclgrind("""
        import numpy as np
        from corpus import scan_filter as sf
        rng = np.random.default_rng(5)
        for n in (1, 257, 0):  # a stored filter's hoisted buffers grow, then are reused
            r = rng.uniform(-2, 2, n)
            assert np.array_equal(sf.keep_inliers.opencl(r, 1.0), r[np.abs(r) < 1.0])
            assert np.array_equal(sf.positive_below.opencl(r, 1.5), r[(r > 0) & (r < 1.5)])
            assert np.isclose(sf.inlier_cost.opencl(r, 1.0), np.sum(r[np.abs(r) < 1.0] ** 2))
            assert sf.inlier_count_and_mean.opencl(r, 1.0)[0] == np.count_nonzero(np.abs(r) < 1.0)
        m = rng.uniform(-2, 2, (4, 9))
        assert np.array_equal(sf.inliers_per_row.opencl(m, 1.0), np.sum(np.abs(m) < 1.0, axis=1))
    """, timeout=600)
    assert ok, report


@fs.kernel
def cost_of_kept(residuals: Array[Double]) -> Double:
    inliers = sf.keep_inliers(residuals, 0.5)  # a kernel returning a filter: always inlined, then fused
    return fs.ifold(lambda acc, i: acc + inliers[i], 0.0, length(inliers))


def test_a_kernel_returning_a_filter_is_inlined_where_it_is_called():
    r = np.linspace(-1.0, 1.0, 201)
    assert cost_of_kept(r) == pytest.approx(np.sum(r[np.abs(r) < 0.5]), abs=1e-12)
    assert cost_of_kept.scratch_bytes(r) == 0  # inlined, then fused: nothing stored
    with pytest.raises(fs.CompileError) as info:
        cost_of_kept.with_options(inline_kernels=False)(r)
    assert "returns a filter" in info.value.message and _source_at(info.value).startswith("sf.keep_inliers(")
