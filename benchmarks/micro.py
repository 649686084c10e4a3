"""The DPS paper's micro-benchmarks (§5.1, Fig. 11), every implementation in one run:

    python -m benchmarks.micro            # full run: 10^6 iterations, memory from 10^2 to 10^6
    python -m benchmarks.micro --quick    # smoke run: 10^4 iterations, a few seconds per benchmark

Each measurement runs in a fresh Python process (``--child``), so that one implementation's
leaked or cached memory never shows up in another's numbers:

  - time: ``time.perf_counter`` around one call of the whole loop (one C call for fsmooth, the
    hand-written C and Eigen), after a one-iteration warm-up; the median over the repetitions;
  - memory: the growth of the peak resident set during that first timed call.  On Linux the
    peak is reset after the warm-up (``/proc/self/clear_refs``) and the growth is the peak after
    the call minus the resident set before it; elsewhere it is ``ru_maxrss`` after minus before
    (which misses growth that stays under an earlier, higher peak).  Both are in the JSON.

The checksums of all implementations must agree (to rounding) at every iteration count; a
wrong one is reported as such, has no time in the tables, and makes the command exit with 1.
Writes ``results/micro.json``, ``results/micro_time.png``, ``results/micro_memory.png`` and
``RESULTS.md``.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a script: python benchmarks/micro.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks import micro_impls, micro_report  # noqa: E402
from benchmarks.blas_report import SECTION_TITLE  # noqa: E402
from benchmarks.micro_impls import BENCHMARKS, Implementation  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
REPORT = REPO_ROOT / "benchmarks" / "RESULTS.md"

FULL = dict(iterations=10 ** 6, counts=(10 ** 2, 10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6), repeats=5,
            budget_s=20.0, jobs=1)
QUICK = dict(iterations=10 ** 4, counts=(10 ** 4,), repeats=3, budget_s=1.0, jobs=2)
MIN_REPEATS = 3  # repetitions always run, even past the time budget (unless fewer are asked)
CHILD_TIMEOUT_S = 600
CHECKSUM_REL_TOL = 1e-9
RESULT_MARK = "MICRO-RESULT "


# ----------------------------------------------------------------------------- one measurement

def _status_kib(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (VmRSS, VmHWM), or None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the peak resident set (VmHWM) to the current one (Linux ≥ 4.0); False if impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return _status_kib("VmHWM") is not None


def _maxrss_kib() -> int:
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss // 1024 if sys.platform == "darwin" else maxrss  # bytes on macOS, KiB elsewhere


def measure(impl: Implementation, bench: micro_impls.Benchmark, iters: int, repeats: int,
            budget_s: float) -> dict:
    """Run ``bench`` in ``impl`` in this process: memory during the first timed call, then more
    timed calls until ``repeats`` are done or (past ``MIN_REPEATS``) ``budget_s`` is spent."""
    run = micro_impls.runner(impl, bench)
    run(1)  # warm-up: loads the code, compiles what is JIT-compiled, touches the scratch
    hwm_reset = _reset_peak_rss()
    rss_before, maxrss_before = _status_kib("VmRSS"), _maxrss_kib()
    start = time.perf_counter()
    checksum = run(iters)
    times = [time.perf_counter() - start]
    maxrss_after = _maxrss_kib()
    hwm_after = _status_kib("VmHWM") if hwm_reset else None
    while len(times) < repeats and (len(times) < MIN_REPEATS or sum(times) < budget_s):
        start = time.perf_counter()
        run(iters)
        times.append(time.perf_counter() - start)
    return {
        "checksum": float(checksum),
        "times_s": times,
        "maxrss_growth_kib": maxrss_after - maxrss_before,
        "peak_growth_kib": None if hwm_after is None else hwm_after - rss_before,
    }


def _child_main(spec: str) -> None:
    job = json.loads(spec)
    impl = next(i for i in micro_impls.implementations() if i.key == job["impl"])
    result = measure(impl, BENCHMARKS[job["bench"]], job["iters"], job["repeats"], job["budget_s"])
    print(RESULT_MARK + json.dumps(result), flush=True)


def run_in_child(job: dict, module: str = "benchmarks.micro", mark: str = RESULT_MARK,
                 timeout_s: int = CHILD_TIMEOUT_S, env: dict | None = None) -> dict:
    """``python -m module --child JOB`` in a fresh interpreter (with ``env`` added to this
    process's environment): the JSON it prints after ``mark`` (``measure``'s, for this module),
    or ``{"error": ...}`` if it fails."""
    command = [sys.executable, "-m", module, "--child", json.dumps(job)]
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout_s} s"}
    for line in done.stdout.splitlines():
        if line.startswith(mark):
            return json.loads(line[len(mark):])
    lines = (done.stderr or done.stdout).strip().splitlines()
    return {"error": f"exit status {done.returncode}: {lines[-1] if lines else 'no output'}"}


# ----------------------------------------------------------------------------- the whole run

def _fsmooth_facts(impl: Implementation, bench: micro_impls.Benchmark, counts) -> dict:
    """The generated C's fingerprint and the arena bytes at every iteration count."""
    kernel = bench.kernel.variant(impl.variant)
    arrays = bench.inputs()
    return {
        "c_sha256": hashlib.sha256(kernel.c_source().encode()).hexdigest(),
        "scratch_bytes": {str(n): kernel.scratch_bytes(*arrays, n) for n in counts},
    }


def prepare(impls, settings, progress) -> dict:
    """Build everything once in this process (so that the children only load from the caches):
    per benchmark and implementation, a record with its status and the fsmooth facts."""
    records = {}
    for bench in BENCHMARKS.values():
        records[bench.name] = {}
        for impl in impls:
            progress.set_postfix_str(f"building {bench.name} {impl.key}")
            record = {"label": impl.label, "family": impl.family, "variant": impl.variant,
                      "status": "ok", "note": None, "memory": {}}
            why_not = micro_impls.unavailable(impl)
            if why_not:
                record.update(status="unavailable", note=why_not)
            else:
                try:
                    micro_impls.runner(impl, bench)(1)
                    if impl.family == "fsmooth":
                        record.update(_fsmooth_facts(impl, bench, settings["counts"]))
                except Exception as err:  # a variant under construction: report it, go on
                    record.update(status="error", note=f"{type(err).__name__}: {err}".splitlines()[0])
            records[bench.name][impl.key] = record
            progress.update(1)
    return records


def measure_all(records, impls, settings, progress, jobs: int) -> None:
    """Every (benchmark, implementation, iteration count) in its own process, ``jobs`` at a
    time; the run at the full iteration count also gives the times."""
    pending = []
    for bench in BENCHMARKS.values():
        for impl in impls:
            for iters in _counts_largest_first(settings):
                if records[bench.name][impl.key]["status"] != "ok":
                    progress.update(1)
                    continue
                timed = iters == settings["iterations"]
                pending.append({"impl": impl.key, "bench": bench.name, "iters": iters,
                                "repeats": settings["repeats"] if timed else 1,
                                "budget_s": settings["budget_s"]})

    def start(job: dict) -> dict:
        progress.set_postfix_str(f"{job['bench']} {job['impl']} {job['iters']:.0e}")
        return run_in_child(job)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(start, job): job for job in pending}
        for future in concurrent.futures.as_completed(futures):
            job = futures[future]
            _record(records[job["bench"]][job["impl"]], job, future.result(), settings)
            progress.update(1)


def _record(record: dict, job: dict, result: dict, settings) -> None:
    if "error" in result:
        record.update(status="error", note=f"{result['error']} (at {job['iters']} iterations)")
        return
    record["memory"][str(job["iters"])] = {k: result[k] for k in (
        "checksum", "peak_growth_kib", "maxrss_growth_kib")}
    if job["iters"] == settings["iterations"]:
        record["times_s"] = result["times_s"]
        record["median_s"] = statistics.median(result["times_s"])
        record["checksum"] = result["checksum"]


def _counts_largest_first(settings) -> list[int]:
    return sorted(set(settings["counts"]) | {settings["iterations"]}, reverse=True)


def check_checksums(records) -> list[str]:
    """Mark every implementation whose checksum differs from the hand-written C's at some
    iteration count as ``wrong checksum``; the problems found, as sentences."""
    problems = []
    for bench, by_impl in records.items():
        reference = by_impl["hand-c"]
        if reference["status"] != "ok":
            problems.append(f"{bench}: no hand-written C result to check the others against")
            continue
        for key, record in by_impl.items():
            if record["status"] != "ok":
                continue
            for iters, memory in record["memory"].items():
                expected = reference["memory"][iters]["checksum"]
                if not math.isclose(memory["checksum"], expected, rel_tol=CHECKSUM_REL_TOL,
                                    abs_tol=CHECKSUM_REL_TOL * int(iters)):
                    record.update(status="wrong checksum",
                                  note=f"{memory['checksum']!r} at {iters} iterations, "
                                       f"hand-written C gives {expected!r}")
                    problems.append(f"{bench} {key}: {record['note']}")
                    break
    return problems


def add_ratios(records) -> None:
    for by_impl in records.values():
        hand = by_impl["hand-c"].get("median_s")
        for record in by_impl.values():
            if record["status"] == "ok" and hand:
                record["ratio_to_hand_c"] = record["median_s"] / hand


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK['iterations']} iterations, memory at {QUICK['counts']}")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR,
                        help="where micro.json and the plots go (default: benchmarks/results)")
    parser.add_argument("--report", type=pathlib.Path, default=None,
                        help="the Markdown report (default: benchmarks/RESULTS.md, or OUT/RESULTS.md "
                             "with --quick, so that a smoke run never replaces the real report)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"timed repetitions (default {FULL['repeats']}, {QUICK['repeats']} with --quick)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="measurements run at once (default 1, 2 with --quick); more than 1 "
                             "disturbs the times, so the report says so")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_main(args.child)
        return 0

    from tqdm import tqdm

    settings = dict(QUICK if args.quick else FULL, quick=args.quick)
    if args.repeats is not None:
        settings["repeats"] = args.repeats
    settings["min_repeats"] = min(MIN_REPEATS, settings["repeats"])
    settings["jobs"] = args.jobs or settings["jobs"]
    settings["c_flags"] = [*micro_impls.cache.COMPILE_ARGS, *micro_impls.cache.host_flags()]
    settings["eigen_flags"] = list(micro_impls.EIGEN_FLAGS)
    report = args.report or (args.out / "RESULTS.md" if args.quick else REPORT)

    impls = micro_impls.implementations()
    machine = micro_report.machine()  # before the run, so that its load average is other work's
    runs = len(BENCHMARKS) * len(impls) * (1 + len(_counts_largest_first(settings)))
    with tqdm(total=runs, unit="run", desc="micro-benchmarks") as progress:
        records = prepare(impls, settings, progress)
        measure_all(records, impls, settings, progress, settings["jobs"])
    problems = check_checksums(records)
    add_ratios(records)

    results = {"machine": machine, "settings": settings,
               "benchmarks": {name: {"description": BENCHMARKS[name].description,
                                     "implementations": by_impl}
                              for name, by_impl in records.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "micro.json").write_text(json.dumps(results, indent=1) + "\n")
    plots = micro_report.plot(results, args.out)
    report.parent.mkdir(parents=True, exist_ok=True)
    # The BLAS section belongs to benchmarks.blas: keep it.
    old = report.read_text() if report.exists() else ""
    blas = old[old.index(SECTION_TITLE):] if SECTION_TITLE in old else ""
    report.write_text(micro_report.markdown(results, plots, report.parent) + ("\n" + blas if blas else ""))
    print(micro_report.text_tables(results))
    print(f"wrote {args.out / 'micro.json'}, {', '.join(str(p) for p in plots)} and {report}")
    for problem in problems:
        print(f"WRONG CHECKSUM: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
