"""The DPIA paper's §7 BLAS benchmarks: fsmooth's OpenCL scal, asum, dot and gemv against the
vendor library, in one process:

    python -m benchmarks.blas --device gpu     # NVIDIA GPU: fsmooth's OpenCL against cuBLAS
    python -m benchmarks.blas --device cpu     # a CPU device (Intel's runtime, else PoCL's): against numpy
    python -m benchmarks.blas --quick          # smoke run: tiny sizes, any device (Oclgrind too)

    FSMOOTH_OPENCL_REDUCTION=local=256,width=4,items=16,groups=1024 python -m benchmarks.blas --kernels dot,dot_auto
                                               # the unannotated kernels' reductions shaped otherwise

The kernels are ``tests/corpus/blas.py``'s (their strategies are DPIA §6.3's; ``dot_auto``,
``asum_auto`` and ``gemv_auto`` are ``dot``, ``asum`` and ``gemv`` written with none, the strategy
chosen by ``fsmooth.auto_reductions`` with ``fsmooth.cost_model`` for the device, shaped by
``FSMOOTH_OPENCL_REDUCTION``); the sizes are the
paper's: scal, asum and dot over 2**24 and 2**27 floats, gemv on 4096² and 8192² float32
matrices.  For every kernel and size:

  - fsmooth: ``kernel.opencl_executable(context)``, inputs uploaded once, one call whose result
    is checked against the numpy oracle (in float64), then ``run_timed``: the device time of each
    call from the OpenCL profiling events (the sum of its launches), after warm-up calls;
  - the baseline, on the same data: on a GPU, cuBLAS through PyTorch (``torch.dot``,
    ``torch.addmv``, and ``torch.mul`` for scal, which is PyTorch's element-wise kernel: cuBLAS's
    ``sscal`` works in place) and ``cupy.cublas.asum`` (``sasum``) where CuPy imports, else
    ``torch.linalg.vector_norm(x, 1)``; each call timed with CUDA events after a warm-up; on a
    CPU device, numpy, each call timed with ``time.perf_counter``.  Its result is checked too.

Times are medians of ``--repeats`` calls (default 100).  GB/s counts the bytes the operation
must read and write: scal 2·4n, asum 4n, dot 8n, gemv 4(mn + m + n).  ``speed`` is the
baseline's median time over fsmooth's, so 1.0 is as fast and the issue's target on a GPU is
``speed >= 0.9``.  Writes ``OUT/blas_<device kind>.json`` and (with matplotlib) a log-scale bar
plot ``OUT/blas_<device kind>.png``; a full run into ``benchmarks/results`` (or any run with
``--report``) also rewrites the BLAS section of ``benchmarks/RESULTS.md`` from the JSON files
there (``python -m benchmarks.blas_report`` does only that).  Needs no tqdm or matplotlib.
Exit status 1 if a result check failed, 3 if no OpenCL device of the asked kind can build kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/blas.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks import blas_report, micro_report  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
REPORT = REPO_ROOT / "benchmarks" / "RESULTS.md"

if str(REPO_ROOT / "tests") not in sys.path:  # the kernels live in the test corpus
    sys.path.insert(0, str(REPO_ROOT / "tests"))

FULL = dict(vector_sizes=(2 ** 24, 2 ** 27), matrix_sizes=(4096, 8192), repeats=100, warmup=10)
QUICK = dict(vector_sizes=(2 ** 12,), matrix_sizes=(64,), repeats=3, warmup=1)
# dot_auto, asum_auto and gemv_auto: the same operations written without strategies (fsmooth.auto_reductions
# chooses one; FSMOOTH_OPENCL_REDUCTION shapes it), against the same baselines
KERNEL_NAMES = ("scal", "asum", "dot", "gemv", "dot_auto", "asum_auto", "gemv_auto")
SCAL_ALPHA, GEMV_ALPHA, GEMV_BETA = 2.5, 1.5, 0.5
SEED = 20240613

# A result passes when |got - expected| <= rtol * magnitude, the magnitude being the same
# operation on absolute values (the scale of float32 rounding in a sum).  A float32 sum of 2**27
# terms in fsmooth's order goes through about 16 + 7 + 512 + 7 sequential additions per path:
# at most ~550 eps = 3.3e-5 relative to the magnitude.
SUM_RTOL = 1e-4
ELEMENTWISE_RTOL = 1e-6  # scal: one float32 multiplication, as numpy does it

_SIMULATOR_PLATFORMS = ("oclgrind",)


class NoDeviceError(RuntimeError):
    """No OpenCL device of the asked kind that can build a kernel."""


# ----------------------------------------------------------------------------- OpenCL device

def _is_simulator(device) -> bool:
    return any(s in device.platform.name.lower() for s in _SIMULATOR_PLATFORMS)


def device_kind(device) -> str:
    """'gpu', 'cpu' or 'simulator' (Oclgrind reports every device type bit, GPU included)."""
    import pyopencl as cl

    if _is_simulator(device):
        return "simulator"
    return "gpu" if device.type & cl.device_type.GPU else "cpu"


def _builds_kernels(context) -> bool:
    import pyopencl as cl

    try:
        cl.Program(context, "__kernel void probe(__global int *a) { a[0] = 1; }").build()
        return True
    except (cl.Error, RuntimeError):
        return False


def choose_context(wanted: str):
    """A context on a device of kind ``wanted``: 'gpu' (a real platform's GPU), 'cpu' (a real
    platform's CPU device, in fsmooth's order: Intel's CPU runtime, PoCL's, another) or 'any'
    (fsmooth's own choice: ``PYOPENCL_CTX`` honoured, a GPU preferred).  The device must build
    a trivial kernel."""
    import pyopencl as cl

    from fsmooth.opencl_device import cpu_preference, select_context

    if wanted == "any":
        try:
            context = select_context()
        except (RuntimeError, cl.Error) as err:
            raise NoDeviceError(str(err)) from None
        candidates = [context]
    else:
        try:
            platforms = cl.get_platforms()
        except cl.Error as err:
            raise NoDeviceError(f"no OpenCL platform ({err})") from None
        devices = []
        for p in platforms:
            try:
                devices += p.get_devices()
            except cl.Error:
                pass
        real = [d for d in devices if not _is_simulator(d)]
        mask = cl.device_type.GPU if wanted == "gpu" else cl.device_type.CPU
        matching = [d for d in real if d.type & mask]
        matching.sort(key=lambda d: cpu_preference(d.platform))
        candidates = [cl.Context([d]) for d in matching]
    for context in candidates:
        if _builds_kernels(context):
            return context
    seen = ", ".join(f"{c.devices[0].name.strip()} ({c.devices[0].platform.name})" for c in candidates)
    raise NoDeviceError(f"no OpenCL {wanted} device that builds kernels"
                        + (f" (tried: {seen})" if seen else "")
                        + "; on the GPU machine register the NVIDIA ICD (benchmarks/run_blas_gpu.sh), "
                          "or choose a device with PYOPENCL_CTX and --device any")


def device_facts(context) -> dict:
    device = context.devices[0]
    return {"name": device.name.strip(), "platform": device.platform.name.strip(),
            "platform_version": device.platform.version.strip(), "driver": device.driver_version.strip(),
            "opencl_version": device.version.strip(), "kind": device_kind(device),
            "compute_units": device.max_compute_units,
            "global_memory_gib": round(device.global_mem_size / 2 ** 30, 1)}


# ----------------------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    """One kernel at one size: its inputs, the bytes it moves, and the oracle's answer."""

    kernel: str
    size: int  # n for the vector kernels, m = n for gemv
    args: tuple  # the fsmooth kernel's arguments (numpy arrays and Python floats)
    expected: np.ndarray | float
    magnitude: np.ndarray | float  # the operation on absolute values: the scale of rounding
    rtol: float
    bytes_moved: int

    @property
    def label(self) -> str:
        return size_label(self.kernel, self.size)


def size_label(kernel: str, size: int) -> str:
    if operation(kernel) == "gemv":
        return f"{size}²"
    return f"{size // 2 ** 20} Mi" if size >= 2 ** 20 else f"{size}"


def operation(kernel: str) -> str:
    """The BLAS operation a kernel computes (``dot_auto``: ``dot``)."""
    from corpus import blas

    return blas.AUTO.get(kernel, kernel)


def make_case(kernel: str, size: int, rng: np.random.Generator) -> Case:
    from corpus import blas

    def vector(n):  # uniform in [-1, 1), generated in float32 (no float64 temporary of 2**27)
        return rng.random(n, dtype=np.float32) * np.float32(2) - np.float32(1)

    op = operation(kernel)
    if op == "scal":
        x = vector(size)
        return Case(kernel, size, (SCAL_ALPHA, x), blas.np_scal(SCAL_ALPHA, x),
                    np.abs(blas.np_scal(SCAL_ALPHA, x)), ELEMENTWISE_RTOL, 2 * 4 * size)
    if op == "asum":
        x = vector(size)
        total = blas.np_asum(x)
        return Case(kernel, size, (x,), total, total, SUM_RTOL, 4 * size)
    if op == "dot":
        x, y = vector(size), vector(size)
        return Case(kernel, size, (x, y), blas.np_dot(x, y), blas.np_dot(np.abs(x), np.abs(y)),
                    SUM_RTOL, 8 * size)
    if op == "gemv":
        m = n = size
        a, x, y = vector(m * n).reshape(m, n), vector(n), vector(m)
        expected = blas.np_gemv(GEMV_ALPHA, a, x, GEMV_BETA, y)
        magnitude = blas.np_gemv(abs(GEMV_ALPHA), np.abs(a), np.abs(x), abs(GEMV_BETA), np.abs(y))
        return Case(kernel, size, (GEMV_ALPHA, a, x, GEMV_BETA, y), expected, magnitude, SUM_RTOL,
                    4 * (m * n + m + n))
    raise ValueError(f"unknown BLAS kernel {kernel!r}")


def check(case: Case, got) -> dict:
    """Whether ``got`` equals the oracle within ``case.rtol`` of the magnitude, and the largest
    error relative to the magnitude."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(case.expected, dtype=np.float64)
    magnitude = np.maximum(np.asarray(case.magnitude, dtype=np.float64), np.finfo(np.float32).tiny)
    if got.shape != expected.shape:
        return {"ok": False, "note": f"shape {got.shape}, expected {expected.shape}"}
    relative = np.abs(got - expected) / magnitude
    worst = float(np.max(relative)) if relative.size else 0.0
    ok = bool(np.all(np.isfinite(got))) and worst <= case.rtol
    return {"ok": ok, "max_error_over_magnitude": worst, "rtol": case.rtol,
            "note": "" if ok else f"error {worst:.3g} × magnitude > {case.rtol:g}"}


# ----------------------------------------------------------------------------- fsmooth

def measure_fsmooth(case: Case, context, repeats: int, warmup: int) -> dict:
    from corpus import blas

    executable = blas.KERNELS[case.kernel].opencl_executable(context)
    on_device = executable.to_device(*case.args)  # uploaded once, for the check and the timing
    result = {"implementation": "fsmooth OpenCL", "launches": len(executable.artifact.launches),
              "check": check(case, executable.call(*on_device, device_result=False))}
    timing = executable.run_timed(on_device, repeats=repeats, warmup=warmup)
    result.update(median_s=timing.median, times_s=list(timing.times))
    return result


# ----------------------------------------------------------------------------- baselines

def _median_of(times: list[float]) -> dict:
    return {"median_s": statistics.median(times), "times_s": times}


def cuda_baseline(case: Case, repeats: int, warmup: int) -> dict:
    """cuBLAS (through PyTorch, or CuPy for sasum) on the same data, timed with CUDA events."""
    import torch

    device = torch.device("cuda")
    tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(device) if isinstance(a, np.ndarray) else a
               for a in case.args]
    events = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    elapsed = (lambda start, end: start.elapsed_time(end) * 1e-3)
    if operation(case.kernel) == "scal":
        alpha, x = tensors
        out = torch.empty_like(x)
        name, call = "PyTorch torch.mul (element-wise kernel)", lambda: torch.mul(x, alpha, out=out)
    elif operation(case.kernel) == "asum":
        (x,) = tensors
        cupy = _cupy()
        if cupy is not None:
            cx = cupy.from_dlpack(x)
            out = cupy.empty((), dtype=cupy.float32)
            name, call = "cuBLAS sasum (cupy.cublas.asum)", lambda: cupy.cublas.asum(cx, out=out)
            events = cupy.cuda.Event  # timing enabled by default
            elapsed = (lambda start, end: cupy.cuda.get_elapsed_time(start, end) * 1e-3)
        else:
            name, call = "PyTorch torch.linalg.vector_norm(x, 1)", lambda: torch.linalg.vector_norm(x, 1)
    elif operation(case.kernel) == "dot":
        x, y = tensors
        name, call = "cuBLAS sdot (torch.dot)", lambda: torch.dot(x, y)
    else:
        alpha, a, x, beta, y = tensors
        out = torch.empty_like(y)
        name = "cuBLAS sgemv (torch.addmv)"
        call = lambda: torch.addmv(y, a, x, beta=beta, alpha=alpha, out=out)  # noqa: E731

    got = call()
    torch.cuda.synchronize()
    checked = check(case, got.get() if hasattr(got, "get") else got.cpu().numpy())
    for _ in range(warmup):
        call()
    marks = [(events(), events()) for _ in range(repeats)]
    for start, end in marks:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return {"implementation": name, "check": checked,
            **_median_of([elapsed(start, end) for start, end in marks])}


def _cupy():
    try:
        import cupy
        import cupy.cublas  # noqa: F401

        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception:  # not installed, or built for another CUDA: fall back to PyTorch
        return None


def numpy_baseline(case: Case, repeats: int, warmup: int) -> dict:
    """numpy on the host, each call timed with ``time.perf_counter``; outputs preallocated where
    numpy allows it, so that the baseline does not time page faults of fresh arrays."""
    if operation(case.kernel) == "scal":
        alpha, x = case.args
        out = np.empty_like(x)
        name, call = "numpy np.multiply(alpha, x, out=)", lambda: np.multiply(np.float32(alpha), x, out=out)
    elif operation(case.kernel) == "asum":
        (x,) = case.args
        scratch = np.empty_like(x)
        name, call = "numpy np.abs(x, out=).sum()", lambda: np.abs(x, out=scratch).sum()
    elif operation(case.kernel) == "dot":
        x, y = case.args
        name, call = "numpy np.dot (BLAS sdot)", lambda: np.dot(x, y)
    else:
        alpha, a, x, beta, y = case.args
        name = "numpy alpha * (A @ x) + beta * y (BLAS sgemv)"
        call = lambda: np.float32(alpha) * (a @ x) + np.float32(beta) * y  # noqa: E731
    checked = check(case, call())
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"implementation": name, "check": checked, **_median_of(times)}


def torch_cuda_available() -> str | None:
    """None when PyTorch sees a CUDA device, else why not."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    return None


# ----------------------------------------------------------------------------- the whole run

def run_case(case: Case, context, kind: str, settings: dict) -> dict:
    repeats, warmup = settings["repeats"], settings["warmup"]
    record = {"kernel": case.kernel, "size": case.size, "label": case.label,
              "bytes_moved": case.bytes_moved}
    try:
        record["fsmooth"] = measure_fsmooth(case, context, repeats, warmup)
    except Exception as err:  # report it and go on with the other kernels
        record["fsmooth"] = {"implementation": "fsmooth OpenCL", "error": _one_line(err),
                             "check": {"ok": False, "note": "did not run"}}
    why_not = torch_cuda_available() if kind == "gpu" else None
    if why_not:
        record["baseline"] = {"implementation": "cuBLAS", "error": why_not, "check": {"ok": None}}
    else:
        try:
            measure = cuda_baseline if kind == "gpu" else numpy_baseline
            record["baseline"] = measure(case, repeats, warmup)
        except Exception as err:
            record["baseline"] = {"implementation": "baseline", "error": _one_line(err),
                                  "check": {"ok": None}}
    for side in ("fsmooth", "baseline"):
        median = record[side].get("median_s")
        if median:
            record[side]["gb_per_s"] = case.bytes_moved / median / 1e9
            record[side]["median_ms"] = median * 1e3
    if record["fsmooth"].get("median_s") and record["baseline"].get("median_s"):
        record["speed_vs_baseline"] = record["baseline"]["median_s"] / record["fsmooth"]["median_s"]
    return record


def _one_line(err: Exception) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()
    return text[0] if text else type(err).__name__


def cases_of(settings: dict) -> list[tuple[str, int]]:
    return [(k, n) for k in settings.get("kernels", KERNEL_NAMES)
            for n in (settings["matrix_sizes"] if operation(k) == "gemv" else settings["vector_sizes"])]


def software_facts() -> dict:
    import pyopencl

    facts = {"pyopencl": pyopencl.VERSION_TEXT, "python": platform.python_version()}
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            facts["cuda_device"] = torch.cuda.get_device_name(0)
    except ImportError:
        facts["torch"] = "not installed"
    cupy = _cupy()
    facts["cupy"] = cupy.__version__ if cupy is not None else "not usable"
    return facts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.blas", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK['vector_sizes']} floats, gemv {QUICK['matrix_sizes']}², "
                             f"{QUICK['repeats']} repeats")
    parser.add_argument("--device", choices=("gpu", "cpu", "any"), default="any",
                        help="gpu: a real GPU, against cuBLAS; cpu: a CPU device (Intel's runtime, else PoCL's), "
                             "against numpy; "
                             "any (default): PYOPENCL_CTX or fsmooth's choice (a GPU first)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"timed calls per measurement (default {FULL['repeats']}, {QUICK['repeats']} "
                             "with --quick)")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR,
                        help="where blas_<kind>.json and blas_<kind>.png go (default: benchmarks/results)")
    parser.add_argument("--report", action="store_true",
                        help="rewrite the BLAS section of benchmarks/RESULTS.md from benchmarks/results/"
                             "blas_*.json (done anyway by a full run into benchmarks/results)")
    parser.add_argument("--kernels", default=",".join(KERNEL_NAMES),
                        help=f"the kernels to run, comma-separated (default: all, {','.join(KERNEL_NAMES)})")
    args = parser.parse_args(argv)
    kernels = tuple(k.strip() for k in args.kernels.split(",") if k.strip())
    unknown = sorted(set(kernels) - set(KERNEL_NAMES))
    if unknown:
        parser.error(f"unknown kernels {', '.join(unknown)}; known: {', '.join(KERNEL_NAMES)}")

    if args.report:  # the section from the JSON files already there: nothing is run
        blas_report.write_section(REPORT, RESULTS_DIR)
        print(f"rewrote the BLAS section of {REPORT}")
        return 0

    settings = dict(QUICK if args.quick else FULL, quick=args.quick, kernels=kernels)
    if os.environ.get("FSMOOTH_OPENCL_REDUCTION"):
        settings["opencl_reduction"] = os.environ["FSMOOTH_OPENCL_REDUCTION"]
    if args.repeats is not None:
        if args.repeats < 1:
            parser.error("--repeats must be at least 1")
        settings["repeats"] = args.repeats

    try:
        context = choose_context(args.device)
    except NoDeviceError as err:
        print(f"blas: {err}", file=sys.stderr)
        return 3
    device = device_facts(context)
    kind = device["kind"]
    print(f"blas: {device['name']} ({device['platform']}, driver {device['driver']}): {kind}; "
          f"baseline {'cuBLAS' if kind == 'gpu' else 'numpy'}; {settings['repeats']} timed calls each",
          flush=True)

    machine = micro_report.machine()
    machine.update(software_facts())
    rng = np.random.default_rng(SEED)
    records = []
    for kernel, size in cases_of(settings):
        start = time.perf_counter()
        case = make_case(kernel, size, rng)
        record = run_case(case, context, kind, settings)
        records.append(record)
        del case
        print(f"  {kernel} {record['label']}: {blas_report.one_line(record)} "
              f"({time.perf_counter() - start:.1f} s)", flush=True)

    results = {"device": device, "machine": machine, "settings": settings,
               "command": "python -m benchmarks.blas " + " ".join(argv if argv is not None else sys.argv[1:]),
               "baseline": "cuBLAS" if kind == "gpu" else "numpy", "records": records}
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"blas_{kind}.json"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    plot_path = blas_report.plot(results, args.out / f"blas_{kind}.png")
    print(blas_report.text_table(results))
    print(f"wrote {json_path}" + (f" and {plot_path}" if plot_path else " (no plot: matplotlib is missing)"))

    into_results = args.out.resolve() == RESULTS_DIR.resolve()
    if not args.quick and into_results:
        blas_report.write_section(REPORT, RESULTS_DIR)
        print(f"rewrote the BLAS section of {REPORT}")
    elif not args.quick:
        print(f"to report it: copy {json_path.name} (and the .png) into {RESULTS_DIR.relative_to(REPO_ROOT)}, "
              f"then run python -m benchmarks.blas_report")

    failed = [f"{r['kernel']} {r['label']} ({side}: {r[side]['check'].get('note') or r[side].get('error')})"
              for r in records for side in ("fsmooth", "baseline") if r[side]["check"].get("ok") is False]
    for failure in failed:
        print(f"WRONG RESULT: {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
