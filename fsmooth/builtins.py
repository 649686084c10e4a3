"""The F̃ built-ins as plain Python: the reference semantics that every compiled kernel is checked against.

A kernel body calls these when it runs as Python (``kernel.reference``); the front end
recognises the same objects (and the names of ``math``) when it compiles the body.
"""
from __future__ import annotations

import math

import numpy as np


def build(n, f):
    """``build(n, f)``: the array ``[f(0), ..., f(n-1)]``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"build needs a Card size, not {type(n).__name__}")
    if n < 0:
        raise ValueError(f"build of negative size {n}")
    values = [f(i) for i in range(int(n))]
    if values and isinstance(values[0], np.ndarray):
        return np.stack(values)
    return np.array(values)


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
