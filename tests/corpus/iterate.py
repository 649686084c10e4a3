"""Jacobi smoothing: an ``ifold`` whose state is an array.  Each step replaces every interior
value by the mean of itself and its two neighbours; the two ends stay fixed."""

import fsmooth as fs
from fsmooth import Array, Card, Double, build, ifold, length


@fs.kernel
def jacobi_step(u: Array[Double]) -> Array[Double]:
    n = length(u)
    return build(n, lambda i: u[i] if i == 0 or i == n - 1 else (u[i - 1] + u[i] + u[i + 1]) / 3.0)


@fs.kernel
def jacobi(u: Array[Double], k: Card) -> Array[Double]:
    return ifold(lambda state, step: jacobi_step(state), u, k)


# ----------------------------------------------------------------------------- numpy oracles

def np_jacobi_step(u):
    out = u.copy()
    out[1:-1] = (u[:-2] + u[1:-1] + u[2:]) / 3.0
    return out


def np_jacobi(u, k):
    for _ in range(k):
        u = np_jacobi_step(u)
    return u.copy()
