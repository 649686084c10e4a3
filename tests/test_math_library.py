"""The math library (fs.tanh, …, fs.atan2, fs.isnan, …) and the conversions float(x), int(x).

Every function, in Float and in Double: the compiled C, the reference (``fs.NAME``: IEEE
semantics, as C), the core and DPS interpreters and an independent oracle (numpy's function, or
``math``'s with C's values at poles and overflows where numpy has none) agree on many inputs, edge
values among them (±0, ±1, poles, overflow, ±inf, NaN), and on empty arrays.  One kernel uses many
of the functions through OpenCL, scalar and vectorised.  ``int`` of a NaN, an infinity or a value
outside int64 is a ValueError from the compiled call (status 5), never undefined behaviour (the
generated C runs under UBSan's float-cast-overflow check too).
"""
from __future__ import annotations

import math
import pathlib
import re
import subprocess

import cffi
import numpy as np
import pytest

import fsmooth as fs
from fsmooth.dps.interp import run_kernel as run_dps
from fsmooth import Array, Bool, Card, Double, Float, Index, build, core, length
from fsmooth.artifact import STATUS
from fsmooth.driver import compile_to_c
from fsmooth.anf import anf_program
from fsmooth.shape.translate import shape_program
from fsmooth.dps.simplify import simplify_allocs
from fsmooth.dps.translate import dps_program

ROOT = pathlib.Path(__file__).resolve().parent.parent

UNARY = ["tanh", "sinh", "cosh", "asin", "acos", "atan", "ceil", "trunc", "log1p", "expm1", "log2", "log10",
         "lgamma", "erf", "erfc"]
BINARY = ["atan2", "hypot", "copysign"]
TESTS = ["isnan", "isinf", "isfinite"]


# ----------------------------------------------------------------------------- kernels
# One selector kernel per arity and type (k picks the function), so that a table of every function
# at every input is one compiled kernel.

@fs.kernel
def unary_double(k: Index, x: Double) -> Double:
    return (fs.tanh(x) if k == 0 else fs.sinh(x) if k == 1 else fs.cosh(x) if k == 2 else
            fs.asin(x) if k == 3 else fs.acos(x) if k == 4 else fs.atan(x) if k == 5 else
            fs.ceil(x) if k == 6 else fs.trunc(x) if k == 7 else fs.log1p(x) if k == 8 else
            fs.expm1(x) if k == 9 else fs.log2(x) if k == 10 else fs.log10(x) if k == 11 else
            fs.lgamma(x) if k == 12 else fs.erf(x) if k == 13 else fs.erfc(x))


@fs.kernel
def unary_float(k: Index, x: Float) -> Float:
    return (fs.tanh(x) if k == 0 else fs.sinh(x) if k == 1 else fs.cosh(x) if k == 2 else
            fs.asin(x) if k == 3 else fs.acos(x) if k == 4 else fs.atan(x) if k == 5 else
            fs.ceil(x) if k == 6 else fs.trunc(x) if k == 7 else fs.log1p(x) if k == 8 else
            fs.expm1(x) if k == 9 else fs.log2(x) if k == 10 else fs.log10(x) if k == 11 else
            fs.lgamma(x) if k == 12 else fs.erf(x) if k == 13 else fs.erfc(x))


@fs.kernel
def unary_table_double(v: Array[Double]) -> Array[Array[Double]]:
    return build(15, lambda k: build(length(v), lambda i: unary_double(k, v[i])))


@fs.kernel
def unary_table_float(v: Array[Float]) -> Array[Array[Float]]:
    return build(15, lambda k: build(length(v), lambda i: unary_float(k, v[i])))


@fs.kernel
def binary_table_double(x: Array[Double], y: Array[Double]) -> Array[Array[Double]]:
    return build(3, lambda k: build(length(x), lambda i: fs.atan2(x[i], y[i]) if k == 0 else
                                    fs.hypot(x[i], y[i]) if k == 1 else fs.copysign(x[i], y[i])))


@fs.kernel
def binary_table_float(x: Array[Float], y: Array[Float]) -> Array[Array[Float]]:
    return build(3, lambda k: build(length(x), lambda i: fs.atan2(x[i], y[i]) if k == 0 else
                                    fs.hypot(x[i], y[i]) if k == 1 else fs.copysign(x[i], y[i])))


@fs.kernel
def classify_double(v: Array[Double]) -> Array[Array[Bool]]:
    return build(3, lambda k: build(length(v), lambda i: fs.isnan(v[i]) if k == 0 else
                                    fs.isinf(v[i]) if k == 1 else fs.isfinite(v[i])))


@fs.kernel
def classify_float(v: Array[Float]) -> Array[Array[Bool]]:
    return build(3, lambda k: build(length(v), lambda i: fs.isnan(v[i]) if k == 0 else
                                    fs.isinf(v[i]) if k == 1 else fs.isfinite(v[i])))


@fs.kernel
def math_spellings(x: Double, y: Double) -> Double:
    """math.NAME compiles to the same primitives as fs.NAME (in a reference run it is Python's own)."""
    return (math.tanh(x) + math.sinh(x) + math.cosh(x) + math.asin(x) + math.acos(x) + math.atan(x)
            + math.atan2(x, y) + math.ceil(x) + math.trunc(x) + math.hypot(x, y) + math.log1p(x)
            + math.expm1(x) + math.log2(y) + math.log10(y) + math.lgamma(y) + math.erf(x) + math.erfc(x)
            + math.copysign(x, y) + (1.0 if math.isnan(x) or math.isinf(y) or not math.isfinite(x) else 0.0))


@fs.kernel
def fsmooth_spellings(x: Double, y: Double) -> Double:
    return (fs.tanh(x) + fs.sinh(x) + fs.cosh(x) + fs.asin(x) + fs.acos(x) + fs.atan(x)
            + fs.atan2(x, y) + fs.ceil(x) + fs.trunc(x) + fs.hypot(x, y) + fs.log1p(x)
            + fs.expm1(x) + fs.log2(y) + fs.log10(y) + fs.lgamma(y) + fs.erf(x) + fs.erfc(x)
            + fs.copysign(x, y) + (1.0 if fs.isnan(x) or fs.isinf(y) or not fs.isfinite(x) else 0.0))


@fs.kernel
def promoted(i: Index, n: Card, f: Float) -> Double:
    """Integer arguments are Doubles (as for sqrt); mixed operands take their common floating type."""
    return fs.tanh(i) + fs.atan2(i, n) + fs.hypot(f, 2) + fs.copysign(3, f) + (1.0 if fs.isfinite(n) else 0.0)


@fs.kernel
def float_stays_float(f: Float) -> Float:
    return fs.atan2(f, 2.0) + fs.hypot(f, 1) + fs.lgamma(f)


@fs.kernel
def to_int(v: Array[Double]) -> Array[Index]:
    return build(length(v), lambda i: int(v[i]))


@fs.kernel
def to_int_float(v: Array[Float]) -> Array[Index]:
    return build(length(v), lambda i: int(v[i]))


@fs.kernel
def to_int_scalar(x: Double) -> Index:
    return int(x * 2.0) + 1


@fs.kernel
def int_of_integers(i: Index, n: Card, b: Bool) -> Index:
    return int(i) * 100 + int(n) * 10 + int(b) + int(i < 0) * 1000


@fs.kernel
def to_float(i: Index, n: Card, b: Bool, f: Float, x: Double) -> Double:
    return float(i) * 10000.0 + float(n) * 1000.0 + float(b) * 100.0 + float(f) + float(x) + float(3) + float(True)


@fs.kernel
def int_in_an_index(v: Array[Double], w: Array[Double]) -> Array[Double]:
    """int(x) as an array index: the conversion's check, then the read's."""
    return build(length(v), lambda i: w[int(v[i] * 0.5)])


# ----------------------------------------------------------------------------- oracles

def _lgamma(x: float) -> float:
    if math.isnan(x):
        return math.nan
    if math.isinf(x) or (x <= 0 and x == math.floor(x)):
        return math.inf  # C: lgamma(±inf) = +inf; a pole at 0, -1, -2, ...
    try:
        return math.lgamma(x)
    except OverflowError:
        return math.inf


ORACLES = {"tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin, "acos": np.arccos,
           "atan": np.arctan, "ceil": np.ceil, "trunc": np.trunc, "log1p": np.log1p, "expm1": np.expm1,
           "log2": np.log2, "log10": np.log10, "lgamma": np.vectorize(_lgamma, otypes=[float]),
           "erf": np.vectorize(math.erf, otypes=[float]), "erfc": np.vectorize(math.erfc, otypes=[float]),
           "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign, "isnan": np.isnan,
           "isinf": np.isinf, "isfinite": np.isfinite}
EXACT = {"ceil", "trunc", "copysign"}  # also the sign of a zero

EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, -2.5, 3.7, 1e-10, -1e-10, 1e-300, 5e-324, 10.0, -10.0,
         88.5, 89.5, 700.0, 710.0, -710.0, 1e10, -1e10, 1e38, 1e300, -1e300, math.inf, -math.inf, math.nan]
TOLERANCE = {np.float64: dict(rtol=1e-13, atol=1e-300), np.float32: dict(rtol=4e-6, atol=1e-37)}


def inputs(dtype, rng) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(EDGES), rng.uniform(-6, 6, 60), rng.uniform(-1, 1, 20),
                               10.0 ** rng.uniform(-20, 20, 20)]).astype(dtype)


def oracle(name: str, *args: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name in ("lgamma", "erf", "erfc") and args[0].dtype == np.float32:
            return ORACLES[name](args[0].astype(np.float64)).astype(np.float32)
        return ORACLES[name](*args)


def assert_agree(name: str, got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want, err_msg=f"{name}: {what}")
        return
    if name in EXACT:
        np.testing.assert_array_equal(got, want, err_msg=f"{name}: {what}")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{name}: {what}, sign")
        return
    close = np.isclose(got, want, equal_nan=True, **TOLERANCE[want.dtype.type])
    bad = np.flatnonzero(~close)
    assert bad.size == 0, f"{name}: {what}: {got[bad][:5]} != {want[bad][:5]}"


def interpreters(kernel: fs.Kernel, *args):
    """The core interpreter's and the DPS interpreter's results."""
    program = kernel.program()
    anf = anf_program(program)
    dps = simplify_allocs(dps_program(anf, shape_program(anf)))
    return (np.asarray(core.run_kernel(program, kernel.name, list(args))),
            run_dps(dps, kernel.name, list(args)).result)


DTYPES = [pytest.param(np.float64, id="Double"), pytest.param(np.float32, id="Float")]


# ----------------------------------------------------------------------------- functions

@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_functions_agree_with_the_oracle(dtype, rng):
    kernel = unary_table_double if dtype == np.float64 else unary_table_float
    v = inputs(dtype, rng)
    got = kernel(v)
    assert got.dtype == dtype and got.shape == (len(UNARY), len(v))
    reference = np.asarray(kernel.reference(v), dtype=dtype)
    for k, name in enumerate(UNARY):
        want = oracle(name, v)
        assert want.dtype == dtype
        assert_agree(name, got[k], want, "compiled C vs oracle")
        assert_agree(name, reference[k], want, "reference vs oracle")


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_functions_in_the_interpreters(dtype, rng):
    kernel = unary_table_double if dtype == np.float64 else unary_table_float
    v = inputs(dtype, rng)[::3]
    for result in interpreters(kernel, v):
        result = np.asarray(result, dtype=dtype)
        for k, name in enumerate(UNARY):
            assert_agree(name, result[k], oracle(name, v), "interpreter vs oracle")


@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_functions_agree_with_the_oracle(dtype, rng):
    kernel = binary_table_double if dtype == np.float64 else binary_table_float
    edges = np.array(EDGES, dtype=np.float64)
    with np.errstate(over="ignore"):
        x = np.concatenate([np.repeat(edges, len(edges)), rng.uniform(-5, 5, 50)]).astype(dtype)
        y = np.concatenate([np.tile(edges, len(edges)), rng.uniform(-5, 5, 50)]).astype(dtype)
    got = kernel(x, y)
    reference = np.asarray(kernel.reference(x, y), dtype=dtype)
    interpreted = [np.asarray(r, dtype=dtype) for r in interpreters(kernel, x[::7], y[::7])]
    for k, name in enumerate(BINARY):
        want = oracle(name, x, y)
        assert want.dtype == dtype
        assert_agree(name, got[k], want, "compiled C vs oracle")
        assert_agree(name, reference[k], want, "reference vs oracle")
        for result in interpreted:
            assert_agree(name, result[k], want[::7], "interpreter vs oracle")


@pytest.mark.parametrize("dtype", DTYPES)
def test_classification_functions_give_bools(dtype, rng):
    kernel = classify_double if dtype == np.float64 else classify_float
    v = inputs(dtype, rng)
    got = kernel(v)
    assert got.dtype == np.bool_
    reference = np.asarray(kernel.reference(v))
    for k, name in enumerate(TESTS):
        want = oracle(name, v)
        assert_agree(name, got[k], want, "compiled C vs oracle")
        assert_agree(name, reference[k], want, "reference vs oracle")
        for result in interpreters(kernel, v):
            assert_agree(name, np.asarray(result)[k], want, "interpreter vs oracle")
    assert fs.isnan(math.nan) is True and fs.isinf(np.float32(np.inf)) is True and fs.isfinite(1) is True


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_arrays(dtype):
    empty = np.empty(0, dtype=dtype)
    suffix = "double" if dtype == np.float64 else "float"
    unary = globals()[f"unary_table_{suffix}"](empty)
    assert unary.shape == (len(UNARY), 0) and unary.dtype == dtype
    assert globals()[f"binary_table_{suffix}"](empty, empty).shape == (len(BINARY), 0)
    assert globals()[f"classify_{suffix}"](empty).shape == (len(TESTS), 0)
    converted = (to_int if dtype == np.float64 else to_int_float)(empty)
    assert converted.shape == (0,) and converted.dtype == np.int64


def test_reference_gives_c_values_where_math_raises():
    assert math.isnan(fs.acos(2.0)) and math.isnan(fs.asin(-2)) and fs.log1p(-1.0) == -math.inf
    assert fs.lgamma(0.0) == math.inf and fs.lgamma(-3.0) == math.inf and fs.lgamma(1e308) == math.inf
    assert fs.log2(0.0) == -math.inf and math.isnan(fs.log10(-1.0)) and fs.sinh(1000.0) == math.inf
    assert fs.expm1(1000.0) == math.inf and fs.cosh(-1000.0) == math.inf
    assert fs.ceil(2.5) == 3.0 and isinstance(fs.ceil(2.5), float) and isinstance(fs.trunc(-2.5), float)
    assert math.copysign(1.0, fs.trunc(-0.5)) == -1.0
    # A Float argument gives a value rounded to float32, as the compiled Float function does.
    assert fs.tanh(np.float32(0.3)) == float(np.float32(np.tanh(np.float32(0.3))))
    assert fs.lgamma(np.float32(0.3)) == float(np.float32(math.lgamma(float(np.float32(0.3)))))
    with pytest.raises(ValueError):
        math.acos(2.0)  # math.NAME stays Python's own function in a reference run


@fs.kernel
def basic_functions(x: Double, y: Double) -> tuple[Double, Double, Double, Double, Double, Double, Double, Double]:
    return fs.sqrt(x), fs.exp(x), fs.log(x), fs.sin(x), fs.cos(x), fs.tan(x), fs.floor(x), fs.pow(x, y)


@pytest.mark.parametrize("x, y", [(-1.0, 0.5), (0.0, -1.0), (-0.0, -3.0), (1000.0, 2.0), (math.inf, -1.0),
                                  (-math.inf, 2.0), (math.nan, 0.0), (2.25, 1e308), (-8.0, 1.0 / 3.0)])
def test_basic_functions_are_ieee_in_the_reference_as_in_c(x, y):
    """sqrt(-1), log(0), exp overflow, pow(0, -1): NaN or ±inf in both, where math raises."""
    compiled, reference = basic_functions(x, y), basic_functions.reference(x, y)
    with np.errstate(all="ignore"):
        oracle = (np.sqrt(x), np.exp(x), np.log(x), np.sin(x), np.cos(x), np.tan(x), np.floor(x), np.power(x, y))
    for c, r, o in zip(compiled, reference, oracle):
        assert isinstance(r, float)
        np.testing.assert_allclose([c, r], [o, o], rtol=1e-15, atol=0)


def test_pow_follows_c_where_numpy_differs():
    # C99 Annex F: pow(-inf, y) is +inf for y > 0 not an odd integer; numpy's power gives NaN
    assert basic_functions(-math.inf, 0.5)[7] == basic_functions.reference(-math.inf, 0.5)[7] == math.inf


def test_math_spellings_compile_like_fs_spellings():
    for x, y in ((0.25, 3.0), (-0.75, 0.5), (0.0, 2.5)):
        assert math_spellings(x, y) == fsmooth_spellings(x, y)
        assert math.isclose(fsmooth_spellings(x, y), fsmooth_spellings.reference(x, y), rel_tol=1e-13)
    assert math.isnan(math_spellings(2.0, 1.0))  # acos(2): nan, as fs.acos(2.0) in the reference
    assert math.isnan(fsmooth_spellings.reference(2.0, 1.0))


def test_integer_and_mixed_arguments_promote():
    assert math.isclose(promoted(3, 4, np.float32(-1.5)), promoted.reference(3, 4, np.float32(-1.5)), rel_tol=1e-6)
    program = promoted.program().kernels["promoted"]
    assert program.result == Double
    value = float_stays_float(np.float32(0.75))
    assert isinstance(value, float) and value == float(np.float32(value))  # a float32 result
    assert math.isclose(value, float_stays_float.reference(np.float32(0.75)), rel_tol=1e-6)
    assert "fs_atan2_f32" in float_stays_float.c_source() and "fs_hypot_f32" in float_stays_float.c_source()
    assert "fs_lgamma_f32" in float_stays_float.c_source()


# ----------------------------------------------------------------------------- conversions

def test_int_truncates_toward_zero():
    v = np.array([2.7, -2.7, 0.0, -0.0, 0.5, -0.99, 1e18, -9223372036854775808.0, 9223372036854774784.0])
    want = np.array([int(x) for x in v])
    np.testing.assert_array_equal(to_int(v), want)
    np.testing.assert_array_equal(np.asarray(to_int.reference(v)), want)
    for result in interpreters(to_int, v):
        np.testing.assert_array_equal(result, want)
    f = np.array([2.7, -2.7, 16777216.0, -3e18, -9223372036854775808.0], dtype=np.float32)
    np.testing.assert_array_equal(to_int_float(f), [int(x) for x in f])
    assert to_int_scalar(-1.3) == -1 and to_int_scalar(1.3) == 3


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e300, -1e300, 9223372036854775808.0, -9.3e18])
def test_int_of_a_float_outside_int64_is_a_value_error(bad):
    v = np.array([1.0, bad, 2.0])
    with pytest.raises(ValueError, match="to_int: integer conversion out of range"):
        to_int(v)
    with np.errstate(over="ignore"):
        f = np.array([1.0, bad], dtype=np.float32)
    with pytest.raises(ValueError, match="integer conversion out of range"):
        to_int_float(f)
    with pytest.raises(ValueError):
        to_int_scalar(bad)
    for run in (lambda: core.run_kernel(to_int.program(), "to_int", [v]), lambda: interpreters(to_int, v)):
        with pytest.raises(ValueError):
            run()
    if math.isnan(bad) or math.isinf(bad):
        with pytest.raises((ValueError, OverflowError)):  # Python's int(): ValueError, OverflowError
            to_int.reference(v)


def test_int_conversion_error_in_a_parallel_loop():
    parallel = to_int.with_options(parallel=True)
    v = np.linspace(-1000.5, 1000.5, 4001)
    np.testing.assert_array_equal(parallel(v), np.trunc(v).astype(np.int64))
    v[2777] = math.nan
    with pytest.raises(ValueError, match="integer conversion out of range"):
        parallel(v)


def test_int_in_an_index_checks_the_conversion_first():
    w = np.arange(5.0)
    np.testing.assert_array_equal(int_in_an_index(np.array([0.0, 3.9, 9.9]), w), [0.0, 1.0, 4.0])
    with pytest.raises(ValueError, match="integer conversion"):
        int_in_an_index(np.array([math.nan]), w)
    with pytest.raises(IndexError):
        int_in_an_index(np.array([10.0]), w)
    with pytest.raises(IndexError):
        int_in_an_index(np.array([-2.5]), w)  # int(-1.25) = -1


def test_int_and_float_of_integers_and_bools():
    for i, n, b in ((3, 4, True), (-7, 0, False), (0, 9, True)):
        assert int_of_integers(i, n, b) == int_of_integers.reference(i, n, b)
    assert int_of_integers(-7, 0, False) == -700 + 1000
    args = (-3, 5, True, np.float32(0.25), 1.5)
    assert to_float(*args) == to_float.reference(*args) == -30000.0 + 5000.0 + 100.0 + 0.25 + 1.5 + 3.0 + 1.0
    assert to_float(2, 0, False, np.float32(0.0), 0.0) == 20004.0


def test_status_code_5_is_documented_everywhere():
    assert STATUS[5] == "integer conversion out of range"
    source = to_int.c_source()
    assert "fs_int_fits_f64(" in source and "5 integer conversion out of range" in source
    assert "#define FS_STATUS_INTEGER_CONVERSION 5" in (ROOT / "clib" / "fsmooth_rt.h").read_text()
    from fsmooth.embed import library
    from fsmooth.options import Options

    lib = library("conv", [to_int], Options(), "conv.py")
    assert re.search(r"#define CONV_STATUS_INTEGER_CONVERSION_OUT_OF_RANGE +5\b", lib.header)
    assert 'case 5: return "integer conversion out of range";' in lib.source
    assert lib.manifest["status_codes"]["5"] == "integer conversion out of range"


def test_generated_c_is_warning_and_ub_free(tmp_path):
    """The C of the conversion and math kernels with -Wall -Wextra -Werror under UBSan, whose
    float-cast-overflow check would abort on a float → int64 cast out of range."""
    kernels = [to_int, to_int_float, unary_table_double, unary_table_float, binary_table_float, classify_float]
    for kern in kernels:
        artifact = compile_to_c(kern.program())
        src = tmp_path / f"{kern.name}.c"
        src.write_text(artifact.source)
        lib = tmp_path / f"lib{kern.name}.so"
        subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-shared", "-fPIC",
                        "-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all",
                        f"-I{ROOT / 'clib'}", str(src), "-o", str(lib), "-lm"],
                       check=True, capture_output=True, text=True)
        if kern not in (to_int, to_int_float):
            continue
        ffi = cffi.FFI()
        ffi.cdef(artifact.cdef)
        c = ffi.dlopen(str(lib))
        ctype = "double" if kern is to_int else "float"
        with np.errstate(over="ignore"):
            values = np.array([1.5, -2.5, math.nan, math.inf, -math.inf, 1e300, 9.3e18, -9.3e18, 9.2e18],
                              dtype=np.float64 if kern is to_int else np.float32)
        for x in values:
            arg = np.array([x], dtype=values.dtype)
            out = np.zeros(1, dtype=np.int64)
            status = getattr(c, artifact.interfaces[kern.name].symbol)(
                ffi.NULL, ffi.cast("int64_t *", ffi.from_buffer(out)), ffi.cast(f"{ctype} *", ffi.from_buffer(arg)), 1)
            fits = math.isfinite(x) and -2.0**63 <= x < 2.0**63
            assert status == (0 if fits else 5), (kern.name, x, status)
            if fits:
                assert out[0] == int(x)


# ----------------------------------------------------------------------------- OpenCL

@fs.kernel
def many_functions(v: Array[Double], w: Array[Double]) -> Array[Double]:
    return build(length(v), lambda i: fs.tanh(v[i]) + fs.sinh(v[i]) * 0.5 + fs.cosh(w[i])
                 + fs.asin(v[i] * 0.1) + fs.acos(w[i] * 0.1) + fs.atan(v[i]) + fs.atan2(v[i], w[i])
                 + fs.ceil(v[i]) + fs.trunc(w[i]) + fs.hypot(v[i], w[i]) + fs.log1p(fs.abs(v[i]))
                 + fs.expm1(w[i] * 0.25) + fs.log2(fs.abs(w[i]) + 1.0) + fs.log10(fs.abs(v[i]) + 1.0)
                 + fs.lgamma(fs.abs(v[i]) + 0.5) + fs.erf(v[i]) + fs.erfc(w[i]) + fs.copysign(1.0, v[i])
                 + (1.0 if fs.isnan(v[i]) else 0.0) + (2.0 if fs.isinf(w[i]) else 0.0)
                 + (4.0 if fs.isfinite(fs.expm1(v[i] * 100.0)) else 0.0)
                 + (float(int(w[i] * 3.0)) if fs.isfinite(w[i]) else 0.5))


@fs.kernel
def f32(x: Float) -> Float:
    return x


@fs.kernel
def many_functions_vectorised(v: Array[Float], w: Array[Float]) -> Array[Float]:
    return fs.vectorize(4, fs.build_global(length(v), lambda i: fs.tanh(v[i]) + fs.atan2(v[i], w[i])
                                            + fs.hypot(v[i], w[i]) + fs.erf(w[i]) + fs.lgamma(fs.abs(v[i]) + 0.5)
                                            + fs.copysign(fs.expm1(w[i]), v[i]) + fs.trunc(v[i] * 3.0)
                                            + fs.log1p(fs.abs(w[i])) + fs.ceil(w[i])))


@fs.kernel
def classified_vectorised(v: Array[Float], w: Array[Float]) -> Array[Float]:
    """isnan and isinf give Bools (OpenCL's vector forms give ints): this body runs lane by lane."""
    return fs.vectorize(4, fs.build_global(length(v), lambda i: fs.tanh(v[i])
                                            + (f32(1.0) if fs.isnan(v[i]) or fs.isinf(w[i]) else f32(0.0))))


@fs.kernel
def int_on_the_device(v: Array[Float]) -> Array[Index]:
    return fs.build_global(length(v), lambda i: int(v[i]) + 1)


@pytest.fixture(scope="module")
def context(opencl_context):
    return opencl_context


def test_many_functions_through_opencl(context, rng):
    n = 37
    v, w = rng.uniform(-4, 4, n), rng.uniform(-4, 4, n)
    v[:4] = [0.0, -1.0, math.nan, 2e10]
    w[:4] = [0.5, math.inf, 1.0, -0.0]
    want = many_functions(v, w)
    np.testing.assert_allclose(many_functions.reference(v, w), want, rtol=1e-12, equal_nan=True)
    if context.devices[0].double_fp_config:
        np.testing.assert_allclose(many_functions.opencl(v, w, context=context), want, rtol=1e-12, equal_nan=True)
    vf, wf = v.astype(np.float32), w.astype(np.float32)
    source = many_functions_vectorised.opencl_artifact().source
    assert "float4" in source and "atan2(" in source and "lgamma(" in source  # vector forms of the built-ins
    got = many_functions_vectorised.opencl(vf, wf, context=context)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, many_functions_vectorised(vf, wf), rtol=2e-5, atol=1e-5, equal_nan=True)
    np.testing.assert_allclose(got, many_functions_vectorised.reference(vf, wf), rtol=2e-5, atol=1e-5,
                               equal_nan=True)
    assert many_functions_vectorised.opencl(vf[:0], wf[:0], context=context).shape == (0,)
    source = classified_vectorised.opencl_artifact().source
    assert "fs_isnan_f32(" in source and ".s3" in source  # lane by lane
    got = classified_vectorised.opencl(vf, wf, context=context)
    np.testing.assert_allclose(got, classified_vectorised(vf, wf), rtol=2e-6, equal_nan=True)
    np.testing.assert_allclose(got, classified_vectorised.reference(vf, wf), rtol=2e-6, equal_nan=True)


def test_int_through_opencl(context):
    v = np.array([2.7, -2.7, 0.0, 1e18], dtype=np.float32)
    np.testing.assert_array_equal(int_on_the_device.opencl(v, context=context), [int(x) + 1 for x in v])
    for bad in (math.nan, math.inf, 1e30):
        with pytest.raises(ValueError, match="int_on_the_device: integer conversion out of range"):
            int_on_the_device.opencl(np.array([1.0, bad, 2.0], dtype=np.float32), context=context)
