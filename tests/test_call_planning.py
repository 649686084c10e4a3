"""A kernel's call is planned once (``fsmooth.runtime.call_function``, ``fsmooth.python_entry``):
after the first call, a call runs the kernel's C entry point, no Python function and no symbolic
work; every check still holds (tests/test_entry_points.py compares the entry point with the
Python call it hands the uncommon cases to).
Work is counted (Python frames entered, sympy calls), never timed (``benchmarks/call_overhead.py``
measures the time)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import sympy

import fsmooth as fs
from fsmooth import Array, Bool, Card, Double, Index


@fs.kernel
def add(x: Double, y: Double) -> Double:
    return x + y


@fs.kernel
def total(v: Array[Double]) -> Double:
    return fs.ifold(lambda acc, i: acc + v[i], 0.0, fs.length(v))


@fs.kernel
def scale(v: Array[Double], s: Double) -> Array[Double]:
    return fs.build(fs.length(v), lambda i: s * v[i])


@fs.kernel
def dot(a: Array[Double], b: Array[Double]) -> Double:
    return fs.ifold(lambda acc, i: acc + a[i] * b[i], 0.0, fs.length(a))


@fs.kernel
def first(n: Card, v: Array[Index], flip: Bool) -> Index:
    return fs.ifold(lambda acc, i: v[i] if flip else acc + v[i], 0, n)


@fs.kernel
def halves(v: Array[Double]) -> Array[Double]:
    # scratch: the doubled vector is a region of the arena
    w = fs.build(fs.length(v), lambda i: 2.0 * v[i])
    return fs.build(fs.length(v), lambda i: w[i] * 0.25 + w[fs.length(v) - 1 - i] * 0.0)


@fs.kernel
def twice_total(v: Array[Double]) -> Double:
    return total(v) + total(v)


CASES = [
    (add, (1.5, 2.25)),
    (total, (np.arange(8.0),)),
    (scale, (np.arange(5.0), 3.0)),
    (dot, (np.arange(4.0), np.arange(6.0))),
    (first, (3, np.arange(5), False)),
    (halves, (np.arange(7.0),)),
]


def python_frames(fn, *args) -> list[str]:
    """The Python functions ``fn(*args)`` enters, by code name and file."""
    entered = []

    def profile(frame, event, arg):
        if event == "call":
            entered.append(f"{frame.f_code.co_name} in {frame.f_code.co_filename}")

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return entered


@pytest.mark.parametrize("kernel, args", CASES, ids=[k.name for k, _ in CASES])
def test_a_call_runs_no_python_function(kernel, args):
    kernel(*args)  # the first call compiles and plans
    assert python_frames(kernel, *args) == []  # the entry point, C
    # the Python call, what the entry point hands the uncommon cases to, is one function once planned
    kernel.executable().python_call(*args)
    assert python_frames(kernel.executable().python_call, *args) == [f"call in <fsmooth call of {kernel.name}>"]


@pytest.mark.parametrize("kernel, args", CASES, ids=[k.name for k, _ in CASES])
def test_no_symbolic_work_after_the_first_call(kernel, args, monkeypatch):
    expected = kernel.reference(*args)
    kernel(*args)

    def forbidden(*_, **__):
        raise AssertionError("sympy called during a planned call")

    for owner, name in ((sympy, "sympify"), (sympy, "lambdify"), (sympy.Basic, "subs"), (sympy.Basic, "xreplace"),
                        (sympy.Expr, "evalf"), (sympy.Basic, "free_symbols")):
        monkeypatch.setattr(owner, name, property(forbidden) if name == "free_symbols" else forbidden)
    # new sizes too: the plan of new sizes asks C (K_check_sizes, K_shape, K_scratch_bytes), not sympy
    grown = tuple(np.concatenate([a, a]) if isinstance(a, np.ndarray) else a for a in args)
    np.testing.assert_allclose(kernel(*args), expected, rtol=1e-12)
    monkeypatch.undo()
    np.testing.assert_allclose(kernel(*grown), kernel.reference(*grown), rtol=1e-12)


def test_sizes_zero_and_large_agree_with_reference_and_numpy(rng):
    for n in (0, 1, 1_000_003):
        v = rng.standard_normal(n)
        assert total(v) == pytest.approx(total.reference(v), rel=1e-9, abs=1e-9)
        assert total(v) == pytest.approx(np.sum(v), rel=1e-9, abs=1e-9)
        np.testing.assert_array_equal(scale(v, 2.0), 2.0 * v)
        np.testing.assert_allclose(halves(v), 0.5 * v)
        assert halves(v).shape == (n,)


def test_every_check_holds_after_the_first_call():
    v = np.arange(6.0)
    assert total(v) == 15.0  # planned
    with pytest.raises(TypeError, match="takes 1 argument, got 2"):
        total(v, v)
    with pytest.raises(TypeError, match="takes 2 arguments, got 0"):
        add()
    with pytest.raises(TypeError, match="must be a 1-D array"):
        total(np.ones((2, 3)))
    with pytest.raises(TypeError, match="'x'"):
        add("1.0", 2.0)
    with pytest.raises(TypeError, match="booleans"):
        total(np.array([True, False]))
    with pytest.raises(TypeError, match="must be"):
        add(True, 2.0)  # a bool is no Double
    with pytest.raises(ValueError, match="too large"):
        add(10 ** 400, 1.0)
    with pytest.raises(ValueError, match="'b'"):
        dot(np.ones(3), np.ones(2))  # b is read past its end: K_check_sizes says no
    with pytest.raises(ValueError, match=">= 0"):
        first(-1, np.arange(3), False)
    with pytest.raises(ValueError, match="int64"):
        first(2 ** 63, np.arange(3), False)
    with pytest.raises(TypeError, match="without loss"):
        first(2, np.arange(3.0), False)
    with pytest.raises(TypeError, match="bool"):
        first(2, np.arange(3), 1)
    # what the common-case test lets pass to the converter, converted as before
    assert add(np.float32(1.5), 2) == 3.5
    assert add(1, 2) == 3.0
    assert total(v[::2]) == 6.0  # not contiguous
    assert total(np.asfortranarray(v)) == 15.0
    assert total([1, 2, 3]) == 6.0
    assert total(np.arange(4, dtype=np.int32)) == 6.0
    assert first(np.int64(2), np.arange(5, dtype=np.uint8), np.bool_(False)) == 1
    assert first(3, np.arange(5), True) == 2


def test_a_reference_run_calls_the_reference_of_a_planned_kernel():
    v = np.arange(4.0)
    assert total(v) == 6.0  # planned: its call is the written function
    frames = python_frames(twice_total.reference, v)
    # twice_total's body calls total twice, each time its planned call, which runs total's body
    assert frames.count("call in <fsmooth call of total>") == 2
    assert frames.count(f"total in {__file__}") == 2
    assert twice_total.reference(v) == 12.0 == twice_total(v)
