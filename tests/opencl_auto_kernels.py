"""Kernels without strategy annotations whose folds ``fsmooth.auto_reductions`` makes parallel
reductions on OpenCL, with their numpy oracles (``tests/test_opencl_auto.py``; a module of its
own so that a child process under Oclgrind imports them too)."""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Float, Index, ifold, length


@fs.kernel
def f32(x: Float) -> Float:
    return x


@fs.kernel
def sum_f(x: Array[Float]) -> Float:
    return ifold(lambda acc, i: acc + x[i], f32(0.0), length(x))


@fs.kernel
def sum_d(x: Array[Double]) -> Double:
    return ifold(lambda acc, i: x[i] + acc, 1.5, length(x))


@fs.kernel
def prod_f(x: Array[Float]) -> Float:
    return ifold(lambda acc, i: acc * x[i], f32(1.0), length(x))


@fs.kernel
def prod_d(x: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc * x[i], 1.0, length(x))


@fs.kernel
def min_f(x: Array[Float]) -> Float:
    return ifold(lambda acc, i: min(acc, x[i]), f32(1024.0), length(x))


@fs.kernel
def max_d(x: Array[Double]) -> Double:
    return ifold(lambda acc, i: max(acc, 2.0 * x[i]), -1e300, length(x))


@fs.kernel
def max_sum(x: Array[Double]) -> tuple[Double, Double]:
    """A tuple state: (max, sum) componentwise."""
    return ifold(lambda acc, i: (max(acc[0], x[i]), acc[1] + x[i] * x[i]), (-1e300, 0.0), length(x))


@fs.kernel
def max_index(v: Array[Index]) -> Index:
    """max on Index: parallel, as integers (no vectors)."""
    return ifold(lambda acc, i: max(acc, v[i]), -1, length(v))


@fs.kernel
def sum_index(v: Array[Index]) -> Index:
    """+ on Index stays sequential: another grouping may overflow where this one does not."""
    return ifold(lambda acc, i: acc + v[i], 0, length(v))


@fs.kernel
def normalise(x: Array[Float]) -> Array[Float]:
    """A reduction let-bound before a map that reads it."""
    total = ifold(lambda acc, i: acc + fs.abs(x[i]), f32(0.0), length(x))
    return fs.build(length(x), lambda i: x[i] / (total + f32(1.0)))


@fs.kernel
def offset_sum(x: Array[Double], w: Double) -> Double:
    """A scalar of a size and a scalar parameter let-bound before a reduction: each launch that
    uses it computes it (``dpia.hoist_opencl``), no launch of one work-item computes it first."""
    offset = -0.5 * length(x) * w + 1.0
    return ifold(lambda acc, i: acc + x[i], 0.0, length(x)) * offset


ORACLES = {
    "sum_f": lambda x: float(np.sum(x, dtype=np.float64)),
    "sum_d": lambda x: 1.5 + float(np.sum(x)),
    "prod_f": lambda x: float(np.prod(x, dtype=np.float64)),
    "prod_d": lambda x: float(np.prod(x)),
    "min_f": lambda x: float(min(1024.0, np.min(x))) if len(x) else 1024.0,
    "max_d": lambda x: float(max(-1e300, 2.0 * np.max(x))) if len(x) else -1e300,
    "max_sum": lambda x: (float(max(-1e300, np.max(x))) if len(x) else -1e300, float(np.sum(x * x))),
    "max_index": lambda v: int(max(-1, np.max(v))) if len(v) else -1,
    "sum_index": lambda v: int(np.sum(v)),
    "normalise": lambda x: (x / (np.float32(np.sum(np.abs(x), dtype=np.float64)) + np.float32(1))).astype(np.float32),
}


@fs.kernel
def sum_first_ten(x: Array[Double]) -> Double:
    """10 iterations, known when compiling: fewer than a group's lanes, so sequential."""
    return ifold(lambda acc, i: acc + x[i], 0.0, 10)


@fs.kernel
def row_sums(m: Array[Array[Double]]) -> Array[Double]:
    """A map of reductions: a work-group per row."""
    return fs.build(length(m), lambda i: ifold(lambda acc, j: acc + m[i][j], 0.0, length(m[0])))


@fs.kernel
def logsumexp_of_row(m: Array[Array[Float]], i: Index) -> Float:
    mx = ifold(lambda acc, j: max(acc, m[i][j]), f32(-1e30), length(m[0]))
    s = ifold(lambda acc, j: acc + fs.exp(m[i][j] - mx), f32(0.0), length(m[0]))
    return fs.log(s) + mx


@fs.kernel
def row_logsumexp(m: Array[Array[Float]]) -> Array[Float]:
    """Softmax's per-row max, then the sum of exponentials that reads it: two reductions a row."""
    return fs.build(length(m), lambda i: logsumexp_of_row(m, i))


@fs.kernel
def gemv_auto(a: Array[Array[Float]], x: Array[Float]) -> Array[Float]:
    return fs.build(length(a), lambda i: ifold(lambda acc, j: acc + a[i][j] * x[j], f32(0.0), length(x)))


@fs.kernel
def column_sums(m: Array[Array[Float]]) -> Array[Float]:
    """A map of reductions reading across the rows: neighbouring elements read neighbours."""
    return fs.build(length(m[0]), lambda j: ifold(lambda acc, i: acc + m[i][j], f32(0.0), length(m)))


@fs.kernel
def row_index_max(m: Array[Array[Index]]) -> Array[Index]:
    """A map of reductions of integers: no vectors (OpenCL's are of floats here)."""
    return fs.build(length(m), lambda i: ifold(lambda acc, j: max(acc, m[i][j]), -1, length(m[0])))


@fs.kernel
def short_rows(m: Array[Array[Double]]) -> Array[Double]:
    """Rows of 3, known when compiling: a work-item per row (the default)."""
    return fs.build(length(m), lambda i: ifold(lambda acc, j: acc + m[i][j], 0.0, 3))


@fs.kernel
def reversed_softmax_rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
    """Softmax with each row's result reversed: the last loop reads its exponentials across the
    work-items (element n - 1 - j for j), after which no barrier comes (dpia.stage_rows)."""
    return fs.build(length(m), lambda i: reversed_softmax_row(m, i))


@fs.kernel
def reversed_softmax_row(m: Array[Array[Double]], i: Index) -> Array[Double]:
    n = length(m[0])
    mx = ifold(lambda acc, j: fs.max(acc, m[i][j]), m[i][0], n)
    e = fs.build(n, lambda j: fs.exp(m[i][j] - mx))
    total = ifold(lambda acc, j: acc + e[j], 0.0, n)
    return fs.build(n, lambda j: e[n - 1 - j] / total)


@fs.kernel
def l2_normalised_row(m: Array[Array[Double]], i: Index) -> Array[Double]:
    norm = fs.sqrt(ifold(lambda acc, j: acc + m[i][j] * m[i][j], 0.0, length(m[0]))) + 1.0
    return fs.build(length(m[0]), lambda j: m[i][j] / norm)


@fs.kernel
def l2_normalised_rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
    """Each row divided by its L2 norm (plus one, so that a zero row stays finite): a reduction,
    a scalar from it, then the row: a work-group per row."""
    return fs.build(length(m), lambda i: l2_normalised_row(m, i))


@fs.kernel
def short_normalised_row(m: Array[Array[Double]], i: Index) -> Array[Double]:
    total = ifold(lambda acc, j: acc + m[i][j], 1.0, 3)
    return fs.build(3, lambda j: m[i][j] / total)


@fs.kernel
def short_normalised_rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
    """Rows of 3, known when compiling: a work-item per row (the default)."""
    return fs.build(length(m), lambda i: short_normalised_row(m, i))


@fs.kernel
def gathered_sum(v: Array[Double], at: Array[Index]) -> Double:
    """A reduction whose reads are checked: an index out of range fails the group that reads it
    (its partial unwritten), and the call."""
    return ifold(lambda acc, i: acc + v[at[i]], 0.0, length(at))
