"""``parallel=True`` against the sequential build on the ADBench BA and GMM objectives:

    python benchmarks/parallel.py              # BA at 182,072 observations, GMM d=10 K=25 n=10000
    python benchmarks/parallel.py --quick      # small sizes, a few repetitions (smoke run)

BA's inputs are made as ADBench's reader makes them (``ba.cpp``/``read_ba_instance``): one camera,
one point, one weight and one feature, tiled; observation i is (i mod n, i mod m); here every
copy is jittered a little, so no two are equal.  GMM's are ADBench's (uniform alphas, means,
icf, points).  Each objective is compiled twice (``parallel=False``, ``parallel=True``), checked
against the numpy oracle, then timed: a warm-up call each, then ``--repeat`` rounds of one
sequential and one parallel call, each timed alone with ``time.perf_counter`` (taken in turns, so
that both see the same load on a shared machine); the table shows medians (the median ignores the
calls another process slowed down) and the median of the rounds' ratios.  The threads are OpenMP's (``OMP_NUM_THREADS``, else
one per core).  Prints a table and writes ``results/parallel.json``.

    python benchmarks/parallel.py --write-c DIR   # the same without Python, for another machine

writes the generated C of both objectives, sequential and parallel, the runtime headers,
``parallel_driver.c`` (the same inputs and timing in C) and ``run.sh``, which builds both and
prints the driver's lines (``taskset -c 0,1 sh run.sh`` pins them to two cores).
"""
from __future__ import annotations

import argparse
import json
import shutil
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: python benchmarks/parallel.py
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from corpus import adbench_ba, adbench_gmm  # noqa: E402

BA_CAMERAS, BA_POINTS = 49, 7776  # ADBench's ba1 (n, m); p observations given


def ba_inputs(rng, n: int, m: int, p: int) -> tuple:
    """ADBench's BA instance: one camera, point, weight and feature tiled, observation i =
    (i mod n, i mod m), each copy jittered by a relative 1e-3 so that no two are equal."""
    camera = np.array([0.1, -0.2, 0.3, 0.05, -0.05, 0.1, 1.2, 0.01, -0.02, 0.05, -0.01])
    point, weight, feature = np.array([0.3, -0.4, 6.0]), 0.9, np.array([0.1, -0.2])

    def tiled(x, count):
        x = np.asarray(x, dtype=np.float64)
        return np.tile(x, (count,) + (1,) * x.ndim) * (1.0 + 1e-3 * rng.standard_normal((count,) + x.shape))
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1).astype(np.int64)
    return tiled(camera, n), tiled(point, m), tiled(weight, p), obs, tiled(feature, p)


def gmm_inputs(rng, d: int, k: int, n: int) -> tuple:
    """ADBench's GMM inputs (as tests/test_adbench_corpus.gmm_args makes them)."""
    icf = np.concatenate([rng.uniform(-0.5, 0.5, (k, d)), rng.uniform(-1.0, 1.0, (k, d * (d - 1) // 2))], axis=1)
    return (rng.uniform(-1.0, 1.0, k), rng.uniform(-2.0, 2.0, (k, d)), icf,
            rng.uniform(-2.0, 2.0, (n, d)), 1.5, 2)


def close(got, expected, rtol: float) -> bool:
    if isinstance(expected, tuple):
        return all(close(g, e, rtol) for g, e in zip(got, expected))
    return bool(np.allclose(got, expected, rtol=rtol, atol=0.0))


def timings(kernels: tuple, args: tuple, repeat: int) -> list[list[float]]:
    """Per kernel, the seconds of ``repeat`` calls, the kernels called in turns."""
    for kernel in kernels:
        kernel(*args)  # warm-up: the build, the plan, the scratch buffer
    out: list[list[float]] = [[] for _ in kernels]
    for _ in range(repeat):
        for kernel, times in zip(kernels, out):
            start = time.perf_counter()
            kernel(*args)
            times.append(time.perf_counter() - start)
    return out


RUN_SH = """#!/bin/sh
# Builds the sequential and the parallel library with the driver, then runs both.
set -e
cd "$(dirname "$0")"
cc -std=c99 -O2 -I. parallel_driver.c sequential/ba.c sequential/gmm.c -lm -o sequential.out
cc -std=c99 -O2 -fopenmp -DPARALLEL -I. parallel_driver.c parallel/ba.c parallel/gmm.c -lm -o parallel.out
echo "sequential: $(./sequential.out {sizes})"
echo "parallel:   $(./parallel.out {sizes})"
"""


def write_c(directory: pathlib.Path, ba_sizes: tuple, gmm_sizes: tuple) -> None:
    """The C of ``--write-c`` (the module docstring)."""
    from fsmooth.clib import C_HEADERS, HEADER_DIR
    from fsmooth.driver import compile_to_c
    from fsmooth.options import Options
    for label, options in (("sequential", Options()), ("parallel", Options(parallel=True))):
        (directory / label).mkdir(parents=True, exist_ok=True)
        for name, kernel in (("ba", adbench_ba.ba_objective), ("gmm", adbench_gmm.gmm_full_objective)):
            (directory / label / f"{name}.c").write_text(compile_to_c(kernel.program(), options).source)
    for header in C_HEADERS:
        shutil.copy(HEADER_DIR / header, directory)
    shutil.copy(ROOT / "benchmarks" / "parallel_driver.c", directory)
    (directory / "run.sh").write_text(RUN_SH.format(sizes=" ".join(map(str, (*ba_sizes, *gmm_sizes)))))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 repetitions")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls per measurement (default 21)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "parallel.json"))
    parser.add_argument("--write-c", metavar="DIR", help="write the C benchmark instead of running this one")
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 21)
    rng = np.random.default_rng(0)
    p = 2000 if args.quick else 182_072
    gmm_sizes = (10, 25, 200) if args.quick else (10, 25, 10_000)
    if args.write_c:
        write_c(pathlib.Path(args.write_c), (BA_CAMERAS, BA_POINTS, p), gmm_sizes)
        return 0
    problems = [
        ("BA", f"n={BA_CAMERAS} m={BA_POINTS} p={p}", adbench_ba.ba_objective,
         ba_inputs(rng, BA_CAMERAS, BA_POINTS, p), adbench_ba.np_ba_objective, 1e-12),
        ("GMM", "d={} K={} n={}".format(*gmm_sizes), adbench_gmm.gmm_full_objective,
         gmm_inputs(rng, *gmm_sizes), adbench_gmm.np_gmm_full_objective, 1e-9),
    ]
    rows = []
    for name, sizes, kernel, inputs, oracle, rtol in problems:
        expected = oracle(*inputs)
        row = {"objective": name, "sizes": sizes, "repeat": repeat}
        compiled = {"sequential": kernel, "parallel": kernel.with_options(parallel=True)}
        for label, k in compiled.items():
            if not close(k(*inputs), expected, rtol):
                print(f"{name} {label}: the result differs from numpy's", file=sys.stderr)
                return 1
        for (label, k), times in zip(compiled.items(), timings(tuple(compiled.values()), inputs, repeat)):
            row[label] = {"median_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times),
                          "scratch_bytes": k.scratch_bytes(*inputs), "times_ms": [1e3 * t for t in times]}
        row["speedup"] = statistics.median(s / p for s, p in zip(row["sequential"]["times_ms"],
                                                                 row["parallel"]["times_ms"]))
        rows.append(row)
    threads = adbench_ba.weight_errors.with_options(parallel=True).executable()._max_threads()
    print(f"OpenMP threads: {threads}; medians of {repeat} calls each; speedup: the median of the "
          f"{repeat} rounds' ratios")
    print(f"{'objective':<10} {'sizes':<26} {'sequential ms':>14} {'parallel ms':>12} {'speedup':>8} "
          f"{'scratch seq':>12} {'scratch par':>12}")
    for r in rows:
        print(f"{r['objective']:<10} {r['sizes']:<26} {r['sequential']['median_ms']:>14.2f} "
              f"{r['parallel']['median_ms']:>12.2f} {r['speedup']:>8.2f} "
              f"{r['sequential']['scratch_bytes']:>12} {r['parallel']['scratch_bytes']:>12}")
    path = pathlib.Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"threads": threads, "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
