"""One rule for numbers in the compiled code and the reference (README "Integers and floats"):
integers are int64 and wrap around, as numpy's int64 arrays do; integer ``//`` and ``%`` by zero
raise; a size computed with an overflow is refused; floats are IEEE (``x / 0.0`` is inf, not a
ZeroDivisionError); ``int(x)`` outside int64 is a ValueError.  Each case is run compiled and as
reference, and checked against numpy."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fsmooth as fs
from fsmooth import Array, Card, Double, Float, Index, build, ifold, length

INT64 = st.integers(-2**63, 2**63 - 1)


@fs.kernel
def integer_ops(a: Index, b: Index) -> tuple[Index, Index, Index, Index]:
    return a + b, a - b, a * b, -a


@fs.kernel
def integer_division(a: Index, b: Index) -> tuple[Index, Index]:
    return a // b, a % b


@fs.kernel
def card_difference(n: Card, m: Card) -> Index:
    return n - m


@fs.kernel
def sum_plus_one(v: Array[Index]) -> Array[Index]:
    return build(length(v), lambda i: v[i] + 1)


@fs.kernel
def absolute(a: Index) -> Index:
    return abs(a)


@fs.kernel
def sized_by_product(n: Card, m: Card) -> Array[Double]:
    return build(n * m, lambda i: 1.0)


@fs.kernel
def ratio(x: Double, y: Double) -> Double:
    return x / y


@fs.kernel
def ratio32(x: Float, y: Float) -> Float:
    return x / y


@fs.kernel
def index_ratio(a: Index, b: Index) -> Double:
    return a / b


@fs.kernel
def mean(v: Array[Double]) -> Double:
    return ifold(lambda s, i: s + v[i], 0.0, length(v)) / float(length(v))


@fs.kernel
def logarithm(x: Double) -> Double:
    return fs.log(x) + fs.sqrt(x)


@fs.kernel
def truncate(x: Double) -> Index:
    return int(x)


def both(kernel, *args):
    """The compiled result, after checking that the reference gives the same (NaN equal to NaN)."""
    compiled, reference = kernel(*args), kernel.reference(*args)
    np.testing.assert_array_equal(np.asarray(compiled, dtype=object if isinstance(compiled, tuple) else None),
                                  np.asarray(reference, dtype=object if isinstance(reference, tuple) else None))
    return compiled


def wrapped(x: int) -> int:
    return int(np.array([x % 2**64], dtype=np.uint64).view(np.int64)[0])


@settings(max_examples=200, deadline=None)
@given(INT64, INT64)
def test_integer_arithmetic_wraps_as_numpy_int64(a, b):
    with np.errstate(over="ignore"):
        x, y = np.array([a], dtype=np.int64), np.array([b], dtype=np.int64)
        oracle = (x + y, x - y, x * y, -x)
    assert both(integer_ops, a, b) == tuple(int(r[0]) for r in oracle)


@settings(max_examples=200, deadline=None)
@given(INT64, INT64.filter(lambda b: b != 0))
def test_integer_division_floors_and_wraps(a, b):
    x, y = np.array([a], dtype=np.int64), np.array([b], dtype=np.int64)
    with np.errstate(over="ignore"):
        oracle = (int((x // y)[0]), int((x % y)[0]))
    assert both(integer_division, a, b) == oracle
    assert oracle == (wrapped(a // b), a % b)


def test_integer_division_by_zero_raises_in_both():
    for run in (integer_division, integer_division.reference):
        with pytest.raises(ZeroDivisionError):
            run(7, 0)


def test_extremes_wrap_in_both():
    lo, hi = -2**63, 2**63 - 1
    assert both(integer_ops, hi, 1) == (lo, hi - 1, hi, -hi)
    assert both(integer_division, lo, -1) == (lo, 0)  # C's INT64_MIN / -1 would trap
    assert both(absolute, lo) == lo
    assert both(card_difference, 3, 5) == -2  # a Card difference is an int64, negative here
    np.testing.assert_array_equal(both(sum_plus_one, np.array([hi, 0, lo])), np.array([lo, 1, lo + 1]))


def test_a_size_computed_with_an_overflow_is_refused_in_both():
    for run in (sized_by_product, sized_by_product.reference):
        with pytest.raises(OverflowError):
            run(2**32, 2**32)
    assert both(sized_by_product, 3, 4).shape == (12,)


@pytest.mark.parametrize("x, y", [(1.0, 0.0), (-1.0, 0.0), (0.0, 0.0), (1.0, -0.0), (1e308, 1e-308)])
def test_float_division_is_ieee_in_both(x, y):
    with np.errstate(all="ignore"):
        oracle, x32, y32 = np.float64(x) / np.float64(y), np.float32(x), np.float32(y)
        oracle32 = x32 / y32
    np.testing.assert_array_equal(both(ratio, x, y), oracle)
    np.testing.assert_array_equal(both(ratio32, x32, y32), oracle32)


def test_integer_true_division_by_zero_is_ieee_in_both():
    assert both(index_ratio, 1, 0) == math.inf
    assert math.isnan(both(index_ratio, 0, 0))


def test_mean_of_nothing_is_nan_in_both():
    assert math.isnan(both(mean, np.zeros(0)))
    assert both(mean, np.array([1.0, 2.0, 6.0])) == 3.0


def test_math_functions_are_ieee_in_both():
    assert both(logarithm, 0.0) == -math.inf
    assert math.isnan(both(logarithm, -1.0))


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf, 1e19, -1e19])
def test_int_of_a_float_outside_int64_is_a_value_error_in_both(x):
    for run in (truncate, truncate.reference):
        with pytest.raises(ValueError):
            run(x)


def test_int_truncates_toward_zero_in_both():
    assert both(truncate, -2.7) == -2
    assert both(truncate, 2.0**62) == 2**62
