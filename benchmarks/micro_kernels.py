"""The DPS paper's micro-benchmarks (§5.1), with the iteration loop written in F̃ so that it
runs in C.  Each iteration builds a result vector and feeds it to a consumer that reads it
twice, so the vector must exist (fusion cannot remove it)."""
import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, ifold, length


@fs.kernel
def vector_add(a: Array[Double], b: Array[Double]) -> Array[Double]:
    return build(length(a), lambda i: a[i] + b[i])


@fs.kernel
def add3(a: Array[Double], b: Array[Double], c: Array[Double]) -> Array[Double]:
    return vector_add(vector_add(a, b), c)


@fs.kernel
def cross(a: Array[Double], b: Array[Double]) -> Array[Double]:
    return build(3, lambda i: a[(i + 1) % 3] * b[(i + 2) % 3] - a[(i + 2) % 3] * b[(i + 1) % 3])


@fs.kernel
def read_twice(t: Array[Double], it: Index) -> Double:
    # The two indices differ for every ``it`` when the length is 3 or 100 (their difference,
    # 6*it + 1, is never a multiple of 3, nor of 100, being odd), so no simplification can merge
    # the two reads into one and then fuse the vector away.
    return t[it % length(t)] + t[(it * 7 + 1) % length(t)]


@fs.kernel
def add3_loop(a: Array[Double], b: Array[Double], c: Array[Double], iters: Card) -> Double:
    return ifold(lambda acc, it: acc + read_twice(add3(a, b, c), it), 0.0, iters)


@fs.kernel
def cross_loop(a: Array[Double], b: Array[Double], iters: Card) -> Double:
    return ifold(lambda acc, it: acc + read_twice(cross(a, b), it), 0.0, iters)
