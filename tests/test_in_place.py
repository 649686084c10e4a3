"""Issue 11: an ifold whose step reads its array state only where it writes it updates it in place
(``fsmooth.dps.in_place``): one buffer, and an element it would copy to its own place is not
written; likewise a build that reads an array dead after it only pointwise is written over it.  Proven by counting the scalars the DPS interpreter stores (``Run.work["store"]``) with
the option on and off, at two sizes where it is the complexity that changes, the results bit for
bit the same.  The kernels: ADBench Hand's walk of the bone hierarchy (tests/corpus/adbench_hand.py,
compiled against numpy in tests/test_adbench_corpus.py) and tests/corpus/loop_work.py's
``histogram`` and ``shift_one`` (compiled, reference and numpy at sizes 0, 1 and large in
tests/test_corpus.py)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import fsmooth as fs
from corpus import adbench_hand, loop_work
from fsmooth.anf import anf_program
from fsmooth.driver import compile_to_c
from fsmooth.dps import ir
from fsmooth.dps.interp import run_kernel
from fsmooth.dps.simplify import simplify_allocs
from fsmooth.dps.translate import dps_program
from fsmooth.optimize import optimize_program
from fsmooth.options import Options
from fsmooth.shape.translate import shape_program
from test_adbench_corpus import hand_model, skinning_args


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


@pytest.mark.parametrize("fingers", [5, 20])  # ADBench's hand: 22 bones; 82
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
    args = skinning_args(np.random.default_rng(vertices), (5, vertices, 0, mirrored, False))
    skin = adbench_hand.get_skinned_vertex_positions
    on, off = run(skin, *args), run(skin, *args, update_in_place=False)
    np.testing.assert_array_equal(on.result, off.result)
    np.testing.assert_allclose(on.result, adbench_hand.np_get_skinned_vertex_positions(*args), rtol=1e-12, atol=1e-12)
    # the bone walk's B (B - 1) transforms not copied (above), and no copy of the V x 3 skinned
    # positions: only a mirrored hand's x is written, negated
    bones = len(args[0])
    assert off.work["store"] - on.work["store"] == 16 * bones * (bones - 1) + (2 if mirrored else 3) * vertices
    # ADBench's 544 vertices, where the positions are the largest arrays: one V x 3 array less
    args = skinning_args(np.random.default_rng(1), (5, 544, 0, mirrored, False))
    assert scratch(skin, args) == scratch(skin, args, update_in_place=False) - 3 * 8 * 544
