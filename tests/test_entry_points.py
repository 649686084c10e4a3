"""The kernels' CPython entry points (``fsmooth.python_entry``, issue 11): a call of the common case
is one C function and runs no Python; every other call is handed, unchanged, to the Python call
(``fsmooth.runtime.call_function``), so the entry point accepts, converts, rejects and reports
exactly what the Python call does.  Which path a call takes is counted (the Python functions it
enters), never timed (``benchmarks/call_overhead.py`` measures the time)."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fsmooth as fs
from fsmooth import Array, Bool, Card, Double, Float, Index, build, ifold, length
from fsmooth import cache, python_entry, runtime
from fsmooth.cache import c_compiler
from fsmooth.clib import HEADER_DIR
from fsmooth.embed import compile_module
from fsmooth.options import Options
from fsmooth.types import NUMPY_DTYPE, element_scalar, rank


@fs.kernel
def add(x: Double, y: Double) -> Double:
    return x + y


@fs.kernel
def scale(v: Array[Double], s: Double) -> Array[Double]:
    return build(length(v), lambda i: s * v[i])


@fs.kernel
def halves(v: Array[Double]) -> Array[Double]:
    # scratch: the doubled vector is a region of the arena (its element costs more than one
    # operation, so fusion keeps it, read twice)
    w = build(length(v), lambda i: 2.0 * v[i] - 0.0 * v[length(v) - 1 - i])
    return build(length(v), lambda i: w[i] * 0.25 + w[length(v) - 1 - i] * 0.0)


@fs.kernel
def dot(a: Array[Double], b: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + a[i] * b[i], 0.0, length(a))


@fs.kernel
def first(n: Card, v: Array[Index], flip: Bool) -> Index:
    return ifold(lambda acc, i: v[i] if flip else acc + v[i], 0, n)


@fs.kernel
def card_total(c: Array[Card]) -> Card:
    return ifold(lambda acc, i: acc + c[i], 0, length(c))


@fs.kernel
def count_true(flags: Array[Bool]) -> Card:
    return ifold(lambda acc, i: acc + 1 if flags[i] else acc, 0, length(flags))


@fs.kernel
def shift_rows(m: Array[Array[Float]], s: Float) -> Array[Array[Float]]:
    return build(length(m), lambda i: build(length(m[i]), lambda j: m[i][j] + s))


@fs.kernel
def argmax(v: Array[Double]) -> tuple[Double, Index]:
    return ifold(lambda best, i: (v[i], i) if v[i] > best[0] else best, (v[0], 0), length(v))


@fs.kernel
def pair(v: Array[Double], n: Card) -> tuple[Array[Double], tuple[Double, Array[Index]]]:
    return (build(length(v), lambda i: 2.0 * v[i]), (1.5, build(n, lambda i: i)))


@fs.kernel
def gather(v: Array[Double], idx: Array[Index]) -> Array[Double]:
    return build(length(idx), lambda i: v[idx[i]])


@fs.kernel
def divide(x: Index, y: Index) -> Index:
    return x // y


@fs.kernel
def grid(n: Card, m: Card) -> Array[Double]:
    return build(n * m, lambda i: 1.0)


@fs.kernel
def window(v: Array[Double], s: Card, k: Card) -> Array[Double]:
    return build(k, lambda i: v[i + s])


@fs.kernel
def sum_pair(p: tuple[Double, Double]) -> Double:
    return p[0] + p[1]


KERNELS = [add, scale, halves, dot, first, card_total, count_true, shift_rows, argmax, pair, gather, divide, grid,
           window]

# One call of each kernel that the entry point takes, and the numpy oracle of its result.
FAST = [
    (add, (1.5, 2.25), 3.75),
    (scale, (np.arange(5.0), 3.0), 3.0 * np.arange(5.0)),
    (halves, (np.arange(7.0),), 0.5 * np.arange(7.0)),
    (dot, (np.arange(4.0), np.arange(4.0)), 14.0),
    (first, (3, np.arange(5), False), 3),
    (card_total, (np.array([1, 2, 3]),), 6),
    (count_true, (np.array([True, False, True]),), 2),
    (shift_rows, (np.ones((2, 3), dtype=np.float32), 0.5), np.full((2, 3), 1.5, dtype=np.float32)),
    (argmax, (np.array([1.0, 5.0, 2.0]),), (5.0, 1)),
    (pair, (np.arange(3.0), 2), (2.0 * np.arange(3.0), (1.5, np.arange(2)))),
    (gather, (np.arange(3.0), np.array([2, 0])), np.array([2.0, 0.0])),
    (divide, (-7, 2), -4),
    (grid, (2, 3), np.ones(6)),
    (window, (np.arange(5.0), 1, 3), np.array([1.0, 2.0, 3.0])),
    (scale, (np.arange(5.0), 3), 3.0 * np.arange(5.0)),             # an int for a Double: float(3)
    (shift_rows, (np.ones((1, 2), dtype=np.float32), -3), np.full((1, 2), -2.0, dtype=np.float32)),
]
COMPILING_CALL = {kernel: args for kernel, args, _ in FAST}  # a call that compiles the kernel


def python_frames(fn, *args) -> list[str]:
    """The Python functions ``fn(*args)`` enters, by code name (an exception it raises is kept)."""
    entered = []

    def profile(frame, event, arg):
        if event == "call":
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn(*args)
    except Exception:
        pass
    finally:
        sys.setprofile(None)
    return entered


def assert_same(a, b):
    """Equal values of equal types: arrays of one dtype and shape, bit for bit; Python scalars."""
    if isinstance(a, tuple):
        assert type(b) is tuple and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape and b.flags.c_contiguous
        assert a.tobytes() == b.tobytes()
    else:
        assert type(a) is type(b) and (a == b or (a != a and b != b)), (a, b)


@pytest.mark.parametrize("kernel, args, expected", FAST, ids=[k.name for k, _, _ in FAST])
def test_a_common_call_is_the_entry_point_and_runs_no_python(kernel, args, expected):
    result = kernel(*args)  # the first call compiles
    executable = kernel.executable()
    assert type(executable.call).__name__ == "builtin_function_or_method"
    assert executable.call is not executable.python_call and kernel._call is executable.call
    assert python_frames(kernel, *args) == []
    assert_same(executable.python_call(*args), result)
    for got, want, oracle in zip(leaves(result), leaves(kernel.reference(*args)), leaves(expected)):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, oracle)


def leaves(value) -> list:
    """The components of a (nested) tuple value, in order."""
    return [leaf for item in value for leaf in leaves(item)] if isinstance(value, tuple) else [value]


@pytest.mark.parametrize("kernel, args", [
    (add, (np.float64(1.5), 2.0)),                          # a float subclass
    (add, (2 ** 1024, 2.0)),                                # an int too large for a double
    (scale, (np.arange(10.0)[::2], 2.0)),                   # not contiguous
    (scale, ([1.0, 2.0], 2.0)),                             # a list
    (scale, (np.arange(3, dtype=np.int32), 2.0)),           # another dtype
    (scale, (np.arange(3.0).astype(">f8"), 2.0)),            # byte-swapped
    (shift_rows, (np.asfortranarray(np.ones((2, 3), dtype=np.float32)), 0.5)),
    (first, (np.int64(2), np.arange(3), False)),            # a numpy int
    (first, (2, np.arange(3, dtype=np.dtype("q")), False)),  # int64 of another dtype object
])
def test_what_the_entry_point_does_not_take_goes_to_the_python_call(kernel, args):
    kernel(*COMPILING_CALL[kernel])
    assert "call" in python_frames(kernel, *args)
    assert_same_outcome(outcome(kernel, args), outcome(kernel.executable().python_call, args))


@pytest.mark.parametrize("kernel, args, error, message", [
    (add, (1.0,), TypeError, "takes 2 arguments, got 1"),
    (add, ("1.0", 2.0), TypeError, "'x'"),
    (add, (True, 2.0), TypeError, "must be"),
    (add, (10 ** 400, 1.0), ValueError, "too large"),
    (scale, (np.ones((2, 2)), 1.0), TypeError, "must be a 1-D array"),
    (scale, (np.array([True]), 1.0), TypeError, "booleans"),
    (dot, (np.ones(3), np.ones(2)), ValueError, "'b'"),
    (first, (-1, np.arange(3), False), ValueError, ">= 0"),
    (first, (2 ** 63, np.arange(3), False), ValueError, "int64"),
    (first, (2, np.arange(3.0), False), TypeError, "without loss"),
    (first, (2, np.arange(3), 1), TypeError, "bool"),
    (card_total, (np.array([1, -2]),), ValueError, "negative"),
    (argmax, (np.empty(0),), ValueError, "'v'"),
    (grid, (2 ** 32, 2 ** 32), OverflowError, "overflows int64"),
    (window, (np.ones(4), 2 ** 63 - 1, 2), ValueError, "argument 'v'"),
])
def test_every_rejection_happens_on_the_python_call_before_c_runs(kernel, args, error, message):
    kernel(*COMPILING_CALL[kernel])  # compiled, the entry point installed
    with pytest.raises(error, match=message):
        kernel(*args)
    assert "call" in python_frames(kernel, *args)  # the Python call raised it: K never ran


@pytest.mark.parametrize("kernel, args, error, message", [
    (gather, (np.arange(3.0), np.array([0, 3])), IndexError, "gather: index out of range"),
    (divide, (7, 0), ZeroDivisionError, "divide: integer division by zero"),
])
def test_a_status_is_raised_from_the_entry_point(kernel, args, error, message):
    kernel(*COMPILING_CALL[kernel])
    with pytest.raises(error, match=message):
        kernel(*args)
    assert python_frames(kernel, *args) == ["raise_status"]  # from C: the Python call is not entered
    with pytest.raises(error, match=message):
        kernel.executable().python_call(*args)


# ----------------------------------------------------------------------------- the same as the Python call

DTYPES = [np.dtype(t) for t in ("f8", "f4", "i8", "q", "i4", "u1", "u8", "?", "c16", ">f8")]


@st.composite
def arrays(draw, dtypes=tuple(DTYPES), ndims=(0, 1, 2, 3)):
    ndim = draw(st.sampled_from(ndims))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(dtypes))
    values = np.arange(-3, -3 + int(np.prod(shape)), dtype=np.int64).reshape(shape)
    array = np.array(values if dtype.kind != "u" else np.abs(values), dtype=dtype)
    layout = draw(st.sampled_from(["C", "F", "strided", "readonly"]))
    if layout == "F":
        array = np.asfortranarray(array)
    elif layout == "strided" and ndim:
        array = np.repeat(array, 2, axis=0)[::2]
    elif layout == "readonly":
        array.flags.writeable = False
    return array


SCALARS = st.sampled_from([0.0, -2.5, float("nan"), float("inf"), 0, 1, 2, 3, -1, 2 ** 63 - 1, 2 ** 63, -2 ** 63,
                           -2 ** 63 - 1, 10 ** 400, True, False, np.float64(1.5), np.float32(0.5), np.int64(2),
                           np.uint8(1), np.bool_(True), "1.0", None, [1.0, 2.0], (1.0,)])


def argument_for(ty):
    """Mostly what the parameter wants (so that calls also succeed), else anything."""
    if ty is Card:
        wanted = st.integers(0, 4)
    elif ty in (Index,):
        wanted = st.integers(-3, 4)
    elif ty in (Double, Float):
        wanted = st.one_of(st.floats(allow_nan=True, width=64), st.integers(-2 ** 70, 2 ** 70))
    elif ty is Bool:
        wanted = st.booleans()
    else:  # the parameter's dtype and rank in any layout, or another rank
        wanted = arrays((NUMPY_DTYPE[element_scalar(ty)],), (rank(ty), rank(ty), rank(ty), rank(ty) + 1))
    return st.one_of(wanted, wanted, wanted, wanted, arrays(), SCALARS)


def outcome(fn, args):
    try:
        return ("result", fn(*args))
    except Exception as err:  # noqa: BLE001 -- the exception is what is compared
        return ("error", type(err), str(err))


def assert_same_outcome(fast, python):
    """The same result (``assert_same``), or an exception of the same type and message."""
    assert fast[0] == python[0], (fast, python)
    if fast[0] == "result":
        assert_same(python[1], fast[1])
    else:
        assert fast[1] is python[1] and fast[2] == python[2]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_entry_point_does_what_the_python_call_does(data):
    kernel = data.draw(st.sampled_from([k for k in KERNELS if k is not grid]))
    executable = kernel.executable()
    params = [ty for _, ty in executable.interface.params]
    args = [data.draw(argument_for(ty)) for ty in params]
    if data.draw(st.integers(0, 9)) == 0:  # a wrong number of arguments
        args = args[:-1] if data.draw(st.booleans()) and args else args + [1.0]
    assert_same_outcome(outcome(executable.call, args), outcome(executable.python_call, args))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([0, 1, 3, 2 ** 31, 2 ** 40, 2 ** 62, 2 ** 63 - 1]),
       st.sampled_from([0, 1, 3, 2 ** 31, 2 ** 40, 2 ** 62, 2 ** 63 - 1]))
def test_sizes_near_int64_are_refused_alike(n, m):
    """grid(n, m) has n*m elements: an overflow of int64 is K_check_sizes' OverflowError, an array
    numpy cannot allocate its MemoryError or ValueError, on both paths alike."""
    if 0 < n * m < 2 ** 24 or (n * m > 0 and n * m * 8 < 2 ** 40):
        return  # allocatable and then written: not what this test is about
    executable = grid.executable()
    assert_same_outcome(outcome(executable.call, (n, m)), outcome(executable.python_call, (n, m)))


# ----------------------------------------------------------------------------- threads, variants

def test_concurrent_calls_each_use_their_own_arena():
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for n in (10, 1000, 20000, 5, 3000):
            v = rng.standard_normal(n)
            for _ in range(20):
                if not np.array_equal(halves(v), 0.5 * v) or pair(v, 3)[0].tolist() != (2.0 * v).tolist():
                    failures.append((seed, n))

    halves(np.ones(1))
    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert halves.scratch_bytes(np.ones(20000)) >= 8 * 20000  # halves needs scratch: each thread grew its arena


NEEDS_LIBGC = pytest.mark.skipif(not cache.system_library_available("gc.h", "gc"), reason="libgc-dev is not installed")


@pytest.mark.parametrize("options", [dict(allocation="malloc"), dict(allocation="leaky"), dict(parallel=True),
                                     pytest.param(dict(allocation="gc"), marks=NEEDS_LIBGC)],
                         ids=["malloc", "leaky", "parallel", "gc"])
def test_variants_have_entry_points(options, rng):
    compiled = halves.with_options(**options)
    for n in (0, 1, 7, 5000):
        v = rng.standard_normal(n)
        np.testing.assert_array_equal(compiled(v), halves.reference(v))
        np.testing.assert_array_equal(compiled(v), 0.5 * v)
    assert python_frames(compiled, np.ones(3)) == []
    assert compiled.executable().call is not compiled.executable().python_call


def test_checked_arenas_and_tuple_parameters_keep_the_python_call():
    checked = halves.with_options(check_arena=True)
    np.testing.assert_array_equal(checked(np.arange(4.0)), 0.5 * np.arange(4.0))
    assert checked.executable().call is checked.executable().python_call
    assert runtime.last_high_water(checked) > 0
    assert sum_pair((1.0, 2.5)) == 3.5 == sum_pair.reference((1.0, 2.5))
    assert sum_pair.executable().call is sum_pair.executable().python_call


def test_a_reference_run_calls_the_reference_through_the_entry_point():
    @fs.kernel
    def twice_scale(v: Array[Double]) -> Array[Double]:
        return scale(scale(v, 2.0), 1.0)

    v = np.arange(3.0)
    scale(v, 1.0)
    frames = python_frames(twice_scale.reference, v)
    assert frames.count("call") == 2 and frames.count("scale") == 2  # the fallback ran scale's Python body
    np.testing.assert_array_equal(twice_scale.reference(v), 2.0 * v)


def test_the_entry_point_refuses_a_state_that_is_not_its_own():
    executable = add.executable()
    entries, _ = runtime._entry_points[executable._library.__name__]
    make = getattr(entries, executable.interface.symbol)
    with pytest.raises(TypeError, match="not the state"):
        make((1, 2))
    with pytest.raises(TypeError, match="not the state"):
        make(python_entry.entry_state(executable.interface, executable.python_call, "not a ContextVar", None))


@pytest.mark.parametrize("options", [Options(), Options(parallel=True)], ids=["sequential", "parallel"])
def test_the_entry_points_compile_without_warnings(options, tmp_path):
    artifact = compile_module(KERNELS, options, "entry_warnings")
    name, entries = python_entry.entry_module(artifact)
    assert f"PyInit_{name}" in entries
    source = tmp_path / "module.c"
    source.write_text(f"#include <Python.h>\n{artifact.source}\n{entries}")
    result = subprocess.run([*c_compiler(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                             *artifact.compile_args,
                             f"-I{sysconfig.get_paths()['include']}", f"-I{np.get_include()}", f"-I{HEADER_DIR}",
                             str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
