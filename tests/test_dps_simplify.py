"""DPS-F̃ simplification (DPS paper Fig. 9) under every combination of the buffer options:
allocation hoisting out of loops (per iteration of a parallel build), allocation merging,
dead cardinality lets; and ``Kernel.scratch`` as the exact peak that the DPS interpreter
measures on its flat arena, for every corpus kernel at several sizes."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import iterate, linalg
from corpus.iterate import jacobi_step
from corpus.linalg import vector_add, vector_norm, vector_smul
from fsmooth.dps import ir
from fsmooth.dps.interp import run_kernel
from fsmooth.dps.layout import region_bytes
from fsmooth.dps.parallel import THREAD, thread_slice
from fsmooth.dps.show import show_kernel
from fsmooth.dps.simplify import simplify_allocs
from fsmooth.dps.terms import names_used
from fsmooth.dps.translate import dps_program
from fsmooth import Array, Card, Double, Index, build, core, ifold, length
from fsmooth.options import Options
from fsmooth.anf import anf_program
from fsmooth.shape.sizes import size_symbol
from fsmooth.shape.translate import shape_program
from test_corpus import CASES, arguments, assert_close, with_rows_of

OPTIONS = {
    "default": Options(),
    "no_hoist": Options(hoist_allocs=False),
    "no_merge": Options(merge_allocs=False),
    "neither": Options(hoist_allocs=False, merge_allocs=False),
    "parallel": Options(parallel=True),
    "parallel_no_hoist": Options(parallel=True, hoist_allocs=False),
}

_translated: dict = {}


def dps_of(kernel: fs.Kernel, options: Options) -> ir.Program:
    if kernel not in _translated:
        anf = anf_program(kernel.program())
        _translated[kernel] = dps_program(anf, shape_program(anf))
    return simplify_allocs(_translated[kernel], options)


def loops_around(t: ir.Term, region: str, loops: tuple = ()) -> tuple | None:
    """The loops (build/ifold) whose bodies the alloc of ``region`` is in, or None if absent."""
    match t:
        case ir.Alloc(r) if r == region:
            return loops
        case ir.Alloc(body=body):
            return loops_around(body, region, loops)
        case ir.Build(body=body):
            return loops_around(body, region, loops + (t,))
        case ir.Ifold(body=body, init=init):
            inside = loops_around(body, region, loops + (t,))
            return inside if inside is not None else loops_around(init, region, loops)
        case ir.Let(_, rhs, body) | ir.If(_, rhs, body):
            found = loops_around(rhs, region, loops)
            return found if found is not None else loops_around(body, region, loops)
    return None


def allocs(t: ir.Term) -> list[ir.Alloc]:
    return [u for u in ir.walk(t) if isinstance(u, ir.Alloc)]


# ----------------------------------------------------------------------------- exact scratch

DOUBLE_CASES = [c for c in CASES if not c.single_precision]
CASE_IDS = [f"{c.kernel.name}-{i}" for i, c in enumerate(DOUBLE_CASES)]


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("case", DOUBLE_CASES, ids=CASE_IDS)
def test_scratch_is_the_measured_peak(case, options):
    """The interpreter's result is the reference's, no access leaves its region, no arena byte
    is shared by concurrent threads (three of them, in parallel mode), and the computed scratch
    is the peak the arena reaches: at every size, by the input that takes the heaviest branch
    (the zero-angle branch of Rodrigues' formula needs less, so among inputs of one size the
    largest peak counts), on one thread (on three, a loop of fewer trips leaves slices unused).
    Three threads run the two smallest sizes: a shared byte shows there as at any size, and the
    interpreter's three-thread runs of the large ones took a sixth of this file's time."""
    program = dps_of(case.kernel, options)
    peaks: dict = {}
    for k, variant in enumerate(case.variants):
        args = arguments(case, variant)
        expected = core.run_kernel(case.kernel.program(), case.kernel.name, list(args))
        threaded = (3, 1) if options.parallel and k < 2 else (1,)
        for threads in threaded:  # one thread's run last: its peak counts
            run = run_kernel(program, case.kernel.name, list(args), threads)
            assert_close(run.result, with_rows_of(expected, run.result), rtol=1e-12, atol=1e-12)
            assert run.high_water <= run.scratch
        peaks[run.scratch] = max(peaks.get(run.scratch, 0), run.high_water)
    assert all(measured == scratch for scratch, measured in peaks.items()), peaks


# ----------------------------------------------------------------------------- hoisting

@fs.kernel
def twice_read(t: Array[Double], it: Index) -> Double:
    return t[it % length(t)] + t[(it * 7 + 3) % length(t)]


@fs.kernel
def add3_steps(a: Array[Double], b: Array[Double], c: Array[Double], iters: Card) -> Double:
    """add3_loop of benchmarks/micro_kernels.py: two vectors made in each iteration's body."""
    return ifold(lambda acc, it: acc + twice_read(vector_add(vector_add(a, b), c), it), 0.0, iters)


@fs.kernel
def row_norms_scaled(m: Array[Array[Double]], s: Double) -> Array[Double]:
    """A build whose iterations each make an intermediate row and call a kernel that needs
    scratch: the build is parallel in ``parallel`` mode."""
    return build(length(m), lambda i: vector_norm(vector_smul(m[i], s)) + m[i][0] * s)


def _add3_args(rng, n=5, iters=4):
    return [rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n), iters]


def test_intermediates_of_an_ifold_body_are_allocated_once_per_call(rng):
    hoisted = dps_of(add3_steps, Options()).kernels["add3_steps"]
    text = show_kernel(hoisted)
    # one alloc, both vectors merged into it, around the loop rather than in it
    assert text.index("alloc") < text.index("ifold"), text
    (region,) = allocs(hoisted.body)
    assert loops_around(hoisted.body, region.region) == ()
    kept = dps_of(add3_steps, Options(hoist_allocs=False)).kernels["add3_steps"]
    assert [len(loops_around(kept.body, a.region)) for a in allocs(kept.body)] == [1, 1]
    assert show_kernel(kept).index("ifold") < show_kernel(kept).index("alloc")
    args = _add3_args(rng)
    expected = core.run_kernel(add3_steps.program(), "add3_steps", list(args))
    for options in (Options(), Options(hoist_allocs=False)):
        run = run_kernel(dps_of(add3_steps, options), "add3_steps", list(args))
        assert run.result == pytest.approx(expected, rel=1e-12)
        assert run.high_water == run.scratch


def test_hoisting_makes_the_peak_reached_even_when_the_loop_never_runs(rng):
    args = _add3_args(rng, iters=0)
    hoisted = run_kernel(dps_of(add3_steps, Options()), "add3_steps", list(args))
    kept = run_kernel(dps_of(add3_steps, Options(hoist_allocs=False)), "add3_steps", list(args))
    assert hoisted.high_water == hoisted.scratch > 0
    assert kept.high_water == 0 < kept.scratch


def test_a_region_hoisted_out_of_a_parallel_build_has_one_part_per_thread(rng):
    """Per thread, not per iteration: the scratch grows with the thread count, not the rows; each
    thread's part starts on a cache line of its own (the last one unpadded)."""
    program = dps_of(row_norms_scaled, Options(parallel=True))
    k = program.kernels["row_norms_scaled"]
    (region,) = allocs(k.body)
    outer = next(u for u in ir.walk(k.body) if isinstance(u, ir.Build))
    assert outer.parallel and loops_around(k.body, region.region) == ()
    rows, cols, threads = k.sizes
    assert threads.name == k.threads == k.params[-1][0]
    row = thread_slice(8 * cols) / 8  # one thread's row of doubles, whole cache lines
    assert sympy.simplify(region.count - (row * (threads - 1) + cols)) == 0
    calls = {u.fn: u for u in ir.walk(outer.body) if isinstance(u, ir.Call)}
    assert calls["vector_smul"].dest == ir.Offset(ir.RVar(region.region), THREAD * row)
    # the callee's scratch (vector_norm's vector_emul) is per thread too, above the region; the
    # callee runs on its caller's thread alone: its thread count is 1
    assert [a for u in calls.values() for a in u.args[-1:]] == [core.Lit(1, Card)] * 2
    norm = program.kernels["vector_norm"]
    callee = norm.scratch.xreplace({norm.sizes[0]: cols, norm.sizes[1]: 1})
    frames = thread_slice(region_end(region))  # the threads' frames start on a cache line
    assert sympy.simplify(calls["vector_norm"].scratch_offset - (frames + THREAD * thread_slice(callee))) == 0
    assert sympy.simplify(k.scratch - (frames + (threads - 1) * thread_slice(callee) + callee)) == 0
    assert k.scratch.xreplace({rows: 10 ** 6, cols: 3, threads: 2}) == k.scratch.xreplace({rows: 5, cols: 3, threads: 2})
    m = rng.standard_normal((4, 3))
    for n_threads in (1, 2, 4):
        run = run_kernel(program, "row_norms_scaled", [m, 0.5], n_threads)
        np.testing.assert_allclose(run.result, np.linalg.norm(0.5 * m, axis=1) + 0.5 * m[:, 0], rtol=1e-12)
        assert run.high_water == run.scratch


def region_end(a: ir.Alloc) -> sympy.Expr:
    return a.offset + region_bytes(a.elem, a.count)


def test_parallel_build_without_hoisting_gives_each_thread_its_own_frame(rng):
    program = dps_of(row_norms_scaled, Options(parallel=True, hoist_allocs=False))
    k = program.kernels["row_norms_scaled"]
    (region,) = allocs(k.body)
    (outer,) = loops_around(k.body, region.region)
    assert outer.parallel
    threads = k.sizes[-1]
    peak = k.scratch.xreplace({threads: 1})  # one thread: one frame, the body's peak
    assert sympy.simplify(k.scratch - ((threads - 1) * thread_slice(peak) + peak)) == 0
    assert sympy.simplify(region.offset - THREAD * thread_slice(peak)) == 0
    run = run_kernel(program, "row_norms_scaled", [rng.standard_normal((3, 4)), 2.0], threads=3)
    assert run.high_water == run.scratch


def test_sharing_a_region_among_parallel_iterations_is_caught(rng):
    """The interpreter's race check is what the parallel layout is tested by: marking the build
    parallel without the per-thread layout must fail it."""
    sequential = dps_of(row_norms_scaled, Options())
    k = sequential.kernels["row_norms_scaled"]
    racy = replace(k, body=_mark_outer_parallel(k.body), params=(*k.params, ("nthreads", Card, ())),
                   sizes=(*k.sizes, size_symbol("nthreads")), threads="nthreads")
    program = ir.Program({**sequential.kernels, k.name: racy}, sequential.entry)
    assert run_kernel(program, k.name, [rng.standard_normal((3, 4)), 2.0], threads=1).high_water > 0
    with pytest.raises(AssertionError, match="shared by concurrent threads"):
        run_kernel(program, k.name, [rng.standard_normal((3, 4)), 2.0], threads=2)


def _mark_outer_parallel(t: ir.Term) -> ir.Term:
    return replace(t, parallel=True) if isinstance(t, ir.Build) else ir.map_children(_mark_outer_parallel, t)


def test_only_outermost_builds_are_parallel():
    k = dps_of(linalg.matrix_transpose, Options(parallel=True)).kernels["matrix_transpose"]
    builds = [u for u in ir.walk(k.body) if isinstance(u, ir.Build)]
    assert [b.parallel for b in builds] == [True, False]
    assert "build∥ out" in show_kernel(k)
    sequential = dps_of(linalg.matrix_transpose, Options()).kernels["matrix_transpose"]
    assert not any(b.parallel for b in ir.walk(sequential.body) if isinstance(b, ir.Build))


@fs.kernel
def smoothed_rows(m: Array[Array[Double]], k: Card) -> Array[Array[Double]]:
    """An array-state ifold (two buffers, swapped) in each iteration of a build."""
    return build(length(m), lambda i: ifold(lambda u, step: jacobi_step(u), m[i], k))


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_double_buffers_in_a_build_stay_two_regions(rng, options):
    k = dps_of(smoothed_rows, options).kernels["smoothed_rows"]
    loop = next(u for u in ir.walk(k.body) if isinstance(u, ir.Ifold))
    regions = {a.region: a for a in allocs(k.body)}
    b0, b1 = (regions[b] for b in loop.buffers)
    assert b0.offset != b1.offset
    # hoisted out of a sequential build; in a parallel one, each iteration's frame has its own
    outer = len(loops_around(k.body, b0.region))
    assert outer == (0 if options.hoist_allocs and not options.parallel else 1)
    m = rng.standard_normal((3, 6))
    expected = np.stack([iterate.np_jacobi(row, 4) for row in m])
    run = run_kernel(dps_of(smoothed_rows, options), "smoothed_rows", [m, 4])
    np.testing.assert_allclose(run.result, expected, rtol=1e-12)
    assert run.high_water == run.scratch
    np.testing.assert_allclose(smoothed_rows.with_options(**vars(options))(m, 4), expected, rtol=1e-12)


# ----------------------------------------------------------------------------- merging

def test_consecutive_allocs_merge_into_one_region_at_offsets():
    merged = dps_of(add3_steps, Options()).kernels["add3_steps"]
    apart = dps_of(add3_steps, Options(merge_allocs=False)).kernels["add3_steps"]
    (region,) = allocs(merged.body)
    assert len(allocs(apart.body)) == 2
    n = merged.sizes[0]
    assert sympy.simplify(region.count - 2 * n) == 0 and region.dims is None
    dests = {u.dest for u in ir.walk(merged.body) if isinstance(u, ir.Call) and u.fn == "vector_add"}
    assert dests == {ir.RVar(region.region), ir.Offset(ir.RVar(region.region), n)}
    assert f"alloc (({2 * n}) × Double)" in show_kernel(merged)


# ----------------------------------------------------------------------------- cardinality

def test_dead_cardinality_lets_are_gone():
    """``length`` leaves ``let tmp = v_d0`` (and for ``length(m[0])`` the row view it was taken
    of) once D⟦·⟧ has made every size symbolic: after simplification no let of a size or of an
    unchecked read binds a name that nothing reads."""
    for case in CASES:
        for k in dps_of(case.kernel, Options()).kernels.values():
            for u in ir.walk(k.body):
                if isinstance(u, ir.Let) and isinstance(u.rhs, (ir.CardOf, ir.Get)):
                    pure = isinstance(u.rhs, ir.CardOf) or not u.rhs.checked
                    assert u.name in names_used(u.body) or not pure, show_kernel(k)
    after = show_kernel(dps_of(linalg.vector_add, Options()).kernels["vector_add"])
    before = show_kernel(_translated[linalg.vector_add].kernels["vector_add"])
    assert "let tmp = v1_d0 in" in before and "let tmp" not in after


def test_generated_c_computes_no_shapes():
    """No size is assigned to a variable in the C: every one is an expression of the inputs."""
    for kernel in (linalg.matrix_cols, linalg.vector_add, linalg.matrix_mul):
        source = kernel.c_source()
        assert not re.search(r"\b\w+ = \w+_d\d+;", source), source


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_compiled_c_agrees_under_every_buffer_option(rng, options):
    m = rng.standard_normal((4, 3))
    np.testing.assert_allclose(row_norms_scaled.with_options(**vars(options))(m, 0.5),
                               row_norms_scaled.reference(m, 0.5), rtol=1e-12)
    args = _add3_args(rng, n=6, iters=9)
    compiled = add3_steps.with_options(**vars(options))
    assert compiled(*args) == pytest.approx(add3_steps.reference(*args), rel=1e-12)
