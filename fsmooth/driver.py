"""The pipeline of docs/ARCHITECTURE.md as ordered lists of named passes, one list per target.

    C:      anf ─▶ optimise (inline_kernels, inline_lets_and_fusion, constant_folding, cse, dce, licm,
            guards_to_bounds, to a fixed point) ─▶ shape ─▶ dps ─▶ simplify_allocs ─▶ beta_reduce_scalar_lets
            ─▶ dpia ─▶ interchange ─▶ single_trip ─▶ row_versions ─▶ jam_reductions ─▶ c
    OpenCL: anf ─▶ inline_every_call ─▶ optimise ─▶ map_fission ─▶ reassociate_folds
            ─▶ auto_reductions ─▶ shape ─▶ dps ─▶ simplify_allocs
            ─▶ beta_reduce_scalar_lets ─▶ dpia_strategies ─▶ unroll_jam ─▶ plan_opencl ─▶ stage_rows ─▶ stage_tiles ─▶ vectorize
            ─▶ opencl

A pass is a pure function of the outputs before it; ``run_passes`` records every pass's output
(``fsmooth explain --pass NAME`` prints one) and, with ``Options.verify_passes`` or
``FSMOOTH_VERIFY=1``, checks each with the ``verify`` of its IR's module, so that an ``IRError``
names the pass that broke the program.
"""
from __future__ import annotations

import importlib
import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from . import core
from .deep_stack import on_deep_stack
from .errors import CompileError, IRError
from .options import Options

Report = Callable[[str, object], None]


@dataclass(frozen=True)
class Pass:
    """One named step. ``run(forms, report)`` takes the outputs so far, by the name of the pass
    that made each (``"core"``: the front end's program), and returns its own; a pass made of
    named rewrites (``optimise``) also ``report``s each rewrite's output, by the rewrite's name."""

    name: str
    run: Callable[[dict, Report], object]
    rewrites: tuple[str, ...] = ()
    verify: Callable[[object], None] | None = None  # checks its output (and its rewrites'); None: its IR's ``verify``


@dataclass(frozen=True)
class Trace:
    """Every output of one run, in order: ``(pass name, form)``, a rewrite once per change."""

    outputs: tuple[tuple[str, object], ...]

    def of(self, name: str) -> list:
        return [form for pass_name, form in self.outputs if pass_name == name]

    def last(self, name: str):
        return self.of(name)[-1]


def c_module(program: core.Program) -> str:
    """The module prefix of a program's exported C names: the entry kernel's source file's stem
    (``fsmooth.dpia.emit.c_module_name``), as ``fsmooth compile`` names the embedded library."""
    from fsmooth.dpia.emit import c_module_name

    loc = program.main.loc
    return c_module_name(pathlib.Path(loc.filename).stem if loc is not None else "fsmooth")


def c_passes(options: Options, module: str | None = None) -> tuple[Pass, ...]:
    """The C back end's passes; the kernels are exported as ``<module>_<kernel>``, by default with
    the module of the program's source (``c_module``)."""
    from fsmooth.dpia.codegen_c import generate_c
    from fsmooth.dpia.interchange import interchange_program
    from fsmooth.dpia.row_versions import row_versions_program
    from fsmooth.dpia.single_trip import single_trip_program
    from fsmooth.dpia.translate import dpia_program
    from fsmooth.dpia.unroll_jam import jam_reductions_program

    from .cost_model import JAM

    return (*_front_passes(options, inline_every=False, target="c"),
            Pass("dpia", lambda forms, report: dpia_program(forms["beta_reduce_scalar_lets"])),
            Pass("interchange", lambda forms, report: interchange_program(forms["dpia"]) if options.interchange
                 else forms["dpia"]),
            Pass("single_trip", lambda forms, report: single_trip_program(forms["interchange"]) if options.update_in_place
                 else forms["interchange"]),
            Pass("row_versions", lambda forms, report: row_versions_program(forms["single_trip"]) if options.row_versions
                 else forms["single_trip"]),
            Pass("jam_reductions", lambda forms, report: jam_reductions_program(forms["row_versions"], JAM)
                 if options.jam_reductions else forms["row_versions"]),
            Pass("c", lambda forms, report: generate_c(forms["jam_reductions"], module or c_module(forms["core"]), options)))


def opencl_passes(options: Options, module: str | None = None) -> tuple[Pass, ...]:
    """The OpenCL back end's passes: as for C up to DPS, with every call inlined, then accT/conT
    keeping the strategies, then OpenCL: the kernels planned (loop levels, hoisted buffers),
    vectorised, then printed."""
    from fsmooth.dpia.codegen_opencl import generate_opencl, plan_opencl
    from fsmooth.dpia.stage_rows import stage_rows
    from fsmooth.dpia.stage_tiles import stage_tiles

    from .cost_model import GENERIC_GPU
    from fsmooth.dpia.translate_strategies import strategy_program
    from fsmooth.dpia.unroll_jam import unroll_jam_program
    from fsmooth.dpia.vectorize import vectorize_plan

    options = opencl_options(options)
    planning = (*_front_passes(options, inline_every=True, target="opencl"),
                Pass("dpia_strategies", lambda forms, report: strategy_program(forms["beta_reduce_scalar_lets"], options)),
                Pass("unroll_jam", lambda forms, report: unroll_jam_program(forms["dpia_strategies"])),
                Pass("plan_opencl", lambda forms, report: plan_opencl(forms["unroll_jam"], module or c_module(forms["core"]),
                                                                      options.opencl_reduction.launches == 1,
                                                                      options.opencl_device or GENERIC_GPU)),
                Pass("stage_rows", lambda forms, report: stage_rows(forms["plan_opencl"], options.opencl_device or GENERIC_GPU)
                     if options.stage_rows else forms["plan_opencl"]),
                Pass("stage_tiles", lambda forms, report: stage_tiles(forms["stage_rows"], options.opencl_device or GENERIC_GPU)
                     if options.stage_tiles else forms["stage_rows"]),
                Pass("vectorize", lambda forms, report: vectorize_plan(forms["stage_tiles"])))
    after = planning[[p.name for p in planning].index("auto_reductions") + 1:]
    return (*planning,
            Pass("opencl", lambda forms, report: generate_opencl(forms["vectorize"], options, forms["auto_reductions"].notes,
                                                                 _short_rows(forms, after, verifying(options)))))


def _short_rows(forms: dict, after: tuple[Pass, ...], verify: bool) -> tuple:
    """Where ``auto_reductions`` nests a map of reductions apart for short rows (its ``short``
    program, run where ``when`` holds): ``((when, the short program's plan),)``, the passes
    ``after`` auto_reductions up to the plan run on it as on the program for long rows; else ()."""
    chosen = forms["auto_reductions"]
    if chosen.short is None:
        return ()
    variant = {**forms, "auto_reductions": replace(chosen, program=chosen.short, short=None, when=None)}
    for p in after:
        variant[p.name] = p.run(variant, lambda name, form: None)
        if verify:
            verify_output(p.name, variant[p.name], p.verify)
    return ((chosen.when, variant[after[-1].name]),)


def _front_passes(options: Options, inline_every: bool, target: str) -> tuple[Pass, ...]:
    from fsmooth.dpia.inline_scalar_lets import mark_beta_reducible
    from fsmooth.dps.simplify import simplify_allocs
    from fsmooth.dps.translate import dps_program
    from fsmooth.shape.translate import shape_program

    from .anf import anf_program
    from .foreign import check_sources
    from .optimize import kernel_rewrites, optimize_program

    # after the front end, core programs must be in ANF too; every foreign function called has
    # its source for the target (a CompileError at the call of one without)
    passes = [Pass("anf", lambda forms, report: anf_program(check_sources(forms["core"], target)),
                   verify=core.verify_anf)]
    if inline_every:
        passes.append(Pass("inline_every_call", lambda forms, report: inline_every_call(forms["anf"]),
                           verify=core.verify_anf))
    source = passes[-1].name
    passes.append(Pass("optimise", lambda forms, report: optimize_program(forms[source], options, report),
                       tuple(name for name, _ in kernel_rewrites(options)), core.verify_anf))
    optimised = lambda forms: forms["optimise"]  # noqa: E731
    constrained = lambda forms, dps: dps  # noqa: E731
    if target == "opencl":
        from . import auto_reductions
        from .map_fission import map_fission
        from .reassociate_folds import reassociate_folds

        passes.append(Pass("map_fission", lambda forms, report: map_fission(forms["optimise"]) if options.map_fission else forms["optimise"],
                           verify=core.verify_anf))
        passes.append(Pass("reassociate_folds", lambda forms, report: reassociate_folds(forms["map_fission"]) if options.auto_reductions else forms["map_fission"],
                           verify=core.verify_anf))
        passes.append(Pass("auto_reductions", lambda forms, report: auto_reductions.auto_reductions(forms["reassociate_folds"], options),
                           verify=auto_reductions.verify))
        optimised = lambda forms: forms["auto_reductions"].program  # noqa: E731
        constrained = lambda forms, dps: auto_reductions.keep_constraints(dps, forms["auto_reductions"])  # noqa: E731
    return (*passes,
            Pass("shape", lambda forms, report: shape_program(optimised(forms))),
            Pass("dps", lambda forms, report: constrained(forms, dps_program(optimised(forms), forms["shape"]))),
            Pass("simplify_allocs", lambda forms, report: simplify_allocs(forms["dps"], options, c_locals=target == "c")),
            Pass("beta_reduce_scalar_lets", lambda forms, report: mark_beta_reducible(forms["simplify_allocs"])))


def pass_names(passes: tuple[Pass, ...]) -> tuple[str, ...]:
    """Every name ``run_passes`` may report, in order: ``core``, each pass, each rewrite."""
    return ("core", *(name for p in passes for name in (*p.rewrites, p.name)))


def verifying(options: Options) -> bool:
    return options.verify_passes or os.environ.get("FSMOOTH_VERIFY", "") not in ("", "0")


def run_passes(passes: tuple[Pass, ...], program: core.Program, verify: bool = False) -> Trace:
    """Every pass's output; a deep program runs on a deep stack (``fsmooth.deep_stack``), and a
    ``CompileError`` that a pass raises without a location is located at the entry kernel's ``def``."""
    entry_loc = program.main.loc
    try:
        return on_deep_stack(lambda: _run_passes(passes, program, verify), program.entry, entry_loc)
    except CompileError as err:
        if err.loc is not None:
            raise
        raise CompileError(err.message, entry_loc) from None


def _run_passes(passes: tuple[Pass, ...], program: core.Program, verify: bool) -> Trace:
    outputs: list[tuple[str, object]] = []
    forms = {}
    verifiers = {name: p.verify for p in passes for name in (*p.rewrites, p.name)}

    def report(name: str, form) -> None:
        if verify:
            verify_output(name, form, verifiers.get(name))
        outputs.append((name, form))

    report("core", program)
    forms["core"] = program
    for p in passes:
        forms[p.name] = p.run(forms, report)
        report(p.name, forms[p.name])
    return Trace(tuple(outputs))


def verify_output(name: str, form, verify: Callable[[object], None] | None = None) -> None:
    """``verify(form)``, by default with the ``verify`` of the module that defines ``form``'s IR,
    where it has one."""
    verify = verify or getattr(importlib.import_module(type(form).__module__), "verify", None)
    if verify is None:
        return
    try:
        verify(form)
    except IRError as err:
        raise IRError(f"the output of pass {name!r} is malformed: {err}") from err


STAGES = ("core", "anf", "shape", "dps", "dpia", "c")
OPENCL_STAGES = ("core", "anf", "shape", "dps", "dpia", "opencl")
STAGE_PASSES = {"core": "core", "anf": "optimise", "shape": "shape", "dps": "simplify_allocs", "dpia": "dpia",
                "c": "c"}
"""The pass whose output each stage of docs/ARCHITECTURE.md is (``anf``: after the F̃ optimisations)."""
OPENCL_STAGE_PASSES = {**STAGE_PASSES, "dpia": "dpia_strategies", "opencl": "opencl"}


@dataclass(frozen=True)
class Stages:
    """Every intermediate form of one program, for ``fsmooth explain`` and the tests."""

    core: object
    anf: object
    shape: object
    dps: object
    dpia: object
    c: object  # fsmooth.artifact.CArtifact


def run_pipeline(program: core.Program, options: Options = Options(), module: str | None = None) -> Stages:
    trace = run_passes(c_passes(options, module), program, verifying(options))
    return Stages(*(trace.last(STAGE_PASSES[stage]) for stage in STAGES))


def compile_to_c(program: core.Program, options: Options = Options(), module: str | None = None):
    return run_pipeline(program, options, module).c


def build_executable(kernel, reference=None):
    """Compile (or fetch from the cache) the C of ``kernel`` and return its runtime handle
    (``reference``: as ``fsmooth.runtime.Executable`` takes it)."""
    from .runtime import Executable, load_library

    program = kernel.program()
    artifact = compile_to_c(program, kernel.options)
    library = load_library(artifact, kernel.options.native)
    return Executable(artifact.interfaces[kernel.name], library, kernel.options.check_arena, program.main.params,
                      reference)


def opencl_options(options: Options) -> Options:
    """The options of the OpenCL back end: the F̃ simplifications as asked, but DPS regions left
    where they are used (no alloc hoisting or merging, no parallel frames), because the OpenCL
    stage hoists them itself, per address space and sized by the parallel loops (DPIA §6.4)."""
    return replace(options, hoist_allocs=False, merge_allocs=False, parallel=False, allocation="arena")


def inline_every_call(program: core.Program) -> core.Program:
    """``program`` with every kernel call of its entry inlined: an OpenCL kernel cannot call
    another with its own buffers, and F̃ has no recursion, so this ends.  The entry is then the
    whole program: the OpenCL code is its alone, so the kernels it called are dropped, whose
    optimisation, shapes and DPS would be work that no later pass reads."""
    from .anf import anf_kernel
    from .core import called_kernels

    entry = program.main
    while called_kernels(entry.body):
        entry = anf_kernel(program, entry, inline=called_kernels(entry.body))
    return core.Program({program.entry: entry}, program.entry)


def compile_to_opencl(program: core.Program, options: Options = Options()):
    """The ``fsmooth.opencl_artifact.OpenCLArtifact`` of ``program``."""
    return run_passes(opencl_passes(options), program, verifying(options)).last("opencl")
