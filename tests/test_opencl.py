"""The OpenCL back end (dpia.codegen_opencl, hoist_opencl, strategy_check; fsmooth.strategies):
the whole corpus and the BLAS kernels through ``kernel.opencl`` on a CPU OpenCL device against
the reference, every strategy under Oclgrind's race and bounds checks, the strategy errors with
their locations, and the hoisted buffers in the artifact."""
from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import blas
from fsmooth.dpia import phrases as ph
from fsmooth.dpia.strategy_check import check_passive
from fsmooth import Array, Float, ifold, length
from fsmooth.errors import Loc
from fsmooth.opencl_device import DeviceCapabilityError
from fsmooth.shape.sizes import size_symbol
from fsmooth.strategies import Strategy
from fsmooth.types import Double
from opencl_oclgrind import run_under_oclgrind
from test_corpus import CASES, PARAMS, arguments, assert_close, check_compiled, check_result_type, with_rows_of

ONE_VARIANT = 1  # variants per corpus case on the default device: the smallest (every size: on Intel's, below)


@pytest.fixture(scope="module")
def context(opencl_context):
    return opencl_context


def _fp64(context) -> bool:
    return bool(context.devices[0].double_fp_config)


CORPUS = [pytest.param(case, variant, id=f"{case.kernel.name}-{variant}-{i}")
          for i, case in enumerate(CASES) for variant in case.variants[:ONE_VARIANT]]


@pytest.mark.parametrize("case, variant", CORPUS)
def test_corpus_through_opencl_equals_reference(context, case, variant):
    args = arguments(case, variant)
    expected = case.kernel.reference(*args)
    artifact = case.kernel.opencl_artifact()
    if artifact.needs_fp64 and not _fp64(context):
        with pytest.raises(DeviceCapabilityError):
            case.kernel.opencl(*args, context=context)
        return
    got = case.kernel.opencl(*args, context=context)
    check_result_type(got, case.kernel.program().main.result)
    assert_close(got, with_rows_of(expected, got), **case.tol)


@pytest.mark.parametrize("case, variant", PARAMS)
def test_corpus_compiled_by_intel_cpu_runtime(intel_cpu_context, case, variant):
    """Every corpus kernel at every size of the C tests, empty and large ones included, built by
    Intel's OpenCL CPU runtime (a real compiler, where Oclgrind interprets): as the C is checked."""
    check_compiled(case, variant, lambda *args: case.kernel.opencl(*args, context=intel_cpu_context))


def test_single_precision_corpus_needs_no_fp64():
    for case in CASES:
        if case.single_precision:
            assert not case.kernel.opencl_artifact().needs_fp64, case.kernel.name


# ----------------------------------------------------------------------------- BLAS

F32 = dict(rtol=1e-4, atol=1e-4)
SIZES = (1, 5, 2048, 5001, 20003)  # 20003: two work-groups, ten strides each


def _vec(rng, n):
    return rng.uniform(-1.0, 1.0, n).astype(np.float32)


@pytest.mark.parametrize("n", SIZES)
def test_blas_vectors(context, n, rng):
    x, y = _vec(rng, n), _vec(rng, n)
    np.testing.assert_allclose(blas.scal.opencl(np.float32(1.5), x, context=context), blas.np_scal(1.5, x), **F32)
    np.testing.assert_allclose(blas.asum.opencl(x, context=context), blas.np_asum(x), **F32)
    np.testing.assert_allclose(blas.dot.opencl(x, y, context=context), blas.np_dot(x, y), **F32)


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 130), (17, 256)])
def test_blas_gemv(context, rows, cols, rng):
    m, x, y = rng.uniform(-1, 1, (rows, cols)).astype(np.float32), _vec(rng, cols), _vec(rng, rows)
    got = blas.gemv.opencl(np.float32(2.0), m, x, np.float32(0.5), y, context=context)
    np.testing.assert_allclose(got, blas.np_gemv(2.0, m, x, 0.5, y), **F32)


def test_blas_strategies_mean_nothing_in_c_and_python(rng):
    x, y = _vec(rng, 3000), _vec(rng, 3000)
    np.testing.assert_allclose(blas.dot(x, y), blas.np_dot(x, y), **F32)
    np.testing.assert_allclose(blas.dot.reference(x, y), blas.np_dot(x, y), **F32)
    np.testing.assert_allclose(blas.scal(np.float32(3.0), x), blas.np_scal(3.0, x), **F32)


def test_device_arrays_in_and_out(context, rng):
    import pyopencl.array as cl_array

    exe = blas.scal.opencl_executable(context)
    assert blas.scal.opencl_executable(context) is exe  # compiled once per context
    x = cl_array.to_device(exe.queue, _vec(rng, 9))
    out = blas.scal.opencl(np.float32(2.0), x, context=context)
    assert isinstance(out, cl_array.Array)
    np.testing.assert_allclose(out.get(), 2.0 * x.get(), **F32)


# ----------------------------------------------------------------------------- the artifact

def test_dot_has_hoisted_buffers():
    a = blas.dot.opencl_artifact()
    roles = {b.name: b.role for b in a.buffers.values()}
    temps = [n for n, r in roles.items() if r == "temp"]
    local = [b for b in a.buffers.values() if b.role == "local"]
    # the per-work-group partial sums: one per work-group (a chunk of 16384, at most 1024 groups),
    # handed from the groups to the last of them in one launch (dpia.hoist_opencl)
    partials = next(b for b in a.buffers.values() if b.role == "handover")
    n = sympy.Min(size_symbol("x_d0"), size_symbol("y_d0"))
    groups = sympy.Min(1024, sympy.floor((n + 16383) / 16384))
    assert sympy.simplify(partials.count - groups) == 0
    # 256 work-items of 4 lanes per group, one group at least (the last one combines the partials)
    assert [(str(l.global_size[0]), l.local_size) for l in a.launches] == [(str(256 * sympy.Max(1, groups)), (256,))]
    assert partials.name in a.launches[0].args and sorted(roles.values()).count("counter") == 1
    # the second phase's tree reuses the first's local arrays; one more: the last group's flag
    assert sorted(int(b.count) for b in local) == sorted([1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1])
    for b in local:  # local memory is a __local kernel argument of the kernel that uses it
        launch = next(l for l in a.launches if b.name in l.args)
        assert "__local float *restrict" in a.source
        assert launch.local_size is not None
    assert temps and "barrier(CLK_LOCAL_MEM_FENCE);" in a.source


def test_global_new_inside_parallel_loop_is_sized_by_it():
    a = per_row_intermediate.opencl_artifact()
    temp = next(b for b in a.buffers.values() if b.role == "temp")
    assert sympy.simplify(temp.count - size_symbol("m_d0") * size_symbol("m_d1")) == 0
    assert temp.name in a.launches[0].args


# Vectorised bodies beyond element-wise maps: a guarded reduction per element (the BLAS strategy),
# in Double, 2 and 8 wide; reads that are not contiguous across the lanes, and a data-dependent
# read with its run-time check, which run lane by lane.

@fs.kernel
def windowed_sums(v: Array[fs.Double], w: fs.Card) -> Array[fs.Double]:
    return fs.vectorize(2, fs.build_global(length(v), lambda i: ifold(
        lambda acc, j: acc + (v[i + j] * v[i + j] if i + j < length(v) else 0.0), 0.0, w)))


@fs.kernel
def strided_and_gathered(v: Array[Float], at: Array[fs.Index]) -> Array[Float]:
    return fs.vectorize(8, fs.build_global(length(at), lambda i: v[(2 * i) % length(v)] + v[at[i]]))


@fs.kernel
def local_sums(m: Array[Array[Float]]) -> Array[Float]:
    return fs.build_workgroup(length(m), lambda r: blas.group_sum(fs.to_local(fs.vectorize(4, fs.build_local(
        128, lambda t: ifold(lambda acc, j: acc + (fs.abs(m[r][j * 128 + t]) if j * 128 + t < length(m[0])
                                                   else blas.f32(0.0)),
                             blas.f32(0.0), (length(m[0]) + 127) // 128))))))


def test_vectorised_reductions_equal_the_reference(context, rng):
    a = windowed_sums.opencl_artifact().source
    assert "double2 acc" in a and "vload2(0, " in a  # the guarded squares read two at a time
    for n, w in ((1, 3), (7, 4), (64, 5), (101, 1)):
        v = rng.uniform(-1, 1, n)
        np.testing.assert_allclose(windowed_sums.opencl(v, w, context=context), windowed_sums.reference(v, w))
    for rows, cols in ((1, 1), (3, 130), (2, 513)):
        m = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
        np.testing.assert_allclose(local_sums.opencl(m, context=context), np.abs(m).sum(axis=1), **F32)
    assert "vload4(0, " in local_sums.opencl_artifact().source


def test_vectorised_body_that_lanes_cannot_share_runs_lane_by_lane(context, rng):
    source = strided_and_gathered.opencl_artifact().source
    assert ".s7 = " in source and "vstore8(" in source  # lane by lane, stored together
    v = rng.uniform(-1, 1, 10).astype(np.float32)
    for at in (np.array([3]), np.arange(10)[::-1], rng.integers(0, 10, 19)):
        np.testing.assert_allclose(strided_and_gathered.opencl(v, at, context=context),
                                   strided_and_gathered.reference(v, at), **F32)
    with pytest.raises(IndexError, match="strided_and_gathered"):
        strided_and_gathered.opencl(v, np.array([0, 1, 2, 3, 4, 5, 10, 0, 1]), context=context)


@fs.kernel
def count_to(m: fs.Card) -> Double:
    return ifold(lambda acc, j: acc + 1.0, 0.0, m)


def test_index_arithmetic_every_work_item_shares_is_checked_once_on_the_host(context):
    """The sizes a kernel's index arithmetic computes are the same for every work-item: the host
    tests once a call that they fit int64, in its size check, and the kernels do not; a size that
    divides by a group count is tested where the count is not 0 (where it is, no group computes
    it: a call without work is not refused)."""
    from corpus import vision

    for artifact in (vision.softmax_rows_f32.opencl_artifact(), count_to.opencl_artifact()):
        assert artifact.fitting and "(void)(fs_checked" not in artifact.source
    guarded = [e for e in count_to.opencl_artifact().fitting if isinstance(e, sympy.Piecewise)]
    assert guarded and all(cond.rhs == 0 for e in guarded for _, cond in e.args[:-1])
    for m in (0, 1, 255, 256, 16385, 300_000):
        assert count_to.opencl(m, context=context) == count_to.reference(m) == float(m)
    with pytest.raises(OverflowError, match="overflows int64"):
        count_to.opencl(2**63 - 5, context=context)
    m = np.random.default_rng(5).standard_normal((3, 700)).astype(np.float32)
    np.testing.assert_allclose(vision.softmax_rows_f32.opencl(m, context=context),
                               vision.np_softmax_rows_f32(m), rtol=1e-5, atol=1e-7)


def test_sizes_are_checked_in_kernel_bodies_and_on_the_host(context):
    """As the C path: a body count that overflows is status 6, OverflowError (as the reference);
    the host computes sizes as K_check_sizes does, so a size divided by zero is a
    ZeroDivisionError, a result size outside int64 an OverflowError and a buffer beyond the
    device's largest allocation a MemoryError, each before anything is allocated or launched,
    naming the arguments the size comes from."""
    from test_checked_sizes import count_product, counts_from_data, grid, quotient_sized

    def opencl(kernel, *args):
        return kernel.opencl(*args, context=context)

    assert "fs_checked_mul_i64(" in count_product.opencl_artifact().source
    for kernel, args in ((count_product, (2**32, 2**32)), (counts_from_data, (np.array([2**30, 0]), 2**40))):
        for run in (opencl, lambda k, *a: k.reference(*a)):
            with pytest.raises(OverflowError):
                run(kernel, *args)
    idx = np.array([3, -2, 0, 5])
    for kernel, args, oracle in ((count_product, (3, 4), 12.0), (count_product, (0, 2**40), 0.0),
                                 (counts_from_data, (idx, 2), np.maximum(idx * 2, 0).astype(float)),
                                 (quotient_sized, (7, 2), np.ones(3)), (grid, (3, 2), np.ones(6))):
        np.testing.assert_array_equal(opencl(kernel, *args), kernel.reference(*args))
        np.testing.assert_array_equal(opencl(kernel, *args), oracle)
    for run in (opencl, lambda k, *a: k.reference(*a), lambda k, *a: k(*a)):
        with pytest.raises(ZeroDivisionError):
            run(quotient_sized, 3, 0)
    with pytest.raises(OverflowError, match=r"result size of this call overflows int64 \(from the arguments 'n', 'm'"):
        opencl(grid, 2**32, 2**32)
    with pytest.raises(OverflowError, match="buffer 'out' .* overflows int64"):
        opencl(grid, 2**31, 2**31)  # 2**62 elements fit, their 2**65 bytes do not
    n = 1 << 20
    assert 8 * n * n > context.devices[0].max_mem_alloc_size
    with pytest.raises(MemoryError, match="buffer 'out' .* more than this device's limit"):
        opencl(grid, n, n)


def test_vectorised_scal_uses_vector_loads():
    a = blas.scal.opencl_artifact()
    assert "vload4(" in a.source and "vstore4(" in a.source
    # one work-item per 4 elements, in whole groups of 256 (a local size left to the
    # implementation must divide the global size: groups of one for a prime count)
    assert a.launches[0].global_size == (256 * sympy.ceiling(sympy.ceiling(size_symbol("x_d0") / 4) / 256),)
    assert a.launches[0].local_size == (256,)


def test_default_strategy_reduction_is_one_work_item_without_auto_reductions():
    """An unannotated reduction is made parallel (fsmooth.auto_reductions: tests/test_opencl_auto.py);
    without that, the default strategy runs it on one work-item."""
    from corpus import linalg

    a = linalg.vector_sum.with_options(auto_reductions=False).opencl_artifact()
    assert [(l.global_size, l.local_size) for l in a.launches] == [((1,), (1,))]
    assert [l.local_size for l in linalg.vector_sum.opencl_artifact().launches] == [(256,)]  # one launch
    a = linalg.vector_add.opencl_artifact()
    assert "get_global_id(0)" in a.source and a.launches[0].local_size == (256,)


@fs.kernel
def scaled_matrix(m: Array[Array[Double]], a: Double) -> Array[Array[Double]]:
    return fs.build(length(m), lambda i: fs.build(length(m[0]), lambda j: a * m[i][j]))


@fs.kernel
def normalised_rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
    return fs.build(length(m), lambda i: fs.build(length(m[0]), lambda j: m[i][j] / fs.sqrt(ifold(
        lambda acc, k: acc + m[i][k] * m[i][k], 1.0, length(m[0])))))


def test_default_strategy_maps_a_loop_nest_onto_two_dimensions(context, rng):
    """A build whose element is a build of a size the launch knows runs one work-item per
    element, the inner loop on dimension 0 (neighbouring work-items read neighbouring elements),
    in work-groups of 32 × 8, each dimension rounded up to whole groups."""
    a = scaled_matrix.opencl_artifact()
    assert [(tuple(map(str, l.global_size)), l.local_size) for l in a.launches] == [
        (("32*ceiling(m_d1/32)", "8*ceiling(m_d0/8)"), (32, 8))]
    body = a.source.split("__kernel", 1)[1]
    assert body.index("get_global_id(1)") < body.index("get_global_id(0)")
    for shape in ((0, 0), (0, 4), (4, 0), (1, 1), (3, 130), (65, 9)):
        m = rng.uniform(-1, 1, shape)
        np.testing.assert_array_equal(scaled_matrix.opencl(m, 1.5, context=context), 1.5 * m)
        np.testing.assert_array_equal(np.array(scaled_matrix.reference(m, 1.5)).reshape(shape), 1.5 * m)


def test_default_strategy_keeps_a_nest_with_work_per_row_one_dimensional(context, rng):
    """Only a loop nested alone: the sum of a row, before the loop over its elements (licm),
    would run once per element."""
    assert [len(l.global_size) for l in normalised_rows.opencl_artifact().launches] == [1]
    for shape in ((0, 3), (1, 1), (5, 7)):
        m = rng.uniform(0.5, 1, shape)
        expected = m / np.sqrt(1 + np.sum(m * m, axis=1, keepdims=True))
        np.testing.assert_allclose(normalised_rows.opencl(m, context=context), expected, rtol=1e-13)
        np.testing.assert_allclose(np.array(normalised_rows.reference(m)).reshape(shape), expected, rtol=1e-13)


def test_cli_compile_target_opencl(tmp_path):
    from fsmooth.cli import main

    assert main(["compile", blas.__file__, "-o", str(tmp_path), "--target", "opencl"]) == 0
    description = json.loads((tmp_path / "blas.opencl.json").read_text())
    dot = description["kernels"]["dot"]
    assert [l["kernel"] for l in dot["launches"]] == [l.kernel for l in blas.dot.opencl_artifact().launches]
    assert {b["role"] for b in dot["buffers"]} >= {"input", "output", "temp", "local", "handover", "counter"}
    assert "halve" in description["skipped"]  # a fragment: build_local outside any workgroup
    source = (tmp_path / "blas.cl").read_text()
    assert source.count("static inline int64_t fs_floordiv_i64") == 1
    assert "__kernel void blas_dot_k(" in source  # named after the exported C name


# ----------------------------------------------------------------------------- Oclgrind

def test_blas_under_oclgrind_has_no_race_or_out_of_bounds():
    ok, report = run_under_oclgrind("""
        import numpy as np
        from corpus import blas
        rng = np.random.default_rng(3)
        for n in (1, 300, 2100):
            x = rng.uniform(-1, 1, n).astype(np.float32); y = rng.uniform(-1, 1, n).astype(np.float32)
            assert np.allclose(blas.scal.opencl(np.float32(2), x), 2 * x)
            assert np.isclose(blas.dot.opencl(x, y), blas.np_dot(x, y), rtol=1e-4, atol=1e-4)
            assert np.isclose(blas.asum.opencl(x), blas.np_asum(x), rtol=1e-4, atol=1e-4)
        m = rng.uniform(-1, 1, (3, 200)).astype(np.float32)
        x = rng.uniform(-1, 1, 200).astype(np.float32); y = rng.uniform(-1, 1, 3).astype(np.float32)
        assert np.allclose(blas.gemv.opencl(np.float32(1), m, x, np.float32(1), y), blas.np_gemv(1, m, x, 1, y),
                           rtol=1e-4, atol=1e-4)
    """, timeout=900)
    assert ok, report


def test_corpus_under_oclgrind_has_no_race_or_out_of_bounds():
    ok, report = run_under_oclgrind("""
        import numpy as np
        from test_corpus import CASES, arguments, assert_close
        for case in CASES:
            args = arguments(case, case.variants[-1])
            assert_close(case.kernel.opencl(*args), case.kernel.reference(*args), **case.tol)
    """, timeout=900)
    assert ok, report


def test_a_race_is_caught_by_oclgrind():
    """The check above can fail: a barrier left out is reported."""
    ok, report = run_under_oclgrind("""
        import dataclasses
        import numpy as np
        from corpus import blas
        from fsmooth.opencl_executable import OpenCLExecutable
        a = blas.dot.opencl_artifact()
        racy = dataclasses.replace(a, source=a.source.replace("barrier(CLK_LOCAL_MEM_FENCE);", ""))
        x = np.ones(300, dtype=np.float32)
        OpenCLExecutable(racy).call(x, x)
    """, timeout=900)
    # without the barriers, work-items read local memory that others have not written yet
    assert not ok and ("data race" in report or "Uninitialized value" in report), report


# ----------------------------------------------------------------------------- errors

@fs.kernel
def per_row_intermediate(m: Array[Array[Float]]) -> Array[Float]:
    # a global intermediate per row: one copy per iteration of the global loop
    return fs.build_global(length(m), lambda i: vsum(fs.to_global(fs.build_seq(length(m[0]), lambda j: m[i][j] * m[i][j]))))


@fs.kernel
def vsum(v: Array[Float]) -> Float:
    return ifold(lambda acc, j: acc + v[j], v[0] - v[0], length(v))


@fs.kernel
def workgroup_in_local(v: Array[Float]) -> Array[Array[Array[Float]]]:
    return fs.build_workgroup(length(v), lambda i: fs.build_local(4, lambda j: fs.build_workgroup(  # ERR
        2, lambda k: v[i])))


@fs.kernel
def local_outside_workgroup(v: Array[Float]) -> Array[Float]:
    return fs.build_local(length(v), lambda i: v[i])  # ERR


@fs.kernel
def global_inside_workgroup(v: Array[Float]) -> Array[Array[Float]]:
    return fs.build_workgroup(length(v), lambda i: fs.build_global(3, lambda j: v[i]))  # ERR


@fs.kernel
def missing_space(v: Array[Float]) -> Array[Float]:
    return fs.build_workgroup(length(v), lambda i: vsum(
        fs.build_local(8, lambda j: v[i] * j)))  # ERR


@fs.kernel
def local_at_top(v: Array[Float]) -> Array[Float]:
    w = fs.to_local(fs.build_seq(length(v), lambda i: v[i] * 2.0))  # ERR
    return fs.build_global(length(v), lambda i: w[i] + w[0])


@fs.kernel
def private_written_in_parallel(v: Array[Float]) -> Array[Float]:
    return fs.build_workgroup(length(v), lambda i: vsum(
        fs.to_private(fs.build_local(8, lambda j: v[i] * j))))  # ERR


@fs.kernel
def vectorised_workgroup(v: Array[Float]) -> Array[Float]:
    return fs.vectorize(4, fs.build_workgroup(length(v), lambda i: v[i]))  # ERR


@fs.kernel
def vectorised_integers(v: Array[fs.Index]) -> Array[fs.Index]:
    return fs.vectorize(4, fs.build_global(length(v), lambda i: v[i] * 2))  # ERR


ERRORS = [(workgroup_in_local, "illegal nesting: build_workgroup inside build_local"),
          (local_outside_workgroup, "illegal nesting: build_local outside a build_workgroup"),
          (global_inside_workgroup, "illegal nesting: build_global inside build_workgroup"),
          (missing_space, "address space is missing"),
          (local_at_top, "to_local outside a work-group"),
          (private_written_in_parallel, "private memory belongs to one work-item"),
          (vectorised_workgroup, "vectorize needs build_global, build_local or build_seq"),
          (vectorised_integers, "vectorize needs a build of Float or Double elements")]


@pytest.mark.parametrize("kernel, message", ERRORS, ids=[k.name for k, _ in ERRORS])
def test_strategy_errors_are_located(kernel, message):
    with pytest.raises(fs.CompileError) as err:
        kernel.opencl_artifact()
    assert message in err.value.message
    lines, first = inspect.getsourcelines(kernel.fn)
    marked = first + next(j for j, line in enumerate(lines) if "# ERR" in line)
    assert err.value.filename == __file__ and err.value.lineno == marked
    kernel.c_source()  # the C back end ignores strategies: the same kernel compiles to C


def test_a_non_passive_parfor_is_a_race():
    loc = Loc(__file__, 7, 4)
    data = ph.Arr(sympy.Symbol("n"), ph.Num(Double))
    shared = ph.Ident("acc", ph.AccT(ph.Num(Double)))
    body = ph.Assign(shared, ph.Literal(1.0, ph.Num(Double)))  # every iteration writes acc
    loop = ph.ParFor(sympy.Symbol("n"), ph.Ident("out", ph.AccT(data)), "i", "o", ph.Num(Double), body,
                     Strategy("global", loc=loc))
    with pytest.raises(fs.CompileError) as err:
        check_passive(ph.New("acc", ph.Num(Double), loop))
    assert "not passive" in err.value.message and "acc" in err.value.message
    assert err.value.lineno == 7
    own = ph.ParFor(sympy.Symbol("n"), ph.Ident("out", ph.AccT(data)), "i", "o", ph.Num(Double),
                    ph.Assign(ph.Ident("o", ph.AccT(ph.Num(Double))), ph.Literal(1.0, ph.Num(Double))),
                    Strategy("global", loc=loc))
    check_passive(own)  # writing its own element is fine


def test_strategies_are_the_identity_in_python():
    v = np.arange(5.0)
    assert list(fs.build_global(3, lambda i: v[i] * 2)) == [0.0, 2.0, 4.0]
    assert fs.to_local(v) is v and fs.to_private(v) is v and fs.vectorize(4, v) is v


# ----------------------------------------------------------------------------- failed run-time checks

@fs.kernel
def gather_sum(v: Array[Float], at: Array[fs.Index]) -> Float:
    # a data-dependent read in a global kernel, then a sequential sum over what it wrote: two
    # launches, the second of which must not run on the first's unwritten elements
    picked = fs.to_global(fs.build_global(length(at), lambda i: v[at[i]]))
    return ifold(lambda acc, j: acc + picked[j], v[0] - v[0], length(at))


@fs.kernel
def quotients(a: Array[fs.Index], b: Array[fs.Index]) -> Array[fs.Index]:
    return fs.build(length(a), lambda i: a[i] // b[i] + a[i] % b[i])


def _reprojection_case():
    case = next(c for c in CASES if c.kernel.name == "reprojection_errors")
    return case, arguments(case, case.variants[-1])


def test_bad_data_dependent_index_raises_index_error(context):
    case, args = _reprojection_case()
    if case.kernel.opencl_artifact().needs_fp64 and not _fp64(context):
        pytest.skip("the device has no fp64")  # Oclgrind has it: never taken here
    cams, points, weights, obs, feats = args
    bad = np.array(obs, copy=True)
    bad[len(bad) // 2][0] = len(cams)  # one camera past the end, in one work-item only
    with pytest.raises(IndexError, match="reprojection_errors: index out of range"):
        case.kernel.opencl(cams, points, weights, bad, feats, context=context)
    bad[len(bad) // 2][0] = -1
    with pytest.raises(IndexError):
        case.kernel.opencl(cams, points, weights, bad, feats, context=context)
    # the status is zeroed per call: good inputs after a failure still give the reference
    np.testing.assert_allclose(case.kernel.opencl(*args, context=context), case.kernel.reference(*args), **case.tol)


def test_failure_in_a_first_launch_skips_the_later_ones(context):
    a = gather_sum.opencl_artifact()
    assert len(a.launches) == 2
    status = next(b for b in a.buffers.values() if b.role == "status")
    assert status.count == 2 and all(status.name in launch.args for launch in a.launches)
    assert "atomic_cmpxchg(fs_status + 0, 0, 1)" in a.source
    assert "if (fs_status[0] != 0) return;" in a.source
    v = np.arange(1.0, 6.0, dtype=np.float32)
    assert gather_sum.opencl(v, np.array([4, 0, 0]), context=context) == pytest.approx(7.0)
    with pytest.raises(IndexError, match="gather_sum"):
        gather_sum.opencl(v, np.array([4, 5, 0]), context=context)


def test_integer_division_by_zero_raises(context):
    a, b = np.array([7, -7, 9, 4]), np.array([2, 2, -4, 3])
    np.testing.assert_array_equal(quotients.opencl(a, b, context=context), a // b + a % b)
    with pytest.raises(ZeroDivisionError, match="quotients: integer division by zero"):
        quotients.opencl(a, np.array([2, 2, 0, 3]), context=context)
    np.testing.assert_array_equal(quotients.opencl(a, b, context=context), quotients.reference(a, b))


@fs.kernel
def picked_total(v: Array[Float], at: Array[fs.Index]) -> Float:
    # one work-group, then the copy of its total as the kernel's tail: a failed read in the body
    # must stop the tail
    total = fs.to_global(fs.build_workgroup(1, lambda w: blas.group_sum(fs.to_local(fs.build_local(
        128, lambda l: v[at[l]] if l < length(at) else blas.f32(0.0))))))
    return total[0]


def test_a_single_group_kernel_takes_the_sequential_tail(context):
    a = picked_total.opencl_artifact()
    assert len(a.launches) == 1 and "if (get_local_id(0) == 0 && fs_status[0] == 0) {" in a.source
    v = np.arange(1.0, 6.0, dtype=np.float32)
    assert picked_total.opencl(v, np.array([4, 0, 0]), context=context) == pytest.approx(7.0)
    with pytest.raises(IndexError, match="picked_total"):
        picked_total.opencl(v, np.array([4, 5, 0]), context=context)


def test_failed_checks_leave_no_out_of_range_access_under_oclgrind():
    ok, report = run_under_oclgrind("""
        import numpy as np
        import pytest
        from test_opencl import gather_sum, quotients, strided_and_gathered, _reprojection_case
        case, (cams, points, weights, obs, feats) = _reprojection_case()
        bad = np.array(obs, copy=True)
        bad[:, 0] = len(cams) + 1000  # every work-item fails, far past the end
        with pytest.raises(IndexError):
            case.kernel.opencl(cams, points, weights, bad, feats)
        with pytest.raises(IndexError):  # the sum after the failed gather does not run
            gather_sum.opencl(np.ones(4, dtype=np.float32), np.array([0, 9, 1, -9]))
        a, b = np.array([7, -7, 9, -9, 4, 0]), np.array([2, 2, -4, -4, 3, -1])  # every sign, b == -1
        np.testing.assert_array_equal(quotients.opencl(a, b), quotients.reference(a, b))
        with pytest.raises(ZeroDivisionError):
            quotients.opencl(np.arange(5), np.array([1, 0, 2, 0, 3]))
        with pytest.raises(IndexError):  # lane by lane, every lane checked
            strided_and_gathered.opencl(np.ones(6, dtype=np.float32), np.array([0, 6, 1, -7, 2, 3, 4, 5, 9]))
    """, timeout=900)
    assert ok, report


def test_oclgrind_giving_up_fails_the_harness():
    """Why the harness builds with -cl-opt-disable, and that it notices Oclgrind giving up: built
    optimised, quotients' a // b next to a % b becomes freeze + sdiv (DivRemPairs), which the
    uninitialised-value plugin does not know; the work-groups stop and leave zeros behind."""
    ok, report = run_under_oclgrind("""
        import os
        import numpy as np
        from test_opencl import quotients
        os.environ["OCLGRIND_BUILD_OPTIONS"] = ""  # read by each clBuildProgram: clang's -O2
        print(quotients.opencl(np.array([7, -7]), np.array([2, 2])))
    """, timeout=900)
    assert not ok and "OCLGRIND FATAL ERROR" in report and "Unsupported instruction: freeze" in report, report


def test_oclgrind_harness_keeps_buffer_numbers():
    """The harness keeps every buffer alive (opencl_oclgrind's preamble): a buffer freed and
    replaced by a larger one (a hoisted buffer growing for a larger call) would give the new one
    the freed number, and Oclgrind's uninitialised-value plugin the freed one's shadow, of the old
    size: the read of element 1, which the kernel wrote, reported as uninitialised.  A read of
    memory no one wrote is still reported, once per element read."""
    ok, report = run_under_oclgrind("""
        import gc
        import numpy as np
        import pyopencl as cl
        from fsmooth.opencl_device import default_context
        ctx = default_context()
        q = cl.CommandQueue(ctx)
        prg = cl.Program(ctx, '''
            __kernel void fill(__global float *b, long n) { for (long i = 0; i < n; i++) b[i] = (float)i; }
            __kernel void total(__global const float *b, __global float *o, long n) {
                float s = 0; for (long i = 0; i < n; i++) s += b[i]; o[0] = s; }
            __kernel void unwritten(__global const float *b, __global float *o) { o[0] = b[1]; }
        ''').build()
        out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4)
        small = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4)
        prg.fill(q, (1,), (1,), small, np.int64(1))
        q.finish()
        del small
        gc.collect()
        grown = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16)
        prg.fill(q, (1,), (1,), grown, np.int64(4))
        prg.total(q, (1,), (1,), grown, out, np.int64(4))
        got = np.empty(1, np.float32)
        cl.enqueue_copy(q, got, out)
        assert got[0] == 6.0, got
        prg.unwritten(q, (1,), (1,), cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16), out)
        q.finish()
    """)
    assert not ok and report.count("Uninitialized value") == 1 and "Kernel: unwritten" in report, report


def test_dot_needs_no_launch_for_its_integer_lets():
    a = blas.dot.opencl_artifact()
    # n = min(lengths) and (n + 16383) // 16384 are recomputed where they are used, and the copy
    # of the total into the result joins the last group's part (a barrier orders it)
    assert len(a.launches) == 1
    assert not any(b.elem.name in ("Index", "Card") for b in a.buffers.values() if b.role == "temp")


def test_a_launch_run_after_a_failure_is_caught_by_oclgrind():
    """The check above can fail: without the status test at its start, the sum after a failed
    gather reads elements no one wrote."""
    ok, report = run_under_oclgrind("""
        import dataclasses
        import numpy as np
        from fsmooth.opencl_executable import OpenCLExecutable
        from test_opencl import gather_sum
        a = gather_sum.opencl_artifact()
        unguarded = dataclasses.replace(a, source=a.source.replace("if (fs_status[0] != 0) return;", ""))
        try:
            OpenCLExecutable(unguarded).call(np.ones(4, dtype=np.float32), np.array([0, 9, 1, -9]))
        except IndexError:
            pass
    """, timeout=900)
    assert not ok and "Uninitialized value" in report, report
