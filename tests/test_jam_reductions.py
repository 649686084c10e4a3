"""The C back end's jam of a reduction's elements (``dpia.unroll_jam.jam_reduction``,
``Options.jam_reductions``): GMM's sum over the points of logsumexp over the components runs
``JAM`` points at a time, their loops in one, what they read alike (Q_k's entries, means[k])
read once for the ``JAM``; the points are added to the sum in their order, so the result is the
unjammed build's bit for bit, which the tests check, with the reference and the numpy oracle,
over counts around ``JAM`` (0 included) and dimensions 0 to 20."""
from __future__ import annotations

import math

import numpy as np
import pytest

import fsmooth as fs
from corpus import adbench_gmm, gmm
from fsmooth import Array, Card, Double, ifold, length
from fsmooth.cost_model import JAM
from fsmooth.dpia import phrases as p
from fsmooth.dpia.strategy_check import root
from fsmooth.driver import c_passes, run_passes
from fsmooth.options import Options

from benchmarks import adbench_kernels

UNJAMMED = Options(jam_reductions=False)


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

def test_gmm_triangle_reads_q_and_means_once_for_jam_points():
    """The triangle's inner loop (row i of Q_k (x - means[k])), innermost: jammed, one loop steps
    JAM points' rows, reading icf[k][…] and means[k][j] once and x once per point; unjammed,
    each point's loop reads all three, so per JAM points JAM times as many reads of Q and means."""
    jammed, plain = imperative(adbench_gmm.gmm_full_objective), imperative(adbench_gmm.gmm_full_objective, UNJAMMED)
    triangle = lambda k: [loop for loop in innermost_loops(k.body) if reads(loop, "icf") and reads(loop, "means")]  # noqa: E731
    # the jammed block's loop, then the one for the points past the last multiple of JAM
    block, rest = triangle(jammed)
    assert (reads(block, "icf"), reads(block, "means"), reads(block, "x")) == (1, 1, JAM)
    assert (reads(rest, "icf"), reads(rest, "means"), reads(rest, "x")) == (1, 1, 1)
    # unjammed, main_terms is a call: its triangle is in the callee, one point a call
    assert not triangle(plain)
    (alone,) = triangle(imperative(adbench_gmm.main_terms))
    assert (reads(alone, "icf"), reads(alone, "means"), reads(alone, "point")) == (1, 1, 1)


def test_gmm_points_are_added_in_their_order():
    """The block's JAM elements are added to the sum after they are all computed, in order, each
    its own variable: ``acc := acc + element_s``, s = 0, …, JAM - 1, the last commands of the block."""
    k = imperative(adbench_gmm.gmm_full_objective)
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


@pytest.mark.parametrize("kernel", [sum_of_squares, not_a_reduction, triangle_rows], ids=lambda k: k.name)
def test_folds_not_of_the_form_are_left_as_they_are(kernel):
    """An element without a loop has no chain to jam; an element that reads the state is not a
    reduction's; an element whose loops are all counted by its index would run its copies one
    after another: the C is the unjammed build's."""
    assert kernel.c_source() == kernel.with_options(jam_reductions=False).c_source()


def test_no_jam_with_threads():
    """With ``parallel``, DPS slices the scratch per thread: no region may be added after it."""
    k = adbench_gmm.gmm_full_objective
    assert k.with_options(parallel=True).c_source() == k.with_options(parallel=True, jam_reductions=False).c_source()


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
