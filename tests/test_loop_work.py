"""Issue 11, proven by counting work: the primitives and loop trips that the DPS interpreter
(``fsmooth.dps.interp``, ``Run.work``) evaluates, with each F̃ optimisation on and off, and at
n and 4n where it is the complexity that changes.  Fusion never multiplies a producer's work,
loop-invariant code motion evaluates an invariant once, and a guard on a fold's index becomes
its bounds, bit for bit.  The kernels are tests/corpus/loop_work.py (compiled, reference and
numpy at sizes 0, 1 and large are tests/test_corpus.py's)."""
from __future__ import annotations

import math
import re
import zlib
from dataclasses import replace

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import adbench_ba, adbench_gmm, loop_work
from fsmooth import Array, Bool, Card, Double, Index, build, core, ifold, length
from fsmooth.anf import anf_program
from fsmooth.driver import compile_to_c
from fsmooth.dps.interp import run_kernel
from fsmooth.dps.simplify import simplify_allocs
from fsmooth.dps.translate import dps_program
from fsmooth.optimize import optimize_program
from fsmooth.options import Options
from fsmooth.shape.translate import shape_program
from test_codegen_c import ASAN, Runner, run_under_address_sanitizer

COMPARISONS = ("lt", "le", "gt", "ge")


def optimized(kernel: fs.Kernel, **changes) -> core.KernelDef:
    return optimize_program(anf_program(kernel.program()), replace(Options(), **changes)).main


def run(kernel: fs.Kernel, *args, **changes):
    """The DPS interpreter's run of ``kernel`` compiled with the defaults and ``changes``: its
    result and the work it did; its arena peak is the computed scratch."""
    options = replace(Options(), **changes)
    anf = optimize_program(anf_program(kernel.program()), options)
    result = run_kernel(simplify_allocs(dps_program(anf, shape_program(anf)), options), kernel.name, list(args))
    assert result.high_water <= result.scratch
    return result


def trips(work) -> int:
    return work["build trip"] + work["ifold trip"]


def nodes(e: core.Expr, node_type) -> list:
    return [t for t in core.walk(e) if isinstance(t, node_type)]


def rng_for(name: str):
    return np.random.default_rng(zlib.crc32(name.encode()))


# ----------------------------------------------------------------------------- work-preserving fusion

def test_a_producer_read_in_a_deeper_loop_is_computed_once():
    rng = rng_for("fused_exp_sin")
    v = rng.uniform(-1, 1, 20)
    for m in (20, 80):  # the case: m·n exps and sines when fused into the j loop
        w = rng.uniform(-1, 1, m)
        r = run(loop_work.fused_exp_sin, v, w)
        assert r.work["exp"] == r.work["sin"] == 20
        np.testing.assert_allclose(r.result, loop_work.np_fused_exp_sin(v, w), rtol=1e-12)
    k = optimized(loop_work.fused_exp_sin)
    assert len(nodes(k.body, core.Build)) == 2  # e is materialised, once, before the j loop


@fs.kernel
def map_map(v: Array[Double]) -> Array[Double]:
    e = build(length(v), lambda i: fs.exp(v[i]))
    return build(length(v), lambda i: e[i] * 2.0)


@fs.kernel
def map_fold(v: Array[Double]) -> Double:
    e = build(length(v), lambda i: fs.exp(v[i]))
    return ifold(lambda a, i: a + e[i], 0.0, length(v))


@fs.kernel
def cheap_into_a_deeper_loop(v: Array[Double], w: Array[Double]) -> Array[Double]:
    e = build(length(v), lambda i: v[i] * 2.0)
    return build(length(w), lambda j: ifold(lambda a, i: a + e[i] * w[j], 0.0, length(v)))


@pytest.mark.parametrize("kernel, builds", [(map_map, 1), (map_fold, 0), (cheap_into_a_deeper_loop, 1)],
                         ids=["map-map", "map-fold", "cheap-element"])
def test_a_producer_read_once_per_element_or_cheap_is_still_fused(kernel, builds):
    k = optimized(kernel)
    assert len(nodes(k.body, core.Build)) == builds
    v = rng_for(kernel.name).uniform(-1, 1, 9)
    args = (v,) * len(kernel.program().main.params)
    np.testing.assert_allclose(kernel(*args), kernel.reference(*args), rtol=1e-12)
    if kernel is not cheap_into_a_deeper_loop:
        assert run(kernel, *args).work["exp"] == 9


@fs.kernel
def centred_triangle(x: Array[Double], mu: Array[Double]) -> Double:
    # GMM's centred point: read at the diagonal and along each row of the triangle
    xc = build(length(x), lambda i: x[i] - mu[i])
    return ifold(lambda acc, i: acc + xc[i] * ifold(lambda s, j: s + xc[j], 0.0, i), 0.0, length(x))


@fs.kernel
def centred_3(x: Array[Double], mu: Array[Double]) -> Double:
    xc = build(3, lambda i: x[i] - mu[i])
    return xc[0] * xc[1] + xc[2] * xc[0]


def test_cheap_elements_read_several_times_are_computed_where_read_unless_in_registers():
    """A build of cheap elements read at several places is no array at all: each read computes
    its element, one subtraction where a materialised element costs one read (on a GPU that array
    would be a work-item's region of global memory).  A small array of a constant size stays: in
    registers, its reads cost less than the operation again."""
    assert not nodes(optimized(centred_triangle).body, core.Build)
    assert len(nodes(optimized(centred_3).body, core.Build)) == 1
    rng = rng_for("centred_triangle")
    for n in (0, 1, 7, 40):
        x, mu = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
        r = run(centred_triangle, x, mu)
        assert r.scratch == 0 and r.work["sub"] == n + n * (n - 1) // 2  # one a read
        xc = x - mu
        oracle = sum(xc[i] * xc[:i].sum() for i in range(n))
        assert centred_triangle(x, mu) == centred_triangle.reference(x, mu) == r.result
        np.testing.assert_allclose(r.result, oracle, rtol=1e-12, atol=1e-12)
    x, mu = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3)
    assert run(centred_3, x, mu).work["sub"] == 3
    assert centred_3(x, mu) == centred_3.reference(x, mu)


# ----------------------------------------------------------------------------- loop-invariant code motion

def test_the_norm_leaves_the_loop_linear_not_quadratic():
    rng = rng_for("normalise")
    small, large = rng.uniform(0.5, 2, 25), rng.uniform(0.5, 2, 100)
    hoisted = [run(loop_work.normalise, v).work for v in (small, large)]
    kept = [run(loop_work.normalise, v, licm=False).work for v in (small, large)]
    assert [trips(w) for w in hoisted] == [50, 200]  # n + n: ratio 4 for 4n
    assert [trips(w) for w in kept] == [25 + 25 * 25, 100 + 100 * 100]  # ratio about 16
    assert [w["sqrt"] for w in hoisted] == [1, 1] and [w["sqrt"] for w in kept] == [25, 100]
    np.testing.assert_allclose(run(loop_work.normalise, large).result, loop_work.np_normalise(large), rtol=1e-12)


def test_an_invariant_that_may_fail_moves_guarded():
    k = optimized(loop_work.guarded_invariant)
    (loop,) = nodes(k.body, core.Build)
    assert not nodes(loop.fn.body, core.Ifold)  # the fold left the build ...
    assert any(isinstance(t, core.If) and nodes(t.then, core.Ifold) for t in core.walk(k.body))  # ... under a guard
    w, v = np.arange(1.0, 9.0), np.arange(1.0, 6.0)
    assert trips(run(loop_work.guarded_invariant, w, v, 3).work) == 8 + 5  # not 8 + 8·5
    f = loop_work.guarded_invariant
    empty = np.zeros(0)
    # the loop runs zero times: no division by zero, in the reference and compiled
    for args in ((empty, v, 0), (empty, empty, 0), (w, empty, 0)):
        np.testing.assert_array_equal(f(*args), f.reference(*args))
        np.testing.assert_array_equal(run(f, *args).result, f.reference(*args))
    assert f(w, empty, 0).tolist() == w.tolist()
    for call in (f, f.reference):
        with pytest.raises(ZeroDivisionError):
            call(w, v, 0)


@fs.kernel
def scaled_by_first(w: Array[Double], v: Array[Double]) -> Array[Double]:
    return build(length(w), lambda i: w[i] * v[0])


@fs.kernel
def sum_in_a_branch(v: Array[Double], c: Bool) -> Array[Double]:
    return build(length(v), lambda i: ifold(lambda a, j: a + v[j], 0.0, length(v)) if c else v[i])


def test_what_may_fail_without_a_loop_and_what_sits_in_a_branch_stay():
    (loop,) = nodes(optimized(scaled_by_first).body, core.Build)
    assert any(t.arr.name == "v" for t in nodes(loop.fn.body, core.Get))  # v[0] stays: w may be empty
    assert scaled_by_first(np.zeros(0), np.zeros(0)).shape == (0,)
    (loop,) = nodes(optimized(sum_in_a_branch).body, core.Build)
    (branch,) = nodes(loop.fn.body, core.If)
    assert nodes(branch.then, core.Ifold)  # not hoisted out of its branch
    v = np.arange(1.0, 6.0)
    for c in (True, False):
        np.testing.assert_array_equal(sum_in_a_branch(v, c), sum_in_a_branch.reference(v, c))


# ----------------------------------------------------------------------------- guards become bounds

TRIANGLES = [  # kernel, trips of the folds at size n (the build's n trips apart)
    (loop_work.lower_sums, lambda n: n * (n - 1) // 2),
    (loop_work.lower_sums_inclusive, lambda n: n * (n + 1) // 2),
    (loop_work.upper_sums, lambda n: n * (n - 1) // 2),
    (loop_work.upper_sums_inclusive, lambda n: n * (n + 1) // 2),
]


@pytest.mark.parametrize("kernel, fold_trips", TRIANGLES, ids=[k.name for k, _ in TRIANGLES])
def test_a_guarded_fold_runs_only_its_triangle_without_a_branch(kernel, fold_trips):
    assert not nodes(optimized(kernel).body, core.If)
    assert nodes(optimized(kernel, guards_to_bounds=False).body, core.If)
    assert "fs_status = 1" not in kernel.c_source()  # the shifted reads are proven in range: no check
    for n in (0, 1, 12):
        v = rng_for(kernel.name).uniform(-1, 1, n)
        bounded, guarded = run(kernel, v), run(kernel, v, guards_to_bounds=False)
        assert bounded.work["ifold trip"] == fold_trips(n) and guarded.work["ifold trip"] == n * n
        assert not any(bounded.work[op] for op in COMPARISONS) and sum(guarded.work[op] for op in COMPARISONS) == n * n
        assert bounded.work["exp"] == guarded.work["exp"] == fold_trips(n)
        # bit for bit: the skipped trips added +0.0 to an accumulator that started at +0.0
        assert bounded.result.tobytes() == guarded.result.tobytes() == kernel.reference(v).tobytes()
        assert kernel(v).tobytes() == kernel.reference(v).tobytes()


EXTREMES = (-2**63, -5, -1, 0, 3, 6, 7, 2**63 - 1)


def test_a_product_guard_is_a_bound_for_every_index_bit_for_bit():
    v = rng_for("guarded_product").uniform(0.5, 1.5, 7)
    f = loop_work.guarded_product
    assert not nodes(optimized(f).body, core.If)  # a * 1.0 is exact: rewritten from any start
    for i in EXTREMES:
        for z in (-0.0, 0.0, 2.5, math.inf):
            expected = f.reference(v, i, z)
            r = run(f, v, i, z)
            assert r.work["ifold trip"] == min(max(i + 1, 0), 7)
            for got in (r.result, f(v, i, z)):
                assert np.float64(got).tobytes() == np.float64(expected).tobytes(), (i, z)


def test_an_integer_sum_guard_is_a_bound_for_every_index():
    v = rng_for("guarded_count").uniform(-1, 1, 7)
    f = loop_work.guarded_count
    assert not nodes(optimized(f).body, core.If)
    for i in EXTREMES:
        r = run(f, v, i)
        assert r.work["ifold trip"] == 7 - min(max(i, 0), 7)
        assert r.result == f(v, i) == f.reference(v, i) == loop_work.np_guarded_count(v, i)


def test_a_float_sum_from_a_variable_start_keeps_its_guard():
    # -0.0 + 0.0 is +0.0: with a start that may be -0.0 a skipped trip is not the identity
    f = loop_work.signed_zero_sums
    assert nodes(optimized(f).body, core.If)
    v = np.array([-0.0, -0.0, 1.0])
    for i in (0, 1, 2, 3):
        expected = f.reference(v, i, -0.0)
        assert np.float64(f(v, i, -0.0)).tobytes() == np.float64(expected).tobytes()
        assert np.float64(run(f, v, i, -0.0).result).tobytes() == np.float64(expected).tobytes()
    assert np.signbit(f.reference(v, 2, -0.0)) == False  # the reference's own sign: +0.0  # noqa: E712
    assert np.signbit(f(v[:2], 2, -0.0))  # no skipped trip: -0.0 stays


# ----------------------------------------------------------------------------- GMM

def _gmm_args(n, k, d):
    rng = rng_for("gmm")
    icf = np.concatenate([rng.uniform(-0.5, 0.5, (k, d)), rng.uniform(-1, 1, (k, d * (d - 1) // 2))], axis=1)
    return (rng.uniform(-1, 1, k), rng.uniform(-2, 2, (k, d)), icf, rng.uniform(-2, 2, (n, d)), 1.5, 2)


def test_gmm_computes_the_exp_of_the_diagonal_once_not_per_point():
    k, d = 3, 4
    exps = {}
    for n in (2, 8):
        args = _gmm_args(n, k, d)
        r = run(adbench_gmm.gmm_full_objective, *args)
        np.testing.assert_allclose(r.result, adbench_gmm.np_gmm_full_objective(*args), rtol=1e-10)
        exps[n] = r.work["exp"]
    # per point only logsumexp's K exps: the diagonal's K·d are outside the loop over points
    assert exps[8] - exps[2] == (8 - 2) * k


def _loop_bodies(source: str) -> list[str]:
    """The text of every ``for`` loop of ``source``, from its header to its closing brace."""
    bodies = []
    for start in (m.start() for m in re.finditer(r"\bfor \(", source)):
        depth, end = 0, source.index("{", start)
        for end in range(end, len(source)):
            depth += {"{": 1, "}": -1}.get(source[end], 0)
            if depth == 0:
                break
        bodies.append(source[start:end + 1])
    return bodies


def test_gmm_packed_triangle_index_through_the_abi(tmp_path):
    """Q_k's packed index d + j(2d-j-1)/2 + (i-j-1) has floor(j(-1-j)/2), a negative dividend:
    it was a call of fs_floordiv_i64 (a division, a remainder and two sign tests) on every
    entry of every triangle of every point; by the constant 2 it is a shift
    (fs_shift_floor_i64), in no loop a division (and with reduce_strength, no shift either: the
    subscript is kept running).  Through the ABI (UBSan, ASan under ASAN) both agree with numpy."""
    f = adbench_gmm.gmm_full_objective
    for options in (Options(reduce_strength=False), Options()):
        artifact = compile_to_c(f.program(), options)
        loops = _loop_bodies(artifact.source)
        assert not [body for body in loops if "floordiv" in body]
        # in icf's subscript (the jammed points' loops count ⌊n/4⌋ with a shift, and start at 4⌊n/4⌋)
        assert any(re.search(r"icf\[[^\];]*fs_shift_floor_i64\(", body) for body in loops) != options.reduce_strength
        (tmp_path / str(options.reduce_strength)).mkdir()
        run_c = Runner(artifact, tmp_path / str(options.reduce_strength), f.name)
        for n, k, d in ((0, 1, 1), (1, 1, 1), (3, 2, 5), (17, 4, 9)):
            args = _gmm_args(max(n, 1), k, d)
            args = (*args[:3], args[3][:n], *args[4:])
            if n == 0:  # x[0] gives d: an empty x is out of range in the reference and compiled
                with pytest.raises(IndexError):
                    f.reference(*args)
                continue
            np.testing.assert_allclose(run_c(*args), adbench_gmm.np_gmm_full_objective(*args), rtol=1e-10)


# ----------------------------------------------------------------------------- invariant checks leave their loop

@fs.kernel
def next_row_dot(m: Array[Array[Double]], v: Array[Double], t: Index) -> Double:
    """As LSTM's loss: row t + 1 of m, read inside a fold over the columns."""
    return ifold(lambda acc, i: acc + m[t + 1][i] * v[i], 0.0, length(v))


def _checks_in_loops(source: str) -> int:
    """The checks (checked integer arithmetic, failing tests) inside some loop of ``source``,
    each counted once (in its innermost loop)."""
    inner = [body for body in _loop_bodies(source) if "for (" not in body[5:]]
    outer = [body for body in _loop_bodies(source) if body not in inner]
    lines = {line for body in inner + outer for line in body.splitlines()[1:]}
    return sum(1 for line in lines if "fs_checked_" in line or "fs_status = " in line)


def test_a_loop_invariant_check_runs_once_before_the_loop_through_the_abi(tmp_path):
    """m[t + 1] inside the fold over i: the overflow check of t + 1 and the range test of row
    t + 1 ran on every trip; they run once, before the loop, under the loop's own test that it
    runs (``if (0 < v_d0)``).  A loop of no trips fails nowhere its reference does not: t + 1
    overflowing or out of range with v empty gives 0.0, in the reference and compiled."""
    f = next_row_dot
    hoisted = compile_to_c(f.program(), Options()).source
    kept = compile_to_c(f.program(), Options(hoist_checks=False)).source
    assert _checks_in_loops(kept) == 3  # the overflow test, the row's range test, t + 1 itself
    assert _checks_in_loops(hoisted) == 0
    assert "if (0 < v_d0) {" in hoisted and "if (0 < v_d0)" not in kept
    m, v = rng_for("rows").uniform(-1, 1, (4, 3)), rng_for("v").uniform(-1, 1, 3)
    run_c = Runner(compile_to_c(f.program(), Options()), tmp_path, f.name)
    for t in (-1, 0, 2):
        assert f(m, v, t) == f.reference(m, v, t) == run_c(m, v, t)
        assert math.isclose(f(m, v, t), float(m[t + 1] @ v), rel_tol=1e-12)
    empty = np.zeros(0)
    for t in (2**63 - 1, 3, -2, -2**63):  # overflows, out of range, out of range, in range
        assert f(m, empty, t) == f.reference(m, empty, t) == run_c(m, empty, t) == 0.0
    for t, error, status in ((2**63 - 1, OverflowError, 6), (3, IndexError, 1), (-2, IndexError, 1)):
        assert run_c(m, v, t) == ("status", status)
        for call in (f, f.reference):
            with pytest.raises(error):
                call(m, v, t)


@fs.kernel
def wrapped_reads(v: Array[Double], n: Card) -> Double:
    """The micro-benchmarks' consumer (benchmarks/micro_kernels.py, read_twice): reads at indices
    taken modulo the length, from a nonnegative dividend and from one of either sign."""
    return ifold(lambda acc, it: acc + v[it % length(v)] + v[(it * 7 + 1) % length(v)]
                 + v[(it - 3) % length(v)], 0.0, n)


def test_a_read_modulo_its_length_is_proven_past_the_zero_test_through_the_abi(tmp_path):
    """v[x % length(v)] once the zero test of length(v) has passed (before the loop) needs no
    range test: 0 <= x % length(v) < length(v), whatever x's sign; where x >= 0 too, the %
    is C's own, without fs_mod_i64's sign fix.  Before, every trip tested every read and fixed
    every remainder's sign (2 tests and 2 sign fixes a trip more than the hand-written C of the
    micro-benchmark add3; now it is instruction for instruction the same there)."""
    f = wrapped_reads
    artifact = compile_to_c(f.program(), Options())
    source = artifact.source
    assert _checks_in_loops(source) == 0
    assert source.count("v_d0 == 0)") == 1  # one zero test, before the loop, for the three reads
    kept = compile_to_c(f.program(), Options(reduce_strength=False)).source
    assert kept.count("fs_mod_i64(") == 1  # it - 3 may be negative: Python's sign kept
    assert "(it % v_d0)" in kept and "((1 + (7 * it)) % v_d0)" in kept
    # with reduce_strength the three remainders are kept running (tests/test_running_remainder.py)
    # (a start and a step each, but the start 0 of it % v_d0)
    assert source.count("fs_running_mod_i64(") == 5 and "% v_d0" not in source
    records = artifact.interfaces[f.name].range_checks
    assert len(records) == 3 and not any(r.emitted for r in records)
    assert all("v_d0 != 0 (tested)" in r.facts for r in records), records
    run_c = Runner(artifact, tmp_path, f.name)
    rng = rng_for("wrapped")
    for size, n in ((1, 5), (3, 10), (100, 1000), (7, 0), (0, 0)):
        v = rng.uniform(-1, 1, size)
        expected = sum(v[it % size] + v[(it * 7 + 1) % size] + v[(it - 3) % size] for it in range(n))
        for call in (f, f.reference, run_c):
            assert math.isclose(call(v, n), expected, rel_tol=1e-12, abs_tol=1e-12), (size, n)
    empty = np.zeros(0)
    assert run_c(empty, 3) == ("status", 2)
    for call in (f, f.reference):
        with pytest.raises(ZeroDivisionError):
            call(empty, 3)


@fs.kernel
def scaled_or_kept(v: Array[Double], w: Array[Double], c: Double) -> Array[Double]:
    """v[i] for i < length(w), read only where c > 0: a run-time range test, not a size check."""
    return build(length(w), lambda i: v[i] * c) if c > 0.0 else w


def test_a_loop_variables_range_test_runs_once_through_the_abi(tmp_path):
    """v[i] in the loop over i < length(w), in a branch: its range test ran on every trip; it
    is the test of the last trip, w_d0 - 1 < v_d0, once before the loop (under 0 < w_d0), and
    the interface's record says so."""
    f = scaled_or_kept
    hoisted = compile_to_c(f.program(), Options()).source
    kept = compile_to_c(f.program(), Options(hoist_checks=False)).source
    assert _checks_in_loops(kept) == 1 and _checks_in_loops(hoisted) == 0
    assert "if (!(w_d0 - 1 < v_d0))" in hoisted  # under 0 < w_d0: w_d0 - 1 >= 0
    (record,) = compile_to_c(f.program(), Options()).interfaces[f.name].range_checks
    assert (record.index, record.length, record.emitted) == ("w_d0 - 1", "v_d0", True)
    run_c = Runner(compile_to_c(f.program(), Options()), tmp_path, f.name)
    rng = rng_for("scaled")
    for nv, nw, c in ((5, 3, 2.0), (3, 3, 2.0), (0, 0, 2.0), (0, 4, -1.0), (2, 0, 1.0)):
        v, w = rng.uniform(-1, 1, nv), rng.uniform(-1, 1, nw)
        np.testing.assert_array_equal(run_c(v, w, c), f.reference(v, w, c))
        np.testing.assert_array_equal(f(v, w, c), f.reference(v, w, c))
    v, w = rng.uniform(-1, 1, 2), rng.uniform(-1, 1, 3)
    assert run_c(v, w, 2.0) == ("status", 1)
    for call in (f, f.reference):
        with pytest.raises(IndexError):
            call(v, w, 2.0)


def test_which_checks_leave_a_loop():
    """A check moves where no name it uses is assigned in the body (declared, assigned,
    incremented, passed by address) but by the checks that move with it, and it reads no array;
    a check in a branch (indented) stays."""
    from fsmooth.dpia.loop_checks import Check, RangeTest, assigned_names, hoist_invariant_checks
    fail = "{ fs_status = 1; goto fs_exit; }"
    assert assigned_names(f"if (!(0 <= index && index < n)) {fail}") == {"fs_status"}
    assert assigned_names("const int64_t fs_int_1 = fs_checked_add_i64(t, 1, &fs_overflow_1);") == {
        "fs_int_1", "fs_overflow_1"}
    assert assigned_names("for (int64_t j = 0; j < n; j++) {") == {"j"}
    body = [Check("bool fs_overflow_1 = false;"),
            Check("const int64_t fs_int_1 = fs_checked_add_i64(t, 1, &fs_overflow_1);"),
            Check("if (fs_overflow_1) { fs_status = 6; goto fs_exit; }"),
            Check(f"if (!(0 <= fs_int_1 && fs_int_1 < m_d0)) {fail}"),
            Check(f"if (!(0 <= i && i < v_d0)) {fail}"),  # the loop's variable
            Check("const int64_t index = obs[i];"),  # reads an array
            Check(f"if (!(0 <= acc_i && acc_i < v_d0)) {fail}"),  # the fold's state
            "acc = acc + v[fs_int_1];", "acc_i = acc_i + 1;",
            "if (c) {", Check(f"    if (!(0 <= k && k < v_d0)) {fail}"), "}"]
    _, hoisted, kept = hoist_invariant_checks(body, "i", "fs_status", "n - 1")
    assert hoisted == body[:4] and kept == body[4:]
    # the range test of the loop's variable itself moves as the test of its last value
    body[4] = RangeTest("i", "v_d0", fail)
    _, hoisted, kept = hoist_invariant_checks(body, "i", "fs_status", "n - 1")
    assert hoisted == [*body[:4], f"if (!(0 <= n - 1 && n - 1 < v_d0)) {fail}"] and kept == body[5:]
    # in the form its signs allow, one comparison: the variable >= 0 (its last value too, where
    # the loop runs), or the bound >= 0 (negative indices wrap above it)
    body[4] = RangeTest("i", "v_d0", fail, index_nonnegative=True)
    assert hoist_invariant_checks(body, "i", "fs_status", "n - 1")[1][4] == f"if (!(n - 1 < v_d0)) {fail}"
    body[4] = RangeTest("i", "v_d0", fail, bound_nonnegative=True)
    assert body[4] == f"if (!((uint64_t)i < (uint64_t)v_d0)) {fail}"
    assert hoist_invariant_checks(body, "i", "fs_status", "n - 1")[1][4] == (
        f"if (!((uint64_t)(n - 1) < (uint64_t)v_d0)) {fail}")
    assert hoist_invariant_checks([RangeTest("i", "m", fail), "m = m + 1;"], "i", "fs_status", "n - 1")[0] == []
    # a loop of a literal count (no last value given) keeps it: the C compiler unrolls such a loop
    _, hoisted, kept = hoist_invariant_checks(body, "i", "fs_status", None)
    assert hoisted == body[:4] and kept == body[4:]


def test_a_literal_loop_keeps_its_variables_range_test():
    """BA's 3-vectors (``rot[i]`` for i < 3, rot of unknown length): the test stays in the loop,
    which the C compiler unrolls to tests of constants; moved out, it let gcc 13 vectorise the
    3-trip loop into stores that the next loop read back one by one (2x the time on a Xeon)."""
    source = compile_to_c(adbench_ba.ba_objective.program(), Options()).source
    assert not re.search(r"if \(!\(2 < \w+_d0\)\).*\n\s*for \(", source)
    assert any("if (!(i_1 < rot_d0))" in body for body in _loop_bodies(source))


# ----------------------------------------------------------------------------- subscripts kept running

@fs.kernel
def squares_sum(v: Array[Double], n: Card) -> Double:
    """v[i²] summed over i < n."""
    return ifold(lambda acc, i: acc + v[i * i], 0.0, n)


def _subscripts(body: str, array: str) -> list[str]:
    return re.findall(rf"\b{array}\[([^\]]*)\]", body)


def test_a_polynomial_subscript_is_kept_running_through_the_abi(tmp_path):
    """The part of a subscript that varies with its loop's variable but is not affine in it was
    computed from the variable on every trip: GMM's packed triangle j·d - j + floor(j(-1-j)/2),
    two multiplications and a shift per entry; i² in v[i*i].  It is kept running (one addition
    of its affine step per trip): no subscript of the loop mentions the variable any more."""
    for f, array, variable, step in ((adbench_gmm.gmm_full_objective, "icf", "j", "(point_d0 - 2 - j)"),
                                     (squares_sum, "v", "i", "(1 + (2 * i))")):
        kept = [b for b in _loop_bodies(compile_to_c(f.program(), Options(reduce_strength=False)).source)
                if "for (" not in b[5:]]
        running = [b for b in _loop_bodies(compile_to_c(f.program(), Options()).source) if "for (" not in b[5:]]
        before = [x for b in kept for x in _subscripts(b, array) if re.search(rf"\b{variable}\b", x)]
        assert before and all(x.count("*") >= 1 for x in before), before
        after = [x for b in running for x in _subscripts(b, array)]
        assert after and not [x for x in after if re.search(rf"\b{variable}\b", x)], after
        assert any(f"(uint64_t){step});" in b for b in running)
    run_c = Runner(compile_to_c(squares_sum.program(), Options()), tmp_path, squares_sum.name)
    v = rng_for("squares").uniform(-1, 1, 25)
    for n in (0, 1, 2, 5):
        assert run_c(v, n) == squares_sum.reference(v, n) == sum(v[i * i] for i in range(n))
    assert run_c(v, 6) == ("size", 1)  # v[25] is out of range: the size check refuses the call
    with pytest.raises(IndexError):
        squares_sum.reference(v, 6)


@pytest.mark.parametrize("part, found", [
    ("floor(j*(-1 - j)/2)", ("0", "-j - 1")),  # j(j+1) is even: an exact quotient
    ("j*d - j + floor(j*(-1 - j)/2)", ("0", "d - j - 2")),
    ("j**2", ("0", "2*j + 1")),
    ("j**3", None),  # its step 3j² + 3j + 1 is not affine
    ("floor(j**2/2)", None),  # not exact: j² is odd at odd j
    ("floor(j*d/2)", None),  # a floor of more than the loop's variable
    ("j**2/2 + j/2", ("0", "j + 1")),
])
def test_which_parts_are_kept_running(part, found):
    from fsmooth.dpia.strength_reduction import reduction
    j, d = sympy.Symbol("j", integer=True), sympy.Symbol("d", integer=True)
    got = reduction(sympy.sympify(part, locals={"j": j, "d": d}), j)
    expected = None if found is None else tuple(sympy.sympify(x, locals={"j": j, "d": d}) for x in found)
    assert got == expected


# ----------------------------------------------------------------------------- sanitizers

SANITIZED = {  # kernel -> its arguments at size n
    loop_work.fused_exp_sin: lambda rng, n: (rng.uniform(-1, 1, n), rng.uniform(-1, 1, n + 1)),
    loop_work.normalise: lambda rng, n: (rng.uniform(0.5, 2, n),),
    loop_work.guarded_invariant: lambda rng, n: (rng.uniform(-1, 1, n), rng.uniform(-1, 1, n + 2), 3),
    next_row_dot: lambda rng, n: (rng.uniform(-1, 1, (3, n)), rng.uniform(-1, 1, n), 1),
    squares_sum: lambda rng, n: (rng.uniform(-1, 1, n * n), n),
    **{k: (lambda rng, n: (rng.uniform(-1, 1, n),)) for k, _ in TRIANGLES},
}


@pytest.mark.parametrize("kernel", list(SANITIZED), ids=[k.name for k in SANITIZED])
def test_rewritten_c_through_the_abi(kernel, tmp_path):
    """Built by hand with -fsanitize (address under ASAN, undefined always), called by the ABI,
    at sizes 0, 1 and large; the product guard at extreme bounds (int64 min and max)."""
    run_c = Runner(compile_to_c(kernel.program(), Options()), tmp_path, kernel.name)
    for n in (0, 1, 200):
        args = SANITIZED[kernel](rng_for(kernel.name), n)
        np.testing.assert_allclose(run_c(*args), kernel.reference(*args), rtol=1e-12, atol=1e-12)


def test_rewritten_bounds_through_the_abi(tmp_path):
    f = loop_work.guarded_product
    run_c = Runner(compile_to_c(f.program(), Options()), tmp_path, f.name)
    for n in (0, 1, 9):
        v = rng_for("product").uniform(0.5, 1.5, n)
        for i in EXTREMES:
            assert run_c(v, i, 1.25) == f.reference(v, i, 1.25)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_rewritten_c_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "through_the_abi")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
