"""The running example of the DPS paper (§2.2, §3.2): ``f(vec1, vec2) = vectorNorm(vectorAdd(vec1, vec2))``
with the part of its Fig. 3 library that it uses.  ``fsmooth demo`` compiles and runs it.

No ``from __future__ import annotations``: the annotations are F̃ types, evaluated when each
function is defined, as in any user's module.
"""
import typing

import fsmooth as fs
from fsmooth import Array, Double, build, ifold, length


@fs.kernel
def vector_map2(v1: Array[Double], v2: Array[Double],
                op: typing.Callable[[Double, Double], Double]) -> Array[Double]:
    return build(length(v1), lambda i: op(v1[i], v2[i]))


@fs.kernel
def vector_add(v1: Array[Double], v2: Array[Double]) -> Array[Double]:
    return vector_map2(v1, v2, lambda a, b: a + b)


@fs.kernel
def vector_emul(v1: Array[Double], v2: Array[Double]) -> Array[Double]:
    return vector_map2(v1, v2, lambda a, b: a * b)


@fs.kernel
def vector_sum(v: Array[Double]) -> Double:
    return ifold(lambda acc, idx: acc + v[idx], 0.0, length(v))


@fs.kernel
def vector_dot(v1: Array[Double], v2: Array[Double]) -> Double:
    return vector_sum(vector_emul(v1, v2))


@fs.kernel
def vector_norm(v: Array[Double]) -> Double:
    return fs.sqrt(vector_dot(v, v))


@fs.kernel
def f(vec1: Array[Double], vec2: Array[Double]) -> Double:
    return vector_norm(vector_add(vec1, vec2))
