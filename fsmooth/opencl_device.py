"""The OpenCL device an ``OpenCLArtifact`` runs on: which device fsmooth chooses, the process-wide
default context, whether the device can run an artifact (fp64), and one program build per
(source, context, device).  ``fsmooth.opencl_executable`` runs artifacts on what this gives."""
from __future__ import annotations

import os
import threading

import pyopencl as cl

from .opencl_artifact import OpenCLArtifact

# Simulators are correct but thousands of times slower than a real device: only an explicit
# PYOPENCL_CTX selects one.
_SIMULATOR_PLATFORMS = ("oclgrind",)
_POCL_PLATFORM = "portable computing language"


class DeviceCapabilityError(RuntimeError):
    """The chosen OpenCL device cannot run this artifact (e.g. double precision without fp64)."""


# ----------------------------------------------------------------------------- device choice

def choose_device(platforms) -> cl.Device:
    """The device fsmooth uses when ``PYOPENCL_CTX`` is unset: the first GPU of a real (not
    simulated) platform, else PoCL's CPU device, else the first device of any real platform."""
    real = [p for p in platforms if not any(s in p.name.lower() for s in _SIMULATOR_PLATFORMS)]
    devices = [(p, d) for p in real for d in _devices_of(p)]
    for _, device in devices:
        if device.type & cl.device_type.GPU:
            return device
    for platform, device in devices:
        if _POCL_PLATFORM in platform.name.lower() and device.type & cl.device_type.CPU:
            return device
    if devices:
        return devices[0][1]
    names = ", ".join(p.name for p in platforms) or "none"
    raise RuntimeError(f"no usable OpenCL device (platforms: {names}); install "
                       f"pocl-binary-distribution for a CPU device, or set PYOPENCL_CTX")


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
        raise RuntimeError(f"no OpenCL platform found ({err}); install pocl-binary-distribution "
                           f"for a CPU device") from None
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


def require_capabilities(artifact: OpenCLArtifact, device) -> None:
    """Raise ``DeviceCapabilityError`` when ``device`` cannot run ``artifact``."""
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
                program = cl.Program(context, source).build(devices=[device])
            except cl.Error as err:
                hint = ""
                if "unknown target CPU" in str(err):
                    # PoCL 3.0's LLVM 14 names some newer CPUs 'generic', which it cannot target.
                    hint = ("\nThis PoCL's LLVM does not know this CPU: use PoCL >= 3.1 with "
                            "POCL_LLVM_CPU_NAME set (e.g. x86-64-v3), or choose another device "
                            "with PYOPENCL_CTX.")
                raise RuntimeError(f"OpenCL build failed on '{device.name.strip()}': {err}{hint}") from None
            # The key holds the context and device by address: keep them alive with the program.
            _programs[key] = program
        return program
