"""Foreign functions (``fsmooth.foreign``, README "Foreign functions"): C functions with scalar and
array results (a destination of the shape function's dims) called from kernels inside build and
ifold, compared with the reference and numpy at sizes 0, 1 and large;
the optimiser's licm, cse, dce and fusion counted in calls of a C function that counts them (a
header and a shared library built here with gcc); the same kernels through OpenCL under Oclgrind;
the located CompileErrors; the names generated code keeps free; ``fsmooth compile``'s listing;
the embedded C clean under AddressSanitizer and UBSan."""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

import fsmooth as fs
import foreign_kernels as fk
from fsmooth import Array, Double, Index, build, ifold, length
from fsmooth.cache import c_compiler
from fsmooth.core import show_program
from fsmooth.driver import compile_to_c, run_pipeline
from fsmooth.dps.ir import ALIGN
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
void poly_each(double *out, const double *x, int64_t x_d0);
"""
COUNTED_SOURCE = """#include "counted.h"
int64_t poly_calls = 0;
double poly(double x) { poly_calls++; return 1.0 + x * (0.5 + x * 0.25); }
void poly_each(double *out, const double *x, int64_t x_d0) {
    poly_calls++;
    for (int64_t i = 0; i < x_d0; i++) out[i] = 1.0 + x[i] * (0.5 + x[i] * 0.25);
}
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


@pytest.fixture(scope="module")
def counted_each(counted):
    """``poly_each``: ``poly`` of every element, one counted call, from the same header and library."""
    _, calls, folder = counted

    @fs.foreign(c_header=str(folder / "counted.h"), libraries=[str(folder / "libcounted.so")],
                shape=lambda x: length(x))
    def poly_each(x: Array[Double]) -> Array[Double]:
        return 1.0 + x * (0.5 + x * 0.25)

    return poly_each, calls


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
        for n in (1, 5000, 0):  # the launcher's buffers grow, then are reused
            rs = rng.uniform(0, 2, n)
            got = fk.distort_all.opencl(rs, 0.1, -0.02)
            assert got.shape == (n,)
            np.testing.assert_allclose(got, fk.np_distort(rs, 0.1, -0.02), rtol=1e-14, atol=0)
            np.testing.assert_allclose(got, fk.distort_all.reference(rs, 0.1, -0.02), rtol=1e-14, atol=0)
            energy = fk.distortion_energy.opencl(rs, 0.3)
            assert np.isclose(energy, np.sum((fk.np_distort(rs, 0.3, 0.25) - rs) ** 2), rtol=1e-12, atol=0)
            xs, ys = rng.integers(-5, 70, n), rng.integers(-5, 50, n)
            assert fk.count_inside.opencl(xs, ys, 64, 48) == fk.np_count_inside(xs, ys, 64, 48)
        k = rng.uniform(-1, 1, 5)
        for n in (5, 300, 6):  # a hoisted global buffer written in one loop, read in the next
            x = rng.uniform(-1, 1, n)
            expected = float(np.sum(np.correlate(x, k, mode="valid") ** 2))
            assert np.isclose(fk.smoothed_energy.opencl(x, k), expected, rtol=1e-12, atol=0)
        source = fk.distort_all.opencl_artifact().source
        assert source.index("double distort(double r, double k1, double k2);") < source.index("__kernel")
        assert source.index("__kernel") < source.index("double distort(double r, double k1, double k2) {")
        # array results: each work-item calls convolve on its row, writing it in global memory
        k = rng.uniform(-1, 1, 5)
        for rows, cols in ((0, 7), (1, 5), (1, 9), (64, 200)):
            image = rng.uniform(size=(rows, cols))
            got = fk.convolve_rows.opencl(image, k)
            np.testing.assert_allclose(got, fk.np_convolve_rows(image, k), rtol=1e-13, atol=1e-13)
        source = fk.convolve_rows.opencl_artifact().source
        assert "void convolve(__global double *out, __global const double *x, int64_t x_d0, __global const double *k, int64_t k_d0);" in source
        assert "get_global_id(0)" in source.split("__kernel")[1].split("convolve(")[0]
    """, timeout=600)
    assert ok, report


def test_a_foreign_array_result_in_a_sequential_opencl_kernel(opencl_context):
    """``convolve`` into a hoisted global buffer, then a fold over it, in one work-item (under
    Oclgrind too: test_foreign_functions_through_opencl_under_oclgrind)."""
    rng = np.random.default_rng(10)
    k = rng.uniform(-1, 1, 5)
    for n in (5, 6, 3000):
        x = rng.uniform(-1, 1, n)
        expected = float(np.sum(np.correlate(x, k, mode="valid") ** 2))
        assert fk.smoothed_energy.opencl(x, k, context=opencl_context) == pytest.approx(expected, rel=1e-12)
        assert fk.smoothed_energy.reference(x, k) == pytest.approx(expected, rel=1e-12)
    # the foreign call on one work-item; the fold over its result a two-phase reduction
    # (fsmooth.auto_reductions), one launch, scalar code: its index arithmetic is checked (dpia.vectorize)
    artifact = fk.smoothed_energy.opencl_artifact()
    assert len(artifact.launches) == 2 and artifact.launches[0].global_size == (1,)
    assert "double4 " not in artifact.source.split("__kernel")[2].split("atomic_inc")[0]  # the reduction's first phase


def test_a_scalar_result_of_array_arguments_through_c_and_opencl(opencl_context, rng):
    """``norm2(image[r])``: the row passed as its address and length, the value returned."""
    for rows, cols in ((0, 3), (1, 0), (1, 1), (5, 7), (300, 33)):
        image = rng.uniform(-1, 1, (rows, cols))
        expected = np.sqrt(np.sum(image * image, axis=1))
        np.testing.assert_allclose(fk.row_norms(image), expected, rtol=1e-13)
        np.testing.assert_allclose(fk.row_norms.opencl(image, context=opencl_context), expected, rtol=1e-13)
        np.testing.assert_allclose(np.array(fk.row_norms.reference(image)).reshape(rows), expected, rtol=1e-13)


@fs.kernel
def convolve_row(image: Array[Array[Double]], r: Index, k: Array[Double]) -> Array[Double]:
    return fk.convolve(image[r], k)


def test_a_foreign_functions_checked_argument_is_checked_once_on_opencl(opencl_context):
    """``image[r]`` is resolved once for the call: one range test in the kernel, one record."""
    artifact = convolve_row.opencl_artifact()
    kernel_source = artifact.source.split("__kernel", 1)[1].split("/* ---- foreign function", 1)[0]
    assert kernel_source.count("(uint64_t)r < (uint64_t)image_d0") == 1
    assert [(c.index, c.length) for c in artifact.interface.range_checks] == [("r", "image_d0")]
    image, k = np.arange(12.0).reshape(3, 4), np.array([1.0, -1.0])
    np.testing.assert_array_equal(convolve_row.opencl(image, 2, k, context=opencl_context),
                                  np.correlate(image[2], k, mode="valid"))
    np.testing.assert_array_equal(convolve_row.reference(image, 2, k), np.correlate(image[2], k, mode="valid"))
    with pytest.raises(IndexError, match="index out of range"):
        convolve_row.opencl(image, 3, k, context=opencl_context)


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

    lib = library("mixed", [mixed, fk.smoothed_energy], Options(), "mixed.py")
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
    /* a foreign array result in a region of the scratch, sized by its shape function */
    const double k[3] = {0.25, 0.5, 0.25};
    double energy = -1.0;
    void *scratch2 = NULL;
    int status2 = 3;  /* K_scratch_bytes means something once K_check_sizes holds */
    if (mixed_smoothed_energy_check_sizes(n, 3) == 0) {
        scratch2 = malloc((size_t)mixed_smoothed_energy_scratch_bytes(n, 3) + 1);
        status2 = mixed_smoothed_energy(scratch2, &energy, v, n, k, 3);
    }
    fprintf(stderr, "%d %.17g\\n", status2, energy);
    free(v); free(out); free(scratch); free(scratch2);
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
        status, energy = done.stderr.split()
        if n >= 3:
            assert status == "0"
            assert float(energy) == pytest.approx(fk.smoothed_energy.reference(v, np.array([0.25, 0.5, 0.25])),
                                                  rel=1e-12)
        else:  # the result of convolve would have a negative size: status 3, nothing written
            assert (status, energy) == ("3", "-1")


# ----------------------------------------------------------------------------- array results

def test_array_foreign_function_writes_the_destination_the_compiled_code_gives():
    rng = np.random.default_rng(5)
    for n in SIZES:
        table, idx = rng.uniform(size=max(n // 7, 1)), rng.integers(-3, max(n // 7, 1) + 3, n)
        expected = table[np.clip(idx, 0, len(table) - 1)] + 0.5
        np.testing.assert_array_equal(fk.lookup_plus(table, idx, 0.5), expected)
        np.testing.assert_array_equal(fk.lookup_plus.reference(table, idx, 0.5), expected)
        # the foreign result is written in the kernel's result and the build over it (dps.in_place):
        # no scratch; without that, one region of n doubles for the foreign result: exact either way
        assert fk.lookup_plus.scratch_bytes(table, idx, 0.5) == 0
        separate = fk.lookup_plus.with_options(update_in_place=False)
        np.testing.assert_array_equal(separate(table, idx, 0.5), expected)
        assert separate.scratch_bytes(table, idx, 0.5) == -(-8 * n // ALIGN) * ALIGN


def test_array_foreign_function_inside_build_writes_each_row_in_place_and_inside_ifold():
    rng = np.random.default_rng(6)
    k = rng.uniform(-1, 1, 5)
    for rows, cols in ((0, 7), (1, 5), (1, 9), (300, 333)):
        image = rng.uniform(size=(rows, cols))
        got = fk.convolve_rows(image, k)
        np.testing.assert_allclose(got, fk.np_convolve_rows(image, k), rtol=1e-13, atol=1e-13)
        # (a reference build of no rows is a 1-D empty array)
        np.testing.assert_allclose(got, np.reshape(fk.convolve_rows.reference(image, k), got.shape), rtol=1e-13,
                                   atol=1e-13)
        assert fk.convolve_rows.scratch_bytes(image, k) == 0  # each call writes its row of the result
    for n in (5, 6, 100_003):
        x = rng.uniform(-1, 1, n)
        expected = float(np.sum(np.correlate(x, k, mode="valid") ** 2))
        assert fk.smoothed_energy(x, k) == pytest.approx(expected, rel=1e-12)
        assert fk.smoothed_energy.reference(x, k) == pytest.approx(expected, rel=1e-12)


def test_a_negative_foreign_result_size_is_a_value_error_compiled_and_in_the_reference():
    x, k = np.ones(2), np.ones(4)
    with pytest.raises(ValueError, match="the size of the result of foreign function convolve, .* must be ≥ 0"):
        fk.smoothed_energy(x, k)
    with pytest.raises(ValueError, match="its shape function gives"):
        fk.smoothed_energy.reference(x, k)


def test_a_two_dimensional_foreign_result():
    rng = np.random.default_rng(7)
    for m, n in ((0, 3), (1, 1), (400, 300)):
        a, b = rng.uniform(size=m), rng.uniform(size=n)
        np.testing.assert_allclose(fk.outer_trace(a, b), 2.0 * np.outer(a, b), rtol=1e-15)
        np.testing.assert_allclose(fk.outer_trace.reference(a, b), 2.0 * np.outer(a, b), rtol=1e-15)
        assert fk.outer_trace(a, b).shape == (m, n)


def test_the_interpreters_run_array_foreign_functions_by_their_python_body():
    from fsmooth import core
    from fsmooth.dps.interp import run_kernel
    from test_dps import stages

    rng = np.random.default_rng(8)
    image, k = rng.uniform(size=(4, 9)), rng.uniform(size=3)
    a, b = rng.uniform(size=3), rng.uniform(size=4)
    for kern, args in ((fk.convolve_rows, (image, k)), (fk.outer_trace, (a, b))):
        expected = kern.reference(*args)
        np.testing.assert_allclose(core.run_kernel(kern.program(), kern.name, list(args)), expected, rtol=1e-14)
        _, _, simplified = stages(kern)
        run = run_kernel(simplified, kern.name, list(args))
        np.testing.assert_allclose(run.result, expected, rtol=1e-14)
        assert run.high_water <= run.scratch


def test_array_foreign_misuse_is_a_located_compile_error():
    @fs.foreign(c_source="")
    def no_shape(a: Array[Double]) -> Array[Double]:
        return a

    @fs.kernel
    def calls_no_shape(a: Array[Double]) -> Array[Double]:
        return no_shape(a)

    _error_at(calls_no_shape, "def no_shape", "returns an Array<Double> but has no shape function")

    @fs.kernel
    def lookup_on_opencl(table: Array[Double], idx: Array[Index]) -> Array[Double]:
        return fk.lookup(table, idx)

    _error_at(lookup_on_opencl, "fk.lookup(table, idx)", "foreign function lookup has no source for the opencl target",
              lookup_on_opencl.opencl_artifact)

    @fs.kernel
    def local_rows(image: Array[Array[Double]], k: Array[Double]) -> Array[Array[Double]]:
        return fs.build_workgroup(length(image), lambda r: fk.convolve(
            fs.to_local(fs.build_local(length(image[r]), lambda j: image[r][j] * 2.0)), k))

    # located at the kernel's def: the back end finds it where no call's location is left
    _error_at(local_rows, "def local_rows", "on OpenCL, the arrays of a foreign function are in global memory, but "
              "an argument of convolve is not", local_rows.opencl_artifact)


def test_licm_and_cse_call_a_loop_invariant_array_foreign_function_once(counted_each):
    poly_each, calls = counted_each

    @fs.kernel
    def weighted(a: Array[Double], t: Array[Double]) -> Array[Double]:
        return build(length(a), lambda i: ifold(lambda acc, j: acc + poly_each(t)[j] * a[i] + poly_each(t)[j],
                                                0.0, length(t)))

    a, t = np.linspace(0, 1, 200), np.linspace(-1, 1, 30)
    p = 1.0 + t * (0.5 + t * 0.25)
    expected = np.array([np.sum(p * x + p) for x in a])
    got, count = _count(calls, lambda: weighted(a, t))
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    np.testing.assert_allclose(weighted.reference(a, t), expected, rtol=1e-13)
    assert count == 1  # cse shares the two calls, licm moves the one left out of both loops
    got, count = _count(calls, lambda: weighted.with_options(licm=False)(a, t))
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    assert count == 200 * 30
    got, count = _count(calls, lambda: weighted.with_options(licm=False, cse=False)(a, t))
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    assert count == 2 * 200 * 30


def test_array_foreign_calls_under_openmp_and_the_heap_variants():
    """A foreign call writes only its destination and uses no scratch, so a parallel build of
    them runs on OpenMP threads; the heap variants give its result a region of their own."""
    rng = np.random.default_rng(9)
    image, k = rng.uniform(size=(257, 40)), rng.uniform(size=4)
    parallel = fk.convolve_rows.with_options(parallel=True)
    assert "#pragma omp parallel for" in parallel.c_source()
    np.testing.assert_allclose(parallel(image, k), fk.np_convolve_rows(image, k), rtol=1e-13)
    x = rng.uniform(size=1000)
    expected = float(np.sum(np.correlate(x, k, mode="valid") ** 2))
    for variant in ("malloc", "leaky"):
        assert fk.smoothed_energy.variant(variant)(x, k) == pytest.approx(expected, rel=1e-12)


def test_the_prototype_names_parameters_as_c_allows():
    """Parameters spelled like a C keyword or like the destination get other names in the
    prototype; a result of the kernel is written straight into the kernel's own destination."""
    @fs.foreign(c_source="static void scaled(double *out, const double *p, int64_t n, double q) "
                         "{ for (int64_t i = 0; i < n; i++) out[i] = p[i] * q; }",
                shape=lambda out, double: length(out))
    def scaled(out: Array[Double], double: Double) -> Array[Double]:
        return out * double

    @fs.kernel
    def tripled(v: Array[Double]) -> Array[Double]:
        return scaled(v, 3.0)

    source = tripled.c_source()
    assert "static void scaled(double *out, const double *out_1, int64_t out_1_d0, double double_1);" in source
    assert "scaled(out, v, v_d0, 3.0);" in source
    for n in SIZES:
        v = np.arange(float(n))
        np.testing.assert_array_equal(tripled(v), 3.0 * v)
        np.testing.assert_array_equal(tripled.reference(v), 3.0 * v)
        assert tripled.scratch_bytes(v) == 0


def test_licm_keeps_a_foreign_result_whose_size_may_be_negative_in_a_loop_that_may_not_run():
    """Hoisted before a loop of no iteration, ``convolve(x, k)`` with x shorter than k would be a
    size error the reference never meets; sized by lengths alone it moves (the test above)."""
    @fs.kernel
    def first_response(a: Array[Double], x: Array[Double], k: Array[Double]) -> Array[Double]:
        m = length(x) - length(k) + 1  # cse makes the call's size this, computed before the loop
        return build(length(a), lambda i: a[i] * fk.convolve(x, k)[0] + float(m))

    x, k = np.ones(2), np.ones(4)
    np.testing.assert_array_equal(first_response(np.zeros(0), x, k), np.zeros(0))
    assert first_response.reference(np.zeros(0), x, k).size == 0
    with pytest.raises(ValueError, match="foreign function convolve"):
        first_response(np.ones(3), x, k)
    a = np.arange(5.0)
    np.testing.assert_allclose(first_response(a, np.arange(6.0), np.ones(4)), a * 6.0 + 3.0)
