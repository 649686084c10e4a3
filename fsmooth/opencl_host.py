"""OpenCL for C programs: what ``fsmooth compile FILE.py -o DIR --target opencl`` writes.

Beside the OpenCL program and its launch plan, the module's kernels get C host code laid out as
the C target's library (``fsmooth.embed``) and as Futhark's OpenCL ``--library`` output:

    <module>.cl           the OpenCL program: the prelude and every kernel's OpenCL kernels
    <module>.opencl.json  each kernel's buffers and launches, for a host program of one's own (a
                          launch's "when": the condition on the sizes under which alone it runs)
    <module>.h            the API: status codes (the C target's, and 7 for a failed OpenCL call),
                          a context that owns the OpenCL state, one documented block per kernel
    <module>.c            the host code: the program (embedded, so no file is read at run time),
                          each kernel's buffers and launches as tables, its size functions
    fsmooth_rt.h, fsmooth_scalar.h
                          the C runtime headers (checked size arithmetic, status codes)
    fsmooth_opencl_rt.h   the host runtime: device choice, program build, buffers reused per
                          shape, launches in order, the status buffer read back
    fsmooth_cl.h          the declarations of the OpenCL API it calls (pip's OpenCL wheels ship
                          no CL headers)
    <module>.json         the manifest, with the C target's conventions

    struct m_context_config *m_context_config_new(void);            /* then _set_platform/_set_device */
    struct m_context *m_context_new(const struct m_context_config *cfg);
    int K(struct m_context *ctx, T *out, <params>);                 /* the C target's parameters */
    void K_shape(int64_t *dims_out, <sizes>);  int K_check_sizes(<sizes>);

A kernel's parameters are the C target's (``fsmooth.artifact``): host arrays with their dims and
scalars, ``out`` (or ``out_0``, ...) a host array the caller allocates; ``ctx`` takes the place of
``scratch``, since device memory belongs to the context.  A call copies the inputs to the device,
runs the launches, copies the results back and returns a status, as
``fsmooth.opencl_executable.OpenCLExecutable`` does from Python: the same size checks first
(``K_check_sizes``, printed as checked C by ``fsmooth.shape.size_printer``), the same launch plan,
the same codes from the status buffer.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import sympy

import fsmooth
from fsmooth.clib import HEADER_DIR, OPENCL_HOST_HEADERS
from fsmooth.dpia.codegen_c import size_checks, unused_parameters
from fsmooth.dpia.codegen_opencl import prelude, strategy_comment
from fsmooth.dpia.emit import Namer, c_module_name, exported_name
from fsmooth.shape.size_printer import C, C_CHECKED, print_condition, print_size, size_json

from .artifact import STATUS, KernelInterface
from .embed import (Declarations, status_macro, c_comment, kernel_comment, kernel_entry, status_declarations,
                    status_message_function)
from .errors import CompileError
from .kernel import Kernel
from .opencl_artifact import STATUS_ELEM, OpenCLArtifact
from .types import C_TYPE, NUMPY_DTYPE, Bool, element_scalar, rank, type_str

# The C target's status codes and one more: an OpenCL call failed (FS_STATUS_OPENCL).
OPENCL_STATUS = {**STATUS, 7: "OpenCL error"}

_ROLE = {"input": "FS_CL_INPUT", "output": "FS_CL_OUTPUT", "temp": "FS_CL_TEMP", "local": "FS_CL_LOCAL",
         "status": "FS_CL_STATUS", "counter": "FS_CL_COUNTER", "handover": "FS_CL_HANDOVER",
         "lookback": "FS_CL_LOOKBACK"}
_CONTEXT_FUNCTIONS = ("context_config_new", "context_config_free", "context_config_set_platform",
                      "context_config_set_device", "context_new", "context_free", "context_get_error",
                      "context_sync", "status_message")


@dataclass(frozen=True)
class OpenCLLibrary:
    """The files of one module compiled to OpenCL, as text (``write`` puts them in a directory)."""

    name: str  # the module's C name
    program: str  # <name>.cl
    launches: dict  # <name>.opencl.json
    header: str
    source: str
    manifest: dict
    skipped: dict  # kernel -> why it is no OpenCL program on its own

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        files = {f"{self.name}.cl": self.program, f"{self.name}.opencl.json": json.dumps(self.launches, indent=2) + "\n",
                 f"{self.name}.h": self.header, f"{self.name}.c": self.source,
                 f"{self.name}.json": json.dumps(self.manifest, indent=2) + "\n"}
        written = []
        for filename, text in files.items():
            (directory / filename).write_text(text)
            written.append(directory / filename)
        for header in OPENCL_HOST_HEADERS:
            shutil.copyfile(HEADER_DIR / header, directory / header)
            written.append(directory / header)
        return written


def _texts(sizes) -> list:
    """Size expressions (nested in tuples per component of a tuple result) as sympy's text."""
    return [_texts(s) if isinstance(s, tuple) else str(s) for s in sizes]


def _launch_description(artifacts: dict, skipped: dict, name: str, fp64: bool) -> dict:
    """<name>.opencl.json: per kernel its launches (OpenCL kernel, arguments, global and local
    sizes as formulas of the sizes) and buffers (role, element type, element count)."""
    return {"source": f"{name}.cl", "needs_fp64": fp64,
            "needs_extensions": sorted({e for a in artifacts.values() for e in a.extensions}), "kernels": {
        kname: {"params": [[p, type_str(t)] for p, t in a.interface.params],
                "result": type_str(a.interface.result),
                "result_dims": _texts(a.interface.result_dims),
                "sizes": [[s.symbol, s.param, s.dim] for s in a.interface.sizes],
                "constraints": [[print_condition(c.cond, C), c.param, c.message] for c in a.interface.constraints],
                "buffers": [{"name": b.name, "role": b.role, "elem": b.elem.name, "count": str(b.count)}
                            for b in a.buffers.values()],
                "launches": [{"kernel": l.kernel, "args": list(l.args), "global_size": _texts(l.global_size),
                              "local_size": None if l.local_size is None else _texts(l.local_size),
                              "fallback": l.fallback,
                              # a launch run only where a condition on the sizes holds (Launch.when)
                              **({"when": print_condition(l.when, C)} if l.when is not None else {})}
                             for l in a.launches]}
        for kname, a in artifacts.items()}, "skipped": skipped}


# ----------------------------------------------------------------------------- one kernel's host code

def _elem_bytes(elem) -> int:
    return 4 if elem == STATUS_ELEM else NUMPY_DTYPE[elem].itemsize


@dataclass(frozen=True)
class _HostKernel:
    """One kernel's artifact with the C names of its host function."""

    artifact: OpenCLArtifact
    interface: KernelInterface  # symbol: the kernel's exported C name
    context: str  # struct <module>_context
    param_names: dict  # F̃ parameter -> C name
    dim_names: dict  # (parameter, dim) -> C name
    size_names: dict  # size symbol -> C name (a dim or a Card parameter)

    @property
    def symbol(self) -> str:
        return self.interface.symbol

    def size_params(self) -> str:
        return ", ".join(f"int64_t {self.size_names[s.symbol]}" for s in self.interface.sizes) or "void"

    def size_name(self, symbol) -> str:
        return self.size_names[symbol.name]

    def checked(self, e) -> str:
        return print_size(e, C_CHECKED, self.size_name)

    def declarations(self) -> Declarations:
        params, c_params = [], [f"struct {self.context} *ctx"]
        results = tuple((C_TYPE[element_scalar(ty)], f"out{suffix}") for suffix, ty, _ in self.interface.outputs)
        c_params += [f"{ctype} *{cname}" for ctype, cname in results]
        for pname, ty in self.interface.params:
            cname, ctype = self.param_names[pname], C_TYPE[element_scalar(ty)]
            dims = tuple(self.dim_names[(pname, j)] for j in range(rank(ty)))
            ctype = f"const {ctype} *" if rank(ty) else ctype
            params.append((ctype, cname, dims))
            c_params += [f"{ctype}{cname}" if ctype.endswith("*") else f"{ctype} {cname}"]
            c_params += [f"int64_t {d}" for d in dims]
        sizes = self.size_params()
        shapes = tuple(f"void {self.symbol}_shape{suffix}(int64_t *dims_out{', ' + sizes if sizes != 'void' else ''});"
                       for suffix, _, _ in self.interface.outputs)
        prototypes = (f"int {self.symbol}({', '.join(c_params)});", *shapes,
                      f"int {self.symbol}_check_sizes({sizes});")
        return Declarations(prototypes, tuple(params), results)

    def sized(self) -> list:
        """Every size a call computes, which K_check_sizes refuses where it overflows int64: the
        result dims, each buffer's elements and bytes, the launches' global and local sizes, the
        sizes the kernels' index arithmetic computes."""
        a = self.artifact
        buffers = [b for b in a.buffers.values() if b.role != "status"]
        return ([d for _, _, dims in self.interface.outputs for d in dims]
                + [sympy.sympify(b.count) for b in buffers]
                + [sympy.sympify(b.count) * _elem_bytes(b.elem) for b in buffers]
                + [g for launch in a.launches for g in launch.global_size]
                + [l for launch in a.launches for l in (launch.local_size or ())]
                + list(a.fitting))

    def tables(self, k: int) -> list[str]:
        """The static description of the kernel's buffers and launches (fsmooth_opencl_rt.h)."""
        a = self.artifact
        buffer_index = {name: j for j, name in enumerate(a.buffers)}
        size_index = {s.symbol: j for j, s in enumerate(self.interface.sizes)}
        scalar_index = {p: j for j, p in enumerate(p for p, ty in self.interface.params if not rank(ty))}
        out = [f"static const struct fs_cl_buffer fs_buffers_{k}[] = {{"]
        out += [f'    {{"{b.name}", {_ROLE[b.role]}, {_elem_bytes(b.elem)}}},' for b in a.buffers.values()]
        out.append("};")
        for l, launch in enumerate(a.launches):
            args = []
            for arg in launch.args:  # a buffer, else a size symbol, else a scalar parameter (opencl_artifact)
                if arg in buffer_index:
                    args.append(f"{{FS_CL_ARG_BUFFER, {buffer_index[arg]}}}")
                elif arg in size_index:
                    args.append(f"{{FS_CL_ARG_SIZE, {size_index[arg]}}}")
                else:
                    args.append(f"{{FS_CL_ARG_SCALAR, {scalar_index[arg]}}}")
            if args:
                out.append(f"static const struct fs_cl_arg fs_args_{k}_{l}[] = {{{', '.join(args)}}};")
        if a.launches:
            out.append(f"static const struct fs_cl_launch fs_launches_{k}[] = {{")
            out += [f'    {{"{launch.kernel}", {len(launch.global_size)}, {len(launch.args)}, '
                    f'{f"fs_args_{k}_{l}" if launch.args else "NULL"}, {int(launch.fallback)}}},'
                    for l, launch in enumerate(a.launches)]
            out.append("};")
        return out

    def table_entry(self, k: int) -> str:
        a = self.artifact
        return (f'    {{"{self.interface.name}", {len(a.buffers)}, fs_buffers_{k}, {len(a.launches)}, '
                f'{f"fs_launches_{k}" if a.launches else "NULL"}}},')

    def definitions(self, k: int) -> list[str]:
        """K_shape (per output), K_check_sizes and K."""
        interface, a = self.interface, self.artifact
        size_names = [self.size_names[s.symbol] for s in interface.sizes]
        kernel, *shapes, check_sizes = (line.rstrip(";") + " {" for line in self.declarations().prototypes)
        out = []
        for (_, _, dims), header in zip(interface.outputs, shapes):
            shape = [f"dims_out[{j}] = {self.checked(d)};" for j, d in enumerate(dims)]
            out.append(header)
            out += _indent(unused_parameters(["dims_out"] + size_names, shape) + shape) + ["}", ""]
        checks = size_checks([c.cond for c in interface.constraints], self.sized(), self.checked,
                             lambda c: print_condition(c, C_CHECKED, self.size_name))
        out.append(check_sizes)
        out += _indent(unused_parameters(size_names, checks) + checks + ["return 0;"]) + ["}", ""]

        body = []
        if interface.constraints:
            messages = ", ".join(_c_string(f"argument '{c.param}': {c.message}") for c in interface.constraints)
            body.append(f"static const char *const fs_constraints[] = {{{messages}}};")
        size_args = ", ".join(size_names)
        body += [f"int fs_failed = {self.symbol}_check_sizes({size_args});",
                 f"if (fs_failed != 0) return fs_cl_size_failure(&ctx->fs, \"{interface.name}\", fs_failed, "
                 f"{len(interface.constraints)}, {'fs_constraints' if interface.constraints else 'NULL'});"]
        if size_names:
            body.append(f"const int64_t fs_sizes[] = {{{size_args}}};")
        outputs = iter(f"out{suffix}" for suffix, _, _ in interface.outputs)
        counts, inputs, results = [], [], []
        for b in a.buffers.values():
            counts.append(self.checked(b.count))
            inputs.append(f"(const void *){self.param_names[b.name]}" if b.role == "input" else "NULL")
            results.append(f"(void *){next(outputs)}" if b.role == "output" else "NULL")
        body += [f"const int64_t fs_counts[] = {{{', '.join(counts)}}};",
                 f"const void *fs_inputs[] = {{{', '.join(inputs)}}};",
                 f"void *fs_outputs[] = {{{', '.join(results)}}};"]
        scalars = []
        for pname, ty in interface.params:
            if rank(ty):
                continue
            cname = self.param_names[pname]
            if ty == Bool:  # a uchar on the device: OpenCL has no bool kernel arguments
                body.append(f"const unsigned char fs_bool_{len(scalars)} = {cname} ? 1 : 0;")
                cname = f"fs_bool_{len(scalars)}"
            scalars.append(f"{{sizeof {cname}, &{cname}}}")
        if scalars:
            body.append(f"const struct fs_cl_scalar fs_scalars[] = {{{', '.join(scalars)}}};")
        if a.launches:
            # 3 dims per launch, unused ones 1; a launch without a local size has has_local 0
            def three(sizes_of_launch) -> str:
                texts = [self.checked(s) for s in sizes_of_launch]
                return ", ".join(texts + ["1"] * (3 - len(texts)))

            def running(launch) -> tuple:
                """The global size, 0 where the launch's condition on the sizes does not hold: the
                runtime neither runs a launch of no work-item nor makes the buffers only it passes."""
                if launch.when is None:
                    return launch.global_size
                return tuple(sympy.Piecewise((g, launch.when), (0, True)) for g in launch.global_size)
            body += [f"const int64_t fs_global[] = {{{', '.join(three(running(l)) for l in a.launches)}}};",
                     f"const int64_t fs_local[] = {{{', '.join(three(l.local_size or ()) for l in a.launches)}}};",
                     f"const int fs_has_local[] = {{{', '.join(str(int(l.local_size is not None)) for l in a.launches)}}};"]
        call_fields = ["fs_counts", "fs_inputs", "fs_outputs", "fs_sizes" if size_names else "NULL",
                       "fs_scalars" if scalars else "NULL",
                       *(("fs_global", "fs_local", "fs_has_local") if a.launches else ("NULL",) * 3)]
        body += [f"const struct fs_cl_call fs_call = {{{', '.join(call_fields)}}};",
                 f"return fs_cl_run(&ctx->fs, {k}, &fs_call);"]
        out.append(kernel)
        out += _indent(body) + ["}"]
        return out


def _indent(lines) -> list[str]:
    return ["    " + line if line else line for line in lines]


def _c_string(text: str) -> str:
    """``text`` as a C string literal: printable ASCII as itself (``?`` escaped, which trigraphs
    would read), anything else as octal escapes of its UTF-8 bytes."""
    out = []
    for byte in text.encode():
        c = chr(byte)
        if c in '"\\?':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif 32 <= byte < 127:
            out.append(c)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _host_kernel(artifact: OpenCLArtifact, module: str, taken: frozenset) -> _HostKernel:
    """The C names of a kernel's host function: parameters and dims named as the C target names
    them (``fsmooth.dpia.emit.Namer``, around the generated names ``ctx``, ``scratch``, ``dims_out``
    and ``out``)."""
    interface = dataclasses.replace(artifact.interface, symbol=exported_name(module, artifact.interface.name))
    outputs = {f"out{suffix}" for suffix, _, _ in interface.outputs}
    namer = Namer(taken | {"ctx", "scratch", "dims_out"} | outputs)
    param_names = {p: namer.fresh(p) for p, _ in interface.params}
    dim_names = {(p, j): namer.fresh(f"{param_names[p]}_d{j}") for p, ty in interface.params for j in range(rank(ty))}
    size_names = {s.symbol: param_names[s.param] if s.dim is None else dim_names[(s.param, s.dim)]
                  for s in interface.sizes}
    return _HostKernel(artifact, interface, f"{module}_context", param_names, dim_names, size_names)


def _function_names(symbol: str, outputs) -> tuple[str, ...]:
    """The C functions a kernel exported as ``symbol`` defines."""
    return (symbol, f"{symbol}_check_sizes", *(f"{symbol}_shape{suffix}" for suffix, _, _ in outputs))


def _check_names(name: str, hosts: list, by_name: dict) -> None:
    """The library's own C names must not be a kernel's functions (an error at the kernel's ``def``)."""
    from .frontend import def_loc

    ours = {f"{name}_{f}" for f in _CONTEXT_FUNCTIONS} | {status_macro(name.upper(), c, OPENCL_STATUS)
                                                         for c in OPENCL_STATUS}
    for host in hosts:
        clash = ours & set(_function_names(host.symbol, host.interface.outputs))
        if clash:
            raise CompileError(f"the kernel name '{host.interface.name}' clashes with the library's C name "
                               f"{sorted(clash)[0]}; rename the kernel or the module", def_loc(by_name[host.interface.name]))


# ----------------------------------------------------------------------------- the files

def _overview(name: str, source_file: str, hosts: list) -> list[str]:
    return [
        f"{name}.h: the OpenCL kernels of {source_file} for C programs, generated by fsmooth {fsmooth.__version__}.",
        "Do not edit: run `fsmooth compile --target opencl` again instead.",
        "",
        "---- Overview",
        "",
        *textwrap.wrap(f"Kernels: {', '.join(h.interface.name for h in hosts)}.", 96),
        "",
        "A context owns the OpenCL state: the device, the program (built once, from the source",
        f"embedded in {name}.c) and every kernel's device buffers, which are allocated at the first",
        "call of a shape and reused by later calls while they are large enough:",
        "",
        f"  struct {name}_context_config *cfg = {name}_context_config_new();",
        f"  {name}_context_config_set_platform(cfg, \"Oclgrind\");   // optional: part of its name",
        f"  struct {name}_context *ctx = {name}_context_new(cfg);",
        f"  char *error = {name}_context_get_error(ctx);   // non-NULL: set-up failed; free() it",
        "  ... calls ...",
        f"  {name}_context_free(ctx); {name}_context_config_free(cfg);",
        "",
        "A context takes the first device of the configured platform and device (any, by default)",
        "that builds the program, a GPU first, then a CPU device of Intel's CPU runtime, of PoCL,",
        "of another platform, then any other; a simulator (Oclgrind) only where the platform is",
        "configured.  A context that could not be set up is still a context: every call on it",
        "returns the failure's status.  One call at a time per context.",
        "",
        f"Each kernel k is exported as K = {name}_k (as in the C target), with three functions:",
        "",
        f"  int  K(struct {name}_context *ctx, T *out, <params>);  runs k; returns a status code (below)",
        "  void K_shape(int64_t *dims_out, <sizes>);  writes the result's dims (rank of them)",
        "  int  K_check_sizes(<sizes>);               0, or 1 + the number of the first failed size",
        "                                             constraint (K checks them itself too)",
        "",
        "The parameters are the C target's: an array parameter `a` of rank r is a pointer to a flat,",
        "contiguous, row-major host array followed by its r dims a_d0, ..., a_d{r-1}; a scalar",
        "parameter is passed by value; the caller allocates the result `out` (the product of the",
        "K_shape dims elements, or one scalar; a tuple result has out_0, out_1, ... and K_shape_0, ...).",
        "K copies the inputs to the device, runs the OpenCL kernels in order, and returns once the",
        f"result is in `out`.  On a nonzero status, {name}_context_get_error says more.",
        "",
        f"Build: cc -std=c99 -c {name}.c  (with {', '.join(OPENCL_HOST_HEADERS)} beside it);",
        "link with -lOpenCL -lm.",
    ]


def _context_declarations(name: str) -> list[str]:
    cfg, ctx = f"struct {name}_context_config", f"struct {name}_context"
    return [
        *c_comment(["---- The context"]),
        f"{cfg};",
        f"{ctx};",
        "",
        "/* A configuration: by default any platform and device, chosen as the overview says. */",
        f"{cfg} *{name}_context_config_new(void);",
        f"void {name}_context_config_free({cfg} *cfg);",
        "/* Only platforms (devices) whose name contains `name`, ignoring case; NULL: any. */",
        f"void {name}_context_config_set_platform({cfg} *cfg, const char *name);",
        f"void {name}_context_config_set_device({cfg} *cfg, const char *name);",
        "/* A context on the configured device (cfg may be NULL: the defaults); NULL only when out of",
        f" * memory.  Where set-up failed, {name}_context_get_error says why. */",
        f"{ctx} *{name}_context_new(const {cfg} *cfg);",
        f"void {name}_context_free({ctx} *ctx);",
        "/* The latest failure's message (malloc'd: the caller frees it), or NULL; reading clears it. */",
        f"char *{name}_context_get_error({ctx} *ctx);",
        "/* Wait for the device (each kernel call has already waited for its own work). */",
        f"int {name}_context_sync({ctx} *ctx);",
    ]


def _header(name: str, source_file: str, hosts: list, by_name: dict) -> str:
    prefix, guard = name.upper(), f"FSMOOTH_{name.upper()}_H"
    out = c_comment(_overview(name, source_file, hosts))
    out += ["", f"#ifndef {guard}", f"#define {guard}", "", "#include <stdbool.h>", "#include <stdint.h>", "",
            "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    out += status_declarations(name, OPENCL_STATUS)
    out += [""] + _context_declarations(name)
    for host in hosts:
        decl = host.declarations()
        out += [""] + c_comment(kernel_comment(host.interface, decl, by_name[host.interface.name].fn.__doc__, prefix,
                                               sized="a result dim, a buffer or a launch size", scratch=False))
        out += list(decl.prototypes)
    out += ["", "#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */"]
    return "\n".join(out) + "\n"


def _source(name: str, program: str, hosts: list, fp64: bool, extension: str | None) -> str:
    cfg, ctx = f"struct {name}_context_config", f"struct {name}_context"
    lines = program.splitlines(keepends=True)
    out = [f"/* {name}.c: generated by fsmooth {fsmooth.__version__}; the API is {name}.h.  The host code of the",
           f" * OpenCL program {name}.cl, which is embedded below; the runtime is fsmooth_opencl_rt.h. */",
           f'#include "{name}.h"', '#include "fsmooth_opencl_rt.h"', "",
           "/* ---- the OpenCL program, one string per line */",
           "static const char *fs_program[] = {", *(f"    {_c_string(line)}," for line in lines), "};", "",
           "/* ---- each kernel's buffers and launches (fsmooth/opencl_artifact.py) */"]
    for k, host in enumerate(hosts):
        out += host.tables(k)
    out += ["static const struct fs_cl_kernel fs_kernels[] = {", *(h.table_entry(k) for k, h in enumerate(hosts)), "};",
            "", "/* ---- status codes */", *status_message_function(name, OPENCL_STATUS), "",
            "/* ---- the context */",
            f"{cfg} {{ struct fs_cl_config fs; }};", f"{ctx} {{ struct fs_cl_context fs; }};", "",
            f"{cfg} *{name}_context_config_new(void) {{",
            "    " + f"{cfg} *cfg = malloc(sizeof *cfg);", "    if (cfg) fs_cl_config_init(&cfg->fs);",
            "    return cfg;", "}", "",
            f"void {name}_context_config_free({cfg} *cfg) {{",
            "    if (!cfg) return;", "    fs_cl_config_release(&cfg->fs);", "    free(cfg);", "}", "",
            f"void {name}_context_config_set_platform({cfg} *cfg, const char *name) {{ "
            "fs_cl_config_set(&cfg->fs.platform, name); }",
            f"void {name}_context_config_set_device({cfg} *cfg, const char *name) {{ "
            "fs_cl_config_set(&cfg->fs.device, name); }", "",
            f"{ctx} *{name}_context_new(const {cfg} *cfg) {{",
            "    static const struct fs_cl_config defaults = {NULL, NULL};",
            f"    {ctx} *ctx = malloc(sizeof *ctx);",
            f"    if (ctx) fs_cl_context_init(&ctx->fs, cfg ? &cfg->fs : &defaults, fs_program, {len(lines)}, "
            f"{int(fp64)}, {_c_string(extension) if extension else 'NULL'}, fs_kernels, {len(hosts)}, {name}_status_message);",
            "    return ctx;", "}", "",
            f"void {name}_context_free({ctx} *ctx) {{",
            "    if (!ctx) return;", "    fs_cl_context_release(&ctx->fs);", "    free(ctx);", "}", "",
            f"char *{name}_context_get_error({ctx} *ctx) {{ return fs_cl_take_error(&ctx->fs); }}",
            f"int {name}_context_sync({ctx} *ctx) {{ return fs_cl_sync(&ctx->fs); }}"]
    for k, host in enumerate(hosts):
        out += ["", f"/* ---- {host.interface.name} */", *host.definitions(k)]
    return "\n".join(out) + "\n"


def _manifest(name: str, source_file: str, hosts: list, fp64: bool, skipped: dict) -> dict:
    kernels = {}
    for host in hosts:
        a = host.artifact
        kernels[host.interface.name] = {
            **kernel_entry(host.interface, host.declarations(), {"check_fun": f"{host.symbol}_check_sizes"}),
            "buffers": [{"name": b.name, "role": b.role, "elem": b.elem.name, "count": str(b.count),
                         "count_expr": size_json(b.count)} for b in a.buffers.values()],
            "launches": [{"kernel": l.kernel, "args": list(l.args),
                          "global_size": [size_json(g) for g in l.global_size],
                          "local_size": None if l.local_size is None else [size_json(s) for s in l.local_size],
                          "fallback": l.fallback}
                         for l in a.launches],
        }
    return {
        "generator": f"fsmooth {fsmooth.__version__}",
        "module": name,
        "source": source_file,
        "target": "opencl",
        "files": {"header": f"{name}.h", "c": f"{name}.c", "opencl": f"{name}.cl",
                  "launches": f"{name}.opencl.json", "runtime": list(OPENCL_HOST_HEADERS)},
        "build": {"cflags": ["-std=c99"], "libs": ["-lOpenCL", "-lm"]},
        "needs_fp64": fp64,
        "status_codes": {str(code): text for code, text in OPENCL_STATUS.items()},
        "context": {f: f"{name}_{f}" for f in _CONTEXT_FUNCTIONS},
        "kernels": kernels,
        "skipped": skipped,
    }


def opencl_library(module_name: str, kernels: list[Kernel], source_file: str) -> OpenCLLibrary:
    """Every kernel of ``kernels`` (the exported kernels of the module ``module_name``, from
    ``source_file``) compiled to OpenCL, with its C host code.  A kernel that is no OpenCL program
    on its own (a fragment of another's strategy, such as a ``build_local`` outside any
    ``build_workgroup``) is left out and said why in ``skipped``; none compiling is a CompileError."""
    from .driver import compile_to_opencl

    name = c_module_name(module_name)
    artifacts, skipped = {}, {}
    for k in kernels:
        try:
            artifacts[k.name] = compile_to_opencl(k.program(), k.options)
        except CompileError as err:
            skipped[k.name] = str(err)
    if not artifacts:
        raise CompileError(f"no kernel of {source_file} compiles to OpenCL on its own:\n" + "\n".join(skipped.values()))
    fp64 = any(a.needs_fp64 for a in artifacts.values())
    # the one extension an artifact may need, the single-pass scan's: the host runtime checks it
    extension = next(iter({e for a in artifacts.values() for e in a.extensions}), None)
    bodies = [f"/* ---- {kname} */\n{strategy_comment(a.source)}{a.source[a.source.index('__kernel '):]}"
              for kname, a in artifacts.items()]
    one_launch = any(a.needs_atomics for a in artifacts.values())
    program = f"/* Generated by fsmooth from {source_file}. */\n" + prelude(fp64, one_launch, extension is not None) + "\n" + "\n".join(bodies)
    by_name = {k.name: k for k in kernels}
    symbols = {kname: exported_name(name, kname) for kname in artifacts}
    taken = frozenset(f for kname, a in artifacts.items() for f in _function_names(symbols[kname], a.interface.outputs))
    hosts = [_host_kernel(a, name, taken) for a in artifacts.values()]
    _check_names(name, hosts, by_name)
    return OpenCLLibrary(name, program, _launch_description(artifacts, skipped, name, fp64),
                         _header(name, source_file, hosts, by_name), _source(name, program, hosts, fp64, extension),
                         _manifest(name, source_file, hosts, fp64, skipped), skipped)
