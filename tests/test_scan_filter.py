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
    """The OpenCL translation is the C's sequential loop, in a kernel of one work-item: no race,
    no access out of bounds, sizes 0, 1 and larger."""
    ok, report = run_under_oclgrind("""
        import numpy as np
        from corpus import scan_filter as sf
        rng = np.random.default_rng(3)
        for n in (0, 1, 333):
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
