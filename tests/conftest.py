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


def builds_kernels(context) -> bool:
    """Whether an OpenCL context can build a trivial kernel (PoCL 3.0's LLVM cannot target some
    newer CPUs)."""
    import pyopencl as cl

    try:
        cl.Program(context, "__kernel void probe(__global int *a) { a[0] = 1; }").build()
        return True
    except (cl.Error, RuntimeError):
        return False


@pytest.fixture(scope="session")
def opencl_context():
    """PoCL (fsmooth's default device) where it builds a kernel, else Oclgrind's CPU device."""
    import pyopencl as cl

    from fsmooth.opencl_device import default_context

    try:
        default = default_context()
        if builds_kernels(default):
            return default
    except RuntimeError:
        pass
    grind = next(p for p in cl.get_platforms() if p.name == "Oclgrind")
    return cl.Context(grind.get_devices())
