"""Checked arenas: the measured high-water mark of every corpus kernel, at many sizes, is its
computed ``scratch_bytes`` (up to the alignment padding of the last region), and a kernel that
writes past its scratch is caught loudly."""
from __future__ import annotations

import numpy as np
import pytest
from sympy import sympify as S

import fsmooth as fs
from corpus import ba, gmm, iterate, scan_filter, triangular
from fsmooth.cost_model import JAM
from fsmooth.dps.ir import ALIGN
from fsmooth import runtime
from fsmooth.artifact import CArtifact, KernelInterface, SizeSource
from fsmooth.types import Array, Card, Double
from test_corpus import CASES, MATRIX_SIZES, VECTOR_SIZES, arguments, assert_close, with_rows_of

MORE_SIZES = {VECTOR_SIZES: (3, 8, 31, 100), MATRIX_SIZES: ((2, 9), (8, 3), (16, 16))}


def _partly_written(case, args) -> str | None:
    """Why this call legitimately writes less than the peak over all paths, or None."""
    if case.kernel is ba.rodrigues_rotate_point and not np.any(args[0]):
        return "the zero-angle branch needs no intermediate"
    if case.kernel is iterate.jacobi and args[1] == 0:
        return "no step runs, so the second state buffer is never written"
    if case.kernel is triangular.counted_by_index and args[1] - 1 < 1:
        return "no step runs (a count < 1), so the second state buffer is never written"
    if case.kernel is gmm.gmm_objective and len(args[3]) < JAM:
        return "fewer points than a jammed block (Options.jam_reductions): the block's own terms are never written"
    if case.kernel is scan_filter.inlier_count_and_mean and np.any(np.abs(args[0]) >= args[1]):
        return "a stored filter reserves its capacity and writes up to one past its kept elements"
    return None


PARAMS = [pytest.param(case, variant, id=f"{case.kernel.name}-{i}-{variant}")
          for i, case in enumerate(CASES) for variant in case.variants + MORE_SIZES.get(case.variants, ())]


@pytest.mark.parametrize("case, variant", PARAMS)
def test_measured_high_water_is_the_computed_scratch(case, variant):
    checked = case.kernel.with_options(check_arena=True)
    args = arguments(case, variant)
    got = checked(*args)
    assert_close(got, with_rows_of(case.kernel.reference(*args), got), **case.tol)
    measured, computed = runtime.last_high_water(checked), checked.scratch_bytes(*args)
    assert measured <= computed
    if _partly_written(case, args) is None:
        assert -(-measured // ALIGN) * ALIGN == computed, (measured, computed)


def test_environment_variable_turns_checks_on(monkeypatch):
    monkeypatch.setenv("FSMOOTH_CHECK_ARENA", "1")
    assert fs.kernel(first).options.check_arena
    monkeypatch.setenv("FSMOOTH_CHECK_ARENA", "0")
    assert not fs.kernel(first).options.check_arena


def first(v: Array[Double]) -> Double:
    return v[0]


# A kernel that stages its input through the scratch: scratch_bytes says 8·n, it writes 8·(n + k).
OVERRUN_SOURCE = r"""
#include <stdint.h>
int stage(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0, int64_t k) {
    double *tmp = (double *)scratch;
    for (int64_t i = 0; i < a_d0 + k; i++) tmp[i] = 1.0;
    for (int64_t i = 0; i < a_d0; i++) out[i] = a[i] + tmp[i];
    return 0;
}
void stage_shape(int64_t *dims_out, int64_t a_d0, int64_t k) { (void)k; dims_out[0] = a_d0; }
int64_t stage_scratch_bytes(int64_t a_d0, int64_t k) { (void)k; return 8 * a_d0; }
int stage_check_sizes(int64_t a_d0, int64_t k) { (void)a_d0; (void)k; return 0; }
"""
OVERRUN_CDEF = """
int stage(void *restrict scratch, double *restrict out, const double *restrict a, int64_t a_d0, int64_t k);
void stage_shape(int64_t *dims_out, int64_t a_d0, int64_t k);
int64_t stage_scratch_bytes(int64_t a_d0, int64_t k);
int stage_check_sizes(int64_t a_d0, int64_t k);
"""
STAGE = KernelInterface("stage", "stage", (("a", Array[Double]), ("k", Card)), Array[Double],
                        (SizeSource("a_d0", "a", 0), SizeSource("k", "k", None)), (), S("8*a_d0"), (S("a_d0"),))


@pytest.fixture(scope="module")
def stage():
    library = runtime.load_library(CArtifact(OVERRUN_SOURCE, OVERRUN_CDEF, {"stage": STAGE}))
    return runtime.Executable(STAGE, library, check_arena=True)


def test_a_kernel_within_its_scratch_reports_its_high_water(stage):
    np.testing.assert_array_equal(stage(np.arange(5.0), 0), np.arange(5.0) + 1.0)
    assert stage.last_high_water == runtime.last_high_water(stage) == 40


@pytest.mark.parametrize("k", [1, 20])  # within the guard bytes: a checked run writes nothing else
def test_an_overrun_is_loud(stage, k):
    with pytest.raises(RuntimeError, match="arena overrun: wrote byte 40 of a scratch arena of 40 bytes"):
        stage(np.arange(5.0), k)


def test_unchecked_calls_measure_nothing(stage):
    library = runtime.load_library(CArtifact(OVERRUN_SOURCE, OVERRUN_CDEF, {"stage": STAGE}))
    unchecked = runtime.Executable(STAGE, library)
    unchecked(np.arange(5.0), 0)
    assert unchecked.last_high_water is None
