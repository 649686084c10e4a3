"""Kernels for ``tests/test_opencl_nest_shape.py``: nests of global loops whose launch shape the
cost model chooses (``fsmooth.cost_model.choose_nest``), with numpy oracles.  A module of its own
so that a child process under Oclgrind imports them too."""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, build, ifold, length


@fs.kernel
def product_transposed(a: Array[Array[Double]], b: Array[Array[Double]]) -> Array[Array[Double]]:
    """out[i][k] = a[k][i] · b[k][i]: the reads are consecutive along the outer loop."""
    return build(length(a[0]), lambda i: build(length(a), lambda k: a[k][i] * b[k][i]))


@fs.kernel
def product_transposed_global(a: Array[Array[Double]], b: Array[Array[Double]]) -> Array[Array[Double]]:
    """``product_transposed`` with its strategy written: both loops global."""
    return fs.build_global(length(a[0]), lambda i: fs.build_global(length(a), lambda k: a[k][i] * b[k][i]))


def product_transposed_oracle(a, b):
    return (a * b).T


@fs.kernel
def centred_score(xi: Array[Double], ck: Array[Double], wk: Array[Double]) -> Double:
    # two operations an element: fusion keeps the array (one, x - c, it computes where read)
    xc = build(length(xi), lambda l: 0.5 * (xi[l] - ck[l]))
    return ifold(lambda s, l: s + xc[l] * ifold(lambda t, j: t + wk[j] * xc[j], 0.0, l), 0.0, length(xi))


@fs.kernel
def weighted_scores(x: Array[Array[Double]], c: Array[Array[Double]], w: Array[Array[Double]]) -> Array[Array[Double]]:
    """GMM's shape: per point i and component k, the halved centred point (x[i] - c[k]) / 2 (a
    work-item's intermediate of a symbolic size) and a triangle of component k's weights over it."""
    return build(length(x), lambda i: build(length(c), lambda k: centred_score(x[i], c[k], w[k])))


def weighted_scores_oracle(x, c, w):
    xc = 0.5 * (x[:, None, :] - c[None, :, :])  # n × K × d
    strict = np.tril(np.ones((x.shape[1], x.shape[1])), -1)  # l > j
    inner = np.einsum("kj,nkj,lj->nkl", w, xc, strict)
    return np.sum(xc * inner, axis=2)


@fs.kernel
def squared_distances(x: Array[Array[Double]], c: Array[Array[Double]]) -> Array[Array[Double]]:
    """|x[i] - c[k]|² for every point i and centre k: each work-item walks its point's row, which
    the work-group's other centres walk too (``dpia.stage_tiles``)."""
    return build(length(x), lambda i: build(length(c), lambda k: ifold(
        lambda acc, j: acc + (x[i][j] - c[k][j]) * (x[i][j] - c[k][j]), 0.0, length(c[k]))))


def squared_distances_oracle(x, c):
    return np.sum((x[:, None, :] - c[None, :, :]) ** 2, axis=2)
