"""Issue 11: a remainder (a·it + b) mod n of a loop's variable, n not a constant, is kept running
(``fsmooth.dpia.strength_reduction.RunningRemainder``): the division it was on every trip (gcc
divides in 64 bits) becomes a comparison and an addition, proven by counting the divisions in
the generated C's loops.  Results equal the reference and numpy through the ABI (UBSan; ASan
under ASAN) for a negative b, a ≥ n, n = 1, n near 2**62 and 2**63, no trips, and a divisor 0,
which fails as before: only where the loop runs."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fsmooth as fs
from benchmarks import micro_kernels
from fsmooth import Array, Card, Double, build, ifold, length
from fsmooth.driver import compile_to_c
from fsmooth.options import Options
from test_codegen_c import ASAN, Runner, run_under_address_sanitizer
from test_loop_work import _loop_bodies


@fs.kernel
def strided_product(v: Array[Double], iters: Card) -> Double:
    """Two strided reads per trip, a negative b and an a that may be ≥ length(v)."""
    return ifold(lambda acc, it: acc + v[(7 * it - 5) % length(v)] * v[(it * 3 + 4) % length(v)], 0.0, iters)


@fs.kernel
def wide_remainder(v: Array[Double], iters: Card, m: Card) -> Double:
    """A divisor m that may be near 2**63: r + (5 mod m) does not fit int64 there."""
    return ifold(lambda acc, it: acc + v[((it * 5 - 3) % m) % length(v)], 0.0, iters)


@fs.kernel
def rotated_rows(m: Array[Array[Double]], k: Card) -> Array[Double]:
    """A remainder of the inner loop whose b is the outer loop's variable."""
    return build(length(m), lambda i: ifold(lambda acc, j: acc + m[i][(i + 3 * j) % length(m[0])], 0.0, k))


def np_strided_product(v, iters):
    it = np.arange(iters)
    return float(np.sum(v[(7 * it - 5) % len(v)] * v[(it * 3 + 4) % len(v)])) if iters else 0.0


def np_wide_remainder(v, iters, m):
    return float(sum(v[((it * 5 - 3) % m) % len(v)] for it in range(iters)))


def np_rotated_rows(m, k):
    return np.array([sum(m[i][(i + 3 * j) % m.shape[1]] for j in range(k)) for i in range(m.shape[0])])


DIVISION = re.compile(r"%|fs_mod_i64|fs_running_mod_i64|fs_floordiv_i64|\b\w+ / \w+")


def divisions_in_loops(source: str, innermost: bool = False) -> int:
    """The integer divisions and remainders written inside some loop of ``source`` (or its
    innermost loops), each line counted once (none of these kernels divides doubles);
    ``fs_running_mod_i64`` counts as one, though it divides only where its b is not in 0 .. n-1."""
    lines = source.splitlines()
    inside = set()
    for body in _loop_bodies(source):
        if innermost and "for (" in body[5:]:
            continue
        first = source[:source.index(body)].count("\n")
        inside |= set(range(first + 1, first + body.count("\n") + 1))
    return sum(len(DIVISION.findall(lines[k])) for k in inside)


@pytest.mark.parametrize("kernel, before, after", [
    (strided_product, 2, 0),
    (wide_remainder, 2, 1),  # (r mod length(v)) stays: a remainder of no loop variable
    (micro_kernels.add3_loop, 2, 0),
    # b mod n and a mod n once per row (no division where i < n and 3 < n) for k per row
    (rotated_rows, 1, 2)])
def test_a_remainder_of_the_loop_variable_divides_no_more_in_the_loop(kernel, before, after):
    kept = compile_to_c(kernel.program(), Options(reduce_strength=False)).source
    assert divisions_in_loops(kept) == before
    source = compile_to_c(kernel.program(), Options()).source
    assert divisions_in_loops(source) == after
    assert divisions_in_loops(source, innermost=True) == (1 if kernel is wide_remainder else 0)
    assert re.search(r"remainder_\d+ >= \w+ - remainder_\d+_step \?", source)


def test_a_constant_divisor_is_left_to_the_c_compiler():
    """gcc multiplies by a constant's inverse: no division to remove (cross's it % 3)."""
    source = compile_to_c(micro_kernels.cross_loop.program(), Options()).source
    assert "remainder_" not in source and "(it % 3)" in source


def test_strided_product_through_the_abi(tmp_path):
    run_c = Runner(compile_to_c(strided_product.program(), Options()), tmp_path, strided_product.name)
    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 7, 100):  # a = 7 ≥ n, 3 ≥ n; b = -5 < 0
        v = rng.uniform(-1, 1, n)
        for iters in (0, 1, 2, 13, 1000):
            got = run_c(v, iters)
            assert got == pytest.approx(strided_product.reference(v, iters), rel=1e-12, abs=1e-12)
            assert got == pytest.approx(np_strided_product(v, iters), rel=1e-12, abs=1e-12)
    # a divisor 0 fails where the loop runs, as the reference does, and nowhere else
    assert run_c(np.zeros(0), 0) == 0.0 == strided_product.reference(np.zeros(0), 0)
    assert run_c(np.zeros(0), 3) == ("status", 2)
    with pytest.raises(ZeroDivisionError):
        strided_product.reference(np.zeros(0), 3)


def test_wide_remainder_through_the_abi(tmp_path):
    run_c = Runner(compile_to_c(wide_remainder.program(), Options()), tmp_path, wide_remainder.name)
    v = np.random.default_rng(12).uniform(-1, 1, 97)
    for m in (1, 2, 5, 6, 2**62 - 1, 2**62 + 3, 2**63 - 1):
        for iters in (0, 1, 4, 50):
            got = run_c(v, iters, m)
            assert got == pytest.approx(wide_remainder.reference(v, iters, m), rel=1e-12, abs=1e-12)
            assert got == pytest.approx(np_wide_remainder(v, iters, m), rel=1e-12, abs=1e-12)
    assert run_c(v, 3, 0) == ("status", 2)
    assert run_c(v, 0, 0) == 0.0


def test_rotated_rows_through_the_abi(tmp_path):
    run_c = Runner(compile_to_c(rotated_rows.program(), Options()), tmp_path, rotated_rows.name)
    rng = np.random.default_rng(13)
    for rows, cols in ((0, 3), (1, 1), (4, 1), (5, 7), (30, 40)):
        m = rng.uniform(-1, 1, (rows, cols))
        for k in (0, 1, 9, 100):
            got = run_c(m, k)
            np.testing.assert_allclose(got, np.asarray(rotated_rows.reference(m, k)).reshape(rows), rtol=1e-12)
            np.testing.assert_allclose(got, np_rotated_rows(m, k).reshape(rows), rtol=1e-12)


def test_add3_loop_through_the_abi(tmp_path):
    f = micro_kernels.add3_loop
    run_c = Runner(compile_to_c(f.program(), Options()), tmp_path, f.name)
    rng = np.random.default_rng(14)
    for n in (1, 3, 100):
        a, b, c = (rng.uniform(-1, 1, n) for _ in range(3))
        for iters in (0, 1, 250):
            t = a + b + c
            expected = sum(t[it % n] + t[(it * 7 + 1) % n] for it in range(iters))
            assert run_c(a, b, c, iters) == pytest.approx(expected, rel=1e-12, abs=1e-12)
            assert run_c(a, b, c, iters) == pytest.approx(f.reference(a, b, c, iters), rel=1e-12, abs=1e-12)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_running_remainders_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "through_the_abi")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_running_remainders_on_intel_opencl_cpu(intel_cpu_context):
    """The OpenCL back end keeps them running too (add3_loop's sequential kernel): the same
    results there, a negative b, a ≥ n and n = 1 included, and the division by 0 reported."""
    # the sequential fold (the automatic reduction makes it one launch of work-groups, a lane's iterations strided)
    sequential = strided_product.with_options(auto_reductions=False)
    assert "remainder_1 >= v_d0 - remainder_1_step ?" in sequential.opencl_artifact().source
    rng = np.random.default_rng(15)
    for n, iters in ((1, 5), (3, 40), (100, 250)):
        v = rng.uniform(-1, 1, n)
        for kernel in (sequential, strided_product):
            got = kernel.opencl(v, iters, context=intel_cpu_context)
            assert got == pytest.approx(np_strided_product(v, iters), rel=1e-12, abs=1e-12)
        a, b, c = (rng.uniform(-1, 1, n) for _ in range(3))
        got = micro_kernels.add3_loop.opencl(a, b, c, iters, context=intel_cpu_context)
        assert got == pytest.approx(micro_kernels.add3_loop.reference(a, b, c, iters), rel=1e-12, abs=1e-12)
    assert strided_product.opencl(np.zeros(0), 0, context=intel_cpu_context) == 0.0
    with pytest.raises(ZeroDivisionError):
        strided_product.opencl(np.zeros(0), 3, context=intel_cpu_context)
