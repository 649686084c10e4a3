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


sqrt, exp, log, sin, cos, tan = math.sqrt, math.exp, math.log, math.sin, math.cos, math.tan
pow = math.pow  # noqa: A001  (F̃'s pow)
abs = abs  # noqa: A001
min = min  # noqa: A001
max = max  # noqa: A001


def floor(x):
    return float(math.floor(x))
