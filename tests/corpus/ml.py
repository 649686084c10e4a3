"""Softmax (max-subtracted, so that exp never overflows), row-wise softmax, a dense ReLU layer,
and a single-precision softmax."""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Float, build, ifold, length


@fs.kernel
def vmax(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: fs.max(acc, v[i]), v[0], length(v))


@fs.kernel
def vsum(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + v[i], 0.0, length(v))


@fs.kernel
def softmax(v: Array[Double]) -> Array[Double]:
    mx = vmax(v)
    e = build(length(v), lambda i: fs.exp(v[i] - mx))
    total = vsum(e)
    return build(length(v), lambda i: e[i] / total)


@fs.kernel
def softmax_rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(m), lambda i: softmax(m[i]))


@fs.kernel
def dense_relu(w: Array[Array[Double]], b: Array[Double], x: Array[Double]) -> Array[Double]:
    return build(length(w), lambda i: fs.max(0.0, b[i] + ifold(
        lambda acc, j: acc + w[i][j] * x[j], 0.0, length(x))))


# Single precision throughout: no Double literal may enter, or the arithmetic would promote to
# Double, so the folds start from an element instead of from 0.0.
@fs.kernel
def vmax_f32(v: Array[Float]) -> Float:
    return ifold(lambda acc, i: fs.max(acc, v[i]), v[0], length(v))


@fs.kernel
def vsum_f32(v: Array[Float]) -> Float:
    return ifold(lambda acc, i: acc + v[i + 1], v[0], length(v) - 1)


@fs.kernel
def softmax_f32(v: Array[Float]) -> Array[Float]:
    mx = vmax_f32(v)
    e = build(length(v), lambda i: fs.exp(v[i] - mx))
    total = vsum_f32(e)
    return build(length(v), lambda i: e[i] / total)


# ----------------------------------------------------------------------------- numpy oracles

def np_vmax(v):
    return float(np.max(v))


def np_vsum(v):
    return float(np.sum(v))


def np_softmax(v):
    e = np.exp(v - np.max(v))
    return e / e.sum()


def np_softmax_rows(m):
    e = np.exp(m - m.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def np_dense_relu(w, b, x):
    return np.maximum(w @ x + b, 0.0)


np_vmax_f32 = np_vmax
np_vsum_f32 = np_vsum


def np_softmax_f32(v):
    return np_softmax(v.astype(np.float32))
