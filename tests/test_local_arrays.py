"""Issue 11: in C's ``arena`` variant, a region of a small constant size is a local array of the
kernel's function (``double r[3];``, ``fsmooth.dps.local_arrays``), not a slice of the scratch:
the scratch shrinks by exactly its bytes, the heap variants keep their regions on the heap, the
parallel build needs no per-thread slices for it, the results stay the reference's bit for bit,
the C is clean under AddressSanitizer and UBSan, and BA runs fewer instructions (callgrind)."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import sympy

from corpus import adbench_ba, adbench_hand
from fsmooth import driver, inline_kernels
from fsmooth.dps import ir
from fsmooth.types import Double
from fsmooth.dps import local_arrays
from fsmooth.dps.layout import region_bytes
from fsmooth.embed import library
from test_adbench_corpus import ba_args
from fsmooth.cache import c_compiler

LOCAL_ARRAY = re.compile(r"^\s*(?:double|float|int64_t|bool) \w+\[(\d+)\];$", re.M)


def scratch_formulas(kernel) -> dict:
    artifact = driver.compile_to_c(kernel.program(), kernel.options)
    return {name: sympy.sympify(i.scratch_formula) for name, i in artifact.interfaces.items()}


def local_allocs(kernel) -> dict:
    """Per kernel of the program, the (element, count) of each alloc the DPS stage made a C local."""
    trace = driver.run_passes(driver.c_passes(kernel.options), kernel.program())
    return {name: [(a.elem, a.count) for a in ir.walk(k.body) if isinstance(a, ir.Alloc) and a.offset is None]
            for name, k in trace.last("simplify_allocs").kernels.items()}


def test_scratch_shrinks_by_exactly_the_regions_that_became_locals(monkeypatch):
    ba_locals, hand_locals = local_allocs(adbench_ba.ba_objective), local_allocs(adbench_hand.hand_objective)
    ba_now, hand_now = scratch_formulas(adbench_ba.ba_objective), scratch_formulas(adbench_hand.hand_objective)
    monkeypatch.setattr(local_arrays, "SMALL_ARRAY_BYTES", 0)  # every region in the arena, as before
    assert local_allocs(adbench_ba.ba_objective) == {name: [] for name in ba_locals}
    ba_before, hand_before = scratch_formulas(adbench_ba.ba_objective), scratch_formulas(adbench_hand.hand_objective)
    # BA: rodrigues_rotate_point's 3-vectors (2 × 16 B, rounded up to ALIGN), project's and
    # reprojection_error's: every region is a local, so no scratch is left
    assert ba_before == {**{name: 0 for name in ba_before}, "rodrigues_rotate_point": 32, "project": 128,
                         "reprojection_error": 128, "ba_objective": 144}  # its projection built in its result (dps.in_place)
    assert ba_now == {name: 0 for name in ba_now}
    assert ba_locals["rodrigues_rotate_point"] == [(Double, 3)]  # its axis; the rest in the destination
    # Hand: a kernel whose one region of a constant size sits on top of a symbolic one:
    # relatives_to_absolutes' 4×4 matrix (128 B) comes off its 256 n (n transforms at the start
    # and in the fold's state, which it updates in place: dps.in_place)
    n = sympy.Symbol("relatives_d0", integer=True, nonnegative=True)
    assert hand_before["relatives_to_absolutes"] == 256 * n + 128
    assert hand_now["relatives_to_absolutes"] == 256 * n
    assert hand_locals["relatives_to_absolutes"] == [(Double, 16)]
    assert sum(region_bytes(elem, count) for elem, count in hand_locals["relatives_to_absolutes"]) == 128


def test_only_the_arena_variant_has_locals_and_results_stay_the_same():
    args = ba_args(np.random.default_rng(5), (5, 11, 301))
    arena = adbench_ba.ba_objective
    source = driver.compile_to_c(arena.program(), arena.options).source
    # project's 2-vectors (r/distorted: 2 of them, and kappa and p) and Rodrigues' 3-vectors (its axis;
    # rot, x_centred and the rotated point in project), in project, in reprojection_error (project
    # inlined) and in ba_objective (reprojection_error inlined, its loop twice: the version for rows
    # of the widths it reads, dpia.row_versions), less those that fusion consumed
    assert sorted(map(int, LOCAL_ARRAY.findall(source))) == [2] * 8 + [3] * 17
    expected = arena.reference(*args)
    for variant in ("malloc", "leaky", "gc"):
        heap = arena.variant(variant)
        heap_source = driver.compile_to_c(heap.program(), heap.options).source
        # the DPS paper's ladder: these take every region from the heap, none from the stack
        assert LOCAL_ARRAY.findall(heap_source) == [] and "malloc(" in heap_source, variant
        if variant == "gc":  # run where Boehm's collector is installed: tests/test_variants.py
            continue
        for got, want in zip(heap(*args), expected):
            np.testing.assert_array_equal(got, np.asarray(want).reshape(got.shape))
    got = arena(*args)
    for g, want, oracle in zip(got, expected, adbench_ba.np_ba_objective(*args)):
        np.testing.assert_array_equal(g, np.asarray(want).reshape(g.shape))
        np.testing.assert_allclose(g, oracle, rtol=1e-12, atol=1e-12)


def test_parallel_ba_needs_no_scratch_and_gives_the_sequential_bits():
    args = ba_args(np.random.default_rng(6), (7, 20, 5003))
    parallel = adbench_ba.ba_objective.with_options(parallel=True, check_arena=True)
    assert parallel.scratch_bytes(*args) == 0
    for got, want in zip(parallel(*args), adbench_ba.ba_objective(*args)):
        np.testing.assert_array_equal(got, want)
    empty = ba_args(np.random.default_rng(6), (1, 1, 0))
    assert [g.shape for g in parallel(*empty)] == [(0, 2), (0,)]


DRIVER = """
#include <stdio.h>
#include <stdlib.h>
#include "ba.h"
int main(void) {
    enum { N = 3, M = 7, P = 997 };
    static double cams[N * 11], x[M * 3], w[P], feats[P * 2], reproj[P * 2], werr[P];
    static int64_t obs[P * 2];
    for (int i = 0; i < N * 11; i++) cams[i] = 0.05 * ((i * 7) % 11) - 0.2 + (i % 11 == 6 ? 1.0 : 0.0);
    for (int i = 0; i < 3; i++) cams[i] = 0.0;  /* camera 0 unrotated: Rodrigues' other branch */
    for (int i = 0; i < M * 3; i++) x[i] = (i % 3 == 2) ? 5.0 + i % 4 : 0.25 * (i % 5) - 0.5;
    for (int i = 0; i < P; i++) {
        w[i] = 0.5 + (i % 10) * 0.1;
        obs[2 * i] = i % N;
        obs[2 * i + 1] = i % M;
        feats[2 * i] = 0.01 * (i % 13);
        feats[2 * i + 1] = -0.02 * (i % 7);
    }
    void *scratch = malloc(ba_ba_objective_scratch_bytes(N, 11, M, 3, P, P, 2, P, 2) + 1);
    int status = ba_ba_objective(scratch, reproj, werr, cams, N, 11, x, M, 3, w, P, obs, P, 2, feats, P, 2);
    double sum = 0.0;
    for (int i = 0; i < 2 * P; i++) sum += reproj[i];
    for (int i = 0; i < P; i++) sum += werr[i];
    printf("%d %.17g\\n", status, sum);
    free(scratch);
    return 0;
}
"""


def build_ba(where, flags: tuple) -> str:
    """BA's C, as ``fsmooth compile`` writes it, with the driver above, built with ``flags``."""
    where.mkdir()
    library("ba", [adbench_ba.ba_objective], adbench_ba.ba_objective.options, "adbench_ba.py").write(where)
    (where / "main.c").write_text(DRIVER)
    subprocess.run([*c_compiler(), "-std=c99", *flags, "-I", str(where), str(where / "main.c"), str(where / "ba.c"),
                    "-lm", "-o", str(where / "main")], check=True)
    return str(where / "main")


def test_ba_is_clean_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    main = build_ba(tmp_path / "checked", ("-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"))
    run = subprocess.run([main], capture_output=True, text=True, env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert run.returncode == 0 and run.stdout.startswith("0 "), run.stderr


def instructions(main: str, where) -> tuple[int, str]:
    out = where / "callgrind.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=ba_ba_objective",
                          f"--callgrind-out-file={out}", main], capture_output=True, text=True, check=True)
    return int(re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M).group(1)), run.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("gcc") is None,
                    reason="counting instructions needs valgrind and gcc")
def test_ba_runs_fewer_instructions_with_its_vectors_in_locals_and_project_inlined(tmp_path, monkeypatch):
    on, printed_on = instructions(build_ba(tmp_path / "on", ("-O3", "-fwrapv")), tmp_path / "on")
    monkeypatch.setattr(inline_kernels, "SMALL_RESULT_KERNEL", inline_kernels.SMALL_KERNEL)
    called, printed_called = instructions(build_ba(tmp_path / "called", ("-O3", "-fwrapv")), tmp_path / "called")
    monkeypatch.setattr(local_arrays, "SMALL_ARRAY_BYTES", 0)
    off, printed_off = instructions(build_ba(tmp_path / "off", ("-O3", "-fwrapv")), tmp_path / "off")
    assert printed_on == printed_called == printed_off and printed_on.startswith("0 ")  # the same bits
    # gcc 12, portable (SSE2), 997 observations: 239,564 with project and Rodrigues' rotation
    # called against 248,540 with their vectors in the arena too; inlined, their vectors are
    # the loop's scalars: 228,228 (-4.7 %).  (Before a range test took one comparison,
    # dpia.loop_checks.RangeTest: 269,479, 278,456 and 232,217; the called kernels, which test
    # every read of their parameters, gained the most from it.)
    assert called < 0.98 * off, (called, off)
    assert on < 0.97 * called, (on, called)
