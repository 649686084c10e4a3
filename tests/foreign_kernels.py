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


# ----------------------------------------------------------------------------- array results (C)

LOOKUP_SOURCE = """
void lookup(double *out, const double *table, int64_t table_d0, const int64_t *idx, int64_t idx_d0) {
    for (int64_t i = 0; i < idx_d0; i++) {
        int64_t k = idx[i] < 0 ? 0 : idx[i] >= table_d0 ? table_d0 - 1 : idx[i];
        out[i] = table[k];
    }
}
"""


@fs.foreign(c_source=LOOKUP_SOURCE, shape=lambda table, idx: length(idx))
def lookup(table: Array[Double], idx: Array[Index]) -> Array[Double]:
    """``table[idx]``, each index clamped into the table."""
    return np.asarray(table)[np.clip(np.asarray(idx), 0, max(len(table) - 1, 0))] if len(idx) else np.zeros(0)


CONVOLVE_SOURCE = """
void convolve(double *out, const double *x, int64_t x_d0, const double *k, int64_t k_d0) {
    for (int64_t i = 0; i + k_d0 <= x_d0; i++) {
        double sum = 0.0;
        for (int64_t j = 0; j < k_d0; j++) sum += x[i + j] * k[j];
        out[i] = sum;
    }
}
"""


# OpenCL: the arrays are in global memory
CONVOLVE_SOURCE_CL = CONVOLVE_SOURCE.replace("double *out", "__global double *out").replace(
    "const double", "__global const double")


@fs.foreign(c_source=CONVOLVE_SOURCE, opencl_source=CONVOLVE_SOURCE_CL, shape=lambda x, k: length(x) - length(k) + 1)
def convolve(x: Array[Double], k: Array[Double]) -> Array[Double]:
    """The valid correlation of ``x`` with ``k``."""
    n = len(x) - len(k) + 1
    return np.array([float(np.dot(x[i:i + len(k)], k)) for i in range(n)])


OUTER_SOURCE = """
void outer(double *out, const double *a, int64_t a_d0, const double *b, int64_t b_d0, double scale) {
    for (int64_t i = 0; i < a_d0; i++)
        for (int64_t j = 0; j < b_d0; j++) out[i * b_d0 + j] = scale * a[i] * b[j];
}
"""


@fs.foreign(c_source=OUTER_SOURCE, shape=lambda a, b, scale: (length(a), length(b)))
def outer(a: Array[Double], b: Array[Double], scale: Double) -> Array[Array[Double]]:
    return scale * np.outer(a, b)


NORM_SOURCE = """
double norm2(const double *x, int64_t x_d0) {
    double sum = 0.0;
    for (int64_t i = 0; i < x_d0; i++) sum += x[i] * x[i];
    return sqrt(sum);
}
"""


@fs.foreign(c_source=NORM_SOURCE, opencl_source=NORM_SOURCE.replace("const double", "__global const double"))
def norm2(x: Array[Double]) -> Double:
    """The Euclidean norm of ``x``: a scalar result of an array argument."""
    return float(np.sqrt(np.dot(x, x))) if len(x) else 0.0


@fs.kernel
def row_norms(image: Array[Array[Double]]) -> Array[Double]:
    return build(length(image), lambda r: norm2(image[r]))


@fs.kernel
def lookup_plus(table: Array[Double], idx: Array[Index], bias: Double) -> Array[Double]:
    v = lookup(table, idx)
    return build(length(v), lambda i: v[i] + bias)


@fs.kernel
def convolve_rows(image: Array[Array[Double]], k: Array[Double]) -> Array[Array[Double]]:
    """One foreign call per row, each writing its row of the result in place."""
    return build(length(image), lambda r: convolve(image[r], k))


@fs.kernel
def smoothed_energy(x: Array[Double], k: Array[Double]) -> Double:
    y = convolve(x, k)
    return ifold(lambda acc, i: acc + y[i] * y[i], 0.0, length(y))


@fs.kernel
def outer_trace(a: Array[Double], b: Array[Double]) -> Array[Array[Double]]:
    return outer(a, b, 2.0)


def np_convolve_rows(image, k):
    return np.array([np.correlate(row, k, mode="valid") for row in image]).reshape(
        len(image), max(image.shape[1] - len(k) + 1, 0))
