"""Tuples: folds over tuple states (argmax, online softmax, Welford), tuple results and
parameters, nested tuples, tuples in conditionals and array components of a fold's state."""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, ifold, length


@fs.kernel
def argmax(v: Array[Double]) -> tuple[Double, Index]:
    # the literal 0 of the initial state is an Index: the state's second component is one
    return ifold(lambda best, i: (v[i], i) if v[i] > best[0] else best, (v[0], 0), length(v))


@fs.kernel
def online_logsumexp(v: Array[Double]) -> Double:
    """One pass: the running maximum and the sum of exp(v - maximum) (online softmax)."""
    m, s = ifold(lambda state, i: logsumexp_step(state, v[i]), (v[0], 0.0), length(v))
    return m + fs.log(s)


@fs.kernel
def logsumexp_step(state: tuple[Double, Double], x: Double) -> tuple[Double, Double]:
    m, s = state
    top = fs.max(m, x)
    return top, s * fs.exp(m - top) + fs.exp(x - top)


@fs.kernel
def welford(v: Array[Double]) -> tuple[Double, Double]:
    """Mean and (population) variance in one pass (Welford)."""
    count, mean, m2 = ifold(lambda s, i: welford_step(s, v[i]), (0.0, 0.0, 0.0), length(v))
    return mean, m2 / count


@fs.kernel
def welford_step(s: tuple[Double, Double, Double], x: Double) -> tuple[Double, Double, Double]:
    n = s[0] + 1.0
    delta = x - s[1]
    mean = s[1] + delta / n
    return n, mean, s[2] + delta * (x - mean)


@fs.kernel
def scale_and_sum(v: Array[Double], p: tuple[Double, Array[Double]]) -> tuple[Array[Double], Double]:
    a, w = p
    scaled = build(length(v), lambda i: a * v[i] + w[i])
    return scaled, ifold(lambda acc, i: acc + scaled[i], 0.0, length(v))


@fs.kernel
def min_max_rows(m: Array[Array[Double]]) -> tuple[tuple[Array[Double], Array[Double]], Card]:
    lows = build(length(m), lambda i: ifold(lambda acc, j: fs.min(acc, m[i][j]), m[i][0], length(m[0])))
    highs = build(length(m), lambda i: ifold(lambda acc, j: fs.max(acc, m[i][j]), m[i][0], length(m[0])))
    return (lows, highs), length(m)


@fs.kernel
def ordered(x: Double, y: Double) -> tuple[Double, Double]:
    if x <= y:
        return x, y
    return y, x


@fs.kernel
def smooth_count(v: Array[Double], steps: Card) -> tuple[Array[Double], Card, Double]:
    """A fold whose state holds an array: repeated 3-point smoothing, the number of steps and the
    running sum of the middle element."""
    n = length(v)
    return ifold(lambda s, k: (build(n, lambda i: (s[0][i - 1 if i > 0 else i] + s[0][i]
                                                   + s[0][i + 1 if i + 1 < n else i]) / 3.0),
                               s[1] + 1, s[2] + s[0][n // 2]),
                 (v, 0, 0.0), steps)


@fs.kernel
def swap_steps(a: Double, b: Double, n: Card) -> tuple[Double, Double]:
    """Each step swaps the components: reading one while writing the other must not mix them."""
    return ifold(lambda s, i: (s[1], s[0] + 1.0), (a, b), n)


@fs.kernel
def calls_tuple_kernels(v: Array[Double]) -> tuple[Double, Double, Index]:
    mean, var = welford(v)
    best, at = argmax(v)
    return mean + var, best, at


# ----------------------------------------------------------------------------- numpy oracles

def np_argmax(v):
    return float(np.max(v)), int(np.argmax(v))


def np_online_logsumexp(v):
    return float(np.logaddexp.reduce(v))


def np_logsumexp_step(state, x):
    top = max(state[0], x)
    return top, state[1] * np.exp(state[0] - top) + np.exp(x - top)


def np_welford(v):
    if len(v) == 0:  # the recurrence's mean of nothing is its initial 0.0, the variance 0/0
        return 0.0, float("nan")
    return float(np.mean(v)), float(np.var(v))


def np_welford_step(s, x):
    n = s[0] + 1.0
    mean = s[1] + (x - s[1]) / n
    return n, mean, s[2] + (x - s[1]) * (x - mean)


def np_scale_and_sum(v, p):
    scaled = p[0] * v + p[1][:len(v)]
    return scaled, float(np.sum(scaled))


def np_min_max_rows(m):
    return (m.min(axis=1), m.max(axis=1)), m.shape[0]


def np_ordered(x, y):
    return (min(x, y), max(x, y))


def np_smooth_count(v, steps):
    s, total = v.copy(), 0.0
    for _ in range(steps):
        total += s[len(s) // 2]
        s = (np.concatenate([s[:1], s[:-1]]) + s + np.concatenate([s[1:], s[-1:]])) / 3.0
    return s, steps, total


def np_swap_steps(a, b, n):
    for _ in range(n):
        a, b = b, a + 1.0
    return a, b


def np_calls_tuple_kernels(v):
    mean, var = np_welford(v)
    best, at = np_argmax(v)
    return mean + var, best, at


@fs.kernel
def named_like_outputs(v: Array[Double]) -> tuple[Double, Double]:
    """Binders named like the kernel's destinations (out, out_0) must not shadow them."""
    out = ifold(lambda acc, i: acc + v[i], 0.0, length(v))
    out_0 = out * 2.0
    return out, out_0 + 1.0


def np_named_like_outputs(v):
    return float(np.sum(v)), 2.0 * float(np.sum(v)) + 1.0
