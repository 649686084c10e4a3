"""Every exported kernel of ``tests/corpus``: its reference semantics against an independent
numpy version, and its compiled C against the reference, over several sizes (1 included)."""
from __future__ import annotations

import collections.abc
import typing
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import fsmooth as fs
from corpus import ba, ba_f32, gmm, image, iterate, linalg, loop_work, ml, scan_filter, triangular, tuples, vision
from fsmooth.types import ArrayT, NUMPY_DTYPE, TupleT, element_scalar

MODULES = (linalg, ba, ba_f32, gmm, image, ml, iterate, triangular, tuples, loop_work, scan_filter, vision)

# Room for another order of operations (numpy's pairwise sums and matrix forms, a C compiler's
# contractions), not for a wrong index or a wrong formula.
DOUBLE = dict(rtol=1e-9, atol=1e-12)
FLOAT = dict(rtol=2e-5, atol=1e-7)  # f32 code against a reference that partly rounds to f64


@dataclass(frozen=True)
class Case:
    kernel: fs.Kernel
    make_args: Callable  # (rng, variant) -> tuple of arguments
    variants: tuple  # sizes, or for fixed-size kernels a scale of the data
    single_precision: bool = False

    @property
    def oracle(self) -> Callable:
        return getattr(_module_of(self.kernel), f"np_{self.kernel.name}")

    @property
    def tol(self) -> dict:
        return FLOAT if self.single_precision else DOUBLE


def assert_close(got, expected, **tol):
    """``np.testing.assert_allclose``, component by component for a tuple result (whose
    components may differ in shape); every component's shape must match too."""
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected), (got, expected)
        for g, e in zip(got, expected):
            assert_close(g, e, **tol)
        return
    assert not isinstance(got, tuple), got
    assert np.shape(got) == np.shape(expected), (np.shape(got), np.shape(expected))
    np.testing.assert_allclose(got, expected, **tol)


def check_result_type(got, result_type) -> None:
    """A compiled result as the caller gets it: a numpy array of the element's dtype for an array,
    a Python scalar for a scalar, a Python tuple of these for a tuple."""
    if isinstance(result_type, TupleT):
        assert isinstance(got, tuple) and len(got) == len(result_type.items)
        for g, t in zip(got, result_type.items):
            check_result_type(g, t)
    elif isinstance(result_type, ArrayT):
        assert isinstance(got, np.ndarray)
        assert got.dtype == NUMPY_DTYPE[element_scalar(result_type)]
    else:
        assert isinstance(got, (int, float, bool)) and not isinstance(got, np.ndarray)


def _module_of(k: fs.Kernel):
    return next(m for m in MODULES if getattr(m, k.name, None) is k)


def vec(rng, n, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=n)


def mat(rng, rows, cols, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=(rows, cols))


def rotation(rng, angle):
    axis = rng.normal(size=3)
    return axis / np.linalg.norm(axis) * angle


def camera(rng, angle):
    # Points are drawn in front of the camera (see `point`), so the perspective division is safe.
    return np.concatenate([rotation(rng, angle), rng.uniform(-0.5, 0.5, 3), [rng.uniform(0.5, 2.0)],
                           rng.uniform(-0.2, 0.2, 2), rng.uniform(-0.1, 0.1, 2)])


def point(rng):
    return np.array([rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0), rng.uniform(4.0, 8.0)])


def reprojection_args(rng, sizes):
    cams, points, nobs = sizes
    obs = np.stack([rng.integers(0, cams, nobs), rng.integers(0, points, nobs)], axis=1)
    return (np.stack([camera(rng, 0.3) for _ in range(cams)]),
            np.stack([point(rng) for _ in range(points)]), rng.uniform(0.5, 1.5, nobs),
            obs.astype(np.int64), rng.uniform(-1.0, 1.0, (nobs, 2)))


def gmm_args(rng, sizes):
    n, k, d = sizes
    return vec(rng, k), mat(rng, k, d), mat(rng, k, d, -0.5, 0.5), mat(rng, n, d)


def f32s(*args):
    """The floating arrays of ``args`` in float32 (index arrays and scalars as they are)."""
    return tuple(a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args)


def eighths_f32(a):
    return (np.round(a * 8.0) / 8.0).astype(np.float32)


def slice_args(rng, n):
    start = int(rng.integers(0, n))
    return vec(rng, n), start, int(rng.integers(start, n))


VECTOR_SIZES = (1, 2, 5, 17)
MATRIX_SIZES = ((1, 1), (1, 4), (3, 1), (3, 5), (6, 7))
# a kernel that another case already runs through every size (a helper, a precision's twin): two
FEW_MATRIX_SIZES = ((1, 4), (6, 7))
# test_dps and test_optimize interpret each pass's output at a case's last size, where a loop nest
# is quadratic: 90 (60 for a fold quadratic without dps.in_place) keeps that to seconds
LOOP_SIZES = (0, 1, 17, 90)
QUADRATIC_LOOP_SIZES = (0, 1, 17, 60)
ANGLES = (0.0, 1e-3, 0.7, 3.0)  # 0 takes the zero-angle branch of Rodrigues' formula

CASES = [
    # linalg: the DPS paper's Fig. 3
    Case(linalg.vector_range, lambda rng, n: (n,), VECTOR_SIZES),
    Case(linalg.vector_add, lambda rng, n: (vec(rng, n), vec(rng, n)), VECTOR_SIZES),
    Case(linalg.vector_emul, lambda rng, n: (vec(rng, n), vec(rng, n)), VECTOR_SIZES),
    Case(linalg.vector_smul, lambda rng, n: (vec(rng, n), float(rng.normal())), VECTOR_SIZES),
    Case(linalg.vector_sum, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(linalg.vector_dot, lambda rng, n: (vec(rng, n), vec(rng, n)), VECTOR_SIZES),
    Case(linalg.vector_norm, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(linalg.vector_slice, slice_args, VECTOR_SIZES),
    Case(linalg.matrix_rows, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(linalg.matrix_cols, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(linalg.matrix_add, lambda rng, s: (mat(rng, *s), mat(rng, *s)), MATRIX_SIZES),
    Case(linalg.matrix_smul, lambda rng, s: (mat(rng, *s), float(rng.normal())), MATRIX_SIZES),
    Case(linalg.matrix_transpose, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(linalg.matrix_mul, lambda rng, s: (mat(rng, *s), mat(rng, s[1], s[0] + 2)), MATRIX_SIZES),
    Case(linalg.matrix_vector_mul, lambda rng, s: (mat(rng, *s), vec(rng, s[1])), MATRIX_SIZES),
    Case(linalg.vector_outer_prod, lambda rng, s: (vec(rng, s[0]), vec(rng, s[1])), MATRIX_SIZES),
    Case(linalg.f, lambda rng, n: (vec(rng, n), vec(rng, n)), VECTOR_SIZES),
    # ba: ADBench's bundle-adjustment projection
    Case(ba.dot3, lambda rng, a: (rotation(rng, a), point(rng)), ANGLES),
    Case(ba.cross3, lambda rng, a: (rotation(rng, a), point(rng)), ANGLES),
    Case(ba.rodrigues_rotate_point, lambda rng, a: (rotation(rng, a), point(rng)), ANGLES),
    Case(ba.radial_distort, lambda rng, a: (rng.uniform(-0.1, 0.1, 2), vec(rng, 2, -a, a)), ANGLES),
    Case(ba.project, lambda rng, a: (camera(rng, a), point(rng)), ANGLES),
    Case(ba.reprojection_error,
         lambda rng, a: (camera(rng, a), point(rng), float(rng.uniform(0.5, 1.5)), vec(rng, 2)),
         ANGLES),
    Case(ba.reprojection_errors, reprojection_args, ((1, 1, 1), (2, 3, 5), (3, 7, 11))),
    # ba_f32: the same in single precision (ADBench's BA objective, tuple result included)
    Case(ba_f32.dot3_f32, lambda rng, a: f32s(rotation(rng, a), point(rng)), ANGLES[::2], True),
    Case(ba_f32.cross3_f32, lambda rng, a: f32s(rotation(rng, a), point(rng)), ANGLES[::2], True),
    Case(ba_f32.rodrigues_rotate_point_f32, lambda rng, a: f32s(rotation(rng, a), point(rng)), ANGLES[::2], True),
    Case(ba_f32.project_f32, lambda rng, a: f32s(camera(rng, a), point(rng)), ANGLES[::2], True),
    Case(ba_f32.reprojection_error_f32,
         lambda rng, a: f32s(camera(rng, a), point(rng), float(rng.uniform(0.5, 1.5)), vec(rng, 2)), ANGLES, True),
    Case(ba_f32.ba_objective_f32, lambda rng, s: f32s(*reprojection_args(rng, s)), ((1, 1, 1), (2, 3, 5), (3, 7, 11)),
         True),
    # gmm: log-likelihood with logsumexp
    Case(gmm.array_sum, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(gmm.array_max, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(gmm.sqnorm, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    # 700 is beyond exp's range: only the max-subtracted form survives it
    Case(gmm.logsumexp, lambda rng, n: (vec(rng, n, 690.0, 710.0),), VECTOR_SIZES),
    Case(gmm.component_terms, lambda rng, s: gmm_args(rng, (1, *s))[:3] + (vec(rng, s[1]),),
         MATRIX_SIZES),
    Case(gmm.gmm_objective, gmm_args, ((1, 1, 1), (5, 3, 2), (9, 4, 3))),
    # image: blurs with clamped borders
    Case(image.clamp, lambda rng, n: (int(rng.integers(-3, n + 3)), n), VECTOR_SIZES),
    Case(image.pixel, lambda rng, s: (mat(rng, *s), int(rng.integers(-2, s[0] + 2)),
                                      int(rng.integers(-2, s[1] + 2))), MATRIX_SIZES),
    Case(image.box_blur3, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(image.blur_rows, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(image.blur_cols, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(image.gaussian_blur3, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    # ml
    Case(ml.vmax, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(ml.vsum, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(ml.softmax, lambda rng, n: (vec(rng, n, -50.0, 800.0),), VECTOR_SIZES),
    Case(ml.softmax_rows, lambda rng, s: (mat(rng, *s, -20.0, 20.0),), MATRIX_SIZES),
    Case(ml.dense_relu, lambda rng, s: (mat(rng, *s), vec(rng, s[0]), vec(rng, s[1])),
         MATRIX_SIZES),
    Case(ml.vmax_f32, lambda rng, n: (vec(rng, n).astype(np.float32),), VECTOR_SIZES, True),
    Case(ml.vsum_f32, lambda rng, n: (vec(rng, n, 0.0, 1.0).astype(np.float32),), VECTOR_SIZES,
         True),
    Case(ml.softmax_f32, lambda rng, n: (vec(rng, n, -20.0, 20.0).astype(np.float32),),
         VECTOR_SIZES, True),
    # vision: the GPU application benchmark's stencils, float64 and float32
    Case(vision.row_sum5, lambda rng, s: (mat(rng, *s), int(rng.integers(-2, s[0] + 2)),
                                          int(rng.integers(-2, s[1] + 2))), FEW_MATRIX_SIZES),
    Case(vision.box_blur5, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(vision.gaussian_blur5, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(vision.sobel_at, lambda rng, s: (mat(rng, *s), int(rng.integers(-2, s[0] + 2)),
                                          int(rng.integers(-2, s[1] + 2))), FEW_MATRIX_SIZES),
    Case(vision.sobel_magnitude, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(vision.pixel_f32, lambda rng, s: (mat(rng, *s).astype(np.float32), int(rng.integers(-2, s[0] + 2)),
                                           int(rng.integers(-2, s[1] + 2))), FEW_MATRIX_SIZES, True),
    Case(vision.row_sum3_f32, lambda rng, s: (mat(rng, *s).astype(np.float32), int(rng.integers(-2, s[0] + 2)),
                                              int(rng.integers(-2, s[1] + 2))), FEW_MATRIX_SIZES, True),
    Case(vision.row_sum5_f32, lambda rng, s: (mat(rng, *s).astype(np.float32), int(rng.integers(-2, s[0] + 2)),
                                              int(rng.integers(-2, s[1] + 2))), FEW_MATRIX_SIZES, True),
    *(Case(k, lambda rng, s: (mat(rng, *s).astype(np.float32),), FEW_MATRIX_SIZES, True)
      for k in (vision.box_blur3_f32, vision.box_blur5_f32, vision.gaussian_blur3_f32, vision.gaussian_blur5_f32)),
    # eighths, so that Sobel's cancelling sums are exact in float32 (a flat image's 0 stays 0)
    Case(vision.sobel_at_f32, lambda rng, s: (eighths_f32(mat(rng, *s)), int(rng.integers(-2, s[0] + 2)),
                                              int(rng.integers(-2, s[1] + 2))), FEW_MATRIX_SIZES, True),
    Case(vision.sobel_magnitude_f32, lambda rng, s: (eighths_f32(mat(rng, *s)),), MATRIX_SIZES, True),
    Case(vision.softmax_rows_f32, lambda rng, s: (mat(rng, *s, -20.0, 20.0).astype(np.float32),),
         MATRIX_SIZES, True),
    # iterate: ifold over an array state
    Case(iterate.jacobi_step, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(iterate.jacobi, lambda rng, n: (vec(rng, n), n + 2), VECTOR_SIZES),
    Case(iterate.jacobi, lambda rng, n: (vec(rng, n), 0), (1, 3)),
    # triangular: ifold counted by an Index
    Case(triangular.prefix_sums, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(triangular.lower_times, lambda rng, d: (vec(rng, d * (d + 1) // 2), vec(rng, d)),
         VECTOR_SIZES),
    Case(triangular.lagged_sums, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(triangular.counted_by_index, lambda rng, n: (vec(rng, n), n - 3), VECTOR_SIZES),
    # tuples: tuple states, results, parameters, nested tuples
    # loop_work: what fusion, licm and guards_to_bounds change the cost of (empty and large too)
    Case(loop_work.fused_exp_sin, lambda rng, n: (vec(rng, n), vec(rng, n + 1)), LOOP_SIZES),
    Case(loop_work.normalise, lambda rng, n: (vec(rng, n, 0.5, 2.0),), LOOP_SIZES),
    Case(loop_work.guarded_invariant, lambda rng, n: (vec(rng, n), vec(rng, n + 2), 3), LOOP_SIZES),
    Case(loop_work.lower_sums, lambda rng, n: (vec(rng, n),), LOOP_SIZES),
    Case(loop_work.lower_sums_inclusive, lambda rng, n: (vec(rng, n),), LOOP_SIZES),
    Case(loop_work.upper_sums, lambda rng, n: (vec(rng, n),), LOOP_SIZES),
    Case(loop_work.upper_sums_inclusive, lambda rng, n: (vec(rng, n),), LOOP_SIZES),
    Case(loop_work.guarded_product, lambda rng, n: (vec(rng, n, 0.5, 1.5), n // 2, float(rng.normal())), LOOP_SIZES),
    Case(loop_work.guarded_count, lambda rng, n: (vec(rng, n), n // 3), LOOP_SIZES),
    Case(loop_work.signed_zero_sums, lambda rng, n: (vec(rng, n), n // 2, float(rng.normal())), LOOP_SIZES),
    Case(loop_work.skinned, lambda rng, n: (mat(rng, 5, n), rng.uniform(-2.0, 2.0, (5, 3, 4)), mat(rng, n, 4)),
         LOOP_SIZES),
    Case(loop_work.histogram, lambda rng, n: (rng.integers(-2, n + 2, 3 * n + 1), n), QUADRATIC_LOOP_SIZES),
    Case(loop_work.shift_one, lambda rng, n: (vec(rng, n), rng.integers(-1, n + 1, 2 * n + 1)),
         QUADRATIC_LOOP_SIZES),
    Case(tuples.argmax, lambda rng, n: (vec(rng, n),), VECTOR_SIZES + (300,)),
    Case(tuples.online_logsumexp, lambda rng, n: (vec(rng, n, 690.0, 710.0),), VECTOR_SIZES + (300,)),
    Case(tuples.logsumexp_step, lambda rng, a: ((float(a), 1.0 + a), float(rng.normal())), ANGLES),
    Case(tuples.welford, lambda rng, n: (vec(rng, n, 1e3, 1e3 + 1.0),), VECTOR_SIZES + (300,)),
    Case(tuples.welford_step, lambda rng, a: ((float(a), rng.normal(), abs(rng.normal())), rng.normal()),
         ANGLES),
    Case(tuples.scale_and_sum, lambda rng, n: (vec(rng, n), (float(rng.normal()), vec(rng, n + 1))),
         VECTOR_SIZES),
    Case(tuples.min_max_rows, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(tuples.ordered, lambda rng, a: (float(rng.normal()), float(rng.normal())), ANGLES),
    Case(tuples.smooth_count, lambda rng, n: (vec(rng, n), n), VECTOR_SIZES),
    Case(tuples.swap_steps, lambda rng, n: (float(rng.normal()), float(rng.normal()), n), (0, 1, 2, 5)),
    Case(tuples.calls_tuple_kernels, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(tuples.named_like_outputs, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(scan_filter.cumulative_sum, lambda rng, n: (vec(rng, n),), VECTOR_SIZES + (5000,)),
    Case(scan_filter.index_cumulative_sum, lambda rng, n: (rng.integers(-1000, 1000, n),), VECTOR_SIZES),
    Case(scan_filter.running_max, lambda rng, n: (vec(rng, n),), VECTOR_SIZES + (5000,)),
    Case(scan_filter.integral_image, lambda rng, s: (mat(rng, *s),), MATRIX_SIZES),
    Case(scan_filter.sum_and_max_prefixes, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(scan_filter.fibonacci, lambda rng, n: (n,), (0, 1, 2, 17, 90)),
    Case(scan_filter.total_of_prefix_sums, lambda rng, n: (vec(rng, n),), VECTOR_SIZES),
    Case(scan_filter.keep_inliers, lambda rng, n: (vec(rng, n), 1.0), VECTOR_SIZES + (5000,)),
    Case(scan_filter.inlier_cost, lambda rng, n: (vec(rng, n), 1.0), VECTOR_SIZES + (5000,)),
    Case(scan_filter.positive_below, lambda rng, n: (vec(rng, n), 1.5), VECTOR_SIZES + (5000,)),
    Case(scan_filter.inlier_count_and_mean, lambda rng, n: (vec(rng, n), 1.0), VECTOR_SIZES + (5000,)),
    Case(scan_filter.odd_indices, lambda rng, n: (rng.integers(-50, 50, n),), VECTOR_SIZES),
    Case(scan_filter.inliers_per_row, lambda rng, s: (mat(rng, *s), 1.0), MATRIX_SIZES),
]

def _copy(value):
    return tuple(_copy(v) for v in value) if isinstance(value, tuple) else np.copy(value)


def _show(variant) -> str:
    return "x".join(map(str, variant)) if isinstance(variant, tuple) else str(variant)


def _edge_sizes(case: Case) -> tuple:
    """Empty and large inputs, beyond the sizes the other suites share: (0, 100) for a vector case,
    0×3, 4×0 and 20×33 for a matrix case."""
    if all(isinstance(v, int) for v in case.variants):
        edges = (0, 100)
    elif all(isinstance(v, tuple) and len(v) == 2 for v in case.variants):
        edges = ((0, 3), (4, 0), (20, 33))
    else:
        return ()
    return tuple(v for v in edges if (case.kernel.name, v) not in EDGE_EXCLUDED)


EDGE_EXCLUDED = {
    ("vector_slice", 0),  # its slice is inclusive: an empty vector has none
    ("fibonacci", 100),  # F(93) leaves int64: tests/test_scan_filter.py checks that OverflowError
}

PARAMS = [pytest.param(case, variant, id=f"{_module_of(case.kernel).__name__.split('.')[-1]}."
                                        f"{case.kernel.name}-{_show(variant)}-{i}")
          for i, case in enumerate(CASES) for variant in case.variants + _edge_sizes(case)]


def arguments(case: Case, variant) -> tuple:
    seed = zlib.crc32(f"{case.kernel.name}/{variant}".encode())
    return case.make_args(np.random.default_rng(seed), variant)


def _is_helper(k: fs.Kernel) -> bool:
    return any(typing.get_origin(t) is collections.abc.Callable
               for t in typing.get_type_hints(k.fn).values())


def test_every_exported_kernel_is_covered():
    covered = {case.kernel for case in CASES}
    for module in MODULES:
        kernels = [v for v in vars(module).values() if isinstance(v, fs.Kernel)]
        assert kernels, module.__name__
        for k in kernels:
            if _is_helper(k):
                assert k not in covered, f"{k.name} takes a function: not callable from Python"
            else:
                assert k in covered, f"{module.__name__}.{k.name} has no test case"
                assert callable(getattr(module, f"np_{k.name}", None)), f"np_{k.name} is missing"


@pytest.mark.parametrize("case, variant", PARAMS)
def test_reference_matches_numpy(case: Case, variant):
    args = arguments(case, variant)
    expected, got = outcome(case.oracle, args), outcome(case.kernel.reference, args)
    if _empty(args) and "error" in (expected[0], got[0]):
        return  # a kernel that reads element 0 refuses an empty input; numpy may not (-inf, 0.0)
    assert got[0] == expected[0] == "value", (expected, got)
    assert_close(with_rows_of(got[1], expected[1]), expected[1], **case.tol)


_ERRORS = (IndexError, ValueError, ZeroDivisionError, OverflowError)


def _empty(args) -> bool:
    return any(isinstance(a, np.ndarray) and a.size == 0 for a in args)


def with_rows_of(reference, like):
    """The reference's result, an empty build of arrays shaped as ``like``: build(0, f) never
    calls f, so a reference run cannot know the rows' shape (the shape translation does)."""
    if isinstance(reference, tuple):
        return tuple(with_rows_of(r, k) for r, k in zip(reference, like))
    if (isinstance(reference, np.ndarray) and reference.size == 0 and np.size(like) == 0
            and np.ndim(like) > 1 and np.ndim(reference) <= np.ndim(like)):
        return reference.reshape(np.shape(like))
    return reference


def outcome(fn, args):
    """("value", what fn returns) or ("error", the type of what it raises)."""
    try:
        return "value", fn(*args)
    except _ERRORS as err:
        return "error", type(err)


@pytest.mark.parametrize("case, variant", PARAMS)
def test_compiled_matches_reference(case: Case, variant):
    check_compiled(case, variant, case.kernel)


def check_compiled(case: Case, variant, run: Callable) -> None:
    """``run`` (the kernel compiled to C, or through OpenCL on some device) against the reference
    and the numpy oracle: the same result, or the same error, and its inputs left as they were."""
    args = arguments(case, variant)
    originals = [_copy(a) for a in args]
    reference = outcome(case.kernel.reference, args)
    if reference[0] == "error":
        # the same error; where the reference reads outside an array, the compiled call may
        # refuse the sizes before it runs (ValueError naming the parameter, README "Errors")
        with pytest.raises((ValueError, IndexError) if reference[1] is IndexError else reference[1]):
            run(*args)
        return
    got = run(*args)
    expected = with_rows_of(reference[1], got)
    check_result_type(got, case.kernel.program().main.result)
    assert_close(got, expected, **case.tol)
    oracle = outcome(case.oracle, args)
    if oracle[0] == "value" or not _empty(args):  # numpy's pad refuses an empty image
        assert_close(got, oracle[1], **case.tol)
    for before, after in zip(originals, args):
        assert_close(after, before, rtol=0, atol=0)  # inputs are read, never written


# ----------------------------------------------------------------------------- properties

finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)
vectors = st.integers(1, 24).flatmap(lambda n: st.tuples(arrays(np.float64, n, elements=finite),
                                                         arrays(np.float64, n, elements=finite)))


@settings(max_examples=40, deadline=None)
@given(vectors)
def test_running_example_reference_property(pair):
    vec1, vec2 = pair
    np.testing.assert_allclose(linalg.f.reference(vec1, vec2), np.linalg.norm(vec1 + vec2),
                               rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(vectors)
def test_running_example_compiled_property(pair):
    vec1, vec2 = pair
    np.testing.assert_allclose(linalg.f(vec1, vec2), linalg.f.reference(vec1, vec2), **DOUBLE)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 24).flatmap(lambda n: arrays(np.float64, n, elements=finite)),
       st.floats(-500.0, 500.0))
def test_softmax_is_a_distribution_invariant_to_shifts(v, shift):
    probabilities = ml.softmax(v)
    assert np.all(probabilities >= 0.0)
    np.testing.assert_allclose(probabilities.sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(ml.softmax(v + shift), probabilities, rtol=1e-9, atol=1e-12)
