"""Scans (``fs.iscan``): cumulative sums, an integral image, running maxima, a scan of a tuple
state; filters (``fs.filter``): a RANSAC step's inliers, a filter fused into a sum, a filter of a
filter, one kept whole; each with its numpy oracle (``np.cumsum``, ``np.maximum.accumulate``,
boolean indexing)."""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, ifold, iscan, length


@fs.kernel
def cumulative_sum(v: Array[Double]) -> Array[Double]:
    return iscan(lambda acc, i: acc + v[i], 0.0, length(v))


@fs.kernel
def index_cumulative_sum(v: Array[Index]) -> Array[Index]:
    # a sum that leaves int64 is an OverflowError, in the reference and in C alike
    return iscan(lambda acc, i: acc + v[i], 0, length(v))


@fs.kernel
def running_max(v: Array[Double]) -> Array[Double]:
    return iscan(lambda m, i: fs.max(m, v[i]) if i > 0 else v[0], 0.0, length(v))


@fs.kernel
def integral_image(img: Array[Array[Double]]) -> Array[Array[Double]]:
    """Summed-area table: a scan along each row, then one down each column."""
    rows, cols = length(img), length(img[0])
    along_rows = build(rows, lambda r: iscan(lambda acc, c: acc + img[r][c], 0.0, cols))
    down_cols = build(cols, lambda c: iscan(lambda acc, r: acc + along_rows[r][c], 0.0, rows))
    return build(rows, lambda r: build(cols, lambda c: down_cols[c][r]))


@fs.kernel
def sum_and_max_prefixes(v: Array[Double]) -> tuple[Array[Double], Array[Double]]:
    """A tuple state: per prefix its sum and its maximum (a tuple of two arrays)."""
    return iscan(lambda s, i: (s[0] + v[i], fs.max(s[1], v[i]) if i > 0 else v[0]), (0.0, 0.0), length(v))


@fs.kernel
def fibonacci(n: Card) -> tuple[Array[Card], Array[Card]]:
    """The state's components trade places each step: (a, b) -> (b, a + b)."""
    return iscan(lambda s, i: (s[1], s[0] + s[1]), (0, 1), n)


@fs.kernel
def total_of_prefix_sums(v: Array[Double]) -> Double:
    """A scan read by a fold."""
    prefixes = iscan(lambda acc, i: acc + v[i], 0.0, length(v))
    return ifold(lambda acc, i: acc + prefixes[i], 0.0, length(prefixes))


@fs.kernel
def keep_inliers(residuals: Array[Double], threshold: Double) -> Array[Double]:
    """The residuals of a RANSAC step's inliers: the result's length is known only at run time."""
    return fs.filter(lambda r: fs.abs(r) < threshold, residuals)


@fs.kernel
def inlier_cost(residuals: Array[Double], threshold: Double) -> Double:
    """The filter is fused into the fold: nothing is stored."""
    inliers = fs.filter(lambda r: fs.abs(r) < threshold, residuals)
    return ifold(lambda acc, i: acc + inliers[i] * inliers[i], 0.0, length(inliers))


@fs.kernel
def positive_below(v: Array[Double], high: Double) -> Array[Double]:
    """A filter of a filter: one pass, both tests."""
    return fs.filter(lambda x: x < high, fs.filter(lambda x: x > 0.0, v))


@fs.kernel
def inlier_count_and_mean(residuals: Array[Double], threshold: Double) -> tuple[Card, Double]:
    """The kept length used beside the fold: the filter is stored (its capacity reserved)."""
    inliers = fs.filter(lambda r: fs.abs(r) < threshold, residuals)
    n = length(inliers)
    total = ifold(lambda acc, i: acc + inliers[i], 0.0, n)
    return n, total / float(n) if n > 0 else 0.0


@fs.kernel
def odd_indices(v: Array[Index]) -> Array[Index]:
    return fs.filter(lambda x: x % 2 == 1, v)


@fs.kernel
def inliers_per_row(m: Array[Array[Double]], threshold: Double) -> Array[Card]:
    """A filter inside a build's element, consumed there by a fold (fused): a count per row."""
    return build(length(m), lambda r: ifold(lambda c, j: c + 1, 0, length(fs.filter(lambda x: fs.abs(x) < threshold,
                                                                                        m[r]))))


def np_cumulative_sum(v):
    return np.cumsum(v)


def np_index_cumulative_sum(v):
    return np.cumsum(v)


def np_running_max(v):
    return np.maximum.accumulate(v)


def np_integral_image(img):
    return np.cumsum(np.cumsum(img, axis=0), axis=1)


def np_sum_and_max_prefixes(v):
    return np.cumsum(v), np.maximum.accumulate(v)


def np_fibonacci(n):
    a, b, firsts, seconds = 0, 1, [], []
    for _ in range(n):
        a, b = b, a + b
        firsts.append(a)
        seconds.append(b)
    return np.array(firsts, dtype=np.int64), np.array(seconds, dtype=np.int64)


def np_total_of_prefix_sums(v):
    return float(np.sum(np.cumsum(v)))


def np_keep_inliers(residuals, threshold):
    return residuals[np.abs(residuals) < threshold]


def np_inlier_cost(residuals, threshold):
    inliers = residuals[np.abs(residuals) < threshold]
    return float(np.sum(inliers * inliers))


def np_positive_below(v, high):
    return v[(v > 0.0) & (v < high)]


def np_inlier_count_and_mean(residuals, threshold):
    inliers = residuals[np.abs(residuals) < threshold]
    return len(inliers), float(np.mean(inliers)) if len(inliers) else 0.0


def np_odd_indices(v):
    return v[v % 2 == 1]


def np_inliers_per_row(m, threshold):
    return np.sum(np.abs(m) < threshold, axis=1).astype(np.int64)
