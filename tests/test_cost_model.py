"""The cost model that chooses the OpenCL strategy of unannotated programs (``fsmooth.cost_model``):
its choice for (kernel, sizes, device) triples; on the generic GPU the choices the rules made
before it; on a CPU a work-item per 4 rows for gemv, jammed, their folds in 16-wide vectors of
its own, and a group of one SIMD vector per row for softmax; each executable compiled for its own
device; explain's candidates and costs.  The results
of the chosen variants are checked against the reference and numpy in tests/test_opencl_auto.py,
for both descriptions."""
from __future__ import annotations

import numpy as np
import pytest

import opencl_auto_kernels as auto
from corpus import blas, ml
from fsmooth.cli import main
from fsmooth.cost_model import GENERIC_GPU, DeviceDescription, Rows, choose_fold, choose_rows, group_sizes
from fsmooth.opencl_device import describe
from test_corpus import assert_close
from test_opencl_auto import _work

# Intel's CPU runtime on this machine's 2-core AVX-512 Xeon, as describe() reads it
INTEL_CPU = DeviceDescription("Intel CPU", "cpu", compute_units=2, max_work_group=8192, local_memory="global",
                              local_memory_bytes=256 * 1024, work_group_multiple=128, simd_width=16)


def _launched(kernel, device, n: int) -> list:
    """(work-items, work-group size) of each launch that runs at size ``n`` (every size ``n``: its
    condition holds, ``Launch.when``) but the fallbacks (a softmax row too long for local memory:
    dpia.hoist_opencl)."""
    artifact = kernel.with_options(opencl_device=device).opencl_artifact()

    def runs(launch) -> bool:
        return launch.when is None or bool(launch.when.subs({s: n for s in launch.when.free_symbols}))

    return [w for w, launch in zip(_work(artifact, n), artifact.launches) if not launch.fallback and runs(launch)]


def _strategy(kernel, device) -> str:
    source = kernel.with_options(opencl_device=device).opencl_artifact().source
    return source[:source.index("Launches")]


def test_the_generic_gpu_makes_the_rules_choices():
    """A group of 256 per row for gemv and softmax (rows of 500, long: symbolic rows are chosen
    for at the call, test_opencl_row_variants), a work-item per row for rows of 10 and of 3, two-phase
    for a symbolic fold, one work-item for a fold of 10."""
    assert _launched(auto.gemv_auto, GENERIC_GPU, 500) == [(500 * 256, 256)]
    assert _launched(ml.softmax_rows, GENERIC_GPU, 500) == [(500 * 256, 256)]
    assert _launched(auto.gemv_auto, GENERIC_GPU, 10) == [(256, 256)]
    assert _launched(ml.softmax_rows, GENERIC_GPU, 10) == [(256, 256)]
    assert _launched(auto.short_rows, GENERIC_GPU, 500) == [(512, 256)]
    assert _launched(auto.sum_f, GENERIC_GPU, 2 ** 20) == [(64 * 256, 256)]  # one launch: the last group combines
    assert _launched(auto.sum_first_ten, GENERIC_GPU, 100) == [(1, 1)]
    # no device named: the generic GPU, the same source
    assert auto.gemv_auto.opencl_artifact().source == auto.gemv_auto.with_options(opencl_device=GENERIC_GPU).opencl_artifact().source


def test_a_cpu_gets_a_work_item_per_four_rows_for_gemv_and_a_vector_group_per_row_for_softmax():
    """gemv: each work-item streams 4 rows through its cache in 16-wide vectors of its own, x
    loaded once for the 4, and writes 4 scalars (with the runtime's vectors across work-items
    instead, each lane gathers its row: twice the steps); softmax writes a row, which a work-item
    per row scatters: a group of 16 (one AVX-512 vector) per row."""
    gemv = _strategy(auto.gemv_auto, INTEL_CPU)
    assert "a work-item per 4 elements, unrolled and jammed" in gemv and "16-wide vectors of its own" in gemv
    assert ("work-item per 4 elements jammed in 16-wide vectors ≈ 8.44e+07 (chosen), work-item per element in "
            "16-wide vectors ≈ 1.35e+08, work-group per element of 16 ≈ 1.36e+08" in gemv
            and "work-item per element ≈ 2.68e+08" in gemv)
    assert _launched(auto.gemv_auto, INTEL_CPU, 500) == [(256, 256)]  # 125 blocks of 4 rows
    softmax = _strategy(ml.softmax_rows, INTEL_CPU)
    assert "each of its 16 lanes" in softmax and "work-group per element of 16 ≈ 5.42e+08 (chosen)" in softmax
    assert _launched(ml.softmax_rows, INTEL_CPU, 500) == [(500 * 16, 16)]
    # a long fold is still two-phase on the CPU: both cores, not one (groups of 16 work-items,
    # each its own 16-wide vectors: test_opencl_auto's contiguous blocks)
    assert "two-phase ≈ 8.27e+03 (chosen)" in _strategy(blas.dot_auto, INTEL_CPU)


def test_rows_choices_follow_the_sizes():
    """Known sizes: on the GPU short rows (16) stay a work-item each, long ones (4096) get a
    group; a few long rows get a group on the CPU too (32 lanes would idle with a work-item per
    row), many get a work-item each."""
    def chosen(device, elements, n):
        return choose_rows(Rows(elements, (n,), None, 0, 4), device, 256).chosen

    assert chosen(GENERIC_GPU, 10 ** 6, 16).strategy == "work-item per element"
    assert chosen(GENERIC_GPU, 10 ** 6, 4096).local == 256
    assert chosen(INTEL_CPU, 2, 10 ** 6).local == 16
    assert chosen(INTEL_CPU, 10 ** 5, 4096).strategy == "work-item per element"
    # a fold of 100 known when compiling: one work-item; of 10**6: two-phase
    assert choose_fold(100, GENERIC_GPU, 256, 4, 16, 1024).chosen.strategy == "one work-item"
    assert choose_fold(10 ** 6, INTEL_CPU, 256, 4, 16, 1024).chosen.strategy == "two-phase"


def test_a_cpu_folds_rows_in_vectors_of_its_own_where_they_are_long_and_read_along():
    """Rows read along their fold's index (``Rows.contiguous``): 16 floats or 8 doubles a vector
    where the rows are long (4096); rows of 16 stay a work-item's scalars (the lanes' combination
    would cost as much as the fold); not on a GPU, not for rows that write a row, not where the
    reads are not along the rows (a column sum: the runtime's lanes then read neighbours)."""
    def chosen(device, n, elem_bytes=4, contiguous=True, row_builds=0):
        return choose_rows(Rows(10 ** 5, (n,), 4096 if row_builds else None, row_builds, elem_bytes, contiguous),
                           device, 256).chosen

    assert (chosen(INTEL_CPU, 4096).strategy, chosen(INTEL_CPU, 4096).width) == ("work-item per element", 16)
    assert chosen(INTEL_CPU, 4096, elem_bytes=8).width == 8
    assert chosen(INTEL_CPU, 16).width == 1
    assert chosen(INTEL_CPU, 4096, row_builds=1).width == 1
    assert chosen(GENERIC_GPU, 4096).width == 1
    assert chosen(INTEL_CPU, 4096, contiguous=False).strategy == "work-item per element"
    for kernel in (auto.column_sums, auto.row_index_max):  # reads across the rows; integers
        assert "vectors of its own" not in _strategy(kernel, INTEL_CPU)
    assert "in 16-wide vectors of its own" in _strategy(auto.row_logsumexp, INTEL_CPU)  # max, then + of exp


def test_a_cpu_jams_rows_whose_folds_share_a_read():
    """gemv's fold reads its row and x, which every row shares: on a CPU 4 rows a work-item,
    jammed (x loaded once for the 4), is the cheapest; rows that share nothing (row sums,
    logsumexp) get no such candidate, and a GPU none at all."""
    def candidates(device, shared):
        return choose_rows(Rows(10 ** 5, (4096,), None, 0, 4, True, 1, shared), device, 256).candidates

    jammed = candidates(INTEL_CPU, 1)[0]
    assert (jammed.strategy, jammed.width, jammed.jam) == ("work-item per element", 16, 4)
    unjammed = next(c for c in candidates(INTEL_CPU, 1) if c.width == 16 and c.jam == 1)
    assert jammed.cost < unjammed.cost
    assert all(c.jam == 1 for c in candidates(INTEL_CPU, 0))
    assert all(c.jam == 1 for c in candidates(GENERIC_GPU, 1))
    assert "work-item per 4 elements jammed in 16-wide vectors" in _strategy(blas.gemv_auto, INTEL_CPU)
    for kernel in (auto.row_sums, auto.row_logsumexp):
        assert "jammed" not in _strategy(kernel, INTEL_CPU)


def test_group_sizes_are_the_tuning_on_a_gpu_and_vector_multiples_on_a_cpu():
    assert group_sizes(GENERIC_GPU, 256) == (256,)
    assert group_sizes(INTEL_CPU, 256) == (256, 16, 32, 64, 128)
    assert group_sizes(INTEL_CPU, 16) == (16,)
    with pytest.raises(ValueError, match="kind"):
        DeviceDescription("x", "fpga", 1, 1, "global", 1, 1, 1)


def test_an_executable_is_compiled_for_its_device(intel_cpu_context):
    """The Intel CPU context gets the CPU's choices (a work-item per 4 rows for gemv), with the
    same results as the GPU's choice and numpy."""
    device = describe(intel_cpu_context.devices[0])
    assert device.kind == "cpu" and device.local_memory == "global" and device.simd_width >= 4
    executable = auto.gemv_auto.opencl_executable(intel_cpu_context)
    assert "a work-item per 4 elements, unrolled and jammed" in executable.artifact.source
    rng = np.random.default_rng(3)
    a, x = rng.standard_normal((300, 700)).astype(np.float32), rng.standard_normal(700).astype(np.float32)
    got = executable.call(a, x)
    gpu_choice = auto.gemv_auto.with_options(opencl_device=GENERIC_GPU).opencl(a, x, context=intel_cpu_context)
    assert_close(got, a.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)
    assert_close(gpu_choice, got, rtol=1e-4, atol=1e-4)


def test_explain_prints_the_candidates_their_costs_and_the_choice(capsys):
    status = main(["explain", "opencl_auto_kernels:gemv_auto", "--target", "opencl", "--stage", "opencl"])
    out, _ = capsys.readouterr()
    assert status == 0
    assert ("cost model on generic GPU (gpu, 132 compute units, 270336 lanes), symbolic (taken as 65536) "
            "elements, reductions over symbolic (taken as 65536): work-group per element of 256 ≈ 1.94e+04 "
            "(chosen), work-item per element ≈ 5.25e+05 lane steps") in out


def test_explain_for_the_device_here(capsys, intel_cpu_context):
    """``--opencl-device here``: the strategy for the device fsmooth chooses on this machine (Intel's
    CPU runtime where it is installed): gemv a work-item per row, in vectors of its own."""
    from fsmooth.opencl_device import default_context

    if "Intel" not in default_context().devices[0].platform.name:
        pytest.skip("fsmooth's default device here is not Intel's CPU runtime")
    status = main(["explain", "opencl_auto_kernels:gemv_auto", "--target", "opencl", "--stage", "opencl",
                   "--opencl-device", "here"])
    out, _ = capsys.readouterr()
    device = default_context().devices[0].name.strip()  # the CPU's name: Intel's or AMD's
    assert status == 0 and "a work-item per 4 elements, unrolled and jammed" in out and f"(cost model on {device}" in out
    assert "work-group per element of 16 ≈" in out


def test_a_group_size_needs_a_reduction_that_long_and_local_memory_for_its_trees():
    """Rows of 10 known when compiling: no group of 16 (every lane would fold them alike); trees
    of 256 doubles (4 KiB a reduction) do not fit 2 KiB of local memory."""
    sizes = {c.local for c in choose_rows(Rows(None, (10,), None, 0, 8), INTEL_CPU, 256).candidates}
    assert sizes == {None}
    small = DeviceDescription("small", "gpu", 1, 1024, "scratchpad", 2048, 32, 32)
    assert [c.strategy for c in choose_rows(Rows(None, (None,), None, 0, 8), small, 256).candidates] == ["work-item per element"]
    assert choose_rows(Rows(None, (None,), None, 0, 8), small, 64).chosen.local == 64
