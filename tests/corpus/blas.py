"""The BLAS kernels of the DPIA paper's §7 (scal, asum, dot, gemv) in F̃ with OpenCL strategies,
and their numpy oracles.  As Python (``kernel.reference``) and as C the strategies mean nothing;
through OpenCL (``kernel.opencl``) they are the paper's §6.3 strategy, with index arithmetic in
place of split/join:

- ``g`` work-groups of 128 work-items (one per 2048 elements, at most 2048) stride over the
  vector: work-item ``l`` of group ``c`` sums the elements ``128 g j + 128 c + l`` (consecutive
  work-items read consecutive elements) in private memory and stores its sum in local memory;
- the group halves its 128 sums in local memory down to one (``group_sum``), one barrier per
  step, and writes the chunk's partial sum to global memory;
- a second kernel of one work-group sums the partial sums the same way, and a last one copies
  the total out: three launches in order, the partials a hoisted 'temp' buffer.

Each guard ``k < n`` bounds the reads under it, so the generated code checks nothing at run time
there; ``n`` is the smaller of the lengths read (``fs.min``), which is what lets the guard cover
``y`` in ``dot`` and the row of ``m`` in ``gemv`` too.

``scal`` is element-wise, 4-wide vectorised (``vload4``/``vstore4``); ``gemv`` gives each row
to one work-group, which reduces it like ``dot``.

No ``from __future__ import annotations``: the annotations are the F̃ types themselves.
"""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Float, ifold, length


@fs.kernel
def f32(x: Float) -> Float:
    """``f32(0.0)`` is a Float zero: an F̃ literal alone is a Double."""
    return x


@fs.kernel
def halve(s: Array[Float]) -> Array[Float]:
    """One step of a tree sum in local memory: element l is s[l] + s[l + h]."""
    h = length(s) // 2
    return fs.to_local(fs.build_local(h, lambda l: s[l] + s[l + h]))


@fs.kernel
def group_sum(s: Array[Float]) -> Float:
    """The sum of the 128 elements of ``s``, by the work-items of one group."""
    s2 = halve(halve(halve(halve(halve(halve(s))))))
    return s2[0] + s2[1]


@fs.kernel
def sum_partials(partials: Array[Float]) -> Float:
    """Second phase of a reduction: one work-group sums the partial sums."""
    g = length(partials)
    total = fs.to_global(fs.build_workgroup(1, lambda w: group_sum(fs.to_local(fs.build_local(
        128, lambda l: ifold(lambda acc, j: acc + (partials[j * 128 + l] if j * 128 + l < g else f32(0.0)),
                             f32(0.0), (g + 127) // 128))))))
    return total[0]


@fs.kernel
def dot_partials(x: Array[Float], y: Array[Float]) -> Array[Float]:
    n = fs.min(length(x), length(y))
    g = fs.min((n + 2047) // 2048, 2048)
    return fs.to_global(fs.build_workgroup(g, lambda c: group_sum(fs.to_local(fs.build_local(
        128, lambda l: ifold(lambda acc, j: acc + (x[j * (g * 128) + c * 128 + l] * y[j * (g * 128) + c * 128 + l]
                                                   if j * (g * 128) + c * 128 + l < n else f32(0.0)),
                             f32(0.0), (n + g * 128 - 1) // (g * 128)))))))


@fs.kernel
def asum_partials(x: Array[Float]) -> Array[Float]:
    n = length(x)
    g = fs.min((n + 2047) // 2048, 2048)
    return fs.to_global(fs.build_workgroup(g, lambda c: group_sum(fs.to_local(fs.build_local(
        128, lambda l: ifold(lambda acc, j: acc + (fs.abs(x[j * (g * 128) + c * 128 + l])
                                                   if j * (g * 128) + c * 128 + l < n else f32(0.0)),
                             f32(0.0), (n + g * 128 - 1) // (g * 128)))))))


@fs.kernel
def dot(x: Array[Float], y: Array[Float]) -> Float:
    return sum_partials(dot_partials(x, y))


@fs.kernel
def asum(x: Array[Float]) -> Float:
    return sum_partials(asum_partials(x))


@fs.kernel
def scal(a: Float, x: Array[Float]) -> Array[Float]:
    return fs.vectorize(4, fs.build_global(length(x), lambda i: a * x[i]))


@fs.kernel
def gemv(alpha: Float, m: Array[Array[Float]], x: Array[Float], beta: Float, y: Array[Float]) -> Array[Float]:
    """alpha · m x + beta · y: one work-group per row."""
    n = fs.min(length(x), length(m[0]))
    return fs.build_workgroup(length(m), lambda i: alpha * group_sum(fs.to_local(fs.build_local(
        128, lambda l: ifold(lambda acc, j: acc + (m[i][j * 128 + l] * x[j * 128 + l] if j * 128 + l < n else f32(0.0)),
                             f32(0.0), (n + 127) // 128)))) + beta * y[i])


# ----------------------------------------------------------------------------- numpy oracles

def np_scal(a, x):
    return np.float32(a) * x


def np_asum(x):
    return float(np.sum(np.abs(x), dtype=np.float64))


def np_dot(x, y):
    return float(np.dot(x.astype(np.float64), y.astype(np.float64)))


def np_gemv(alpha, m, x, beta, y):
    return (alpha * (m.astype(np.float64) @ x.astype(np.float64)) + beta * y).astype(np.float32)


KERNELS = {"scal": scal, "asum": asum, "dot": dot, "gemv": gemv}
