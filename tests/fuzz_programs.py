"""Well-typed F̃ programs for the back-end fuzzer (tests/test_fuzz.py), as Python source.

A program is a module: an optional helper kernel and a main kernel, with parameters of every
scalar type, vectors, an index vector and a matrix, under ordinary or hostile names (C keywords
and macros, libc and CPython symbols, the names fsmooth's generated code uses).  Bodies use
builds, folds (counts of either integer type, possibly negative), tuple states, conditionals,
kernel calls, reads at the loop index, data-dependent reads guarded by a modulo, and reads that
may be out of range (both the reference and the compiled code must then raise IndexError).

What the generator avoids, because reference and compiled code are allowed to differ there
(README, "Errors"): integer overflow (integers stay small), float division by zero (a divisor is
``1.0 + x * x``), ``int(x)`` of a huge float, and NaN operands of ``min``/``max``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

D, F, I, C, B = "Double", "Float", "Index", "Card", "Bool"
AD, AF, AI, MD = "Array[Double]", "Array[Float]", "Array[Index]", "Array[Array[Double]]"
ARRAYS = (AD, AF, AI, MD)
FLOATING = (D, F)

PLAIN_NAMES = ("a", "b", "c", "x", "y", "k", "n", "m", "v", "w", "t", "z")
# Names that collide with C keywords and macros, libc, libm and CPython symbols, and the names
# the generated C uses for destinations, dims, the arena and the status.
HOSTILE_NAMES = ("out", "out_0", "out_1", "scratch", "status", "v_d0", "dims_out", "fs_t", "__x", "_X", "GC_x",
                 "FP_x", "SIZE_x", "M_PI", "M_E", "CHAR_BIT", "RAND_MAX", "NULL", "EOF", "errno", "printf",
                 "index", "j0", "y0", "y1", "gamma", "signal", "kill", "open", "wait", "exit", "sinf", "double",
                 "int64_t", "restrict", "inline", "register", "auto", "unsigned", "main", "Py_None",
                 "PyObject", "ffi", "lib", "i", "j", "acc", "tmp", "x_1", "result")
KERNEL_NAMES = ("pow10", "kill", "open", "wait", "signal", "abs_", "index", "j0", "y0", "gamma", "printf",
                "sinf", "exp2", "main_", "memcpy", "strlen", "free", "malloc", "exit", "qsort", "time")


@dataclass(frozen=True)
class Program:
    source: str
    kernel: str
    params: tuple  # (name, type) pairs


class _Writer:
    """Draws the parts of one program; names come from a pool, each used once."""

    def __init__(self, draw, names):
        self.draw = draw
        self.pool = list(names)
        self.used: set[str] = set()
        self.helper = None  # (name, params, result) of the helper kernel, if any
        self.in_range: dict[str, str] = {}  # a build's index -> the array whose length it runs over

    def fresh(self) -> str:
        candidates = [n for n in self.pool if n not in self.used]
        name = self.draw(st.sampled_from(candidates)) if candidates else f"u{len(self.used)}"
        while name in self.used:
            name += "_"
        self.used.add(name)
        return name

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def of_type(self, env, t):
        return [n for n, ty in env.items() if ty == t]

    # -- scalars
    @staticmethod
    def typed(text: str, t: str) -> str:
        """``text`` where a value of exactly type ``t`` is needed (an int literal is a Card)."""
        return f"int({text})" if t == I else text

    def expr(self, t: str, env: dict, depth: int) -> str:
        makers = {D: self.floating, F: self.floating, I: self.index, C: self.card, B: self.boolean}
        return makers[t](t, env, depth)

    def floating(self, t, env, depth) -> str:
        leaves = [lambda: self.pick(("0.0", "1.0", "-2.5", "0.5", "3.0", "0.001"))]
        leaves += [lambda n=n: n for n in self.of_type(env, t)]
        if t == D:
            leaves += [lambda n=n: f"float({n})" for n in self.of_type(env, I) + self.of_type(env, C)]
        if depth <= 0:
            return self.pick(leaves)()
        sub = lambda: self.floating(t, env, depth - 1)  # noqa: E731
        compound = [
            lambda: f"({sub()} {self.pick(('+', '-', '*'))} {sub()})",
            lambda: f"({sub()} / (1.0 + {(s := sub())} * {s}))",
            lambda: f"(-{sub()})",
            lambda: f"fs.{self.pick(('sin', 'cos', 'tanh', 'atan'))}({sub()})",
            lambda: f"fs.sqrt(fs.abs({sub()}))",
            lambda: f"{self.pick(('min', 'max'))}({sub()}, {sub()})",
            lambda: f"({sub()} if {self.boolean(B, env, depth - 1)} else {sub()})",
            lambda: self.read(t, env, depth - 1),
            lambda: self.fold_sum(t, env, depth - 1),
            lambda: self.tuple_fold(t, env, depth - 1),
        ]
        if t == D and self.helper is not None:
            compound.append(lambda: self.call_helper(env, depth - 1))
        if t == D:
            compound.append(lambda: f"float({self.index(I, env, depth - 1)})")
        return self.pick(leaves + compound)()

    def index(self, t, env, depth) -> str:
        leaves = [lambda: self.pick(("0", "1", "2", "7", "-3"))]
        leaves += [lambda n=n: n for n in self.of_type(env, I)]
        leaves += [lambda n=n: f"int({n})" for n in self.of_type(env, C)]
        if depth <= 0:
            return self.pick(leaves)()
        sub = lambda: self.index(I, env, depth - 1)  # noqa: E731
        compound = [
            lambda: f"({sub()} {self.pick(('+', '-'))} {sub()})",
            lambda: f"({sub()} * {self.pick(('2', '3', '-1'))})",
            lambda: f"({sub()} {self.pick(('//', '%'))} {self.pick(('2', '3', '-2', '5'))})",
            lambda: f"int(fs.sin({self.floating(D, env, depth - 1)}) * 10.0)",
            lambda: f"({sub()} if {self.boolean(B, env, depth - 1)} else {sub()})",
            lambda: f"int({self.card(C, env, depth - 1)})",
            lambda: self.read(I, env, depth - 1),
            lambda: self.fold_sum(I, env, depth - 1),
        ]
        return self.pick(leaves + compound)()

    def card(self, t, env, depth) -> str:
        leaves = [lambda: self.pick(("0", "1", "3"))]
        leaves += [lambda n=n: n for n in self.of_type(env, C)]
        leaves += [lambda a=a: f"length({a})" for a in self.arrays(env)]
        if depth <= 0:
            return self.pick(leaves)()
        sub = lambda: self.card(C, env, depth - 1)  # noqa: E731
        return self.pick(leaves + [lambda: f"({sub()} + {sub()})", lambda: f"({sub()} * 2)",
                                   lambda: f"({sub()} // 2)"])()

    def boolean(self, t, env, depth) -> str:
        leaves = [lambda: self.pick(("True", "False"))] + [lambda n=n: n for n in self.of_type(env, B)]
        if depth <= 0:
            return self.pick(leaves)()
        compound = [
            lambda: f"({self.floating(D, env, depth - 1)} {self.pick(('<', '<=', '>', '!='))} "
                    f"{self.floating(D, env, depth - 1)})",
            lambda: f"({self.index(I, env, depth - 1)} {self.pick(('<', '>=', '==', '!='))} "
                    f"{self.index(I, env, depth - 1)})",
            lambda: f"(not {self.boolean(B, env, depth - 1)})",
            lambda: f"({self.boolean(B, env, depth - 1)} {self.pick(('and', 'or'))} "
                    f"{self.boolean(B, env, depth - 1)})",
        ]
        return self.pick(leaves + compound)()

    # -- arrays
    def arrays(self, env, types=ARRAYS):
        return [n for n, ty in env.items() if ty in types]

    def read(self, t: str, env: dict, depth: int) -> str:
        """An element of an array in scope: at a loop index known in range, at an index taken
        modulo the length, or (rarely) at any index, which may be out of range."""
        candidates = self.arrays(env, {D: (AD, MD), F: (AF,), I: (AI,)}[t])
        if not candidates:
            return self.expr(t, env, 0)
        a = self.pick(candidates)
        zero = {D: "0.0", F: "0.0", I: "0"}[t]
        in_range = [v for v, src in self.in_range.items() if src == a and v in env]
        choice = self.draw(st.integers(0, 9))
        if in_range and choice < 5:
            row = f"{a}[{self.pick(in_range)}]"
            guard = "True"
        elif choice < 9:
            row = f"{a}[{self.index(I, env, depth)} % length({a})]"
            guard = f"length({a}) > 0"
        else:
            row, guard = f"{a}[{self.index(I, env, 0)}]", "True"
        if env[a] == MD:  # `and` must not evaluate its right operand when the left is False
            guard = f"{guard} and length({row}) > 0"
            row = f"{row}[{self.index(I, env, 0)} % length({row})]"
        return row if guard == "True" else f"({row} if {guard} else {zero})"

    def fold_sum(self, t: str, env: dict, depth: int) -> str:
        s, j = self.fresh(), self.fresh()
        count = self.pick((lambda: self.card(C, env, 1), lambda: self.index(I, env, 1)))()
        body = self.expr(t, {**env, s: t, j: I}, depth)
        return f"fs.ifold(lambda {s}, {j}: {s} + {body}, {self.expr(t, env, 0)}, {count})"

    def tuple_fold(self, t: str, env: dict, depth: int) -> str:
        """A fold over a (value, count) state, projected."""
        s, j = self.fresh(), self.fresh()
        count = self.card(C, env, 1)
        inner = {**env, s + "[0]": t, j: I}
        step = self.expr(t, inner, depth)
        value = f"fs.ifold(lambda {s}, {j}: ({s}[0] + {step}, {s}[1] + 1), ({self.expr(t, env, 0)}, 0), {count})"
        if t == D and self.draw(st.booleans()):
            return f"float({value}[1])"  # the count
        return f"{value}[0]"

    def array(self, t: str, env: dict, depth: int) -> str:
        existing = self.arrays(env, (t,))
        if existing and (depth <= 0 or self.draw(st.booleans())):
            return self.pick(existing)
        i = self.fresh()
        sized_by = self.arrays(env)
        if sized_by and self.draw(st.booleans()):
            src = self.pick(sized_by)
            size = f"length({src})"
            self.in_range[i] = src
        else:
            size = self.card(C, env, 1)
        inner = {**env, i: I}  # a build's index is an Index, and no size may depend on it
        if t == MD:
            body = self.array(AD, inner, depth - 1)
        else:
            body = self.typed(self.expr({AD: D, AF: F, AI: I}[t], inner, depth - 1), {AD: D, AF: F, AI: I}[t])
        return f"build({size}, lambda {i}: {body})"

    def call_helper(self, env: dict, depth: int) -> str:
        name, params, _ = self.helper
        args = [self.array(ty, env, 0) if ty in ARRAYS else self.expr(ty, env, depth) for _, ty in params]
        return f"{name}({', '.join(args)})"


RESULTS = (D, I, B, AD, AI, MD, "tuple[Double, Index]", "tuple[Array[Double], Double]")


@st.composite
def programs(draw, hostile: bool = False, depth: int = 3) -> Program:
    names = HOSTILE_NAMES if hostile else PLAIN_NAMES + tuple(f"p{k}" for k in range(40))
    w = _Writer(draw, names)
    lines = ["import fsmooth as fs", "from fsmooth import Array, Bool, Card, Double, Float, Index, build, length",
             ""]
    kernel_names = KERNEL_NAMES if hostile else ("main_kernel", "helper_kernel")
    if draw(st.booleans()):
        helper_name = kernel_names[1] if not hostile else draw(st.sampled_from(KERNEL_NAMES))
        params = ((w.fresh(), D), (w.fresh(), AD))
        env = dict(params)
        body = w.expr(D, env, 2)
        lines += ["@fs.kernel", f"def {helper_name}({', '.join(f'{n}: {t}' for n, t in params)}) -> Double:",
                  f"    return {body}", ""]
        w.helper = (helper_name, params, D)
        w.used.add(helper_name)  # a name of the main kernel's that shadowed it would call a number
    main_name = kernel_names[0] if not hostile else draw(st.sampled_from(
        [n for n in KERNEL_NAMES if w.helper is None or n != w.helper[0]]))
    param_types = draw(st.lists(st.sampled_from((D, F, I, C, B, AD, AF, AI, MD)), min_size=1, max_size=5))
    params = tuple((w.fresh(), t) for t in param_types)
    env = dict(params)
    result = draw(st.sampled_from(RESULTS))
    if result.startswith("tuple"):
        parts = [p.strip() for p in result[len("tuple["):-1].split(",")]
        body = "(" + ", ".join(w.array(p, env, depth) if p in ARRAYS else w.typed(w.expr(p, env, depth), p)
                               for p in parts) + ")"
    elif result in ARRAYS:
        body = w.array(result, env, depth)
    else:
        body = w.typed(w.expr(result, env, depth), result)
    lines += ["@fs.kernel", f"def {main_name}({', '.join(f'{n}: {t}' for n, t in params)}) -> {result}:",
              f"    return {body}", ""]
    return Program("\n".join(lines), main_name, params)


def arguments(params, size: int, rng: np.random.Generator) -> list:
    """Arguments for ``params``: vectors of length ``size``, matrices ``size`` × 3."""
    made = []
    for _, t in params:
        match t:
            case "Double":
                made.append(float(rng.normal(0, 3)))
            case "Float":
                made.append(float(np.float32(rng.normal(0, 3))))
            case "Index":
                made.append(int(rng.integers(-5, 20)))
            case "Card":
                made.append(int(rng.integers(0, 6)))
            case "Bool":
                made.append(bool(rng.integers(0, 2)))
            case "Array[Double]":
                made.append(rng.normal(0, 3, size))
            case "Array[Float]":
                made.append(rng.normal(0, 3, size).astype(np.float32))
            case "Array[Index]":
                made.append(rng.integers(-5, 20, size))
            case "Array[Array[Double]]":
                made.append(rng.normal(0, 3, (size, 3)))
    return made
