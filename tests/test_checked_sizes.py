"""Checked size arithmetic: a result dim, a scratch size or a size constraint that overflows int64
or divides by zero refuses the call (OverflowError, or the constraint's ValueError), where it
used to wrap (an empty result, a read outside the array returned as data) or raise SIGFPE; the
C helpers (clib/fsmooth_rt.h, fs_size_*) agree with Python's exact integers.

A size computed inside a kernel body (an ifold's count from a product, from a loop variable or
from data) is computed with checked arithmetic where the range analysis cannot prove that it fits
(clib/fsmooth_scalar.h, fs_checked_*): an overflow fails the call with status 6, OverflowError,
as the reference's Int64 does; a proven count (``i + 1`` inside ``build(n)``) stays plain C.  A
size divided by zero is a ZeroDivisionError in the compiled code (K_check_sizes tests the
divisors first) and in the reference."""
from __future__ import annotations

import re
import subprocess

import cffi
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, ifold, length
from fsmooth.cache import c_compiler
from fsmooth.clib import HEADER_DIR


@fs.kernel
def grid(n: Card, m: Card) -> Array[Double]:
    return build(n * m, lambda i: 1.0)


@fs.kernel
def window(v: Array[Double], s: Card, k: Card) -> Array[Double]:
    return build(k, lambda i: v[i + s])


@fs.kernel
def quotient_sized(a: Card, b: Card) -> Array[Double]:
    return build(a // b, lambda i: 1.0)


def test_a_result_size_that_overflows_is_refused():
    with pytest.raises(OverflowError, match="overflows int64"):
        grid(2**32, 2**32)
    with pytest.raises(OverflowError):
        grid.scratch_bytes(2**62, 4)
    np.testing.assert_array_equal(grid(3, 2), np.ones(6))
    assert grid(2**31, 0).shape == (0,)


def test_a_constraint_that_overflows_fails_instead_of_reading_outside():
    with pytest.raises(ValueError, match="argument 'v'"):
        window(np.ones(4), 2**63 - 1, 2)
    np.testing.assert_array_equal(window(np.arange(4.0), 1, 2), [1.0, 2.0])


def test_a_size_divided_by_zero_is_a_zero_division_error_in_both():
    for run in (quotient_sized, quotient_sized.reference):
        with pytest.raises(ZeroDivisionError):
            run(3, 0)
    for a, b in ((7, 2), (0, 5), (6, 1)):
        np.testing.assert_array_equal(quotient_sized(a, b), quotient_sized.reference(a, b))
        np.testing.assert_array_equal(quotient_sized(a, b), np.ones(a // b))


# ----------------------------------------------------------------------------- sizes in bodies

@fs.kernel
def count_product(n: Card, m: Card) -> Double:
    return ifold(lambda a, i: a + 1.0, 0.0, n * m)


@fs.kernel
def counts_from_data(idx: Array[Index], k: Index) -> Array[Double]:
    return build(length(idx), lambda i: ifold(lambda a, j: a + 1.0, 0.0, idx[i] * k))


@fs.kernel
def counts_from_loop(n: Card, k: Index) -> Array[Double]:
    return build(n, lambda i: ifold(lambda a, j: a + 1.0, 0.0, i * k))


@fs.kernel
def count_quotient(a: Index, b: Index) -> Double:
    return ifold(lambda s, i: s + 1.0, 0.0, a // b)


@fs.kernel
def prefix_sums(v: Array[Double]) -> Array[Double]:
    return build(length(v), lambda i: ifold(lambda a, j: a + v[j], 0.0, i + 1))


def same_failure(kernel, args, error):
    """The compiled kernel and its reference both raise ``error``."""
    for run in (kernel, kernel.reference):
        with pytest.raises(error):
            run(*args)


def agree(kernel, args, oracle):
    """Compiled == reference == the numpy oracle."""
    compiled = kernel(*args)
    np.testing.assert_array_equal(compiled, kernel.reference(*args))
    np.testing.assert_array_equal(compiled, oracle)


def test_an_ifold_count_that_overflows_is_an_overflow_error_in_both():
    same_failure(count_product, (2**32, 2**32), OverflowError)
    same_failure(count_product, (2**62, 3), OverflowError)
    for n, m in ((3, 4), (0, 2**40), (2**31, 0), (1, 5)):
        agree(count_product, (n, m), float(n * m))


def test_a_count_read_from_data_is_checked_where_it_is_computed():
    idx = np.array([2**30, 0], dtype=np.int64)
    same_failure(counts_from_data, (idx, 2**40), OverflowError)
    same_failure(counts_from_data, (np.array([1, -2**62], dtype=np.int64), 4), OverflowError)
    idx = np.array([3, -2, 0, 5], dtype=np.int64)
    agree(counts_from_data, (idx, 2), np.maximum(idx * 2, 0).astype(float))
    agree(counts_from_data, (np.array([-2**62], dtype=np.int64), 2), [0.0])  # exactly INT64_MIN: no iteration
    agree(counts_from_data, (np.zeros(0, dtype=np.int64), 2**62), np.zeros(0))


def test_a_count_of_a_loop_variable_is_checked_per_iteration():
    # i * k: 0, -2**62, -2**63 (fits: runs nothing), then -3 * 2**62 overflows at i = 3
    agree(counts_from_loop, (3, -2**62), np.zeros(3))
    same_failure(counts_from_loop, (4, -2**62), OverflowError)
    agree(counts_from_loop, (5, 3), np.arange(5) * 3.0)


def test_a_count_divided_by_zero_or_wrapping_in_its_division():
    same_failure(count_quotient, (7, 0), ZeroDivisionError)
    same_failure(count_quotient, (-2**63, -1), OverflowError)  # the quotient 2**63 wraps
    agree(count_quotient, (7, 2), 3.0)
    agree(count_quotient, (-7, 2), 0.0)


def test_proven_counts_stay_plain_c():
    """The range analysis proves ``i + 1 <= length(v)`` inside ``build(length(v))``, so the hot
    loop has no check; the unproven counts above have one each."""
    assert "fs_checked_" not in prefix_sums.c_source()
    v = np.arange(6.0)
    agree(prefix_sums, (v,), np.cumsum(v))
    for kernel in (count_product, counts_from_data, counts_from_loop, count_quotient):
        assert len(re.findall(r"if \(fs_overflow_\d+\)", kernel.c_source())) == 1, kernel.name


def test_body_size_checks_are_clean_under_sanitizers(tmp_path):
    """The generated C, built without -fwrapv under AddressSanitizer and UBSan (which then
    reports any signed overflow), returns status 6 for the overflowing counts and runs the
    others: no signed overflow happens on the way."""
    kernels = (count_product, counts_from_data, counts_from_loop, count_quotient)
    sources = [k.c_source() for k in kernels]
    symbol = {k.name: re.search(rf"^int (\w+_{k.name})\(", src, re.M).group(1) for k, src in zip(kernels, sources)}
    main = f"""
        #include <stdio.h>
        {"".join(sources)}
        int main(void) {{
            double out[8], one;
            int64_t big[2] = {{INT64_C(1) << 30, 0}}, small[4] = {{3, -2, 0, 5}};
            printf("%d ", {symbol['count_product']}(NULL, &one, INT64_C(1) << 32, INT64_C(1) << 32));
            printf("%d ", {symbol['count_product']}(NULL, &one, 3, 4));
            printf("%g ", one);
            printf("%d ", {symbol['counts_from_data']}(NULL, out, big, 2, INT64_C(1) << 40));
            printf("%d ", {symbol['counts_from_data']}(NULL, out, small, 4, 2));
            printf("%g ", out[3]);
            printf("%d ", {symbol['counts_from_loop']}(NULL, out, 4, -(INT64_C(1) << 62)));
            printf("%d ", {symbol['counts_from_loop']}(NULL, out, 3, -(INT64_C(1) << 62)));
            printf("%d ", {symbol['count_quotient']}(NULL, &one, INT64_MIN, -1));
            printf("%d\\n", {symbol['count_quotient']}(NULL, &one, 7, 0));
            return 0;
        }}
    """
    (tmp_path / "main.c").write_text(main)
    subprocess.run([*c_compiler(), "-std=c99", "-O1", "-g", f"-I{HEADER_DIR}", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=all", str(tmp_path / "main.c"), "-o", str(tmp_path / "main"), "-lm"],
                   check=True)
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=120,
                         env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert run.returncode == 0 and not run.stderr, run.stderr
    assert run.stdout.split() == ["6", "0", "12", "6", "0", "10", "6", "0", "6", "2"]


_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "floordiv": lambda a, b: a // b, "ceildiv": lambda a, b: -(-a // b), "mod": lambda a, b: a % b}


@pytest.fixture(scope="module")
def helpers(tmp_path_factory):
    ffi = cffi.FFI()
    ffi.cdef("".join(f"int64_t fs_size_{name}_(int64_t a, int64_t b);" for name in _OPS)
             + "int fs_size_ge_(int64_t a, int64_t b);")
    source = "#include \"fsmooth_rt.h\"\n" + "".join(
        f"int64_t fs_size_{name}_(int64_t a, int64_t b) {{ return fs_size_{name}(a, b); }}\n" for name in _OPS) + \
        "int fs_size_ge_(int64_t a, int64_t b) { return fs_size_ge(a, b); }\n"
    ffi.set_source("_checked_size_helpers", source, include_dirs=[str(HEADER_DIR)],
                   extra_compile_args=["-std=c99", "-fsanitize=undefined", "-fno-sanitize-recover=all"],
                   extra_link_args=["-fsanitize=undefined"])
    module_dir = tmp_path_factory.mktemp("helpers")
    lib_path = ffi.compile(tmpdir=str(module_dir))
    return _load(lib_path)


def _load(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("_checked_size_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.lib


INT64 = st.one_of(st.integers(-2**63 + 1, 2**63 - 1), st.sampled_from([0, 1, -1, 2**31, 2**32, 2**62, -2**62,
                                                                       2**63 - 1, -2**63 + 1]))
POISON = -2**63


@settings(max_examples=300, deadline=None)
@given(a=INT64, b=INT64)
def test_the_c_helpers_are_exact_or_poison(helpers, a, b):
    for name, op in _OPS.items():
        got = getattr(helpers, f"fs_size_{name}_")(a, b)
        if name in ("floordiv", "ceildiv", "mod") and b == 0:
            assert got == POISON
            continue
        exact = op(a, b)
        assert got == (exact if -2**63 < exact < 2**63 else POISON), (name, a, b)
        assert getattr(helpers, f"fs_size_{name}_")(POISON, b) == POISON
    assert helpers.fs_size_ge_(a, b) == (a >= b) and not helpers.fs_size_ge_(POISON, b)
