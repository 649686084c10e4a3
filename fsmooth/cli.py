"""The ``fsmooth`` command line.

    fsmooth compile FILE.py -o DIR [--variant NAME] [--parallel] [--fastmath] [--march ARCH]
    fsmooth explain FILE.py:KERNEL [--stage {core,anf,shape,dps,dpia,c,opencl,all} | --pass NAME | --list-passes]
                   [--target {c,opencl}] [--variant NAME] [--parallel] [--unoptimised] [--no-OPTIMISATION ...]
                   [--opencl-device {generic-gpu,here}]
    fsmooth mem FILE.py:KERNEL [--size NAME=VALUE ...]
    fsmooth demo [--sizes N ...] [--write-c PATH]

``FILE.py`` may also be a dotted module name (``fsmooth.examples:f``, ``fsmooth.examples``).  A program fsmooth cannot
compile, a file that cannot be imported, a bad option, sizes too large for C's integers or for
memory, or written C that the C compiler rejects prints one message and exits with 1.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import pathlib
import sys
from collections.abc import Mapping
from dataclasses import fields, replace

import numpy as np

from fsmooth.shape.size_printer import C, print_condition

from fsmooth.shape.ir import ShapeProgram
from fsmooth.shape.ir import show_program as show_shapes

from .artifact import CArtifact, KernelInterface
from .driver import (OPENCL_STAGE_PASSES, OPENCL_STAGES, STAGE_PASSES, STAGES, c_passes, compile_to_c,
                     opencl_passes, pass_names, run_passes, verifying)
from .embed import exported_kernels, library
from .errors import CompileError
from .kernel import Kernel
from .opencl_artifact import OpenCLArtifact
from .options import VARIANTS, Options, default_options, optimisations


class UsageError(Exception):
    """A command-line mistake: reported as one line, exit status 1."""


# ----------------------------------------------------------------------------- finding kernels

def _import_file(path: pathlib.Path):
    package = _package_of(path.resolve())
    if package is not None:  # a module of a package (it may import its siblings relatively)
        root, dotted = package
        sys.path.insert(0, str(root))
        return importlib.import_module(dotted)
    name = f"_fsmooth_cli_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise UsageError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # Let the file import its neighbours, as `python FILE.py` would.
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module


def _package_of(path: pathlib.Path):
    """(the directory above the outermost package around ``path``, its dotted module name), or
    None for a file that is not in a package (no ``__init__.py`` beside it)."""
    parts, directory = [path.stem], path.parent
    while (directory / "__init__.py").is_file():
        parts.insert(0, directory.name)
        directory = directory.parent
    if len(parts) == 1 or not all(part.isidentifier() for part in parts):
        return None
    return directory, ".".join(parts)


def load_module(where: str):
    """The module of ``FILE.py`` or ``package.module``; a failing import is a UsageError."""
    path = pathlib.Path(where)
    try:
        if path.suffix == ".py" or path.exists():
            if not path.is_file():
                raise UsageError(f"no such file: {where}")
            return _import_file(path)
        return importlib.import_module(where)
    except (UsageError, CompileError):
        raise
    except Exception as err:  # the user's module failed to import: report it, not our stack
        raise UsageError(f"cannot import {where}: {type(err).__name__}: {err}") from None


def load_kernel(target: str) -> Kernel:
    """The kernel named by ``FILE.py:KERNEL`` or ``package.module:KERNEL``."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise UsageError(f"expected FILE.py:KERNEL, got {target!r}")
    module = load_module(where)
    kernel = getattr(module, name, None)
    if kernel is None:
        found = sorted(k for k, v in vars(module).items() if isinstance(v, Kernel))
        raise UsageError(f"{where} has no kernel {name!r}"
                         + (f" (its kernels: {', '.join(found)})" if found else ""))
    if not isinstance(kernel, Kernel):
        raise UsageError(f"{where}:{name} is not an @fsmooth.kernel function")
    return kernel


# ----------------------------------------------------------------------------- compile

def compile_library(where: str, out_dir: str, variant: str | None, parallel: bool, fastmath: bool = False,
                    march: str | None = None) -> str:
    """``fsmooth compile``: the exported kernels of a module as <module>.h/.c/.json in ``out_dir``, to
    be built for any CPU of the platform, or for ``march`` (the build flags of the header and
    manifest say which); ``Options.native`` concerns in-process builds only."""
    module = load_module(where)
    kernels = exported_kernels(module)
    if not kernels:
        raise UsageError(f"{where} defines no exported kernels (helpers, which take functions, are not exported)")
    options = VARIANTS[variant] if variant else default_options()
    options = replace(options, parallel=options.parallel or parallel, fastmath=options.fastmath or fastmath,
                      native=False)
    path = pathlib.Path(where)
    name = path.stem if path.suffix == ".py" else where.rpartition(".")[2]
    lib = library(name, kernels, options, path.name if path.suffix == ".py" else where, march)
    try:
        written = lib.write(pathlib.Path(out_dir))
    except OSError as err:
        raise UsageError(f"cannot write to {out_dir}: {err}") from None
    check_c_compiles(written[1], options, march)
    return "\n".join([f"compiled {len(kernels)} kernels of {where} ({', '.join(k.name for k in kernels)})"]
                     + [f"wrote {p}" for p in written])


def check_c_compiles(source: pathlib.Path, options: Options, march: str | None = None) -> None:
    """``cc -fsyntax-only`` of the written ``.c``: ``fsmooth compile`` reports success only for C
    that compiles (for ``march``, which the compiler must know).  The gc variant includes Boehm's
    ``gc.h``, a system package: its absence is said as such, not blamed on the generated C."""
    import subprocess

    from .cache import c_compiler, system_library_available

    if options.allocation == "gc" and not system_library_available("gc.h", "gc"):
        raise UsageError("the gc variant needs Boehm's libgc (gc.h, -lgc), which this machine's C compiler "
                         "does not find; install it (e.g. libgc-dev) or pick another variant")
    march_flags = [f"-march={march}"] if march else []
    command = [*c_compiler(), "-std=c99", "-fsyntax-only", *march_flags, *(["-fopenmp"] if options.parallel else []),
               str(source)]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as err:
        raise UsageError(f"cannot run the C compiler {command[0]!r} to check {source}: {err}") from None
    if result.returncode != 0:
        first = next((line for line in result.stderr.splitlines() if "error" in line), result.stderr.strip())
        if march and "-march" in first:
            raise UsageError(f"--march {march}: the C compiler {command[0]!r} does not know this CPU: {first}")
        raise UsageError(f"the C written to {source} does not compile: {first}")


def compile_opencl(where: str, out_dir: str) -> str:
    """``fsmooth compile --target opencl``: every exported kernel of a module in one
    ``<module>.cl``, its launch plan in ``<module>.opencl.json``, and C host code with the C
    target's conventions (``<module>.h``, ``<module>.c``, ``<module>.json`` and the runtime
    headers: fsmooth/opencl_host.py), whose ``.c`` must compile."""
    from .opencl_host import opencl_library

    module = load_module(where)
    kernels = exported_kernels(module)
    if not kernels:
        raise UsageError(f"{where} defines no exported kernels (helpers, which take functions, are not exported)")
    path = pathlib.Path(where)
    name = path.stem if path.suffix == ".py" else where.rpartition(".")[2]
    lib = opencl_library(name, kernels, path.name)
    try:
        written = lib.write(pathlib.Path(out_dir))
    except OSError as err:
        raise UsageError(f"cannot write to {out_dir}: {err}") from None
    check_c_compiles(pathlib.Path(out_dir) / f"{lib.name}.c", default_options())
    return "\n".join([f"compiled {len(lib.manifest['kernels'])} kernels of {where} to OpenCL "
                      f"({', '.join(lib.manifest['kernels'])})"]
                     + [f"wrote {p}" for p in written]
                     + [f"skipped {kname}: {message.splitlines()[0]}" for kname, message in lib.skipped.items()])


# ----------------------------------------------------------------------------- explain

def show_stage(form) -> str:
    """A stage's program in its IR's own notation: ``show_program`` of the IR's module or of the
    printer module ``show`` beside it, else the object's own ``__str__``; element by element for
    collections."""
    if isinstance(form, (CArtifact, OpenCLArtifact)):
        return form.source
    if isinstance(form, Mapping):
        return "\n\n".join(show_stage(v) for v in form.values())
    if isinstance(form, (list, tuple)):
        return "\n\n".join(show_stage(v) for v in form)
    module = type(form).__module__
    for printer_module in (module, f"{module.rpartition('.')[0]}.show"):
        try:
            printer = getattr(importlib.import_module(printer_module), "show_program", None)
        except ImportError:
            continue
        if callable(printer):
            return printer(form)
    return str(form)


def explain_options(kernel: Kernel, args: argparse.Namespace) -> Options:
    """The kernel's own options, changed as the command line asks: a variant replaces them,
    then ``--parallel``, each ``--no-NAME``, ``--unoptimised`` (every optimisation off) and
    ``--opencl-device here``."""
    options = VARIANTS[args.variant] if args.variant else kernel.options
    changes = {name: False for name in optimisations() if args.unoptimised or not getattr(args, name)}
    if getattr(args, "opencl_device", None) == "here":  # the device fsmooth chooses on this machine, as kernel.opencl uses it
        from .opencl_device import default_context, describe

        changes["opencl_device"] = describe(default_context().devices[0])
    return replace(options, **changes, parallel=options.parallel or args.parallel)


def explain(kernel: Kernel, stage: str = "all", pass_name: str | None = None, target: str = "c",
            options: Options | None = None, as_translated: bool = False) -> str:
    """``fsmooth explain``: one stage, every stage, or one pass's output(s) of ``kernel``.
    ``as_translated``: the shape and dps stages as translated, before §3.5's simplifications
    (with every optimisation off, the DPS paper's §3.4 forms)."""
    options = kernel.options if options is None else options
    passes = c_passes(options) if target == "c" else opencl_passes(options)
    stages = STAGES if target == "c" else OPENCL_STAGES
    stage_passes = {**(STAGE_PASSES if target == "c" else OPENCL_STAGE_PASSES),
                    **({"dps": "dps"} if as_translated else {})}
    names = pass_names(passes)
    if pass_name is not None and pass_name not in names:
        raise UsageError(f"the {target} path has no pass {pass_name!r}; its passes: {', '.join(names)}")
    if stage not in (*stages, "all"):
        raise UsageError(f"the {target} path has no stage {stage!r}; its stages: {', '.join(stages)}")

    def show(form) -> str:
        return show_shapes(form, simplified=False) if as_translated and isinstance(form, ShapeProgram) else show_stage(form)

    program = kernel.program()
    if stage == "core" and pass_name is None:  # the front end's output needs none of the later passes
        return show(program)
    trace = run_passes(passes, program, verifying(options))
    if pass_name is not None:
        forms = trace.of(pass_name)
        if not forms:  # a rewrite that changed nothing
            return f"(the pass {pass_name} changed nothing)"
        if len(forms) == 1:
            return show(forms[0])
        return "\n\n".join(f"== {pass_name}, change {k} of {len(forms)} ==\n{show(form)}"
                            for k, form in enumerate(forms, 1))
    if stage != "all":
        return show(trace.last(stage_passes[stage]))
    return "\n\n".join(f"== {name} ==\n{show(trace.last(stage_passes[name]))}" for name in stages)


def list_passes(target: str, options: Options) -> str:
    """The passes of ``target``'s path in order, each F̃ rewrite under the pass it belongs to."""
    passes = c_passes(options) if target == "c" else opencl_passes(options)
    return "\n".join(["core", *(line for p in passes for line in (*(f"  {r}" for r in p.rewrites), p.name))])


# ----------------------------------------------------------------------------- mem

def parse_sizes(specs: list[str], interface: KernelInterface) -> dict[str, int]:
    known = [s.symbol for s in interface.sizes]
    sizes = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name = name.strip()
        if not sep:
            raise UsageError(f"--size wants NAME=VALUE, got {spec!r}")
        if name not in known:
            raise UsageError(f"{interface.name} has no size {name!r}; its sizes: {', '.join(known) or 'none'}")
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"--size {name}: {text!r} is not an integer") from None
        if value < 0:
            raise UsageError(f"--size {name}: sizes are >= 0, got {value}")
        sizes[name] = value
    return sizes


def memory_report(kernel: Kernel, specs: list[str]) -> str:
    if kernel.program().main.is_helper:
        raise UsageError(f"{kernel.name} is a helper (it takes a function): it has no memory of its own, "
                         f"it is inlined where kernels call it")
    artifact = compile_to_c(kernel.program())
    interface = artifact.interfaces[kernel.name]
    sizes = parse_sizes(specs, interface)
    lines = [f"kernel {interface.name}({', '.join(f'{p}: {t}' for p, t in interface.params)}) -> {interface.result}",
             f"sizes: {', '.join(f'{s.symbol} = ' + _size_origin(s) for s in interface.sizes) or 'none'}",
             f"result dims: {_show_dims(interface.result_dims)}",
             f"scratch bytes: {interface.scratch_formula}"]
    lines += [f"requires: {print_condition(c.cond, C)}   ({c.message})" for c in interface.constraints]
    if not sizes:
        return "\n".join(lines)
    missing = [s.symbol for s in interface.sizes if s.symbol not in sizes]
    if missing:
        raise UsageError(f"give a value for every size (missing: {', '.join(missing)})")
    from .runtime import Executable, load_library

    try:
        dims, nbytes = Executable(interface, load_library(artifact)).plan_for_sizes(sizes)
    except (ValueError, OverflowError, MemoryError, ZeroDivisionError) as err:
        # the sizes break a constraint, do not fit C's integers, or make the scratch overflow
        raise UsageError(f"sizes {', '.join(f'{k}={v}' for k, v in sizes.items())}: {err or type(err).__name__}") from None
    formula = interface.scratch_formula
    formula_value = formula.subs({s: sizes[s.name] for s in formula.free_symbols})
    lines.append(f"with {', '.join(f'{k}={v}' for k, v in sizes.items())}:")
    lines.append(f"  result dims {_show_dims(dims)}")
    lines.append(f"  scratch {nbytes} bytes")
    if formula_value != nbytes:
        lines.append(f"  warning: the formula gives {formula_value}, the compiled scratch function {nbytes}")
    return "\n".join(lines)


def _show_dims(dims) -> str:
    """``(n, m)``; a tuple result's dims per component: ``⟨(n), ()⟩``."""
    if any(isinstance(d, tuple) for d in dims):
        return f"⟨{', '.join(_show_dims(d) for d in dims)}⟩"
    return f"({', '.join(map(str, dims))})"


def _size_origin(source) -> str:
    return source.param if source.dim is None else f"dim {source.dim} of {source.param}"


# ----------------------------------------------------------------------------- demo

def demo(sizes: list[int], write_c: str | None) -> str:
    from . import examples

    rng = np.random.default_rng(0)
    f = examples.f
    interface = f.executable().interface
    lines = ["f(vec1, vec2) = vector_norm(vector_add(vec1, vec2))   (DPS paper, §3.2)",
             f"scratch bytes: {interface.scratch_formula}",
             f"{'n':>8} {'compiled':>22} {'reference':>22} {'difference':>11} {'scratch':>9}"]
    for n in sizes:
        vec1, vec2 = rng.standard_normal(n), rng.standard_normal(n)
        compiled, reference = f(vec1, vec2), f.reference(vec1, vec2)
        lines.append(f"{n:>8} {compiled:>22.16g} {reference:>22.16g} {abs(compiled - reference):>11.3g} "
                     f"{f.scratch_bytes(vec1, vec2):>9}")
    source = f.c_source()
    if write_c:
        try:
            pathlib.Path(write_c).write_text(source)
        except OSError as err:
            raise UsageError(f"cannot write {write_c}: {err}") from None
        lines.append(f"C source ({len(source)} characters) written to {write_c}")
    else:
        lines.append(f"C source: {len(source)} characters (--write-c PATH to save it)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fsmooth", description="Compile F̃ kernels written in Python to C.")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("compile", help="write a module's kernels as embeddable C (.h, .c, manifest)")
    p.add_argument("module", metavar="FILE.py")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--variant", choices=sorted(VARIANTS), help="one of the DPS paper's variants (default: arena)")
    p.add_argument("--parallel", action="store_true", help="'#pragma omp parallel for' on outer parallel loops")
    p.add_argument("--fastmath", action="store_true",
                   help="let the C compiler reassociate float arithmetic (reductions vectorise); NaN/inf stay IEEE")
    p.add_argument("--march", metavar="ARCH",
                   help="build instructions for this CPU (cc -march=ARCH, e.g. x86-64-v3, native); default: portable")
    p.add_argument("--target", choices=("c", "opencl"), default="c",
                   help="c: <module>.h/.c/.json; opencl: <module>.cl and <module>.opencl.json")
    p = commands.add_parser("explain", help="print a kernel at one stage or pass of the pipeline")
    p.add_argument("target", metavar="FILE.py:KERNEL")
    p.add_argument("--stage", choices=tuple(dict.fromkeys(STAGES + OPENCL_STAGES)) + ("all",), default="all")
    p.add_argument("--pass", dest="pass_name", metavar="NAME", help="print this pass's output (--list-passes)")
    p.add_argument("--list-passes", action="store_true", help="list the passes of the target's path")
    p.add_argument("--target", dest="back_end", choices=("c", "opencl"), default="c", help="the C or the OpenCL path")
    p.add_argument("--variant", choices=sorted(VARIANTS), help="compile as one of the DPS paper's variants")
    p.add_argument("--parallel", action="store_true", help="'#pragma omp parallel for' on outer parallel loops")
    p.add_argument("--unoptimised", action="store_true",
                   help="every optimisation off, shapes and DPS as translated: the DPS paper's §3.4 forms")
    p.add_argument("--opencl-device", choices=("generic-gpu", "here"), default="generic-gpu",
                   help="the device the OpenCL strategy is chosen for (fsmooth.cost_model): the generic GPU, "
                        "or the OpenCL device fsmooth chooses on this machine (PYOPENCL_CTX honoured)")
    for f in fields(Options):
        if "optimisation" in f.metadata:
            p.add_argument(f"--no-{f.name.replace('_', '-')}", dest=f.name, action="store_false",
                           help=f"off: {f.metadata['help']} ({f.metadata['optimisation']})")
    p = commands.add_parser("mem", help="print a kernel's scratch memory as a formula of its sizes")
    p.add_argument("target", metavar="FILE.py:KERNEL")
    p.add_argument("--size", action="append", default=[], metavar="NAME=VALUE")
    p = commands.add_parser("demo", help="compile and run the DPS paper's running example")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 1000], metavar="N")
    p.add_argument("--write-c", metavar="PATH")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        match args.command:
            case "compile":
                if args.target == "opencl":
                    text = compile_opencl(args.module, args.output)
                else:
                    text = compile_library(args.module, args.output, args.variant, args.parallel, args.fastmath,
                                           args.march)
            case "explain":
                kernel = load_kernel(args.target)
                options = explain_options(kernel, args)
                if args.list_passes:
                    text = list_passes(args.back_end, options)
                else:
                    text = explain(kernel, args.stage, args.pass_name, args.back_end, options, args.unoptimised)
            case "mem":
                text = memory_report(load_kernel(args.target), args.size)
            case "demo":
                if any(n < 0 for n in args.sizes):
                    raise UsageError("--sizes must be >= 0")
                text = demo(args.sizes, args.write_c)
    except CompileError as err:
        print(err, file=sys.stderr)
        return 1
    except (MemoryError, OverflowError) as err:  # sizes too large for this machine or for C's integers
        print(f"fsmooth: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    except UsageError as err:
        print(f"fsmooth: error: {err}", file=sys.stderr)
        return 1
    print(text)
    return 0
