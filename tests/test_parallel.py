"""``parallel=True`` (``fsmooth.dps.parallel``): the scratch of a parallel loop is one slice per
thread, not per iteration, over a thread count every call is given; only the outermost loops
run on threads; results equal the reference and numpy at sizes 0, 1 and large; the scratch is
the arena's high-water mark; the C is clean under the sanitizers."""
from __future__ import annotations

import re

import numpy as np
import pytest
import sympy

from corpus import adbench_ba, adbench_gmm, ml
from fsmooth import runtime
from fsmooth.driver import compile_to_c
from fsmooth.dps.parallel import CACHE_LINE, PAGE
from fsmooth.options import Options
from test_adbench_corpus import ba_args, gmm_args
from test_codegen_c import ASAN, Runner, run_under_address_sanitizer
from test_corpus import assert_close, with_rows_of

PARALLEL = Options(parallel=True)


def threads() -> int:
    """The thread count the Python runtime passes: OpenMP's."""
    return ml.softmax_rows.with_options(parallel=True).executable()._max_threads()


def _body(source: str, symbol: str) -> str:
    """The C of one kernel's ``_body`` function."""
    return re.search(rf"static int {symbol}_body\([^;{{]*\) {{\n.*?\n}}\n", source, re.S).group(0)


# ----------------------------------------------------------------------------- memory per thread

def test_softmax_rows_scratch_is_one_row_per_thread_not_per_row():
    """10000 × 100: sequentially one row of 100 doubles (800 B); in parallel one row per thread,
    each but the last padded to a whole page (4096 B, dps.parallel.PAGE), not one per row (8 MB)."""
    m = np.random.default_rng(0).standard_normal((10_000, 100))
    sequential, parallel = ml.softmax_rows, ml.softmax_rows.with_options(parallel=True)
    assert sequential.scratch_bytes(m) == 800
    padded = -(-800 // PAGE) * PAGE
    assert parallel.scratch_bytes(m) == (threads() - 1) * padded + 800
    # the C's own formula, at a thread count given explicitly: linear in it, blind to the rows
    interface = compile_to_c(ml.softmax_rows.program(), PARALLEL).interfaces["softmax_rows"]
    assert [s.symbol for s in interface.sizes] == ["m_d0", "m_d1", "nthreads"]
    assert interface.threads == "nthreads" and interface.params[-1][0] == "nthreads"
    formula = interface.scratch_formula
    symbol = {s.name: s for s in formula.free_symbols}
    assert "m_d0" not in symbol
    for n_threads in (1, 2, 8):
        assert formula.subs({symbol["m_d1"]: 100, symbol["nthreads"]: n_threads}) == (n_threads - 1) * padded + 800


def test_ba_scratch_does_not_grow_with_the_observations():
    small = ba_args(np.random.default_rng(1), (3, 5, 10))
    large = ba_args(np.random.default_rng(1), (3, 5, 20_000))
    parallel = adbench_ba.ba_objective.with_options(parallel=True)
    sequential = adbench_ba.ba_objective.scratch_bytes(*large)
    # each thread's frame (and the partials) a page of its own, the last one unpadded
    assert parallel.scratch_bytes(*small) == parallel.scratch_bytes(*large) <= threads() * 2 * PAGE + sequential


@pytest.mark.parametrize("kernel, args", [
    (ml.softmax_rows, (np.random.default_rng(2).standard_normal((257, 33)),)),
    (adbench_ba.ba_objective, ba_args(np.random.default_rng(3), (4, 9, 1001))),
    (adbench_gmm.gmm_full_objective, gmm_args(np.random.default_rng(4), (300, 5, 4))),
], ids=["softmax_rows", "ba_objective", "gmm_full_objective"])
def test_scratch_is_the_measured_high_water_mark(kernel, args):
    """Every thread takes some of the many iterations, so every slice is written: the arena's
    high-water mark is the computed scratch, to the alignment of the last region."""
    checked = kernel.with_options(parallel=True, check_arena=True)
    assert_close(checked(*args), kernel.reference(*args), rtol=1e-9, atol=1e-12)
    measured, computed = runtime.last_high_water(checked), checked.scratch_bytes(*args)
    assert computed - 16 < measured <= computed


# ----------------------------------------------------------------------------- which loops

def test_only_the_outermost_loops_run_on_threads():
    """BA: the build over the observations (and the weights'); the kernels it calls per
    observation have no OpenMP region: one would be started at every call.  GMM: the builds
    inside the fold over the points, or in kernels called there, are not parallel."""
    ba = compile_to_c(adbench_ba.ba_objective.program(), PARALLEL).source
    objective = _body(ba, "adbench_ba_ba_objective")
    # (the build over the observations twice: its version for rows of the widths it reads, dpia.row_versions)
    assert objective.count("#pragma omp parallel for num_threads(nthreads) schedule(static)") == 3
    # its 2- and 3-vectors are C locals (dps.local_arrays), each thread's own: no slice of the
    # scratch per thread, no scratch at all
    assert "omp_get_thread_num()" not in objective
    assert compile_to_c(adbench_ba.ba_objective.program(), PARALLEL).interfaces["ba_objective"].scratch_formula == 0
    for callee in ("project", "reprojection_error", "rodrigues_rotate_point", "cross3", "radial_distort"):
        assert "omp" not in _body(ba, f"adbench_ba_{callee}")
    # (unjammed: the jam inlines main_terms into the fold, Options.jam_reductions)
    gmm = compile_to_c(adbench_gmm.gmm_full_objective.program(), Options(parallel=True, jam_reductions=False)).source
    # its two builds over the components (sum_qs, the exp of the diagonals) come before the
    # points: outermost, so parallel; main_terms, called in the fold over the points, has none
    assert _body(gmm, "adbench_gmm_gmm_full_objective").count(
        "#pragma omp parallel for num_threads(nthreads) schedule(static) if(icf_d0 > 1)") == 2
    assert "omp" not in _body(gmm, "adbench_gmm_main_terms")
    assert re.search(r"adbench_gmm_main_terms_body\(.*, INT64_C\(1\)\)", gmm)
    # jammed, its build over the components is inlined into the fold, inside the threads' region
    jammed = _body(compile_to_c(adbench_gmm.gmm_full_objective.program(), PARALLEL).source, "adbench_gmm_gmm_full_objective")
    assert "main_terms" not in jammed and jammed.count("#pragma omp parallel for") == 2
    # lower_times_x, called there, is also a kernel of its own: called alone, its build is outermost
    assert "#pragma omp parallel for" in _body(gmm, "adbench_gmm_lower_times_x")
    # BA's project, whose result is a 2-vector, is inlined (fsmooth.inline_kernels): its loops,
    # inside the parallel build, are plain loops of that build's thread
    assert "adbench_ba_project_body(" not in objective


def test_a_loop_of_few_known_trips_stays_sequential():
    """cross3's 3-element build is no loop worth a team, even called on its own."""
    ba = compile_to_c(adbench_ba.ba_objective.program(), PARALLEL).source
    assert "omp" not in _body(ba, "adbench_ba_cross3")


# ----------------------------------------------------------------------------- results

SIZES = {
    "softmax_rows": (ml.softmax_rows, ml.np_softmax_rows,
                     lambda rng, n: (rng.standard_normal((n, 7)),), (0, 1, 5000)),
    "ba_objective": (adbench_ba.ba_objective, adbench_ba.np_ba_objective,
                     lambda rng, n: ba_args(rng, (3, 4, n)), (0, 1, 5000)),
    "gmm_full_objective": (adbench_gmm.gmm_full_objective, adbench_gmm.np_gmm_full_objective,
                           lambda rng, n: gmm_args(rng, (n, 3, 4)), (1, 2000)),
}


@pytest.mark.parametrize("name, size", [(name, size) for name, (_, _, _, sizes) in SIZES.items() for size in sizes])
def test_parallel_equals_reference_and_numpy(name, size):
    kernel, oracle, make_args, _ = SIZES[name]
    args = make_args(np.random.default_rng(size), size)
    got = kernel.with_options(parallel=True)(*args)
    assert_close(got, with_rows_of(kernel.reference(*args), got), rtol=1e-9, atol=1e-12)
    assert_close(got, oracle(*args), rtol=1e-9, atol=1e-12)
    # BA and softmax_rows: the same operations in the same order; GMM's sum over the points is a
    # parallel reduction, whose partial sums regroup the additions (dps.parallel)
    regrouped = name == "gmm_full_objective" and size > 1
    assert_close(got, kernel(*args), rtol=1e-12 if regrouped else 0, atol=0)


# ----------------------------------------------------------------------------- the C ABI

@pytest.mark.parametrize("n_threads", [1, 2, 3, 8])
def test_the_thread_count_is_an_argument_of_the_c(tmp_path, n_threads):
    """Built with -fsanitize=undefined (address too under ASAN), called by the ABI with the
    thread count as the last argument: any count gives the same result, 0 is refused."""
    run = Runner(compile_to_c(ml.softmax_rows.program(), PARALLEL), tmp_path, "softmax_rows")
    for rows in (0, 1, 3, 200):
        m = np.random.default_rng(rows).standard_normal((rows, 9))
        np.testing.assert_allclose(run(m, n_threads), ml.np_softmax_rows(m), rtol=1e-12)
    assert run(np.ones((2, 3)), 0)[0] == "size"


def test_ba_through_the_abi(tmp_path):
    run = Runner(compile_to_c(adbench_ba.weight_errors.program(), PARALLEL), tmp_path, "weight_errors")
    w = np.random.default_rng(5).uniform(0.5, 1.5, 3000)
    np.testing.assert_allclose(run(w, 2), adbench_ba.np_weight_errors(w), rtol=1e-15)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "argument_of_the_c or through_the_abi")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "passed" in result.stdout


def test_scratch_formula_is_exact_symbolically():
    """No Max left where the thread count is at least one (the layout compares peaks with it)."""
    interface = compile_to_c(ml.softmax_rows.program(), PARALLEL).interfaces["softmax_rows"]
    assert not interface.scratch_formula.atoms(sympy.Max)


# ----------------------------------------------------------------------------- the benchmark

def test_benchmark_script_runs_and_writes_its_json_and_c(tmp_path, capsys):
    import json
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    import parallel as bench
    assert bench.main(["--quick", "--repeat", "1", "--json", str(tmp_path / "p.json")]) == 0
    rows = json.loads((tmp_path / "p.json").read_text())["rows"]
    assert [r["objective"] for r in rows] == ["BA", "GMM"]
    assert all(len(r[label]["times_ms"]) == 1 for r in rows for label in ("sequential", "parallel"))
    assert "speedup" in capsys.readouterr().out
    assert bench.main(["--quick", "--write-c", str(tmp_path / "c")]) == 0
    assert "#pragma omp parallel for" in (tmp_path / "c" / "parallel" / "ba.c").read_text()
    assert "omp_get_thread_num()" in (tmp_path / "c" / "parallel" / "gmm.c").read_text()
    assert "omp" not in (tmp_path / "c" / "sequential" / "ba.c").read_text()


def _operand(text: str, start: int) -> str:
    """The C operand at ``start``: a parenthesised group, or a name or number."""
    if text[start] != "(":
        return re.match(r"[\w.]+", text[start:]).group(0)
    depth = 0
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            return text[start:end + 1]
    raise AssertionError(text[start:])


def _per_thread_byte_offsets(source: str) -> list:
    """(region, where a thread's part starts, bytes per thread) of every place in the scratch that
    depends on the thread's number: an offset added to the scratch pointer (region None), or an
    index (in elements, within the thread's part by the other terms) into a region, with the
    region's base."""
    thread, parts = sympy.Symbol("fs_thread"), []
    loop_variables = {sympy.Symbol(name) for name in re.findall(r"for \(int64_t (\w+) = 0;", source)}

    def split(offset, base=0, elem=1, region=None):
        offset = sympy.expand(offset)
        if thread in offset.free_symbols:
            # the place within the thread's part is the loop variables' terms
            start = offset.subs(thread, 0).subs({v: 0 for v in loop_variables})
            parts.append((region, base + elem * start, elem * offset.coeff(thread)))
    for m in re.finditer(r"\(char \*\)scratch \+ ", source):
        split(sympy.sympify(_operand(source, m.end())))
    for m in re.finditer(r"(\w+) \*(\w+) = \(\w+ \*\)\(\(char \*\)scratch \+ ", source):
        elem, region = {"double": 8, "float": 4, "int64_t": 8, "bool": 1}[m.group(1)], m.group(2)
        base = sympy.sympify(_operand(source, m.end()))
        for use in re.finditer(rf"\b{region}(?: \+ |\[)", source):
            split(sympy.sympify(_operand(source, use.end())), base, elem, region)
    return parts


@pytest.mark.parametrize("kernel", [ml.softmax_rows, adbench_gmm.gmm_full_objective])
def test_each_threads_scratch_starts_on_a_cache_line_and_a_page_of_its_own(kernel):
    """Where each thread's part of the scratch starts is a multiple of the cache line at every
    thread count (the arena starts on one), and the bytes from one thread's part to the next are
    whole pages (a reduction's partials, written once, whole cache lines): BA's frames once
    started 48 bytes short of a line, so two cores wrote one line in turn at every observation
    (false sharing), and 2 threads took 3 times as long as one; GMM's per-point frames and
    components' terms, 128 bytes apart, were in one page, whose lines the L2 streamer prefetches
    ahead of each thread's accesses: 1.5x on 2 threads, 2.0x with the parts a page apart."""
    parts = _per_thread_byte_offsets(compile_to_c(kernel.program(), PARALLEL).source)
    assert parts, "no per-thread place found"
    for region, start, stride in parts:
        apart = CACHE_LINE if region is not None and region.startswith("partials") else PAGE
        for value, multiple in ((start, CACHE_LINE), (stride, apart)):
            # a helper's value (fs_ceildiv_i64(m_d1, 8)) is an integer like any size
            value = sympy.expand(value.replace(lambda e: isinstance(e, sympy.core.function.AppliedUndef),
                                               lambda e: sympy.Symbol(str(e), integer=True)))
            generators = sorted(value.free_symbols, key=str)
            coefficients = sympy.Poly(value, *generators).coeffs() if generators else [value]
            assert all(c % multiple == 0 for c in coefficients), (region, start, stride)
