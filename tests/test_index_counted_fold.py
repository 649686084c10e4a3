"""``ifold`` counted by an ``Index``: triangular loops and negative counts (no iteration) through
the reference, the compiled C and OpenCL, against numpy; the range analysis that knows
0 ≤ j < i inside such a fold turns triangular reads (GMM's packed lower triangle) into size
constraints checked once before the call, with no check left in the loop."""
from __future__ import annotations

import re

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import triangular
from fsmooth.dps.ranges import Ranges, bounds, in_range, tighten
from fsmooth import Array, Double, Index, build, ifold, length
from fsmooth.shape.sizes import size_symbol
from test_corpus import DOUBLE
from test_dps import check_run, stages

SIZES = (0, 1, 2, 5, 17, 300)


def _vec(rng, n):
    return rng.uniform(-1.0, 1.0, n)


def _body(kernel: fs.Kernel) -> str:
    """The C of the kernel's body function (its loops), without the size checks."""
    source = kernel.c_source()
    start = re.search(rf"static int \w+_{kernel.name}_body\([^)]*\) {{", source).end()
    return source[start:source.index("\n}\n", start)]


def _checks(c: str) -> list[str]:
    """The range tests of ``c``: the tests that fail with status 1 (out of range)."""
    return re.findall(r"if \(!\(.*\)\) \{ \w+ = 1; goto .*", c)


def _all_agree(kernel, oracle, args):
    expected = oracle(*args)
    np.testing.assert_allclose(kernel.reference(*args), expected, **DOUBLE)
    np.testing.assert_allclose(kernel(*args), expected, **DOUBLE)
    if max((len(a) for a in args if isinstance(a, np.ndarray)), default=0) > 20:
        return  # the interpreters are slow: small sizes only
    anf, translated, simplified = stages(kernel)
    core_value = fs.core.run_kernel(anf, kernel.name, list(args))
    np.testing.assert_allclose(core_value, expected, **DOUBLE)
    check_run(translated, kernel.name, args, core_value)
    check_run(simplified, kernel.name, args, core_value)


# ----------------------------------------------------------------------------- results

@pytest.mark.parametrize("n", SIZES)
def test_prefix_sums(n, rng):
    _all_agree(triangular.prefix_sums, triangular.np_prefix_sums, (_vec(rng, n),))


@pytest.mark.parametrize("d", SIZES)
def test_lower_triangular_product(d, rng):
    _all_agree(triangular.lower_times, triangular.np_lower_times, (_vec(rng, d * (d + 1) // 2), _vec(rng, d)))
    # a longer icf is fine too
    _all_agree(triangular.lower_times, triangular.np_lower_times, (_vec(rng, d * (d + 1) // 2 + 3), _vec(rng, d)))


@pytest.mark.parametrize("n", SIZES)
def test_negative_count_runs_no_iteration(n, rng):
    _all_agree(triangular.lagged_sums, triangular.np_lagged_sums, (_vec(rng, n),))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("k", (-7, -1, 0, 1, 2, 9))
def test_index_parameter_counts_including_negative(n, k, rng):
    _all_agree(triangular.counted_by_index, triangular.np_counted_by_index, (_vec(rng, n), k))


@fs.kernel
def count_down(k: Index) -> Double:
    return ifold(lambda a, j: a + 1.0, 0.0, -k)


def test_negative_literal_and_negated_counts():
    for k in (-3, 0, 4):
        assert count_down(k) == count_down.reference(k) == max(-k, 0)


# ----------------------------------------------------------------------------- range analysis

def test_triangular_reads_need_no_check_in_the_loop():
    for kernel in (triangular.prefix_sums, triangular.lower_times, triangular.lagged_sums):
        body = _body(kernel)
        assert "for (int64_t j = 0; j < " in body, body
        assert not _checks(body), body


def test_lower_triangle_constraint_is_exact():
    (k,) = [k for k in stages(triangular.lower_times)[2].kernels.values() if k.name == "lower_times"]
    icf, x = (s for s in (size_symbol("icf_d0"), size_symbol("x_d0")))
    for d in range(0, 12):
        for length_ in range(0, d * (d + 1) // 2 + 3):
            ok = all(bool(c.cond.subs({icf: length_, x: d})) for c in k.constraints)
            assert ok == (d == 0 or length_ >= d * (d + 1) // 2), (d, length_, k.constraints)


@pytest.mark.parametrize("d", (1, 2, 5, 17))
def test_short_icf_raises_before_c_runs(d, rng):
    icf, x = _vec(rng, d * (d + 1) // 2 - 1), _vec(rng, d)
    with pytest.raises((ValueError, IndexError), match="icf"):
        triangular.lower_times(icf, x)
    with pytest.raises(IndexError):
        triangular.lower_times.reference(icf, x)


@fs.kernel
def pairs(v: Array[Double]) -> Array[Double]:
    return build(length(v), lambda i: ifold(lambda a, j: a + v[i + j], 0.0, i))


def test_a_triangular_read_past_the_end_is_a_size_constraint(rng):
    assert not _checks(_body(pairs))
    v = _vec(rng, 2)  # i = 1, j = 0 reads v[1]: fine
    np.testing.assert_allclose(pairs(v), pairs.reference(v))
    for n in (3, 5):  # i = n - 1, j = n - 2 reads v[2n - 3]
        with pytest.raises((ValueError, IndexError), match="'v'"):
            pairs(_vec(rng, n))
        with pytest.raises(IndexError):
            pairs.reference(_vec(rng, n))


@fs.kernel
def bumpy(v: Array[Double]) -> Array[Double]:
    return build(length(v), lambda i: ifold(lambda a, j: a + v[(j - 2) * (j - 2)], 0.0, i))


def test_a_non_monotone_index_keeps_its_run_time_check(rng):
    assert _checks(_body(bumpy))
    for n in (0, 1, 5, 6):  # j ≤ n - 2 reads v[4] (j = 0) and v[(n-4)²]: in range for these n only
        v = _vec(rng, n)
        np.testing.assert_allclose(bumpy(v), bumpy.reference(v))
    for n in (2, 3, 4, 7):
        with pytest.raises(IndexError):
            bumpy(_vec(rng, n))
        with pytest.raises(IndexError):
            bumpy.reference(_vec(rng, n))


def test_nested_ranges_of_the_bounds_analysis():
    n, i, j = size_symbol("n"), size_symbol("i"), size_symbol("j")
    ranges, counts = tighten(Ranges().inside(i, n - 1).inside(j, i - 1))
    assert ranges.loops[0] == (i, 1, n - 1) and counts == (n - 1,)  # the inner loop runs for i ≥ 1
    ranges5, counts5 = tighten(Ranges().inside(i, n - 1).inside(j, i - 6))
    assert ranges5.loops[0] == (i, 6, n - 1) and counts5 == (n - 6,)
    index = n + sympy.floor(j * (2 * n - j - 1) / 2) + (i - j - 1)
    extent = bounds(index, ranges)
    assert extent.exact and all(extent.hi.subs(n, v) == v * (v + 1) // 2 - 1 for v in range(2, 40))
    assert extent.lo == n
    assert bounds((j - 2) ** 2, ranges) is None  # not monotone in j, not affine: no bound


def test_dpia_ranges_bound_a_loop_bound_of_an_enclosing_variable():
    n = sympy.Symbol("n", integer=True, nonnegative=True)
    i, j = sympy.symbols("i j", integer=True)
    ranges = Ranges().inside(i, n - 1).inside(j, i - 1)
    assert in_range(j, n, ranges) and in_range(i - 1 - j, n, ranges)
    assert in_range(i + j, 2 * n - 2, ranges) and not in_range(i + j, 2 * n - 3, ranges)


# ----------------------------------------------------------------------------- OpenCL

@pytest.mark.parametrize("kernel, make", [
    (triangular.prefix_sums, lambda rng, n: (_vec(rng, n),)),
    (triangular.lower_times, lambda rng, n: (_vec(rng, n * (n + 1) // 2), _vec(rng, n))),
    (triangular.counted_by_index, lambda rng, n: (_vec(rng, n), n - 4)),
])
def test_through_opencl(opencl_context, kernel, make, rng):
    for n in (0, 1, 2, 5, 17):
        args = make(rng, n)
        if n == 0 and kernel is triangular.counted_by_index:
            continue
        np.testing.assert_allclose(kernel.opencl(*args, context=opencl_context), kernel.reference(*args), **DOUBLE)


@fs.kernel
def prefix_sums_workgroups(m: Array[Array[Double]]) -> Array[Array[Double]]:
    return fs.build_workgroup(length(m), lambda r: fs.build_local(
        length(m[0]), lambda i: ifold(lambda a, j: a + m[r][j], 0.0, i)))


def test_index_counted_fold_inside_a_local_build(opencl_context, rng):
    for rows, cols in ((1, 1), (3, 5), (4, 33)):
        m = rng.uniform(-1, 1, (rows, cols))
        expected = np.concatenate([np.zeros((rows, 1)), np.cumsum(m, axis=1)[:, :-1]], axis=1)
        np.testing.assert_allclose(prefix_sums_workgroups.reference(m), expected, **DOUBLE)
        np.testing.assert_allclose(prefix_sums_workgroups(m), expected, **DOUBLE)
        np.testing.assert_allclose(prefix_sums_workgroups.opencl(m, context=opencl_context), expected, **DOUBLE)
