"""ADBench's objectives (GMM, BA, Hand, LSTM) at ADBench's sizes: fsmooth's default variant (and
the same with ``fastmath``, beside it) against hand-written C++ (ADBench's `manual` style), Eigen,
Numba, numpy and PyTorch on the CPU.

    python -m benchmarks.adbench                 # every ADBench size; hours on two cores (below)
    python -m benchmarks.adbench --reduced       # the set a loaded 2-core machine can run (~15 min)
    python -m benchmarks.adbench --quick         # the smallest case of each objective, seconds
    python -m benchmarks.adbench --objectives gmm,ba --max-seconds 5
    python -m benchmarks.adbench --memory        # the memory ladder (DPS paper Fig. 12 b, d, f)

Time is measured ADBench's way, in this process: the number of repeats of one call is doubled
until one sample (the repeats in a row) takes at least ``--min-measurable`` seconds (0.5), then
samples are taken until there are ``--samples`` (10) or the measurement has taken
``--max-seconds`` (default 10); the time is the minimum over the samples of a sample's time over
its repeats.  Before it is timed, every implementation's result is checked against the numpy
oracle of tests/corpus/adbench_*.py (relative 1e-9 of the result's largest magnitude); a wrong
result is reported as such, is not timed, and makes the command exit with 1.

How long: the default runs 72 GMM cases (the largest, d = 128, K = 200, n = 10k, takes seconds a
call in every implementation and over a minute in numpy), BA ba1–ba10, Hand hand1–hand12 and
LSTM at l ∈ {2, 4} × c ∈ {1024, 4096}: with --max-seconds 10, seven implementations and the
doubling to 0.5 s, about 2.5 to 3.5 hours on an idle two-core machine.

The memory ladder runs each of GMM, BA and Hand ``calls`` times in a loop (for fsmooth, an F̃
``ifold`` over the objective, benchmarks/adbench_kernels.py; for manual C++, a C++ loop; for numpy
and PyTorch, a Python loop) in a fresh process per measurement, for every fsmooth variant (the
DPS paper's CL, CLF, CG, D, DF, DFB, DFBS) and the baselines.  Compiled code: the growth of the
peak resident set during the loop (as benchmarks.micro measures it); numpy and PyTorch:
``memory_profiler.memory_usage`` (its peak minus the resident set before the loop).  The two
methods are cross-checked on one case (numpy and fsmooth's malloc variant, GMM, both methods).

The ladder's target (the default's peak equals its inputs plus its computed scratch, and the
manual C++'s) is checked by counting bytes, not pages: the default and the manual C++ run again
in a process with baselines/heap_counter.cpp preloaded (``measure_heap``).

Writes ``results/adbench.json`` (or ``adbench_memory.json``), the plots, and the time (or memory)
subsection of the ADBench section of ``RESULTS.md`` (the other subsection and sections are kept).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

if __package__ in (None, ""):  # run as a script: python benchmarks/adbench.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks import adbench_impls, adbench_report, micro_report  # noqa: E402
from benchmarks.micro import _maxrss_kib, _reset_peak_rss, _status_kib  # noqa: E402
from benchmarks.micro import run_in_child as micro_run_in_child  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
REPORT = REPO_ROOT / "benchmarks" / "RESULTS.md"
OBJECTIVES = ("gmm", "ba", "hand", "lstm")

FULL = dict(min_measurable_s=0.5, samples=10, max_seconds=10.0)
QUICK = dict(min_measurable_s=0.01, samples=3, max_seconds=1.0)
MEMORY_CALLS = (1, 10, 100)
QUICK_MEMORY_CALLS = (1, 3)
CHILD_TIMEOUT_S = 900
RESULT_MARK = "ADBENCH-RESULT "


# ----------------------------------------------------------------------------- time

def time_adbench(call, min_measurable_s: float, samples: int, max_seconds: float) -> dict:
    """ADBench's timing: repeats doubled until a sample lasts ``min_measurable_s``, then up to
    ``samples`` samples within ``max_seconds`` (the doubling included); the minimum per call."""
    repeats, spent = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        elapsed = time.perf_counter() - start
        spent += elapsed
        if elapsed >= min_measurable_s or spent >= max_seconds:
            break
        repeats *= 2
    per_call = [elapsed / repeats]
    while len(per_call) < samples and spent < max_seconds:
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        elapsed = time.perf_counter() - start
        spent += elapsed
        per_call.append(elapsed / repeats)
    return {"time_s": min(per_call), "repeats": repeats, "samples_s": per_call}


def measure_case(case, impls, settings, progress) -> dict:
    """Every implementation on one case: built, checked against the oracle, then timed."""
    expected = adbench_impls.oracle_result(case)
    records = {}
    for impl in impls:
        progress.set_postfix_str(f"{case.name} {impl.key}")
        record = {"label": impl.label, "family": impl.family, "status": "ok", "note": None}
        why_not = adbench_impls.unavailable(impl)
        if why_not:
            record.update(status="unavailable", note=why_not)
        else:
            try:
                call, as_numpy = adbench_impls.runner(impl, case)
                problem = adbench_impls.check(as_numpy(call()), expected)
                if problem:
                    record.update(status="wrong result", note=problem)
                else:
                    record.update(time_adbench(call, settings["min_measurable_s"], settings["samples"],
                                               settings["max_seconds"]))
            except Exception as err:  # reported, the run goes on
                record.update(status="error", note=f"{type(err).__name__}: {err}".splitlines()[0])
        records[impl.key] = record
        progress.update(1)
    manual = records.get("manual", {}).get("time_s")
    for record in records.values():
        if record["status"] == "ok" and manual:
            record["ratio_to_manual"] = record["time_s"] / manual
    return {"objective": case.objective, "sizes": list(case.sizes), "size": case.size,
            "implementations": records}


def run_times(cases, settings) -> dict:
    from tqdm import tqdm

    impls = adbench_impls.implementations()
    machine = micro_report.machine()  # before the run, so that its load average is other work's
    machine["torch"] = _torch_version()
    results = {"machine": machine, "settings": settings, "cases": {}}
    with tqdm(total=len(cases) * len(impls), unit="run", desc="ADBench") as progress:
        for case in cases:
            results["cases"][case.name] = measure_case(case, impls, settings, progress)
    return results


def _torch_version() -> str:
    try:
        import torch
    except ImportError:
        return "not installed"
    return torch.__version__


# ----------------------------------------------------------------------------- memory ladder

def _ladder_call(impl, objective: str, args: tuple):
    """``run(calls) -> checksum``: ``calls`` calls of the objective in ``impl``, in one loop."""
    if impl.family == "fsmooth":
        from benchmarks import adbench_kernels

        kernel = getattr(adbench_kernels, f"{objective}_loop").variant(impl.variant)
        return lambda calls: kernel(*args, calls)
    if impl.family == "C++":
        function = getattr(adbench_impls.manual_library(), f"{objective}_loop_manual")
        return _native_loop(function, objective, args)
    call, _ = adbench_impls.runner(impl, adbench_impls.MEMORY_CASES[objective])
    read = {"gmm": lambda v, it: float(v),
            "ba": lambda v, it: float(v[0][it % len(v[1])][0] + v[1][it % len(v[1])]),
            "hand": lambda v, it: float(v[it % len(v)][0])}[objective]

    def run(calls):
        acc = 0.0
        for it in range(calls):
            acc += read(call(), it)
        return acc
    return run


def _native_loop(function, objective: str, args: tuple):
    """``run(calls)`` of a manual C++ loop: the objective's arguments (less its outputs), then
    ``calls``."""
    import ctypes

    p, i64, dbl = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    function.restype = dbl
    if objective == "gmm":
        alphas, means, icf, x, gamma, m = args
        function.argtypes = [i64, i64, i64, p, p, p, p, dbl, i64, i64]
        return lambda calls: function(x.shape[1], len(alphas), len(x), alphas.ctypes.data,
                                      means.ctypes.data, icf.ctypes.data, x.ctypes.data, gamma, m, calls)
    if objective == "ba":
        cams, x, w, obs, feats = args
        function.argtypes = [i64, p, p, p, p, p, i64]
        return lambda calls: function(len(w), *(a.ctypes.data for a in args), calls)
    theta, parents, rel, inv, pos, weights, mirrored, corr, points = args
    function.argtypes = [i64, i64, i64, p, p, p, p, p, p, i64, p, p, i64]
    return lambda calls: function(len(parents), len(pos), len(corr),
                                  *(a.ctypes.data for a in (theta, parents, rel, inv, pos, weights)),
                                  int(mirrored), corr.ctypes.data, points.ctypes.data, calls)


def measure_memory(impl, objective: str, calls: int, method: str) -> dict:
    """Peak memory of ``calls`` calls, in this process, after a one-call warm-up.  ``method``:
    'rss' (the growth of the peak resident set, reset after the warm-up) or 'memory_profiler'."""
    args = adbench_impls.MEMORY_CASES[objective].inputs()
    run = _ladder_call(impl, objective, args)
    run(1)  # loads the code, compiles what is JIT-compiled
    if method == "memory_profiler":
        from memory_profiler import memory_usage

        # memory_profiler samples this process from a monitor process, its first sample taken
        # before ``run`` starts: the growth is its maximum over that first sample.
        usage_mib, checksum = memory_usage((run, (calls,)), retval=True, interval=0.001,
                                           include_children=False)
        return {"checksum": float(checksum), "peak_growth_kib": (max(usage_mib) - usage_mib[0]) * 1024}
    hwm_reset = _reset_peak_rss()
    rss_before, maxrss_before = _status_kib("VmRSS"), _maxrss_kib()
    checksum = run(calls)
    growth = (_status_kib("VmHWM") - rss_before) if hwm_reset else _maxrss_kib() - maxrss_before
    return {"checksum": float(checksum), "peak_growth_kib": growth}


def _load_code(impl, objective: str) -> None:
    """Build and load ``impl``'s code for the ladder's loop without calling it."""
    if impl.family == "fsmooth":
        from benchmarks import adbench_kernels

        getattr(adbench_kernels, f"{objective}_loop").variant(impl.variant).executable()
    else:
        adbench_impls.manual_library()


def measure_heap(impl, objective: str, calls: int) -> dict:
    """The target's measurement, in a process with baselines/heap_counter.cpp preloaded: the heap
    bytes the inputs take, and the peak of the live heap bytes over ``calls`` calls above what was
    live before them, with no warm-up call (the first call's scratch counts).  The code is loaded
    first, so that its own allocations are counted in neither."""
    import ctypes

    counter = ctypes.CDLL(str(adbench_impls.heap_counter_path()))
    for name in ("heap_counter_live", "heap_counter_peak"):
        getattr(counter, name).restype = ctypes.c_int64
    _load_code(impl, objective)
    adbench_impls.MEMORY_CASES[objective].inputs()  # imports what making them needs, once
    live_before_inputs = counter.heap_counter_live()
    args = adbench_impls.MEMORY_CASES[objective].inputs()
    inputs_heap = counter.heap_counter_live() - live_before_inputs
    run = _ladder_call(impl, objective, args)
    live_before = counter.heap_counter_live()
    counter.heap_counter_reset_peak()
    checksum = run(calls)
    result = {"checksum": float(checksum), "inputs_bytes": sum(a.nbytes for a in args if hasattr(a, "nbytes")),
              "inputs_heap_bytes": inputs_heap, "peak_growth_bytes": counter.heap_counter_peak() - live_before}
    if impl.family == "fsmooth":
        from benchmarks import adbench_kernels

        kernel = getattr(adbench_kernels, f"{objective}_loop").variant(impl.variant)
        result["scratch_bytes"] = kernel.scratch_bytes(*args, calls)
    return result


def _child_main(spec: str) -> None:
    job = json.loads(spec)
    impl = next(i for i in adbench_impls.ladder_implementations() if i.key == job["impl"])
    result = (measure_heap(impl, job["objective"], job["calls"]) if job["method"] == "heap" else
              measure_memory(impl, job["objective"], job["calls"], job["method"]))
    print(RESULT_MARK + json.dumps(result), flush=True)


def run_in_child(job: dict) -> dict:
    env = ({"LD_PRELOAD": str(adbench_impls.heap_counter_path())} if job["method"] == "heap" else None)
    return micro_run_in_child(job, "benchmarks.adbench", RESULT_MARK, CHILD_TIMEOUT_S, env)


def _memory_profiler_missing() -> str | None:
    try:
        import memory_profiler  # noqa: F401
    except ImportError:
        return "memory-profiler is not installed (pip install '.[bench]')"
    return None


PYTHON_FAMILIES = ("numpy", "PyTorch")
CROSS_CHECK = ("gmm", ("fsmooth-malloc", "numpy"))  # one case, both methods
# The target's two: the default's peak heap bytes equal its inputs plus its computed scratch, and
# the manual C++'s.
HEAP_IMPLS = (f"fsmooth-{adbench_impls.DEFAULT_VARIANT}", "manual")


def run_memory(calls_list, objectives) -> dict:
    """The ladder: per objective, implementation and call count, the peak memory in a fresh
    process; the checksums of all implementations compared (relative 1e-9)."""
    from tqdm import tqdm

    impls = adbench_impls.ladder_implementations()
    machine = micro_report.machine()
    machine["torch"] = _torch_version()
    jobs = []
    for objective in objectives:
        for impl in impls:
            method = "memory_profiler" if impl.family in PYTHON_FAMILIES else "rss"
            for calls in calls_list:
                jobs.append((objective, impl, calls, method))
                if objective == CROSS_CHECK[0] and impl.key in CROSS_CHECK[1]:
                    other = "rss" if method == "memory_profiler" else "memory_profiler"
                    jobs.append((objective, impl, calls, other))
    results = {"machine": machine, "calls": list(calls_list),
               "cases": {o: adbench_impls.MEMORY_CASES[o].name for o in objectives},
               "cross_check": {"objective": CROSS_CHECK[0], "implementations": list(CROSS_CHECK[1])},
               "objectives": {o: {} for o in objectives},
               "heap": {o: {key: {} for key in HEAP_IMPLS} for o in objectives}}
    heap_jobs = [(objective, key, calls) for objective in objectives for key in HEAP_IMPLS
                 for calls in calls_list]
    with tqdm(total=len(jobs) + len(heap_jobs), unit="run", desc="ADBench memory ladder") as progress:
        for objective, impl, calls, method in jobs:
            progress.set_postfix_str(f"{objective} {impl.key} {calls}")
            record = results["objectives"][objective].setdefault(impl.key, {
                "label": impl.label, "family": impl.family, "variant": impl.variant,
                "method": "memory_profiler" if impl.family in PYTHON_FAMILIES else "rss",
                "status": "ok", "note": None, "memory": {}, "other_method": {}})
            why_not = adbench_impls.unavailable(impl) or (
                _memory_profiler_missing() if method == "memory_profiler" else None)
            if why_not and method == record["method"]:
                record.update(status="unavailable", note=why_not)
            elif record["status"] == "ok" and not why_not:
                result = run_in_child({"impl": impl.key, "objective": objective, "calls": calls,
                                       "method": method})
                if "error" in result:
                    record.update(status="error", note=f"{result['error']} (at {calls} calls)")
                else:
                    target = record["memory"] if method == record["method"] else record["other_method"]
                    target[str(calls)] = result
            progress.update(1)
        for objective, key, calls in heap_jobs:
            progress.set_postfix_str(f"{objective} {key} {calls} heap")
            results["heap"][objective][key][str(calls)] = run_in_child(
                {"impl": key, "objective": objective, "calls": calls, "method": "heap"})
            progress.update(1)
    for objective, by_impl in results["objectives"].items():
        _check_ladder_checksums(by_impl, results["heap"][objective])
    return results


def _check_ladder_checksums(by_impl: dict, heap: dict) -> None:
    """Every ladder record's checksums (its heap runs' too) against the manual C++'s."""
    import math

    reference = by_impl.get("manual", {}).get("memory", {})
    for key, record in by_impl.items():
        if record["status"] != "ok":
            continue
        for calls, memory in (list(record["memory"].items()) + list(record["other_method"].items())
                              + [(c, m) for c, m in heap.get(key, {}).items() if "error" not in m]):
            expected = reference.get(calls, {}).get("checksum")
            if expected is not None and not math.isclose(memory["checksum"], expected, rel_tol=1e-9,
                                                          abs_tol=1e-9 * int(calls)):
                record.update(status="wrong checksum",
                              note=f"{memory['checksum']!r} at {calls} calls, manual C++ gives {expected!r}")
                break


# ----------------------------------------------------------------------------- main

def _select(cases, objectives):
    return [case for case in cases if case.objective in objectives]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adbench",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true",
                       help="smoke run: the smallest case of each objective, short timing (seconds "
                            "once built; the first build of the fsmooth kernels takes a minute or two)")
    sizes.add_argument("--reduced", action="store_true",
                       help="GMM d ∈ {2, 10, 20} × K ∈ {5, 25}, n = 1k; BA ba1–ba3; Hand hand1–hand5; "
                            "LSTM l = 2, c = 1024 (about 15 minutes on a loaded two-core machine)")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES),
                        help="comma-separated subset of gmm,ba,hand,lstm (default: all)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help=f"time limit of one measurement (default {FULL['max_seconds']:g}, "
                             f"{QUICK['max_seconds']:g} with --quick); at least one sample is always taken")
    parser.add_argument("--min-measurable", type=float, default=None,
                        help=f"a sample's minimum duration (ADBench: {FULL['min_measurable_s']:g} s)")
    parser.add_argument("--samples", type=int, default=None,
                        help=f"samples per measurement (ADBench: {FULL['samples']})")
    parser.add_argument("--memory", action="store_true",
                        help=f"the memory ladder instead of the times: calls {MEMORY_CALLS} "
                             f"({QUICK_MEMORY_CALLS} with --quick), GMM, BA and Hand")
    parser.add_argument("--calls", default=None,
                        help="the memory ladder's call counts, comma-separated (default "
                             f"{','.join(map(str, MEMORY_CALLS))}; the leaky variants' memory grows "
                             "with them: about 10 MB a call for BA's ba1)")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR,
                        help="where the JSON and the plots go (default: benchmarks/results)")
    parser.add_argument("--report", type=pathlib.Path, default=None,
                        help="the Markdown report whose ADBench section is rewritten (default: "
                             "benchmarks/RESULTS.md, or OUT/RESULTS.md with --quick)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_main(args.child)
        return 0

    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    unknown = set(objectives) - set(OBJECTIVES)
    if unknown:
        parser.error(f"unknown objectives {sorted(unknown)}; choose among {','.join(OBJECTIVES)}")
    report = args.report or (args.out / "RESULTS.md" if args.quick else REPORT)
    preset = "quick" if args.quick else "reduced" if args.reduced else "full"
    args.out.mkdir(parents=True, exist_ok=True)

    if args.memory:
        objectives = [o for o in objectives if o in adbench_impls.MEMORY_CASES]
        calls = (tuple(int(c) for c in args.calls.split(",")) if args.calls
                 else QUICK_MEMORY_CALLS if args.quick else MEMORY_CALLS)
        results = run_memory(calls, objectives)
        results["preset"] = preset
        (args.out / "adbench_memory.json").write_text(json.dumps(results, indent=1) + "\n")
        problems = adbench_report.memory_problems(results)
    else:
        settings = dict(QUICK if args.quick else FULL, preset=preset)
        for key, value in (("max_seconds", args.max_seconds), ("min_measurable_s", args.min_measurable),
                           ("samples", args.samples)):
            if value is not None:
                settings[key] = value
        settings["manual_flags"] = list(adbench_impls.MANUAL_FLAGS)
        settings["eigen_flags"] = list(adbench_impls.EIGEN_FLAGS)
        settings["fsmooth_flags"] = [*adbench_impls.micro_impls.cache.COMPILE_ARGS, *adbench_impls.micro_impls.cache.host_flags()]
        cases = {"quick": adbench_impls.QUICK_CASES, "reduced": adbench_impls.REDUCED_CASES,
                 "full": adbench_impls.FULL_CASES}[preset]
        results = run_times(_select(cases, objectives), settings)
        (args.out / "adbench.json").write_text(json.dumps(results, indent=1) + "\n")
        print(adbench_report.text_tables(results))
        problems = adbench_report.time_problems(results)
    adbench_report.write_section(report, args.out, ("memory",) if args.memory else ("time",))
    print(f"wrote {args.out} and the ADBench section of {report}")
    for problem in problems:
        print(f"WRONG: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
