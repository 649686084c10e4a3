"""The pipeline of docs/ARCHITECTURE.md, one stage per package, each a pure function of the last.

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
    from fsmooth.dpia.codegen_c import generate_c
    from fsmooth.dpia.translate import dpia_program
    from fsmooth.dps.simplify import simplify_allocs
    from fsmooth.dps.translate import dps_program
    from fsmooth.shape.translate import shape_program

    from .optimize import optimize_program
    from .anf import anf_program

    anf = optimize_program(anf_program(program), options)
    shapes = shape_program(anf)
    dps = simplify_allocs(dps_program(anf, shapes), options)
    imperative = dpia_program(dps)
    return Stages(program, anf, shapes, dps, imperative, generate_c(imperative, options))


def compile_to_c(program: core.Program, options: Options = Options()):
    return run_pipeline(program, options).c


def build_executable(kernel):
    """Compile (or fetch from the cache) the C of ``kernel`` and return its runtime handle."""
    from .runtime import Executable, load_library

    program = kernel.program()
    artifact = compile_to_c(program, kernel.options)
    return Executable(artifact.interfaces[kernel.name], load_library(artifact), kernel.options.check_arena,
                      program.main.params)


def opencl_options(options: Options) -> Options:
    """The options of the OpenCL back end: the F̃ simplifications as asked, but DPS regions left
    where they are used (no alloc hoisting or merging, no parallel frames), because the OpenCL
    stage hoists them itself, per address space and sized by the parallel loops (DPIA §6.4)."""
    from dataclasses import replace

    return replace(options, hoist_allocs=False, merge_allocs=False, parallel=False, allocation="arena")


def inline_every_call(program: core.Program) -> core.Program:
    """``program`` with every kernel call of its entry inlined: an OpenCL kernel cannot call
    another with its own buffers, and F̃ has no recursion, so this ends."""
    from .inline_kernels import called_kernels
    from .anf import anf_kernel

    entry = program.main
    while called_kernels(entry.body):
        entry = anf_kernel(program, entry, inline=called_kernels(entry.body))
    return core.Program({**program.kernels, program.entry: entry}, program.entry)


def compile_to_opencl(program: core.Program, options: Options = Options()):
    """The ``fsmooth.opencl_artifact.OpenCLArtifact`` of ``program``: the stages of
    ``run_pipeline`` up to DPS, then accT/conT keeping the strategies, the OpenCL kernels planned,
    vectorised, then printed."""
    from fsmooth.dpia.codegen_opencl import generate_opencl, plan_opencl
    from fsmooth.dpia.translate_strategies import strategy_program
    from fsmooth.dpia.vectorize import vectorize_plan
    from fsmooth.dps.simplify import simplify_allocs
    from fsmooth.dps.translate import dps_program
    from fsmooth.shape.translate import shape_program

    from .optimize import optimize_program
    from .anf import anf_program

    options = opencl_options(options)
    anf = optimize_program(inline_every_call(anf_program(program)), options)
    dps = simplify_allocs(dps_program(anf, shape_program(anf)), options)
    return generate_opencl(vectorize_plan(plan_opencl(strategy_program(dps))), options)
