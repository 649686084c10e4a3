"""Scans (``fs.iscan``): cumulative sums, an integral image, running maxima, a scan of a tuple
state; each with its numpy oracle (``np.cumsum``, ``np.maximum.accumulate``)."""
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
