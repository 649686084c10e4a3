"""A map of reductions whose row length is known only at the call, nested by the length
(``fsmooth.auto_reductions``, ``fsmooth.cost_model.rows_by_length``): where the cost model nests
short rows and long ones apart (a work-item per row, a work-group per row), both are compiled into
the one OpenCL program, and the host runs one of them for the call's sizes (``Launch.when``, the
row length below the model's crossover or not), from Python and from the C host code.  Compiled
for the GPU description (``cost_model.GENERIC_GPU``), run on Intel's CPU runtime and on Oclgrind;
the results against the reference and numpy at row lengths 0, 1, the threshold ± 1 and long."""
from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest
import sympy

import opencl_auto_kernels as auto
from corpus import ml, vision
from fsmooth.cli import main
from fsmooth.cost_model import GENERIC_GPU, Rows, choose_rows, rows_by_length
from opencl_oclgrind import run_under_oclgrind
from test_corpus import assert_close
from test_opencl_auto import _np_rows
from test_opencl_host import F64, WARNINGS, compile_opencl, needs_pip_opencl, run_on_oclgrind, PIP_OPENCL

ITEM, GROUP = "work-item per element", "work-group per element"

# the kernels whose nesting the row length decides on the GPU: kernel, numpy oracle, element type,
# the cost model's shape of the map (auto_reductions._rows: its symbolic counts, its row's builds)
MAPS = {
    "row_sums": (auto.row_sums, None, np.float64, Rows(None, (None,), None, 0, 8)),
    "row_logsumexp": (auto.row_logsumexp, None, np.float32, Rows(None, (None, None), None, 0, 4)),
    "gemv_auto": (auto.gemv_auto, None, np.float32, Rows(None, (None,), None, 0, 4, True, 1, 1)),
    "softmax_rows": (ml.softmax_rows, ml.np_softmax_rows, np.float64, Rows(None, (None, None), None, 2, 8)),
    "softmax_rows_f32": (vision.softmax_rows_f32, vision.np_softmax_rows_f32, np.float32,
                         Rows(None, (None, None), None, 2, 4)),
}


def _crossover(rows: Rows) -> int:
    """The least row length from which the model gives every row a work-group, found by trying
    each length up to 4,096 (where ``rows_by_length`` bisects up to ``SYMBOLIC_SIZE``)."""
    items = [n for n in range(1, 4097) if choose_rows(rows, GENERIC_GPU, 256, n).chosen.strategy != GROUP]
    return max(items) + 1


def _conditions(artifact) -> list:
    return [launch.when for launch in artifact.launches]


def _threshold(artifact) -> tuple[sympy.Symbol, int]:
    """(row length, T) of the artifact's short rows' condition ``n < T``."""
    (when,) = {w for w in _conditions(artifact) if isinstance(w, sympy.StrictLessThan)}
    return when.lhs, int(when.rhs)


def test_the_threshold_is_the_cost_models_crossover():
    """Below T a work-item per row is cheaper, from T on a work-group per row, for every length
    tried one by one; the artifact's condition is that T, and its two sets of launches run on
    complementary conditions (the group's, with its fallback for softmax, and the work-item's)."""
    thresholds = {}
    for name, (kernel, _, _, rows) in MAPS.items():
        split = rows_by_length(rows, GENERIC_GPU, 256)
        T = _crossover(rows)
        assert split.threshold == T, name
        assert choose_rows(rows, GENERIC_GPU, 256, T - 1).chosen.strategy == ITEM
        assert split.short.chosen.strategy == ITEM and split.long.chosen.strategy == GROUP
        artifact = kernel.opencl_artifact()
        n, threshold = _threshold(artifact)
        assert threshold == T, name
        for launch in artifact.launches:
            short = launch.kernel.startswith(f"{artifact.interface.symbol}_v1")
            assert launch.when == (n < T if short else n >= T), (name, launch)
        thresholds[name] = T
    # a double's lone read is 4 steps of a GPU lane, a float's 8: float rows pay back a group sooner
    assert thresholds["row_sums"] > thresholds["gemv_auto"] == thresholds["row_logsumexp"]
    # rows known when compiling are not split, nor are maps the model nests alike at every length
    assert rows_by_length(Rows(None, (3,), None, 0, 8), GENERIC_GPU, 256) is None
    assert all(launch.when is None for launch in auto.short_rows.opencl_artifact().launches)
    assert all(launch.when is None for launch in auto.sum_d.opencl_artifact().launches)


def _lengths(T: int) -> tuple[int, ...]:
    return (0, 1, T - 1, T, T + 1, 3 * T)


def _args(name: str, rows: int, cols: int, dtype, rng):
    m = rng.standard_normal((rows, cols)).astype(dtype)
    return (m, rng.standard_normal(cols).astype(np.float32)) if name == "gemv_auto" else (m,)


def _oracle(name: str, args):
    """numpy's result: the maps of reductions as test_opencl_auto computes them, softmax the corpus's."""
    softmax = MAPS[name][1]
    return softmax(args[0]) if softmax else _np_rows(name, args[0], args[-1])


@pytest.mark.parametrize("name", MAPS)
def test_the_launch_chooses_by_the_row_length(intel_cpu_context, name):
    """Compiled for the GPU, run on Intel's CPU runtime: rows shorter than T run the work-item per
    row's kernel, longer ones the group per row's (softmax's rows of 70,000 its fallback), one
    launch a call; the results are the reference's and numpy's at every length."""
    kernel, _, dtype, _ = MAPS[name]
    kernel = kernel.with_options(opencl_device=GENERIC_GPU)
    executable = kernel.opencl_executable(intel_cpu_context)
    symbol = executable.interface.symbol
    _, T = _threshold(executable.artifact)
    rng = np.random.default_rng(21)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    softmax = name.startswith("softmax")
    for rows in (0, 1, 5):
        for cols in _lengths(T) + ((70_000,) if softmax and rows == 1 else ()):
            if softmax and cols == 0:
                continue  # a row of 0 elements has no max (the reference reads m[i][0], numpy fails)
            args = _args(name, rows, cols, dtype, rng)
            got = executable(*args)
            assert_close(got, np.asarray(kernel.reference(*args)).reshape(np.shape(got)), **tol)
            assert_close(got, _oracle(name, args), **tol)
            ran = [launch.kernel for launch in executable.last_profile]
            if rows == 0:
                assert ran == [], ran  # no rows, no work-item: no launch
                continue
            expected = (f"{symbol}_v1_k" if cols < T else f"{symbol}_fallback_k" if cols == 70_000
                        else f"{symbol}_k")
            assert ran == [expected], (rows, cols, ran)


def test_both_variants_under_oclgrind_have_no_race_or_out_of_bounds():
    """The GPU's two kernels of row_sums and softmax, each at the threshold's two sides, under
    Oclgrind's checks: no race, no read out of bounds, no uninitialised read."""
    ok, report = run_under_oclgrind("""
        import numpy as np
        import sympy
        import opencl_auto_kernels as auto
        from corpus import ml
        from fsmooth.cost_model import GENERIC_GPU
        from test_corpus import assert_close
        rng = np.random.default_rng(4)
        for kernel, oracle in ((auto.row_sums, lambda m: m.sum(axis=1)), (ml.softmax_rows, ml.np_softmax_rows)):
            kernel = kernel.with_options(opencl_device=GENERIC_GPU)
            executable = kernel.opencl_executable()
            (T,) = {int(l.when.rhs) for l in executable.artifact.launches if isinstance(l.when, sympy.StrictLessThan)}
            for cols in (T - 1, T):
                m = rng.standard_normal((2, cols))
                got = executable(m)
                assert_close(got, np.asarray(kernel.reference(m)).reshape(got.shape), rtol=1e-12, atol=1e-13)
                assert_close(got, oracle(m), rtol=1e-12, atol=1e-13)
                ran = [launch.kernel for launch in executable.last_profile]
                assert [name.endswith("_v1_k") for name in ran] == [cols < T], (cols, ran)
    """, timeout=900)
    assert ok, report


def test_explain_names_both_nestings_and_the_threshold(capsys):
    assert main(["explain", f"{auto.__file__}:row_sums", "--target", "opencl", "--stage", "opencl"]) == 0
    out = capsys.readouterr().out
    head = out[:out.index("*/", out.index("Strategy:"))]
    n, T = _threshold(auto.row_sums.opencl_artifact())
    assert f"where {n} < {T} (the model's crossover on generic GPU): " in head
    assert re.search(r"where m_d1 < \d+ \(.*\): the top-level build of i is a map of reductions of m_d1 elements "
                     r"each: a work-item per element .*; otherwise: .* one work-group per element", head)
    assert f"- opencl_auto_kernels_row_sums_k: 256*m_d0, 256; where {n} >= {T}" in head
    assert f"- opencl_auto_kernels_row_sums_v1_k: 256*ceiling(m_d0/256), 256; where {n} < {T}" in head


_ROWS = """
import fsmooth as fs
from fsmooth import Array, Double, build, ifold, length


@fs.kernel
def row_sums(m: Array[Array[Double]]) -> Array[Double]:
    return build(length(m), lambda i: ifold(lambda acc, j: acc + m[i][j], 0.0, length(m[0])))
"""

# The host code, with each launch's OpenCL kernel named on stderr (ld's --wrap): a call of
# row_sums on a rows x cols matrix m[i][j] = i - j / 8, its status and sums on stdout.
_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "rows.h"
#include "fsmooth_cl.h"

cl_int clGetKernelInfo(cl_kernel kernel, cl_uint param_name, size_t size, void *value, size_t *size_ret);
cl_int __real_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *offset,
                                     const size_t *global, const size_t *local, cl_uint n, const cl_event *wait,
                                     cl_event *event);
cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *offset,
                                     const size_t *global, const size_t *local, cl_uint n, const cl_event *wait,
                                     cl_event *event) {
    char name[256] = "";
    clGetKernelInfo(k, 0x1190 /* CL_KERNEL_FUNCTION_NAME */, sizeof name, name, NULL);
    fprintf(stdout, "launch %s\n", name);
    return __real_clEnqueueNDRangeKernel(q, k, dims, offset, global, local, n, wait, event);
}

int main(int argc, char **argv) {
    struct rows_context_config *cfg = rows_context_config_new();
    rows_context_config_set_platform(cfg, "oclgrind");
    struct rows_context *ctx = rows_context_new(cfg);
    if (rows_context_get_error(ctx)) return 2;
    for (int a = 1; a + 1 < argc; a += 2) {
        int64_t rows = atoll(argv[a]), cols = atoll(argv[a + 1]);
        double *m = malloc(sizeof(double) * (size_t)(rows * cols) + 1), *out = malloc(sizeof(double) * (size_t)rows + 1);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) m[i * cols + j] = (double)i - (double)j / 8;
        int status = rows_row_sums(ctx, out, m, rows, cols);
        printf("status %d\n", status);
        for (int64_t i = 0; i < rows; i++) printf("%.17g\n", out[i]);
        free(m);
        free(out);
    }
    rows_context_free(ctx);
    rows_context_config_free(cfg);
    return 0;
}
"""


@needs_pip_opencl
def test_the_c_host_chooses_by_the_row_length(tmp_path):
    """``fsmooth compile --target opencl``: the host code evaluates each launch's condition on the
    call's sizes (the global size of a launch whose condition fails is 0) and enqueues the work-item per row's kernel below the threshold,
    the group per row's from it on; the sums are numpy's, under Oclgrind's checks."""
    (tmp_path / "rows.py").write_text(_ROWS)
    build = compile_opencl(tmp_path / "rows.py", tmp_path / "build")
    plan = json.loads((build / "rows.opencl.json").read_text())["kernels"]["row_sums"]["launches"]
    (T,) = {int(re.fullmatch(r"\(m_d1 < (\d+)\)", launch["when"]).group(1)) for launch in plan
            if ">=" not in launch["when"]}
    assert [launch["when"] for launch in plan] == [f"(m_d1 >= {T})", f"(m_d1 < {T})"]
    # each launch's global size 0 where its condition does not hold: the runtime skips it
    global_sizes = re.search(r"const int64_t fs_global\[\] = \{(.*)\};", (build / "rows.c").read_text()).group(1)
    assert f"fs_size_ge(m_d1, {T}) ?" in global_sizes and f"fs_size_lt(m_d1, {T}) ?" in global_sizes, global_sizes
    (build / "main.c").write_text(_MAIN)
    link = PIP_OPENCL[0]
    done = subprocess.run(["cc", *WARNINGS, "-O1", f"-I{build}", "-Wl,--wrap=clEnqueueNDRangeKernel", "-o",
                           str(build / "main"), str(build / "main.c"), str(build / "rows.c"), *link, "-lm"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shapes = [(3, cols) for cols in _lengths(T)] + [(0, 4)]
    run = run_on_oclgrind([str(build / "main"), *(str(v) for shape in shapes for v in shape)])
    assert run.returncode == 0, run.stderr
    lines = iter(run.stdout.decode().splitlines())
    for rows, cols in shapes:
        ran = []
        line = next(lines)
        while line.startswith("launch "):
            ran.append(line.split()[1])
            line = next(lines)
        assert line == "status 0", (rows, cols, line)
        sums = np.array([float(next(lines)) for _ in range(rows)])
        m = np.arange(rows)[:, None] - np.arange(cols)[None, :] / 8
        np.testing.assert_allclose(sums, m.sum(axis=1), **F64)
        expected = [] if rows == 0 else ["rows_row_sums_v1_k" if cols < T else "rows_row_sums_k"]
        assert ran == expected, (rows, cols, ran)


def test_a_row_length_of_several_sizes_chooses_by_its_least(intel_cpu_context):
    """blas's gemv_auto folds min(m_d1, x_d0) elements a row: the condition is on that length, so
    a matrix of long rows times a short vector runs the work-item per row's kernel, and the
    results are the reference's and numpy's (alpha · m[:, :k] @ x[:k] + beta · y, k the least)."""
    from corpus import blas

    kernel = blas.gemv_auto.with_options(opencl_device=GENERIC_GPU)
    executable = kernel.opencl_executable(intel_cpu_context)
    n, T = _threshold(executable.artifact)
    assert str(n) == "Min(m_d1, x_d0)"
    rng = np.random.default_rng(6)
    for cols, length in ((T + 100, T - 1), (T + 100, T), (T - 1, T + 100), (T, T + 100), (1, 1), (0, 5)):
        m = rng.standard_normal((4, cols)).astype(np.float32)
        x, y = rng.standard_normal(length).astype(np.float32), rng.standard_normal(4).astype(np.float32)
        args = (np.float32(1.5), m, x, np.float32(-0.5), y)
        got = executable(*args)
        k = min(cols, length)
        expected = 1.5 * (m[:, :k].astype(np.float64) @ x[:k].astype(np.float64)) - 0.5 * y
        assert_close(got, np.asarray(kernel.reference(*args)), rtol=1e-4, atol=1e-4)
        assert_close(got, expected.astype(np.float32), rtol=1e-4, atol=1e-4)
        ran = [launch.kernel for launch in executable.last_profile]
        assert ran == ["blas_gemv_auto_v1_k" if k < T else "blas_gemv_auto_k"], (cols, length, ran)
