"""fsmooth's scan and filter (issue 14) on the CPU against numpy.

    python -m benchmarks.scan_filter            # 1 Mi and 16 Mi doubles
    python -m benchmarks.scan_filter --quick    # smoke run: 4 Ki and 64 Ki doubles, few repetitions

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
from fsmooth import Array, Double, ifold, length  # noqa: E402

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
    args = parser.parse_args(argv)
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
