"""Embeddable C for a module of kernels: what ``fsmooth compile FILE.py -o DIR`` writes.

All exported kernels of a module go into one translation unit (their callees shared), laid out
the way C users know from Futhark's ``--library`` output:

    <module>.h        the API: a header in commented sections (overview, status codes, one
                      documented block of prototypes per kernel), include guards, ``extern "C"``,
                      nothing beyond <stdint.h> and <stdbool.h>
    <module>.c        the generated code; includes <module>.h and fsmooth_rt.h
    fsmooth_rt.h      the run-time header, copied from clib/ (libc and libm only)
    fsmooth_scalar.h  the scalar helpers that fsmooth_rt.h includes, copied from clib/
    <module>.json     the manifest: kernels, parameters, dims, sizes, constraints, result dims
                      and scratch formulas, for tools that generate bindings; a constraint's
                      ``cond`` and a kernel's ``scratch_expr`` are trees that need no parser
                      (``fsmooth.shape.size_printer.JSON``)

The ABI of each kernel is that of ``fsmooth.artifact``; the header's prototypes are the
artifact's own declarations (``CArtifact.cdef``), so the two cannot drift apart.
"""
from __future__ import annotations

import inspect
import json
import re
import textwrap
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import fsmooth
from fsmooth.clib import C_HEADERS, HEADER_DIR
from fsmooth.dps.ir import ALIGN
from fsmooth.shape.size_printer import C, condition_json, print_condition, size_json

from . import core
from .artifact import STATUS, CArtifact, KernelInterface
from fsmooth.dpia.emit import c_module_name
from .errors import CompileError
from .kernel import Kernel
from .options import Options
from .types import rank, type_str


@dataclass(frozen=True)
class Library:
    """The files of one compiled module, as text (``write`` puts them in a directory)."""

    name: str  # the module's C name: the stem of every file and the prefix of its macros
    header: str
    source: str
    manifest: dict

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        header, source, manifest = (directory / f"{self.name}{suffix}" for suffix in (".h", ".c", ".json"))
        header.write_text(self.header)
        source.write_text(self.source)
        runtime = [directory / name for name in C_HEADERS]
        for path in runtime:
            shutil.copyfile(HEADER_DIR / path.name, path)
        manifest.write_text(json.dumps(self.manifest, indent=2) + "\n")
        return [header, source, *runtime, manifest]


# ----------------------------------------------------------------------------- one program

def exported_kernels(module) -> list[Kernel]:
    """The kernels ``module`` defines (not those it imports), helpers left out, in source order."""
    return [k for k in vars(module).values()
            if isinstance(k, Kernel) and k.fn.__module__ == module.__name__ and not k.program().main.is_helper]


def merged_program(kernels: list[Kernel]) -> core.Program:
    """One program holding every kernel of ``kernels`` and everything they call."""
    merged: dict[str, core.KernelDef] = {}
    for k in kernels:
        for name, definition in k.program().kernels.items():
            if merged.setdefault(name, definition) != definition:
                raise CompileError(f"two different kernels are named '{name}'; rename one", definition.loc)
    return core.Program(merged, kernels[0].name)


def compile_module(kernels: list[Kernel], options: Options, name: str) -> CArtifact:
    """The C of all ``kernels`` in one translation unit; every kernel of the program is exported,
    as ``<name>_<kernel>``."""
    from .driver import compile_to_c

    artifact = compile_to_c(merged_program(kernels), options, name)
    missing = [k.name for k in kernels if k.name not in artifact.interfaces]
    if missing:  # the pipeline's contract: no exported kernel is dropped, even when inlined
        raise RuntimeError(f"the pipeline dropped the kernels {', '.join(missing)}")
    return artifact


# ----------------------------------------------------------------------------- C declarations

@dataclass(frozen=True)
class Declarations:
    """The prototypes of one kernel, from the artifact, and the C names of its parameters."""

    prototypes: tuple[str, ...]  # K, K_shape (one per result component), K_scratch_bytes, K_check_sizes
    params: tuple[tuple[str, str, tuple[str, ...]], ...]  # per C parameter: C type, C name, dim names
    results: tuple[tuple[str, str], ...]  # per out-parameter (``out``, or ``out_0``, ...): the type it points at, its name


def _declarations(interface: KernelInterface, cdef: str) -> Declarations:
    name = re.escape(interface.symbol)
    lines = cdef.splitlines()

    def prototype(pattern: str) -> str:
        return next(line for line in lines if re.match(pattern, line))

    main = prototype(rf"int {name}\(")
    c_params = [_split_declaration(text) for text in main[main.index("(") + 1:main.rindex(")")].split(", ")]
    outputs = interface.outputs
    results = tuple((ctype.rstrip(" *"), cname) for ctype, cname in c_params[1:1 + len(outputs)])
    params, j = [], 1 + len(outputs)
    for _, ty in interface.params:
        ctype, cname = c_params[j]
        dims = tuple(cname for _, cname in c_params[j + 1:j + 1 + rank(ty)])
        params.append((ctype, cname, dims))
        j += 1 + rank(ty)
    shapes = tuple(prototype(rf"void {name}_shape{suffix}\(") for suffix, _, _ in outputs)
    prototypes = (main, *shapes, prototype(rf"int64_t {name}_scratch_bytes\("),
                  prototype(rf"int {name}_check_sizes\("))
    return Declarations(prototypes, tuple(params), results)


def _split_declaration(text: str) -> tuple[str, str]:
    """``const double *v1`` → (``const double *``, ``v1``)."""
    match = re.fullmatch(r"(.*?[\s*])(\w+)", text.strip())
    return match.group(1).strip(), match.group(2)


# ----------------------------------------------------------------------------- the files

def status_macro(prefix: str, code: int, statuses: dict = STATUS) -> str:
    return f"{prefix}_STATUS_{re.sub(r'[^A-Z0-9]+', '_', statuses[code].upper()).strip('_')}"


def status_declarations(name: str, statuses: dict = STATUS) -> list[str]:
    """The header's status codes (``<MODULE>_STATUS_*``) and the prototype of their texts."""
    prefix = name.upper()
    out = c_comment(["---- Status codes: what every kernel returns"])
    width = max(len(status_macro(prefix, code, statuses)) for code in statuses)
    out += [f"#define {status_macro(prefix, code, statuses):<{width}} {code}  /* {statuses[code]} */"
            for code in statuses]
    return out + ["", "/* The text of a status code (\"unknown status\" for any other int). */",
                  f"const char *{name}_status_message(int status);"]


def status_message_function(name: str, statuses: dict = STATUS) -> list[str]:
    """The C of ``<module>_status_message``."""
    cases = [f"    case {code}: return \"{text}\";" for code, text in statuses.items()]
    return [f"const char *{name}_status_message(int status) {{", "    switch (status) {", *cases,
            '    default: return "unknown status";', "    }", "}"]


def build_flags(artifact: CArtifact, march: str | None = None) -> dict:
    """What a C build of the generated code needs beyond a C99 compiler: the target CPU if one was
    asked for (``fsmooth compile --march``; else the build is portable), the variant's flags
    (-fopenmp for --parallel, reassociation for --fastmath) and libraries (libgc for the gc
    variant), then libm."""
    return {"cflags": ["-std=c99", *([f"-march={march}"] if march else []), *artifact.compile_args],
            "libs": [f"-l{library}" for library in (*artifact.libraries, "m")]}


def c_comment(lines: list[str]) -> list[str]:
    """A C block comment; ``*/`` inside the text (from a docstring) cannot end it early."""
    text = [line.replace("*/", "* /") for line in lines]
    if len(text) == 1:
        return [f"/* {text[0]} */"]
    return ["/* " + text[0]] + [(" * " + line).rstrip() for line in text[1:]] + [" */"]


_ALLOCATION_NOTES = {
    "arena": "Kernels never allocate: temporaries live in `scratch`, which the caller owns.",
    "malloc": "Temporaries come from malloc/free inside the kernels (allocation 'malloc').",
    "leaky": "Temporaries come from malloc and are never freed (allocation 'leaky': for benchmarks only).",
    "gc": "Temporaries come from Boehm's GC_malloc (allocation 'gc'): link with -lgc.",
}


def _overview(name: str, source_file: str, options: Options, artifact: CArtifact, march: str | None) -> list[str]:
    prefix = name.upper()
    flags = build_flags(artifact, march)
    return [
        f"{name}.h: the C API of the kernels of {source_file}, generated by fsmooth {fsmooth.__version__}.",
        "Do not edit: run `fsmooth compile` again instead.",
        "",
        "---- Overview",
        "",
        *textwrap.wrap(f"Kernels: {', '.join(artifact.interfaces)}.", 96),
        "",
        f"Each kernel k is exported as K = {name}_k (a character of k outside ASCII letters, digits",
        "and _ written as its UTF-8 bytes _XX), with four functions:",
        "",
        "  int     K(void *scratch, T *out, <params>);  runs k; returns a status code (below)",
        "  void    K_shape(int64_t *dims_out, <sizes>);  writes the result's dims (rank of them)",
        "  int64_t K_scratch_bytes(<sizes>);              the exact peak scratch bytes of one call",
        "  int     K_check_sizes(<sizes>);                0, or 1 + the number of the first failed",
        "                                                 size constraint (K checks them itself too)",
        "",
        "An array is one flat, contiguous, row-major buffer of its element type.  An array parameter",
        "`a` of rank r is passed as a pointer followed by its r dims a_d0, ..., a_d{r-1}; a scalar",
        "parameter by value.  <sizes> are the size symbols of K: each is a dim of an array parameter",
        "or the value of a Card parameter (see each kernel).  The caller allocates the result: `out`",
        "points at the product of the K_shape dims elements of the result type, or at one scalar.",
        "A kernel that returns a tuple has one out-parameter per component (out_0, out_1, ...; nested",
        "tuples flattened: out_1_0) and one shape function per component (K_shape_0, ...).  A tuple",
        "parameter p is passed as its components p_0, p_1, ..., each like a parameter of its own.",
        *(["A kernel that returns a filter (fs.filter: its length is known only at run time) has two:",
           "out_0 has the capacity, K_shape_0's dims (the length of what is filtered), and receives the",
           "kept elements from its start; out_1 (int64_t *) receives how many were kept."]
          if any(i.kept_length for i in artifact.interfaces.values()) else []),
        "",
        _ALLOCATION_NOTES[options.allocation],
        f"`scratch` must hold K_scratch_bytes(...) bytes, aligned to {prefix}_SCRATCH_ALIGN bytes (malloc's",
        "alignment suffices); one buffer sized for the largest call serves every call, one call at",
        "a time.  A kernel writes nowhere but `out` and `scratch`.",
        "",
        f"Build: cc {' '.join(flags['cflags'])} -c {name}.c  (with {' and '.join(C_HEADERS)} beside it); "
        f"link with {' '.join(flags['libs'])}.",
        *_foreign_overview(name, artifact),
        *(["Parallel: the outermost parallel loops carry `#pragma omp parallel for` (-fopenmp).  Every",
           "kernel takes a last argument `nthreads` (at least 1; e.g. omp_get_max_threads()): the most",
           "threads a call uses.  Its scratch is one slice per thread, so K_scratch_bytes takes it too."]
          if options.parallel else []),
    ]


def _foreign_overview(name: str, artifact: CArtifact) -> list[str]:
    """The foreign functions (``fsmooth.foreign``) the kernels call, as the generated code declares
    them, and what the embedding program must give for each: nothing where its source is in
    <name>.c, else its header (on the include path) and its libraries (linked)."""
    if not artifact.foreign:
        return []
    lines = ["", "---- Foreign functions: the kernels call them, assumed pure", ""]
    for use in artifact.foreign:
        lines.append(f"  {use.prototype}")
        if use.header is None:
            lines.append(f"      its C source is in {name}.c")
        else:
            needs = [f"#include \"{Path(use.header).name}\" ({use.header})"] + [f"link -l{lib}" for lib in use.libraries]
            lines.append(f"      the embedding program provides it: {'; '.join(needs)}")
    return lines


def kernel_comment(interface: KernelInterface, decl: Declarations, doc: str | None, prefix: str,
                   sized: str = "a result dim or the scratch size", scratch: bool = True) -> list[str]:
    """The header's documentation of one kernel; ``sized`` says which sizes ``K_check_sizes``
    computes, ``scratch`` whether the kernel takes a scratch arena."""
    params = ", ".join(f"{p}: {type_str(t)}" for p, t in interface.params)
    lines = [f"---- {interface.name}({params}) -> {type_str(interface.result)}"]
    if doc:
        lines += [""] + [line.rstrip() for line in inspect.cleandoc(doc).splitlines()]
    lines += ["", "Parameters:"]
    for (pname, ty), (ctype, cname, dims) in zip(interface.params, decl.params):
        shape = f", dims {' x '.join(dims)}" if dims else ""
        lines.append(f"  {cname:<12} {ctype:<16} {type_str(ty)}{shape}")
    for (suffix, ty, dims), (ctype, cname) in zip(interface.outputs, decl.results):
        what = (f"dims {' x '.join(map(str, dims))}, row-major ({interface.symbol}_shape{suffix})" if rank(ty)
                else "one scalar")
        component = f" (component {suffix[1:].replace('_', '.')})" if suffix else ""
        if interface.kept_length:  # a filter: (kept elements, their count)
            component = (" (the kept elements, written from the start; capacity" if suffix == "_0"
                         else " (how many elements were kept: the filter's length")
            component += ")"
        lines.append(f"Result{component}: `{cname}` ({ctype} *), {type_str(ty)}, {what}")
    if interface.sizes:
        lines.append("Sizes: " + "; ".join(
            f"{s.symbol} = " + (f"the value of {s.param}" if s.dim is None else f"dim {s.dim} of {s.param}")
            for s in interface.sizes))
    if interface.constraints:
        lines.append(f"Requires (else {interface.symbol}_check_sizes is nonzero and {interface.symbol} returns "
                     f"{status_macro(prefix, 3)}):")
        lines += [f"  {j + 1}. {print_condition(c.cond, C)}   ({c.message})"
                  for j, c in enumerate(interface.constraints)]
    if scratch:
        lines.append(f"Scratch: {interface.scratch_formula} bytes")
    lines.append(f"{interface.symbol}_check_sizes returns {len(interface.constraints) + 1} (and {interface.symbol} "
                 f"{status_macro(prefix, 6)}) where {sized} overflows int64, "
                 f"{len(interface.constraints) + 2} (and {status_macro(prefix, 2)}) where one divides by zero")
    return lines


def _header(name: str, source_file: str, artifact: CArtifact, kernels: dict[str, Kernel],
            options: Options, march: str | None) -> str:
    prefix, guard = name.upper(), f"FSMOOTH_{name.upper()}_H"
    interfaces = list(artifact.interfaces.values())
    out = c_comment(_overview(name, source_file, options, artifact, march))
    out += ["", f"#ifndef {guard}", f"#define {guard}", "", "#include <stdbool.h>", "#include <stdint.h>", "",
            "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    out += status_declarations(name)
    out += ["", "/* Every region of the scratch arena starts on this boundary. */",
            f"#define {prefix}_SCRATCH_ALIGN {ALIGN}"]
    if options.parallel:
        out += ["", "/* Compiled with --parallel: every kernel's last argument is its thread count, nthreads. */",
                f"#define {prefix}_PARALLEL 1"]
    for interface in interfaces:
        decl = _declarations(interface, artifact.cdef)
        kernel = kernels.get(interface.name)
        out += [""] + c_comment(kernel_comment(interface, decl, kernel.fn.__doc__ if kernel else None, prefix))
        out += list(decl.prototypes)
    out += ["", "#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */"]
    return "\n".join(out) + "\n"


def _source(name: str, artifact: CArtifact) -> str:
    status_message = status_message_function(name)
    return "\n".join([f"/* {name}.c: generated by fsmooth {fsmooth.__version__}; the API is {name}.h. */",
                      f'#include "{name}.h"', "", artifact.source.rstrip("\n"), "",
                      "/* ---- status codes */", *status_message]) + "\n"


def kernel_entry(interface: KernelInterface, decl: Declarations, functions: dict) -> dict:
    """A kernel's entry in a manifest: its C functions (``functions``, after the kernel's and its
    shape functions'), prototypes, parameters, result, sizes and constraints."""
    params = [{"name": pname, "type": type_str(ty), "rank": rank(ty), "ctype": ctype, "cname": cname,
               "dims": list(dims)}
              for (pname, ty), (ctype, cname, dims) in zip(interface.params, decl.params)]
    result = interface.result
    outputs = [{"cname": cname, "type": type_str(ty), "rank": rank(ty), "ctype": ctype,
                "dims": [str(d) for d in dims], "shape_fun": f"{interface.symbol}_shape{suffix}"}
               for (suffix, ty, dims), (ctype, cname) in zip(interface.outputs, decl.results)]
    return {
        "cfun": interface.symbol,
        # a filter's result: components 0, the kept elements in a destination of the capacity, 1 their count
        "kept_length": interface.kept_length,
        "shape_fun": [o["shape_fun"] for o in outputs] if len(outputs) > 1 or outputs[0]["cname"] != "out"
        else f"{interface.symbol}_shape",
        **functions,
        "prototypes": list(decl.prototypes),
        "params": params,
        "result": ({"type": type_str(result), "rank": rank(result), "ctype": outputs[0]["ctype"],
                    "dims": outputs[0]["dims"]} if len(outputs) == 1 and outputs[0]["cname"] == "out"
                   else {"type": type_str(result), "components": outputs}),
        "sizes": [{"symbol": s.symbol, "param": s.param, "dim": s.dim} for s in interface.sizes],
        "constraints": [{"c_expr": print_condition(c.cond, C), "cond": condition_json(c.cond), "param": c.param,
                         "message": c.message}
                        for c in interface.constraints],
    }


def _manifest(name: str, source_file: str, artifact: CArtifact, options: Options, march: str | None) -> dict:
    kernels = {}
    for interface in artifact.interfaces.values():
        functions = {"scratch_fun": f"{interface.symbol}_scratch_bytes", "check_fun": f"{interface.symbol}_check_sizes"}
        kernels[interface.name] = {
            **kernel_entry(interface, _declarations(interface, artifact.cdef), functions),
            "scratch_bytes": str(interface.scratch_formula),
            "scratch_expr": size_json(interface.scratch_formula),
        }
    return {
        "generator": f"fsmooth {fsmooth.__version__}",
        "module": name,
        "source": source_file,
        "files": {"header": f"{name}.h", "c": f"{name}.c", "runtime": list(C_HEADERS)},
        "options": asdict(options),
        "build": build_flags(artifact, march),
        "scratch_align": ALIGN,
        "status_codes": {str(code): text for code, text in STATUS.items()},
        "kernels": kernels,
        "foreign": [{"name": use.name, "prototype": use.prototype,
                     "source": "embedded" if use.header is None else "linked", "header": use.header,
                     "libraries": [f"-l{lib}" for lib in use.libraries]} for use in artifact.foreign],
    }


def _check_library_names(name: str, artifact: CArtifact, by_name: dict[str, Kernel]) -> None:
    """The library's own C names must not be a kernel's function names (an error at its ``def``,
    or at the first exported kernel's for a kernel of another module that one calls)."""
    from .frontend import def_loc

    ours = {f"{name}_status_message", f"{name.upper()}_SCRATCH_ALIGN"} | {status_macro(name.upper(), c) for c in STATUS}
    for k, interface in artifact.interfaces.items():
        symbol = interface.symbol
        shapes = {f"{symbol}_shape{suffix}" for suffix, _, _ in interface.outputs}
        clash = ours & {symbol, *shapes, f"{symbol}_scratch_bytes", f"{symbol}_check_sizes", f"{symbol}_body"}
        if clash:
            raise CompileError(f"the kernel name '{k}' clashes with the library's C name {sorted(clash)[0]}; "
                               "rename the kernel or the module",
                               def_loc(by_name.get(k, next(iter(by_name.values())))))


def library(module_name: str, kernels: list[Kernel], options: Options, source_file: str,
            march: str | None = None) -> Library:
    """The header, C and manifest of ``kernels`` as the module ``module_name`` (of ``source_file``),
    its build instructions for the CPU ``march`` (gcc's ``-march``) if given, else portable."""
    if not kernels:
        raise ValueError(f"{source_file} exports no kernels")
    name = c_module_name(module_name)
    artifact = compile_module(kernels, options, name)
    by_name = {k.name: k for k in kernels}
    _check_library_names(name, artifact, by_name)
    return Library(name, _header(name, source_file, artifact, by_name, options, march), _source(name, artifact),
                   _manifest(name, source_file, artifact, options, march))
