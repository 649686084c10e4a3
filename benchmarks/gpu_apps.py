"""Application kernels written without strategy annotations, through fsmooth's OpenCL, against
PyTorch (issue 12's benchmark):

    python -m benchmarks.gpu_apps --device gpu            # the full run on an NVIDIA GPU
    python -m benchmarks.gpu_apps --device gpu --quick    # one size per kernel, < ~8 min on an H200
    python -m benchmarks.gpu_apps --device cpu --preset small   # a CPU OpenCL device, small sizes
    python -m benchmarks.gpu_apps --preset tiny           # smoke run (tests/test_benchmarks_smoke.py)

The kernels (tests/corpus/: ``adbench_*.py``, ``image.py``, ``ml.py``, ``vision.py``; none has a
strategy annotation, so the OpenCL is whatever fsmooth's default strategy makes of them):
ADBench's GMM objective (n = 10k for some of ADBench's d and K; ``--gmm-2.5m`` adds n = 2.5M),
Hand (the simple objective) and LSTM in float64 as in ADBench; its BA reprojection and weight
errors at the sizes of ba1, ba5, ba10, ba17 and ba20 (inputs made as ADBench's reader makes them,
benchmarks/adbench_impls.py), 3×3 and 5×5 box and Gaussian blurs and a Sobel gradient magnitude on
4096×4096 images, and a softmax over the rows of an 8192×8192 matrix, in float32 and float64.

Baselines, in the same process and on the same data: on a GPU, PyTorch eager and
``torch.compile`` (default mode, ``dynamic=False``) of the natural PyTorch code of the same
computation (benchmarks/adbench_torch.py, benchmarks/gpu_apps_torch.py) on CUDA; on a CPU
device, numpy (the oracle's own code, in the case's dtype) and PyTorch on the CPU.  ``--baselines``
picks others (``torch.compile`` on the CPU, say).

Every implementation's first result is checked against the numpy oracle, computed in float64
(|error| <= rtol × the largest |value| of the oracle's result, per component; rtol 1e-9 for
float64, 1e-4 for float32) before it is timed.  Times: fsmooth's is the device time of one call
from the OpenCL profiling events (the sum of its launches, ``OpenCLExecutable.run_timed``), inputs
and results on the device; PyTorch's on CUDA is one call between two CUDA events, on the CPU (and
numpy's) ``time.perf_counter`` around one call.  Each is the median of ``repeats`` calls (100;
50 with --quick) after warm-up calls, except where one call takes so long that they would not
fit in ``budget_s`` seconds: then fewer (at least 3), and the table says how many.  A case
whose time, extrapolated from the same implementation's previous size (linear in the work), would
exceed ``max_call_s`` per call is not run, and says so; so are the cases left when the run reaches
its time limit (``--time-limit-min``; 7.5 min with --quick).  The JSON is rewritten after every
case (``"complete": false`` until the end), so that a crash loses only the case it was in.  A run
too long for one command goes in parts (``--kernels``), each part after the first given the JSON
of the parts before it (``--merge-with``), whose records it keeps.  A kernel that fsmooth fails to compile or
run is recorded with its error, never skipped silently.

``speed`` is the baseline's median time over fsmooth's (1.0: as fast; > 1: fsmooth is faster);
the issue's target is speed >= 1.0 against ``torch.compile`` on every kernel and size.  Writes
``OUT/gpu_apps.json`` (``gpu_apps_<kind>.json`` for a CPU device), a plot beside it, and, for a
run into benchmarks/results or with ``--report``, the "GPU applications" section of
benchmarks/RESULTS.md (``python -m benchmarks.gpu_apps_report`` does only that).  Exit status 1 if
a result check failed, 3 if no OpenCL device of the asked kind builds kernels.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/gpu_apps.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks import adbench_impls, gpu_apps_report, micro_report  # noqa: E402
from benchmarks.blas import NoDeviceError, choose_context, device_facts, software_facts  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
REPORT = REPO_ROOT / "benchmarks" / "RESULTS.md"

if str(REPO_ROOT / "tests") not in sys.path:  # the kernels live in the test corpus
    sys.path.insert(0, str(REPO_ROOT / "tests"))

from corpus import ba_f32, image, ml, vision  # noqa: E402

SEED = 20261125
RTOL = {"float64": 1e-9, "float32": 1e-4}
MIN_REPEATS = 3  # of a call too slow for ``repeats`` within the budget

# ADBench's BA files ba1, ba5, ba10, ba17, ba20: (cameras n, points m, observations p)
BA_SIZES = {1: (49, 7776, 31843), 5: (257, 65132, 225911), 10: (1197, 126327, 563734),
            17: (1778, 993923, 5001946), 20: (13682, 4456117, 2987644)}

PRESETS = {
    # gmm: (d, K, n); ba: ADBench file numbers or (n, m, p); hand: correspondences;
    # lstm: (layers, characters); image: side of the square image; softmax: side of the matrix
    "full": dict(gmm=((2, 5, 10_000), (10, 25, 10_000), (20, 50, 10_000), (64, 200, 10_000)),
                 ba=(1, 5, 10, 17, 20), hand=(100, 1600, 100_000), lstm=((2, 1024), (4, 4096)),
                 image=4096, softmax=8192, repeats=100, warmup=10, budget_s=30.0, max_call_s=10.0,
                 time_limit_s=None),
    "quick": dict(gmm=((10, 25, 10_000),), ba=(1, 17), hand=(100_000,), lstm=((2, 1024),),
                  image=4096, softmax=8192, repeats=50, warmup=3, budget_s=8.0, max_call_s=10.0,
                  time_limit_s=450.0),
    "small": dict(gmm=((2, 5, 1000), (10, 25, 1000)), ba=(1,), hand=(100,), lstm=((2, 64),),
                  image=512, softmax=1024, repeats=50, warmup=2, budget_s=3.0, max_call_s=5.0,
                  time_limit_s=None),
    "tiny": dict(gmm=((2, 3, 50),), ba=((5, 20, 64),), hand=(10,), lstm=((1, 4),),
                 image=16, softmax=16, repeats=3, warmup=1, budget_s=0.5, max_call_s=5.0,
                 time_limit_s=None),
}
GMM_LARGE = ((2, 5, 2_500_000), (10, 25, 2_500_000))  # --gmm-2.5m: ADBench's 2.5M points
BASELINES = {"gpu": ("torch", "torch.compile"), "cpu": ("numpy", "torch"), "simulator": ("numpy",)}
IMPLEMENTATION_NAMES = {"fsmooth": "fsmooth OpenCL", "torch": "PyTorch eager",
                        "torch.compile": "torch.compile", "numpy": "numpy"}


# ----------------------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    """One kernel at one size and dtype: how to make its inputs, and what runs it."""

    kernel: str  # the family: gmm, ba, hand, lstm, box_blur3, ..., softmax_rows
    label: str  # the size, as the table shows it
    dtype: str  # float32 or float64
    work: int  # a measure of the work, for extrapolating a time to the next size
    make_args: Callable  # rng -> the fsmooth kernel's arguments (numpy arrays, Python scalars)
    fsmooth: object  # the fs.Kernel
    numpy_fn: Callable  # numpy on the arguments: the baseline, and in float64 the oracle
    torch_fn: Callable  # (device, dtype, compiled: bool) -> the function of the tensors timed

    @property
    def key(self) -> str:
        return f"{self.kernel} {self.label} {self.dtype}"


def _adbench_torch(objective: str):
    def make(device, dtype, compiled):
        from benchmarks import adbench_torch

        fn = getattr(adbench_torch, f"{objective}_objective")
        if not compiled:
            return fn
        import torch

        if objective == "lstm":  # compiled step by step: the whole objective unrolls c steps
            step = torch.compile(adbench_torch.lstm_step, dynamic=False)
            return lambda *args: fn(*args, step=step)
        return torch.compile(fn, dynamic=False)
    return make


def _stencil_torch(name: str):
    def make(device, dtype, compiled):
        from benchmarks import gpu_apps_torch

        fn = gpu_apps_torch.stencil(name, device, dtype)
        if not compiled:
            return fn
        import torch

        return torch.compile(fn, dynamic=False)
    return make


def _count(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else (f"{n // 1000}k" if n % 1000 == 0 else str(n))


def _floats_as(args: tuple, dtype: str) -> tuple:
    """The floating arrays of ``args`` in ``dtype`` (index arrays and scalars as they are)."""
    return tuple(a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args)


def adbench_cases(settings: dict) -> list[Case]:
    ai = adbench_impls
    cases = []
    for d, k, n in settings["gmm"]:
        cases.append(Case("gmm", f"d={d} K={k} n={_count(n)}", "float64", n * k * d * (d + 1) // 2,
                          lambda rng, d=d, k=k, n=n: ai.gmm_inputs(rng, d, k, n), ai.KERNELS["gmm"],
                          ai.ORACLES["gmm"], _adbench_torch("gmm")))
    for ba in settings["ba"]:
        n, m, p = BA_SIZES[ba] if isinstance(ba, int) else ba
        label = f"ba{ba} (p={p:,})" if isinstance(ba, int) else f"n={n} m={m} p={p}"
        for dtype, kernel in (("float32", ba_f32.ba_objective_f32), ("float64", ai.KERNELS["ba"])):
            cases.append(Case("ba", label, dtype, p, lambda rng, n=n, m=m, p=p, t=dtype: _floats_as(
                ai.ba_inputs(rng, n, m, p), t), kernel, ai.ORACLES["ba"], _adbench_torch("ba")))
    for c in settings["hand"]:
        cases.append(Case("hand", f"{c:,} correspondences", "float64", c,
                          lambda rng, c=c: ai.hand_inputs(rng, c), ai.KERNELS["hand"], ai.ORACLES["hand"],
                          _adbench_torch("hand")))
    for layers, chars in settings["lstm"]:
        cases.append(Case("lstm", f"l={layers} c={chars}", "float64", layers * chars,
                          lambda rng, l=layers, c=chars: ai.lstm_inputs(rng, l, c), ai.KERNELS["lstm"],
                          ai.ORACLES["lstm"], _adbench_torch("lstm")))
    return cases


# name: (float64 kernel, float32 kernel, numpy in the data's dtype)
VISION = {
    "box_blur3": (image.box_blur3, vision.box_blur3_f32, image.np_box_blur3),
    "box_blur5": (vision.box_blur5, vision.box_blur5_f32, vision.np_box_blur5),
    "gaussian_blur3": (image.gaussian_blur3, vision.gaussian_blur3_f32, image.np_gaussian_blur3),
    "gaussian_blur5": (vision.gaussian_blur5, vision.gaussian_blur5_f32, vision.np_gaussian_blur5),
    "sobel_magnitude": (vision.sobel_magnitude, vision.sobel_magnitude_f32, vision.np_sobel_magnitude),
    "softmax_rows": (ml.softmax_rows, vision.softmax_rows_f32, ml.np_softmax_rows),
}


def vision_cases(settings: dict) -> list[Case]:
    cases = []
    for name, (double, single, numpy_fn) in VISION.items():
        side = settings["softmax" if name == "softmax_rows" else "image"]
        for dtype, kernel in (("float32", single), ("float64", double)):
            if name == "softmax_rows":
                make = (lambda rng, s=side, t=dtype: rng.normal(0.0, 4.0, (s, s)).astype(t))
            else:
                make = (lambda rng, s=side, t=dtype: rng.random((s, s)).astype(t))
            cases.append(Case(name, f"{side}²", dtype, side * side, lambda rng, make=make: (make(rng),),
                              kernel, numpy_fn, _stencil_torch(name)))
    return cases


def cases_of(settings: dict) -> list[Case]:
    return adbench_cases(settings) + vision_cases(settings)


# ----------------------------------------------------------------------------- checks

def _float64(value):
    if isinstance(value, tuple):
        return tuple(_float64(v) for v in value)
    floating = isinstance(value, np.ndarray) and value.dtype.kind == "f"
    return value.astype(np.float64) if floating else value


def oracle(case: Case, args: tuple):
    """The numpy code of the case on float64 copies of the arguments."""
    return case.numpy_fn(*_float64(args))


def check(got, expected, rtol: float) -> dict:
    """Whether ``got`` is ``expected`` within ``rtol`` × the largest |value| of each component."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple) or len(got) != len(expected):
            return {"ok": False, "note": f"a {type(got).__name__} where a tuple of {len(expected)} was expected"}
        parts = [check(g, e, rtol) for g, e in zip(got, expected)]
        bad = [p for p in parts if not p["ok"]]
        return bad[0] if bad else {"ok": True, "rtol": rtol,
                                   "max_error_over_scale": max(p["max_error_over_scale"] for p in parts)}
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return {"ok": False, "note": f"shape {got.shape}, expected {expected.shape}"}
    if not expected.size:
        return {"ok": True, "rtol": rtol, "max_error_over_scale": 0.0}
    scale = max(float(np.max(np.abs(expected))), np.finfo(np.float64).tiny)
    worst = float(np.max(np.abs(got - expected))) / scale
    ok = bool(np.all(np.isfinite(got))) and worst <= rtol
    return {"ok": ok, "rtol": rtol, "max_error_over_scale": worst,
            **({} if ok else {"note": f"error {worst:.3g} × the largest value > {rtol:g}"})}


def _as_numpy(value):
    """A result in the oracle's form: numpy arrays, Python floats, tuples of these."""
    if isinstance(value, tuple) or isinstance(value, list):
        return tuple(_as_numpy(v) for v in value)
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
        return value.numpy() if value.dim() else float(value)
    if hasattr(value, "get"):  # a pyopencl array
        return value.get()
    return value


# ----------------------------------------------------------------------------- timing

def repeats_within(seconds_per_call: float, settings: dict) -> int:
    """``repeats`` calls, or fewer (at least MIN_REPEATS) where they would not fit in the budget."""
    if seconds_per_call <= 0:
        return settings["repeats"]
    fit = int(settings["budget_s"] / seconds_per_call)
    return max(MIN_REPEATS, min(settings["repeats"], fit))


def warmups_for(repeats: int, settings: dict) -> int:
    """Warm-up calls before ``repeats`` timed ones: fewer where the calls are slow (the checked
    call before them has warmed up too)."""
    return min(settings["warmup"], max(1, repeats // 10))


def _summary(times: list[float], first_call_s: float | None = None) -> dict:
    out = {"median_s": statistics.median(times), "median_ms": statistics.median(times) * 1e3,
           "runs": len(times), "times_s": times}
    if first_call_s is not None:
        out["first_call_s"] = first_call_s
    return out


def _one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()
    return text[0][:300] if text else type(err).__name__


def measure_fsmooth(case: Case, args: tuple, expected, context, settings: dict) -> dict:
    """Compile through OpenCL (a failure is the record), one checked call, then the timed ones."""
    start = time.perf_counter()
    try:
        executable = case.fsmooth.opencl_executable(context)
    except Exception as err:  # CompileError, or the device's build error: recorded, not hidden
        return {"status": "compile failed", "note": _one_line(err), "error": f"{type(err).__name__}: {err}"}
    compile_s = time.perf_counter() - start
    record = {"launches": len(executable.artifact.launches), "compile_s": compile_s}
    try:
        on_device = executable.to_device(*args)
        record["check"] = check(_as_numpy(executable.call(*on_device, device_result=False)), expected,
                                RTOL[case.dtype])
        # the launches that ran: of a launch and its fallback (its local arrays in global memory,
        # where they exceed the device's local memory), one
        ran = [p.kernel for p in executable.last_profile]
        record["launches"] = len(ran)
        fallbacks = {launch.kernel for launch in executable.artifact.launches if launch.fallback}
        record["fallbacks"] = sum(kernel in fallbacks for kernel in ran)
        if not record["check"]["ok"]:
            return {**record, "status": "wrong result", "note": record["check"]["note"]}
        one = sum(p.seconds for p in executable.last_profile)
        repeats = repeats_within(one, settings)
        timing = executable.run_timed(on_device, repeats=repeats, warmup=warmups_for(repeats, settings))
    except Exception as err:  # a run-time failure (out of memory, a failed check in the kernel)
        return {**record, "status": "run failed", "note": _one_line(err)}
    return {**record, "status": "ok", **_summary(list(timing.times))}


def _torch_device(kind: str):
    import torch

    return torch.device("cuda" if kind == "gpu" else "cpu")


def _tensors(args: tuple, device) -> tuple:
    import torch

    return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device) if isinstance(a, np.ndarray) else a
                 for a in args)


def measure_torch(case: Case, args: tuple, expected, kind: str, compiled: bool, settings: dict) -> dict:
    """PyTorch eager or compiled on the inputs copied to its device once: one checked call (for
    ``torch.compile``, the one that compiles), then warm-up and timed calls."""
    import torch

    device = _torch_device(kind)
    cuda = device.type == "cuda"
    try:
        tensors = _tensors(args, device)
        fn = case.torch_fn(device, getattr(torch, case.dtype), compiled)
        start = time.perf_counter()
        got = fn(*tensors)
        if cuda:
            torch.cuda.synchronize()
        first_call_s = time.perf_counter() - start
        record = {"check": check(_as_numpy(got), expected, RTOL[case.dtype])}
        del got
        if not record["check"]["ok"]:
            return {**record, "status": "wrong result", "note": record["check"]["note"]}
        one = _time_torch(fn, tensors, 1, cuda)[0]
        repeats = repeats_within(one, settings)
        _time_torch(fn, tensors, warmups_for(repeats, settings), cuda)
        times = _time_torch(fn, tensors, repeats, cuda)
    except Exception as err:  # out of memory, a compile failure of the baseline: recorded
        return {"status": "run failed", "note": _one_line(err)}
    finally:
        if cuda:
            torch.cuda.empty_cache()
    return {**record, "status": "ok", **_summary(times, first_call_s)}


def _time_torch(fn, tensors, calls: int, cuda: bool) -> list[float]:
    """Seconds of each of ``calls`` calls: between CUDA events on CUDA, else perf_counter."""
    import torch

    if not cuda:
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            fn(*tensors)
            times.append(time.perf_counter() - start)
        return times
    marks = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for start, end in marks:
        start.record()
        fn(*tensors)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e-3 for start, end in marks]


def measure_numpy(case: Case, args: tuple, expected, settings: dict) -> dict:
    try:
        record = {"check": check(_as_numpy(case.numpy_fn(*args)), expected, RTOL[case.dtype])}
        if not record["check"]["ok"]:
            return {**record, "status": "wrong result", "note": record["check"]["note"]}
        times = []
        for _ in range(2):  # the checked call warmed up too
            start = time.perf_counter()
            case.numpy_fn(*args)
            times.append(time.perf_counter() - start)
        repeats = repeats_within(min(times), settings)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            case.numpy_fn(*args)
            times.append(time.perf_counter() - start)
    except Exception as err:
        return {"status": "run failed", "note": _one_line(err)}
    return {**record, "status": "ok", **_summary(times)}


# ----------------------------------------------------------------------------- the whole run

class Extrapolation:
    """The last measured (work, seconds) per implementation, kernel and dtype: a case whose
    extrapolated time per call exceeds ``max_call_s`` is not run (a one-work-item kernel can take
    minutes a call on a GPU, and an OpenCL launch cannot be stopped)."""

    def __init__(self, max_call_s: float):
        self.max_call_s = max_call_s
        self.last: dict = {}

    def too_slow(self, impl: str, case: Case) -> dict | None:
        last = self.last.get((impl, case.kernel, case.dtype))
        if last is None:
            return None
        work, seconds = last
        predicted = seconds * case.work / work
        if predicted <= self.max_call_s:
            return None
        return {"status": "not run", "predicted_s": predicted,
                "note": f"{predicted:.3g} s a call extrapolated from {seconds * 1e3:.3g} ms at the "
                        f"previous size (limit {self.max_call_s:g} s)"}

    def record(self, impl: str, case: Case, result: dict) -> None:
        if result.get("status") == "ok":
            self.last[(impl, case.kernel, case.dtype)] = (case.work, result["median_s"])


def run_case(case: Case, context, kind: str, baselines: tuple, settings: dict, extrapolation: Extrapolation,
             progress) -> dict:
    rng = np.random.default_rng([SEED, *map(ord, case.key)])
    args = case.make_args(rng)
    expected = oracle(case, args)
    record = {"kernel": case.kernel, "size": case.label, "dtype": case.dtype, "work": case.work,
              "implementations": {}}
    for impl in ("fsmooth", *baselines):
        progress(f"{case.key}: {impl}")
        result = extrapolation.too_slow(impl, case)
        if result is None:
            if impl == "fsmooth":
                result = measure_fsmooth(case, args, expected, context, settings)
            elif impl == "numpy":
                result = measure_numpy(case, args, expected, settings)
            else:
                result = measure_torch(case, args, expected, kind, impl == "torch.compile", settings)
        result["implementation"] = IMPLEMENTATION_NAMES[impl]
        extrapolation.record(impl, case, result)
        record["implementations"][impl] = result
    fsmooth_s = record["implementations"]["fsmooth"].get("median_s")
    record["speed"] = {impl: record["implementations"][impl]["median_s"] / fsmooth_s for impl in baselines
                       if fsmooth_s and record["implementations"][impl].get("median_s")}
    return record


def over_time(case: Case, baselines: tuple, limit_s: float) -> dict:
    """The record of a case left out because the run reached its time limit."""
    note = f"the run reached its time limit of {limit_s / 60:g} min before this case"
    return {"kernel": case.kernel, "size": case.label, "dtype": case.dtype, "work": case.work, "speed": {},
            "implementations": {impl: {"status": "not run", "note": note, "implementation": IMPLEMENTATION_NAMES[impl]}
                                for impl in ("fsmooth", *baselines)}}


def merged(results: dict, earlier: dict | None) -> dict:
    """``results`` with the records of an earlier part of the run for the cases it has not
    measured; the wall times add up and the commands are both kept."""
    if earlier is None:
        return results
    measured = {(r["kernel"], r["size"], r["dtype"]) for r in results["records"]}
    kept = [r for r in earlier["records"] if (r["kernel"], r["size"], r["dtype"]) not in measured]
    return {**results, "records": kept + results["records"], "wall_s": earlier["wall_s"] + results["wall_s"],
            "command": f"{earlier['command']}; then {results['command']}",
            "complete": results["complete"] and earlier.get("complete", True)}


class Progress:
    """A tqdm bar over the measurements when tqdm is installed (the GPU machine may lack it),
    else a line per case."""

    def __init__(self, total: int):
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        self.bar = tqdm(total=total, unit="measurement", dynamic_ncols=True) if tqdm else None

    def __call__(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(what[:70])
            self.bar.update(1)
        else:
            print(f"  {what}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _configure_torch() -> None:
    """float32 as IEEE single precision, as fsmooth's Float is (no TF32 in cuDNN's convolutions
    or cuBLAS's products, which PyTorch allows by default: their results miss the float32
    tolerance), and room for one compiled graph per shape and dtype of each function
    (``dynamic=False``)."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        import torch._dynamo
    except ImportError:
        return
    config = torch._dynamo.config
    for limit in ("cache_size_limit", "recompile_limit"):
        if hasattr(config, limit):
            setattr(config, limit, 256)
    if hasattr(config, "accumulated_cache_size_limit"):
        config.accumulated_cache_size_limit = 4096


def _nvidia_smi() -> str | None:
    import subprocess

    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def output_name(kind: str) -> str:
    return "gpu_apps" if kind == "gpu" else f"gpu_apps_{kind}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_apps", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("gpu", "cpu", "any"), default="any",
                        help="gpu: a real GPU (baselines PyTorch eager and torch.compile on CUDA); cpu: a CPU "
                             "OpenCL device (baselines numpy and PyTorch CPU); any (default): PYOPENCL_CTX or "
                             "fsmooth's choice")
    parser.add_argument("--preset", choices=tuple(PRESETS), default="full",
                        help="sizes and repeats: full (default), quick (one size per kernel), small (a CPU "
                             "device), tiny (smoke test)")
    parser.add_argument("--quick", action="store_true", help="the same as --preset quick")
    parser.add_argument("--gmm-2.5m", dest="gmm_large", action="store_true",
                        help=f"add GMM at n = 2.5M (d, K in {[(d, k) for d, k, _ in GMM_LARGE]}); large")
    parser.add_argument("--kernels", default="",
                        help="comma-separated kernel names to run (default: all): gmm, ba, hand, lstm, "
                             + ", ".join(VISION))
    parser.add_argument("--baselines", default="",
                        help="comma-separated, of numpy, torch, torch.compile (default: torch,torch.compile on "
                             "a GPU, numpy,torch on a CPU device)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="threads of PyTorch's CPU backend (default: PyTorch's own choice); on a loaded "
                             "machine 1 keeps its thread pool from waiting a scheduler slice per operation")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per measurement")
    parser.add_argument("--time-limit-min", type=float, default=None,
                        help="cases not yet begun when the run has lasted this long are recorded as not run "
                             "(default: 7.5 with --quick, none otherwise)")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR,
                        help="where the JSON and the plot go (default: benchmarks/results)")
    parser.add_argument("--merge-with", type=pathlib.Path, default=None,
                        help="a gpu_apps JSON of an earlier part of the run (other --kernels, the same device): "
                             "its records are kept, after this run's, for the cases this run does not measure")
    parser.add_argument("--report", action="store_true",
                        help="rewrite the section of benchmarks/RESULTS.md (done anyway by a run into "
                             "benchmarks/results that is not the tiny preset)")
    args = parser.parse_args(argv)

    preset = "quick" if args.quick else args.preset
    settings = dict(PRESETS[preset], preset=preset, gmm_large=args.gmm_large)
    if args.gmm_large:
        settings["gmm"] = tuple(settings["gmm"]) + GMM_LARGE
    if args.repeats is not None:
        if args.repeats < 1:
            parser.error("--repeats must be at least 1")
        settings["repeats"] = args.repeats
    if args.time_limit_min is not None:
        settings["time_limit_s"] = args.time_limit_min * 60

    try:
        context = choose_context(args.device)
    except NoDeviceError as err:
        print(f"gpu_apps: {err}", file=sys.stderr)
        return 3
    device = device_facts(context)
    kind = device["kind"]
    baselines = tuple(b for b in args.baselines.split(",") if b) or BASELINES[kind]
    unknown = [b for b in baselines if b not in IMPLEMENTATION_NAMES or b == "fsmooth"]
    if unknown:
        parser.error(f"unknown baselines {unknown}: choose among numpy, torch, torch.compile")
    if any(b.startswith("torch") for b in baselines):
        try:
            import torch
        except ImportError:
            print("gpu_apps: PyTorch is not installed: run with --baselines numpy", file=sys.stderr)
            return 3
        if kind == "gpu" and not torch.cuda.is_available():
            print("gpu_apps: PyTorch sees no CUDA device", file=sys.stderr)
            return 3
        _configure_torch()
        if args.torch_threads is not None:
            torch.set_num_threads(args.torch_threads)
        settings["torch_threads"] = torch.get_num_threads()
    settings["baselines"] = list(baselines)

    cases = cases_of(settings)
    if args.kernels:
        wanted = set(args.kernels.split(","))
        unknown = wanted - {c.kernel for c in cases}
        if unknown:
            parser.error(f"unknown kernels {sorted(unknown)}")
        cases = [c for c in cases if c.kernel in wanted]
    print(f"gpu_apps: {device['name']} ({device['platform']}, driver {device['driver']}): {kind}; "
          f"{len(cases)} cases, fsmooth against {', '.join(baselines)}; preset {preset}", flush=True)

    machine = micro_report.machine()
    machine.update(software_facts())
    smi = _nvidia_smi() if kind == "gpu" else None
    if smi:
        machine["nvidia_smi"] = smi
    earlier = json.loads(args.merge_with.read_text()) if args.merge_with else None
    if earlier is not None and earlier["device"]["name"] != device["name"]:
        parser.error(f"--merge-with {args.merge_with} was measured on {earlier['device']['name']}, not {device['name']}")
    started = time.perf_counter()
    extrapolation = Extrapolation(settings["max_call_s"])
    progress = Progress(len(cases) * (1 + len(baselines)))
    results = {"device": device, "machine": machine, "settings": settings, "kind": kind,
               "command": "python -m benchmarks.gpu_apps " + " ".join(argv if argv is not None else sys.argv[1:]),
               "complete": False, "wall_s": 0.0, "records": []}
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{output_name(kind)}.json"
    try:
        for case in cases:
            elapsed = time.perf_counter() - started
            if settings["time_limit_s"] is not None and elapsed > settings["time_limit_s"]:
                record = over_time(case, baselines, settings["time_limit_s"])
                for impl in record["implementations"]:
                    progress(f"{case.key}: {impl} (over the time limit)")
            else:
                record = run_case(case, context, kind, baselines, settings, extrapolation, progress)
            results["records"].append(record)
            # written after every case: a crash of a driver loses only the case it was in
            results["wall_s"] = time.perf_counter() - started
            json_path.write_text(json.dumps(merged(results, earlier), indent=1) + "\n")
    finally:
        progress.close()
    results["wall_s"] = time.perf_counter() - started
    results["complete"] = True
    results = merged(results, earlier)
    records, wall_s = results["records"], results["wall_s"]
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    plot_path = gpu_apps_report.plot(results, args.out / f"{output_name(kind)}.png")
    print(gpu_apps_report.text_table(results))
    print(f"{len(records)} cases in {wall_s:.0f} s; wrote {json_path}"
          + (f" and {plot_path}" if plot_path else " (no plot: matplotlib is missing)"))
    into_results = args.out.resolve() == RESULTS_DIR.resolve()
    if args.report or (into_results and preset != "tiny"):
        gpu_apps_report.write_section(REPORT, RESULTS_DIR)
        print(f"rewrote the GPU applications section of {REPORT}")

    for problem in gpu_apps_report.problems(results):
        print(problem, file=sys.stderr)
    wrong = [r for r in records for impl in r["implementations"].values() if impl["status"] == "wrong result"]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
