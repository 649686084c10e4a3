"""The pipeline of DESIGN.md, one stage per package, each a pure function of the last.

    core (front end) ─▶ anf (inlining of helpers and lambdas, ANF; then the F̃ simplifications
    the options ask for) ─▶ shape (S⟦e⟧, partially evaluated) ─▶ dps (D⟦e⟧r, alloc
    simplification, scratch) ─▶ dpia (accT/conT, imperative) ─▶ c (code generation)
    ─▶ cffi (fsmooth.runtime)
"""
from __future__ import annotations

from dataclasses import dataclass

from . import core
from .options import Options

STAGES = ("core", "anf", "shape", "dps", "dpia", "c")


@dataclass(frozen=True)
class Stages:
    """Every intermediate form of one program, for ``fsmooth explain`` and the tests."""

    core: object
    anf: object
    shape: object
    dps: object
    dpia: object
    c: object  # fsmooth.artifact.CArtifact


def run_pipeline(program: core.Program, options: Options = Options()) -> Stages:
    from dpia.codegen_c import generate_c
    from dpia.translate import dpia_program
    from dps.simplify import simplify_allocs
    from dps.translate import dps_program
    from shape.translate import shape_program

    from .simplify import simplify_program

    anf = simplify_program(program)
    shapes = shape_program(anf)
    dps = simplify_allocs(dps_program(anf, shapes), options)
    imperative = dpia_program(dps)
    return Stages(program, anf, shapes, dps, imperative, generate_c(imperative, options))


def compile_to_c(program: core.Program, options: Options = Options()):
    return run_pipeline(program, options).c


def build_executable(kernel):
    """Compile (or fetch from the cache) the C of ``kernel`` and return its runtime handle."""
    from .runtime import Executable, load_library

    artifact = compile_to_c(kernel.program(), kernel.options)
    return Executable(artifact.interfaces[kernel.name], load_library(artifact))
