"""The linear-algebra library of the DPS paper (Fig. 3) and its running example (§2.2, §3.2).

No ``from __future__ import annotations`` in corpus modules: the annotations are the F̃ types
themselves, evaluated when the function is defined, as a user's module would have them.
"""
import typing

import numpy as np

import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, length
# The running example f and the kernels of the library that it uses are fsmooth's demo
# (fsmooth/examples.py); a kernel calls them by name here as it would its own.
from fsmooth.examples import f, vector_add, vector_dot, vector_emul, vector_map2, vector_norm, vector_sum  # noqa: F401


@fs.kernel
def vector_range(n: Card) -> Array[Index]:
    return build(n, lambda i: i)


@fs.kernel
def vector_map(v: Array[Double], f: typing.Callable[[Double], Double]) -> Array[Double]:
    return build(length(v), lambda i: f(v[i]))





@fs.kernel
def vector_smul(v: Array[Double], s: Double) -> Array[Double]:
    return vector_map(v, lambda a: a * s)





@fs.kernel
def vector_slice(v: Array[Double], s: Card, e: Card) -> Array[Double]:
    return build(e - s + 1, lambda i: v[i + s])


@fs.kernel
def matrix_rows(m: Array[Array[Double]]) -> Card:
    return length(m)


@fs.kernel
def matrix_cols(m: Array[Array[Double]]) -> Card:
    return length(m[0])


@fs.kernel
def matrix_map(m: Array[Array[Double]],
               f: typing.Callable[[Array[Double]], Array[Double]]) -> Array[Array[Double]]:
    return build(length(m), lambda i: f(m[i]))


@fs.kernel
def matrix_map2(m1: Array[Array[Double]], m2: Array[Array[Double]],
                f: typing.Callable[[Array[Double], Array[Double]], Array[Double]]
                ) -> Array[Array[Double]]:
    return build(length(m1), lambda i: f(m1[i], m2[i]))


@fs.kernel
def matrix_add(m1: Array[Array[Double]], m2: Array[Array[Double]]) -> Array[Array[Double]]:
    return matrix_map2(m1, m2, lambda r1, r2: vector_add(r1, r2))


@fs.kernel
def matrix_smul(m: Array[Array[Double]], s: Double) -> Array[Array[Double]]:
    return matrix_map(m, lambda row: vector_smul(row, s))


@fs.kernel
def matrix_transpose(m: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(matrix_cols(m), lambda i: build(matrix_rows(m), lambda j: m[j][i]))


@fs.kernel
def matrix_mul(m1: Array[Array[Double]], m2: Array[Array[Double]]) -> Array[Array[Double]]:
    m2t = matrix_transpose(m2)
    return build(matrix_rows(m1),
                 lambda i: build(matrix_cols(m2), lambda j: vector_dot(m1[i], m2t[j])))


@fs.kernel
def matrix_vector_mul(m: Array[Array[Double]], v: Array[Double]) -> Array[Double]:
    return build(matrix_rows(m), lambda i: vector_dot(m[i], v))


@fs.kernel
def vector_outer_prod(v1: Array[Double], v2: Array[Double]) -> Array[Array[Double]]:
    # Fig. 3 multiplies m1 by the transpose of m2, which is the 1x1 inner product; the outer
    # product is the column v1 (the transpose of the row m1) times the row v2.
    m1 = build(1, lambda i: v1)
    m2 = build(1, lambda i: v2)
    return matrix_mul(matrix_transpose(m1), m2)



# ----------------------------------------------------------------------------- numpy oracles

def np_vector_range(n):
    return np.arange(n, dtype=np.int64)


def np_vector_add(v1, v2):
    return v1 + v2


def np_vector_emul(v1, v2):
    return v1 * v2


def np_vector_smul(v, s):
    return v * s


def np_vector_sum(v):
    return float(np.sum(v))


def np_vector_dot(v1, v2):
    return float(np.dot(v1, v2))


def np_vector_norm(v):
    return float(np.linalg.norm(v))


def np_vector_slice(v, s, e):
    return v[s: e + 1].copy()


def np_matrix_rows(m):
    return m.shape[0]


def np_matrix_cols(m):
    return m.shape[1]


def np_matrix_add(m1, m2):
    return m1 + m2


def np_matrix_smul(m, s):
    return m * s


def np_matrix_transpose(m):
    return m.T.copy()


def np_matrix_mul(m1, m2):
    return m1 @ m2


def np_matrix_vector_mul(m, v):
    return m @ v


def np_vector_outer_prod(v1, v2):
    return np.outer(v1, v2)


def np_f(vec1, vec2):
    return float(np.linalg.norm(vec1 + vec2))
