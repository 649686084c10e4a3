"""Automatic parallel reductions on OpenCL (``fsmooth.auto_reductions``): an unannotated fold at the
top of a kernel that is a reduction runs as one launch of many work-items, its result the
reference's and numpy's (within rounding: the sum is regrouped); what is not a reduction, or
may overflow when regrouped, stays on one work-item; annotated programs are left as written;
``fsmooth explain`` says what was chosen; the shape is tunable (``OpenCLReduction``)."""
from __future__ import annotations

import collections
import re

import numpy as np
import pytest
import sympy

import opencl_auto_kernels as auto
from corpus import blas, ml, vision
from fsmooth.cli import main
from fsmooth.cost_model import GENERIC_GPU, DeviceDescription
from fsmooth.driver import opencl_passes, run_passes
from fsmooth.options import OpenCLReduction, Options, default_options
from fsmooth.types import rank
from opencl_oclgrind import run_under_oclgrind
from test_corpus import assert_close

# empty, tiny, around a GPU group's 1024 elements, past a CPU work-item's block of 4096 and its
# group's 65536, large
SIZES = (0, 1, 2, 1023, 1025, 4097, 65537, 100_003)
PARALLEL = ("sum_f", "sum_d", "prod_f", "prod_d", "min_f", "max_d", "max_sum", "max_index", "normalise")


def _input(name: str, n: int, rng: np.random.Generator):
    if name.endswith("_index"):
        return rng.integers(-10 ** 6, 10 ** 6, n, dtype=np.int64)
    if name.startswith("prod"):  # near 1, so that a product of 100k stays in range
        x = 1.0 + rng.uniform(-1e-3, 1e-3, n)
    else:
        x = rng.standard_normal(n)
    return x.astype(np.float32) if name.endswith("_f") or name == "normalise" else x


def _tolerance(name: str, n: int) -> dict:
    """Exact for min, max and integers; a float sum or product regrouped rounds differently."""
    if name in ("min_f", "max_d", "max_index", "sum_index"):
        return dict(rtol=0, atol=0)
    if name in ("sum_f", "prod_f", "normalise"):
        return dict(rtol=1e-4, atol=1e-4 * max(1.0, np.sqrt(n)))
    return dict(rtol=1e-11, atol=1e-11 * max(1.0, np.sqrt(n)))


@pytest.mark.parametrize("name", [*PARALLEL, "sum_index"])
def test_compiled_equals_reference_and_numpy(intel_cpu_context, name):
    kernel = getattr(auto, name)
    rng = np.random.default_rng(12)
    for n in SIZES:
        x = _input(name, n, rng)
        got = kernel.opencl(x, context=intel_cpu_context)
        assert_close(got, kernel.reference(x), **_tolerance(name, n))
        assert_close(got, auto.ORACLES[name](x), **_tolerance(name, n))
        if name in ("min_f", "max_d", "max_index"):  # the very value, bit for bit
            assert got == kernel.reference(x)


def _trace(kernel, options: Options | None = None):
    return run_passes(opencl_passes(options or kernel.options), kernel.program())


def _work(artifact, n: int) -> list[tuple[int, int]]:
    """(work-items, work-group size) of each launch at input length ``n``."""
    def at(e):
        e = sympy.sympify(e)
        return int(e.subs({s: n for s in e.free_symbols}))

    return [(at(launch.global_size[0]), at(launch.local_size[0]) if launch.local_size else 0)
            for launch in artifact.launches]


def _running(artifact, rows: int, cols: int) -> list:
    """The launches that run on a matrix of ``rows`` x ``cols`` (and vectors of ``cols``): those
    whose condition on the sizes holds (``Launch.when``), with the sizes (by name) they are at."""
    ranks = {p: rank(ty) for p, ty in artifact.interface.params}
    at = {s.symbol: rows if s.dim == 0 and ranks[s.param] == 2 else cols for s in artifact.interface.sizes}

    def holds(when) -> bool:
        return when is None or bool(when.subs({s: at[s.name] for s in when.free_symbols}))

    return [launch for launch in artifact.launches if holds(launch.when)], at


def _work_at(artifact, rows: int, cols: int) -> list[tuple[int, int]]:
    """(work-items, work-group size) of each launch that runs on a matrix of ``rows`` x ``cols``."""
    launches, at = _running(artifact, rows, cols)

    def value(e):
        e = sympy.sympify(e)
        return int(e.subs({s: at[s.name] for s in e.free_symbols}))

    return [(value(launch.global_size[0]), value(launch.local_size[0]) if launch.local_size else 0)
            for launch in launches]


@pytest.mark.parametrize("name", PARALLEL)
def test_reduction_runs_on_many_work_items_in_many_groups(name):
    """The work is spread: at 2**20 elements, 64 groups of 256 work-items each fold 16 elements a
    lane (4-wide: 4096 elements a group a round), then the last group of 256 to finish combines the
    64 partials, in the same launch (one group where there are none: n = 0); the default strategy
    ran the fold on one work-item."""
    kernel = getattr(auto, name)
    artifact = kernel.opencl_artifact()
    reductions = 2 if name == "max_sum" else 1
    assert _work(artifact, 2 ** 20)[:reductions] == [(64 * 256, 256)] * reductions
    assert _work(artifact, 0)[:reductions] == [(256, 256)] * reductions
    sequential = _work(kernel.with_options(auto_reductions=False).opencl_artifact(), 2 ** 20)
    assert sequential[0] == (1, 1)
    # the group count is capped: 2**30 elements give 1024 groups, each lane folding 256
    assert _work(artifact, 2 ** 30)[0] == (1024 * 256, 256)


def test_integer_sum_stays_sequential_and_says_why():
    notes = _trace(auto.sum_index).last("auto_reductions").notes
    assert len(notes) == 1 and "one work-item" in notes[0] and "overflow" in notes[0]
    assert _work(auto.sum_index.opencl_artifact(), 10 ** 6) == [(1, 1)]


ROWS = ("row_sums", "row_logsumexp", "gemv_auto", "short_rows")
SHAPES = ((0, 5), (1, 1), (3, 7), (5, 1000), (40, 3000))  # 120,000 elements the last


def _np_rows(name: str, m: np.ndarray, x: np.ndarray):
    m64 = m.astype(np.float64)
    if name == "row_logsumexp":
        top = m64.max(axis=1, keepdims=True) if m.shape[1] else np.zeros((m.shape[0], 1))
        return (np.log(np.exp(m64 - top).sum(axis=1)) + top[:, 0]).astype(np.float32)
    if name == "gemv_auto":
        return (m64 @ x.astype(np.float64)).astype(np.float32)
    return m64[:, :3].sum(axis=1) if name == "short_rows" else m64.sum(axis=1)


# the device's own choice (a work-item per row for most, on Intel's CPU), and the GPU's (a group per row)
DEVICES = {"own": None, "gpu": GENERIC_GPU}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ROWS)
def test_maps_of_reductions_equal_reference_and_numpy(intel_cpu_context, name, device):
    kernel = getattr(auto, name).with_options(opencl_device=DEVICES[device])
    rng = np.random.default_rng(8)
    for rows, cols in SHAPES:
        if name == "short_rows":
            cols = max(cols, 3)
        m = rng.standard_normal((rows, cols))
        m = m.astype(np.float32) if name in ("row_logsumexp", "gemv_auto") else m
        x = rng.standard_normal(cols).astype(np.float32)
        args = (m, x) if name == "gemv_auto" else (m,)
        got = kernel.opencl(*args, context=intel_cpu_context)
        tol = dict(rtol=1e-4, atol=1e-4) if m.dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
        assert_close(got, np.asarray(kernel.reference(*args)), **tol)
        assert_close(got, _np_rows(name, m, x), **tol)


def test_a_map_of_reductions_gets_a_group_per_row_unless_rows_are_short():
    for name in ROWS[:3]:
        artifact = getattr(auto, name).opencl_artifact()
        # 500 rows of 5,000: 500 groups of 256; logsumexp's row, read by both its reductions, staged
        # in local memory (dpia.stage_rows), with the kernel as it was for its fallback
        assert _work_at(artifact, 500, 5000) == [(500 * 256, 256)] * (2 if name == "row_logsumexp" else 1), name
        long, _ = _running(artifact, 500, 5000)
        assert [launch.fallback for launch in long][1:] == [True] * (name == "row_logsumexp")
        # rows of 10, known only at the call: a work-item per row (test_opencl_row_variants)
        assert _work_at(artifact, 500, 10) == [(512, 256)], name
        assert "map of reductions" in artifact.source[:artifact.source.index("typedef")]
    short = auto.short_rows.opencl_artifact()
    assert _work(short, 500) == [(512, 256)]  # a work-item per row, in whole groups of 256
    assert "reductions of 3 elements each: a work-item per element (cost model on generic GPU" in short.source
    assert re.search(r"work-item per element ≈ \S+ \(chosen\) lane steps; no work-group size considered has a "
                     r"reduction at least that long", short.source)


ROW_MAPS = {  # a map whose element is a row, after reductions over it: kernel, numpy oracle
    "softmax_rows": (ml.softmax_rows, ml.np_softmax_rows),
    "softmax_rows_f32": (vision.softmax_rows_f32, vision.np_softmax_rows_f32),
    "l2_normalised_rows": (auto.l2_normalised_rows,
                           lambda m: m / (np.sqrt((m * m).sum(axis=1, keepdims=True)) + 1.0)),
    "short_normalised_rows": (auto.short_normalised_rows, lambda m: m / (1.0 + m.sum(axis=1, keepdims=True))),
}
# around a group's 256 lanes; for softmax also a row of 70,000, more than the local memory of
# Intel's CPU runtime (256 KiB) holds, so its exponentials take the fallback's global memory there
ROW_SHAPES = ((0, 5), (1, 1), (2, 255), (2, 256), (2, 257), (3, 1000), (40, 300))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ROW_MAPS)
def test_maps_of_rows_equal_reference_and_numpy(intel_cpu_context, name, device):
    kernel, oracle = ROW_MAPS[name]
    executable = kernel.with_options(opencl_device=DEVICES[device]).opencl_executable(intel_cpu_context)
    rng = np.random.default_rng(9)
    for rows, cols in ROW_SHAPES + (((1, 70_000),) if name.startswith("softmax") else ()):
        cols = 3 if name.startswith("short") else cols
        m = rng.standard_normal((rows, cols))
        m = m.astype(np.float32) if name.endswith("f32") else m
        got = executable(m)
        assert got.shape == (rows, cols)
        tol = dict(rtol=1e-5, atol=1e-6) if m.dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
        assert_close(got, np.asarray(kernel.reference(m)).reshape(rows, cols), **tol)
        assert_close(got, oracle(m), **tol)
        if name.startswith("softmax") and rows:  # the row's local copy where it fits, else the fallback
            ran = [launch.kernel for launch in executable.last_profile]
            assert len(ran) == 1 and ran[0].endswith("_fallback_k") == (cols == 70_000), (cols, ran)


def test_a_map_of_rows_gets_a_group_per_row_unless_rows_are_short():
    """Softmax's rows: 500 rows, 500 groups of 256, one launch (the default ran a row a work-item);
    the row's builds are the group's local loops."""
    for name in ("softmax_rows", "softmax_rows_f32", "l2_normalised_rows"):
        kernel = ROW_MAPS[name][0]
        artifact = kernel.opencl_artifact()
        # rows of 5,000: softmax's exponentials: one launch, or its fallback (test_a_row_intermediate_...)
        assert set(_work_at(artifact, 500, 5000)) == {(500 * 256, 256)}, name
        assert sum(not launch.fallback for launch in _running(artifact, 500, 5000)[0]) == 1, name
        assert _work_at(artifact, 500, 10) == [(512, 256)], name  # short rows: a work-item per row
        head = artifact.source[:artifact.source.index("typedef")]
        assert "map of reductions" in head and "the row's builds spread over the lanes" in head, name
        assert _work(kernel.with_options(auto_reductions=False).opencl_artifact(), 500) == [(512, 256)], name
    body = _kernel_text(ml.softmax_rows.opencl_artifact(), "ml_softmax_rows_k")
    # the exponentials and the row itself: local loops over the row, strided by the group's lanes
    assert len(re.findall(r"(\w+) = get_local_id\(0\); \1 < m_d1;", body)) == 2
    assert not re.search(r"(\w+) = 0; \1 < m_d1;", body)  # no loop over a whole row on one work-item
    before = ml.softmax_rows.with_options(auto_reductions=False).opencl_artifact().source
    assert len(re.findall(r"(\w+) = 0; \1 < m_d1;", before)) == 4
    short = auto.short_normalised_rows.opencl_artifact()
    assert _work(short, 500) == [(512, 256)]  # a work-item per row, in whole groups of 256
    assert "rows of 3 elements, known when compiling: a work-item per row" in short.source


def _kernel_text(artifact, name: str) -> str:
    """The OpenCL C of the kernel ``name`` in ``artifact``'s source, up to the next kernel."""
    start = artifact.source.index(f"__kernel void {name}(")
    end = artifact.source.find("__kernel void", start + 1)
    return artifact.source[start:end if end >= 0 else None]


@pytest.mark.parametrize("name", ["softmax_rows", "softmax_rows_f32"])
def test_a_row_intermediate_lives_in_local_memory_with_a_global_fallback(name):
    """Softmax's exponentials, which only their row's group reads: a __local array of a row, so the
    kernel's global memory traffic is the minimum, the input row read once (the max's loop stores
    each element it reads in that local row, which the exponentials then read and overwrite in
    place: dpia.stage_rows) and the result written once.  Its fallback, run where a row does not fit
    the device's local memory, keeps the exponentials in the output row itself: no scratch."""
    kernel = ROW_MAPS[name][0]
    artifact = kernel.opencl_artifact()
    # and a work-item per row where rows are short (test_opencl_row_variants), of the same condition
    preferred, fallback, short = artifact.launches
    assert not preferred.fallback and fallback.fallback and fallback.kernel == f"{preferred.kernel[:-2]}_fallback_k"
    assert preferred.when == fallback.when == sympy.Not(short.when) and short.kernel.endswith("_v1_k")
    local_of = lambda launch: [artifact.buffers[a] for a in launch.args  # noqa: E731
                               if a in artifact.buffers and artifact.buffers[a].role == "local"]
    temp_of = lambda launch: [artifact.buffers[a] for a in launch.args  # noqa: E731
                              if a in artifact.buffers and artifact.buffers[a].role == "temp"]
    assert temp_of(preferred) == []  # no global intermediate at all
    assert [str(b.count) for b in local_of(preferred) if not b.count.is_Integer] == ["m_d1"]  # one row
    # the fallback's exponentials: in the output row (f64), where each work-item reads back only its
    # own elements; f32's sum starts from e[0] and so reads its neighbour's e[k + 1]: a scratch row
    fallback_scratch = ["m_d0*m_d1"] if name.endswith("f32") else []
    assert [str(b.count) for b in temp_of(fallback)] == fallback_scratch
    assert all(b.count.is_Integer for b in local_of(fallback))  # the trees' arrays only
    text = _kernel_text(artifact, preferred.kernel)
    params = text[:text.index(")")]
    assert re.findall(r"__global (?:const )?\w+ \*restrict (\w+)", params) == ["m", "out", "fs_status"]
    # global memory: the input row read once (+ m[row][0], the max's init), the result row written once
    assert len(re.findall(r"\bm\[", text)) == 2 and len(re.findall(r"\bout\[", text)) == 1
    unstaged = kernel.with_options(stage_rows=False).opencl_artifact()
    before = _kernel_text(unstaged, preferred.kernel)
    assert len(re.findall(r"\bm\[", before)) == 3  # read by the max's loop and the exponentials' loop
    assert before.count("barrier(") == text.count("barrier(")  # staging needs no barrier of its own
    # a CPU's local memory is its cached RAM, where the second read finds the row the copy would be in
    cpu = DeviceDescription("a CPU", "cpu", 2, 8192, "global", 262144, 128, 16)
    on_cpu = kernel.with_options(opencl_device=cpu).opencl_artifact()
    assert len(re.findall(r"\bm\[", _kernel_text(on_cpu, on_cpu.launches[0].kernel))) == 3
    assert "barrier(CLK_GLOBAL_MEM_FENCE)" not in text
    # the fallback: the exponentials written into the output row and read back by the same work-items,
    # so no global barrier, where a scratch of rows x row length needed one
    back = _kernel_text(artifact, fallback.kernel)
    assert ("barrier(CLK_GLOBAL_MEM_FENCE)" in back) == bool(fallback_scratch)
    assert len(re.findall(r"\bout\[", back)) == (1 if fallback_scratch else 4)
    assert "barrier(CLK_GLOBAL_MEM_FENCE)" in _kernel_text(unstaged, fallback.kernel)
    assert [str(unstaged.buffers[a].count) for a in unstaged.launches[1].args
            if a in unstaged.buffers and unstaged.buffers[a].role == "temp"] == ["m_d0*m_d1"]
    head = artifact.source[:artifact.source.index("typedef")]
    assert "instead of " + preferred.kernel in head and "with an intermediate row in local memory" in head
    # no intermediate, but the row read by the norm's loop and by the result's: staged in a local
    # row of its own, with the kernel as it was (no local row) for the fallback
    l2_rows = auto.l2_normalised_rows.opencl_artifact()
    assert [launch.fallback for launch in l2_rows.launches] == [False, True, False]
    assert "intermediate row" not in l2_rows.source
    staged, unstaged = (_kernel_text(l2_rows, launch.kernel) for launch in l2_rows.launches[:2])
    assert len(re.findall(r"\bm\[", staged)) == 1 and len(re.findall(r"\bm\[", unstaged)) == 2


def test_a_cpu_folds_four_rows_at_once_in_vectors_of_its_own():
    """gemv on a CPU of 16-wide vectors: a work-item per 4 rows (dpia.unroll_jam), whose folds
    are one loop of n // 16 trips, each a vector load of each row and of x (no guard, no gather:
    all in range; x's 4 loads one after the optimising compiler's CSE), then each row's 16 lanes
    combined, then the n mod 16 scalar trips of the 4 rows in one loop; the rows past the last
    multiple of 4 one by one, each the loop of one row; the kernel's width hinted, so that the
    runtime does not vectorise across work-items; each loop's count computed once, before its
    loop."""
    cpu = DeviceDescription("a CPU", "cpu", 2, 8192, "global", 262144, 128, 16)
    artifact = auto.gemv_auto.with_options(opencl_device=cpu).opencl_artifact()
    kernel = artifact.source[artifact.source.index("__kernel"):]
    assert kernel.startswith("__kernel __attribute__((vec_type_hint(float16))) void")
    assert _work(artifact, 4098) == [(1280, 256)]  # 1,025 blocks, the last of 2 rows
    loops = re.findall(r"const int64_t (\w+) = fs_shift_floor_i64\(x_d0, 4\);\n\s*for \(int64_t (\w+) = 0; \2 < \1; "
                       r"\2\+\+\) \{\n((?:.*\n)*?)\s*\}", kernel)
    jammed, alone = (body.strip().splitlines() for _, _, body in loops)
    assert len(jammed) == 4 and all(line.count("vload16(") == 2 and "[" not in line for line in jammed)
    assert len(alone) == 1 and alone[0].count("vload16(") == 2
    rest = re.findall(r"const int64_t (\w+) = fs_mask_mod_i64\(x_d0, 15\);\n\s*for \(int64_t (\w+) = 0; \2 < \1; "
                      r"\2\+\+\) \{\n((?:.*\n)*?)\s*\}", kernel)
    assert [body.count("acc") for _, _, body in rest] == [8, 2]
    assert kernel.count("vload16(") == 10 and kernel.count("vstore16(") == 5
    assert "fs_checked" not in kernel  # the rows' indices need no overflow test
    # the GPU's source has neither the hint nor the counts before the loops, nor blocks of rows
    gpu = auto.gemv_auto.opencl_artifact().source
    assert "vec_type_hint" not in gpu and "fs_trips" not in gpu and "jammed" not in gpu


def test_jammed_rows_are_right_at_every_row_count(intel_cpu_context):
    """gemv with 4 rows a work-item on Intel's CPU device: 0 to 9 rows (no block, whole blocks,
    and 1 to 3 rows past them) of 1, 15, 16, 17 and 40 columns (no whole vector, whole vectors
    only, and both)."""
    gemv = auto.gemv_auto  # compiled for the context's device
    assert "jammed" in gemv.opencl_artifact(intel_cpu_context.devices[0]).source
    rng = np.random.default_rng(12)
    for rows in range(10):
        for cols in (1, 15, 16, 17, 40):
            m = rng.standard_normal((rows, cols)).astype(np.float32)
            x = rng.standard_normal(cols).astype(np.float32)
            got = gemv.opencl(m, x, context=intel_cpu_context)
            assert got.shape == (rows,)
            assert_close(got, _np_rows("gemv_auto", m, x), rtol=1e-4, atol=1e-4)


def test_a_cpu_folds_contiguous_blocks_in_vectors_of_its_own():
    """dot on a CPU of 16-wide vectors: each work-item folds a block of 4,096 consecutive elements
    (a group of 16 work-items 65,536), a step one test of its vector's last element and a vector
    load of each array, the tests of each lane only where that fails (the end of the array); the
    kernel's width hinted; the GPU's layout as before (strided shares, 4-wide vectors of the
    group's lanes)."""
    cpu = DeviceDescription("a CPU", "cpu", 2, 8192, "global", 262144, 128, 16)
    artifact = blas.dot_auto.with_options(opencl_device=cpu).opencl_artifact()
    kernel = artifact.source[artifact.source.index("__kernel"):]
    assert kernel.startswith("__kernel __attribute__((vec_type_hint(float16))) void")
    assert "each of its 16 work-items folding a contiguous block" in artifact.source
    assert _work(artifact, 2 ** 20 + 1) == [(17 * 16, 16)]
    bulk = re.search(r"for \(int64_t q = 0; q < 256; q\+\+\) \{\n\s*if \(([^\n]*)\) \{\n((?:.*\n){5})", kernel)
    assert bulk and bulk.group(1).count("<") == 1 and bulk.group(2).count("vload16(") == 2
    assert "[" not in bulk.group(2) and "fs_checked" not in kernel
    gpu = blas.dot_auto.opencl_artifact()
    assert "vec_type_hint" not in gpu.source and _work(gpu, 2 ** 20) == [(64 * 256, 256)]


def test_a_short_fold_known_when_compiling_stays_sequential():
    notes = _trace(auto.sum_first_ten).last("auto_reductions").notes
    assert len(notes) == 1 and "10 iterations, known when compiling" in notes[0]
    assert _work(auto.sum_first_ten.opencl_artifact(), 100) == [(1, 1)]


def test_a_fold_with_loops_in_its_body_gets_whole_elements_per_lane():
    """GMM's fold over the points (each point a build over the components): scalar lanes, one
    point a lane a round, so 10,000 points take 40 groups of 256 (not 1 group of 16 a lane)."""
    from corpus import gmm

    notes = _trace(gmm.gmm_objective).last("auto_reductions").notes
    assert "loops of its own" in notes[0] and "local=256,width=1,items=1" in notes[0]
    work = _work(gmm.gmm_objective.opencl_artifact(), 10_000)
    first = work.index((40 * 256, 256))
    assert work[first + 1] == (256, 256)


def test_annotated_programs_are_left_as_written():
    """blas.dot's strategy is the user's: the pass changes nothing and the source says nothing new."""
    trace = _trace(blas.dot)
    assert trace.last("auto_reductions").program is trace.last("optimise")
    assert trace.last("auto_reductions").notes == ()
    assert "Strategy:" not in blas.dot.opencl_artifact().source
    trace = _trace(blas.gemv)  # a work-group per row, written by the user
    assert trace.last("auto_reductions").program is trace.last("optimise")
    assert "Strategy:" not in blas.gemv.opencl_artifact().source


def test_dot_auto_has_the_hand_written_shape():
    """Unannotated, dot runs as blas.dot does: the same launches at every size."""
    for n in (0, 5000, 2 ** 24, 2 ** 28):
        assert _work(blas.dot_auto.opencl_artifact(), n) == _work(blas.dot.opencl_artifact(), n)


def test_dot_auto_and_asum_auto_equal_the_oracles(intel_cpu_context):
    rng = np.random.default_rng(5)
    for n in (0, 1, 4097, 300_001):
        x, y = (rng.uniform(-1, 1, n).astype(np.float32) for _ in range(2))
        assert np.isclose(blas.dot_auto.opencl(x, y, context=intel_cpu_context), blas.np_dot(x, y), rtol=1e-4, atol=1e-3)
        assert np.isclose(blas.dot_auto.opencl(x, y, context=intel_cpu_context), blas.dot_auto.reference(x, y),
                          rtol=1e-4, atol=1e-3)
        assert np.isclose(blas.asum_auto.opencl(x, context=intel_cpu_context), blas.np_asum(x), rtol=1e-4, atol=1e-3)


ONE_LAUNCH = {  # kernel: (its inputs at length n, the oracle)
    blas.dot_auto: (lambda rng, n: tuple(rng.uniform(-1, 1, n).astype(np.float32) for _ in range(2)), blas.np_dot),
    auto.sum_d: (lambda rng, n: (rng.uniform(-1, 1, n),), lambda x: 1.5 + float(np.sum(x))),
    auto.max_index: (lambda rng, n: (rng.integers(-10 ** 6, 10 ** 6, n, dtype=np.int64),),
                     lambda x: int(np.max(x, initial=-1))),
}


@pytest.mark.parametrize("kernel", ONE_LAUNCH, ids=lambda k: k.name)
def test_a_two_phase_reduction_is_one_launch(kernel, intel_cpu_context):
    """One launch per reduction (dpia.hoist_opencl's, for hand-written ones too: test_opencl's
    blas tests), Float, Double or Index: at sizes 0, 1, below one group and of many groups the
    result is the oracle's, a
    repeated call gives the same bits (the partials combined in a fixed order), and the ticket
    counter is back at 0 after each call (dot_auto with launches=2: two launches, the same bits)."""
    import pyopencl as cl

    inputs, oracle = ONE_LAUNCH[kernel]
    executable = kernel.opencl_executable(intel_cpu_context)
    two = executable
    if kernel is blas.dot_auto:
        two = kernel.with_options(opencl_reduction=OpenCLReduction(launches=2)).opencl_executable(intel_cpu_context)
        assert len(two.artifact.launches) == 2
    assert len(executable.artifact.launches) == 1
    counter, = (b.name for b in executable.artifact.buffers.values() if b.role == "counter")
    rng = np.random.default_rng(9)
    for n in (0, 1, 1000, 300_001, 5):
        args = inputs(rng, n)
        got = executable(*args)
        assert len(executable.last_profile) == 1  # the launches this call enqueued
        assert executable(*args) == got and two(*args) == got
        tickets = np.ones(1, np.int32)
        cl.enqueue_copy(executable.queue, tickets, executable.temp_buffer(counter))
        assert tickets[0] == 0
        assert_close(got, kernel.reference(*args), rtol=1e-4, atol=1e-3)
        assert np.isclose(got, oracle(*args), rtol=1e-4, atol=1e-3)


def test_a_reduction_is_one_launch_where_both_phases_bind_a_size_of_their_own():
    """GMM's Wishart prior in the whole objective: the groups' phase and the combination's tail
    each bind length(icf) as a variable of their own, which is no handover between them: one
    launch still, not the groups then a launch of one group."""
    from corpus import adbench_gmm

    launches = [launch for launch in adbench_gmm.gmm_full_objective.opencl_artifact().launches if not launch.fallback]
    # 8 launches for each nesting of sum_qs' map of rows of d, short rows and long (test_opencl_row_variants),
    # and no launch of one work-item for its constant -0.5·n·d·log 2π
    assert sorted(collections.Counter(launch.when for launch in launches).values()) == [8, 8]
    assert all(launch.global_size != (1,) for launch in launches)
    assert not any(str(launch.global_size[0]) == "256" for launch in launches)  # no launch of one group of 256


def test_a_scalar_of_sizes_is_computed_where_it_is_used_not_in_a_launch_of_its_own(intel_cpu_context):
    """``offset = -0.5 · length(x) · w + 1`` before a reduction: floating-point arithmetic of a
    size and a scalar parameter, which the reduction's last group computes where it multiplies
    the total (dpia.hoist_opencl), so the call is one launch, not a launch of one work-item and
    then the reduction's; the value is the reference's and numpy's at every size."""
    executable = auto.offset_sum.opencl_executable(intel_cpu_context)
    assert len(executable.artifact.launches) == 1
    assert not any(name.startswith("offset") for name in executable.artifact.buffers)  # nor a buffer for it
    rng = np.random.default_rng(31)
    for n in (0, 1, 5, 1023, 4097, 100_003):
        x, w = rng.standard_normal(n), float(rng.uniform(-2, 2))
        got = executable(x, w)
        assert len(executable.last_profile) == 1
        expected = float(np.sum(x)) * (-0.5 * n * w + 1.0)
        assert_close(got, auto.offset_sum.reference(x, w), rtol=1e-11, atol=1e-11 * max(1.0, n))
        assert_close(got, expected, rtol=1e-11, atol=1e-11 * max(1.0, n))


def test_a_failed_check_in_one_group_fails_the_call_and_leaves_the_counter_at_zero(intel_cpu_context):
    """An index out of range in one group of a one-launch reduction: the last group combines
    nothing (the status says a check failed), the call raises, and the counter is back at 0: the
    next call is right."""
    executable = auto.gathered_sum.opencl_executable(intel_cpu_context)
    v, at = np.arange(10.0), np.random.default_rng(2).integers(0, 10, 100_000)
    bad = at.copy()
    bad[77_777] = 10
    for _ in range(2):
        with pytest.raises(IndexError, match="gathered_sum"):
            executable(v, bad)
        assert executable(v, at) == float(v[at].sum())


def test_a_device_without_global_atomics_gets_two_launches(monkeypatch, intel_cpu_context):
    """Decided at build: 32-bit global atomics are core from OpenCL 1.1, an extension in 1.0;
    without them kernel.opencl compiles the reduction with launches=2, and the launcher refuses
    the one-launch artifact."""
    from types import SimpleNamespace

    from fsmooth import opencl_device
    from fsmooth.opencl_device import DeviceCapabilityError, global_atomics, require_capabilities

    old = SimpleNamespace(version="OpenCL 1.0 FULL_PROFILE", extensions="cl_khr_fp64", name="old")
    assert not global_atomics(old) and global_atomics(intel_cpu_context.devices[0])
    assert global_atomics(SimpleNamespace(version="OpenCL 1.0", extensions="cl_khr_global_int32_base_atomics"))
    with pytest.raises(DeviceCapabilityError, match="launches=2"):
        require_capabilities(auto.sum_f.opencl_artifact(), old)
    monkeypatch.setattr(opencl_device, "global_atomics", lambda device: False)
    kernel = auto.sum_f.with_options(opencl_reduction=OpenCLReduction(groups=8))  # a kernel of its own
    executable = kernel.opencl_executable(intel_cpu_context)
    assert len(executable.artifact.launches) == 2 and not executable.artifact.needs_atomics
    x = np.arange(100_000, dtype=np.float32)
    assert executable(x) == pytest.approx(float(x.sum()), rel=1e-6)


def test_explain_shows_the_strategy_and_why(tmp_path, capsys):
    assert main(["explain", f"{blas.__file__}:dot_auto", "--target", "opencl", "--stage", "opencl"]) == 0
    out = capsys.readouterr().out
    head = out[:out.index("typedef")]
    assert "reduction of + on Float" in head and "min(ceil(Min(x_d0, y_d0)/16384), 1024) work-groups" in head
    assert "Launches" in head and "the work-group that finishes last" in head
    assert "Launches (global size, work-group size):\n * - blas_dot_auto_k: 256*Max(1, " in head
    assert head.count("_k: ") == 1  # one launch, of one group at least


def test_tuning_changes_the_shape():
    tuning = OpenCLReduction(local=64, width=2, items=4, groups=8)
    artifact = auto.sum_f.with_options(opencl_reduction=tuning).opencl_artifact()
    assert _work(artifact, 10 ** 6) == [(8 * 64, 64)]  # 8 groups (the cap), of 64
    assert _work(artifact, 1000) == [(2 * 64, 64)]  # ceil(1000 / (64·2·4)) groups
    assert "local=64,width=2,items=4,groups=8,launches=1" in artifact.source
    # launches=2: a second launch of one group combines the partials
    two = auto.sum_f.with_options(opencl_reduction=OpenCLReduction(local=64, width=2, items=4, groups=8, launches=2))
    assert _work(two.opencl_artifact(), 1000) == [(2 * 64, 64), (64, 64)]


def test_tuning_from_the_environment(monkeypatch):
    monkeypatch.setenv("FSMOOTH_OPENCL_REDUCTION", "local=128, groups=512")
    assert default_options().opencl_reduction == OpenCLReduction(local=128, width=4, items=16, groups=512, launches=1)
    monkeypatch.setenv("FSMOOTH_OPENCL_REDUCTION", "local=100")
    with pytest.raises(ValueError, match="power of two"):
        default_options()
    with pytest.raises(ValueError, match="expected NAME=INT"):
        OpenCLReduction.parse("lanes=4")


def test_small_sizes_under_oclgrind_have_no_race_or_out_of_bounds():
    """Several groups at small sizes (small shapes), a tuple state, an integer state, the default
    shape once, maps of reductions; the 4-group shapes called small, large, small, so that their
    hoisted partials grow and are then reused."""
    ok, report = run_under_oclgrind("""
        import numpy as np
        import opencl_auto_kernels as auto
        from corpus import ml, vision
        from fsmooth.options import OpenCLReduction
        from test_corpus import assert_close
        rng = np.random.default_rng(3)

        def check(kernel, *args, **tuning):
            if tuning:
                kernel = kernel.with_options(opencl_reduction=OpenCLReduction(**tuning))
            assert_close(kernel.opencl(*args), kernel.reference(*args), rtol=1e-5, atol=1e-5)

        for n, width in ((0, 2), (5, 4), (300, 4), (1, 4)):  # 300: 4 groups (the cap) of 8 lanes
            x = rng.standard_normal(n)
            check(auto.max_sum, x, local=8, width=width, items=2, groups=4)
            check(auto.sum_f, x.astype(np.float32), local=8, width=width, items=2, groups=4)
            check(auto.max_index, (x * 1000).astype(np.int64), local=8, width=width, items=2, groups=4)
        check(auto.sum_d, rng.standard_normal(37))
        gathered = auto.gathered_sum.with_options(opencl_reduction=OpenCLReduction(local=8, width=2, items=2, groups=4))
        try:  # a group fails its check: no partial from it, and the last group combines nothing
            gathered.opencl(np.ones(4), np.array([0, 1, 2, 3] * 20 + [4]))
        except IndexError:
            pass
        else:
            raise AssertionError("the index out of range went unnoticed")
        assert gathered.opencl(np.ones(4), np.array([0, 1, 2, 3] * 20)) == 80.0
        m = rng.standard_normal((3, 37)).astype(np.float32)
        check(auto.row_logsumexp, m, local=8)
        check(auto.gemv_auto, m, rng.standard_normal(37).astype(np.float32), local=8)
        check(vision.softmax_rows_f32, m, local=8)  # rows: 3 groups of 8 lanes, rows of 37
        # a row of 4,200 doubles is more than Oclgrind's 32 KiB of local memory: the fallback
        wide = ml.softmax_rows.with_options(opencl_reduction=OpenCLReduction(local=8))
        x = rng.standard_normal((1, 4200))
        assert_close(wide.opencl(x), wide.reference(x), rtol=1e-12, atol=1e-14)
        assert [launch.kernel for launch in wide.opencl_executable().last_profile] == ["ml_softmax_rows_fallback_k"]
        check(auto.l2_normalised_rows, rng.standard_normal((2, 20)), local=8)
        # a CPU's choices (fsmooth.cost_model): softmax a group of one 4-wide vector per row, gemv a
        # work-item per 4 rows folding them in 4-wide vectors of their own (rows of 37: 9 vectors
        # and 1, of 3: no whole vector; 3 rows: the last rows alone, 9 rows: 2 blocks and 1)
        from fsmooth.cost_model import DeviceDescription
        cpu = DeviceDescription("a CPU", "cpu", 2, 8192, "global", 262144, 128, 4)
        softmax = vision.softmax_rows_f32.with_options(opencl_device=cpu)
        assert "each of its 4 lanes" in softmax.with_options(opencl_reduction=OpenCLReduction(local=32)).opencl_artifact().source
        check(softmax, m, local=32)
        gemv = auto.gemv_auto.with_options(opencl_device=cpu)
        assert "jammed" in gemv.opencl_artifact().source
        assert "each reduction in 4-wide vectors of its own" in gemv.opencl_artifact().source
        check(gemv, m, rng.standard_normal(37).astype(np.float32))
        check(gemv, m[:, :3], rng.standard_normal(3).astype(np.float32))
        check(gemv, rng.standard_normal((9, 37)).astype(np.float32), rng.standard_normal(37).astype(np.float32))
        check(auto.row_sums.with_options(opencl_device=cpu), rng.standard_normal((2, 13)))  # doubles: 2 a vector
        # a CPU's folds: each work-item a block of 4,096 elements, a group of 4 of them 16,384 (3
        # groups for 40,000, the last partial), in 4 floats' vectors (2 doubles, integers alone)
        for n in (0, 5, 40_000):
            x = rng.standard_normal(n)
            check(auto.sum_f.with_options(opencl_device=cpu), x.astype(np.float32))
            check(auto.max_sum.with_options(opencl_device=cpu), x)
            check(auto.max_index.with_options(opencl_device=cpu), (x * 1000).astype(np.int64))
    """, timeout=900)
    assert ok, report


def test_staged_rows_under_oclgrind_have_no_race_or_out_of_bounds():
    """dpia.stage_rows at the default group of 256 lanes: softmax (f64, f32) at row lengths 1, 255,
    256, 257 in the kernel with the staged row (0 rows too; a row of 0 is an error: the max starts
    from its element 0), and past Oclgrind's 32 KiB of local memory in
    the fallback (f64: its exponentials in the output row; f32: in a scratch row), and the kernels
    that got a staged row of their own (l2_normalised_rows, row_logsumexp) and their fallbacks."""
    ok, report = run_under_oclgrind("""
        import numpy as np
        import opencl_auto_kernels as auto
        from corpus import ml, vision
        from test_corpus import assert_close
        rng = np.random.default_rng(5)

        def check(kernel, m, oracle, ran):
            got = kernel.opencl(m)
            tol = dict(rtol=1e-5, atol=1e-6) if m.dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
            assert_close(got, np.asarray(kernel.reference(m)).reshape(got.shape), **tol)
            assert_close(got, oracle(m), **tol)
            kernels = [launch.kernel for launch in kernel.opencl_executable().last_profile]
            assert [name.endswith("_fallback_k") for name in kernels] == ([ran == "fallback"] if len(m) else []), kernels

        for kernel in (ml.softmax_rows, vision.softmax_rows_f32):  # rows of 0: no m[i][0], the max's init
            try:
                kernel.opencl(np.zeros((2, 0), np.float32 if kernel is vision.softmax_rows_f32 else np.float64))
            except ValueError as err:
                assert "read at index 0" in str(err)
            else:
                raise AssertionError("a row of length 0 went unnoticed")
        for cols in (1, 255, 256, 257):
            m = rng.standard_normal((2, cols))
            check(ml.softmax_rows, m, ml.np_softmax_rows, "staged")
            check(vision.softmax_rows_f32, m.astype(np.float32), vision.np_softmax_rows_f32, "staged")
        check(ml.softmax_rows, np.zeros((0, 3)), ml.np_softmax_rows, "staged")
        check(ml.softmax_rows, rng.standard_normal((1, 4200)), ml.np_softmax_rows, "fallback")
        check(vision.softmax_rows_f32, rng.standard_normal((1, 8400)).astype(np.float32),
              vision.np_softmax_rows_f32, "fallback")
        l2 = lambda m: m / (np.sqrt((m * m).sum(axis=1, keepdims=True)) + 1.0)
        lse = lambda m: np.log(np.exp(m - m.max(axis=1, keepdims=True)).sum(axis=1)) + m.max(axis=1)
        for cols, ran in ((257, "staged"), (4200, "fallback")):
            check(auto.l2_normalised_rows, rng.standard_normal((2, cols)), l2, ran)
            check(auto.row_logsumexp, rng.standard_normal((2, 2 * cols)).astype(np.float32), lse, ran)
    """, timeout=900)
    assert ok, report


def test_a_staged_row_shares_the_row_it_becomes_only_behind_a_barrier(intel_cpu_context):
    """Softmax's staged row becomes its exponentials' row (one local row, as f32's, whose sum reads
    e[k + 1] across the work-items and is followed by its tree's barrier); reversed softmax's last
    loop reads the exponentials across the work-items with no barrier after it, before the group's
    next row would be staged into them: a staged row of its own, two local rows, the fallback's
    scratch kept.  Each against the reference and numpy, with the local rows and in the fallback."""
    reversed_rows = auto.reversed_softmax_rows
    artifact = reversed_rows.opencl_artifact()
    rows = lambda launch: sorted(str(artifact.buffers[a].count) for a in launch.args  # noqa: E731
                                 if a in artifact.buffers and artifact.buffers[a].role in ("local", "temp")
                                 and not artifact.buffers[a].count.is_Integer)
    # the group per row's two local rows, its fallback's scratch, and the short rows' work-item per
    # row (test_opencl_row_variants) with its exponentials in a scratch too
    assert [rows(launch) for launch in artifact.launches] == [["m_d1", "m_d1"], ["m_d0*m_d1"], ["m_d0*m_d1"]]
    text = _kernel_text(artifact, artifact.launches[0].kernel)
    assert len(re.findall(r"\bm\[", text)) == 2  # the row once, and m[row][0]
    # compiled for a GPU (a CPU's local memory is its RAM: nothing staged there), run on Intel's CPU
    executable = reversed_rows.with_options(opencl_device=GENERIC_GPU).opencl_executable(intel_cpu_context)
    rng = np.random.default_rng(11)
    for shape, ran in zip(((3, 1000), (1, 70_000), (3, 257)), artifact.launches):
        m = rng.standard_normal(shape)
        got = executable(m)
        assert_close(got, np.asarray(reversed_rows.reference(m)).reshape(shape), rtol=1e-12, atol=1e-14)
        assert_close(got, ml.np_softmax_rows(m)[:, ::-1], rtol=1e-12, atol=1e-14)
        assert [launch.kernel for launch in executable.last_profile] == [ran.kernel]


def _lane_trip_counts(source: str, kernel: str) -> list[str]:
    """The counts of the loops over a lane's strided share in ``kernel``'s text: the loop of j
    whose elements are 256·j + t."""
    body = source[source.index(f"__kernel void {kernel}("):]
    body = body[:body.index("\n}\n")]
    return re.findall(r"for \(int64_t j\w* = 0; j\w* < (.+?); j\w*\+\+\) \{", body)


# softmax's max over the row, then its sum of the exponentials 1 .. n-1 (the first is the init)
@pytest.mark.parametrize("kernel, name, extents", [
    (vision.softmax_rows_f32, "vision_softmax_rows_f32_k", ["m_d1", "m_d1 - 1"]),
    (blas.gemv_auto, "blas_gemv_auto_k", ["fs_min_i64(m_d1, x_d0)"])])
def test_a_lane_runs_only_the_trips_of_its_own_elements(kernel, name, extents):
    """A lane of a group per row folds the elements t, t + 256, ... below n: its loop runs the
    ⌈(n − t)/256⌉ trips whose element exists and tests none (``emit.guarded_trips``), where it ran
    ⌈n/256⌉ and tested each: over the 256 lanes, n trips in all, not 256·⌈n/256⌉."""
    source = kernel.with_options(opencl_device=GENERIC_GPU).opencl_artifact().source
    counts = _lane_trip_counts(source, name)
    assert len(counts) == len(extents), counts
    helpers = {"fs_min_i64": min, "fs_shift_floor_i64": lambda a, k: a >> k}
    for count, extent in zip(counts, extents):
        for n in (0, 1, 2, 255, 256, 257, 1000, 8192):
            sizes = dict(helpers, m_d1=n, x_d0=n + 3)
            trips = [max(0, eval(count, dict(sizes, **{lane: t for lane in re.findall(r"\bt\w*", count)})))
                     for t in range(256)]
            assert sum(trips) == max(0, eval(extent, sizes)), (count, n)
        body = source[source.index(count):]
        assert "if (" not in body[:body.index("}")], "the lane's loop tests nothing"
