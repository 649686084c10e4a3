"""Parallel reductions (``fsmooth.dps.reductions``, ``fsmooth.dps.parallel``): which ifolds are
reductions; with ``parallel=True`` an outermost one runs on threads, each folding a contiguous
chunk from the identity into a partial, the partials combined with the init in thread order;
results equal the reference and numpy at sizes 0, 1, 63, 64, 65 and 10000, on 1, 2 and 3
threads; every element is computed once in all; a failing read fails the call as in a parallel
build; the C is clean under the sanitizers."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fsmooth as fs
from corpus import adbench_gmm
from fsmooth import Array, Double, Index, ifold, length
from fsmooth.core import Var
from fsmooth.driver import compile_to_c, run_pipeline
from fsmooth.dps import ir
from fsmooth.dps.interp import run_kernel
from fsmooth.dps.reductions import Monoid, reduction
from fsmooth.dps.terms import names_used
from fsmooth.options import Options
from test_adbench_corpus import gmm_args
from test_codegen_c import ASAN, Runner, run_under_address_sanitizer
from test_corpus import CASES, _module_of, arguments, assert_close, outcome, with_rows_of

PARALLEL = Options(parallel=True)
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


@fs.kernel
def total(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + fs.exp(v[i]), 0.0, length(v))


@fs.kernel
def product(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: v[i] * acc, 1.0, length(v))


@fs.kernel
def smallest(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: min(acc, v[i]), 1e300, length(v))


@fs.kernel
def largest(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: max(acc, v[i]), -1e300, length(v))


@fs.kernel
def largest_and_sum(v: Array[Double]) -> tuple[Double, Double]:
    return ifold(lambda acc, i: (max(acc[0], v[i]), acc[1] + v[i] * v[i]), (-1e300, 0.0), length(v))


@fs.kernel
def largest_index(ix: Array[Index]) -> Index:
    return ifold(lambda acc, i: max(ix[i], acc), -5, length(ix))


@fs.kernel
def index_sum(ix: Array[Index]) -> Index:
    return ifold(lambda acc, i: acc + ix[i], 0, length(ix))


@fs.kernel
def horner(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc * 2.0 + v[i], 0.0, length(v))


@fs.kernel
def reads_acc_twice(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + acc * v[i], 1.0, length(v))


@fs.kernel
def element_first_max(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: max(v[i], acc), -1e300, length(v))


@fs.kernel
def swapped(v: Array[Double]) -> tuple[Double, Double]:
    return ifold(lambda acc, i: (acc[1] + v[i], acc[0] + v[i]), (0.0, 0.0), length(v))


@fs.kernel
def gathered_sum(v: Array[Double], ix: Array[Index]) -> Double:
    return ifold(lambda acc, i: acc + v[ix[i]], 0.0, length(ix))


@fs.kernel
def wrapped_sum(v: Array[Double], w: Array[Double]) -> Double:
    """A trip count that is an expression (v's length plus w's), read modulo v's length."""
    return ifold(lambda acc, i: acc + v[i % length(v)], 0.0, length(v) + length(w))


def _ifold(kernel, options=Options()) -> ir.Ifold:
    """The one ifold of ``kernel``'s DPS, before it is marked parallel."""
    dps = run_pipeline(kernel.program(), options).dps
    (fold,) = [t for t in ir.walk(dps.kernels[dps.entry].body) if isinstance(t, ir.Ifold)]
    return fold


# ----------------------------------------------------------------------------- the analysis

@pytest.mark.parametrize("kernel, monoids", [
    (total, [Monoid("add", Double, -0.0)]),
    (product, [Monoid("mul", Double, 1.0)]),
    (smallest, [Monoid("min", Double, float("inf"))]),
    (largest, [Monoid("max", Double, float("-inf"))]),
    (largest_and_sum, [Monoid("max", Double, float("-inf")), Monoid("add", Double, -0.0)]),
    (largest_index, [Monoid("max", Index, INT64_MIN)]),
    (index_sum, [Monoid("add", Index, 0)]),
])
def test_reductions_are_recognised(kernel, monoids):
    fold = _ifold(kernel)
    found = reduction(fold)
    assert found is not None and list(found.monoids) == monoids
    assert found.init == fold.init and found.index == fold.index
    # the element function: the body without the state
    assert fold.state not in names_used(found.element) and fold.index in names_used(found.element)
    assert [m.may_overflow for m in found.monoids] == [kernel is index_sum] * len(monoids)


def test_the_element_function_is_the_body_without_the_state():
    """For total, the element is exp(v[i]): the body's lets, ending in the exp, not the sum."""
    found = reduction(_ifold(total))
    lets = [t for t in ir.walk(found.element) if isinstance(t, ir.Let)]
    assert [t.rhs.op for t in lets if isinstance(t.rhs, ir.Prim)] == ["exp"]
    assert isinstance(found.element, ir.Let) and found.element.body.body == ir.Atom_(Var(lets[-1].name, Double))
    pair = reduction(_ifold(largest_and_sum)).element
    assert not any(isinstance(t, ir.Proj) for t in ir.walk(pair))
    assert [t.rhs.op for t in ir.walk(pair) if isinstance(t, ir.Let) and isinstance(t.rhs, ir.Prim)] == ["mul"]


@pytest.mark.parametrize("kernel", [horner, reads_acc_twice, element_first_max, swapped])
def test_non_reductions_are_not(kernel):
    """acc * 2 + v[i] (not acc ⊕ f(i)); acc read twice; max(v[i], acc) on Double (not associative
    once a NaN occurs); components that read each other's state."""
    assert reduction(_ifold(kernel)) is None


def test_max_with_the_element_first_is_not_associative_with_nan():
    """Why ``max(v[i], acc)`` is refused on Double: regrouped, it gives another result."""
    def fold(values, start=-np.inf):
        for x in values:
            start = start if start > x else x  # max(x, acc): acc only where acc > x
        return start
    values = [3.0, np.nan, 1.0]
    assert fold(values) == 1.0 and fold([fold(values[:1]), fold(values[1:])]) == 3.0


# ----------------------------------------------------------------------------- which folds run on threads

def _body(source: str, kernel) -> str:
    return re.search(rf"static int \w+_{kernel.name}_body\([^;{{]*\) {{\n.*?\n}}\n", source, re.S).group(0)


@pytest.mark.parametrize("kernel, parallel", [
    (total, True), (product, True), (smallest, True), (largest, True), (largest_and_sum, True),
    (largest_index, True), (gathered_sum, True),
    (index_sum, False),  # a regrouped int64 sum may overflow where the sequential one does not
    (horner, False), (reads_acc_twice, False), (element_first_max, False), (swapped, False),
])
def test_the_c_has_a_parallel_region_only_for_a_reduction(kernel, parallel):
    body = _body(compile_to_c(kernel.program(), PARALLEL).source, kernel)
    assert ("#pragma omp parallel num_threads(nthreads)" in body) == parallel
    assert "reduction(" not in body  # OpenMP's combination order is unspecified
    assert "omp" not in _body(compile_to_c(kernel.program()).source, kernel)


@pytest.mark.parametrize("jammed", [False, True])
def test_gmm_sums_its_points_on_threads(jammed):
    """Unjammed, each point's terms are a call of main_terms, which runs on its caller's thread;
    jammed (Options.jam_reductions), main_terms is inlined and each thread's points run 4 at a
    time, from the first of its chunk (tests/test_jam_reductions.py)."""
    source = compile_to_c(adbench_gmm.gmm_full_objective.program(), Options(parallel=True, jam_reductions=jammed)).source
    objective = _body(source, adbench_gmm.gmm_full_objective)
    fold = objective[objective.index("double acc_1;"):objective.index("slse = acc_1;")]
    trips = re.search(r"#pragma omp parallel num_threads\(nthreads\) if\((fs_trips_\d+) > 1\)", fold).group(1)
    assert f"const int64_t {trips} = x_d0;" in fold  # over the points
    if jammed:
        assert "main_terms" not in fold and re.search(r"fs_shift_floor_i64\(fs_length_\d+, 2\)", fold)
    else:
        assert "adbench_gmm_main_terms_body(" in fold and "omp" not in _body(source, adbench_gmm.main_terms)


# ----------------------------------------------------------------------------- results

def _inputs(kernel, n: int) -> tuple:
    rng = np.random.default_rng(n)
    if kernel is product:
        return (1.0 + 1e-3 * rng.standard_normal(n),)
    if kernel is largest_index:
        return (rng.integers(-10 ** 12, 10 ** 12, n),)
    return (rng.standard_normal(n),)


ORACLES = {
    total: lambda v: np.sum(np.exp(v)),
    product: lambda v: np.prod(v),
    smallest: lambda v: min(1e300, np.min(v, initial=np.inf)),
    largest: lambda v: max(-1e300, np.max(v, initial=-np.inf)),
    largest_and_sum: lambda v: (max(-1e300, np.max(v, initial=-np.inf)), np.sum(v * v)),
    largest_index: lambda ix: max(-5, int(np.max(ix, initial=INT64_MIN))),
}
SIZES = (0, 1, 63, 64, 65, 10_000)


@pytest.mark.parametrize("kernel", list(ORACLES), ids=lambda k: k.name)
@pytest.mark.parametrize("n", SIZES)
def test_parallel_reduction_equals_reference_and_numpy(kernel, n):
    args = _inputs(kernel, n)
    got, expected = kernel.with_options(parallel=True)(*args), kernel.reference(*args)
    exact = kernel in (smallest, largest, largest_index)  # min and max regrouped give the same bits
    rtol = 0 if exact else 1e-12
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=0)
    np.testing.assert_allclose(got, ORACLES[kernel](*args), rtol=rtol, atol=0)


def test_a_trip_count_that_is_an_expression():
    rng = np.random.default_rng(3)
    for n, m in ((1, 0), (1, 1), (5, 60), (70, 3)):
        v, w = rng.standard_normal(n), np.zeros(m)
        got = wrapped_sum.with_options(parallel=True)(v, w)
        np.testing.assert_allclose(got, wrapped_sum.reference(v, w), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(got, np.sum(v[np.arange(n + m) % n]), rtol=1e-12, atol=1e-15)


def test_max_and_min_keep_nan_and_signed_zeros_as_the_sequential_fold():
    """max(acc, x) takes x only where x > acc: a NaN element is never taken, of equal zeros the
    first stays.  Regrouped from -inf, the same bits, at every split."""
    v = np.array([np.nan, -0.0, 0.0, np.nan, -3.0] * 30)
    for kernel in (largest, smallest):
        got, expected = kernel.with_options(parallel=True)(v), kernel.reference(v)
        assert np.signbit(got) == np.signbit(expected) and got == expected
    assert np.isnan(largest_and_sum.with_options(parallel=True)(np.full(100, np.nan))[1])


@pytest.mark.parametrize("kernel", [total, product, largest, smallest, largest_and_sum, largest_index],
                         ids=lambda k: k.name)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_dps_interpreter_at_1_2_3_threads(kernel, threads):
    """The DPS interpreter runs a parallel reduction as the C does (static chunks, partials in
    thread order) and checks that no arena byte is shared by concurrent threads."""
    program = run_pipeline(kernel.program(), PARALLEL).dps
    for n in (0, 1, 65, 200):
        args = _inputs(kernel, n)
        got = run_kernel(program, program.entry, list(args), threads=threads).result
        np.testing.assert_allclose(got, kernel.reference(*args), rtol=1e-12, atol=0)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_the_thread_count_of_the_c(tmp_path, n_threads):
    """Built with -fsanitize=undefined (address too under ASAN), called by the ABI with 1, 2 and
    3 threads: the reference within rounding; min and max exactly."""
    for kernel, rtol in ((total, 1e-12), (product, 1e-12), (largest, 0), (smallest, 0), (gathered_sum, 1e-12)):
        (tmp_path / kernel.name).mkdir()
        run = Runner(compile_to_c(kernel.program(), PARALLEL), tmp_path / kernel.name, kernel.name)
        for n in SIZES:
            args = _inputs(kernel, n) if kernel is not gathered_sum else \
                (np.random.default_rng(n).standard_normal(n), np.arange(n)[::-1].copy())
            np.testing.assert_allclose(run(*args, n_threads), kernel.reference(*args), rtol=rtol, atol=0)
        if kernel is gathered_sum:  # a read out of range in the last thread's chunk: status 1
            assert run(np.ones(100), np.r_[np.arange(99), 100], n_threads) == ("status", 1)


def test_each_element_is_computed_once_in_all():
    """Across the threads every iteration runs once: the interpreter counts n exps and n trips at
    every thread count, and a sum of ones on the C's threads is n exactly."""
    program = run_pipeline(total.program(), PARALLEL).dps
    for threads in (1, 2, 3, 8):
        for n in (0, 1, 63, 64, 65, 1000):
            work = run_kernel(program, program.entry, [np.zeros(n)], threads=threads).work
            assert work["exp"] == work["ifold trip"] == n
            assert work["add"] == n  # the partials' combination is no element's
    ones = gathered_sum.with_options(parallel=True)
    for n in SIZES:
        assert ones(np.ones(n), np.arange(n)) == float(n)


def test_a_failing_read_fails_the_call_as_in_a_parallel_build():
    """A read out of range in any thread's chunk is an IndexError, the parallel call's as the
    sequential one's, and a later call runs normally."""
    v = np.arange(1000.0)
    parallel = gathered_sum.with_options(parallel=True)
    for bad in (0, 499, 500, 999):
        ix = np.arange(1000)
        ix[bad] = 1000
        with pytest.raises(IndexError) as sequential_error:
            gathered_sum(v, ix)
        with pytest.raises(IndexError) as parallel_error:
            parallel(v, ix)
        assert str(parallel_error.value) == str(sequential_error.value)
    assert parallel(v, np.arange(1000)) == gathered_sum.reference(v, np.arange(1000))


def test_an_index_sum_stays_sequential_and_overflows_as_the_reference():
    ix = np.array([INT64_MAX, 1, -1] * 30)
    with pytest.raises(OverflowError):
        index_sum.reference(ix)
    with pytest.raises(OverflowError):
        index_sum.with_options(parallel=True)(ix)


def test_the_scratch_is_one_cache_line_of_partials_per_thread():
    """total has no other scratch: its partials, one cache line a thread (the last one 16 bytes)."""
    interface = compile_to_c(total.program(), PARALLEL).interfaces["total"]
    symbol = {s.name: s for s in interface.scratch_formula.free_symbols}
    for n_threads in (1, 2, 8):
        assert interface.scratch_formula.subs(symbol["nthreads"], n_threads) == 64 * (n_threads - 1) + 16


def test_the_malloc_variant():
    """Regions from the heap, the partials too."""
    v = np.random.default_rng(7).standard_normal(500)
    kernel = largest_and_sum.with_options(parallel=True, allocation="malloc")
    assert "#pragma omp parallel num_threads" in compile_to_c(largest_and_sum.program(), kernel.options).source
    np.testing.assert_allclose(kernel(v), largest_and_sum.reference(v), rtol=1e-12)


def test_gmm_parallel_and_sequential_agree():
    args = gmm_args(np.random.default_rng(11), (1000, 4, 5))
    sequential = adbench_gmm.gmm_full_objective(*args)
    parallel = adbench_gmm.gmm_full_objective.with_options(parallel=True)(*args)
    np.testing.assert_allclose(parallel, sequential, rtol=1e-9, atol=0)
    np.testing.assert_allclose(parallel, adbench_gmm.np_gmm_full_objective(*args), rtol=1e-9, atol=0)


# the corpus modules whose C with parallel=True has a parallel reduction
REDUCING = ("gmm", "linalg", "loop_work", "ml", "tuples")
CORPUS = [pytest.param(case, variant, id=f"{case.kernel.name}-{variant}")
          for case in CASES if _module_of(case.kernel).__name__.split(".")[-1] in REDUCING
          for variant in case.variants]


@pytest.mark.parametrize("case, variant", CORPUS)
def test_the_corpus_with_parallel_reductions_matches_the_reference(case, variant):
    """tuples.py's folds over tuple states (argmax, Welford, online softmax), the corpus's sums,
    maxima and norms, with parallel=True: the reference within rounding, or its error."""
    args = arguments(case, variant)
    reference = outcome(case.kernel.reference, args)
    kernel = case.kernel.with_options(parallel=True)
    if reference[0] == "error":
        with pytest.raises((ValueError, IndexError) if reference[1] is IndexError else reference[1]):
            kernel(*args)
        return
    got = kernel(*args)
    assert_close(got, with_rows_of(reference[1], got), **case.tol)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "thread_count_of_the_c")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "passed" in result.stdout
