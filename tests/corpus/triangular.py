"""Triangular loops: ``ifold`` counted by an ``Index`` (the index of an enclosing build, an
expression of it, or a parameter), which may be negative and then runs no iteration.

``lower_times`` is ADBench GMM's product of the lower-triangular factor L by a vector: the
diagonal of L is exp(icf[0..d-1]), and its strictly lower part is packed column by column
after it, so that L[i][j] (j < i) is icf[d + j(2d-j-1)/2 + (i-j-1)], of d(d+1)/2 in all.
"""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Index, build, ifold, length


@fs.kernel
def prefix_sums(v: Array[Double]) -> Array[Double]:
    """Exclusive prefix sums: element i is v[0] + ... + v[i-1]."""
    return build(length(v), lambda i: ifold(lambda a, j: a + v[j], 0.0, i))


@fs.kernel
def lower_times(icf: Array[Double], x: Array[Double]) -> Array[Double]:
    d = length(x)
    return build(d, lambda i: fs.exp(icf[i]) * x[i]
                 + ifold(lambda acc, j: acc + icf[d + j * (2 * d - j - 1) // 2 + (i - j - 1)] * x[j], 0.0, i))


@fs.kernel
def lagged_sums(v: Array[Double]) -> Array[Double]:
    """Element i is 1 + the sum of v[j]·v[i-1-j] over j < i - 5: the count i - 5 is negative for
    i < 5 (no iteration)."""
    return build(length(v), lambda i: ifold(lambda a, j: a + v[j] * v[i - 1 - j], 1.0, i - 5))


@fs.kernel
def counted_by_index(v: Array[Double], k: Index) -> Array[Double]:
    """An Index parameter counts a scalar fold and an array-state fold (k < 0: none)."""
    total = ifold(lambda a, j: a + 2.0 * j, 0.5, k)
    return ifold(lambda s, j: build(length(s), lambda m: s[m] * 0.5 + v[m] + total), v, k - 1)


# ----------------------------------------------------------------------------- numpy oracles

def np_prefix_sums(v):
    return np.concatenate([[0.0], np.cumsum(v)[:-1]]) if len(v) else np.zeros(0)


def np_lower_times(icf, x):
    d = len(x)
    lower = np.diag(np.exp(icf[:d]))
    rows, cols = np.tril_indices(d, -1)
    order = np.lexsort((rows, cols))  # column by column, rows increasing: ADBench's packing
    lower[rows[order], cols[order]] = icf[d:d + d * (d - 1) // 2]
    return lower @ x


def np_lagged_sums(v):
    out = np.ones(len(v))
    for i in range(len(v)):
        j = np.arange(max(i - 5, 0))
        out[i] += np.sum(v[j] * v[i - 1 - j])
    return out


def np_counted_by_index(v, k):
    total = 0.5 + 2.0 * sum(range(max(k, 0)))
    s = np.array(v, dtype=np.float64)
    for _ in range(max(k - 1, 0)):
        s = s * 0.5 + v + total
    return s
