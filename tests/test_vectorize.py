"""dpia.vectorize: ``vectorize(w, ·)`` as vector phrases, decided before code generation (what
runs in lock step, what lane by lane), and the OpenCL emitter printing them as it is given."""
from __future__ import annotations

import numpy as np
import pytest

import fsmooth as fs
from corpus import blas
from fsmooth import Array, Float, ifold, length
from fsmooth.dpia import codegen_opencl
from fsmooth.dpia import phrases as p
from fsmooth.driver import compile_to_opencl


@fs.kernel
def guarded_window(v: Array[fs.Double], w: fs.Card) -> Array[fs.Double]:
    return fs.vectorize(2, fs.build_global(length(v), lambda i: ifold(
        lambda acc, j: acc + (v[i + j] * v[i + j] if i + j < length(v) else 0.0), 0.0, w)))


@fs.kernel
def gathered(v: Array[Float], at: Array[fs.Index]) -> Array[Float]:
    return fs.vectorize(4, fs.build_global(length(at), lambda i: v[at[i]] * v[i % length(v)]))


@fs.kernel
def reversed_copy(v: Array[Float]) -> Array[Float]:
    return fs.vectorize(4, fs.build_global(length(v), lambda i: v[length(v) - 1 - i]))


def planned(kernel, monkeypatch) -> codegen_opencl.OpenCLPlan:
    """The vectorised OpenCL plan of ``kernel``, as ``generate_opencl`` gets it."""
    seen = []
    with monkeypatch.context() as patched:
        patched.setattr(codegen_opencl, "generate_opencl",
                        lambda plan, options, notes=(), variants=(): seen.append(plan))
        compile_to_opencl(kernel.program(), kernel.options)
    return seen[0]


def phrases_of(plan: codegen_opencl.OpenCLPlan) -> list:
    return [sub for phase in plan.kernels.phases for sub in p.walk(phase.body)]


def vector_reads(subs: list) -> list:
    return [r for s in subs if isinstance(s, p.Assign) for r in p.walk(s.exp) if isinstance(r, p.AsVector)]


def test_element_wise_map_is_one_vector_assignment(monkeypatch):
    subs = phrases_of(planned(blas.scal, monkeypatch))
    assert not any(isinstance(s, p.ParFor) and s.strategy.width > 1 for s in subs)
    loop = next(s for s in subs if isinstance(s, p.VectorParFor))
    assert loop.width == 4 and loop.remainder is not None and loop.remainder.strategy.width == 1
    match loop.body:  # out := broadcast(a) * asVector(x[i]), stored as one vector
        case p.Assign(p.AsVector(4, _), p.ScalarOp("mul", (p.Broadcast(), p.AsVector(4, p.Idx())), p.Vec(_, 4))):
            pass
        case other:
            pytest.fail(f"not one vector assignment: {other}")
    assert "asVector 4" in str(loop.body)


def test_guard_that_holds_for_every_lane_runs_the_branch_as_vectors(monkeypatch):
    subs = phrases_of(planned(guarded_window, monkeypatch))
    assert any(isinstance(s, p.New) and s.data == p.Vec(fs.Double, 2) for s in subs)  # the accumulator
    guard = next(s for s in subs if isinstance(s, p.IfCmd) and isinstance(s.cond, p.AllLanes))
    assert any(isinstance(s, p.AsVector) for s in p.walk(guard.then))  # the reads, two at a time
    lanes = [s for s in p.walk(guard.orelse) if isinstance(s, p.Lane)]
    assert [lane.lane for lane in lanes] == [0, 1]  # otherwise the whole guard lane by lane
    assert any(isinstance(s, p.AsScalar) for s in p.walk(guard.orelse))


def test_reads_with_run_time_checks_or_gaps_run_lane_by_lane(monkeypatch):
    subs = phrases_of(planned(gathered, monkeypatch))
    assert sorted({s.lane for s in subs if isinstance(s, p.Lane)}) == [0, 1, 2, 3]
    assert vector_reads(subs) == []
    assert any(isinstance(s, p.Assign) and isinstance(s.acc, p.AsVector) for s in subs)  # stored together
    source = gathered.opencl_artifact().source
    assert "vstore4(" in source and ".s3 = " in source and "vload4" not in source


def test_descending_reads_are_not_contiguous(monkeypatch):
    subs = phrases_of(planned(reversed_copy, monkeypatch))
    assert vector_reads(subs) == [] and any(isinstance(s, p.Lane) for s in subs)
    assert "vload4" not in reversed_copy.opencl_artifact().source


def test_no_remainder_loop_where_the_width_divides_the_size(monkeypatch):
    loops = [s for s in phrases_of(planned(blas.asum, monkeypatch)) if isinstance(s, p.VectorParFor)]
    assert loops and all(loop.remainder is None for loop in loops)  # build_local(1024), 4 wide


@fs.kernel
def clamped(v: Array[fs.Double], w: Array[fs.Double]) -> Array[fs.Double]:
    return fs.vectorize(2, fs.build_global(length(v), lambda i: max(min(v[i], w[i % length(w)]), -1.0)))


def test_vector_min_and_max_treat_nan_as_the_scalar_code_does(opencl_context):
    """min(a, b) is b only if b < a, in every target: a NaN first operand stays, a NaN second
    operand is dropped (OpenCL's fmin/fmax would drop both)."""
    nan = float("nan")
    v = np.array([nan, 1.0, 2.0, nan, -3.0, 0.5, nan])
    w = np.array([0.0, nan, 1.5, nan, 4.0, nan, 2.0])
    assert "fs_min_double2(" in clamped.opencl_artifact().source  # the bulk runs as vectors
    expected = clamped.reference(v, w)
    np.testing.assert_array_equal(clamped(v, w), expected)
    np.testing.assert_array_equal(clamped.opencl(v, w, context=opencl_context), expected)


@fs.kernel
def row_norms(m: Array[Array[Float]]) -> Array[Float]:
    """Each work-item folds its row in 4-wide vectors of its own (a vectorised build_seq): lane t
    the elements t, t + 4, … of every full vector, guarded; then the lanes, in order."""
    n = length(m[0])
    return fs.build_global(length(m), lambda i: lanes_total(fs.to_private(fs.vectorize(4, fs.build_seq(4, lambda t: ifold(
        lambda acc, q: acc + (m[i][q * 4 + t] * m[i][q * 4 + t] if q * 4 + t < n else blas.f32(0.0)),
        blas.f32(0.0), (n + 3) // 4))))))


@fs.kernel
def lanes_total(s: Array[Float]) -> Float:
    return ifold(lambda acc, t: acc + s[t], blas.f32(0.0), 4)


def test_a_sequential_build_runs_in_the_vectors_of_its_work_item(monkeypatch, opencl_context):
    """vectorize(4, build_seq(4, ·)): one vector iteration in the work-item (no id, no stride), its
    accumulator a float4, its reads vload4 where all 4 lanes are below n (lane by lane in the last
    vector); the kernel's width hinted to the compiler; the results the reference's, rows of 0, 3
    (no full vector), 4 and 1001 elements."""
    loop = next(s for s in phrases_of(planned(row_norms, monkeypatch)) if isinstance(s, p.VectorParFor))
    assert loop.strategy.level == "seq" and loop.width == 4 and loop.remainder is None
    source = row_norms.opencl_artifact().source
    assert "__kernel __attribute__((vec_type_hint(float4))) void" in source
    assert "for (int64_t v = 0; v < 4 / 4; v += 1) {" in source and "float4 acc;" in source
    assert source.count("vload4(") == 1  # m's lanes, read once for both operands
    rng = np.random.default_rng(5)
    for cols in (0, 3, 4, 1001):
        m = rng.standard_normal((5, cols)).astype(np.float32)
        got = row_norms.opencl(m, context=opencl_context)
        np.testing.assert_allclose(got, row_norms.reference(m), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, (m.astype(np.float64) ** 2).sum(axis=1), rtol=1e-5, atol=1e-5)
