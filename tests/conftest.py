"""Shared by the test files: a private compile cache per test session, and a seeded RNG."""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest

_owned_cache_dir: str | None = None


def pytest_configure(config):
    # A fresh cache per session, so that the tests compile what they check instead of loading a
    # library some earlier version of fsmooth left in the user's cache.
    global _owned_cache_dir
    if "FSMOOTH_CACHE_DIR" not in os.environ:
        _owned_cache_dir = tempfile.mkdtemp(prefix="fsmooth-test-cache-")
        os.environ["FSMOOTH_CACHE_DIR"] = _owned_cache_dir


def pytest_unconfigure(config):
    if _owned_cache_dir is not None:
        os.environ.pop("FSMOOTH_CACHE_DIR", None)
        shutil.rmtree(_owned_cache_dir, ignore_errors=True)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240613)


@pytest.fixture(scope="session")
def opencl_context():
    """fsmooth's default device (Intel's CPU runtime where intel-opencl-rt is installed, as the
    test extra does on Linux x86-64, else PoCL's) where it builds a kernel, else Oclgrind's CPU
    device."""
    import pyopencl as cl

    from fsmooth.opencl_device import builds_kernels, default_context

    try:
        default = default_context()
        if builds_kernels(default.devices[0]):
            return default
    except RuntimeError:
        pass
    grind = next(p for p in cl.get_platforms() if p.name == "Oclgrind")
    return cl.Context(grind.get_devices())


@pytest.fixture(scope="session")
def intel_cpu_context():
    """A context on Intel's OpenCL CPU runtime, which the test extra installs on Linux x86-64
    (intel-opencl-rt, intel-cmplr-lib-rt) and fsmooth registers with the ICD loader: there it
    must be present, elsewhere the test is skipped."""
    import platform
    import sys

    import pyopencl as cl

    from fsmooth import opencl_device, opencl_icd

    if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
        pytest.skip("the test extra installs Intel's OpenCL CPU runtime on Linux x86-64 only")
    library = opencl_icd.intel_cpu_library()
    assert library is not None, "intel-opencl-rt is not installed: pip install '.[test]'"
    intel = [p for p in cl.get_platforms() if opencl_device.INTEL_CPU_PLATFORM in p.name.lower()]
    assert intel, f"the ICD loader does not list {library}: {opencl_icd.why_unlisted(library)}"
    return cl.Context(intel[0].get_devices())
