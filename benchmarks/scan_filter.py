"""fsmooth's scan and filter (issue 14) on the CPU against numpy, and on OpenCL against torch.

    python -m benchmarks.scan_filter            # 1 Mi and 16 Mi doubles
    python -m benchmarks.scan_filter --quick    # smoke run: 4 Ki and 64 Ki doubles, few repetitions
    python -m benchmarks.scan_filter --opencl [--sizes 16,128] [--repeats 50]
                                                # OpenCL: floats, sizes in Mi (GPU: 16 and 128 Mi)

OpenCL (``--opencl``): the parallel scan and filter (``dpia.scan_opencl``) of Float vectors
drawn from [-1, 1), on the device ``kernel.opencl`` picks (a GPU, else a CPU device), against
``torch.cumsum`` and ``torch.masked_select(x, x > 0)`` on CUDA where ``torch.cuda`` is available
(and ``cupy.cumsum``, ``x[x > 0]`` where CuPy imports), else numpy.  Inputs resident on the
device; fsmooth's time is the device time of one call from the OpenCL profiling events (the
sum of its launches: the single pass's one, or reduce, partials, down where the device lacks
64-bit atomics), the CUDA
baselines' one call between two CUDA events, numpy's ``time.perf_counter``; each the median of
``--repeats`` calls (≥ 50) after warm-up calls.  Every result is checked first (the filter
exactly, the scan within float32 rounding of the float64 ``np.cumsum``).  Writes
``results/scan_filter_opencl.json`` and ``.png`` and refreshes its own section of RESULTS.md.

Three computations over a vector of doubles drawn uniformly from [-1, 1):

  - cumsum: ``fs.iscan(lambda s, i: s + v[i], 0.0, length(v))`` against ``np.cumsum(v)``;
  - filter: ``fs.filter(lambda x: x > 0.0, v)`` (half kept) against ``v[v > 0.0]``;
  - filter+sum: a filter folded over (fused: one loop, no scratch) against ``v[v > 0.0].sum()``.

Each call is the whole call from Python, result included (fsmooth's argument checks and its
result array; numpy's temporaries).  Time: ``time.perf_counter`` per call, the minimum over the
repetitions (the machine is shared: the minimum is the run least disturbed by the others; the
load average is recorded beside it).  Every result is checked against numpy first.  Prints a
table, writes ``results/scan_filter.json`` and ``results/scan_filter.png``; the ratio is numpy's
time over fsmooth's (above 1: fsmooth is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

if __package__ in (None, ""):  # run as a script: python benchmarks/scan_filter.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import fsmooth as fs  # noqa: E402
from fsmooth import Array, Double, Float, ifold, length  # noqa: E402
from benchmarks.blas_report import rewrite_section  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
MI = 1 << 20


@fs.kernel
def cumsum(v: Array[Double]) -> Array[Double]:
    return fs.iscan(lambda s, i: s + v[i], 0.0, length(v))


@fs.kernel
def positives(v: Array[Double]) -> Array[Double]:
    return fs.filter(lambda x: x > 0.0, v)


@fs.kernel
def sum_of_positives(v: Array[Double]) -> Double:
    kept = fs.filter(lambda x: x > 0.0, v)
    return ifold(lambda acc, i: acc + kept[i], 0.0, length(kept))


@fs.kernel
def f32(x: Float) -> Float:
    """``f32(0.0)`` is a Float zero: an F̃ literal alone is a Double."""
    return x


@fs.kernel
def cumsum_f32(v: Array[Float]) -> Array[Float]:
    return fs.iscan(lambda s, i: s + v[i], f32(0.0), length(v))


@fs.kernel
def positives_f32(v: Array[Float]) -> Array[Float]:
    return fs.filter(lambda x: x > f32(0.0), v)


CASES = {  # name -> (fsmooth kernel, numpy version)
    "cumsum": (cumsum, np.cumsum),
    "filter": (positives, lambda v: v[v > 0.0]),
    "filter+sum": (sum_of_positives, lambda v: v[v > 0.0].sum()),
}


def best_time(fn, v: np.ndarray, repeat: int) -> float:
    """Seconds of the fastest of ``repeat`` calls of ``fn(v)`` (after one warm-up call)."""
    fn(v)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(v)
        times.append(time.perf_counter() - start)
    return min(times)


def plot(rows: dict, sizes: list, path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(sizes)
    for k, n in enumerate(sizes):
        ratios = [rows[name][str(n)]["numpy_over_fsmooth"] for name in rows]
        ax.bar([x + k * width for x in range(len(rows))], ratios, width, label=f"{n // MI} Mi doubles"
               if n >= MI else f"{n} doubles")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + width * (len(sizes) - 1) / 2 for x in range(len(rows))], list(rows))
    ax.set_ylabel("numpy time / fsmooth time")
    ax.set_title("scan and filter on the CPU (above 1: fsmooth faster)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repetitions: a smoke run")
    parser.add_argument("--out", default=str(RESULTS), help="directory of scan_filter.json and .png")
    parser.add_argument("--opencl", action="store_true", help="the OpenCL versions against torch/CuPy or numpy")
    parser.add_argument("--sizes", help="OpenCL: comma-separated sizes in Mi floats (default: 16,128 on a GPU, "
                                        "1,4 on a CPU device)")
    parser.add_argument("--repeats", type=int, default=50, help="OpenCL: timed calls per case (at least 50)")
    parser.add_argument("--results-md", default=str(pathlib.Path(__file__).resolve().parent / "RESULTS.md"),
                        help="OpenCL: the RESULTS.md whose section to refresh ('' for none)")
    args = parser.parse_args(argv)
    if args.opencl:
        return main_opencl(args)
    sizes, repeat = ([4 << 10, 64 << 10], 3) if args.quick else ([MI, 16 * MI], 15)

    rng = np.random.default_rng(14)
    load_before = os.getloadavg()
    rows: dict = {name: {} for name in CASES}
    for n in sizes:
        v = rng.uniform(-1.0, 1.0, n)
        for name, (kernel, numpy_version) in CASES.items():
            got, expected = kernel(v), numpy_version(v)
            assert np.shape(got) == np.shape(expected), (name, n)
            np.testing.assert_allclose(got, expected, rtol=1e-9 if name != "cumsum" else 1e-6, atol=1e-9 * n)
            t_fs, t_np = best_time(kernel, v, repeat), best_time(numpy_version, v, repeat)
            rows[name][str(n)] = {"fsmooth_s": t_fs, "numpy_s": t_np, "numpy_over_fsmooth": t_np / t_fs,
                                  "scratch_bytes": kernel.scratch_bytes(v)}
    load_after = os.getloadavg()

    print(f"{'case':<11} {'doubles':>9} {'fsmooth ms':>11} {'numpy ms':>9} {'numpy/fsmooth':>14} {'scratch B':>10}")
    for name, by_size in rows.items():
        for n, row in by_size.items():
            print(f"{name:<11} {int(n):>9} {row['fsmooth_s'] * 1e3:>11.3f} {row['numpy_s'] * 1e3:>9.3f} "
                  f"{row['numpy_over_fsmooth']:>13.2f}× {row['scratch_bytes']:>10}")
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}; "
          f"{os.cpu_count()} CPUs")

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"settings": {"sizes": sizes, "repeat": repeat, "timer": "time.perf_counter, min of repeat",
                           "python": platform.python_version(), "numpy": np.__version__, "fsmooth": fs.__version__,
                           "machine": platform.platform(), "processor": _cpu_model(), "cpus": os.cpu_count(),
                           "load_average_before": load_before, "load_average_after": load_after,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "cases": rows}
    (out / "scan_filter.json").write_text(json.dumps(record, indent=2) + "\n")
    plot(rows, sizes, out / "scan_filter.png")
    print(f"wrote {out / 'scan_filter.json'} and {out / 'scan_filter.png'}")
    return 0


# ----------------------------------------------------------------------------- OpenCL

GPU_SECTION = "## OpenCL: scan and filter against torch on the GPU (issue 14)"
# the filter twice: in its default three launches, and in one (Options.single_pass_filter), which
# is off by default because it was the slower on the H200; a case's computation is its name's
# first word
OPENCL_CASES = {"cumsum": cumsum_f32, "filter": positives_f32,
                "filter one launch": positives_f32.with_options(single_pass_filter=True)}


def main_opencl(args) -> int:
    import pyopencl as cl

    if args.repeats < 50:
        raise SystemExit("--repeats must be at least 50")
    executables = {name: kernel.opencl_executable() for name, kernel in OPENCL_CASES.items()}
    device = next(iter(executables.values())).device
    on_gpu = bool(device.type & cl.device_type.GPU)
    sizes = [int(float(x) * MI) for x in args.sizes.split(",")] if args.sizes else \
        ([16 * MI, 128 * MI] if on_gpu else [MI, 4 * MI])
    baseline = _baseline()
    rng = np.random.default_rng(14)
    rows: dict = {name: {} for name in OPENCL_CASES}
    for n in sizes:
        v = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        expected = {"cumsum": np.cumsum(v, dtype=np.float64), "filter": v[v > 0]}
        for name, kernel in OPENCL_CASES.items():
            what = name.split()[0]
            got = kernel.opencl(v)
            _check(what, got, expected[what], n)
            timing = executables[name].run_timed((v,), repeats=args.repeats, warmup=5)
            base_s, base_name = baseline(what, v, expected[what], args.repeats)
            launches = [p.kernel for p in executables[name].last_profile]
            rows[name][str(n)] = {"fsmooth_s": timing.median, "baseline_s": base_s, "baseline": base_name,
                                  "baseline_over_fsmooth": base_s / timing.median, "launches": launches,
                                  "fsmooth_times_s": list(timing.times)}
    record = {"settings": {"sizes": sizes, "repeats": args.repeats, "device": device.name.strip(),
                           "platform": device.platform.name.strip(), "gpu": on_gpu,
                           "timer": "OpenCL profiling events (fsmooth); CUDA events or perf_counter (baseline); "
                                    "median of repeats",
                           "python": platform.python_version(), "numpy": np.__version__,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "cases": rows}
    print(f"device: {record['settings']['device']} ({record['settings']['platform']})")
    for line in _table(record):
        print(line)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scan_filter_opencl.json").write_text(json.dumps(record, indent=2) + "\n")
    _plot_opencl(record, out / "scan_filter_opencl.png")
    if args.results_md:
        _refresh_section(pathlib.Path(args.results_md), record)
    print(f"wrote {out / 'scan_filter_opencl.json'} and {out / 'scan_filter_opencl.png'}")
    return 0


def _check(name: str, got, expected: np.ndarray, n: int) -> None:
    got = np.asarray(got)
    if name == "filter":
        np.testing.assert_array_equal(got, expected)
    else:  # reassociated in float32: within its rounding of the float64 scan
        assert got.shape == expected.shape
        error = float(np.max(np.abs(got - expected))) if n else 0.0
        assert error <= 1e-4 * np.sqrt(n) + 1e-3, f"cumsum: largest error {error} at n = {n}"


def _baseline():
    """(seconds, name) of the baseline of a case: CUDA (torch, then CuPy if faster to import)
    where available, else numpy."""
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        def numpy_time(name, v, expected, repeats):
            call = (lambda: np.cumsum(v)) if name == "cumsum" else (lambda: v[v > 0])
            call()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            return float(np.median(times)), "numpy " + ("np.cumsum" if name == "cumsum" else "v[v > 0]")
        return numpy_time

    def cuda_time(name, v, expected, repeats):
        x = torch.from_numpy(v).cuda()
        candidates = {"cumsum": [("torch.cumsum", lambda: torch.cumsum(x, 0))],
                      "filter": [("torch.masked_select", lambda: torch.masked_select(x, x > 0))]}[name]
        cupy = _cupy()
        if cupy is not None:
            cx = cupy.from_dlpack(x)
            candidates.append(("cupy.cumsum", lambda: cupy.cumsum(cx)) if name == "cumsum"
                              else ("cupy x[x > 0]", lambda: cx[cx > 0]))
        best = None
        for label, call in candidates:
            got = call()
            _check(name, torch.as_tensor(got, device="cuda").cpu().numpy(), expected, len(v))
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            times = []
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3)
            found = (float(np.median(times)), label)
            best = found if best is None or found[0] < best[0] else best
        return best
    return cuda_time


def _cupy():
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception:  # not installed, or no CUDA device for it
        return None


def _table(record: dict) -> list[str]:
    lines = ["| case | floats | fsmooth (ms) | baseline | baseline (ms) | baseline / fsmooth | launches |",
             "|---|---|---|---|---|---|---|"]
    for name, by_size in record["cases"].items():
        for n, row in by_size.items():
            size = f"{int(n) // MI} Mi" if int(n) >= MI else n
            lines.append(f"| {name} | {size} | {row['fsmooth_s'] * 1e3:.3f} | {row['baseline']} | "
                         f"{row['baseline_s'] * 1e3:.3f} | **{row['baseline_over_fsmooth']:.2f}×** | "
                         f"{len(row['launches'])} |")
    return lines


def _plot_opencl(record: dict, path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = record["settings"]["sizes"]
    cases = list(record["cases"])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(sizes)
    for k, n in enumerate(sizes):
        ratios = [record["cases"][name][str(n)]["baseline_over_fsmooth"] for name in cases]
        ax.bar([x + k * width for x in range(len(cases))], ratios, width, label=f"{n / MI:g} Mi floats")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + width * (len(sizes) - 1) / 2 for x in range(len(cases))], cases)
    ax.set_ylabel("baseline time / fsmooth time")
    ax.set_title(f"scan and filter on {record['settings']['device']} (above 1: fsmooth faster)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _refresh_section(results_md: pathlib.Path, record: dict) -> None:
    """Replace (or append) this benchmark's section of RESULTS.md, leaving the others as they are."""
    s = record["settings"]
    section = "\n".join([
        GPU_SECTION, "",
        f"Generated by `python -m benchmarks.scan_filter --opencl` on {s['date']}: {s['device']} "
        f"({s['platform']}), float32 drawn from [-1, 1); `cumsum` is `fs.iscan(lambda s, i: s + v[i], "
        "f32(0.0), length(v))` (the single-pass scan of decoupled look-back: one launch; three launches, "
        "reduce, partials, down, on a device without 64-bit atomics), `filter` `fs.filter(lambda x: "
        "x > f32(0.0), v)` (half kept: mask, scan, scatter in the three-phase scan's launches, then its "
        "length copied out), `filter one launch` the same filter with `Options.single_pass_filter` (mask, "
        "scan, scatter in the single pass, its length written by the last tile's group; off by default). "
        "fsmooth's time: the device time "
        "of one call from the OpenCL profiling events (the sum of its launches; the gaps between them left "
        f"out); the baseline's: CUDA events around one call (torch/CuPy) or `time.perf_counter` (numpy). "
        f"Medians of {s['repeats']} calls, inputs on the device, every result checked first (the filter "
        "exactly; the scan, regrouped in float32, within its rounding of the float64 `np.cumsum`). Ratio: "
        "the baseline's time over fsmooth's (target ≥ 1.0×).", "", *_table(record), ""])
    rewrite_section(results_md, section, GPU_SECTION)


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
