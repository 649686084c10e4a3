"""Kernels that call foreign functions (``fsmooth.foreign``), for tests/test_foreign.py and the
Oclgrind child it starts: a camera's radial distortion polynomial (Double), a pixel test
(Index → Bool) and a function with C only."""
from __future__ import annotations

import numpy as np

import fsmooth as fs
from fsmooth import Array, Bool, Double, Index, build, ifold, length

# One text for C and OpenCL C: the polynomial r (1 + k1 r² + k2 r⁴) of Brown's model.
DISTORT_SOURCE = """
static double square(double x) { return x * x; }
#define K3_UNUSED 0.0
double distort(double r, double k1, double k2) {
    double r2 = square(r);
    return r * (1.0 + k1 * r2 + k2 * r2 * r2 + K3_UNUSED);
}
"""


@fs.foreign(c_source=DISTORT_SOURCE, opencl_source=DISTORT_SOURCE)
def distort(r: Double, k1: Double, k2: Double) -> Double:
    r2 = r * r
    return r * (1.0 + k1 * r2 + k2 * r2 * r2 + 0.0)


INSIDE_SOURCE = """
bool inside(int64_t x, int64_t y, int64_t width, int64_t height) {
    return 0 <= x && x < width && 0 <= y && y < height;
}
"""


@fs.foreign(c_source=INSIDE_SOURCE, opencl_source=INSIDE_SOURCE)
def inside(x: Index, y: Index, width: Index, height: Index) -> Bool:
    return 0 <= x < width and 0 <= y < height


@fs.foreign(c_source="double c_only(double x) { return 2.0 * x; }")
def c_only(x: Double) -> Double:
    return 2.0 * x


@fs.kernel
def distort_all(rs: Array[Double], k1: Double, k2: Double) -> Array[Double]:
    return build(length(rs), lambda i: distort(rs[i], k1, k2))


@fs.kernel
def distortion_energy(rs: Array[Double], k1: Double) -> Double:
    return ifold(lambda acc, i: acc + (distort(rs[i], k1, 0.25) - rs[i]) ** 2, 0.0, length(rs))


@fs.kernel
def count_inside(xs: Array[Index], ys: Array[Index], width: Index, height: Index) -> Index:
    return ifold(lambda n, i: n + 1 if inside(xs[i], ys[i], width, height) else n, 0, length(xs))


@fs.kernel
def doubled_through_c(v: Array[Double]) -> Array[Double]:
    return build(length(v), lambda i: c_only(v[i]))


# numpy oracles
def np_distort(rs, k1, k2):
    r2 = rs * rs
    return rs * (1.0 + k1 * r2 + k2 * r2 * r2)


def np_count_inside(xs, ys, width, height):
    return int(np.count_nonzero((0 <= xs) & (xs < width) & (0 <= ys) & (ys < height)))
