"""The F̃ built-ins as plain Python: the reference semantics that every compiled kernel is checked against.

A kernel body calls these when it runs as Python (``kernel.reference``); the front end
recognises the same objects (and the names of ``math``) when it compiles the body.
"""
from __future__ import annotations

import math

import numpy as np


class CheckedArray(np.ndarray):
    """An array of a reference run: an integer index outside ``0 .. n-1`` raises IndexError.

    numpy would wrap a negative index around; F̃ (and the compiled code) reject it.
    """

    def __getitem__(self, key):
        for axis, k in enumerate(key if isinstance(key, tuple) else (key,)):
            if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) \
                    and axis < self.ndim and not 0 <= k < self.shape[axis]:
                raise IndexError(f"index {k} out of range for an array of length {self.shape[axis]}")
        return super().__getitem__(key)


def checked(value):
    """``value`` with bounds-checked indexing where it is an array."""
    if isinstance(value, np.ndarray) and not isinstance(value, CheckedArray):
        return value.view(CheckedArray)
    if isinstance(value, tuple):
        return tuple(checked(item) for item in value)
    return value


def plain(value):
    """A reference result as a caller sees it: a plain ndarray or a Python scalar."""
    if isinstance(value, np.ndarray):
        return np.asarray(value).view(np.ndarray)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    return value


def build(n, f):
    """``build(n, f)``: the array ``[f(0), ..., f(n-1)]``."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"build needs a Card size, not {type(n).__name__}")
    if n < 0:
        raise ValueError(f"build of negative size {n}")
    values = [f(i) for i in range(int(n))]
    if values and isinstance(values[0], np.ndarray):
        return checked(np.stack([np.asarray(v) for v in values]))
    return checked(np.array(values))


def ifold(f, init, n):
    """``ifold(f, init, n)``: ``f(...f(f(init, 0), 1)..., n-1)``."""
    state = init
    for i in range(int(n)):
        state = f(state, i)
    return state


def length(a) -> int:
    return int(np.shape(a)[0])


abs = abs  # noqa: A001
min = min  # noqa: A001
max = max  # noqa: A001


# ----------------------------------------------------------------------------- the math library
#
# fs.sqrt, fs.tanh, fs.atan2, fs.isnan, ...: IEEE semantics, as the compiled C computes them.  Where C
# gives a NaN or an infinity (acos(2), log1p(-1), lgamma(0)), these give the same instead of
# raising as Python's math module does; ``math.NAME`` in a kernel compiles to the same primitive
# but stays Python's own function in a reference run.  A result is a Python float (bool for the
# tests isnan, isinf, isfinite), computed by numpy in the precision numpy's promotion gives: a
# np.float32 argument (an element of a Float array) gives a value rounded to float32.


def _is_float32(args) -> bool:
    with np.errstate(all="ignore"):
        return np.result_type(*args) == np.float32


def _numpy_function(name: str, ufunc):
    def function(*args):
        with np.errstate(all="ignore"):
            return float(ufunc(*args))
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``{name}`` with IEEE semantics (numpy's {ufunc.__name__})."
    return function


def _math_function(name: str, fn, overflow: float):
    """``fn`` of Python's math, giving ``overflow`` (C's value at a pole or on overflow) where
    math raises."""
    def function(x):
        try:
            value = fn(float(x))
        except (ValueError, OverflowError):
            value = overflow
        if _is_float32((x,)):
            with np.errstate(all="ignore"):
                value = float(np.float32(value))
        return value
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``{name}`` with IEEE semantics (C's value where math.{name} raises)."
    return function


def _numpy_test(name: str, ufunc):
    def function(x) -> bool:
        with np.errstate(all="ignore"):
            return bool(ufunc(x))
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``{name}``: a Bool (numpy's {ufunc.__name__})."
    return function


sqrt = _numpy_function("sqrt", np.sqrt)
exp = _numpy_function("exp", np.exp)
log = _numpy_function("log", np.log)
sin = _numpy_function("sin", np.sin)
cos = _numpy_function("cos", np.cos)
tan = _numpy_function("tan", np.tan)
floor = _numpy_function("floor", np.floor)
tanh = _numpy_function("tanh", np.tanh)
sinh = _numpy_function("sinh", np.sinh)
cosh = _numpy_function("cosh", np.cosh)
asin = _numpy_function("asin", np.arcsin)
acos = _numpy_function("acos", np.arccos)
atan = _numpy_function("atan", np.arctan)
atan2 = _numpy_function("atan2", np.arctan2)
ceil = _numpy_function("ceil", np.ceil)
trunc = _numpy_function("trunc", np.trunc)
hypot = _numpy_function("hypot", np.hypot)
log1p = _numpy_function("log1p", np.log1p)
expm1 = _numpy_function("expm1", np.expm1)
log2 = _numpy_function("log2", np.log2)
log10 = _numpy_function("log10", np.log10)
copysign = _numpy_function("copysign", np.copysign)
lgamma = _math_function("lgamma", math.lgamma, math.inf)  # a pole (0, -1, ...) or overflow: +inf
erf = _math_function("erf", math.erf, math.nan)  # never raises
erfc = _math_function("erfc", math.erfc, math.nan)  # never raises
isnan = _numpy_test("isnan", np.isnan)
isinf = _numpy_test("isinf", np.isinf)
isfinite = _numpy_test("isfinite", np.isfinite)


def pow(x, y):  # noqa: A001  (F̃'s pow)
    """``pow`` with C's semantics: Python's math.pow follows C99 Annex F (pow(-inf, 0.5) is +inf,
    where numpy gives NaN) except where it raises; there numpy gives C's NaN or infinity."""
    try:
        value = math.pow(float(x), float(y))
    except (ValueError, OverflowError):
        with np.errstate(all="ignore"):
            value = float(np.power(float(x), float(y)))
    if _is_float32((x, y)):
        with np.errstate(all="ignore"):
            value = float(np.float32(value))
    return value
