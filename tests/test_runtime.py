"""The cffi runtime against hand-written C that follows the ABI of ``fsmooth.artifact``."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import timeit

import numpy as np
import pytest
from sympy import sympify as S

from fsmooth import cache, runtime
from fsmooth.artifact import CArtifact, Constraint, KernelInterface, SizeSource
from fsmooth.types import Array, Bool, Card, Double, Float, Index

REPO = pathlib.Path(__file__).resolve().parent.parent

SOURCE = r"""
#include <stdint.h>
#include <stdbool.h>

/* vadd(a, b) = a + b, staged through the scratch arena; b may be longer than a. */
int vadd(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0,
         const double *restrict b, int64_t b_d0) {
    (void)b_d0;
    if ((uintptr_t)scratch % 64 != 0) return 3;
    double *tmp = (double *)scratch;
    for (int64_t i = 0; i < a_d0; i++) tmp[i] = a[i];
    for (int64_t i = 0; i < a_d0; i++) out[i] = tmp[i] + b[i];
    return 0;
}
void vadd_shape(int64_t *dims_out, int64_t a_d0, int64_t b_d0) { (void)b_d0; dims_out[0] = a_d0; }
int64_t vadd_scratch_bytes(int64_t a_d0, int64_t b_d0) { (void)b_d0; return 8 * a_d0; }
int vadd_check_sizes(int64_t a_d0, int64_t b_d0) { return b_d0 >= a_d0 ? 0 : 1; }

/* scaled_transpose(m, s)[j][i] = s * m[i][j] */
int scaled_transpose(void *restrict scratch, double *restrict out, const double *restrict m,
                     int64_t m_d0, int64_t m_d1, double s) {
    (void)scratch;
    for (int64_t i = 0; i < m_d0; i++)
        for (int64_t j = 0; j < m_d1; j++) out[j * m_d0 + i] = s * m[i * m_d1 + j];
    return 0;
}
void scaled_transpose_shape(int64_t *dims_out, int64_t m_d0, int64_t m_d1) {
    dims_out[0] = m_d1; dims_out[1] = m_d0;
}
int64_t scaled_transpose_scratch_bytes(int64_t m_d0, int64_t m_d1) { (void)m_d0; (void)m_d1; return 0; }
int scaled_transpose_check_sizes(int64_t m_d0, int64_t m_d1) { (void)m_d0; (void)m_d1; return 0; }

/* dot(a, b): a scalar result; needs len b == len a. */
int dot(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0,
        const double *restrict b, int64_t b_d0) {
    (void)scratch; (void)b_d0;
    double acc = 0.0;
    for (int64_t i = 0; i < a_d0; i++) acc += a[i] * b[i];
    *out = acc;
    return 0;
}
void dot_shape(int64_t *dims_out, int64_t a_d0, int64_t b_d0) { (void)dims_out; (void)a_d0; (void)b_d0; }
int64_t dot_scratch_bytes(int64_t a_d0, int64_t b_d0) { (void)a_d0; (void)b_d0; return 0; }
int dot_check_sizes(int64_t a_d0, int64_t b_d0) {
    if (!(b_d0 >= a_d0)) return 1;
    if (!(b_d0 <= a_d0)) return 2;
    return 0;
}

/* iota(n, start) = [start, start + 1, ..., start + n - 1]: a size from a Card parameter. */
int iota(void *restrict scratch, int64_t *restrict out, int64_t n, int64_t start) {
    (void)scratch;
    for (int64_t i = 0; i < n; i++) out[i] = start + i;
    return 0;
}
void iota_shape(int64_t *dims_out, int64_t n) { dims_out[0] = n; }
int64_t iota_scratch_bytes(int64_t n) { (void)n; return 0; }
int iota_check_sizes(int64_t n) { (void)n; return 0; }

/* count(flags, value): how many flags equal value. */
int count(void *restrict scratch, int64_t *restrict out, const bool *restrict flags, int64_t flags_d0,
          bool value) {
    (void)scratch;
    int64_t n = 0;
    for (int64_t i = 0; i < flags_d0; i++) n += flags[i] == value;
    *out = n;
    return 0;
}
void count_shape(int64_t *dims_out, int64_t flags_d0) { (void)dims_out; (void)flags_d0; }
int64_t count_scratch_bytes(int64_t flags_d0) { (void)flags_d0; return 0; }
int count_check_sizes(int64_t flags_d0) { (void)flags_d0; return 0; }

/* gather(a, idx)[i] = a[idx[i]]: data-dependent reads, checked at the access (status 1). */
int gather(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0,
           const int64_t *restrict idx, int64_t idx_d0) {
    (void)scratch;
    for (int64_t i = 0; i < idx_d0; i++) {
        if (idx[i] < 0 || idx[i] >= a_d0) return 1;
        out[i] = a[idx[i]];
    }
    return 0;
}
void gather_shape(int64_t *dims_out, int64_t a_d0, int64_t idx_d0) { (void)a_d0; dims_out[0] = idx_d0; }
int64_t gather_scratch_bytes(int64_t a_d0, int64_t idx_d0) { (void)a_d0; (void)idx_d0; return 0; }
int gather_check_sizes(int64_t a_d0, int64_t idx_d0) { (void)a_d0; (void)idx_d0; return 0; }

/* quotient(x, y) = x // y (floor division), status 2 for y == 0. */
int quotient(void *restrict scratch, int64_t *restrict out, int64_t x, int64_t y) {
    (void)scratch;
    if (y == 0) return 2;
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) q -= 1;
    *out = q;
    return 0;
}
void quotient_shape(int64_t *dims_out) { (void)dims_out; }
int64_t quotient_scratch_bytes(void) { return 0; }
int quotient_check_sizes(void) { return 0; }

/* halve(a) = a / 2 in single precision; positive(a) = whether a[0] > 0 (needs length >= 1). */
int halve(void *restrict scratch, float *restrict out, const float *restrict a, int64_t a_d0) {
    (void)scratch;
    for (int64_t i = 0; i < a_d0; i++) out[i] = a[i] / 2.0f;
    return 0;
}
void halve_shape(int64_t *dims_out, int64_t a_d0) { dims_out[0] = a_d0; }
int64_t halve_scratch_bytes(int64_t a_d0) { (void)a_d0; return 0; }
int halve_check_sizes(int64_t a_d0) { (void)a_d0; return 0; }

int positive(void *restrict scratch, bool *restrict out, const double *restrict a, int64_t a_d0) {
    (void)scratch; (void)a_d0;
    *out = a[0] > 0.0;
    return 0;
}
void positive_shape(int64_t *dims_out, int64_t a_d0) { (void)dims_out; (void)a_d0; }
int64_t positive_scratch_bytes(int64_t a_d0) { (void)a_d0; return 0; }
int positive_check_sizes(int64_t a_d0) { return a_d0 >= 1 ? 0 : 1; }
"""

CDEF = """
int vadd(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0,
         const double *restrict b, int64_t b_d0);
void vadd_shape(int64_t *dims_out, int64_t a_d0, int64_t b_d0);
int64_t vadd_scratch_bytes(int64_t a_d0, int64_t b_d0);
int vadd_check_sizes(int64_t a_d0, int64_t b_d0);
int scaled_transpose(void *restrict scratch, double *restrict out, const double *restrict m,
                     int64_t m_d0, int64_t m_d1, double s);
void scaled_transpose_shape(int64_t *dims_out, int64_t m_d0, int64_t m_d1);
int64_t scaled_transpose_scratch_bytes(int64_t m_d0, int64_t m_d1);
int scaled_transpose_check_sizes(int64_t m_d0, int64_t m_d1);
int dot(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0,
        const double *restrict b, int64_t b_d0);
void dot_shape(int64_t *dims_out, int64_t a_d0, int64_t b_d0);
int64_t dot_scratch_bytes(int64_t a_d0, int64_t b_d0);
int dot_check_sizes(int64_t a_d0, int64_t b_d0);
int iota(void *restrict scratch, int64_t *restrict out, int64_t n, int64_t start);
void iota_shape(int64_t *dims_out, int64_t n);
int64_t iota_scratch_bytes(int64_t n);
int iota_check_sizes(int64_t n);
int count(void *restrict scratch, int64_t *restrict out, const bool *restrict flags, int64_t flags_d0,
          bool value);
void count_shape(int64_t *dims_out, int64_t flags_d0);
int64_t count_scratch_bytes(int64_t flags_d0);
int count_check_sizes(int64_t flags_d0);
int gather(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0,
           const int64_t *restrict idx, int64_t idx_d0);
void gather_shape(int64_t *dims_out, int64_t a_d0, int64_t idx_d0);
int64_t gather_scratch_bytes(int64_t a_d0, int64_t idx_d0);
int gather_check_sizes(int64_t a_d0, int64_t idx_d0);
int quotient(void *restrict scratch, int64_t *restrict out, int64_t x, int64_t y);
void quotient_shape(int64_t *dims_out);
int64_t quotient_scratch_bytes(void);
int quotient_check_sizes(void);
int halve(void *restrict scratch, float *restrict out, const float *restrict a, int64_t a_d0);
void halve_shape(int64_t *dims_out, int64_t a_d0);
int64_t halve_scratch_bytes(int64_t a_d0);
int halve_check_sizes(int64_t a_d0);
int positive(void *restrict scratch, bool *restrict out, const double *restrict a, int64_t a_d0);
void positive_shape(int64_t *dims_out, int64_t a_d0);
int64_t positive_scratch_bytes(int64_t a_d0);
int positive_check_sizes(int64_t a_d0);
"""

VEC = Array[Double]


def _dims(param: str, rank: int) -> tuple:
    return tuple(SizeSource(f"{param}_d{k}", param, k) for k in range(rank))


INTERFACES = {
    "vadd": KernelInterface(
        "vadd", "vadd", (("a", VEC), ("b", VEC)), VEC, _dims("a", 1) + _dims("b", 1),
        (Constraint(S("b_d0 >= a_d0"), "b", "b has length b_d0 but is read at indices up to a_d0 - 1"),),
        S("8*a_d0"), (S("a_d0"),)),
    "scaled_transpose": KernelInterface(
        "scaled_transpose", "scaled_transpose", (("m", Array[VEC]), ("s", Double)), Array[VEC], _dims("m", 2), (),
        S("0"), (S("m_d1"), S("m_d0"))),
    "dot": KernelInterface(
        "dot", "dot", (("a", VEC), ("b", VEC)), Double, _dims("a", 1) + _dims("b", 1),
        (Constraint(S("b_d0 >= a_d0"), "b", "b is shorter than a"),
         Constraint(S("b_d0 <= a_d0"), "a", "a is shorter than b")),
        S("0"), ()),
    "iota": KernelInterface(
        "iota", "iota", (("n", Card), ("start", Index)), Array[Index], (SizeSource("n", "n", None),), (),
        S("0"), (S("n"),)),
    "count": KernelInterface(
        "count", "count", (("flags", Array[Bool]), ("value", Bool)), Index, _dims("flags", 1), (), S("0"), ()),
    "gather": KernelInterface(
        "gather", "gather", (("a", VEC), ("idx", Array[Index])), VEC, _dims("a", 1) + _dims("idx", 1), (),
        S("0"), (S("idx_d0"),)),
    "quotient": KernelInterface("quotient", "quotient", (("x", Index), ("y", Index)), Index, (), (), S("0"), ()),
    "halve": KernelInterface(
        "halve", "halve", (("a", Array[Float]),), Array[Float], _dims("a", 1), (), S("0"), (S("a_d0"),)),
    "positive": KernelInterface(
        "positive", "positive", (("a", VEC),), Bool, _dims("a", 1),
        (Constraint(S("a_d0 >= 1"), "a", "a is read at index 0 but has length a_d0"),), S("0"), ()),
}

ARTIFACT = CArtifact(SOURCE, CDEF, INTERFACES)


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(cache.CACHE_DIR_ENV, str(tmp_path_factory.mktemp("fsmooth-cache")))
        yield


@pytest.fixture(scope="module")
def kernels(private_cache):
    library = runtime.load_library(ARTIFACT)
    return {name: runtime.Executable(iface, library) for name, iface in INTERFACES.items()}


# ----------------------------------------------------------------------------- results

def test_vector_add_uses_aligned_scratch(kernels):
    a, b = np.arange(5.0), np.linspace(0, 1, 5)
    np.testing.assert_array_equal(kernels["vadd"].call(a, b), a + b)
    assert kernels["vadd"].scratch_bytes(a, b) == 40


def test_longer_second_vector_is_allowed(kernels):
    np.testing.assert_array_equal(kernels["vadd"].call([1.0, 2.0], [10.0, 20.0, 30.0]), [11.0, 22.0])


def test_results_are_fresh_arrays(kernels):
    a = np.ones(3)
    first = kernels["vadd"].call(a, a)
    second = kernels["vadd"].call(a, 2 * a)
    assert first is not second and not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, [2.0, 2.0, 2.0])


def test_two_dimensional(kernels):
    m = np.arange(6.0).reshape(2, 3)
    out = kernels["scaled_transpose"].call(m, 2.0)
    assert out.shape == (3, 2) and out.dtype == np.float64 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, 2.0 * m.T)


def test_empty_arrays(kernels):
    np.testing.assert_array_equal(kernels["vadd"].call(np.empty(0), np.empty(0)), np.empty(0))
    assert kernels["scaled_transpose"].call(np.empty((0, 4)), 1.0).shape == (4, 0)
    assert kernels["dot"].call([], []) == 0.0


def test_scalar_results_are_python_scalars(kernels):
    value = kernels["dot"].call(np.arange(3.0), np.arange(3.0))
    assert type(value) is float and value == 5.0
    count = kernels["count"].call(np.array([True, False, True]), True)
    assert type(count) is int and count == 2
    flag = kernels["positive"].call([0.5])
    assert type(flag) is bool and flag is True
    assert kernels["positive"].call([-0.5]) is False


def test_card_parameter_gives_a_size(kernels):
    out = kernels["iota"].call(4, -2)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [-2, -1, 0, 1])
    assert kernels["iota"].call(np.int32(0), 5).shape == (0,)


def test_single_precision(kernels):
    out = kernels["halve"].call(np.array([1.0, 3.0], dtype=np.float32))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [0.5, 1.5])


# ----------------------------------------------------------------------------- conversions

def test_non_contiguous_inputs(kernels):
    a = np.arange(10.0)[::2]
    b = np.arange(10.0)[1::2]
    np.testing.assert_array_equal(kernels["vadd"].call(a, b), a + b)
    fortran = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(kernels["scaled_transpose"].call(fortran, 1.0), fortran.T)
    view = np.arange(24.0).reshape(4, 6)[::2, 1::2]
    np.testing.assert_array_equal(kernels["scaled_transpose"].call(view, -1.0), -view.T)


def test_integer_arrays_are_converted_not_reinterpreted(kernels):
    a = np.array([1, 2, 2 ** 40], dtype=np.int64)
    out = kernels["vadd"].call(a, np.array([0, 0, 1], dtype=np.int32))
    np.testing.assert_array_equal(out, [1.0, 2.0, 2.0 ** 40 + 1])
    assert kernels["dot"].call([1, 2], (3, 4)) == 11.0
    np.testing.assert_array_equal(kernels["halve"].call([1, 2]), [0.5, 1.0])


def test_index_arrays_accept_any_integer_dtype(kernels):
    a = np.array([10.0, 20.0, 30.0])
    for dtype in (np.int8, np.uint16, np.int32, np.uint64):
        np.testing.assert_array_equal(kernels["gather"].call(a, np.array([2, 0], dtype=dtype)), [30.0, 10.0])


def test_byte_swapped_input(kernels):
    a = np.arange(4.0).astype(">f8")
    np.testing.assert_array_equal(kernels["vadd"].call(a, a), 2 * np.arange(4.0))


@pytest.mark.parametrize("name, args, param", [
    ("gather", ([1.0], np.array([0.0])), "idx"),                      # floats for Index: lossy
    ("vadd", (np.array([True]), [1.0]), "a"),                          # bools for Double
    ("count", (np.array([1, 0]), True), "flags"),                      # ints for Bool
    ("vadd", (np.array([1 + 2j]), [1.0]), "a"),                         # complex for Double
    ("vadd", (np.array(["x"]), [1.0]), "a"),                            # strings
    ("vadd", ([[1.0, 2.0], [3.0]], [1.0]), "a"),                        # ragged
    ("vadd", ([[1.0]], [1.0]), "a"),                                    # rank 2 for rank 1
    ("vadd", ([1.0], 1.0), "b"),                                        # scalar for an array
    ("scaled_transpose", (np.arange(3.0), 1.0), "m"),                   # rank 1 for rank 2
    ("scaled_transpose", (np.ones((2, 2)), np.ones(1)), "s"),           # array for a scalar
    ("scaled_transpose", (np.ones((2, 2)), True), "s"),                 # bool for Double
    ("scaled_transpose", (np.ones((2, 2)), "1.0"), "s"),                # string for Double
    ("iota", (3.0, 0), "n"),                                            # float for Card
    ("iota", (3, np.float64(1.0)), "start"),                            # float for Index
    ("iota", (True, 0), "n"),                                           # bool for Card
    ("count", (np.array([True]), 1), "value"),                          # int for Bool
])
def test_type_errors_name_the_parameter(kernels, name, args, param):
    with pytest.raises(TypeError, match=f"'{param}'"):
        kernels[name].call(*args)


@pytest.mark.parametrize("name, args, param", [
    ("iota", (-1, 0), "n"),                         # negative Card
    ("iota", (2, 2 ** 63), "start"),                # outside int64
    ("gather", ([1.0], np.array([2 ** 63], dtype=np.uint64)), "idx"),
    ("scaled_transpose", (np.ones((1, 1)), 10 ** 400), "s"),
])
def test_value_errors_name_the_parameter(kernels, name, args, param):
    with pytest.raises(ValueError, match=f"'{param}'"):
        kernels[name].call(*args)


def test_numpy_scalars(kernels):
    out = kernels["scaled_transpose"].call(np.ones((1, 2)), np.float32(0.5))
    np.testing.assert_array_equal(out, [[0.5], [0.5]])
    np.testing.assert_array_equal(kernels["iota"].call(np.uint8(2), np.int64(7)), [7, 8])
    assert kernels["scaled_transpose"].call(np.ones((1, 1)), 3)[0, 0] == 3.0  # int for Double
    assert kernels["count"].call(np.array([False, False]), np.False_) == 2


def test_wrong_argument_count(kernels):
    with pytest.raises(TypeError, match="takes 2 arguments, got 1"):
        kernels["vadd"].call(np.ones(2))
    with pytest.raises(TypeError, match="got 3"):
        kernels["quotient"].call(1, 2, 3)


# ----------------------------------------------------------------------------- size and run-time checks

def test_size_constraint_names_parameter_and_sizes(kernels):
    with pytest.raises(ValueError, match=r"'b': b has length b_d0 .* a_d0=3, b_d0=2"):
        kernels["vadd"].call(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="'b'"):
        kernels["vadd"].scratch_bytes(np.ones(3), np.ones(2))


def test_constraint_numbering(kernels):
    with pytest.raises(ValueError, match="'b': b is shorter than a"):
        kernels["dot"].call(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="'a': a is shorter than b"):
        kernels["dot"].call(np.ones(2), np.ones(3))
    with pytest.raises(ValueError, match="'a'"):
        kernels["positive"].call(np.empty(0))


def test_status_codes_become_exceptions(kernels):
    with pytest.raises(IndexError, match="gather: index out of range"):
        kernels["gather"].call([1.0, 2.0], [0, 2])
    with pytest.raises(IndexError):
        kernels["gather"].call([1.0, 2.0], [-1])
    with pytest.raises(ZeroDivisionError, match="quotient"):
        kernels["quotient"].call(7, 0)
    assert kernels["quotient"].call(-7, 2) == -4


def test_scratch_bytes_and_result_dims_do_not_run(kernels):
    assert kernels["vadd"].scratch_bytes(np.ones(1000), np.ones(1000)) == 8000
    assert kernels["scaled_transpose"].result_dims(np.ones((2, 5)), 1.0) == (5, 2)
    # gather would fail at run time; asking for its sizes does not run it.
    assert kernels["gather"].scratch_bytes([1.0], [5]) == 0


def test_threads_use_separate_scratch(kernels):
    vadd = kernels["vadd"]
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for n in (10, 1000, 20000, 5):
            a, b = rng.standard_normal(n), rng.standard_normal(n)
            for _ in range(20):
                if not np.array_equal(vadd.call(a, b), a + b):
                    failures.append((seed, n))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_call_overhead(kernels):
    vadd, dot = kernels["vadd"], kernels["dot"]
    a = np.ones(4)
    n = 20000
    per_call_vadd = min(timeit.repeat(lambda: vadd.call(a, a), number=n, repeat=3)) / n
    per_call_dot = min(timeit.repeat(lambda: dot.call(a, a), number=n, repeat=3)) / n
    print(f"\ncall overhead: vadd (array result) {per_call_vadd * 1e6:.2f} us, "
          f"dot (scalar result) {per_call_dot * 1e6:.2f} us")
    assert per_call_vadd < 100e-6 and per_call_dot < 100e-6


# ----------------------------------------------------------------------------- the build cache

def test_library_is_loaded_once_per_process(kernels):
    before = cache.build_count
    # an equal artifact, not the same object: the interfaces are built in too (their entry points)
    assert runtime.load_library(ARTIFACT) is runtime.load_library(CArtifact(SOURCE, CDEF, dict(INTERFACES)))
    assert cache.build_count == before


def test_key_depends_on_everything_that_decides_the_code():
    key = cache.cache_key(SOURCE, CDEF)
    assert key == cache.cache_key(SOURCE, CDEF)
    assert key != cache.cache_key(SOURCE + "\n", CDEF)
    assert key != cache.cache_key(SOURCE, CDEF + "\n")
    assert key != cache.cache_key(SOURCE, CDEF, ("-fopenmp",))
    assert key != cache.cache_key(SOURCE, CDEF, (), ("gc",))


OPENMP_PROBE = r"""
#include <stdint.h>
#include <stdbool.h>
int built_with_openmp(void *restrict scratch, bool *restrict out) {
    (void)scratch;
#ifdef _OPENMP
    *out = true;
#else
    *out = false;
#endif
    return 0;
}
void built_with_openmp_shape(int64_t *dims_out) { (void)dims_out; }
int64_t built_with_openmp_scratch_bytes(void) { return 0; }
int built_with_openmp_check_sizes(void) { return 0; }
"""
OPENMP_PROBE_CDEF = """
int built_with_openmp(void *restrict scratch, bool *restrict out);
void built_with_openmp_shape(int64_t *dims_out);
int64_t built_with_openmp_scratch_bytes(void);
int built_with_openmp_check_sizes(void);
"""


def test_an_artifact_brings_its_own_flags_and_libraries():
    iface = KernelInterface("built_with_openmp", "built_with_openmp", (), Bool, (), (), S("0"), ())
    for flags, libraries, expected in (((), (), False), (("-fopenmp",), ("gomp",), True)):
        artifact = CArtifact(OPENMP_PROBE, OPENMP_PROBE_CDEF, {iface.name: iface}, flags, libraries)
        assert runtime.Executable(iface, runtime.load_library(artifact)).call() is expected


# A second process that loads and runs the `scale` kernel of SCALE_SOURCE, printing what it built.
_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from sympy import sympify as S
    from fsmooth import cache, runtime
    from fsmooth.artifact import CArtifact, KernelInterface, SizeSource
    from fsmooth.types import Array, Double
    spec = json.load(open(sys.argv[1]))
    iface = KernelInterface("scale", "scale", (("a", Array[Double]),), Array[Double],
                            (SizeSource("a_d0", "a", 0),), (), S("0"), (S("a_d0"),))
    exe = runtime.Executable(iface, runtime.load_library(CArtifact(spec["source"], spec["cdef"], {})))
    out = exe.call(np.arange(3.0))
    print(json.dumps({"builds": cache.build_count, "out": out.tolist(),
                      "module": exe._library.__file__}))
""")

SCALE_CDEF = """
int scale(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0);
void scale_shape(int64_t *dims_out, int64_t a_d0);
int64_t scale_scratch_bytes(int64_t a_d0);
int scale_check_sizes(int64_t a_d0);
"""


def _scale_source(factor: float) -> str:
    return textwrap.dedent(f"""
        #include <stdint.h>
        int scale(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0) {{
            (void)scratch;
            for (int64_t i = 0; i < a_d0; i++) out[i] = {factor!r} * a[i];
            return 0;
        }}
        void scale_shape(int64_t *dims_out, int64_t a_d0) {{ dims_out[0] = a_d0; }}
        int64_t scale_scratch_bytes(int64_t a_d0) {{ (void)a_d0; return 0; }}
        int scale_check_sizes(int64_t a_d0) {{ (void)a_d0; return 0; }}
    """)


def _run_child(tmp_path, cache_dir, factor):
    spec = tmp_path / f"spec-{factor}.json"
    spec.write_text(json.dumps({"source": _scale_source(factor), "cdef": SCALE_CDEF}))
    env = dict(os.environ, **{cache.CACHE_DIR_ENV: str(cache_dir)})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(spec)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _child_result(process) -> dict:
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


def test_second_process_builds_nothing(tmp_path):
    cache_dir = tmp_path / "cache"
    first = _child_result(_run_child(tmp_path, cache_dir, 2.0))
    assert first["builds"] == 1 and first["out"] == [0.0, 2.0, 4.0]
    module = pathlib.Path(first["module"])
    assert module.parent == cache_dir
    stamp = module.stat().st_mtime_ns
    second = _child_result(_run_child(tmp_path, cache_dir, 2.0))
    assert second == dict(first, builds=0)
    assert module.stat().st_mtime_ns == stamp
    other = _child_result(_run_child(tmp_path, cache_dir, 3.0))
    assert other["builds"] == 1 and other["out"] == [0.0, 3.0, 6.0] and other["module"] != first["module"]
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]  # no temporaries left


@pytest.mark.parametrize("damage", ["corrupt module", "truncated module", "missing manifest",
                                    "missing module", "garbage manifest"])
def test_damaged_entries_are_rebuilt(tmp_path, damage):
    cache_dir = tmp_path / "cache"
    first = _child_result(_run_child(tmp_path, cache_dir, 4.0))
    module = pathlib.Path(first["module"])
    manifest = module.parent / (module.name.split("-")[0] + ".json")
    assert manifest.is_file()
    match damage:
        case "corrupt module":
            data = bytearray(module.read_bytes())
            data[len(data) // 2] ^= 0xFF
            module.write_bytes(bytes(data))
        case "truncated module":
            module.write_bytes(module.read_bytes()[:1000])
        case "missing manifest":
            manifest.unlink()
        case "missing module":
            module.unlink()
        case "garbage manifest":
            manifest.write_text("{not json")
    again = _child_result(_run_child(tmp_path, cache_dir, 4.0))
    assert again["builds"] == 1 and again["out"] == [0.0, 4.0, 8.0]
    assert _child_result(_run_child(tmp_path, cache_dir, 4.0))["builds"] == 0


def test_concurrent_processes_share_one_entry(tmp_path):
    cache_dir = tmp_path / "cache"
    processes = [_run_child(tmp_path, cache_dir, 5.0) for _ in range(3)]
    results = [_child_result(p) for p in processes]
    assert all(r["out"] == [0.0, 5.0, 10.0] for r in results)
    last = _child_result(_run_child(tmp_path, cache_dir, 5.0))
    assert last["builds"] == 0 and last["module"] in {r["module"] for r in results}
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]


def test_c_that_does_not_compile_is_reported_with_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path))
    broken = CArtifact("int broken(void) { return undeclared_name; }\n", "int broken(void);", {})
    with pytest.raises(RuntimeError, match="did not compile") as info:
        runtime.load_library(broken)
    kept = pathlib.Path(str(info.value).split("its source is ")[-1])
    assert "undeclared_name" in kept.read_text()


# ----------------------------------------------------------------------------- real kernels, end to end

@pytest.fixture(scope="module")
def examples():
    from fsmooth import examples
    return examples


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_running_example_end_to_end(examples, n):
    rng = np.random.default_rng(n)
    vec1, vec2 = rng.standard_normal(n), rng.standard_normal(n)
    assert examples.f(vec1, vec2) == pytest.approx(np.linalg.norm(vec1 + vec2), rel=1e-12, abs=1e-300)
    assert examples.f(vec1, vec2) == pytest.approx(examples.f.reference(vec1, vec2), rel=1e-12)
    np.testing.assert_allclose(examples.vector_add(vec1, vec2), vec1 + vec2)
    assert examples.vector_dot(vec1, vec2) == pytest.approx(float(vec1 @ vec2), rel=1e-9, abs=1e-12)
    assert examples.f.scratch_bytes(vec1, vec2) == 0  # fused by default: no intermediate at all
    # Unfused (the DPS paper's D variant, on the arena), f keeps vector_add's result and
    # vector_emul's result on the arena, nothing else
    unfused = examples.f.with_options(fusion=False, inline_kernels=False, inline_lets=False,
                                      constant_folding=False, cse=False, dce=False)
    assert unfused(vec1, vec2) == pytest.approx(examples.f.reference(vec1, vec2), rel=1e-12)
    assert 16 * n <= unfused.scratch_bytes(vec1, vec2) <= 16 * n + 64
    assert examples.vector_add.scratch_bytes(vec1, vec2) == 0


def test_real_kernels_check_their_arguments(examples):
    with pytest.raises(ValueError, match="'v2'"):
        examples.vector_add(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="'vec2'"):
        examples.f(np.ones(3), np.ones(2))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        examples.vector_add(np.ones(3))
    with pytest.raises(TypeError, match="'v1'"):
        examples.vector_add(np.ones((2, 2)), np.ones(2))
    with pytest.raises(TypeError, match="'v'"):
        examples.vector_sum(np.array([True, False]))
    np.testing.assert_array_equal(examples.vector_add(np.arange(6)[::2], [1, 1, 1]), [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(examples.vector_add([1.0, 2.0], [1.0, 2.0, 3.0]), [2.0, 4.0])


def test_real_kernel_call_overhead(examples):
    vector_add, vector_sum = examples.vector_add, examples.vector_sum
    a = np.ones(4)
    vector_add(a, a)
    n = 20000
    per_add = min(timeit.repeat(lambda: vector_add(a, a), number=n, repeat=3)) / n
    per_sum = min(timeit.repeat(lambda: vector_sum(a), number=n, repeat=3)) / n
    print(f"\ncompiled kernel call: vector_add(4) {per_add * 1e6:.2f} us, vector_sum(4) {per_sum * 1e6:.2f} us")
    assert per_add < 100e-6 and per_sum < 100e-6
