"""Every compile option of ``fsmooth.options`` on a representative subset of the corpus: the DPS
paper's variants (``VARIANTS``) and OpenMP, each warning-free under -Wall -Wextra -Werror and
equal to the reference; the arena and malloc variants under AddressSanitizer; and the generated C
of flattened index arithmetic, which the loop ranges leave without a division.

No ``from __future__ import annotations``: the kernels below are F̃ programs, their annotations
are the types themselves."""
import pathlib
import re
import subprocess
from dataclasses import asdict, replace

import numpy as np
import pytest

import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, ifold, length
from fsmooth.cache import system_library_available
from fsmooth.driver import compile_to_c
from fsmooth.options import VARIANTS
from test_codegen_c import ASAN, Runner, run_under_address_sanitizer
from test_corpus import CASES, arguments, assert_close

ROOT = pathlib.Path(__file__).resolve().parents[1]

CONFIGS = {**VARIANTS,
           "arena+parallel": replace(VARIANTS["arena"], parallel=True),
           "malloc+parallel": replace(VARIANTS["malloc"], parallel=True)}
# The gc variant is the paper's CG: it needs Boehm's libgc, a system library ("where libgc is
# installed", as the issue says).  Its C is still generated and checked textually everywhere.
NEEDS_LIBGC = pytest.mark.skipif(not system_library_available("gc.h", "gc"), reason="libgc-dev is not installed")
CONFIG_PARAMS = [pytest.param(c, marks=NEEDS_LIBGC) if CONFIGS[c].allocation == "gc" else c for c in CONFIGS]
# A callee with an intermediate (f), per-row intermediates in a parfor (softmax_rows), a
# double-buffered ifold (jacobi), checked data-dependent reads (reprojection_errors), and a
# larger program (gmm_objective).  Every one is compiled in every configuration; the first
# three kinds are also run in each (a C build costs a second).
SUBSET = ("f", "softmax_rows", "jacobi", "reprojection_errors", "gmm_objective")
RUN = ("softmax_rows", "jacobi", "reprojection_errors")
SUBSET_CASES = {case.kernel.name: case for case in CASES if case.kernel.name in SUBSET}


def _warnings(artifact, tmp_path: pathlib.Path) -> str:
    src = tmp_path / "kernel.c"
    src.write_text(artifact.source)
    result = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                             *artifact.compile_args, f"-I{ROOT / 'clib'}", str(src)],
                            capture_output=True, text=True)
    return result.stderr if result.returncode else ""


@pytest.mark.parametrize("config", CONFIG_PARAMS)
@pytest.mark.parametrize("name", SUBSET)
def test_variant_is_warning_free(name, config, tmp_path):
    options = CONFIGS[config]
    artifact = compile_to_c(SUBSET_CASES[name].kernel.program(), options)
    assert _warnings(artifact, tmp_path) == ""
    threaded = "#pragma omp parallel for" in artifact.source
    assert threaded <= options.parallel
    # jacobi's and gmm_objective's builds are inside a fold (over the steps, the points), where no
    # loop gets a team (fsmooth.dps.parallel): only kernels of their own, where not inlined, have one
    assert threaded == (options.parallel and (name in ("f", "softmax_rows", "reprojection_errors")
                                              or options.inline_kernels))


@pytest.mark.skipif(ASAN, reason="the sanitizer run below only needs the ABI runner")
@pytest.mark.parametrize("config", CONFIG_PARAMS)
@pytest.mark.parametrize("name", RUN)
def test_variant_matches_the_reference(name, config, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # read when libgomp starts, in this process
    case, options = SUBSET_CASES[name], CONFIGS[config]
    compiled = case.kernel.with_options(**asdict(options))
    for variant in case.variants:
        args = arguments(case, variant)
        assert_close(compiled(*args), case.kernel.reference(*args), **case.tol)
        if options.allocation != "arena":
            assert compiled.scratch_bytes(*args) == 0


def test_parallel_results_equal_sequential_ones_bit_for_bit(monkeypatch):
    """Each parfor iteration computes the same thing in any thread: equal, not just close."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    for name in RUN:
        case = SUBSET_CASES[name]
        parallel = case.kernel.with_options(parallel=True)
        for variant in case.variants:
            args = arguments(case, variant)
            assert_close(parallel(*args), case.kernel(*args), rtol=0, atol=0)


def test_variants_allocate_as_the_paper_says():
    program = SUBSET_CASES["f"].kernel.program()
    arena, malloc, leaky, gc = (compile_to_c(program, VARIANTS[v]).source for v in ("arena", "malloc", "leaky", "gc"))
    assert "malloc" not in arena and "free(" not in arena
    assert malloc.count("fs_malloc(") == malloc.count("free(") > 0
    assert "fs_malloc(" in leaky and "free(" not in leaky
    assert "#include <gc.h>" in gc and "GC_MALLOC" in gc and "GC_INIT()" in gc and "free(" not in gc
    assert compile_to_c(program, VARIANTS["gc"]).libraries == ("gc",)
    assert compile_to_c(program, replace(VARIANTS["arena"], parallel=True)).compile_args == ("-fopenmp",)


def test_a_failure_inside_a_parallel_loop_is_reported(monkeypatch):
    """A checked read fails in some iteration: the status reaches Python, nothing crashes."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    case = SUBSET_CASES["reprojection_errors"]
    args = list(arguments(case, case.variants[-1]))
    args[3] = args[3].copy()
    args[3][-1, 0] = 10_000  # a camera index out of range
    for options in (CONFIGS["arena+parallel"], CONFIGS["malloc+parallel"], CONFIGS["malloc"]):
        with pytest.raises(IndexError):
            case.kernel.with_options(**asdict(options))(*args)


# ----------------------------------------------------------------------------- AddressSanitizer


@pytest.mark.parametrize("config", ["arena", "malloc"])
@pytest.mark.parametrize("name", RUN)
def test_variant_through_the_abi(name, config, tmp_path):
    """Built by hand with -fsanitize (address under ASAN, undefined always), called by the ABI."""
    case = SUBSET_CASES[name]
    run = Runner(compile_to_c(case.kernel.program(), CONFIGS[config]), tmp_path, name)
    for variant in case.variants:
        args = arguments(case, variant)
        assert_close(run(*args), case.kernel.reference(*args), **case.tol)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_variants_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "through_the_abi")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


# ----------------------------------------------------------------------------- index simplification


@fs.kernel
def flatten(a: Array[Array[Double]]) -> Array[Double]:
    m = length(a[0])
    return build(length(a) * m, lambda k: a[k // m][k % m])


@fs.kernel
def rebuild(v: Array[Double], n: Card, m: Card) -> Array[Array[Double]]:
    return build(n, lambda i: build(m, lambda j: v[((i * m + j) // m) * m + (i * m + j) % m]))


@fs.kernel
def row_of(v: Array[Double], n: Card, m: Card) -> Array[Array[Double]]:
    return build(n, lambda i: build(m, lambda j: v[(i * m + j) // m]))


@fs.kernel
def strided_sum(n: Card, m: Card) -> Index:
    return ifold(lambda s, k: s + k // m, 0, n * m)


def _body(kernel) -> str:
    return kernel.c_source().split(f"_{kernel.name}_body(void")[-1].split("\n}\n")[0]


@pytest.mark.parametrize("kernel", [flatten, rebuild, row_of], ids=lambda k: k.name)
def test_flattened_indices_leave_no_division(kernel):
    body = _body(kernel)
    assert not re.search(r"[/%]|fs_floordiv|fs_mod", body), body


def test_flattened_indices_compute_the_same(rng):
    a = rng.standard_normal((3, 4))
    np.testing.assert_array_equal(flatten(a), a.ravel())
    assert "out[k] = a[k];" in _body(flatten)  # a[k // m][k % m] is a[k]: no check, no division
    v = rng.standard_normal(12)
    np.testing.assert_array_equal(rebuild(v, 3, 4), v.reshape(3, 4))
    np.testing.assert_array_equal(row_of(v, 3, 4), np.repeat(v[:3, None], 4, axis=1))
    with pytest.raises(ValueError):
        flatten(np.ones((0, 2)))


def test_integer_lets_are_inlined_but_accumulators_are_stored():
    """An integer let is kept as its expression (so ranges can simplify it); an ifold's integer
    state is written every iteration, so it stays a variable, and its sum, which nothing bounds,
    is checked for overflow (README "Integers and floats")."""
    assert strided_sum(3, 4) == strided_sum.reference(3, 4) == 4 * (0 + 1 + 2)
    body = _body(strided_sum)
    # k ≥ 0 and m ≥ 1 inside the loop: C's truncating `/` is Python's `//` there, no helper
    assert re.search(r"= fs_checked_add_i64\(s, \(k / m\), &fs_overflow_\d+\);", body), body
    assert "== 0" not in body  # inside `for k < n*m`, m >= 1: no test for a zero divisor
