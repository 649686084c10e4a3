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
