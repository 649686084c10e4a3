"""Private memory for small arrays by default on OpenCL (``dpia.strategy_check.private_by_default``):
an intermediate array that one work-item computes and reads itself, of a constant size of at most
``dps.local_arrays.SMALL_ARRAY_BYTES`` bytes (the limit of C's local arrays too), is a private array of the kernel (``double v[3];``), not a hoisted
global buffer with one slice per work-item.  The buffers it leaves out are counted in the
artifact; what must stay global stays global (a symbolic or a larger size, ``to_global``, an array
a work-group shares, one a later launch reads, one a foreign function takes); and the kernels
give the reference's and numpy's results on Intel's CPU runtime and under Oclgrind's checks."""
from __future__ import annotations

import re

import numpy as np
import sympy

import fsmooth as fs
import foreign_kernels as fk
from corpus import adbench_ba
from fsmooth import Array, Double, build, ifold, length
from fsmooth.dps import local_arrays
from fsmooth.shape.sizes import size_symbol
from opencl_oclgrind import run_under_oclgrind
from test_adbench_corpus import ba_args
from test_corpus import assert_close, with_rows_of

TOL = dict(rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- kernels

@fs.kernel
def rotate_row(p: Array[Double], a: Double) -> Array[Double]:
    # a 2×2 rotation matrix and a 3-vector: small intermediates of one work-item
    rot = build(2, lambda r: build(2, lambda c: fs.cos(a) if r == c else (fs.sin(a) if r > c else 0.0 - fs.sin(a))))
    q = build(3, lambda k: p[k] * p[k] + a)
    return build(3, lambda k: rot[k][0] * q[0] + rot[k][1] * q[1] if k < 2
                 else q[2] * (rot[0][0] * rot[1][1] - rot[0][1] * rot[1][0]))


@fs.kernel
def rotated_rows(x: Array[Array[Double]], t: Array[Double]) -> Array[Array[Double]]:
    return build(length(x), lambda i: rotate_row(x[i], t[i]))


@fs.kernel
def rotate_row_in_global(p: Array[Double], a: Double) -> Array[Double]:
    # rotate_row with its intermediates put in global memory by the program: annotations win
    rot = fs.to_global(build(2, lambda r: fs.to_global(build(
        2, lambda c: fs.cos(a) if r == c else (fs.sin(a) if r > c else 0.0 - fs.sin(a))))))
    q = fs.to_global(build(3, lambda k: p[k] * p[k] + a))
    return build(3, lambda k: rot[k][0] * q[0] + rot[k][1] * q[1] if k < 2
                 else q[2] * (rot[0][0] * rot[1][1] - rot[0][1] * rot[1][0]))


@fs.kernel
def rotated_rows_in_global(x: Array[Array[Double]], t: Array[Double]) -> Array[Array[Double]]:
    return build(length(x), lambda i: rotate_row_in_global(x[i], t[i]))


@fs.kernel
def damped(p: Array[Double], steps: fs.Card) -> Array[Double]:
    # an ifold of a 3-vector state: its two buffers (the double buffer) private
    return ifold(lambda s, j: build(3, lambda k: s[k] * 0.5 + p[k] + s[(k + 1) % 3]), build(3, lambda k: p[k]), steps)


@fs.kernel
def damped_rows(x: Array[Array[Double]], steps: fs.Card) -> Array[Array[Double]]:
    return build(length(x), lambda i: damped(x[i], steps))


@fs.kernel
def products_of_powers(v: Array[Double]) -> Double:
    return v[0] * v[1] + v[2] * v[0]


@fs.kernel
def vectorised_powers(x: Array[Double]) -> Array[Double]:
    # vectorised: the lanes' 3-vectors, each a private array, are made lane by lane
    return fs.vectorize(4, fs.build_global(length(x), lambda i: products_of_powers(
        build(3, lambda k: fs.exp(x[i] * (k + 1.0))))))


@fs.kernel
def spread_64(row: Array[Double]) -> Double:
    w = build(64, lambda k: fs.exp(row[k % length(row)] / (k + 1.0)))  # 512 bytes: the limit
    return ifold(lambda acc, k: acc + w[k] * w[63 - k], 0.0, 64)


@fs.kernel
def spread_65(row: Array[Double]) -> Double:
    w = build(65, lambda k: fs.exp(row[k % length(row)] / (k + 1.0)))  # 520 bytes: past it
    return ifold(lambda acc, k: acc + w[k] * w[64 - k], 0.0, 65)


@fs.kernel
def spread_row(row: Array[Double]) -> Double:
    w = build(length(row), lambda k: fs.exp(row[k] / (k + 1.0)))  # a size known at run time only
    return ifold(lambda acc, k: acc + w[k] * w[length(row) - 1 - k], 0.0, length(row))


@fs.kernel
def spreads(x: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(x), lambda i: build(3, lambda c: spread_64(x[i]) if c == 0 else (
        spread_65(x[i]) if c == 1 else spread_row(x[i]))))


@fs.kernel
def scaled_row(row: Array[Double]) -> Array[Double]:
    # coeffs is the work-group's: written once for the group, read by its work-items
    coeffs = build(4, lambda k: row[k] * 2.0 + row[3 - k])
    return fs.build_local(8, lambda t: coeffs[t % 4] * row[t] + coeffs[(t + 1) % 4])


@fs.kernel
def group_rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
    return fs.build_workgroup(length(m), lambda r: scaled_row(m[r]))


@fs.kernel
def convolved_rows(x: Array[Array[Double]], k: Array[Double]) -> Array[Array[Double]]:
    # a 4-vector passed to a foreign function, whose arrays are in global memory
    return build(length(x), lambda i: fk.convolve(build(4, lambda j: x[i][j] * 2.0), k))


# ----------------------------------------------------------------------------- numpy oracles

def np_rotate_row(p, a):
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    q = p[:3] ** 2 + a
    return np.concatenate([rot @ q[:2], [q[2] * np.linalg.det(rot)]])


def np_rotated_rows(x, t):
    return np.array([np_rotate_row(p, a) for p, a in zip(x, t)]).reshape(len(x), 3)


def np_damped_rows(x, steps):
    out = []
    for p in x:
        s = p[:3].copy()
        for _ in range(steps):
            s = s * 0.5 + p[:3] + np.roll(s, -1)
        out.append(s)
    return np.array(out).reshape(len(x), 3)


def np_vectorised_powers(x):
    e = np.exp(np.outer(x, [1.0, 2.0, 3.0]))
    return e[:, 0] * e[:, 1] + e[:, 2] * e[:, 0]


def np_spreads(x):
    def spread(row, n):
        w = np.exp(row[np.arange(n) % len(row)] / (np.arange(n) + 1.0))
        return float(w @ w[::-1])
    return np.array([[spread(r, 64), spread(r, 65), spread(r, len(r))] for r in x]).reshape(len(x), 3)


def np_group_rows(m):
    coeffs = m[:, :4] * 2.0 + m[:, 3::-1]
    t = np.arange(8)
    return coeffs[:, t % 4] * m[:, :8] + coeffs[:, (t + 1) % 4]


def np_convolved_rows(x, k):
    return np.array([np.correlate(row[:4] * 2.0, k, mode="valid") for row in x]).reshape(len(x), 5 - len(k))


# ----------------------------------------------------------------------------- the plan


def _temp_counts(artifact) -> list:
    """The element counts of the hoisted global buffers, sorted."""
    return sorted((sympy.sympify(b.count) for b in artifact.buffers.values() if b.role == "temp"), key=str)


def _sorted(counts) -> list:
    return sorted(counts, key=str)


def _private_arrays(source: str) -> list[int]:
    """The lengths of the private arrays the kernels declare (``double r4[4];``)."""
    return sorted(int(n) for n in re.findall(r"^\s+double \w+\[(\d+)\];$", source, re.M))


def test_small_intermediates_are_private_arrays_not_buffers():
    rows = size_symbol("x_d0")
    private = rotated_rows.opencl_artifact()
    assert _temp_counts(private) == [] and _private_arrays(private.source) == [3, 4]  # q and rot
    # to_global keeps them where the program says: two buffers, a slice of each per work-item
    in_global = rotated_rows_in_global.opencl_artifact()
    assert _temp_counts(in_global) == _sorted([3 * rows, 4 * rows])
    assert _private_arrays(in_global.source) == []
    # an ifold's 3-vector state: the init and the two buffers it swaps
    damped_artifact = damped_rows.opencl_artifact()
    assert _temp_counts(damped_artifact) == [] and _private_arrays(damped_artifact.source) == [3, 3, 3]
    # four lanes, then the scalar loop of the last n mod 4 elements
    assert _temp_counts(vectorised_powers.opencl_artifact()) == []
    assert _private_arrays(vectorised_powers.opencl_artifact().source) == [3] * 5


def test_ba_objective_keeps_its_vectors_private(monkeypatch):
    """BA's rotated point, its cross products and its 2-vectors: six buffers of 16 doubles per
    observation in all, without the private default (a limit of 0 bytes); none with it."""
    observations = size_symbol("obs_d0")
    artifact = adbench_ba.ba_objective.opencl_artifact()
    assert _temp_counts(artifact) == []
    assert _private_arrays(artifact.source) == [2, 2, 3, 3, 3, 3]
    monkeypatch.setattr(local_arrays, "SMALL_ARRAY_BYTES", 0)
    global_default = adbench_ba.ba_objective.opencl_artifact()
    assert _temp_counts(global_default) == _sorted([2 * observations] * 2 + [3 * observations] * 4)
    assert _private_arrays(global_default.source) == []


def test_what_is_not_one_small_array_of_one_work_item_stays_global():
    rows, cols = size_symbol("x_d0"), size_symbol("x_d1")
    # 64 doubles are private, 65 and a row's length are not
    a = spreads.opencl_artifact()
    assert _private_arrays(a.source) == [64]
    assert _temp_counts(a) == _sorted([65 * rows, rows * cols])
    # shared by a work-group: written once for the group (by work-item 0, then a barrier)
    a = group_rows.opencl_artifact()
    assert _temp_counts(a) == [4 * size_symbol("m_d0")]
    assert "barrier(CLK_GLOBAL_MEM_FENCE);" in a.source and _private_arrays(a.source) == []
    # written by one launch (a top-level build is a kernel of its own), read by the next
    a = rotate_row.opencl_artifact()
    assert len(a.launches) == 3 and _temp_counts(a) == [3, 4]
    # passed to a foreign function: its prototype takes __global pointers
    a = convolved_rows.opencl_artifact()
    assert _temp_counts(a) == [4 * rows] and _private_arrays(a.source) == []


# ----------------------------------------------------------------------------- on devices

def _check(kernel, oracle, args, run, tol=TOL):
    got = run(kernel, *args)
    assert_close(got, with_rows_of(kernel.reference(*args), got), **tol)
    assert_close(got, oracle(*args), **tol)


def _on(context):
    return lambda kernel, *args: kernel.opencl(*args, context=context)


def test_private_intermediates_on_intel_cpu(intel_cpu_context, rng):
    run = _on(intel_cpu_context)
    for n in (0, 1, 7, 1000):
        x, t = rng.uniform(-1, 1, (n, 4)), rng.uniform(-3, 3, n)
        _check(rotated_rows, np_rotated_rows, (x, t), run)
        _check(rotated_rows_in_global, np_rotated_rows, (x, t), run)
        _check(damped_rows, np_damped_rows, (x, 5), run)
        _check(vectorised_powers, np_vectorised_powers, (t,), run)
        _check(spreads, np_spreads, (x,), run)
        _check(convolved_rows, np_convolved_rows, (x, rng.uniform(-1, 1, 2)), run)
        _check(group_rows, np_group_rows, (rng.uniform(-1, 1, (n, 9)),), run)
    for sizes in ((1, 1, 0), (2, 3, 5), (6, 20, 60), (20, 300, 1000)):
        _check(adbench_ba.ba_objective, adbench_ba.np_ba_objective, ba_args(rng, sizes), run,
               dict(rtol=1e-10, atol=1e-10))


def test_private_intermediates_under_oclgrind():
    ok, report = run_under_oclgrind("""
        import numpy as np
        from corpus import adbench_ba
        from test_adbench_corpus import ba_args
        import test_opencl_private as t
        rng = np.random.default_rng(12)
        run = lambda kernel, *args: kernel.opencl(*args)
        for n in (0, 1, 5):
            x = rng.uniform(-1, 1, (n, 4))
            t._check(t.rotated_rows, t.np_rotated_rows, (x, rng.uniform(-3, 3, n)), run)
            t._check(t.damped_rows, t.np_damped_rows, (x, 3), run)
        for n in (2, 5, 1):  # their global buffers grow, then are reused
            x = rng.uniform(-1, 1, (n, 4))
            t._check(t.spreads, t.np_spreads, (x,), run)
            t._check(t.convolved_rows, t.np_convolved_rows, (x, rng.uniform(-1, 1, 2)), run)
        t._check(t.group_rows, t.np_group_rows, (rng.uniform(-1, 1, (3, 9)),), run)
        t._check(adbench_ba.ba_objective, adbench_ba.np_ba_objective, ba_args(rng, (2, 3, 5)), run,
                 dict(rtol=1e-10, atol=1e-10))
    """, timeout=600)
    assert ok, report
