"""Work the compiler no longer does (issue 11: compile time), counted, not timed, and the
shortcuts that replace sympy's own work shown to give sympy's answers:

- the OpenCL pipeline keeps only its entry once every call is inlined, so no pass optimises,
  shapes or translates the kernels it called (their OpenCL would be thrown away);
- the optimiser stops at its fixed point once every rewrite has left the kernel as it is, not
  after a further round, and renormalises (``anf_kernel``) only a body that a rewrite changed;
- ``inline_lets`` counts the uses of every name in one walk of the kernel, not one per let-bound
  build;
- the int64 overflow analysis (``dps.ranges._overflow_free``, ``_bounded``) answers each question
  once, and ``in_range`` asks about the guards around a read only where the loops' bounds and the
  guards before fail to prove it (a vector's branch has a guard a lane);
- ``stage_rows`` finds the names each OpenCL kernel mentions once, not once per other kernel;
- ``plan_opencl`` substitutes the views of a kernel's hoisted buffers in one walk of its body, not
  one walk of each ``new``'s body;
- sympy's Min and Max compare each pair of arguments once (``dps.ranges._comparable``), however
  many Maxes of growing argument lists are built;
- a size's values at the natural points (``shape.sizes.natural_samples``), evaluated in Python's
  rationals, and ``dps.ranges.replaced`` are those of sympy's ``xreplace`` and ``replace``.

The kernels compiled by the pipelines changed here agree with their reference and a numpy oracle."""
from __future__ import annotations

import numpy as np
import sympy

from corpus import adbench_hand, adbench_lstm, gmm
from fsmooth import driver, fusion, optimize
from fsmooth.anf import anf_program
from fsmooth.dps import ranges
from fsmooth.cost_model import GENERIC_GPU
from fsmooth.options import Options
from fsmooth.shape import sizes
from fsmooth.shape.size_printer import NonnegativeQuotient
from fsmooth.shape.sizes import natural_samples, size_symbol


def test_the_opencl_pipeline_keeps_only_the_entry_once_its_calls_are_inlined():
    program = adbench_hand.hand_objective.program()
    assert len(program.kernels) > 1
    trace = driver.run_passes(driver.opencl_passes(Options()), program)
    for name in ("inline_every_call", "optimise", "auto_reductions", "dps"):
        form = trace.last(name)
        kernels = (form.program if name == "auto_reductions" else form).kernels
        assert list(kernels) == [program.entry], name
    # the C pipeline, which calls its kernels, keeps them all
    assert set(driver.run_passes(driver.c_passes(Options()), program).last("dps").kernels) == set(program.kernels)


def _recorded_rewrites(monkeypatch) -> list:
    """``(rewrite, whether it changed the kernel)`` for each rewrite the optimiser runs from now on."""
    calls: list = []
    original = optimize.kernel_rewrites

    def counted(options):
        def counting(name, rewrite):
            def run(program, k):
                rewritten = rewrite(program, k)
                calls.append((name, rewritten != k))
                return rewritten
            return run
        return tuple((name, counting(name, rewrite)) for name, rewrite in original(options))

    monkeypatch.setattr(optimize, "kernel_rewrites", counted)
    return calls


def test_the_optimiser_stops_once_every_rewrite_has_left_the_kernel_unchanged(monkeypatch):
    calls = _recorded_rewrites(monkeypatch)
    program = anf_program(gmm.gmm_objective.program())
    kernel = program.kernels[program.entry]
    optimised = optimize.optimize_kernel(program, kernel, Options(), lambda name, k: None)
    n = len(optimize.REWRITES)
    changes = [j for j, (_, changed) in enumerate(calls) if changed]
    assert changes, "the entry of gmm_objective is rewritten"
    # after the last change, each rewrite exactly once: no round of known no-ops
    assert len(calls) == changes[-1] + 1 + n
    assert {name for name, _ in calls[changes[-1] + 1:]} == set(optimize.REWRITES)
    # the fixed point: one more round changes nothing
    again = optimize.optimize_kernel(program, optimised, Options(), lambda name, k: None)
    assert again == optimised


def test_the_optimiser_renormalises_only_what_a_rewrite_changed(monkeypatch):
    calls = _recorded_rewrites(monkeypatch)
    renormalised: list = []
    original_anf = optimize.anf_kernel
    monkeypatch.setattr(optimize, "anf_kernel", lambda program, k: renormalised.append(k.name) or original_anf(program, k))
    program = anf_program(gmm.gmm_objective.program())
    kernel = program.kernels[program.entry]
    optimised = optimize.optimize_kernel(program, kernel, Options(), lambda name, k: None)
    # inline_kernels renormalises what it inlines itself; every other rewrite is renormalised
    # where it changed the kernel, and only there
    changes = [name for name, changed in calls if changed and name != "inline_kernels"]
    unchanged = [name for name, changed in calls if not changed and name != "inline_kernels"]
    assert len(unchanged) > len(changes) > 0
    assert len(renormalised) == len(changes)
    monkeypatch.undo()
    assert optimize.optimize_kernel(program, kernel, Options(), lambda name, k: None) == optimised


def test_inline_lets_counts_uses_in_one_walk(monkeypatch):
    program = driver.run_passes(driver.opencl_passes(Options()), adbench_lstm.lstm_step.program()).last("inline_every_call")
    body = program.kernels[program.entry].body
    builds = sum(1 for node in fusion.walk(body) if isinstance(node, fusion.Let) and isinstance(node.rhs, fusion.Build))
    assert builds > 3
    walks: list = []
    original = fusion.walk
    monkeypatch.setattr(fusion, "walk", lambda e: walks.append(e) or original(e))
    inlined = fusion.inline_lets(body, into_reads=True)
    assert walks == [body]  # not one walk of its body per let-bound build
    assert inlined != body  # something was inlined


def test_the_overflow_analysis_answers_each_question_once(monkeypatch):
    asked: list = []
    original = ranges._bounded
    sympy.core.cache.clear_cache()
    for f in (original, ranges._overflow_free, ranges.overflow_conditions, ranges.simplify_index):
        f.cache_clear()
    monkeypatch.setattr(ranges, "_bounded", lambda x, known, r: asked.append((x, known, r)) or original(x, known, r))
    driver.run_passes(driver.opencl_passes(Options()), adbench_lstm.lstm_step.program())
    assert len(asked) > len(set(asked)) > 0  # the same sums and products asked again, in many operations
    assert original.cache_info().misses == len(set(asked))  # each answered once


def test_in_range_asks_the_guards_only_where_the_bounds_before_them_fail(monkeypatch):
    n, i, j = size_symbol("n"), sympy.Symbol("i", integer=True), sympy.Symbol("j", integer=True)
    asked: list = []
    original = ranges._constant_above
    monkeypatch.setattr(ranges, "_constant_above", lambda offset, r: asked.append(offset) or original(offset, r))
    ranges.in_range.cache_clear()
    # a vector's branch: its first lane i ≤ n - 16, a guard a lane (i + k ≤ n - 1)
    lanes = ranges.Ranges(naturals=frozenset({n})).inside(i, n - 16)
    for k in range(16):
        lanes = lanes.given(i + k, n - 1)
    assert len(lanes.facts) == 15
    assert ranges.in_range(i + 15, n, lanes) is not None
    assert asked == []  # the loop's bound proves the read: no guard asked
    # a read the loop does not prove: the guards in order, up to the one that proves it
    guarded = ranges.Ranges(naturals=frozenset({n})).inside(i, n - 1).inside(j, n - 1)
    guarded = guarded.given(i + j, n - 1).given(i + 1, n - 1).given(i + 2, n + 5)
    assert len(guarded.facts) == 3
    proof = ranges.in_range(i + 1, n, guarded)
    assert proof is not None and proof.high == n - 1
    assert asked == [1 - j, 0]  # i + 1 ≤ n - 1 + (1 - j ≤ 1) proves nothing; i + 1 ≤ n - 1 does
    assert ranges.in_range(i + 1, n, ranges.Ranges(naturals=frozenset({n})).inside(i, n - 1)) is None


def test_stage_rows_walks_each_kernel_once(monkeypatch):
    from corpus import adbench_gmm
    from fsmooth.dpia import stage_rows

    trace = driver.run_passes(driver.opencl_passes(Options()), adbench_gmm.gmm_full_objective.program())
    planned, staged = trace.last("plan_opencl"), trace.last("stage_rows")
    assert len(planned.kernels.phases) > 5
    walked: list = []
    original = stage_rows.free_identifiers
    monkeypatch.setattr(stage_rows, "free_identifiers", lambda c: walked.append(c) or original(c))
    again = stage_rows.stage_rows(planned, GENERIC_GPU)
    parts = [part for phase in planned.kernels.phases for part in phase.parts()]
    # each part of each kernel once, then those of the staged kernels (which buffers stay)
    assert len(walked) == len(parts) + sum(len(list(phase.parts())) for phase in again.kernels.phases)
    assert again == staged


def test_plan_opencl_substitutes_a_bodys_hoisted_views_in_one_walk(monkeypatch):
    """Each ``new`` hoisted to a buffer is read and written through its view: the views of a phase
    body's news are substituted in one walk of the body (``hoist_opencl._hoisted``), not one walk
    of each new's body, which walked nested news again for each new around them (GMM's objective:
    11 substitution steps a phrase of the program planned before)."""
    from fsmooth.dpia import phrases

    passes = driver.opencl_passes(Options())
    names = [p.name for p in passes]
    program = gmm.gmm_objective.program()
    trace = driver.run_passes(passes[:names.index("plan_opencl") + 1], program)
    before = trace.last("unroll_jam")
    nodes = sum(1 for _ in phrases.walk(before.kernels[before.entry].body))
    visits: list = []
    original = phrases.map_children

    def counting(f, node):
        if "substitute_variable" in getattr(f, "__qualname__", ""):
            visits.append(node)  # a step of a substitution
        return original(f, node)

    monkeypatch.setattr(phrases, "map_children", counting)
    planned = passes[names.index("plan_opencl")].run({"core": program, "unroll_jam": before}, lambda name, form: None)
    assert planned == trace.last("plan_opencl")
    buffers = planned.kernels.buffers
    assert sum(b.role == "local" for b in buffers.values()) > 5 and sum(b.role == "temp" for b in buffers.values()) > 5
    # a phase body, its fallback's, its local arrays reused by a second phase, a buffer shared between kernels
    assert 0 < len(visits) < 4 * nodes


def test_sympy_compares_each_pair_of_a_growing_max_once():
    n, m, k = (size_symbol(s) for s in "nmk")
    terms = [16 * sympy.ceiling(n / 2) + 4080, 16 * sympy.ceiling(m / 2) + 16 * sympy.ceiling(n * m / 2),
             32 * sympy.ceiling(sympy.Min(1024, sympy.floor((k + 16383) / 16384)) / 2) + 16432,
             16 * sympy.ceiling(k / 2) + 16 * sympy.ceiling(n * k / 2) + 2048]
    compared = []
    original = sympy.Max._is_connected

    def counting(x, y):
        compared.append(frozenset((x, y)))
        return original(x, y)

    sympy.core.cache.clear_cache()
    ranges._comparable.cache_clear()
    ranges._min_max.cache_clear()
    sympy.Max._is_connected = counting
    try:
        built = [ranges.min_max(sympy.Max, terms[:j]) for j in range(2, len(terms) + 1)]
    finally:
        sympy.Max._is_connected = original
    assert len(compared) == len(set(compared)) <= len(terms) * (len(terms) - 1) // 2
    for j, value in enumerate(built, start=2):
        assert value == sympy.Max(*terms[:j])  # what sympy builds, comparing every pair each time


def test_natural_samples_are_sympys_values_at_the_points():
    n, m = size_symbol("n"), size_symbol("m")
    i = sympy.Symbol("i", integer=True)
    cases = [sympy.Min(1024, sympy.floor((n + 16383) / 16384)) - 7,
             sympy.Mod(n - 3 * m, 7) - sympy.ceiling(n / 3),
             (n - m) ** 2 - sympy.Max(n, m) * m / 5,
             sympy.floor(n / (m + 1)) - 2, n * m - 2 ** 70, sympy.floor(-n / 3) + i,
             1 / n, sympy.Abs(n - m), NonnegativeQuotient(n, 3) - m, sympy.Mod(n, m + 1) * n]
    for e in cases:
        symbols = sorted(e.free_symbols, key=sympy.default_sort_key)
        zero = {s: sympy.Integer(0) for s in symbols}
        points = (zero, {s: sizes._LARGE for s in symbols}, *({**zero, s: sizes._LARGE} for s in symbols),
                  {s: sizes._HUGE for s in symbols})
        values = [e.xreplace(point) for point in points]
        expected = values if all(v.is_Number and v.is_finite for v in values) else None
        assert natural_samples(e) == expected, e
    # sympy refuses a Min of a number it cannot compare: no samples, not an error
    assert natural_samples(sympy.Min(1024, NonnegativeQuotient(n + 16383, 16384)) - m) is None


def test_replaced_is_sympys_replace():
    n, j = size_symbol("n"), sympy.Symbol("j", integer=True, nonnegative=True)
    group = sympy.Min(1024, sympy.floor((n + 16383) / 16384))
    e = j * group + sympy.floor((n - 1) / (1024 * group)) + sympy.Mod(j + group, 3) + group ** 2
    for kind, value in ((sympy.floor, lambda a: NonnegativeQuotient(*sympy.fraction(sympy.together(a)))),
                        (sympy.Mod, lambda a, d: a - d), (sympy.floor, lambda a: sympy.floor(a))):
        assert ranges.replaced(e, kind, value) == e.replace(kind, value)
    assert ranges.replaced(e, sympy.floor, lambda a: None) is e


def test_kernels_compiled_through_the_changed_passes_compute_as_reference_and_numpy(intel_cpu_context):
    rng = np.random.default_rng(11)
    # GMM's objective (the optimiser, fusion, the overflow analysis), 0 dimensions among the sizes
    for n, d, k in ((1, 0, 1), (1, 1, 1), (5, 3, 2), (70, 4, 3)):
        args = rng.normal(size=k), rng.normal(size=(k, d)), rng.normal(size=(k, d)), rng.normal(size=(n, d))
        expected = gmm.np_gmm_objective(*args)
        for got in (gmm.gmm_objective(*args), gmm.gmm_objective.opencl(*args, context=intel_cpu_context)):
            np.testing.assert_allclose(got, gmm.gmm_objective.reference(*args), rtol=1e-10)
            np.testing.assert_allclose(got, expected, rtol=1e-10)
    for v in (rng.uniform(-3.0, 3.0, 1), rng.uniform(-3.0, 3.0, 1000), rng.uniform(-30.0, 30.0, 100_000)):
        expected = np.log(np.sum(np.exp(v - v.max()))) + v.max()
        for got in (gmm.logsumexp(v), gmm.logsumexp.opencl(v, context=intel_cpu_context)):
            np.testing.assert_allclose(got, gmm.logsumexp.reference(v), rtol=1e-12)
            np.testing.assert_allclose(got, expected, rtol=1e-12)
