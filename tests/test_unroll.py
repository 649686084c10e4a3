"""Issue 11: a build whose element is arithmetic on reads, of a length known only at run time, is
unrolled 4 times (``#pragma GCC unroll 4``, ``fsmooth.dpia.codegen_c.UNROLL``) and nothing else
is; proven by callgrind's count of the instructions of the micro-benchmark add3's loop (the same
bits, fewer instructions), not by timing."""
from __future__ import annotations

import importlib.util
import pathlib
import re
import shutil
import subprocess

import pytest

import fsmooth as fs
from corpus import adbench_hand
from fsmooth import Array, Double, build, ifold, length
from fsmooth.cache import c_compiler
from fsmooth.dpia.codegen_c import UNROLL
from fsmooth.driver import compile_to_c
from fsmooth.embed import library

MICRO = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "micro_kernels.py"


def micro_kernels():
    spec = importlib.util.spec_from_file_location("micro_kernels", MICRO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unrolled_loops(kernel) -> list[str]:
    """The first line of every loop after the pragma in the kernel's C."""
    source = compile_to_c(kernel.program(), kernel.options).source
    return re.findall(rf"^\s*{re.escape(UNROLL)}\n\s*(for .*)$", source, re.M)


def test_only_elementwise_builds_of_a_run_time_length_are_unrolled():
    add3 = micro_kernels().add3_loop
    # vector_add's loop, add3's and add3_loop's (their calls inlined): one store of a sum of reads
    # each; the fold over the iterations is not a build
    assert unrolled_loops(add3) == ["for (int64_t i = 0; i < a_d0; i++) {"] + [
        "for (int64_t i_1 = 0; i_1 < a_d0; i_1++) {"] * 2
    # an element that branches or folds is not; nor are Hand's element-wise builds of 3 and 4
    # (constant counts, which gcc unrolls whole)
    assert unrolled_loops(scaled) == ["for (int64_t i = 0; i < a_d0; i++) {"]
    assert unrolled_loops(clipped) == unrolled_loops(row_sums) == unrolled_loops(adbench_hand.hand_objective) == []


@fs.kernel
def scaled(a: Array[Double]) -> Array[Double]:
    return build(length(a), lambda i: 2.0 * a[i])


@fs.kernel
def clipped(a: Array[Double]) -> Array[Double]:
    return build(length(a), lambda i: a[i] if a[i] > 0.0 else 0.0)


@fs.kernel
def row_sums(a: Array[Array[Double]]) -> Array[Double]:
    return build(length(a), lambda i: ifold(lambda acc, j: acc + a[i][j], 0.0, length(a[i])))


DRIVER = """
#include <stdio.h>
#include "m.h"
int main(void) {
    enum { N = 100 };
    static double a[N], b[N], c[N];
    double out, scratch[N];
    for (int i = 0; i < N; i++) { a[i] = 0.5 * i; b[i] = 1.0 - i; c[i] = 0.25 * (i % 7); }
    int status = m_add3_loop(scratch, &out, a, N, b, N, c, N, 2000);
    printf("%d %.17g\\n", status, out);
    return 0;
}
"""


def instructions(where: pathlib.Path, unroll: bool) -> tuple[int, str]:
    """callgrind's count for the add3 loop's function, built portable with -O3, and what it printed."""
    where.mkdir()
    library("m", [micro_kernels().add3_loop], micro_kernels().add3_loop.options, "micro_kernels.py").write(where)
    if not unroll:
        source = where / "m.c"
        source.write_text(source.read_text().replace(UNROLL + "\n", ""))
    (where / "main.c").write_text(DRIVER)
    subprocess.run([*c_compiler(), "-std=c99", "-O3", "-fwrapv", "-I", str(where), str(where / "main.c"),
                    str(where / "m.c"), "-lm", "-o", str(where / "main")], check=True)
    out = where / "callgrind.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=m_add3_loop",
                          f"--callgrind-out-file={out}", str(where / "main")], capture_output=True, text=True,
                         check=True)
    return int(re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M).group(1)), run.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("gcc") is None,
                    reason="counting instructions needs valgrind and gcc")
def test_add3_runs_fewer_instructions_unrolled(tmp_path):
    unrolled, printed = instructions(tmp_path / "unrolled", True)
    rolled, printed_rolled = instructions(tmp_path / "rolled", False)
    assert printed == printed_rolled and printed.startswith("0 ")  # the same bits
    assert unrolled < 0.9 * rolled, (unrolled, rolled)
