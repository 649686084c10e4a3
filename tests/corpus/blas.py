"""The BLAS kernels of the DPIA paper's §7 (scal, asum, dot, gemv) in F̃ with OpenCL strategies,
and their numpy oracles.  As Python (``kernel.reference``) and as C the strategies mean nothing;
through OpenCL (``kernel.opencl``) they are the paper's §6.3 strategy, with index arithmetic in
place of split/join:

- ``g`` work-groups (one per 16384 elements, at most 1024) stride over the vector; in group ``c``,
  element ``t`` of a local array of 1024 sums the terms ``1024 g j + 1024 c + t`` in private
  memory, 4-wide vectorised (``asVector4``: 256 work-items, each a ``float4`` of 4 consecutive
  elements, read with ``vload4``);
- the group halves the 1024 sums in local memory down to one (``group_sum``), one barrier per
  step, and writes the chunk's partial sum to global memory;
- a second kernel of one work-group sums the (at most 1024) partial sums the same way, 4-wide,
  and, after a barrier, writes the total: two launches in order, the partials a hoisted 'temp' buffer.

Each guard ``k < n`` bounds the reads under it, so the generated code checks nothing at run time
there; ``n`` is the smaller of the lengths read (``fs.min``), which is what lets the guard cover
``y`` in ``dot`` and the row of ``m`` in ``gemv`` too.

``dot_auto``, ``asum_auto`` and ``gemv_auto`` are ``dot``, ``asum`` and ``gemv`` with no strategy at
all: the OpenCL back end parallelises their folds (``fsmooth.auto_reductions``, its strategy chosen
for the device by ``fsmooth.cost_model``), for the benchmark to time beside these.

``scal`` is element-wise, 4-wide vectorised (``vload4``/``vstore4``); ``gemv`` gives each row
to one work-group, which reduces it like ``dot``.

No ``from __future__ import annotations``: the annotations are the F̃ types themselves.
"""
import typing

import numpy as np

import fsmooth as fs
from fsmooth import Array, Card, Float, Index, ifold, length


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
def group_sum_1024(s: Array[Float]) -> Float:
    """The sum of the 1024 elements of ``s``, by the work-items of one group."""
    return group_sum(halve(halve(halve(s))))


@fs.kernel
def sum_partials(partials: Array[Float]) -> Float:
    """Second phase of a reduction: one work-group sums the partial sums, 4-wide."""
    g = length(partials)
    total = fs.to_global(fs.build_workgroup(1, lambda w: group_sum_1024(fs.to_local(fs.vectorize(4, fs.build_local(
        1024, lambda t: ifold(lambda acc, j: acc + (partials[j * 1024 + t] if j * 1024 + t < g else f32(0.0)),
                              f32(0.0), (g + 1023) // 1024)))))))
    return total[0]


@fs.kernel
def partial_sums(n: Card, term: typing.Callable[[Index], Float]) -> Array[Float]:
    """First phase of a reduction of ``term(k)`` over ``k < n``: one partial sum per work-group."""
    g = fs.min((n + 16383) // 16384, 1024)
    return fs.to_global(fs.build_workgroup(g, lambda c: group_sum_1024(fs.to_local(fs.vectorize(
        4, fs.build_local(1024, lambda t: ifold(
            lambda acc, j: acc + (term(j * (g * 1024) + c * 1024 + t) if j * (g * 1024) + c * 1024 + t < n
                                  else f32(0.0)),
            f32(0.0), (n + g * 1024 - 1) // (g * 1024))))))))


@fs.kernel
def dot(x: Array[Float], y: Array[Float]) -> Float:
    return sum_partials(partial_sums(fs.min(length(x), length(y)), lambda k: x[k] * y[k]))


@fs.kernel
def asum(x: Array[Float]) -> Float:
    return sum_partials(partial_sums(length(x), lambda k: fs.abs(x[k])))


@fs.kernel
def dot_auto(x: Array[Float], y: Array[Float]) -> Float:
    """``dot`` without strategies: the OpenCL back end makes the fold a two-phase reduction itself
    (``fsmooth.auto_reductions``), with the shape ``partial_sums`` writes by hand."""
    return ifold(lambda acc, k: acc + x[k] * y[k], f32(0.0), fs.min(length(x), length(y)))


@fs.kernel
def asum_auto(x: Array[Float]) -> Float:
    """``asum`` without strategies (see ``dot_auto``)."""
    return ifold(lambda acc, k: acc + fs.abs(x[k]), f32(0.0), length(x))


@fs.kernel
def gemv_auto(alpha: Float, m: Array[Array[Float]], x: Array[Float], beta: Float, y: Array[Float]) -> Array[Float]:
    """``gemv`` without strategies: the cost model (``fsmooth.cost_model``) picks a work-group per
    row on a GPU, a work-item per row on a CPU."""
    n = fs.min(length(x), length(m[0]))
    return fs.build(length(m), lambda i: alpha * ifold(lambda acc, j: acc + m[i][j] * x[j], f32(0.0), n) + beta * y[i])


@fs.kernel
def scal(a: Float, x: Array[Float]) -> Array[Float]:
    return fs.vectorize(4, fs.build_global(length(x), lambda i: a * x[i]))


@fs.kernel
def gemv(alpha: Float, m: Array[Array[Float]], x: Array[Float], beta: Float, y: Array[Float]) -> Array[Float]:
    """alpha · m x + beta · y: one work-group per row, which reduces it as ``partial_sums`` does a
    chunk (1024 sums, 4-wide vectorised)."""
    n = fs.min(length(x), length(m[0]))
    return fs.build_workgroup(length(m), lambda i: alpha * group_sum_1024(fs.to_local(fs.vectorize(4, fs.build_local(
        1024, lambda t: ifold(lambda acc, j: acc + (m[i][j * 1024 + t] * x[j * 1024 + t] if j * 1024 + t < n
                                                    else f32(0.0)),
                              f32(0.0), (n + 1023) // 1024))))) + beta * y[i])


# ----------------------------------------------------------------------------- numpy oracles

def np_scal(a, x):
    return np.float32(a) * x


def np_asum(x):
    return float(np.sum(np.abs(x), dtype=np.float64))


def np_dot(x, y):
    return float(np.dot(x.astype(np.float64), y.astype(np.float64)))


def np_gemv(alpha, m, x, beta, y):
    return (alpha * (m.astype(np.float64) @ x.astype(np.float64)) + beta * y).astype(np.float32)


KERNELS = {"scal": scal, "asum": asum, "dot": dot, "gemv": gemv, "dot_auto": dot_auto, "asum_auto": asum_auto,
           "gemv_auto": gemv_auto}
AUTO = {"dot_auto": "dot", "asum_auto": "asum", "gemv_auto": "gemv"}
"""The kernels without strategies, by the operation (and hand-written kernel) they compute."""
