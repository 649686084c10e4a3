"""The one range analysis (``fsmooth.dps.ranges``): a read that DPS asks to check is, in the
generated code, either checked or proven in range by the same analysis, and the record of each
kernel (``KernelInterface.range_checks``) says which, with the proof's facts."""
from __future__ import annotations

import importlib
import itertools
import pathlib
import re
import shutil

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import fsmooth as fs
from fsmooth import Array, Double, Index, build, length
from fsmooth.driver import run_pipeline
from fsmooth.dps import ir as d
from fsmooth.dpia.loop_checks import RangeTest
from fsmooth.dps.ranges import Bounds, Ranges, bounds, in_range, nonnegative, positive

CORPUS = sorted(p.stem for p in (pathlib.Path(__file__).parent / "corpus").glob("*.py") if p.name != "__init__.py")


@fs.kernel
def guarded_shift(a: Array[Double], b: Array[Double]) -> Array[Double]:
    # under a branch, so DPS checks it; the guard proves it
    return build(length(b), lambda i: a[i + 1] if i + 1 < length(a) else b[i])


@fs.kernel
def guarded_pair_sums(a: Array[Double], b: Array[Double]) -> Array[Double]:
    # the guard bounds 2i, the read is at 2i + 1: the bound carries over with the offset
    return build(length(b), lambda i: a[2 * i] + a[2 * i + 1] if 2 * i < length(a) - 1 else b[i])


@fs.kernel
def gather(v: Array[Double], at: Array[Index]) -> Array[Double]:
    return build(length(at), lambda i: v[at[i]])


def _requested(dps: d.Program, name: str) -> list:
    """The locations of the reads that DPS asks the generated code to check."""
    return [t.loc for t in d.walk(dps.kernels[name].body) if isinstance(t, d.Get) and t.checked]


def _bounds_checks(c: str) -> list[str]:
    """The range tests of ``c``: the tests that fail with status 1 (out of range)."""
    return re.findall(r"if \(!\(.*\)\) \{ \w+ = 1; goto .*", c)


def _tests_the_range(c: str, index: str, length: str) -> bool:
    """Whether ``c`` tests 0 <= index < length, in any of the forms of ``dpia.loop_checks.RangeTest``."""
    return any(RangeTest(index, length, "", None, *signs).rstrip() in c
               for signs in ((False, False), (True, False), (False, True)))


def test_a_read_the_guard_proves_is_proven_not_checked():
    stages = run_pipeline(guarded_shift.program(), guarded_shift.options)
    line = guarded_shift.fn.__code__.co_firstlineno + 3
    assert [loc.lineno for loc in _requested(stages.dps, "guarded_shift")] == [line, line]
    shifted, other = stages.c.interfaces["guarded_shift"].range_checks
    assert not shifted.emitted and shifted.index == "(1 + i)" and shifted.length == "a_d0"
    assert shifted.facts == ("0 <= 1", "a_d0 - 1 <= a_d0 - 1", "0 <= i <= b_d0 - 1", "i + 1 <= a_d0 - 1")
    # the other branch's read is in range by its loop alone
    assert not other.emitted and other.facts == ("0 <= 0", "b_d0 - 1 <= b_d0 - 1", "0 <= i <= b_d0 - 1")
    assert not _bounds_checks(stages.c.source)
    a, b = np.arange(3.0), np.arange(10.0, 15.0)
    np.testing.assert_array_equal(guarded_shift(a, b), [1.0, 2.0, 12.0, 13.0, 14.0])


def test_a_guard_proves_a_read_at_a_constant_offset_from_what_it_bounds():
    stages = run_pipeline(guarded_pair_sums.program(), guarded_pair_sums.options)
    checks = stages.c.interfaces["guarded_pair_sums"].range_checks
    assert len(checks) == 3 and not any(check.emitted for check in checks)
    second = next(check for check in checks if check.index == "(1 + (2 * i))")
    assert "2*i <= a_d0 - 2" in second.facts
    assert not _bounds_checks(stages.c.source)
    rng = np.random.default_rng(3)
    for n, m in ((0, 0), (0, 4), (1, 3), (5, 4), (6, 4), (7, 2), (40, 30)):
        a, b = rng.standard_normal(n), rng.standard_normal(m)
        i = np.arange(m)
        inside = 2 * i < n - 1
        oracle = np.where(inside, a[np.minimum(2 * i, max(n - 1, 0))] if n else 0.0, b)
        oracle = np.where(inside, oracle + (a[np.minimum(2 * i + 1, max(n - 1, 0))] if n else 0.0), oracle)
        np.testing.assert_array_equal(guarded_pair_sums(a, b), guarded_pair_sums.reference(a, b))
        np.testing.assert_array_equal(guarded_pair_sums(a, b), oracle)


def test_a_read_not_provable_is_checked_and_fails_on_bad_input():
    stages = run_pipeline(gather.program(), gather.options)
    assert len(_requested(stages.dps, "gather")) == 1
    (check,) = stages.c.interfaces["gather"].range_checks
    assert check.emitted and check.facts == ()
    # the index is read from an array (any sign), the bound a length (>= 0): one unsigned comparison
    assert f"if (!((uint64_t){check.index} < (uint64_t){check.length}))" in stages.c.source
    np.testing.assert_array_equal(gather(np.arange(4.0), np.array([3, 0])), [3.0, 0.0])
    for bad in ([4], [-1], [0, 7], [np.iinfo(np.int64).min], [np.iinfo(np.int64).max]):
        with pytest.raises(IndexError):
            gather(np.arange(4.0), np.array(bad))


def test_the_opencl_record_decides_the_same_reads():
    assert [c.emitted for c in guarded_shift.opencl_artifact().interface.range_checks] == [False, False]
    assert [c.emitted for c in gather.opencl_artifact().interface.range_checks] == [True]


@pytest.mark.parametrize("module", CORPUS)
def test_every_check_dps_asks_for_is_emitted_or_proven(module):
    for kernel in vars(importlib.import_module(f"corpus.{module}")).values():
        if not isinstance(kernel, fs.Kernel):
            continue
        stages = run_pipeline(kernel.program(), kernel.options)
        for name, interface in stages.c.interfaces.items():
            record = interface.range_checks
            assert set(_requested(stages.dps, name)) <= {c.loc for c in record}, (module, name)
            for c in record:
                assert c.emitted or c.facts, c
                if c.emitted:
                    assert _tests_the_range(stages.c.source, c.index, c.length), c


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("gcc") is None,
                    reason="counting instructions needs valgrind and gcc")
def test_a_range_test_is_one_comparison_and_ba_runs_fewer_instructions(tmp_path, monkeypatch):
    """BA's reads at indices read from obs (a camera, a point) are tested with one unsigned
    comparison each, where both ends took two comparisons and two branches (gcc cannot merge them
    without knowing the bound's sign): the same bits, fewer instructions (callgrind)."""
    from fsmooth.dpia import emit
    from corpus import adbench_ba
    from test_local_arrays import build_ba, instructions

    source = adbench_ba.ba_objective.c_source()
    loop = source[re.search(r"static int \w+_ba_objective_body\([^)]*\) \{", source).end():]
    assert "if (!((uint64_t)index < (uint64_t)cams_d0))" in loop and "0 <= " not in loop
    one, printed_one = instructions(build_ba(tmp_path / "one", ("-O3", "-fwrapv")), tmp_path / "one")
    monkeypatch.setattr(emit, "RangeTest", lambda index, bound, fail, record, *signs: RangeTest(index, bound, fail, record))
    two, printed_two = instructions(build_ba(tmp_path / "two", ("-O3", "-fwrapv")), tmp_path / "two")
    assert printed_one == printed_two and printed_one.startswith("0 ")  # the same bits
    # 997 observations, two tested indices each (gcc merges the repeated tests of the camera's):
    # gcc 12, portable: 2 instructions fewer a test (228,228 against 232,217)
    assert two - one >= 2 * 2 * 997, (one, two)


def test_ranges_and_proofs():
    n, m = sympy.symbols("n m", integer=True, nonnegative=True)
    i, j, e = sympy.symbols("i j e", integer=True)
    ranges = Ranges().inside(i, n - 1).inside(j, i - 1)
    # exact: j < i makes the inner loop run only for i ≥ 1
    assert bounds(i + j, ranges) == Bounds(1, 2 * n - 3, True)
    assert ranges.given(i, m) == ranges  # a loop variable keeps its own range
    guarded = ranges.given(e, m - 1)
    assert guarded.bounds_of(e) == (None, m - 1) and guarded.given(e, 0) == guarded
    proof = in_range(j, n, ranges)
    assert proof is not None and proof.low == 0
    assert proof.facts == ("0 <= i <= n - 1", "0 <= j <= i - 1")
    assert in_range(j, n - 2, ranges) is None
    # j < ⌊i/4⌋ (a jammed chunk of i elements, dpia.unroll_jam): the inner loop runs for i ≥ 4 only
    blocks = Ranges().inside(i, n).inside(j, sympy.floor(i / 4) - 1)
    assert bounds(i, blocks) == Bounds(4, n, True)
    assert bounds(4 * j + 3, blocks) == Bounds(3, 4 * n - 1, False)  # ⌊i/4⌋ ≤ i/4: not attained
    # an if's bound on an expression carries over to it plus a constant, not beyond
    strided = Ranges().inside(i, 255).inside(j, n).given(i + 256 * j, n - 2)
    assert in_range(1 + i + 256 * j, n, strided) is not None
    assert in_range(2 + i + 256 * j, n, strided) is None
    assert in_range(i + 256 * j - 1, n, strided) is None  # -1 at i = j = 0
    # or plus what the loops bound by a constant: a guard on a vector's last element (16 q + 15)
    # proves its lanes' reads, u the vectors' first lane (one vector: 0) and k a lane
    q, u = sympy.symbols("q u", integer=True)
    vectors = Ranges().inside(q, n).inside(u, sympy.Integer(0)).given(16 * q + 15, n - 1)
    assert all(in_range(16 * q + u + k, n, vectors) is not None for k in range(16))
    assert in_range(16 * q + u + 16, n, vectors) is None
    two_vectors = Ranges().inside(q, n).inside(u, sympy.Integer(1)).given(16 * q + 15, n - 1)
    assert in_range(16 * q + u + 15, n, two_vectors) is None


@fs.kernel
def divide_by_read(at: Array[Index]) -> Array[Index]:
    return build(length(at), lambda i: i // at[0])


def test_a_divisor_read_from_an_array_is_never_proven_nonzero():
    x = sympy.Symbol("x", integer=True)  # a value read into a variable: its sign is unknown
    opaque = sympy.Dummy("opaque", integer=True)  # code generation's placeholder for a read
    k, n = sympy.Symbol("k", integer=True), sympy.Symbol("n", integer=True)
    sizes = Ranges(naturals=frozenset({n}))
    for divisor in (x, opaque):
        assert not positive(divisor, sizes.inside(k, n - 1))
        # inside `for k < divisor·y`, divisor·y ≥ 1 does not make divisor ≥ 1 where y may be negative
        assert not positive(divisor, sizes.inside(k, divisor * x - 1))
        assert not nonnegative(divisor, sizes)
    # inside `for k < x·n` with n a size, x·n ≥ 1 and n ≥ 0: x ≥ 1
    assert positive(x, sizes.inside(k, x * n - 1)) and positive(x, sizes.inside(k, x - 1))
    assert "== 0) {" in divide_by_read.c_source()
    np.testing.assert_array_equal(divide_by_read(np.array([2, 5, 7])), [0, 0, 1])
    with pytest.raises(ZeroDivisionError):
        divide_by_read(np.array([0, 1]))
    with pytest.raises(ZeroDivisionError):
        divide_by_read.reference(np.array([0, 1]))


def test_a_size_past_its_zero_test_is_positive_and_a_read_divisor_still_not():
    """``Ranges.nonzero``: a divisor tested nonzero before the point is ≥ 1 there only where it is
    ≥ 0 (a size); a value read from an array that passed its zero test may be negative."""
    x = sympy.Symbol("x", integer=True)
    k, n = sympy.Symbol("k", integer=True), sympy.Symbol("n", integer=True)
    sizes = Ranges(naturals=frozenset({n}))
    assert not positive(n, sizes) and positive(n, sizes.tested_nonzero(n))
    assert not positive(x, sizes.tested_nonzero(x)) and not positive(n, sizes.tested_nonzero(x))
    loop = sizes.inside(k, sympy.Integer(9))  # a loop of 10 trips says nothing of n
    proof = in_range(sympy.Mod(k + 5, n), n, loop.tested_nonzero(n))
    assert proof is not None and "n != 0 (tested)" in proof.facts
    assert in_range(sympy.Mod(k + 5, n), n, loop) is None


# ----------------------------------------------------------------------------- soundness, by enumeration

_N, _M = sympy.symbols("n m", integer=True)  # sizes, as code generation names them: ≥ 0 by ``naturals``
_X = sympy.Symbol("x", integer=True)  # a value read from an array: any sign
_LOOPS = sympy.symbols("i j k", integer=True)
_SIZES = range(0, 4)
_DATA = range(-2, 3)


@st.composite
def _ranges(draw):
    """Up to three nested loops, each bound a size, a constant or an expression of an outer loop
    variable (``for j < i``, ``for j < i - 2``, ``for j < n - i``, ``for j < ⌊i/2⌋``: the blocks
    of a jammed chunk of i iterations)."""
    ranges = Ranges(naturals=frozenset({_N, _M}))
    for depth in range(draw(st.integers(1, 3))):
        outer = _LOOPS[:depth]
        choices = [_N - 1, _M - 1, sympy.Integer(2), _N * _M - 1]
        choices += [t - c for t in outer for c in (1, 2)] + [_N - t - 1 for t in outer]
        choices += [sympy.floor(t / 2) - 1 for t in outer]
        ranges = ranges.inside(_LOOPS[depth], draw(st.sampled_from(choices)))
    return ranges


@st.composite
def _expressions(draw, ranges):
    """An affine or polynomial index over the loops' variables, the sizes and a data value, maybe
    divided (floor or remainder) by a constant or a size."""
    atoms = [r[0] for r in ranges.loops] + [_N, _M, _X, sympy.Integer(1)]
    terms = []
    for _ in range(draw(st.integers(1, 4))):
        factors = draw(st.lists(st.sampled_from(atoms), min_size=1, max_size=2))
        terms.append(draw(st.integers(-3, 3)) * sympy.Mul(*factors))
    e = sympy.Add(*terms)
    match draw(st.sampled_from(["plain", "floor", "mod", "floor by size", "mod by size"])):
        case "floor":
            e = sympy.floor(e / draw(st.integers(1, 4)))
        case "mod":
            e = sympy.Mod(e, draw(st.integers(1, 4)))
        case "floor by size":
            e = sympy.floor(e / _M)
        case "mod by size":
            e = sympy.Mod(e, _M)
    return e


def _points(ranges):
    """Every (sizes and data, loop variables) assignment that reaches the point inside the ranges."""
    for n, m, x in itertools.product(_SIZES, _SIZES, _DATA):
        outer = {_N: sympy.Integer(n), _M: sympy.Integer(m), _X: sympy.Integer(x)}
        yield outer, list(_reach(ranges.loops, dict(outer)))


def _reach(loops, at):
    if not loops:
        yield at
        return
    (variable, lo, hi), *inner = loops
    for v in range(int(sympy.sympify(lo).xreplace(at)), int(sympy.sympify(hi).xreplace(at)) + 1):
        yield from _reach(inner, {**at, variable: sympy.Integer(v)})


def _value(e, at):
    try:
        value = sympy.sympify(e).xreplace(at)
    except ZeroDivisionError:  # Mod(e, 0)
        return None
    return None if value.has(sympy.zoo, sympy.nan) or not value.is_Integer else int(value)


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_every_bound_holds_at_every_point(data):
    ranges = data.draw(_ranges())
    e = data.draw(_expressions(ranges))
    extent = bounds(e, ranges)
    if extent is None:
        return
    for sizes, points in _points(ranges):
        values = [_value(e, at) for at in points]
        if any(v is None for v in values):  # a division by a size 0: the kernel never gets there
            continue
        for at, v in zip(points, values):
            assert _value(extent.lo, at) <= v <= _value(extent.hi, at), (e, ranges, extent, at)
        if extent.exact and values and not e.has(sympy.Mod):
            # attained: the lowest and highest value reached (a remainder that may wrap around is
            # bounded by 0 .. c - 1, whether or not its dividend spans c values: Bounds)
            assert (min(values), max(values)) == (_value(extent.lo, sizes), _value(extent.hi, sizes)), (e, extent, sizes)


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_nonnegative_and_positive_hold_at_every_point(data):
    ranges = data.draw(_ranges())
    e = data.draw(_expressions(ranges))
    claims = [(nonnegative(e, ranges), 0), (positive(e, ranges), 1)]
    for _, points in _points(ranges):
        for at in points:
            v = _value(e, at)
            for claim, least in claims:
                assert not claim or v is None or v >= least, (e, ranges, at, claims)
