"""Long programs compile in work linear in their length (issue 13): a sum of n array elements, a
chain of n dependent lets and a chain of n dependent integer lets (issue 11: code generation asks
of each integer operation whether it may overflow, which once analysed every operand anew),
generated as source text (``benchmarks/compile_time.py``).  The work is
counted, not timed: the Python function calls that the C pipeline makes (its passes and sympy's
work for them), which grows fourfold when n does for linear passes and sixteenfold for a
quadratic one.  The compiled kernels agree with their reference and a numpy oracle."""
from __future__ import annotations

import pathlib
import sys
import threading

import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
try:
    from benchmarks.compile_time import forget_caches, synthetic_module
finally:
    sys.path.remove(str(REPO_ROOT))

from fsmooth.driver import c_passes, run_passes  # noqa: E402

SMALL, LARGE = 125, 500
GROWTH = LARGE // SMALL
SLACK = 1.5  # per-kernel constant work (the entry's C, the interface) and sympy's own sizes


def pipeline_calls(kernel) -> int:
    """The Python function calls of one run of the C pipeline's passes on ``kernel``, with empty
    caches (the front end's work excluded: ``program()`` first)."""
    program = kernel.program()
    forget_caches()
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    threading.setprofile(count)  # the passes run on a thread of their own (fsmooth.deep_stack)
    try:
        run_passes(c_passes(kernel.options), program)
    finally:
        threading.setprofile(None)
    return calls


@pytest.mark.parametrize("shape", ["long_sum", "let_chain", "index_chain"])
def test_the_work_of_a_long_program_grows_linearly(tmp_path, shape):
    module = synthetic_module(tmp_path, (SMALL, LARGE))
    small, large = (pipeline_calls(getattr(module, f"{shape}_{n}")) for n in (SMALL, LARGE))
    assert large <= GROWTH * SLACK * small, (small, large, large / small)


def test_a_thousand_term_sum_and_let_chains_compute_as_reference_and_numpy(tmp_path):
    module = synthetic_module(tmp_path, (1000,))
    rng = np.random.default_rng(13)
    for v in (rng.uniform(-1.0, 1.0, 1001), rng.uniform(-1.0, 1.0, 5000)):
        total = module.long_sum_1000(v)
        assert total == module.long_sum_1000.reference(v) == np.cumsum(v[:1000])[-1]  # one order of additions
        chain = module.let_chain_1000(v)
        assert chain == module.let_chain_1000.reference(v)
        np.testing.assert_allclose(chain, np.polyval(v[:1001], 1.0001), rtol=1e-12)  # Horner: the same chain
    for v in (rng.integers(-2**40, 2**40, 1001), rng.integers(-5, 5, 3000)):
        horner = v[0]
        for x in v[1:1001]:  # numpy's int64, whose products here stay far inside its range
            horner = (horner * np.int64(31) + x) % np.int64(1000003)
        assert module.index_chain_1000(v) == module.index_chain_1000.reference(v) == horner
    for short in (np.zeros(0), np.zeros(999)):  # reads out of range: refused before the kernel runs
        with pytest.raises(ValueError, match="has length"):
            module.long_sum_1000(short)
        with pytest.raises(IndexError):
            module.long_sum_1000.reference(short)
        with pytest.raises(ValueError, match="has length"):
            module.index_chain_1000(short.astype(np.int64))
        with pytest.raises(IndexError):
            module.index_chain_1000.reference(short.astype(np.int64))
