"""fsmooth.shape.size_printer: one walk, a table per target (C, Python, JSON), and the Python
size functions and constraint checks the OpenCL launcher runs on the host."""
from __future__ import annotations

import itertools
import pathlib
import subprocess

import pytest
import sympy

from fsmooth.errors import CompileError
from fsmooth.shape.size_printer import (C, C_CHECKED, OPENCL_C, PYTHON, SIZE_OVERFLOW, NonnegativeMod,
                                        NonnegativeQuotient, compile_constraint_check, compile_size_function,
                                        condition_json, overflow_checked_c, print_condition, print_size,
                                        size_json)

n, m, S, N = sympy.symbols("n m S N", integer=True, nonnegative=True)
i = sympy.Symbol("i", integer=True)


def test_sizes_to_c():
    assert print_size(n * (n + 1) / 2, C) == "fs_shift_floor_i64((n + (n * n)), 1)"
    assert print_size(n * (n + 1) / 6, C) == "((n + (n * n)) / 6)"
    assert print_size(sympy.Max(n, m) + 1, C) == "(1 + fs_max_i64(m, n))"
    assert print_size(sympy.floor(n / 3), C) == "fs_floordiv_i64(n, 3)"
    assert print_size(sympy.ceiling(n / m), C) == "fs_ceildiv_i64(n, m)"
    assert print_size(sympy.Mod(n - m, 3), C) == "fs_mod_i64((n - m), 3)"
    assert print_size(NonnegativeMod(i, 3) + NonnegativeQuotient(i, 3), C) == "((i % 3) + (i / 3))"
    assert print_size(NonnegativeMod(i, 4) + NonnegativeQuotient(i, 4), C) == "(fs_mask_mod_i64(i, 3) + fs_shift_floor_i64(i, 2))"
    assert print_size(n * 2**40, C) == "(INT64_C(1099511627776) * n)"
    assert print_size(n, C, lambda s: f"{s.name}_1") == "n_1"
    assert OPENCL_C is C  # the OpenCL prelude carries the same helpers


def test_conditions_to_c():
    assert print_condition(sympy.Ge(m, n), C) == "(m >= n)"
    assert print_condition(sympy.And(n >= 1, sympy.Not(m < n)), C) in ("((n >= 1) && (m >= n))",
                                                                      "((m >= n) && (n >= 1))")
    assert print_condition(sympy.true, C) == "1" and print_condition(sympy.false, C) == "0"
    with pytest.raises(CompileError, match="cannot express the size"):
        print_size(sympy.sqrt(n), C)


def test_python_text():
    assert print_size(sympy.ceiling(n / 4), PYTHON) == "(-((-_s['n']) // 4))"
    assert print_condition(sympy.Not(n < m), PYTHON) in ("(_s['n'] >= _s['m'])", "(_s['m'] <= _s['n'])")


def test_json_trees():
    assert size_json(sympy.floor(n / 3) + 1) == ["+", 1, ["floordiv", "n", 3]]
    assert size_json(n - m) == ["-", "n", "m"]
    assert size_json(sympy.ceiling(n / 4)) == ["ceildiv", "n", 4]
    assert condition_json(sympy.Ge(m, n)) == [">=", "m", "n"]
    assert condition_json(sympy.Or(n < 1, sympy.Eq(m, 2))) in (["||", ["<", "n", 1], ["==", "m", 2]],
                                                               ["||", ["==", "m", 2], ["<", "n", 1]])


def test_a_choice_of_sizes_in_every_target():
    """A sympy Piecewise (a launch's tile chosen from the sizes, dpia.codegen_opencl._work_groups):
    the first value whose condition holds."""
    choice = sympy.Piecewise((32, n <= m), (64, n <= 2 * m), (256, True))
    assert print_size(choice, C) == "((m >= n) ? 32 : ((n <= (2 * m)) ? 64 : 256))"
    assert print_size(choice, C_CHECKED) == ("((int64_t)(fs_size_ge(m, n) ? 32 : ((int64_t)(fs_size_le(n, "
                                             "(fs_size_mul(2, m))) ? 64 : 256))))")
    assert size_json(choice) == ["if", [">=", "m", "n"], 32, ["if", ["<=", "n", ["*", 2, "m"]], 64, 256]]
    sizes = compile_size_function(("n", "m"), [choice, 8 * choice], "choice")
    assert [sizes((3, 5)), sizes((7, 5)), sizes((11, 5))] == [(32, 256), (64, 512), (256, 2048)]


def test_size_formulas_evaluate_exactly():
    # 'S' and 'N' are sympy names too: as size symbols they are plain symbols.
    formulas = [sympy.ceiling(n / 64) * 64, sympy.floor(n / 3), sympy.Max(n, m), sympy.Mod(n, 7),
                n * (n + 1) / 2, S * N + 1, m**2 - n, sympy.ceiling((m - n) / 4), sympy.Min(n, m, 2)]
    f = compile_size_function(("n", "m", "S", "N"), formulas, "test")
    for a, b in itertools.product((0, 1, 5, 63, 64, 65, 10 ** 12 + 7), (0, 3)):
        exact = (-(-a // 64) * 64, a // 3, max(a, b), a % 7, a * (a + 1) // 2, 21, b * b - a,
                 -((a - b) // 4), min(a, b, 2))
        # a value outside int64 is SIZE_OVERFLOW, as C_CHECKED's poison (a(a+1) for a = 10**12 + 7)
        assert f((a, b, 4, 5)) == tuple(x if abs(x) < 2**63 else SIZE_OVERFLOW for x in exact)
    with pytest.raises(ValueError, match="not size symbols"):
        compile_size_function(("n",), [n + m], "test")


def test_python_sizes_are_checked_as_the_c_ones():
    """The OpenCL launcher's size functions refuse what K_check_sizes refuses: a value (or a
    partial one) outside int64 is SIZE_OVERFLOW and fails every relation, a zero divisor raises."""
    f = compile_size_function(("n", "m"), [n * m, sympy.floor(n * m / 4), sympy.floor(n / m), -n], "test")
    assert f((2**32, 2**31 - 1)) == (2**63 - 2**32, 2**61 - 2**30, 2, -2**32)
    assert f((2**32, 2**32)) == (SIZE_OVERFLOW, SIZE_OVERFLOW, 1, -2**32)
    with pytest.raises(ZeroDivisionError):
        f((3, 0))
    check = compile_constraint_check(("n", "m"), [sympy.Mod(n, m) < 2, n * m > 1], "test")
    assert check((2**32, 2**30)) == 0
    assert check((2**32, 2**32)) == 2
    with pytest.raises(ZeroDivisionError):
        check((3, 0))


def test_non_integer_size_formula_is_an_error():
    f = compile_size_function(("n",), [n / 2], "half")
    assert f((8,)) == (4,)
    with pytest.raises(RuntimeError, match="half.*non-integer"):
        f((7,))


def test_constraint_checks_number_the_first_failure():
    check = compile_constraint_check(
        ("n", "m"), [n - 1 < m, sympy.Eq(sympy.floor((m - 7) / 2), sympy.floor((m + 1) / 2) - 4),
                     sympy.Or(n <= 0, sympy.And(sympy.Not(m < n), sympy.Ne(m, 9))), sympy.Mod(n - m, 3) >= 0],
        "test")
    assert check((2, 5)) == 0
    assert check((6, 5)) == 1
    assert check((0, 9)) == 0  # n <= 0 makes the third one hold
    assert check((3, 9)) == 3
    with pytest.raises(ValueError, match="not size symbols"):
        compile_constraint_check(("n",), [n < m], "test")


def test_python_checks_agree_with_the_c_runtime_on_corpus_kernels(rng):
    # The constraints of real kernels, evaluated by the generated C and by the Python target.
    from corpus import linalg

    for kernel in (linalg.vector_slice, linalg.matrix_mul, linalg.matrix_vector_mul):
        exe = kernel.executable()
        symbols = [s.symbol for s in exe.interface.sizes]
        check = compile_constraint_check(symbols, [c.cond for c in exe.interface.constraints], exe.interface.name)
        for values in rng.integers(0, 6, size=(200, len(symbols))):
            values = tuple(int(v) for v in values)
            try:
                exe.plan_for_sizes(dict(zip(symbols, values)))
                c_ok = True
            except ValueError:
                c_ok = False
            assert (check(values) == 0) == c_ok, (exe.interface.name, values)


CLIB = pathlib.Path(__file__).resolve().parents[1] / "clib"


def test_ceiling_division_in_c_agrees_with_python(tmp_path):
    """The C of ceil(a/b), compiled, gives Python's -(-a // b) for operands of either sign."""
    a, b = sympy.symbols("a b", integer=True)
    formulas = [sympy.ceiling(a / b), sympy.ceiling((a - 7) / 3), sympy.ceiling(sympy.floor(a / 2) / b)]
    texts = [print_size(f, C) for f in formulas]
    assert all(t.startswith("fs_ceildiv_i64(") for t in texts) and "-fs_floordiv_i64(-" not in "".join(texts)
    body = "".join(f'printf("%lld\\n", (long long){t});' for t in texts)
    (tmp_path / "ceil.c").write_text(
        '#include <stdio.h>\n#include <stdlib.h>\n#include "fsmooth_rt.h"\n'
        f"int main(int argc, char **argv) {{ int64_t a = atoll(argv[1]), b = atoll(argv[2]); {body} return 0; }}\n")
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Werror", f"-I{CLIB}", "-fsanitize=undefined",
                    "-fno-sanitize-recover=all", str(tmp_path / "ceil.c"), "-o", str(tmp_path / "ceil"), "-lm"],
                   check=True)
    for x, y in itertools.product((-9, -7, -1, 0, 1, 6, 7, 10 ** 15 + 1), (-4, -3, -1, 1, 2, 3)):
        got = subprocess.run([str(tmp_path / "ceil"), str(x), str(y)], check=True, capture_output=True,
                             text=True).stdout.split()
        assert got == [str(-(-x // y)), str(-(-(x - 7) // 3)), str(-(-(x // 2) // y))], (x, y)


def test_power_of_two_divisors_shift_and_mask_in_c(tmp_path):
    """A quotient rounded down (floor, exact, proven nonnegative) by a constant 2**k is a shift
    and a remainder by it a mask, in C and in overflow-checked C: no division nor sign test
    (fs_shift_floor_i64, fs_mask_mod_i64: one operator each), and the value of Python's // and % for every int64 dividend (compiled under UBSan).  The
    poison-passing C of size checks and a ceiling keep their helpers."""
    a, b = sympy.symbols("a b", integer=True)
    formulas = [sympy.floor(a / 2), sympy.floor(a / 8), sympy.floor((a - 7) / 4), sympy.Mod(a, 2),
                sympy.Mod(a - 3, 16), sympy.floor(a * (-1 - a) / 2), 2 * b * (2 * b + 1) / 2]
    for target in (C, overflow_checked_c("overflow")):
        texts = [print_size(f, target) for f in formulas]
        assert not any("floordiv" in t or "fs_mod" in t or "/" in t or "%" in t for t in texts), texts
        assert texts[:2] == ["fs_shift_floor_i64(a, 1)", "fs_shift_floor_i64(a, 3)"]
        assert "fs_mask_mod_i64(a, 1)" in texts
    assert print_size(sympy.floor(a / 2), C_CHECKED) == "fs_size_floordiv(a, 2)"
    assert print_size(sympy.Mod(a, 2), C_CHECKED) == "fs_size_mod(a, 2)"
    assert print_size(sympy.ceiling(a / 2), C) == "fs_ceildiv_i64(a, 2)"
    assert print_size(sympy.floor(a / 6), C) == "fs_floordiv_i64(a, 6)"
    body = "".join(f'printf("%lld\\n", (long long){print_size(f, C)});' for f in formulas[:5])
    (tmp_path / "shift.c").write_text(
        '#include <stdio.h>\n#include <stdlib.h>\n#include "fsmooth_rt.h"\n'
        f"int main(int argc, char **argv) {{ int64_t a = strtoll(argv[1], 0, 10); {body} return 0; }}\n")
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Werror", f"-I{CLIB}", "-fsanitize=undefined",
                    "-fno-sanitize-recover=all", str(tmp_path / "shift.c"), "-o", str(tmp_path / "shift"), "-lm"],
                   check=True)
    for x in (-2 ** 63 + 16, -2 ** 62 - 1, -17, -9, -8, -7, -2, -1, 0, 1, 2, 7, 8, 9, 10 ** 15 + 1, 2 ** 63 - 16):
        got = subprocess.run([str(tmp_path / "shift"), str(x)], check=True, capture_output=True,
                             text=True).stdout.split()
        assert got == [str(v) for v in (x // 2, x // 8, (x - 7) // 4, x % 2, (x - 3) % 16)], x


def test_a_kernel_scratch_with_ceiling_division(tmp_path):
    """blas.asum's scratch is 16 bytes per group of four partial sums, rounded up: its generated
    K_scratch_bytes uses fs_ceildiv_i64 and agrees with the sympy formula."""
    from corpus import blas

    source = blas.asum.c_source()
    assert "fs_ceildiv_i64(" in source and "-fs_floordiv_i64(" not in source
    exe = blas.asum.executable()
    formula = exe.interface.scratch_formula
    assert formula.has(sympy.ceiling)
    (x,) = formula.free_symbols
    for size in (0, 1, 16384, 16385, 3 * 16384 + 5, 4 * 16384, 5 * 16384 + 1, 2 ** 40):
        _, nbytes = exe.plan_for_sizes({"x_d0": size})
        assert nbytes == int(formula.subs(x, size)), size


@pytest.mark.parametrize("parallel", [False, True])
def test_corpus_c_divides_up_with_the_helper(parallel):
    """Ceilings of sizes print as fs_ceildiv_i64, never as a negated floor of a negated quotient
    (the form before it: ``(-fs_floordiv_i64((-n), 2))``)."""
    from corpus import adbench_gmm, blas

    from fsmooth.embed import compile_module, exported_kernels
    from fsmooth.options import default_options

    for module in (blas, adbench_gmm):
        source = compile_module(exported_kernels(module), default_options(parallel=parallel), module.__name__.split(".")[-1]).source
        assert "fs_ceildiv_i64(" in source and "-fs_floordiv_i64((-" not in source, module.__name__
