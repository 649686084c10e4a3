"""Foreign functions (``fsmooth.foreign``, README "Foreign functions"): C functions called from
kernels inside build and ifold, compared with the reference and numpy at sizes 0, 1 and large;
the optimiser's licm, cse, dce and fusion counted in calls of a C function that counts them (a
header and a shared library built here with gcc); the same kernels through OpenCL under Oclgrind;
the located CompileErrors; the names generated code keeps free; ``fsmooth compile``'s listing;
the embedded C clean under AddressSanitizer and UBSan."""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import numpy as np
import pytest

import fsmooth as fs
import foreign_kernels as fk
from fsmooth import Array, Double, Index, build, ifold, length
from fsmooth.cache import c_compiler
from fsmooth.core import show_program
from fsmooth.driver import compile_to_c, run_pipeline
from fsmooth.embed import library
from fsmooth.options import Options
from opencl_oclgrind import run_under_oclgrind

SIZES = (0, 1, 100_003)


def test_scalar_foreign_function_in_build_and_ifold_equals_reference_and_numpy():
    rng = np.random.default_rng(1)
    for n in SIZES:
        rs = rng.uniform(0, 2, n)
        got = fk.distort_all(rs, 0.1, -0.02)
        assert got.shape == (n,)
        np.testing.assert_allclose(got, fk.np_distort(rs, 0.1, -0.02), rtol=1e-14, atol=0)
        np.testing.assert_allclose(got, fk.distort_all.reference(rs, 0.1, -0.02), rtol=1e-14, atol=0)
        energy = fk.distortion_energy(rs, 0.3)
        expected = float(np.sum((fk.np_distort(rs, 0.3, 0.25) - rs) ** 2))
        assert energy == pytest.approx(expected, rel=1e-12, abs=0)
        assert energy == pytest.approx(fk.distortion_energy.reference(rs, 0.3), rel=1e-12, abs=0)


def test_index_and_bool_foreign_function():
    rng = np.random.default_rng(2)
    for n in SIZES:
        xs, ys = rng.integers(-5, 70, n), rng.integers(-5, 50, n)
        got = fk.count_inside(xs, ys, 64, 48)
        assert got == fk.np_count_inside(xs, ys, 64, 48) == fk.count_inside.reference(xs, ys, 64, 48)
        assert (n == 0) == (got == 0)


def test_the_foreign_source_comes_after_the_generated_code_behind_a_static_prototype():
    """The source's macros and helpers (``square``, ``K3_UNUSED``) cannot reach the generated code."""
    source = fk.distort_all.c_source()
    prototype = source.index("static double distort(double r, double k1, double k2);")
    definition = source.index("double distort(double r, double k1, double k2) {")
    assert prototype < source.index("/* ---- distort_all */") < definition
    assert source.index("/* ---- foreign function distort */") < source.index("#define K3_UNUSED") < definition


def test_a_definition_whose_types_differ_from_the_annotations_does_not_compile():
    @fs.foreign(c_source="float halve(float x) { return x / 2; }")
    def halve(x: Double) -> Double:
        return x / 2

    @fs.kernel
    def halves(v: Array[Double]) -> Array[Double]:
        return build(length(v), lambda i: halve(v[i]))

    with pytest.raises(RuntimeError, match="conflicting types for .halve"):
        halves(np.ones(3))


# ----------------------------------------------------------------------------- a header and a library

COUNTED_HEADER = """#include <stdint.h>
extern int64_t poly_calls;
double poly(double x);
"""
COUNTED_SOURCE = """#include "counted.h"
int64_t poly_calls = 0;
double poly(double x) { poly_calls++; return 1.0 + x * (0.5 + x * 0.25); }
"""


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """``poly``, from counted.h and libcounted.so (built here with gcc), and its call counter."""
    folder = tmp_path_factory.mktemp("counted")
    (folder / "counted.h").write_text(COUNTED_HEADER)
    (folder / "counted.c").write_text(COUNTED_SOURCE)
    subprocess.run([*c_compiler(), "-shared", "-fPIC", "-O2", f"-I{folder}", str(folder / "counted.c"), "-o",
                    str(folder / "libcounted.so")], check=True, capture_output=True, text=True)

    @fs.foreign(c_header=str(folder / "counted.h"), libraries=[str(folder / "libcounted.so")])
    def poly(x: Double) -> Double:
        return 1.0 + x * (0.5 + x * 0.25)

    calls = ctypes.c_int64.in_dll(ctypes.CDLL(str(folder / "libcounted.so")), "poly_calls")
    return poly, calls, folder


def _count(calls, run):
    calls.value = 0
    result = run()
    return result, calls.value


def test_header_and_library_foreign_function_equals_numpy(counted):
    poly, calls, _ = counted

    @fs.kernel
    def poly_all(v: Array[Double]) -> Array[Double]:
        return build(length(v), lambda i: poly(v[i]))

    for n in SIZES:
        v = np.linspace(-3, 3, n)
        got, count = _count(calls, lambda: poly_all(v))
        np.testing.assert_allclose(got, 1.0 + v * (0.5 + v * 0.25), rtol=1e-15, atol=0)
        np.testing.assert_allclose(got, poly_all.reference(v), rtol=1e-15, atol=0)
        assert count == n  # one call per element, the library's own counter says


def test_licm_calls_a_loop_invariant_foreign_function_once(counted):
    poly, calls, _ = counted

    @fs.kernel
    def shifted(a: Array[Double], x: Double) -> Array[Double]:
        return build(length(a), lambda i: a[i] + poly(x))

    a = np.arange(1000.0)
    expected = a + (1.0 + 2.0 * (0.5 + 2.0 * 0.25))
    got, count = _count(calls, lambda: shifted(a, 2.0))
    np.testing.assert_allclose(got, expected)
    assert count == 1
    got, count = _count(calls, lambda: shifted.with_options(licm=False)(a, 2.0))
    np.testing.assert_allclose(got, expected)
    assert count == 1000


def test_cse_shares_equal_foreign_calls_and_dce_drops_unused_ones(counted):
    poly, calls, _ = counted

    @fs.kernel
    def squared(a: Array[Double]) -> Array[Double]:
        return build(length(a), lambda i: poly(a[i]) * poly(a[i]))

    @fs.kernel
    def total(a: Array[Double], x: Double) -> Double:
        unused = poly(x)
        return ifold(lambda acc, i: acc + a[i], 0.0, length(a))

    a = np.linspace(0, 1, 500)
    expected = (1.0 + a * (0.5 + a * 0.25)) ** 2
    for options, calls_expected in (({}, 500), ({"cse": False}, 1000)):
        got, count = _count(calls, lambda: squared.with_options(**options)(a))
        np.testing.assert_allclose(got, expected, rtol=1e-15)
        assert count == calls_expected, options
    # dce drops the unused call from F̃; without dce, the β-reduction of scalar lets drops it later
    for options, left_by_optimise in (({}, False), ({"dce": False}, True)):
        got, count = _count(calls, lambda: total.with_options(**options)(a, 3.0))
        assert got == pytest.approx(a.sum())
        assert count == 0, options
        optimised = show_program(run_pipeline(total.program(), Options(**options)).anf)
        assert ("poly(x)" in optimised) == left_by_optimise, optimised


def test_fusion_does_not_copy_a_foreign_call_into_a_deeper_loop(counted):
    poly, calls, _ = counted

    @fs.kernel
    def outer_sums(a: Array[Double], b: Array[Double]) -> Array[Double]:
        w = build(length(a), lambda i: poly(a[i]))
        return build(length(b), lambda j: ifold(lambda acc, i: acc + w[i] * b[j], 0.0, length(a)))

    a, b = np.linspace(0, 1, 300), np.linspace(-1, 1, 200)
    got, count = _count(calls, lambda: outer_sums(a, b))
    np.testing.assert_allclose(got, np.sum(1.0 + a * (0.5 + a * 0.25)) * b, rtol=1e-12)
    assert count == 300  # each element once, not once per (i, j)


# ----------------------------------------------------------------------------- names

def test_generated_names_avoid_the_foreign_function_names():
    """A local of the kernel spelled like the foreign function's C name gets another C name, so it
    cannot shadow the function where the code calls it."""
    @fs.foreign(c_source="double scale_by_two(double x) { return 2.0 * x; }", c_name="scale_by_two")
    def twice(x: Double) -> Double:
        return 2.0 * x

    @fs.kernel
    def shadowing(v: Array[Double]) -> Array[Double]:
        return build(length(v), lambda scale_by_two: twice(v[scale_by_two]) + 1.0)

    source = shadowing.c_source()
    assert "scale_by_two_1" in source and "scale_by_two(v[scale_by_two_1])" in source
    for n in SIZES:
        v = np.arange(float(n))
        np.testing.assert_array_equal(shadowing(v), 2.0 * v + 1.0)


def test_a_kernel_exported_under_a_foreign_name_is_a_compile_error():
    @fs.foreign(c_source="double test_foreign_clash(double x) { return x; }", c_name="test_foreign_clash")
    def same(x: Double) -> Double:
        return x

    @fs.kernel
    def clash(x: Double) -> Double:
        return same(x)

    with pytest.raises(fs.CompileError, match="clashes with the C function test_foreign_clash"):
        compile_to_c(clash.program(), Options(), "test_foreign")


# ----------------------------------------------------------------------------- errors

def _error_at(kernel, line_fragment: str, message: str, run=None, filename: str = __file__):
    with pytest.raises(fs.CompileError) as info:
        (run or kernel.c_source)()
    err = info.value
    assert message in err.message
    assert err.filename == filename
    assert line_fragment in err.loc.source_line
    rendered = str(err)
    assert rendered.startswith(f"{filename}:{err.lineno}:{err.col_offset + 1}: error: ")
    assert f"\n    {' ' * err.col_offset}^" in rendered
    return err


def test_a_foreign_function_without_a_source_for_the_target_is_a_located_error():
    _error_at(fk.doubled_through_c, "c_only(v[i])", "foreign function c_only has no source for the opencl target",
              fk.doubled_through_c.opencl_artifact, fk.__file__)

    @fs.foreign(opencl_source="double gpu_only(double x) { return x; }")
    def gpu_only(x: Double) -> Double:
        return x

    @fs.kernel
    def needs_c(x: Double) -> Double:
        return gpu_only(x) + 1.0  # the call

    _error_at(needs_c, "gpu_only(x) + 1.0", "foreign function gpu_only has no source for the c target")


def test_two_foreign_functions_of_one_c_name_are_a_located_error():
    @fs.foreign(c_source="double twin(double x) { return x; }", c_name="twin")
    def first(x: Double) -> Double:
        return x

    @fs.foreign(c_source="double twin(double x) { return -x; }", c_name="twin")
    def second(x: Double) -> Double:
        return -x

    @fs.kernel
    def twins(x: Double) -> Double:
        return first(x) + second(x)

    _error_at(twins, "first(x) + second(x)", "two foreign functions, first and second, have the C name twin")


def test_misuse_is_a_located_compile_error():
    @fs.kernel
    def too_many(x: Double) -> Double:
        return fk.distort(x, 1.0)

    _error_at(too_many, "fk.distort(x, 1.0)", "distort takes 3 arguments, but 2 were given")

    @fs.kernel
    def wrong_type(v: Array[Double]) -> Double:
        return fk.distort(v, 1.0, 2.0)

    _error_at(wrong_type, "fk.distort(v, 1.0, 2.0)", "parameter r of distort must be a Double, not an Array<Double>")

    @fs.foreign(c_source="")
    def unannotated(x) -> Double:
        return x

    @fs.kernel
    def calls_unannotated(x: Double) -> Double:
        return unannotated(x)

    _error_at(calls_unannotated, "def unannotated(x)", "parameter x of foreign function unannotated has no type annotation")

    @fs.foreign(c_source="")
    def card_result(x: Index) -> fs.Card:
        return x

    @fs.kernel
    def calls_card_result(x: Index) -> Index:
        return card_result(x)

    _error_at(calls_card_result, "def card_result", "returns a Card: a foreign function returns a Double")

    @fs.foreign(c_source="")
    def fs_reserved(x: Double) -> Double:
        return x

    @fs.kernel
    def calls_reserved(x: Double) -> Double:
        return fs_reserved(x)

    _error_at(calls_reserved, "def fs_reserved", "its C name fs_reserved is reserved")


# ----------------------------------------------------------------------------- OpenCL

def test_foreign_functions_through_opencl_under_oclgrind():
    ok, report = run_under_oclgrind("""
        import numpy as np
        import foreign_kernels as fk
        rng = np.random.default_rng(4)
        for n in (0, 1, 5000):
            rs = rng.uniform(0, 2, n)
            got = fk.distort_all.opencl(rs, 0.1, -0.02)
            assert got.shape == (n,)
            np.testing.assert_allclose(got, fk.np_distort(rs, 0.1, -0.02), rtol=1e-14, atol=0)
            np.testing.assert_allclose(got, fk.distort_all.reference(rs, 0.1, -0.02), rtol=1e-14, atol=0)
            energy = fk.distortion_energy.opencl(rs, 0.3)
            assert np.isclose(energy, np.sum((fk.np_distort(rs, 0.3, 0.25) - rs) ** 2), rtol=1e-12, atol=0)
            xs, ys = rng.integers(-5, 70, n), rng.integers(-5, 50, n)
            assert fk.count_inside.opencl(xs, ys, 64, 48) == fk.np_count_inside(xs, ys, 64, 48)
        source = fk.distort_all.opencl_artifact().source
        assert source.index("double distort(double r, double k1, double k2);") < source.index("__kernel")
        assert source.index("__kernel") < source.index("double distort(double r, double k1, double k2) {")
    """, timeout=600)
    assert ok, report


# ----------------------------------------------------------------------------- fsmooth compile

def test_compile_lists_the_foreign_functions_in_header_and_manifest(counted):
    poly, _, folder = counted

    @fs.kernel
    def poly_sum(v: Array[Double]) -> Double:
        return ifold(lambda acc, i: acc + poly(v[i]) + fk.distort(v[i], 0.5, 0.0), 0.0, length(v))

    lib = library("counting", [poly_sum], Options(), "counting.py")
    assert "---- Foreign functions: the kernels call them, assumed pure" in lib.header
    assert "double poly(double x);" in lib.header
    assert f'#include "counted.h" ({folder / "counted.h"}); link -l:libcounted.so' in lib.header
    assert "static double distort(double r, double k1, double k2);" in lib.header
    assert "its C source is in counting.c" in lib.header
    assert lib.manifest["foreign"] == [
        {"name": "poly", "prototype": "double poly(double x);", "source": "linked",
         "header": str(folder / "counted.h"), "libraries": ["-l:libcounted.so"]},
        {"name": "distort", "prototype": "static double distort(double r, double k1, double k2);",
         "source": "embedded", "header": None, "libraries": []}]
    assert "-l:libcounted.so" in lib.manifest["build"]["libs"]
    assert f"-I{folder}" in lib.manifest["build"]["cflags"]


def test_embedded_foreign_calls_are_clean_under_address_and_undefined_sanitizers(counted, tmp_path):
    """The library of ``fsmooth compile`` with a foreign header, library and source, built with the
    manifest's flags, -Wall -Wextra -Werror and -fsanitize=address,undefined, run on sizes 0, 1
    and large and compared with numpy."""
    poly, _, folder = counted

    @fs.kernel
    def mixed(v: Array[Double]) -> Array[Double]:
        return build(length(v), lambda i: poly(v[i]) + fk.distort(v[i], 0.5, 0.25))

    lib = library("mixed", [mixed], Options(), "mixed.py")
    lib.write(tmp_path)
    (tmp_path / "main.c").write_text("""
#include <stdio.h>
#include <stdlib.h>
#include "mixed.h"
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int64_t n = atoll(argv[1]);
    double *v = malloc(sizeof(double) * (size_t)(n + 1)), *out = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) v[i] = -1.0 + 2.0 * (double)i / (double)(n > 1 ? n - 1 : 1);
    void *scratch = malloc((size_t)mixed_mixed_scratch_bytes(n) + 1);
    int status = mixed_mixed(scratch, out, v, n);
    for (int64_t i = 0; i < n; i++) printf("%.17g\\n", out[i]);
    free(v); free(out); free(scratch);
    return status;
}
""")
    build_flags = lib.manifest["build"]
    program = tmp_path / "main"
    subprocess.run([*c_compiler(), *build_flags["cflags"], "-Wall", "-Wextra", "-Werror", "-O1", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{tmp_path}",
                    str(tmp_path / "main.c"), str(tmp_path / "mixed.c"), "-o", str(program), *build_flags["libs"]],
                   check=True, capture_output=True, text=True)
    for n in SIZES:
        done = subprocess.run([str(program), str(n)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        got = np.array([float(line) for line in done.stdout.split()])
        v = -1.0 + 2.0 * np.arange(n) / (n - 1 if n > 1 else 1)
        np.testing.assert_allclose(got, 1.0 + v * (0.5 + v * 0.25) + fk.np_distort(v, 0.5, 0.25), rtol=1e-14)
        np.testing.assert_allclose(got, mixed.reference(v), rtol=1e-14)
