"""The back end fuzzed: hypothesis writes well-typed F̃ programs (tests/fuzz_programs.py), each is
compiled to C and run on inputs of sizes 0, 1, 4 and 100, and its results (or the exception it
raises) must be those of the reference, the Python function itself.  A sixth of the sample also
goes through the OpenCL path (on Oclgrind where PoCL cannot build kernels).

CI runs a fixed sample (derandomised); a dedicated run draws thousands:

    FSMOOTH_FUZZ_EXAMPLES=3000 python -m pytest -q tests/test_fuzz.py -p no:randomly
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import sys

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings

import fuzz_programs
from test_corpus import outcome

EXAMPLES = int(os.environ.get("FSMOOTH_FUZZ_EXAMPLES", "60"))
DEDICATED = "FSMOOTH_FUZZ_EXAMPLES" in os.environ
SIZES = (0, 1, 4, 100)
_modules = itertools.count()


def _load(program, directory):
    """The program as a module of its own file (the front end reads a kernel's source)."""
    name = f"fuzzed_{os.getpid()}_{next(_modules)}"
    path = directory / f"{name}.py"
    path.write_text(program.source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, program.kernel)


def _assert_same(compiled, reference, where):
    kind_c, c = compiled
    kind_r, r = reference
    assert kind_c == kind_r, f"{where}: compiled gives {compiled}, the reference {reference}"
    if kind_c == "error":
        # README "Errors": sizes that make a kernel read outside an array may be refused before
        # the call, a ValueError where the reference raises IndexError at the read
        assert c is r or (c, r) == (ValueError, IndexError), where
        return
    if isinstance(r, tuple):
        assert isinstance(c, tuple) and len(c) == len(r), where
        for x, y in zip(c, r):
            _assert_same(("value", x), ("value", y), where)
        return
    c_arr, r_arr = np.asarray(c), np.asarray(r)
    if r_arr.size == 0 and r_arr.ndim == 1:
        # the reference's build(0, f) never calls f, so it cannot know the rows' shape; the
        # compiled code knows it from the shape translation
        assert c_arr.size == 0 and c_arr.shape[0] == 0, where
        return
    assert c_arr.shape == r_arr.shape, f"{where}: shape {c_arr.shape} != {r_arr.shape}"
    if c_arr.dtype.kind == "f" or r_arr.dtype.kind == "f":
        tol = 1e-4 if np.float32 in (c_arr.dtype, r_arr.dtype) else 1e-9
        np.testing.assert_allclose(c_arr.astype(float), r_arr.astype(float), rtol=tol, atol=tol, err_msg=where)
    else:
        np.testing.assert_array_equal(c_arr, r_arr, err_msg=where)


def _check(program, tmp_path):
    kernel = _load(program, tmp_path)
    rng = np.random.default_rng(len(program.source))
    for size in SIZES:
        args = fuzz_programs.arguments(program.params, size, rng)
        where = f"size {size}, arguments {args!r}\n{program.source}"
        _assert_same(outcome(kernel, args), outcome(kernel.reference, args), where)


# Every example compiles C: shrinking would compile hundreds more; the programs are small anyway.
_SETTINGS = dict(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not DEDICATED,
                 suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate))


@given(program=fuzz_programs.programs())
@settings(**_SETTINGS)
def test_fuzzed_programs_compute_what_the_reference_computes(program, tmp_path_factory):
    _check(program, tmp_path_factory.mktemp("fuzz"))



@given(program=fuzz_programs.programs(hostile=True))
@settings(**_SETTINGS)
def test_fuzzed_programs_with_hostile_names(program, tmp_path_factory):
    _check(program, tmp_path_factory.mktemp("fuzz"))


OPENCL_EXAMPLES = max(1, EXAMPLES // 6)


@given(program=fuzz_programs.programs())
@settings(**dict(_SETTINGS, max_examples=OPENCL_EXAMPLES))
def test_a_sample_of_fuzzed_programs_through_opencl(program, tmp_path_factory, opencl_context):
    """The OpenCL path (every call inlined, the default strategy) on Oclgrind or PoCL: the same
    results or the same errors as the reference, at sizes 0, 1 and 4."""
    kernel = _load(program, tmp_path_factory.mktemp("fuzz_cl"))
    rng = np.random.default_rng(len(program.source))
    for size in SIZES[:3]:
        args = fuzz_programs.arguments(program.params, size, rng)
        where = f"OpenCL, size {size}, arguments {args!r}\n{program.source}"
        _assert_same(outcome(lambda *a: kernel.opencl(*a, context=opencl_context), args),
                     outcome(kernel.reference, args), where)
