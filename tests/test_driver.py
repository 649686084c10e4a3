"""The driver as named passes (fsmooth/driver.py): their order, what each reports, and the
debug option that verifies every pass's output and names the pass that broke it."""
from __future__ import annotations

import pytest

from corpus import blas, linalg
from fsmooth import driver
from fsmooth.errors import IRError
from fsmooth.optimize import REWRITES, kernel_rewrites
from fsmooth.options import UNOPTIMISED, Options


def test_the_c_and_opencl_passes_in_order():
    assert driver.pass_names(driver.c_passes(Options())) == (
        "core", "anf", *REWRITES, "optimise", "shape", "dps", "simplify_allocs", "beta_reduce_scalar_lets",
        "dpia", "interchange", "single_trip", "row_versions", "jam_reductions", "c")
    assert driver.pass_names(driver.opencl_passes(Options())) == (
        "core", "anf", "inline_every_call", *REWRITES, "optimise", "map_fission", "reassociate_folds",
        "auto_reductions", "shape", "dps", "simplify_allocs",
        "beta_reduce_scalar_lets", "dpia_strategies", "unroll_jam", "plan_opencl", "stage_rows", "stage_tiles", "vectorize", "opencl")


def test_each_rewrite_is_a_pass_its_option_switches():
    assert REWRITES == ("inline_kernels", "inline_lets_and_fusion", "constant_folding", "cse", "dce", "licm",
                        "guards_to_bounds")
    assert [name for name, _ in kernel_rewrites(Options(cse=False, inline_kernels=False, licm=False))] == [
        "inline_lets_and_fusion", "constant_folding", "dce", "guards_to_bounds"]
    assert kernel_rewrites(Options(**UNOPTIMISED)) == ()
    # inline_lets and fusion are one rewrite: either turns it on
    assert [name for name, _ in kernel_rewrites(Options(**{**UNOPTIMISED, "fusion": True}))] == [
        "inline_lets_and_fusion"]


def test_the_trace_holds_every_output_and_the_stages_are_passes_of_it():
    program = linalg.f.program()
    trace = driver.run_passes(driver.c_passes(Options()), program)
    names = [name for name, _ in trace.outputs]
    assert names[:2] == ["core", "anf"] and names[-11:] == [
        "optimise", "shape", "dps", "simplify_allocs", "beta_reduce_scalar_lets", "dpia", "interchange", "single_trip", "row_versions",
        "jam_reductions", "c"]
    assert set(names[2:-11]) <= set(REWRITES) and "inline_lets_and_fusion" in names  # the rewrites that fired
    assert trace.last("core") is program
    # the F̃ optimisations end where the last rewrite left the program
    assert trace.last("optimise") == trace.outputs[-12][1]
    assert driver.run_pipeline(program).c.source == trace.last("c").source


def test_unoptimised_the_program_is_translated_as_is():
    trace = driver.run_passes(driver.c_passes(Options(**UNOPTIMISED)), linalg.f.program())
    assert not set(REWRITES) & {name for name, _ in trace.outputs}
    assert trace.last("optimise") == trace.last("anf")


def _failing_verify(count: list, fail_at: int):
    def verify(program):
        count.append(program)
        if len(count) == fail_at:
            raise IRError("a planted inconsistency")
    return verify


@pytest.mark.parametrize("module, rank", [("fsmooth.dps.ir", 1), ("fsmooth.dps.ir", 2), ("fsmooth.core", 3),
                                          ("fsmooth.shape.ir", 1), ("fsmooth.dpia.phrases", 1)])
def test_a_failing_verify_names_the_pass(monkeypatch, module, rank):
    """The pass named is the one whose output is the ``rank``-th of the IR of ``module``."""
    options = Options(verify_passes=True)
    program = linalg.f.program()
    trace = driver.run_passes(driver.c_passes(options), program)
    culprit = [name for name, form in trace.outputs if type(form).__module__ == module][rank - 1]
    monkeypatch.setattr(module + ".verify", _failing_verify([], rank), raising=False)
    with pytest.raises(IRError, match=f"pass '{culprit}'.*a planted inconsistency"):
        driver.run_pipeline(program, options)


def test_verification_is_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv("FSMOOTH_VERIFY", raising=False)
    calls: list = []
    monkeypatch.setattr("fsmooth.dps.ir.verify", _failing_verify(calls, 1), raising=False)
    driver.run_pipeline(linalg.f.program())
    assert calls == []
    monkeypatch.setenv("FSMOOTH_VERIFY", "1")
    with pytest.raises(IRError, match="pass 'dps'"):
        driver.run_pipeline(linalg.f.program())


def test_the_opencl_path_verifies_too(monkeypatch):
    monkeypatch.setattr("fsmooth.dpia.phrases.verify", _failing_verify([], 1), raising=False)
    with pytest.raises(IRError, match="pass 'dpia_strategies'"):
        driver.compile_to_opencl(blas.scal.program(), Options(verify_passes=True))
