"""The C back end's jam of a reduction's elements (``dpia.unroll_jam.jam_reduction``,
``Options.jam_reductions``): GMM's sum over the points of logsumexp over the components runs
``JAM`` points at a time, their loops in one, what they read alike (Q_k's entries, means[k])
read once for the ``JAM``; the points are added to the sum in their order, so the result is the
unjammed build's bit for bit, which the tests check, with the reference and the numpy oracle,
over counts around ``JAM`` (0 included) and dimensions 0 to 20.  With ``parallel``, each
thread's chunk of the points is jammed so (``ParallelReduce.chunk``): the result is the unjammed
parallel build's bit for bit at every thread count, and the jammed points' regions, one per
thread, stay in the scratch the formula gives."""
from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest

import fsmooth as fs
from corpus import adbench_gmm, gmm
from fsmooth import Array, Card, Double, ifold, length
from fsmooth.cost_model import JAM
from fsmooth.dpia import phrases as p
from fsmooth.dpia.strategy_check import root
from fsmooth import runtime
from fsmooth.dps.parallel import thread_slice
from fsmooth.driver import c_passes, compile_to_c, run_passes
from fsmooth.options import Options
from test_codegen_c import ASAN, Runner, run_under_address_sanitizer
from test_parallel import threads

from benchmarks import adbench_kernels

UNJAMMED = Options(jam_reductions=False)
PARALLEL, PARALLEL_UNJAMMED = Options(parallel=True), Options(parallel=True, jam_reductions=False)
BUILDS = pytest.mark.parametrize("options", [Options(), PARALLEL], ids=["sequential", "parallel"])


@fs.kernel
def gmm_data_term(alphas: Array[Double], means: Array[Array[Double]], icf: Array[Array[Double]],
                  x: Array[Array[Double]], d: Card) -> Double:
    """GMM's Σ_i logsumexp_k(...) alone, d given: defined at n = 0 too."""
    sums = adbench_gmm.sum_qs(icf, d)
    q_diags = adbench_gmm.q_diagonals(icf, d)
    return ifold(lambda acc, i: acc + gmm.logsumexp(adbench_gmm.main_terms(alphas, sums, q_diags, means, icf, x[i])),
                 0.0, length(x))


@fs.kernel
def sum_of_squares(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + v[i] * v[i], 0.0, length(v))


@fs.kernel
def not_a_reduction(x: Array[Array[Double]]) -> Double:
    """Each element reads the state: its elements depend on each other."""
    return ifold(lambda acc, i: ifold(lambda s, j: s + acc * x[i][j], acc, length(x[i])), 0.0, length(x))


@fs.kernel
def triangle_rows(x: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + x[i] * ifold(lambda s, j: s + x[j], 0.0, i), 0.0, length(x))


@fs.kernel
def rows_times_prefix(w: Array[Array[Double]], x: Array[Double]) -> Double:
    """Σ_i (w[i] · x) (Σ_{j<i} x[j]): a loop alike in every element (the dot product, jammed) and
    one counted by the element's index (the prefix, run copy after copy)."""
    return ifold(lambda acc, i: acc + ifold(lambda s, j: s + w[i][j] * x[j], 0.0, length(x))
                 * ifold(lambda s, j: s + x[j], 0.0, i), 0.0, length(w))


def gmm_inputs(rng, d: int, k: int, n: int) -> tuple:
    return (rng.standard_normal(k), rng.standard_normal((k, d)), 0.3 * rng.standard_normal((k, d * (d + 1) // 2)),
            rng.standard_normal((n, d)), 1.0 + rng.random(), 2)


def imperative(kernel: fs.Kernel, options: Options = Options()) -> p.ImperativeKernel:
    """``kernel``'s imperative DPIA as the C back end prints it."""
    trace = run_passes(c_passes(options), kernel.program())
    return trace.last("jam_reductions").kernels[kernel.name]


def innermost_loops(c: p.Phrase) -> list:
    return [ph for ph in p.walk(c) if isinstance(ph, p.For) and not any(
        isinstance(inner, (p.For, p.ParFor)) for inner in p.walk(ph.body))]


def reads(c: p.Phrase, array: str) -> int:
    """The reads of ``array``'s elements in ``c`` (an expression's Idx of it, not an acceptor's)."""
    writes = {id(a) for w in p.walk(c) if isinstance(w, p.Assign) for a in p.walk(w.acc)}
    return sum(1 for ph in p.walk(c) if isinstance(ph, p.Idx) and id(ph) not in writes
               and isinstance(ph.arr, p.Ident) and ph.arr.name == array)


# ----------------------------------------------------------------------------- the structure

@BUILDS
def test_gmm_triangle_reads_q_and_means_once_for_jam_points(options):
    """The triangle's inner loop (row i of Q_k (x - means[k])), innermost: jammed, one loop steps
    JAM points' rows, reading icf[k][…] and means[k][j] once and x once per point; unjammed,
    each point's loop reads all three, so per JAM points JAM times as many reads of Q and means.
    On threads, both loops are each thread's: the reduction's body folds the thread's chunk."""
    jammed = imperative(adbench_gmm.gmm_full_objective, options)
    plain = imperative(adbench_gmm.gmm_full_objective, replace(options, jam_reductions=False))
    triangle = lambda c: [loop for loop in innermost_loops(c) if reads(loop, "icf") and reads(loop, "means")]  # noqa: E731
    if options.parallel:
        (reduce,) = [ph for ph in p.walk(jammed.body) if isinstance(ph, p.ParallelReduce) and reads(ph, "x")]
        assert reduce.chunk is not None and triangle(reduce.body) == triangle(jammed.body)
        assert all(ph.chunk is None for ph in p.walk(plain.body) if isinstance(ph, p.ParallelReduce))
    # the jammed block's loop, then the one for the points past the last multiple of JAM
    block, rest = triangle(jammed.body)
    assert (reads(block, "icf"), reads(block, "means"), reads(block, "x")) == (1, 1, JAM)
    assert (reads(rest, "icf"), reads(rest, "means"), reads(rest, "x")) == (1, 1, 1)
    # unjammed, main_terms is a call: its triangle is in the callee, one point a call
    assert not triangle(plain.body)
    (alone,) = triangle(imperative(adbench_gmm.main_terms, options).body)
    assert (reads(alone, "icf"), reads(alone, "means"), reads(alone, "point")) == (1, 1, 1)


@BUILDS
def test_gmm_points_are_added_in_their_order(options):
    """The block's JAM elements are added to the sum (on threads, the thread's partial) after
    they are all computed, in order, each its own variable: ``acc := acc + element_s``, s = 0,
    …, JAM - 1, the last commands of the block."""
    k = imperative(adbench_gmm.gmm_full_objective, options)
    block = next(ph for ph in p.walk(k.body) if isinstance(ph, p.For) and ph.index.startswith("i_")
                 and any(isinstance(c, p.ParFor) for c in p.walk(ph.body)))
    body = block.body
    while isinstance(body, p.New):
        body = body.body
    tail = body.cmds[-JAM:]
    assert [c.exp.args[1].name for c in tail] == [f"element{'' if s == 0 else f'_{s}'}" for s in range(JAM)]
    assert {root(c.acc) for c in tail} == {tail[0].exp.args[0].name}


@pytest.mark.parametrize("kernel", [adbench_gmm.gmm_full_objective, gmm_data_term, gmm.gmm_objective], ids=lambda k: k.name)
def test_gmm_c_source_has_the_block_and_the_rest_loops(kernel):
    source = kernel.c_source()
    assert f"fs_shift_floor_i64(x_d0, {int(math.log2(JAM))})" in source  # ⌊n/JAM⌋ blocks
    assert f"fs_mask_mod_i64(x_d0, {JAM - 1})" in source  # n mod JAM points, one by one
    assert "fs_shift_floor_i64(x_d0" not in kernel.with_options(jam_reductions=False).c_source()
    # on threads, the blocks and the rest of each thread's chunk, its length first .. end - 1
    threaded = kernel.with_options(parallel=True).c_source()
    chunk = re.search(r"const int64_t (fs_length_\d+) = (fs_end_\d+) - (fs_first_\d+);", threaded)
    assert f"fs_shift_floor_i64({chunk[1]}, {int(math.log2(JAM))})" in threaded
    assert f"fs_mask_mod_i64({chunk[1]}, {JAM - 1})" in threaded
    assert "fs_length_" not in kernel.with_options(parallel=True, jam_reductions=False).c_source()


def test_a_threads_blocks_index_as_the_sequential_blocks_do():
    """The range analysis follows a block loop counted by ⌊length/JAM⌋ of a thread's chunk
    (``dps.ranges.tighten``) as it follows ⌊n/JAM⌋: the blocks' triangle keeps its running
    subscript and no index arithmetic of the blocks is checked in the loop (its bounds are
    tested once, before the body), on threads as in the sequential build."""
    for source, count in ((adbench_gmm.gmm_full_objective.c_source(), "x_d0"),
                          (adbench_gmm.gmm_full_objective.with_options(parallel=True).c_source(), "fs_length_")):
        start = re.search(rf"for \(int64_t \w+ = 0; \w+ < fs_shift_floor_i64\({count}\w*, 2\); \w+\+\+\)", source).start()
        blocks = source[start:source.index(f"fs_mask_mod_i64({count}", start)]
        assert "fs_checked" not in blocks and "int64_t running = 0;" in blocks


@BUILDS
@pytest.mark.parametrize("kernel", [sum_of_squares, not_a_reduction, triangle_rows], ids=lambda k: k.name)
def test_folds_not_of_the_form_are_left_as_they_are(kernel, options):
    """An element without a loop has no chain to jam; an element that reads the state is not a
    reduction's; an element whose loops are all counted by its index would run its copies one
    after another: the C is the unjammed build's, on threads too."""
    assert kernel.with_options(parallel=options.parallel).c_source() == kernel.with_options(
        parallel=options.parallel, jam_reductions=False).c_source()


# ----------------------------------------------------------------------------- the results

SIZES = [(d, n) for d in (0, 1, 2, 20) for n in (1, JAM - 1, JAM, JAM + 1, 2 * JAM + 1)] + [(3, 1000), (20, 257)]


@pytest.mark.parametrize("d,n", SIZES)
def test_gmm_objective_bit_identical_to_the_unjammed_build(d, n):
    rng = np.random.default_rng(1000 * d + n)
    args = gmm_inputs(rng, d, 5, n)
    jammed = adbench_gmm.gmm_full_objective(*args)
    plain = adbench_gmm.gmm_full_objective.with_options(jam_reductions=False)(*args)
    assert np.float64(jammed).tobytes() == np.float64(plain).tobytes()
    np.testing.assert_allclose(jammed, adbench_gmm.np_gmm_full_objective(*args), rtol=1e-9, atol=1e-9)
    if n <= 2 * JAM + 1:
        np.testing.assert_allclose(jammed, adbench_gmm.gmm_full_objective.reference(*args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [0, 1, JAM - 1, JAM, JAM + 1, 3 * JAM + 2])
@pytest.mark.parametrize("d", [0, 1, 2, 20])
def test_gmm_data_term_bit_identical_at_every_count(d, n):
    rng = np.random.default_rng(7 * d + n)
    alphas, means, icf, x, _, _ = gmm_inputs(rng, d, 3, n)
    jammed = gmm_data_term(alphas, means, icf, x, d)
    plain = gmm_data_term.with_options(jam_reductions=False)(alphas, means, icf, x, d)
    assert np.float64(jammed).tobytes() == np.float64(plain).tobytes()
    q = adbench_gmm._lower_factors(icf, d)
    terms = (alphas + icf[:, :d].sum(axis=1) - 0.5 * np.sum(np.einsum("kij,nkj->nki", q, x[:, None, :] - means) ** 2, axis=2))
    np.testing.assert_allclose(jammed, adbench_gmm._logsumexp(terms, axis=1).sum() if n else 0.0, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(jammed, gmm_data_term.reference(alphas, means, icf, x, d), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [0, 1, JAM, JAM + 1, 3 * JAM + 3])
def test_a_jammed_element_with_a_loop_counted_by_its_index(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(max(n, 7))
    w = rng.standard_normal((n, len(x)))
    jammed, plain = rows_times_prefix(w, x), rows_times_prefix.with_options(jam_reductions=False)(w, x)
    assert np.float64(jammed).tobytes() == np.float64(plain).tobytes()
    oracle = sum((w[i] @ x) * x[:i].sum() for i in range(n))
    np.testing.assert_allclose(jammed, oracle, rtol=1e-12, atol=1e-12)
    assert jammed == rows_times_prefix.reference(w, x)
    block, _ = [c for c in innermost_loops(imperative(rows_times_prefix).body) if reads(c, "w")]
    assert (reads(block, "w"), reads(block, "x")) == (JAM, 1)  # x[j] read once for the JAM rows


def test_gmm_objective_of_gmm_py_bit_identical():
    rng = np.random.default_rng(5)
    d, k, n = 4, 3, 2 * JAM + 3
    args = (rng.standard_normal(k), rng.standard_normal((k, d)), rng.standard_normal((k, d)), rng.standard_normal((n, d)))
    jammed, plain = gmm.gmm_objective(*args), gmm.gmm_objective.with_options(jam_reductions=False)(*args)
    assert np.float64(jammed).tobytes() == np.float64(plain).tobytes()
    np.testing.assert_allclose(jammed, gmm.gmm_objective.reference(*args), rtol=1e-12)


# ----------------------------------------------------------------------------- the scratch

def test_each_jammed_element_has_its_own_terms_in_the_scratch_and_stays_in_it():
    """Elements 1 to JAM - 1 of a block each get their own K terms past the unjammed scratch; the
    arena's canaries (``check_arena``) see no write past the scratch, in the kernel and in a
    caller (the memory ladder's loop), whose scratch grows with its callee's."""
    rng = np.random.default_rng(3)
    d, k, n = 6, 5, 4 * JAM + 1
    args = gmm_inputs(rng, d, k, n)
    grown = (JAM - 1) * 16 * math.ceil(k * 8 / 16)
    objective = adbench_gmm.gmm_full_objective
    assert objective.scratch_bytes(*args) - objective.with_options(jam_reductions=False).scratch_bytes(*args) == grown
    assert objective.with_options(check_arena=True)(*args) == objective(*args)
    loop = adbench_kernels.gmm_loop
    assert loop.scratch_bytes(*args, 3) - loop.with_options(jam_reductions=False).scratch_bytes(*args, 3) == grown
    np.testing.assert_allclose(loop.with_options(check_arena=True)(*args, 3), 3 * objective(*args), rtol=1e-12)


# ----------------------------------------------------------------------------- on threads

THREAD_SIZES = [0, 1, 3, JAM, JAM + 1, 9, 1000]


@pytest.mark.parametrize("n_threads", [1, 2, 3, 7])
def test_parallel_jam_at_each_thread_count(tmp_path, n_threads):
    """Built with -fsanitize=undefined (address too under ASAN) and called by the ABI, its
    scratch exactly the formula's: each thread's chunk jammed gives the unjammed parallel
    build's partials, so its result, bit for bit, at 1, 2, 3 and 7 threads (chunks shorter than
    a block, of whole blocks and with a rest), and the reference's and the oracle's within
    rounding (the partials regroup the sum)."""
    (tmp_path / "jammed").mkdir()
    (tmp_path / "plain").mkdir()
    jammed = Runner(compile_to_c(gmm_data_term.program(), PARALLEL), tmp_path / "jammed", "gmm_data_term")
    plain = Runner(compile_to_c(gmm_data_term.program(), PARALLEL_UNJAMMED), tmp_path / "plain", "gmm_data_term")
    assert "fs_length_" in compile_to_c(gmm_data_term.program(), PARALLEL).source
    for n in THREAD_SIZES:
        rng = np.random.default_rng(100 * n + n_threads)
        d = 3
        alphas, means, icf, x, _, _ = gmm_inputs(rng, d, 4, n)
        got = jammed(alphas, means, icf, x, d, n_threads)
        assert np.float64(got).tobytes() == np.float64(plain(alphas, means, icf, x, d, n_threads)).tobytes()
        np.testing.assert_allclose(got, gmm_data_term.reference(alphas, means, icf, x, d), rtol=1e-12, atol=1e-12)
        q = adbench_gmm._lower_factors(icf, d)
        terms = (alphas + icf[:, :d].sum(axis=1)
                 - 0.5 * np.sum(np.einsum("kij,nkj->nki", q, x[:, None, :] - means) ** 2, axis=2))
        np.testing.assert_allclose(got, adbench_gmm._logsumexp(terms, axis=1).sum() if n else 0.0, rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_parallel_jam_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "parallel_jam_at_each_thread_count")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.parametrize("n", [1, 3, JAM, JAM + 1, 9, 1000])
def test_gmm_objective_on_threads_bit_identical_to_the_unjammed_parallel_build(n):
    rng = np.random.default_rng(n)
    args = gmm_inputs(rng, 5, 4, n)
    objective = adbench_gmm.gmm_full_objective
    got = objective.with_options(parallel=True)(*args)
    assert np.float64(got).tobytes() == np.float64(objective.with_options(parallel=True, jam_reductions=False)(*args)).tobytes()
    np.testing.assert_allclose(got, adbench_gmm.np_gmm_full_objective(*args), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got, objective.reference(*args), rtol=1e-9, atol=1e-9)


def test_each_thread_has_its_own_jammed_terms_in_the_scratch():
    """On threads, elements 1 to JAM - 1 of a block each get their own K terms for every thread,
    as DPS's region of the terms is, past the unjammed scratch, each copy on pages of its own
    (the first from the next page); every thread runs whole blocks here, so the arena's
    high-water mark is the grown scratch, to the alignment of the last region."""
    T = threads()
    d, k = 6, 5
    args = gmm_inputs(np.random.default_rng(3), d, k, 4 * JAM * T + 1)
    objective = adbench_gmm.gmm_full_objective
    unjammed = objective.with_options(parallel=True, jam_reductions=False).scratch_bytes(*args)
    terms = 16 * math.ceil(8 * (k + 512 * (T - 1) * math.ceil(k / 512)) / 16)  # a thread's K terms a page apart
    assert objective.with_options(parallel=True).scratch_bytes(*args) == (
        thread_slice(unjammed) + (JAM - 2) * thread_slice(terms) + terms)
    checked = objective.with_options(parallel=True, check_arena=True)
    assert checked(*args) == objective.with_options(parallel=True)(*args)
    measured, computed = runtime.last_high_water(checked), checked.scratch_bytes(*args)
    assert computed - 16 < measured <= computed
