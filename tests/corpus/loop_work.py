"""Kernels whose cost the F̃ optimisations change (issue 11): a producer that fusion must not
push into a deeper loop, an invariant that must leave its loop, folds whose guard on the index
must become their bounds, folds whose step changes one element of their state.
tests/test_loop_work.py and tests/test_in_place.py count their work."""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, ifold, length


@fs.kernel
def fused_exp_sin(v: Array[Double], w: Array[Double]) -> Array[Double]:
    """The producer e is read in a loop inside a loop: materialised once (n exps, not m·n)."""
    e = build(length(v), lambda i: fs.exp(v[i]) * fs.sin(v[i]))
    return build(length(w), lambda j: ifold(lambda a, i: a + e[i] * w[j], 0.0, length(v)))


@fs.kernel
def normalise(v: Array[Double]) -> Array[Double]:
    """The norm is invariant in the build: computed once (linear, not quadratic)."""
    return build(length(v), lambda i: v[i] / fs.sqrt(ifold(lambda a, j: a + v[j] * v[j], 0.0, length(v))))


@fs.kernel
def guarded_invariant(w: Array[Double], v: Array[Double], m: Index) -> Array[Double]:
    """The inner fold is invariant but may fail (7 // m): hoisted under ``if 0 < length(w)``,
    so an empty w still runs nothing."""
    return build(length(w), lambda i: w[i] + ifold(lambda a, j: a + v[j] * (7 // m), 0.0, length(v)))


@fs.kernel
def lower_sums(v: Array[Double]) -> Array[Double]:
    """Σ_{j < i} exp(v[j]), written as a guard over all j."""
    n = length(v)
    return build(n, lambda i: ifold(lambda a, j: a + (fs.exp(v[j]) if j < i else 0.0), 0.0, n))


@fs.kernel
def lower_sums_inclusive(v: Array[Double]) -> Array[Double]:
    """Σ_{j ≤ i} exp(v[j]), the bound on the left of the comparison."""
    n = length(v)
    return build(n, lambda i: ifold(lambda a, j: a + (fs.exp(v[j]) if i >= j else 0.0), 0.0, n))


@fs.kernel
def upper_sums(v: Array[Double]) -> Array[Double]:
    """Σ_{j > i} exp(v[j]), the guarded term in the else branch."""
    n = length(v)
    return build(n, lambda i: ifold(lambda a, j: a + (0.0 if j <= i else fs.exp(v[j])), 0.0, n))


@fs.kernel
def upper_sums_inclusive(v: Array[Double]) -> Array[Double]:
    """Σ_{j ≥ i} exp(v[j])."""
    n = length(v)
    return build(n, lambda i: ifold(lambda a, j: a + (fs.exp(v[j]) if j >= i else 0.0), 0.0, n))


@fs.kernel
def guarded_product(v: Array[Double], i: Index, z: Double) -> Double:
    """z · Π_{j ≤ i} v[j] for any i (negative, past the end): a * 1.0 is exact, so the bound is
    min(i + 1, n) even with a variable start."""
    return ifold(lambda a, j: a * (v[j] if j <= i else 1.0), z, length(v))


@fs.kernel
def guarded_count(v: Array[Double], i: Index) -> Index:
    """How many j in [i, n) have v[j] > 0: an integer sum, exact from any start."""
    return ifold(lambda a, j: a + (int(v[j] > 0.0) if j >= i else 0), 0, length(v))


@fs.kernel
def signed_zero_sums(v: Array[Double], i: Index, z: Double) -> Double:
    """z + Σ_{j < i} v[j] from a variable start: a skipped trip's a + 0.0 turns -0.0 into +0.0,
    so this guard stays a guard."""
    return ifold(lambda a, j: a + (v[j] if j < i else 0.0), z, length(v))


@fs.kernel
def skinned(weights: Array[Array[Double]], transforms: Array[Array[Array[Double]]],
            points: Array[Array[Double]]) -> Array[Array[Double]]:
    """ADBench's skinning, Σ_b weights[b][v] (transforms[b] · points[v])[r]: the fold over b reads
    weights down a column, so it runs outermost, each element accumulating in place
    (``fsmooth.dpia.interchange``), bit for bit the same sums."""
    return build(length(points), lambda v: build(3, lambda r: ifold(
        lambda acc, b: acc + weights[b][v] * ifold(lambda s, c: s + transforms[b][r][c] * points[v][c], 0.0, 4),
        0.0, length(weights))))


@fs.kernel
def histogram(bins: Array[Index], n: Card) -> Array[Double]:
    """How many of ``bins`` fall in each of n bins (one outside [0, n) in none): a fold whose
    step changes one element of its state, which it updates in place (``fsmooth.dps.in_place``):
    one scalar written a step, not n."""
    return ifold(lambda counts, i: build(n, lambda k: counts[k] + 1.0 if k == bins[i] else counts[k]),
                 build(n, lambda k: 0.0), length(bins))


@fs.kernel
def shift_one(v: Array[Double], order: Array[Index]) -> Array[Double]:
    """Step i sets element order[i] to its right neighbour's (cyclically): the step reads the
    state elsewhere than where it writes, so it keeps its two buffers."""
    n = length(v)
    return ifold(lambda s, i: build(n, lambda k: s[(k + 1) % n] if k == order[i] else s[k]), v, length(order))


# ----------------------------------------------------------------------------- numpy oracles

def np_fused_exp_sin(v, w):
    return w * np.sum(np.exp(v) * np.sin(v))


def np_normalise(v):
    return v / np.sqrt(np.sum(v * v))


def np_guarded_invariant(w, v, m):
    return w + np.sum(v) * (7 // m) if len(w) else np.zeros(0)


def _lower(v, inclusive):
    e = np.exp(v)
    return np.array([e[:i + inclusive].sum() for i in range(len(v))])


def np_lower_sums(v):
    return _lower(v, 0)


def np_lower_sums_inclusive(v):
    return _lower(v, 1)


def _upper(v, inclusive):
    e = np.exp(v)
    return np.array([e[i + 1 - inclusive:].sum() for i in range(len(v))])


def np_upper_sums(v):
    return _upper(v, 0)


def np_upper_sums_inclusive(v):
    return _upper(v, 1)


def np_guarded_product(v, i, z):
    return z * float(np.prod(v[:max(i + 1, 0)]))


def np_guarded_count(v, i):
    return int(np.sum(v[max(i, 0):] > 0.0))


def np_signed_zero_sums(v, i, z):
    return z + float(np.sum(v[:max(i, 0)]))


def np_skinned(weights, transforms, points):
    return np.einsum("bv,brc,vc->vr", weights, transforms[:, :3, :4], points[:, :4])


def np_histogram(bins, n):
    return np.bincount(bins[(bins >= 0) & (bins < n)], minlength=n).astype(np.float64)[:n]


def np_shift_one(v, order):
    s = np.array(v, dtype=np.float64)
    for j in order:
        if 0 <= j < len(s):
            s[j] = s[(j + 1) % len(s)]
    return s
