"""The one range analysis (``fsmooth.dps.ranges``): a read that DPS asks to check is, in the
generated code, either checked or proven in range by the same analysis, and the record of each
kernel (``KernelInterface.range_checks``) says which, with the proof's facts."""
from __future__ import annotations

import importlib
import pathlib
import re

import numpy as np
import pytest
import sympy

import fsmooth as fs
from fsmooth import Array, Double, Index, build, length
from fsmooth.driver import run_pipeline
from fsmooth.dps import ir as d
from fsmooth.dps.ranges import Ranges, in_range, interval

CORPUS = sorted(p.stem for p in (pathlib.Path(__file__).parent / "corpus").glob("*.py") if p.name != "__init__.py")


@fs.kernel
def guarded_shift(a: Array[Double], b: Array[Double]) -> Array[Double]:
    # under a branch, so DPS checks it; the guard proves it
    return build(length(b), lambda i: a[i + 1] if i + 1 < length(a) else b[i])


@fs.kernel
def gather(v: Array[Double], at: Array[Index]) -> Array[Double]:
    return build(length(at), lambda i: v[at[i]])


def _requested(dps: d.Program, name: str) -> list:
    """The locations of the reads that DPS asks the generated code to check."""
    return [t.loc for t in d.walk(dps.kernels[name].body) if isinstance(t, d.Get) and t.checked]


def _bounds_checks(c: str) -> list[str]:
    return re.findall(r"if \(!\(0 <= .*", c)


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


def test_a_read_not_provable_is_checked_and_fails_on_bad_input():
    stages = run_pipeline(gather.program(), gather.options)
    assert len(_requested(stages.dps, "gather")) == 1
    (check,) = stages.c.interfaces["gather"].range_checks
    assert check.emitted and check.facts == ()
    assert f"0 <= {check.index} && {check.index} < {check.length}" in stages.c.source
    np.testing.assert_array_equal(gather(np.arange(4.0), np.array([3, 0])), [3.0, 0.0])
    for bad in ([4], [-1], [0, 7]):
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
                    assert f"0 <= {c.index} && {c.index} < {c.length}" in stages.c.source, c


def test_ranges_and_proofs():
    n, m = sympy.symbols("n m", integer=True, nonnegative=True)
    i, j, e = sympy.symbols("i j e", integer=True)
    ranges = Ranges().inside(i, n - 1).inside(j, i - 1)
    assert interval(i + j, ranges) == (0, 2 * n - 3)
    assert ranges.given(i, m) == ranges  # a loop variable keeps its own range
    guarded = ranges.given(e, m - 1)
    assert guarded.bounds_of(e) == (None, m - 1) and guarded.given(e, 0) == guarded
    proof = in_range(j, n, ranges)
    assert proof is not None and proof.low == 0
    assert proof.facts == ("0 <= i <= n - 1", "0 <= j <= i - 1")
    assert in_range(j, n - 2, ranges) is None
