"""``fsmooth compile --target opencl``: the C host code, built with plain ``cc`` against the OpenCL
of pip's wheels (pyopencl's ICD loader, Oclgrind's device with its checks on) and run with no
Python.

The example program (examples/opencl) is built as a C user would build it and its output is
checked against the kernels' reference semantics and numpy; corpus kernels run through a driver
made from each module's manifest, at sizes 0, 1 and larger, with bad calls that must give the C
target's status codes; the header and manifest follow the C target's conventions; every
OpenCL declaration of clib/fsmooth_cl.h has the Khronos value (pyopencl's).
"""
from __future__ import annotations

import json
import pathlib
import re
import struct
import subprocess

import numpy as np
import pytest

from opencl_oclgrind import oclgrind_diagnostics, pip_opencl
from test_cli import REPO, fsmooth

from fsmooth.clib import HEADER_DIR, OPENCL_HOST_HEADERS

EXAMPLE = REPO / "examples" / "opencl"
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
F32 = dict(rtol=1e-4, atol=1e-4)
F64 = dict(rtol=1e-12, atol=1e-12)

PIP_OPENCL = pip_opencl()
needs_pip_opencl = pytest.mark.skipif(PIP_OPENCL is None, reason="needs pyopencl's wheel (the test extra)")


def compile_opencl(source: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    result = fsmooth("compile", str(source), "-o", str(out), "--target", "opencl")
    assert result.returncode == 0, result.stderr
    return out


def cc(out: pathlib.Path, sources, *flags: str) -> pathlib.Path:
    link = PIP_OPENCL[0] if PIP_OPENCL else ["-lOpenCL"]
    result = subprocess.run(["cc", *WARNINGS, *flags, "-o", str(out), *map(str, sources), *link, "-lm"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return out


def run_on_oclgrind(command: list[str], stdin: bytes = b"", **env) -> subprocess.CompletedProcess:
    """``command`` with pip's OpenCL and Oclgrind's checks; no Oclgrind diagnostic allowed, a
    work-group the simulator gave up on (``OCLGRIND FATAL ERROR``) included."""
    import os

    done = subprocess.run(command, input=stdin, capture_output=True, timeout=600,
                          env={**os.environ, **PIP_OPENCL[1], **env})
    stderr = done.stderr.decode(errors="replace")
    assert not oclgrind_diagnostics(stderr), stderr
    return done


# ----------------------------------------------------------------------------- the OpenCL declarations

def test_cl_declarations_have_the_khronos_values():
    """Every constant of clib/fsmooth_cl.h is the value pyopencl (built on the Khronos headers) has."""
    cl = pytest.importorskip("pyopencl")
    expected = {"CL_SUCCESS": cl.status_code.SUCCESS, "CL_FALSE": 0, "CL_TRUE": 1,
                "CL_DEVICE_EXTENSIONS": cl.device_info.EXTENSIONS,
                "CL_DEVICE_TYPE_CPU": cl.device_type.CPU, "CL_DEVICE_TYPE_GPU": cl.device_type.GPU,
                "CL_DEVICE_TYPE_ALL": cl.device_type.ALL, "CL_PLATFORM_NAME": cl.platform_info.NAME,
                "CL_DEVICE_TYPE": cl.device_info.TYPE, "CL_DEVICE_MAX_WORK_GROUP_SIZE": cl.device_info.MAX_WORK_GROUP_SIZE,
                "CL_DEVICE_MAX_MEM_ALLOC_SIZE": cl.device_info.MAX_MEM_ALLOC_SIZE,
                "CL_DEVICE_LOCAL_MEM_SIZE": cl.device_info.LOCAL_MEM_SIZE, "CL_DEVICE_NAME": cl.device_info.NAME,
                "CL_DEVICE_DOUBLE_FP_CONFIG": cl.device_info.DOUBLE_FP_CONFIG,
                "CL_MEM_READ_WRITE": cl.mem_flags.READ_WRITE, "CL_PROGRAM_BUILD_LOG": cl.program_build_info.LOG}
    text = (HEADER_DIR / "fsmooth_cl.h").read_text()
    defined = {name: eval(value, {"__builtins__": {}}) for name, value in  # noqa: S307 (C integer literals)
               re.findall(r"^#define (CL_\w+) (.+)$", text, re.M)}
    assert defined == expected


# ----------------------------------------------------------------------------- the example

@pytest.fixture(scope="module")
def example(tmp_path_factory) -> pathlib.Path:
    build = compile_opencl(EXAMPLE / "imaging.py", tmp_path_factory.mktemp("opencl-example") / "build")
    return cc(build / "main", [EXAMPLE / "main.c", build / "imaging.c"], f"-I{build}", "-O1")


@pytest.fixture(scope="module")
def imaging():
    import importlib.util

    spec = importlib.util.spec_from_file_location("opencl_example_imaging", EXAMPLE / "imaging.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def np_box_blur(img):
    padded = np.pad(img, 1, mode="edge")
    rows, cols = img.shape
    return sum(padded[dr:dr + rows, dc:dc + cols] for dr in range(3) for dc in range(3)) / 9.0


@needs_pip_opencl
@pytest.mark.parametrize("rows, cols", [(1, 1), (4, 5), (9, 3)])
def test_example_program(example, imaging, rows, cols):
    done = run_on_oclgrind([str(example), str(rows), str(cols), "oclgrind"])
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    img = (1.0 + (r * 7 + c * 3) % 10).astype(np.float64)
    weights = 1.0 + np.arange(cols) % 3.0
    at = np.arange(5) * 7 % (rows * cols)

    assert lines[0] == f"box_blur {rows} {cols}"
    blurred = np.array([[float(x) for x in line.split()] for line in lines[1:1 + rows]])
    np.testing.assert_allclose(blurred, imaging.box_blur.reference(img), **F64)
    np.testing.assert_allclose(blurred, np_box_blur(img), **F64)
    rest = lines[1 + rows:]
    mean = float(rest[0].split()[1])
    assert mean == pytest.approx(imaging.weighted_mean.reference(img[0], weights), rel=1e-13)
    assert mean == pytest.approx(np.dot(img[0], weights) / weights.sum(), rel=1e-13)
    gathered = [float(x) for x in rest[1].split()[1:]]
    assert gathered == list(imaging.gather.reference(img.ravel(), at)) == list(img.ravel()[at])
    # the two bad calls: refused before anything runs (3), and found by the device (1)
    assert rest[2].startswith("weighted_mean with a short w: status 3 (size constraint violated): weighted_mean: ")
    assert "argument 'w'" in rest[2]
    assert rest[3] == "gather past the end: status 1 (index out of range): gather: index out of range"
    assert len(rest) == 4


@needs_pip_opencl
def test_a_context_without_a_device_says_why(example):
    done = run_on_oclgrind([str(example), "2", "2", "no such platform"])
    assert done.returncode == 1 and not done.stdout
    assert done.stderr.decode().startswith(
        "no OpenCL context: no OpenCL device found (platform 'no such platform', device 'any')")


@needs_pip_opencl
def test_a_context_takes_the_first_device_that_builds_the_program(example, imaging):
    """With every platform allowed (an empty part of a name), PoCL's CPU device comes before
    Oclgrind's; where PoCL's LLVM does not know this CPU, its build fails and the context takes
    Oclgrind's device: either way the program runs."""
    done = run_on_oclgrind([str(example), "2", "3", ""])
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    img = (1.0 + (np.arange(2)[:, None] * 7 + np.arange(3)[None, :] * 3) % 10).astype(np.float64)
    blurred = np.array([[float(x) for x in line.split()] for line in lines[1:3]])
    np.testing.assert_allclose(blurred, imaging.box_blur.reference(img), **F64)


def test_example_makefile_builds_the_opencl_target():
    """The Makefile runs what the tests run: ``fsmooth compile --target opencl`` and cc with -Werror."""
    makefile = (EXAMPLE / "Makefile").read_text()
    assert "$(FSMOOTH) compile imaging.py -o build --target opencl" in makefile
    assert "-Werror" in makefile and "main.c build/imaging.c $(OPENCL_LIBS) -lm" in makefile


# ----------------------------------------------------------------------------- corpus kernels through a driver

_CTYPE_FORMAT = {"double": "d", "float": "f", "int64_t": "q", "bool": "?"}
_CTYPE_DTYPE = {"double": np.float64, "float": np.float32, "int64_t": np.int64, "bool": np.bool_}


def driver_source(manifest: dict, kernels: list[str]) -> str:
    """A C program that runs ``kernels`` of a module on records read from stdin: an int32 kernel
    number, then each parameter (an array as its rank int64 dims and its elements, a scalar as its
    bytes); it writes an int32 status, then each result component's dims and elements.  It counts
    clCreateBuffer calls (ld's --wrap) and writes the count after each record."""
    name, out = manifest["module"], []
    out += ["#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>", f'#include "{name}.h"',
            '#include "fsmooth_cl.h"', "",
            "static long buffers_created;",
            "cl_mem __real_clCreateBuffer(cl_context, cl_mem_flags, size_t, void *, cl_int *);",
            "cl_mem __wrap_clCreateBuffer(cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *e) {",
            "    buffers_created++;", "    return __real_clCreateBuffer(c, f, n, h, e);", "}", "",
            "static void get(void *p, size_t n) { if (n && fread(p, 1, n, stdin) != n) exit(3); }",
            "static void put(const void *p, size_t n) { if (n) fwrite(p, 1, n, stdout); }",
            "static void *array(size_t elem, int rank, int64_t *dims) {",
            "    get(dims, sizeof(int64_t) * (size_t)rank);",
            "    size_t n = 1;", "    for (int j = 0; j < rank; j++) n *= (size_t)dims[j];",
            "    void *p = malloc(n * elem + 1);", "    get(p, n * elem);", "    return p;", "}", "",
            "int main(void) {",
            f"    struct {name}_context_config *cfg = {name}_context_config_new();",
            f'    {name}_context_config_set_platform(cfg, "oclgrind");',
            f"    struct {name}_context *ctx = {name}_context_new(cfg);",
            f"    char *error = {name}_context_get_error(ctx);",
            '    if (error) { fprintf(stderr, "%s\\n", error); return 2; }',
            "    int32_t which;",
            "    while (fread(&which, sizeof which, 1, stdin) == 1) {",
            "        int32_t status = -1;", "        switch (which) {"]
    for j, kname in enumerate(kernels):
        k = manifest["kernels"][kname]
        out.append(f"        case {j}: {{")
        body, args, frees, value_of = [], [], [], {}
        for p in k["params"]:
            c = p["cname"]
            if p["rank"]:
                elem = p["ctype"].replace("const ", "").rstrip(" *")
                body.append(f"int64_t {c}_dims[{p['rank']}];")
                body.append(f"{elem} *{c} = array(sizeof({elem}), {p['rank']}, {c}_dims);")
                args += [c] + [f"{c}_dims[{d}]" for d in range(p["rank"])]
                frees.append(c)
                for d in range(p["rank"]):
                    value_of[(p["name"], d)] = f"{c}_dims[{d}]"
            else:
                body.append(f"{p['ctype']} {c};")
                body.append(f"get(&{c}, sizeof {c});")
                args.append(c)
                value_of[(p["name"], None)] = c
        sizes = ", ".join(value_of[(s["param"], s["dim"])] for s in k["sizes"])
        components = k["result"].get("components") or [dict(k["result"], cname="out", shape_fun=k["shape_fun"])]
        body.append(f"int fits = {k['check_fun']}({sizes}) == 0;")
        for o in components:
            c = o["cname"]
            body.append(f"int64_t {c}_dims[{max(o['rank'], 1)}] = {{1}};")
            if o["rank"]:
                body.append(f"if (fits) {o['shape_fun']}({c}_dims{', ' + sizes if sizes else ''});")
            size = " * ".join(f"(size_t){c}_dims[{d}]" for d in range(o["rank"])) or "1"
            body.append(f"size_t {c}_n = fits ? {size} : 0;")
            body.append(f"{o['ctype']} *{c} = fits ? malloc({c}_n * sizeof *{c} + 1) : NULL;")
            frees.append(c)
        body.append(f"status = {k['cfun']}(ctx, {', '.join([o['cname'] for o in components] + args)});")
        body.append(f"free({name}_context_get_error(ctx));")
        body.append("put(&status, sizeof status);")
        body.append("if (status == 0) {")
        for o in components:
            c = o["cname"]
            body.append(f"    put({c}_dims, sizeof(int64_t) * {o['rank']}); put({c}, {c}_n * sizeof *{c});")
        body.append("}")
        body += [f"free({c});" for c in frees]
        out += [f"            {line}" for line in body] + ["            break;", "        }"]
    out += ["        }", "        put(&buffers_created, sizeof buffers_created);", "        fflush(stdout);", "    }",
            f"    {name}_context_free(ctx);", f"    {name}_context_config_free(cfg);", "    return 0;", "}"]
    return "\n".join(out) + "\n"


class Driver:
    """A module's kernels built into one driver program (``driver_source``)."""

    def __init__(self, build: pathlib.Path, manifest: dict, kernels: list[str], *flags: str):
        self.manifest, self.kernels = manifest, kernels
        (build / "driver.c").write_text(driver_source(manifest, kernels))
        name = manifest["module"]
        self.program = cc(build / "driver", [build / "driver.c", build / f"{name}.c"], f"-I{build}", "-O1",
                          "-Wl,--wrap=clCreateBuffer", *flags)

    def encode(self, kname: str, args) -> bytes:
        k = self.manifest["kernels"][kname]
        data = [struct.pack("<i", self.kernels.index(kname))]
        for p, value in zip(k["params"], args):
            elem = p["ctype"].replace("const ", "").rstrip(" *")
            if p["rank"]:
                a = np.ascontiguousarray(value, dtype=_CTYPE_DTYPE[elem])
                data += [struct.pack(f"<{a.ndim}q", *a.shape), a.tobytes()]
            else:
                data.append(struct.pack(f"<{_CTYPE_FORMAT[elem]}", value))
        return b"".join(data)

    def run(self, calls: list, **env) -> list:
        """(status, result or None, buffers created so far) per call of ``calls`` ((kernel, args)),
        in one process."""
        done = run_on_oclgrind([str(self.program)], b"".join(self.encode(k, a) for k, a in calls), **env)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        data, at, answers = done.stdout, 0, []
        for kname, _ in calls:
            k = self.manifest["kernels"][kname]
            (status,), at = struct.unpack_from("<i", data, at), at + 4
            values = []
            if status == 0:
                components = k["result"].get("components") or [k["result"]]
                for o in components:
                    dims = struct.unpack_from(f"<{o['rank']}q", data, at)
                    at += 8 * o["rank"]
                    dtype = np.dtype(_CTYPE_DTYPE[o["ctype"]])
                    count = int(np.prod(dims)) if o["rank"] else 1
                    a = np.frombuffer(data, dtype, count, at).reshape(dims)
                    at += count * dtype.itemsize
                    values.append(a.copy() if o["rank"] else a[()].item())
            (created,), at = struct.unpack_from("<q", data, at), at + 8
            answers.append((status, (tuple(values) if len(values) > 1 else values[0]) if values else None, created))
        assert at == len(data)
        return answers


@pytest.fixture(scope="module")
def corpus_driver(tmp_path_factory):
    """Drivers of the corpus modules blas (strategies: work-groups, local memory, two-phase
    reductions), tuples (tuple parameters and results, Card parameters, hoisted temporaries),
    image (2-D arrays) and scan_filter (the single-pass scan's look-back words, the three-phase
    scan)."""
    drivers = {}
    for module, kernels in [("blas", ["dot", "asum", "scal", "gemv"]),
                            ("tuples", ["argmax", "scale_and_sum", "smooth_count", "welford"]),
                            ("image", ["box_blur3", "gaussian_blur3"]),
                            ("scan_filter", ["cumulative_sum", "index_cumulative_sum"])]:
        build = compile_opencl(REPO / "tests" / "corpus" / f"{module}.py", tmp_path_factory.mktemp(module))
        drivers[module] = Driver(build, json.loads((build / f"{module}.json").read_text()), kernels)
    return drivers


def _check(got, reference, oracle, tol):
    if isinstance(reference, tuple):
        assert isinstance(got, tuple) and len(got) == len(reference)
        for g, r, o in zip(got, reference, oracle):
            _check(g, r, o, tol)
        return
    np.testing.assert_allclose(got, reference, **tol)
    np.testing.assert_allclose(got, oracle, **tol)


@needs_pip_opencl
def test_corpus_kernels_through_the_host_code(corpus_driver):
    """Sizes 0, 1 and larger, each result against the kernel's reference and the numpy oracle.
    Within a process, larger sizes come first: the host code replaces a buffer that must grow by
    a new one, which takes the freed one's number in Oclgrind, whose uninitialised-value plugin
    then keeps the old buffer's shadow memory, of the old size, and reports reads past it of what
    the kernels wrote (opencl_oclgrind's note; the Python launcher's checks keep every buffer
    alive instead, which a C program cannot be told to do)."""
    import corpus.blas as blas
    import corpus.image as image
    import corpus.scan_filter as scan_filter
    import corpus.tuples as tuples

    rng = np.random.default_rng(7)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    f64 = rng.standard_normal
    cases = {
        "blas": [(blas, "dot", (f32(n), f32(n)), F32) for n in (20000, 300, 1, 0)]
        + [(blas, "asum", (f32(n),), F32) for n in (300, 1, 0)]
        + [(blas, "scal", (np.float32(1.5), f32(n)), F32) for n in (300, 1, 0)]
        + [(blas, "gemv", (np.float32(2), f32(m, n), f32(n), np.float32(0.5), f32(m)), F32)
           for m, n in ((7, 130), (1, 1), (1, 0))],
        "tuples": [(tuples, "argmax", (f64(n),), F64) for n in (257, 2, 1)]
        + [(tuples, "scale_and_sum", (f64(n), (1.25, f64(n))), F64) for n in (100, 1, 0)]
        + [(tuples, "smooth_count", (f64(n), k), F64) for n, k in ((50, 4), (1, 3), (0, 0))]
        + [(tuples, "welford", (f64(n),), F64) for n in (100, 1, 0)],
        "image": [(image, kname, (f64((r, c)),), F64) for kname in ("box_blur3", "gaussian_blur3")
                  for r, c in ((6, 9), (3, 1), (1, 1))],
        # three tiles of the single pass, then fewer, then three again: its words stay consistent
        "scan_filter": [(scan_filter, "cumulative_sum", (f64(n),), F64) for n in (6001, 1, 0, 2049, 6001)]
        + [(scan_filter, "index_cumulative_sum", (rng.integers(-9, 9, n),), F64) for n in (2049, 0)],
    }
    for module, module_cases in cases.items():
        calls = [(kname, _flat(args)) for _, kname, args, _ in module_cases]
        answers = corpus_driver[module].run(calls)
        for (py, kname, args, tol), (status, got, _) in zip(module_cases, answers):
            assert status == 0, (kname, [np.shape(a) for a in args])
            kernel, oracle = getattr(py, kname), getattr(py, f"np_{kname}")
            _check(got, kernel.reference(*args), oracle(*args), tol)


def _flat(args) -> tuple:
    """A tuple parameter is passed as its components (the C target's convention)."""
    return tuple(x for a in args for x in (a if isinstance(a, tuple) else (a,)))


_FLAGS = """
import fsmooth as fs
from fsmooth import Array, Bool, Card, Double, build, length


@fs.kernel
def clip(v: Array[Double], lo: Double, flip: Bool) -> Array[Double]:
    return build(length(v), lambda i: (-v[i] if flip else v[i]) if v[i] > lo else lo)


@fs.kernel
def positive(v: Array[Double]) -> Array[Bool]:
    return build(length(v), lambda i: v[i] > 0.0)


@fs.kernel
def count_true(b: Array[Bool]) -> Double:
    return fs.ifold(lambda acc, i: acc + (1.0 if b[i] else 0.0), 0.0, length(b))


@fs.kernel
def ramp(n: Card) -> Array[Double]:
    return build(n, lambda i: 0.5 * i)
"""


@needs_pip_opencl
def test_bool_parameters_and_results(tmp_path):
    """A Bool scalar travels as a uchar (OpenCL has no bool kernel arguments), Bool arrays as bytes;
    a result larger than the device's largest buffer is out of memory (4) before any buffer is made."""
    import importlib.util

    (tmp_path / "flags.py").write_text(_FLAGS)
    spec = importlib.util.spec_from_file_location("opencl_host_flags", tmp_path / "flags.py")
    flags = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flags)
    build = compile_opencl(tmp_path / "flags.py", tmp_path / "build")
    driver = Driver(build, json.loads((build / "flags.json").read_text()), ["clip", "positive", "count_true", "ramp"])
    v = np.array([-2.0, 0.5, 3.0, -0.1, 7.0])
    calls = [("clip", (v, 0.0, True)), ("clip", (v, 0.0, False)), ("positive", (v,)), ("count_true", (v > 0,)),
             ("positive", (v[:0],)), ("count_true", (v[:0] > 0,)), ("ramp", (5,))]
    for (kname, args), (status, got, _) in zip(calls, driver.run(calls)):
        assert status == 0
        expected = getattr(flags, kname).reference(*args)
        assert np.array_equal(got, expected), (kname, args)
    # Oclgrind's largest buffer is 128 MiB: 2**24 + 1 doubles are 8 bytes more; the context goes on
    answers = driver.run([("ramp", (2**24 + 1,)), ("ramp", (3,))])
    assert [(status, created) for status, _, created in answers] == [(4, 0), (0, 2)]
    assert list(answers[1][1]) == [0.0, 0.5, 1.0]


_SOFTMAX_ROWS = """
import fsmooth as fs
from fsmooth import Array, Double, build, ifold, length


@fs.kernel
def softmax_rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(m), lambda i: softmax(m[i]))


@fs.kernel
def softmax(v: Array[Double]) -> Array[Double]:
    mx = ifold(lambda acc, j: fs.max(acc, v[j]), v[0], length(v))
    e = build(length(v), lambda j: fs.exp(v[j] - mx))
    total = ifold(lambda acc, j: acc + e[j], 0.0, length(v))
    return build(length(v), lambda j: e[j] / total)


@fs.kernel
def reversed_softmax_rows(m: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(m), lambda i: reversed_softmax(m[i]))


@fs.kernel
def reversed_softmax(v: Array[Double]) -> Array[Double]:
    mx = ifold(lambda acc, j: fs.max(acc, v[j]), v[0], length(v))
    e = build(length(v), lambda j: fs.exp(v[j] - mx))
    total = ifold(lambda acc, j: acc + e[j], 0.0, length(v))
    return build(length(v), lambda j: e[length(v) - 1 - j] / total)
"""


@needs_pip_opencl
def test_a_launch_or_its_fallback_by_the_devices_local_memory(tmp_path):
    """Softmax's exponentials are a row of local memory, or the result's row in the fallback
    launch where the row (and the reductions' trees) exceed Oclgrind's 32 KiB of local memory:
    the host code runs one of the two, neither with a temporary."""
    from corpus import ml

    (tmp_path / "rows.py").write_text(_SOFTMAX_ROWS)
    build = compile_opencl(tmp_path / "rows.py", tmp_path / "build")
    manifest = json.loads((build / "rows.json").read_text())
    launches = manifest["kernels"]["softmax_rows"]["launches"]
    # and the short rows' work-item per row (test_opencl_row_variants)
    assert [launch["fallback"] for launch in launches] == [False, True, False]
    rng = np.random.default_rng(5)
    # 3,000 doubles (24,000 bytes) and the trees' 8,160 fit in 32 KiB; 4,200 do not
    args = [rng.standard_normal(shape) for shape in ((2, 3000), (1, 4200), (3, 1))]
    driver = Driver(build, manifest, ["softmax_rows"], "-g", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=undefined")  # the choice's C clean under the sanitizers too
    answers = driver.run([("softmax_rows", (m,)) for m in args], ASAN_OPTIONS="detect_leaks=1")
    for m, (status, got, _) in zip(args, answers):
        assert status == 0
        np.testing.assert_allclose(got, ml.np_softmax_rows(m), **F64)
    # m, out and the status buffer, and nothing more: no temporary, the exponentials are local, and
    # the fallback keeps them in the result's row (dpia.stage_rows), where it had a temporary of
    # rows x row length (m and out, of 6,000 elements, hold 4,200: no buffer made anew); rows of 1
    # are short: a work-item per row (test_opencl_row_variants), its exponentials in a scratch
    assert [created for _, _, created in answers] == [3, 3, 4]
    # reversed, the exponentials are read across the work-items: the fallback's temporary stays,
    # created for the fallback only
    driver = Driver(build, manifest, ["reversed_softmax_rows"], "-g", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=undefined")
    args = [rng.standard_normal(shape) for shape in ((3, 1400), (1, 4200), (3, 1))]  # two local rows: 1,400 fit
    answers = driver.run([("reversed_softmax_rows", (m,)) for m in args], ASAN_OPTIONS="detect_leaks=1")
    for m, (status, got, _) in zip(args, answers):
        assert status == 0
        np.testing.assert_allclose(got, ml.np_softmax_rows(m)[:, ::-1], **F64)
    # and the short rows' work-item per row its own scratch, made when rows of 1 first run it
    assert [created for _, _, created in answers] == [3, 4, 5]


@needs_pip_opencl
def test_bad_calls_return_the_c_targets_status_codes(corpus_driver):
    """A violated size constraint (3) and a size that overflows int64 (6) are refused before
    anything is allocated (no buffer created); argmax of an empty vector reads v[0] (3)."""
    x = np.ones(4, np.float32)
    big = 2**62
    answers = corpus_driver["blas"].run([
        ("gemv", (np.float32(1), np.ones((3, 4), np.float32), x, np.float32(1), np.ones(2, np.float32))),
        ("gemv", (np.float32(1), np.ones((3, 4), np.float32), x, np.float32(1), np.ones(3, np.float32))),
    ])
    assert [a[0] for a in answers] == [3, 0]
    assert answers[0][2] == 0  # refused before the first buffer
    # a call whose dims overflow int64 (the arrays are never read: K refuses the sizes first)
    driver = corpus_driver["image"]
    k = driver.manifest["kernels"]["box_blur3"]
    record = struct.pack("<i", driver.kernels.index("box_blur3")) + struct.pack("<2q", big, 4)
    done = run_on_oclgrind([str(driver.program)], record)
    assert k["params"][0]["rank"] == 2
    assert struct.unpack_from("<i", done.stdout)[0] == 6
    (status, _, created), = corpus_driver["tuples"].run([("argmax", (np.zeros(0),))])
    assert (status, created) == (3, 0)


@needs_pip_opencl
def test_buffers_are_allocated_once_per_shape(corpus_driver):
    """The context keeps each kernel's device buffers: calls of one shape create none after the
    first, a smaller shape reuses them, a larger one recreates only those that grow.  (Oclgrind's
    uninitialised-value checker is off here: a grown buffer takes the freed one's number, whose
    stale shadow memory makes it report reads of bytes the kernels wrote: opencl_oclgrind's note.)"""
    import corpus.tuples as tuples

    shapes = [100, 100, 100, 10, 200]
    args = [(np.arange(n) * 0.5, (2.0, np.arange(n) + 1.0)) for n in shapes]
    answers = corpus_driver["tuples"].run([("scale_and_sum", _flat(a)) for a in args], OCLGRIND_UNINITIALIZED="0")
    for a, (status, got, _) in zip(args, answers):
        assert status == 0
        _check(got, tuples.scale_and_sum.reference(*a), tuples.np_scale_and_sum(*a), F64)
    created = [a[2] for a in answers]
    first = created[0]
    # inputs v and p_1, outputs out_0 and out_1, temporaries tmp_6_buf and r2_buf, the status buffer
    buffers = corpus_driver["tuples"].manifest["kernels"]["scale_and_sum"]["buffers"]
    assert first == len([b for b in buffers if b["role"] != "local"])
    assert created[1:4] == [first] * 3
    # 200 elements: v, p_1, out_0 and the temporary of 100 or 200 grow; out_1, the reduction's
    # partials (one group's at both sizes), the other temporaries and the status buffer do not
    def elements(buffer, n: int) -> int:
        return int(buffer.count.subs({s: n for s in buffer.count.free_symbols}))

    artifact = tuples.scale_and_sum.opencl_artifact()
    growing = {name for name, b in artifact.buffers.items() if b.role != "local" and elements(b, 200) > elements(b, 100)}
    assert {"v", "p_1", "out_0"} < growing and "out_1" not in growing
    assert created[4] == first + len(growing)


@needs_pip_opencl
def test_host_code_is_clean_under_sanitizers(tmp_path):
    """The host code and its runtime under AddressSanitizer (leaks included) and UBSan: calls that
    succeed, grow the buffers, and fail a size check or a check on the device."""
    import corpus.tuples as tuples

    build = compile_opencl(REPO / "tests" / "corpus" / "tuples.py", tmp_path)
    driver = Driver(build, json.loads((build / "tuples.json").read_text()), ["argmax", "scale_and_sum"],
                    "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined")
    v = np.linspace(-1.0, 1.0, 50)
    answers = driver.run([("argmax", (v,)), ("scale_and_sum", (v[:5], 3.0, v[:5])), ("scale_and_sum", (v, 3.0, v)),
                          ("scale_and_sum", (v, 3.0, v[:10])), ("argmax", (v[:0],))],
                         ASAN_OPTIONS="detect_leaks=1", OCLGRIND_UNINITIALIZED="0")
    assert [a[0] for a in answers] == [0, 0, 0, 3, 3]
    assert answers[0][1] == tuples.argmax.reference(v)


# ----------------------------------------------------------------------------- conventions

def test_header_and_manifest_follow_the_c_target(tmp_path):
    """The same status codes (and 7 for OpenCL), the same parameters after the first (``ctx``
    for ``scratch``), the same shape and size-check functions, the same manifest entries."""
    from fsmooth.embed import library, exported_kernels
    from fsmooth.opencl_host import opencl_library
    from fsmooth.options import default_options
    import corpus.tuples as tuples

    kernels = [k for k in exported_kernels(tuples) if k.name in ("argmax", "scale_and_sum", "smooth_count")]
    c_lib = library("tuples", kernels, default_options(), "tuples.py")
    cl_lib = opencl_library("tuples", kernels, "tuples.py")
    statuses = lambda header: re.findall(r"^#define TUPLES_STATUS_\w+ +\d+.*$", header, re.M)  # noqa: E731
    assert statuses(cl_lib.header)[:-1] == statuses(c_lib.header)
    assert statuses(cl_lib.header)[-1].startswith("#define TUPLES_STATUS_OPENCL_ERROR")
    for kname in ("argmax", "scale_and_sum", "smooth_count"):
        c_entry, cl_entry = c_lib.manifest["kernels"][kname], cl_lib.manifest["kernels"][kname]
        for key in ("cfun", "shape_fun", "check_fun", "params", "result", "sizes"):
            assert cl_entry[key] == c_entry[key], key
        c_main, *c_rest = c_entry["prototypes"]
        cl_main, *cl_rest = cl_entry["prototypes"]
        assert c_main.replace("void *scratch", "struct tuples_context *ctx") == cl_main
        assert [p for p in c_rest if "_scratch_bytes" not in p] == cl_rest
        assert cl_entry["check_fun"] + "(" in cl_lib.header and cl_main in cl_lib.header
    for key in ("generator", "module", "source", "status_codes", "kernels"):
        assert key in cl_lib.manifest
    assert {k: v for k, v in cl_lib.manifest["status_codes"].items() if k != "7"} == c_lib.manifest["status_codes"]
    assert cl_lib.manifest["files"]["runtime"] == list(OPENCL_HOST_HEADERS)
    written = {p.name for p in cl_lib.write(tmp_path)}
    assert written == {"tuples.h", "tuples.c", "tuples.json", "tuples.cl", "tuples.opencl.json", *OPENCL_HOST_HEADERS}
    # the header needs no OpenCL: a C++ or C program includes it with nothing but libc
    assert set(re.findall(r"#include <(.*?)>", cl_lib.header)) == {"stdbool.h", "stdint.h"}


@pytest.mark.parametrize("module", ["blas", "tuples", "image", "triangular", "linalg"])
def test_corpus_host_code_compiles_with_warnings_as_errors(tmp_path, module):
    build = compile_opencl(REPO / "tests" / "corpus" / f"{module}.py", tmp_path)
    result = subprocess.run(["cc", *WARNINGS, "-c", "-o", str(tmp_path / "m.o"), str(build / f"{module}.c")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


@needs_pip_opencl
def test_a_tile_chosen_at_launch_by_the_host_code(tmp_path):
    """A nest whose outer loop runs along the lanes takes the least padded tile at the call
    (fsmooth.cost_model.NestChoice.launch_tiles): the C host code computes it from the sizes as the
    Python launcher does (a ? b : c), and the results are the reference's under Oclgrind."""
    import importlib.util

    source = pathlib.Path(__file__).parent / "opencl_nest_kernels.py"
    (tmp_path / "nest.py").write_text(source.read_text())
    spec = importlib.util.spec_from_file_location("opencl_host_nest", tmp_path / "nest.py")
    nest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nest)
    build = compile_opencl(tmp_path / "nest.py", tmp_path / "build")
    assert " ? " in (build / "nest.c").read_text()
    driver = Driver(build, json.loads((build / "nest.json").read_text()), ["product_transposed"])
    rng = np.random.default_rng(8)
    shapes = ((9, 300), (40, 33), (1, 1), (3, 0))  # 64 × 4, 32 × 8 and 256 × 1 tiles; nothing to run
    args = [(rng.standard_normal(s), rng.standard_normal(s)) for s in shapes]
    for (a, b), (status, got, _) in zip(args, driver.run([("product_transposed", ab) for ab in args])):
        assert status == 0
        np.testing.assert_array_equal(got.reshape(a.shape[::-1]), nest.product_transposed_oracle(a, b))
        np.testing.assert_array_equal(np.array(nest.product_transposed.reference(a, b)).reshape(a.shape[::-1]),
                                      nest.product_transposed_oracle(a, b))
