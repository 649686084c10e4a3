"""The F̃ built-ins as plain Python: the reference semantics that every compiled kernel is checked against.

A kernel body calls these when it runs as Python (``kernel.reference``); the front end
recognises the same objects (and the names of ``math``) when it compiles the body.

A reference run computes as the compiled code does (README.md, "Integers and floats"):
integers are ``Int64`` (Python's arithmetic, with a result outside int64 an OverflowError, as
the compiled code's checked arithmetic), floats numpy scalars (IEEE: ``1.0 / 0.0`` is inf, not a
ZeroDivisionError), and ``int``/``float`` inside a kernel are ``to_int``/``to_float``.
"""
from __future__ import annotations

import math

import numpy as np


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class Int64(int):
    """An ``Index``/``Card`` value of a reference run: Python's integer arithmetic, within int64:
    a result outside int64 is an OverflowError, as the compiled code's checked arithmetic."""

    def __new__(cls, value):
        value = int(value)
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise OverflowError(f"integer overflows int64: {value}")
        return super().__new__(cls, value)

    def _integer(self, other, op):
        if type(other) is Int64:  # the common case, known to fit
            return Int64(op(int(self), int(other)))
        if isinstance(other, (bool, np.bool_)) or not isinstance(other, (int, np.integer)):
            return NotImplemented
        # a plain int is Python's arithmetic of literals alone, which must have fit on its way here
        return Int64(op(int(self), int(Int64(other))))

    def _floating(self, other, op):
        """An integer operand of a floating operation takes the other's floating type (Double
        for an integer or a literal), as the type checker casts it."""
        if isinstance(other, np.floating):
            return op(other.dtype.type(int(self)), other)
        if isinstance(other, float):
            return op(np.float64(int(self)), np.float64(other))
        if isinstance(other, (int, np.integer)) and not isinstance(other, (bool, np.bool_)):
            return op(np.float64(int(self)), np.float64(int(other)))
        return NotImplemented

    def __add__(self, other):
        return self._integer(other, lambda a, b: a + b) if not isinstance(other, (float, np.floating)) \
            else self._floating(other, lambda a, b: a + b)

    def __radd__(self, other):
        return self.__add__(other)

    def __sub__(self, other):
        return self._integer(other, lambda a, b: a - b) if not isinstance(other, (float, np.floating)) \
            else self._floating(other, lambda a, b: a - b)

    def __rsub__(self, other):
        return self._integer(other, lambda a, b: b - a) if not isinstance(other, (float, np.floating)) \
            else self._floating(other, lambda a, b: b - a)

    def __mul__(self, other):
        return self._integer(other, lambda a, b: a * b) if not isinstance(other, (float, np.floating)) \
            else self._floating(other, lambda a, b: a * b)

    def __rmul__(self, other):
        return self.__mul__(other)

    def __floordiv__(self, other):
        return self._integer(other, lambda a, b: a // b)  # by zero: ZeroDivisionError, as compiled

    def __rfloordiv__(self, other):
        return self._integer(other, lambda a, b: b // a)

    def __mod__(self, other):
        return self._integer(other, lambda a, b: a % b)

    def __rmod__(self, other):
        return self._integer(other, lambda a, b: b % a)

    def __truediv__(self, other):
        return self._floating(other, lambda a, b: a / b)

    def __rtruediv__(self, other):
        return self._floating(other, lambda a, b: b / a)

    def __pow__(self, other):
        return self._floating(other, lambda a, b: a ** b)

    def __rpow__(self, other):
        return self._floating(other, lambda a, b: b ** a)

    def __neg__(self):
        return Int64(-int(self))

    def __pos__(self):
        return self

    def __abs__(self):
        return Int64(abs(int(self)))


def to_int(x):
    """``int(x)`` in a kernel: a number's value as an Index (toward zero), a Bool's 0 or 1; a
    NaN, an infinity or a value outside int64 is a ValueError, as in the compiled code."""
    if isinstance(x, (float, np.floating)) and not math.isfinite(x):
        raise ValueError(f"int() of {float(x)}: not a finite number")
    value = int(x)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"int() of {x}: outside the int64 range")
    return Int64(value)


def to_float(x):
    """``float(x)`` in a kernel: a Double."""
    return np.float64(int(x) if isinstance(x, (int, np.integer)) else x)


def scalar(value):
    """A scalar as a reference run computes with it: an integer an ``Int64``, a float a numpy float."""
    if type(value) in _AS_THEY_ARE:  # the common cases, first
        return value
    if isinstance(value, (bool, np.bool_, Int64)):
        return value
    if isinstance(value, (int, np.integer)):
        return Int64(value)
    if isinstance(value, float) and not isinstance(value, np.floating):
        return np.float64(value)
    return value


_AS_THEY_ARE = frozenset([bool, np.bool_, Int64, np.float64, np.float32])  # what ``scalar`` keeps


class CheckedArray(np.ndarray):
    """An array of a reference run: an integer index outside ``0 .. n-1`` raises IndexError.

    numpy would wrap a negative index around; F̃ (and the compiled code) reject it.  An element
    read is a ``scalar``.
    """

    def __getitem__(self, key):
        if type(key) is Int64 and self.ndim:  # the common read a[i], by an Index
            if not 0 <= key < self.shape[0]:
                raise IndexError(f"index {key} out of range for an array of length {self.shape[0]}")
            return scalar(super().__getitem__(key))
        for axis, k in enumerate(key if isinstance(key, tuple) else (key,)):
            if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) \
                    and axis < self.ndim and not 0 <= k < self.shape[axis]:
                raise IndexError(f"index {k} out of range for an array of length {self.shape[axis]}")
        return scalar(super().__getitem__(key))


def checked(value):
    """``value`` as a reference run computes with it: bounds-checked indexing where it is an
    array, a ``scalar`` where it is a number."""
    if isinstance(value, np.ndarray) and not isinstance(value, CheckedArray):
        return value.view(CheckedArray)
    if isinstance(value, tuple):
        return tuple(checked(item) for item in value)
    return scalar(value)


def plain(value):
    """A reference result as a caller sees it: a plain ndarray or a Python scalar."""
    if isinstance(value, np.ndarray):
        return np.asarray(value).view(np.ndarray)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Int64):
        return int(value)
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    return value


def size(n, what: str):
    """``n`` as a count of ``what``."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{what} needs a Card size, not {type(n).__name__}")
    return int(n)


def build(n, f):
    """``build(n, f)``: the array ``[f(0), ..., f(n-1)]``."""
    n = size(n, "build")
    if n < 0:
        raise ValueError(f"build of negative size {n}")
    values = [f(Int64(i)) for i in range(n)]
    if values and isinstance(values[0], np.ndarray):
        return checked(np.stack([np.asarray(v) for v in values]))
    return checked(np.array(values))


def ifold(f, init, n):
    """``ifold(f, init, n)``: ``f(...f(f(init, 0), 1)..., n-1)``."""
    state = checked(init)  # an Index state (or component) an Int64, a float one a numpy float
    for i in range(size(n, "ifold")):
        state = f(state, Int64(i))
    # a state still the initial literal (no iteration) computes on as the compiled one: 0.0 / 0.0 is NaN
    return checked(state)


def iscan(f, init, n):
    """``iscan(f, init, n)``: the ``n`` successive states of ``ifold(f, init, n)``, ``f(init, 0)``
    first: an array, or for a tuple state a tuple of one array per component."""
    n = size(n, "iscan")
    if n < 0:
        raise ValueError(f"iscan of negative size {n}")
    state, states = checked(init), []
    for i in range(n):
        state = checked(f(state, Int64(i)))
        states.append(state)
    return _columns(states, states[0] if states else checked(init))


def _columns(states: list, like):
    """The states as arrays, per tuple component one, of the dtype of a state ``like`` (the
    first, else the initial one): an Index an int64, a Float a float32, a Double a float64."""
    if isinstance(like, tuple):
        return tuple(_columns([s[k] for s in states], part) for k, part in enumerate(like))
    dtype = np.bool_ if isinstance(like, (bool, np.bool_)) else np.int64 if isinstance(like, (int, np.integer)) \
        else np.float32 if isinstance(like, np.float32) else np.float64
    return checked(np.array(states, dtype=dtype).reshape(len(states)))


def filter(pred, v):  # noqa: A001 (fs.filter; Python's filter gives an iterator, never an array)
    """``filter(pred, v)``: the elements ``x`` of ``v`` for which ``pred(x)`` holds, in order."""
    v = checked(np.asarray(v))
    keep = np.array([bool(pred(checked(x))) for x in v], dtype=bool).reshape(len(v))
    return checked(np.asarray(v)[keep])


def length(a) -> Int64:
    return Int64(np.shape(a)[0])


abs = abs  # noqa: A001
min = min  # noqa: A001
max = max  # noqa: A001


# ----------------------------------------------------------------------------- the math library
#
# fs.sqrt, fs.tanh, fs.atan2, fs.isnan, ...: IEEE semantics, as the compiled C computes them.  Where C
# gives a NaN or an infinity (acos(2), log1p(-1), lgamma(0)), these give the same instead of
# raising as Python's math module does; ``math.NAME`` in a kernel compiles to the same primitive
# but stays Python's own function in a reference run.  A result is a numpy float (bool for the
# tests isnan, isinf, isfinite), computed in the precision numpy's promotion gives: a
# np.float32 argument (an element of a Float array) gives a np.float32.


def _in_precision_of(args, value: float):
    """``value`` as a float32 where the arguments are Floats (or weak literals), else as a float64."""
    with np.errstate(all="ignore"):
        weak = (float, int)  # a literal takes a Float operand's type; an Index, a Double do not
        float32 = any(isinstance(a, np.float32) for a in args) and all(
            isinstance(a, np.float32) or (type(a) in weak) for a in args)
        return np.float32(value) if float32 else np.float64(value)


def _numpy_function(name: str, ufunc):
    def function(*args):
        with np.errstate(all="ignore"):
            return ufunc(*(np.float64(a) if isinstance(a, int) else a for a in args))
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
        return _in_precision_of((x,), value)
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
    return _in_precision_of((x, y), value)
