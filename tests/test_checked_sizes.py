"""Checked size arithmetic: a result dim, a scratch size or a size constraint that overflows int64
or divides by zero refuses the call (OverflowError, or the constraint's ValueError), where it
used to wrap (an empty result, a read outside the array returned as data) or raise SIGFPE; the
C helpers (clib/fsmooth_rt.h, fs_size_*) agree with Python's exact integers."""
from __future__ import annotations

import cffi
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fsmooth as fs
from fsmooth import Array, Card, Double, build, length
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


def test_a_size_divided_by_zero_is_refused_not_a_signal():
    with pytest.raises((ValueError, ZeroDivisionError, OverflowError)):
        quotient_sized(3, 0)
    assert quotient_sized(7, 2).shape == (3,)


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
