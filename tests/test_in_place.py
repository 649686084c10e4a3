"""Issue 11: an ifold whose step reads its array state only where it writes it updates it in place
(``fsmooth.dps.in_place``): one buffer, and an element it would copy to its own place is not
written, and a loop that then acts at one index runs that one trip (``fsmooth.dpia.single_trip``);
likewise a build that reads an array dead after it only pointwise is written over it.  Proven by counting the scalars the DPS interpreter stores (``Run.work["store"]``) with
the option on and off, at two sizes where it is the complexity that changes, the results bit for
bit the same.  The kernels: ADBench Hand's walk of the bone hierarchy (tests/corpus/adbench_hand.py,
compiled against numpy in tests/test_adbench_corpus.py) and tests/corpus/loop_work.py's
``histogram`` and ``shift_one`` (compiled, reference and numpy at sizes 0, 1, 17 and 60 in
tests/test_corpus.py, the histogram's C at 200 below)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import adbench_hand, loop_work
from fsmooth import Array, Double, build, driver, ifold, length
from fsmooth.anf import anf_program
from fsmooth.driver import compile_to_c
from fsmooth.dpia import phrases as p
from fsmooth.dps import ir
from fsmooth.dps.ir import ALIGN
from fsmooth.dps.interp import run_kernel
from fsmooth.dps.simplify import simplify_allocs
from fsmooth.dps.translate import dps_program
from fsmooth.optimize import optimize_program
from fsmooth.options import Options
from fsmooth.shape.translate import shape_program
from test_adbench_corpus import hand_model, skinning_args
from test_codegen_c import ASAN, Runner, run_under_address_sanitizer


def dps_for_c(kernel: fs.Kernel, **changes) -> ir.Program:
    """The DPS program the C back end gets (``c_locals``: the in-place updates are made for C)."""
    options = replace(Options(), **changes)
    anf = optimize_program(anf_program(kernel.program()), options)
    return simplify_allocs(dps_program(anf, shape_program(anf)), options, c_locals=True)


def run(kernel: fs.Kernel, *args, **changes):
    """The DPS interpreter's run of ``kernel`` as compiled for C: its arena peak is the computed scratch."""
    result = run_kernel(dps_for_c(kernel, **changes), kernel.name, list(args))
    assert result.high_water <= result.scratch
    return result


def scratch(kernel: fs.Kernel, args: tuple, **changes) -> int:
    """The kernel's computed scratch bytes (``Kernel.scratch``) at the sizes of ``args``."""
    k = dps_for_c(kernel, **changes).kernels[kernel.name]
    sizes = {d: n for (_, _, dims), a in zip(k.params, args) for d, n in zip(dims, np.shape(a))}
    return int(k.scratch.xreplace(sizes))


def fold_buffers(kernel: fs.Kernel, **changes) -> list[tuple]:
    program = dps_for_c(kernel, **changes)
    return [u.buffers for u in ir.walk(program.kernels[kernel.name].body) if isinstance(u, ir.Ifold) and u.buffers]


@pytest.mark.parametrize("fingers", [2, 5])  # 10 bones; ADBench's hand: 22
def test_the_bone_walk_writes_one_transform_a_step_not_all(fingers):
    parents, relatives, *_ = hand_model(np.random.default_rng(fingers), fingers, 4)
    bones = len(parents)
    walk = adbench_hand.relatives_to_absolutes
    on, off = run(walk, relatives, parents), run(walk, relatives, parents, update_in_place=False)
    np.testing.assert_array_equal(on.result, off.result)  # the same products, bit for bit
    np.testing.assert_allclose(on.result, adbench_hand.np_relatives_to_absolutes(relatives, parents),
                               rtol=1e-12, atol=1e-12)
    # 16 scalars a bone: its relative copied in, into the state, out to the result; a step's
    # transform, then written into its place; with two buffers a step rewrote all B transforms
    assert on.work["store"] == 5 * 16 * bones
    assert off.work["store"] == 4 * 16 * bones + 16 * bones * bones
    assert on.scratch == off.scratch - 16 * 8 * bones  # one state buffer, not two


def test_the_compiled_bone_walk_is_the_same_with_one_buffer():
    walk = adbench_hand.relatives_to_absolutes
    assert "fs_swap" not in compile_to_c(walk.program()).source
    assert "fs_swap" in compile_to_c(walk.program(), Options(update_in_place=False)).source
    parents, relatives, *_ = hand_model(np.random.default_rng(3), 5, 4)
    np.testing.assert_array_equal(walk(relatives, parents),
                                  walk.with_options(update_in_place=False)(relatives, parents))


@pytest.mark.parametrize("n", [16, 64])
def test_a_histogram_step_stores_one_count(n):
    bins = np.random.default_rng(n).integers(-2, n + 2, 3 * n)  # some outside [0, n): no count
    hits = int(np.count_nonzero((bins >= 0) & (bins < n)))
    on, off = run(loop_work.histogram, bins, n), run(loop_work.histogram, bins, n, update_in_place=False)
    np.testing.assert_array_equal(on.result, loop_work.np_histogram(bins, n))
    np.testing.assert_array_equal(off.result, on.result)
    assert on.work["store"] == 3 * n + hits  # zeros, into the state, out; one count a hit
    assert off.work["store"] == 3 * n + len(bins) * n


def test_a_step_that_reads_another_element_keeps_two_buffers():
    (first, second), = fold_buffers(loop_work.shift_one)
    assert first != second
    (first, second), = fold_buffers(adbench_hand.relatives_to_absolutes)
    assert first == second
    (first, second), = fold_buffers(adbench_hand.relatives_to_absolutes, update_in_place=False)
    assert first != second
    v, order = np.arange(5.0), np.array([0, 4, 4, -1, 7, 2])
    np.testing.assert_array_equal(run(loop_work.shift_one, v, order).result, loop_work.np_shift_one(v, order))


@pytest.mark.parametrize("mirrored", [False, True])
def test_the_mirrored_positions_are_written_over_the_skinned_ones(mirrored):
    vertices = 8
    args = skinning_args(np.random.default_rng(vertices), (2, vertices, 0, mirrored, False))
    skin = adbench_hand.get_skinned_vertex_positions
    on, off = run(skin, *args), run(skin, *args, update_in_place=False)
    np.testing.assert_array_equal(on.result, off.result)
    np.testing.assert_allclose(on.result, adbench_hand.np_get_skinned_vertex_positions(*args), rtol=1e-12, atol=1e-12)
    # the bone walk's B (B - 1) transforms not copied (above); a vertex is stored 9 times either
    # way: with the global transform inlined (inline_kernels.result_over_dead_argument), skinned
    # in the result, its mirrored row a C local, then transformed over it; without, skinned,
    # mirrored and transformed, each V x 3
    bones = len(args[0])
    assert off.work["store"] - on.work["store"] == 16 * bones * (bones - 1)
    if not mirrored:  # ADBench's 544 vertices: no V x 3 array in the scratch (two without)
        vertices = sympy.Symbol("base_positions_d0", integer=True, nonnegative=True)
        assert vertices not in dps_for_c(skin).kernels[skin.name].scratch.free_symbols
        assert vertices in dps_for_c(skin, update_in_place=False).kernels[skin.name].scratch.free_symbols
        args = skinning_args(np.random.default_rng(1), (5, 544, 0, mirrored, False))
        assert scratch(skin, args) == scratch(skin, args, update_in_place=False) - 2 * 3 * 8 * 544 + 2816
        # (the posed relatives' scratch, 2,816 bytes more than the bone walk's, is then the larger)


def fold_parfor_sizes(kernel: fs.Kernel, **changes) -> list:
    """The sizes of the parfors inside the array-state fold of ``kernel``'s C (its imperative DPIA)."""
    options = replace(kernel.options, **changes)
    body = driver.run_passes(driver.c_passes(options), kernel.program()).last("single_trip").kernels[kernel.name].body
    fold, = [c for c in p.walk(body) if isinstance(c, p.DoubleBuffer)]
    return [c.size for c in p.walk(fold.body) if isinstance(c, p.ParFor)]


def test_the_step_runs_one_trip_for_the_element_it_changes():
    # dpia.single_trip: parfor n A (λ k o. if k == j then P else skip) runs P once, at k = j
    assert fold_parfor_sizes(loop_work.histogram) == []
    assert fold_parfor_sizes(loop_work.histogram, update_in_place=False) == [sympy.Symbol("n", integer=True, nonnegative=True)]
    assert fold_parfor_sizes(adbench_hand.relatives_to_absolutes) == [4, 4, 4, 4]  # the transform, and its write
    assert len(fold_parfor_sizes(adbench_hand.relatives_to_absolutes, update_in_place=False)) == 5


def test_in_place_updates_through_the_abi(tmp_path):
    """The C, called as the ABI says (UBSan; ASan under ASAN): scratch of exactly the computed size."""
    skin = adbench_hand.get_skinned_vertex_positions
    (tmp_path / "hand").mkdir()
    (tmp_path / "histogram").mkdir()
    hand = compile_to_c(skin.program())
    rng = np.random.default_rng(11)
    for mirrored in (False, True):
        args = skinning_args(rng, (5, 40, 0, mirrored, False))
        run_skin = Runner(hand, tmp_path / "hand", skin.name)
        np.testing.assert_allclose(run_skin(*args), adbench_hand.np_get_skinned_vertex_positions(*args),
                                   rtol=1e-12, atol=1e-12)
    run_walk = Runner(hand, tmp_path / "hand", "relatives_to_absolutes")
    parents, relatives = args[0], args[1]
    np.testing.assert_allclose(run_walk(relatives, parents), adbench_hand.np_relatives_to_absolutes(relatives, parents),
                               rtol=1e-12, atol=1e-12)
    run_histogram = Runner(compile_to_c(loop_work.histogram.program()), tmp_path / "histogram", "histogram")
    for n in (0, 1, 200):
        bins = rng.integers(-3, n + 3, 2 * n + 5)
        np.testing.assert_array_equal(run_histogram(bins, n), loop_work.np_histogram(bins, n))
    (tmp_path / "rows").mkdir()
    rows = compile_to_c(rotated_rows.program(), Options(fusion=False))
    assert "double r2_row[3];" in rows.source  # the row's copy is a C local
    run_rows = Runner(rows, tmp_path / "rows", "rotated_rows")
    (tmp_path / "rows_off").mkdir()
    run_off = Runner(compile_to_c(rotated_rows.program(), Options(fusion=False, update_in_place=False)),
                     tmp_path / "rows_off", "rotated_rows")
    result = compile_to_c(rotated.program(), Options(fusion=False))
    assert "double r2_row[3];" in result.source
    (tmp_path / "result").mkdir()
    run_result = Runner(result, tmp_path / "result", "rotated")
    for n in (0, 1, 500):
        m, positions = rng.uniform(-1.0, 1.0, (3, 3)), rng.uniform(-1.0, 1.0, (n, 3))
        assert run_rows(m, positions) == run_off(m, positions)  # bit for bit
        for expected in (rotated_rows.reference(m, positions), np_rotated_rows(m, positions)):
            np.testing.assert_allclose(run_rows(m, positions), expected, rtol=1e-12, atol=1e-12)
        for expected in (rotated.reference(m, positions), np.exp(positions) @ m.T):
            np.testing.assert_allclose(run_result(m, positions), np.reshape(expected, (n, 3)), rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_in_place_c_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "through_the_abi")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@fs.kernel
def doubled_past_three(v: Array[Double]) -> Double:
    """b is a's elements, doubled past the third: written over a, which nothing reads after."""
    n = length(v)
    a = build(n, lambda i: fs.exp(v[i]))
    b = build(n, lambda i: a[i] * 2.0 if i > 2 else a[i])
    return ifold(lambda s, i: s + b[i] * fs.sin(b[i]) + b[n - 1 - i], 0.0, n)


@fs.kernel
def doubled_and_reversed(v: Array[Double]) -> Double:
    """As doubled_past_three, but the fold reads a too (a[n-1-i]), so b needs its own region."""
    n = length(v)
    a = build(n, lambda i: fs.exp(v[i]))
    b = build(n, lambda i: a[i] * 2.0 if i > 2 else a[i])
    return ifold(lambda s, i: s + b[i] * fs.sin(b[i]) + a[n - 1 - i], 0.0, n)


def test_a_build_is_written_over_an_array_only_where_nothing_reads_it_after():
    v = np.random.default_rng(7).uniform(-1.0, 1.0, 37)
    over, off = run(doubled_past_three, v), run(doubled_past_three, v, update_in_place=False)
    assert over.result == off.result == doubled_past_three.reference(v)
    assert off.work["store"] - over.work["store"] == 3  # the first three, copied before, are left
    assert over.scratch == off.scratch - 16 * 19  # 37 doubles, rounded up to ALIGN
    kept, off = run(doubled_and_reversed, v), run(doubled_and_reversed, v, update_in_place=False)
    assert kept.result == off.result == doubled_and_reversed.reference(v)
    assert (kept.work["store"], kept.scratch) == (off.work["store"], off.scratch)


@fs.kernel
def rotated_rows(m: Array[Array[Double]], positions: Array[Array[Double]]) -> Double:
    """b's row v is m times a's row v (each output of the row reads all of its inputs): written over
    a, which nothing reads after, through a copy of the row."""
    n = length(positions)
    a = build(n, lambda v: build(3, lambda r: fs.exp(positions[v][r])))
    b = build(n, lambda v: build(3, lambda r: ifold(lambda acc, j: acc + m[r][j] * a[v][j], 0.0, 3)))
    return ifold(lambda s, v: s + b[v][0] * b[v][1] - b[n - 1 - v][2], 0.0, n)


@fs.kernel
def rotated(m: Array[Array[Double]], positions: Array[Array[Double]]) -> Array[Array[Double]]:
    """rotated_rows's b as the result: a is built in the result, b written over it there."""
    n = length(positions)
    a = build(n, lambda v: build(3, lambda r: fs.exp(positions[v][r])))
    return build(n, lambda v: build(3, lambda r: ifold(lambda acc, j: acc + m[r][j] * a[v][j], 0.0, 3)))


def np_rotated_rows(m, positions):
    b = np.exp(positions) @ m.T
    return float(np.sum(b[:, 0] * b[:, 1]) - np.sum(b[:, 2]))


@pytest.mark.parametrize("n", [0, 1, 37])
def test_a_build_reading_its_row_is_written_over_a_dead_array_through_a_row_copy(n):
    """Unfused (fusion would compute a's row in b's loop), b is built over a: one n x 3 array of
    scratch less, for n copies of a row of 3 into a C local (stores of the DPS interpreter, which
    the C compiler keeps in registers), the results bit for bit the same."""
    rng = np.random.default_rng(n)
    m, positions = rng.uniform(-1.0, 1.0, (3, 3)), rng.uniform(-1.0, 1.0, (n, 3))
    over = run(rotated_rows, m, positions, fusion=False)
    off = run(rotated_rows, m, positions, fusion=False, update_in_place=False)
    assert over.result == off.result == rotated_rows.reference(m, positions)
    np.testing.assert_allclose(over.result, np_rotated_rows(m, positions), rtol=1e-12, atol=1e-12)
    assert over.scratch == off.scratch - -(-3 * 8 * n // ALIGN) * ALIGN  # one n x 3 array less
    assert over.work["store"] == off.work["store"] + 3 * n  # the rows' copies
    heap = run(rotated_rows, m, positions, fusion=False, allocation="malloc")  # no C locals: no copy
    assert (heap.work["store"], heap.result) == (off.work["store"], off.result)
    into, off = run(rotated, m, positions, fusion=False), run(rotated, m, positions, fusion=False, update_in_place=False)
    np.testing.assert_array_equal(into.result, off.result)
    np.testing.assert_allclose(into.result, np.exp(positions) @ m.T, rtol=1e-12, atol=1e-12)
    assert (into.scratch, off.scratch) == (0, -(-3 * 8 * n // ALIGN) * ALIGN)  # a is built in the result
    assert into.work["store"] == off.work["store"] + 3 * n
