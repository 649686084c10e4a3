"""The OpenCL device an ``OpenCLArtifact`` runs on: which device fsmooth chooses, the process-wide
default context, whether the device can run an artifact (fp64), and one program build per
(source, context, device).  ``fsmooth.opencl_executable`` runs artifacts on what this gives.

Importing this module registers Intel's CPU runtime from PyPI with the ICD loader
(``fsmooth.opencl_icd``) where it is installed: before this process first lists the platforms."""
from __future__ import annotations

import os
import threading
import warnings
from dataclasses import replace

import pyopencl as cl

from .cost_model import GENERIC_GPU, DeviceDescription
from .opencl_artifact import OpenCLArtifact
from .opencl_icd import register_intel_cpu_runtime, registered_library, why_unlisted

register_intel_cpu_runtime()

# Simulators are correct but thousands of times slower than a real device: only an explicit
# PYOPENCL_CTX selects one.
_SIMULATOR_PLATFORMS = ("oclgrind",)
INTEL_CPU_PLATFORM = "intel(r) opencl"
POCL_PLATFORM = "portable computing language"
# The CPU runtimes in the order fsmooth prefers them (a device of another platform comes after).
_CPU_PLATFORMS = (INTEL_CPU_PLATFORM, POCL_PLATFORM)
_PROBE_SOURCE = "__kernel void probe(__global int *a) { a[0] = 1; }"


class DeviceCapabilityError(RuntimeError):
    """The chosen OpenCL device cannot run this artifact (e.g. double precision without fp64)."""


# ----------------------------------------------------------------------------- device choice

def builds_kernels(device) -> bool:
    """Whether ``device`` builds a trivial kernel (PoCL 3.0's LLVM 14 cannot target some newer
    CPUs, and then builds none)."""
    try:
        with warnings.catch_warnings():  # the trial's build log (Intel's runtime always writes one)
            warnings.simplefilter("ignore", cl.CompilerWarning)
            cl.Program(cl.Context([device]), _PROBE_SOURCE).build()
        return True
    except cl.Error:
        return False


def choose_device(platforms, builds=builds_kernels) -> cl.Device:
    """The device fsmooth uses when ``PYOPENCL_CTX`` is unset: the first GPU of a real (not
    simulated) platform; else the first CPU device that builds a kernel (``builds``, a trial
    build by default), Intel's CPU runtime's first, then PoCL's, then another platform's; else the
    first of those CPU devices, or the first device of any real platform, whose build then says
    what fails."""
    real = [p for p in platforms if not any(s in p.name.lower() for s in _SIMULATOR_PLATFORMS)]
    devices = [(p, d) for p in real for d in _devices_of(p)]
    for _, device in devices:
        if device.type & cl.device_type.GPU:
            return device
    cpus = sorted((pd for pd in devices if pd[1].type & cl.device_type.CPU),
                  key=lambda pd: cpu_preference(pd[0]))
    for _, device in cpus:
        if builds(device):
            return device
    if cpus or devices:
        return (cpus or devices)[0][1]
    names = ", ".join(p.name for p in platforms) or "none"
    raise RuntimeError(f"no usable OpenCL device (platforms: {names}); install intel-opencl-rt and "
                       f"intel-cmplr-lib-rt or pocl-binary-distribution for a CPU device, or set "
                       f"PYOPENCL_CTX")


def cpu_preference(platform) -> int:
    """Where ``platform``'s CPU devices come in fsmooth's order (smaller first): Intel's CPU
    runtime (a vectorising compiler, several times faster than PoCL 3.0 on the BLAS kernels),
    PoCL, then any other."""
    name = platform.name.lower()
    return next((rank for rank, known in enumerate(_CPU_PLATFORMS) if known in name), len(_CPU_PLATFORMS))


def describe(device) -> DeviceDescription:
    """What the cost model (``fsmooth.cost_model``) knows of ``device``, from OpenCL's queries.  A
    simulator (Oclgrind) is described as ``GENERIC_GPU``, with its own local memory's size (what
    a group may use): it checks the code a GPU would run."""
    if any(s in device.platform.name.lower() for s in _SIMULATOR_PLATFORMS):
        return replace(GENERIC_GPU, local_memory_bytes=min(GENERIC_GPU.local_memory_bytes, device.local_mem_size))
    gpu = bool(device.type & cl.device_type.GPU)
    try:
        multiple = device.preferred_work_group_size_multiple  # pyopencl asks a trivial kernel
    except cl.Error:
        multiple = 32 if gpu else 1
    return DeviceDescription(
        name=device.name.strip(), kind="gpu" if gpu else "cpu", compute_units=device.max_compute_units,
        max_work_group=device.max_work_group_size,
        local_memory="scratchpad" if device.local_mem_type == cl.device_local_mem_type.LOCAL else "global",
        local_memory_bytes=device.local_mem_size, work_group_multiple=max(1, multiple),
        # a GPU's SIMD unit is its warp (its preferred multiple); a CPU's, a vector of floats
        simd_width=max(1, multiple if gpu else device.native_vector_width_float))


def _devices_of(platform) -> list:
    try:
        return platform.get_devices()
    except cl.Error:  # a platform with no devices reports DEVICE_NOT_FOUND
        return []


def select_context() -> cl.Context:
    """A new context: the one ``PYOPENCL_CTX`` names, else one on ``choose_device``'s device."""
    if os.environ.get("PYOPENCL_CTX"):
        return cl.create_some_context(interactive=False)
    try:
        platforms = cl.get_platforms()
    except cl.Error as err:  # the ICD loader finds no platform at all
        raise RuntimeError(f"no OpenCL platform found ({err}); install intel-opencl-rt and "
                           f"intel-cmplr-lib-rt or pocl-binary-distribution for a CPU device") from None
    library = registered_library()
    if library is not None and not any(INTEL_CPU_PLATFORM in p.name.lower() for p in platforms):
        warnings.warn(f"fsmooth registered Intel's OpenCL CPU runtime {library}, but the ICD loader "
                      f"does not list it: {why_unlisted(library)}", RuntimeWarning, stacklevel=2)
    return cl.Context([choose_device(platforms)])


_default_context: cl.Context | None = None
_context_lock = threading.Lock()


def default_context() -> cl.Context:
    """The process-wide context of executables created without one (made on first use)."""
    global _default_context
    with _context_lock:
        if _default_context is None:
            _default_context = select_context()
        return _default_context


def global_atomics(device) -> bool:
    """Whether ``device`` has 32-bit atomics on global memory (a one-launch reduction's): core
    from OpenCL 1.1, an extension in 1.0."""
    return not device.version.startswith("OpenCL 1.0") or "cl_khr_global_int32_base_atomics" in device.extensions


def has_extension(device, extension: str) -> bool:
    return extension in device.extensions.split()


def require_capabilities(artifact: OpenCLArtifact, device) -> None:
    """Raise ``DeviceCapabilityError`` when ``device`` cannot run ``artifact``."""
    if artifact.needs_atomics and not global_atomics(device):
        raise DeviceCapabilityError(
            f"{artifact.interface.name}: the kernel's one-launch reduction needs 32-bit global atomics, which "
            f"the OpenCL device '{device.name.strip()}' lacks; compile it with OpenCLReduction(launches=2)")
    missing = [e for e in artifact.extensions if not has_extension(device, e)]
    if missing:
        raise DeviceCapabilityError(
            f"{artifact.interface.name}: the kernel needs the OpenCL extension {missing[0]}, which the device "
            f"'{device.name.strip()}' lacks; compile it with Options(single_pass_scan=False) (the three-phase "
            f"scan), or choose another device with PYOPENCL_CTX")
    if artifact.needs_fp64 and not device.double_fp_config:
        raise DeviceCapabilityError(
            f"{artifact.interface.name}: the kernel uses double precision, but the OpenCL device "
            f"'{device.name.strip()}' has no fp64 support; use Float, or choose another device "
            f"with PYOPENCL_CTX")


# ----------------------------------------------------------------------------- program cache

_programs: dict[tuple, cl.Program] = {}
_programs_lock = threading.Lock()


def build_program(context: cl.Context, device: cl.Device, source: str) -> cl.Program:
    """``source`` built for ``device``, once per process (pyopencl's disk cache also keeps the
    binary across processes)."""
    key = (source, context.int_ptr, device.int_ptr)
    with _programs_lock:
        program = _programs.get(key)
        if program is None:
            try:
                # a build that succeeds is not worth a warning for its log (Intel's runtime always
                # writes one); a failed build raises with the log below
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", cl.CompilerWarning)
                    program = cl.Program(context, source).build(devices=[device])
            except cl.Error as err:
                hint = ""
                if "unknown target CPU" in str(err):
                    # PoCL 3.0's LLVM 14 names some newer CPUs 'generic', which it cannot target.
                    hint = ("\nThis PoCL's LLVM does not know this CPU: install intel-opencl-rt "
                            "and intel-cmplr-lib-rt (Intel's CPU runtime, which fsmooth registers "
                            "and prefers), use PoCL >= 3.1 with POCL_LLVM_CPU_NAME set (e.g. "
                            "x86-64-v3), or choose another device with PYOPENCL_CTX.")
                raise RuntimeError(f"OpenCL build failed on '{device.name.strip()}': {err}{hint}") from None
            # The key holds the context and device by address: keep them alive with the program.
            _programs[key] = program
        return program
