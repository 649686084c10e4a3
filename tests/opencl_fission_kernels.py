"""Kernels for ``tests/test_opencl_fission.py``: a fold whose iteration builds a heavy row (moved
out of the fold by ``fsmooth.map_fission``), a per-work-item intermediate of a symbolic size
(interleaved by ``dpia.hoist_opencl``), and folds adding and subtracting terms
(``fsmooth.reassociate_folds``); with numpy oracles.  A module of its own so that a child
process under Oclgrind imports them too."""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Index, build, ifold, length


@fs.kernel
def scores(w: Array[Array[Double]], xi: Array[Double]) -> Array[Double]:
    return build(length(w), lambda k: ifold(lambda t, j: t + w[k][j] * xi[j], 0.0, length(xi)))


@fs.kernel
def log_sum_exp(r: Array[Double]) -> Double:
    mx = ifold(lambda m, k: fs.max(m, r[k]), r[0], length(r))
    return fs.log(ifold(lambda s, k: s + fs.exp(r[k] - mx), 0.0, length(r))) + mx


@fs.kernel
def row_logsumexp(x: Array[Array[Double]], w: Array[Array[Double]]) -> Double:
    """Σ_i logsumexp_k (Σ_j w[k][j]·x[i][j]): per point i a row over the components k, each
    element a fold over the dimension j (GMM's shape)."""
    return ifold(lambda acc, i: acc + log_sum_exp(scores(w, x[i])), 0.0, length(x))


def row_logsumexp_oracle(x, w):
    return float(np.sum(np.log(np.sum(np.exp(x @ w.T), axis=1)))) if x.shape[0] else 0.0


@fs.kernel
def centred_sq(xi: Array[Double], ck: Array[Double]) -> Double:
    # two operations an element: fusion keeps the array (one, x - c, it computes where read)
    d = build(length(xi), lambda j: 0.5 * (xi[j] - ck[j]))
    return ifold(lambda s, j: s + d[j] * d[j], 0.0, length(d)) + d[0] * d[length(d) - 1]


@fs.kernel
def centred_norms(x: Array[Array[Double]], c: Array[Array[Double]]) -> Array[Array[Double]]:
    """|d|² + d[0]·d[-1] through the halved centred point d = (x[i] - c[k]) / 2, an array of a
    symbolic size per (i, k)."""
    return build(length(x), lambda i: build(length(c), lambda k: centred_sq(x[i], c[k])))


def centred_norms_oracle(x, c):
    d = 0.5 * (x[:, None, :] - c[None, :, :])
    return np.sum(d * d, axis=2) + d[:, :, 0] * d[:, :, -1]


@fs.kernel
def add_sub(a: Array[Double], b: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + a[i] * a[i] - b[i], 0.0, length(a))


@fs.kernel
def sub_first(a: Array[Double], b: Array[Double]) -> Double:
    return ifold(lambda acc, i: a[i] - acc + b[i], 0.0, length(a))


@fs.kernel
def add_sub_index(a: Array[Index], b: Array[Index]) -> Index:
    return ifold(lambda acc, i: acc + a[i] - b[i], 0, length(a))
