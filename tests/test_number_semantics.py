"""One rule for numbers in the compiled code and the reference (README "Integers and floats"):
integers are Python's integers within int64: a result outside int64 is an OverflowError (in a
loop's state, in a count, in a division as in ``(a * b) // b``), never a wrapped value; integer
``//`` and ``%`` by zero raise; floats are IEEE (``x / 0.0`` is inf, not a
ZeroDivisionError); ``int(x)`` outside int64 is a ValueError.  Each case is run compiled and as
reference, and checked against numpy."""
from __future__ import annotations

import importlib.util
import math
import re
import os
import sys

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


def fits(*values) -> bool:
    return all(-2**63 <= v < 2**63 for v in values)


def overflows_in_both(kernel, *args):
    for run in (kernel, kernel.reference):
        with pytest.raises(OverflowError, match="overflows int64"):
            run(*args)


NEAR_EDGES = st.one_of(INT64, st.integers(-2**32, 2**32), st.sampled_from([-2**63, -2**63 + 1, -1, 0, 1, 2**63 - 1]))


@settings(max_examples=300, deadline=None)
@given(NEAR_EDGES, NEAR_EDGES)
def test_integer_arithmetic_is_pythons_within_int64(a, b):
    exact = (a + b, a - b, a * b, -a)
    if not fits(*exact):
        overflows_in_both(integer_ops, a, b)
        return
    x, y = np.array([a], dtype=np.int64), np.array([b], dtype=np.int64)
    oracle = tuple(int(r[0]) for r in (x + y, x - y, x * y, -x))  # numpy, where nothing overflows
    assert both(integer_ops, a, b) == oracle == exact


@settings(max_examples=300, deadline=None)
@given(NEAR_EDGES, NEAR_EDGES.filter(lambda b: b != 0))
def test_integer_division_floors(a, b):
    if not fits(a // b):
        overflows_in_both(integer_division, a, b)
        return
    x, y = np.array([a], dtype=np.int64), np.array([b], dtype=np.int64)
    assert both(integer_division, a, b) == (int((x // y)[0]), int((x % y)[0])) == (a // b, a % b)


def test_integer_division_by_zero_raises_in_both():
    for run in (integer_division, integer_division.reference):
        with pytest.raises(ZeroDivisionError):
            run(7, 0)


def test_extremes_overflow_in_both():
    lo, hi = -2**63, 2**63 - 1
    overflows_in_both(integer_ops, hi, 1)
    overflows_in_both(integer_ops, lo, 0)  # -lo
    overflows_in_both(integer_division, lo, -1)  # 2**63; C's INT64_MIN / -1 would trap
    assert both(integer_division, lo + 1, -1) == (hi, 0)
    overflows_in_both(absolute, lo)
    assert both(absolute, lo + 1) == hi
    assert both(card_difference, 3, 5) == -2  # a Card difference is an int64, negative here
    overflows_in_both(sum_plus_one, np.array([0, hi, 0]))
    np.testing.assert_array_equal(both(sum_plus_one, np.array([hi - 1, 0, lo])), np.array([hi, 1, lo + 1]))


@fs.kernel
def doubled_count(k: Index) -> Double:
    n = ifold(lambda a, i: a * 2, 1, k)
    return ifold(lambda s, j: s + 1.0, 0.0, n)


@fs.kernel
def product_over(a: Index, b: Index) -> Index:
    return (a * b) // b


@fs.kernel
def counted_by_quotient(a: Index, b: Index) -> Double:
    return ifold(lambda s, j: s + 1.0, 0.0, (a * b) // b - a + 3)


@fs.kernel
def chosen_count(a: Index, b: Index, c: Double) -> Double:
    n = a * b if c > 0.0 else 3
    return ifold(lambda s, j: s + 1.0, 0.0, n)


@fs.kernel
def paired_count(k: Index) -> Double:
    p = ifold(lambda a, i: (a[0] * 2, a[1] + 1), (1, 0), k)
    return ifold(lambda s, j: s + 1.0, 0.0, p[0])


@fs.kernel
def shifted_read(v: Array[Double], a: Index, b: Index) -> Array[Double]:
    return build(length(v), lambda i: v[(a * b) // b + i - a])


def test_an_overflow_on_the_way_is_an_error_in_both_not_a_wrapped_value():
    """A value that overflowed in an earlier step of a loop, in a tuple or in a branch is never
    used wrapped (as a count it would run 0 or 2**62 iterations), and sympy's algebra of
    unbounded integers does not cancel an overflow away: (a·b)//b is a only where a·b fits."""
    overflows_in_both(doubled_count, 70)
    assert both(doubled_count, 5) == 32.0
    overflows_in_both(product_over, 2**62, 4)
    assert both(product_over, 2**40, 4) == 2**40
    overflows_in_both(counted_by_quotient, 2**62, 4)
    assert both(counted_by_quotient, 2**40, 4) == 3.0
    overflows_in_both(chosen_count, 2**32, 2**32, 1.0)
    assert both(chosen_count, 2**32, 2**32, -1.0) == 3.0
    overflows_in_both(paired_count, 70)
    assert both(paired_count, 3) == 8.0
    overflows_in_both(shifted_read, np.arange(3.0), 2**62, 4)
    np.testing.assert_array_equal(both(shifted_read, np.arange(3.0), 5, 4), np.arange(3.0))


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


@fs.kernel
def triangle_sum(d: Card) -> Double:
    return ifold(lambda s, j: s + ifold(lambda a, i: a + float(j * (2 * d - j - 1) // 2 + i), 0.0, j), 0.0, d)


def test_index_arithmetic_over_loops_is_tested_once_before_the_body():
    """``j·(2d - j - 1)//2 + i`` (a packed triangle's offset) is bounded over the loops by sizes:
    the kernel tests that those fit once, before its body, and its loops compute plainly (no
    fs_checked_ in a loop); where they do not fit the call fails at once, not after 2**33 trips."""
    source = triangle_sum.c_source()
    body = source[source.index("static int", source.index("_body(")):]
    assert "fs_checked_" in body and "fs_checked_" not in body[body.index("for ("):]
    for d in (0, 1, 2, 5, 40):
        oracle = sum(j * (2 * d - j - 1) // 2 * j + j * (j - 1) // 2 for j in range(d))
        j = np.arange(d)
        assert float(np.sum(j * (2 * d - j - 1) // 2 * j + j * (j - 1) // 2)) == oracle
        assert both(triangle_sum, d) == oracle
    with pytest.raises(OverflowError, match="overflows int64"):
        triangle_sum(2**33)


@fs.kernel
def count_of(n: Card) -> Double:
    return ifold(lambda s, j: s + 1.0, 0.0, n)


@fs.kernel(inline_kernels=False)
def count_of_product(n: Card, m: Card) -> Double:
    return count_of(n * m)


def test_an_overflowing_argument_of_a_called_kernel_is_an_error_in_both():
    """A Card product passed to a kernel that is called, not inlined, overflows before the call
    (the caller tests the sizes that bound it before its body)."""
    overflows_in_both(count_of_product, 2**32, 2**32)
    assert both(count_of_product, 3, 4) == 12.0
    assert "_count_of_body(" in count_of_product.c_source().split("count_of_product_body(", 2)[2]  # a call


def _fit(value: int) -> int:
    if not -2**63 <= value < 2**63:
        raise OverflowError(value)
    return value


def _literal(text: str) -> bool:
    return re.search(r"\b[abc]\b", text) is None


def _integer_expression(draw, depth: int) -> tuple[str, object]:
    """(source, evaluate): an Index expression over a, b, c and literals, and its value by
    Python's integers, evaluated left to right, raising OverflowError where a value on the way
    is outside int64 and ZeroDivisionError where a divisor is 0."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        leaf = draw(st.sampled_from(["a", "b", "c", "1", "3", "7", "4611686018427387904", "9223372036854775807"]))
        return leaf, (lambda env: env[leaf] if leaf in env else int(leaf))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "neg", "abs"]))
    x, fx = _integer_expression(draw, depth - 1)
    if op in ("neg", "abs") and _literal(x):
        op = "+"
    if op in ("neg", "abs"):
        return ((f"(-{x})", lambda env: _fit(-fx(env))) if op == "neg"
                else (f"abs({x})", lambda env: _fit(abs(fx(env)))))
    y, fy = _integer_expression(draw, depth - 1)
    if _literal(x) and _literal(y):  # literals alone are Python's in a reference run (README)
        y, fy = "b", (lambda env: env["b"])

    def evaluate(env):
        u, v = fx(env), fy(env)
        return _fit({"+": lambda: u + v, "-": lambda: u - v, "*": lambda: u * v,
                     "//": lambda: u // v, "%": lambda: u % v}[op]())
    return f"({x} {op} {y})", evaluate


@settings(max_examples=int(os.environ.get("FSMOOTH_FUZZ_EXAMPLES", "40")), deadline=None,
          derandomize="FSMOOTH_FUZZ_EXAMPLES" not in os.environ)
@given(st.data())
def test_random_integer_expressions_agree_with_exact_integers(tmp_path_factory, data):
    """Random Index expressions (every operation, literals at int64's edges, arguments near the
    edges), compiled and as reference, against Python's exact integers: the value where every
    value on the way fits int64 and no divisor is 0, else an OverflowError or a ZeroDivisionError."""
    text, evaluate = data.draw(st.composite(lambda draw: _integer_expression(draw, 3))())
    values = data.draw(st.lists(NEAR_EDGES, min_size=3, max_size=3))
    module = tmp_path_factory.mktemp("expr") / "integer_expression.py"
    module.write_text("import fsmooth as fs\nfrom fsmooth import Index\n\n\n@fs.kernel\n"
                      f"def expression(a: Index, b: Index, c: Index) -> Index:\n    return {text}\n")
    name = f"integer_expression_{module.parent.name}"
    spec = importlib.util.spec_from_file_location(name, module)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    try:
        exact = evaluate(dict(zip("abc", values)))
    except (OverflowError, ZeroDivisionError):
        # the compiled code may test a divisor before arithmetic on its left, and the reference
        # computes literals alone as Python does (7 * 2**62 % 0): an error either way
        for run in (loaded.expression, loaded.expression.reference):
            with pytest.raises((OverflowError, ZeroDivisionError)):
                run(*values)
        return
    assert both(loaded.expression, *values) == exact, text


@fs.kernel
def negated_quotients(a: Index, n: Card) -> Double:
    return ifold(lambda s, j: s + float(a // -1), 0.0, n)


def test_a_quotient_by_minus_one_is_not_hoisted_out_of_a_loop_that_never_runs():
    """``a // -1`` overflows at INT64_MIN, so loop-invariant code motion may not move it before a
    loop that runs zero times (it did, and the call failed where the reference returned 0.0)."""
    assert both(negated_quotients, -2**63, 0) == 0.0
    overflows_in_both(negated_quotients, -2**63, 1)
    assert both(negated_quotients, 5, 2) == -10.0
