"""Numba versions of the micro-benchmarks (imported only by the Numba runners: importing Numba
costs a few hundred milliseconds).  ``cache=True`` keeps the machine code in ``__pycache__`` so
that the fresh process of each memory measurement loads it instead of compiling it again.

``*_alloc`` is what numpy code compiled by Numba does: a new result array every iteration
(Numba fuses ``a + b + c`` into one loop, so one array, not two).  ``*_fused`` is the hand-fused
loop into one buffer allocated before the iterations, as the hand-written C does."""
import numpy as np
from numba import njit

from .micro_impls import add3_loop_numpy, cross_loop_numpy


# The numpy versions themselves, compiled: Numba's code for what a numpy programmer writes.
add3_loop_alloc = njit(cache=True)(add3_loop_numpy)


@njit(cache=True)
def add3_loop_fused(a, b, c, iters):
    n = len(a)
    t = np.empty(n)
    acc = 0.0
    for it in range(iters):
        for i in range(n):
            t[i] = (a[i] + b[i]) + c[i]
        acc = acc + (t[it % n] + t[(it * 7 + 1) % n])
    return acc


cross_loop_alloc = njit(cache=True)(cross_loop_numpy)


@njit(cache=True)
def cross_loop_fused(a, b, iters):
    t = np.empty(3)
    acc = 0.0
    for it in range(iters):
        t[0] = a[1] * b[2] - a[2] * b[1]
        t[1] = a[2] * b[0] - a[0] * b[2]
        t[2] = a[0] * b[1] - a[1] * b[0]
        acc = acc + (t[it % 3] + t[(it * 7 + 1) % 3])
    return acc
