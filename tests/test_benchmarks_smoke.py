"""Smoke test of the micro-benchmark harness: ``python -m benchmarks.micro --quick`` runs every
implementation, agrees on the checksums and writes its outputs.  No timing is asserted."""
import json
import math
import pathlib
import shutil
import subprocess
import sys


REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent



def test_quick_run_measures_every_implementation_with_equal_checksums(tmp_path):
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from benchmarks import micro_impls
    finally:
        sys.path.remove(str(REPO_ROOT))

    done = subprocess.run([sys.executable, "-m", "benchmarks.micro", "--quick", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)  # bounded by --quick
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "micro.json").read_text())
    assert {p.name for p in tmp_path.iterdir()} >= {"micro.json", "micro_time.png", "micro_memory.png",
                                                   "RESULTS.md"}

    expected = {impl.key for impl in micro_impls.implementations()}
    counts = [str(c) for c in results["settings"]["counts"]]
    for bench, data in results["benchmarks"].items():
        by_impl = data["implementations"]
        assert set(by_impl) == expected, bench
        for key, record in by_impl.items():
            if record["status"] == "unavailable":  # e.g. no Eigen headers: said, not hidden
                assert record["note"], (bench, key)
                continue
            assert record["status"] == "ok", (bench, key, record["note"])
            assert len(record["times_s"]) >= 1 and record["median_s"] > 0
            for count in counts:
                checksum = record["memory"][count]["checksum"]
                reference = by_impl["hand-c"]["memory"][count]["checksum"]
                assert math.isclose(checksum, reference, rel_tol=1e-9, abs_tol=1e-9 * int(count)), \
                    (bench, key, count, checksum, reference)
        default = by_impl[f"fsmooth-{micro_impls.DEFAULT_VARIANT}"]
        assert default["scratch_bytes"][counts[0]] == default["scratch_bytes"][counts[-1]]


def test_call_overhead_benchmark_writes_every_way_of_calling(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.call_overhead", "--quick", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "call_overhead.json").read_text())
    assert set(results["kernels"]) == {"add", "total", "scale"}
    for name, row in results["kernels"].items():
        assert set(row["us_per_call"]) == {"fsmooth", "numba", "cffi"}, name
        assert all(t > 0 for t in row["us_per_call"].values()), name
        assert math.isclose(row["fsmooth_over_numba"], row["us_per_call"]["fsmooth"] / row["us_per_call"]["numba"])
    assert "fs/numba" in done.stdout


def _adbench_modules():
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from benchmarks import adbench_impls
    finally:
        sys.path.remove(str(REPO_ROOT))
    return adbench_impls


def test_adbench_quick_run_checks_and_times_every_implementation(tmp_path):
    """``python -m benchmarks.adbench --quick``: every implementation's result agreed with the
    numpy oracle (the command exits with 1 otherwise) and was timed; the JSON, the plots and the
    ADBench section are written."""
    adbench_impls = _adbench_modules()
    done = subprocess.run([sys.executable, "-m", "benchmarks.adbench", "--quick", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800)  # bounded by --quick
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "adbench.json").read_text())
    assert {p.name for p in tmp_path.iterdir()} >= {"adbench.json", "RESULTS.md", "adbench_gmm.png",
                                                   "adbench_ba.png", "adbench_hand.png", "adbench_lstm.png"}
    assert list(results["cases"]) == [case.name for case in adbench_impls.QUICK_CASES]
    expected = {impl.key for impl in adbench_impls.implementations()}
    for name, case in results["cases"].items():
        by_impl = case["implementations"]
        assert set(by_impl) == expected, name
        for key, record in by_impl.items():
            if record["status"] == "unavailable":  # e.g. no Eigen headers, no torch: said, not hidden
                assert record["note"], (name, key)
                continue
            assert record["status"] == "ok", (name, key, record["note"])
            assert record["time_s"] == min(record["samples_s"]) > 0 and record["repeats"] >= 1
        assert by_impl["manual"]["ratio_to_manual"] == 1.0
        assert by_impl[f"fsmooth-{adbench_impls.DEFAULT_VARIANT}"]["status"] == "ok"
    section = (tmp_path / "RESULTS.md").read_text()
    assert section.startswith("## ADBench (issue 11)") and "Reading against the targets" in section
    assert "fsmooth fastmath (not the default): " in section  # said beside the default, not instead


def test_adbench_check_refuses_a_wrong_result():
    """The check that guards every timing: a result off by more than the tolerance, or of the
    wrong shape, is refused; the oracle's own value is accepted."""
    adbench_impls = _adbench_modules()
    case = adbench_impls.QUICK_CASES[1]  # BA: a tuple of arrays
    expected = adbench_impls.oracle_result(case)
    assert adbench_impls.check(expected, expected) is None
    reproj, w_err = (e.copy() for e in expected)
    reproj[7, 1] += 1e-6 * max(1.0, abs(reproj).max())
    assert "max error" in adbench_impls.check((reproj, w_err), expected)
    assert "shape" in adbench_impls.check((reproj[:-1], w_err), expected)


def test_adbench_memory_ladder_quick(tmp_path):
    """``--memory --quick`` on GMM: every variant and baseline measured in its own process, their
    checksums equal to the manual C++'s, the cross-check rows there; the leaky variant's memory
    grows with the calls and the default's does not."""
    adbench_impls = _adbench_modules()
    done = subprocess.run([sys.executable, "-m", "benchmarks.adbench", "--memory", "--quick",
                           "--objectives", "gmm", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "adbench_memory.json").read_text())
    by_impl = results["objectives"]["gmm"]
    assert set(by_impl) == {impl.key for impl in adbench_impls.ladder_implementations()}
    calls = [str(c) for c in results["calls"]]
    for key, record in by_impl.items():
        if record["status"] == "unavailable":
            assert record["note"], key
            continue
        assert record["status"] == "ok", (key, record["note"])
        assert set(record["memory"]) == set(calls), key
    for key in results["cross_check"]["implementations"]:
        if by_impl[key]["status"] == "ok":
            assert set(by_impl[key]["other_method"]) == set(calls), key
    assert (tmp_path / "adbench_memory.png").stat().st_size > 0
    growth = {key: [by_impl[key]["memory"][c]["peak_growth_kib"] for c in calls]
              for key in ("fsmooth-leaky", f"fsmooth-{adbench_impls.DEFAULT_VARIANT}")}
    leaky, default = growth.values()
    assert leaky[-1] - leaky[0] > 500, growth  # about 1 MB a call leaks at this size
    assert abs(default[-1] - default[0]) <= 256, growth
    # the target, counted in bytes: the default's peak is its inputs plus its computed scratch
    heap = results["heap"]["gmm"]
    assert set(heap) == {f"fsmooth-{adbench_impls.DEFAULT_VARIANT}", "manual"}
    for key, by_calls in heap.items():
        assert set(by_calls) == set(calls), key
        for run in by_calls.values():
            assert "error" not in run, (key, run)
            assert abs(run["inputs_heap_bytes"] - run["inputs_bytes"]) <= 4096, (key, run)
    for run in heap[f"fsmooth-{adbench_impls.DEFAULT_VARIANT}"].values():
        assert run["scratch_bytes"] > 0
        assert 0 <= run["peak_growth_bytes"] - run["scratch_bytes"] <= 4096, run
    section = (tmp_path / "RESULTS.md").read_text()
    assert "### Memory ladder" in section and "#### Reading against the target" in section


def test_adbench_time_and_memory_runs_keep_each_others_subsection(tmp_path):
    """A time run rewrites the time subsection of the ADBench section and a memory run the
    memory ladder, each keeping the other's as the report has it (a time run whose --out held no
    adbench_memory.json once dropped the ladder), and the report's other sections."""
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from benchmarks import adbench_report
    finally:
        sys.path.remove(str(REPO_ROOT))
    committed = REPO_ROOT / "benchmarks" / "results"
    times, memory = tmp_path / "times", tmp_path / "memory"
    for folder, name in ((times, "adbench.json"), (memory, "adbench_memory.json")):
        folder.mkdir()
        shutil.copy(committed / name, folder / name)
    report = tmp_path / "RESULTS.md"
    report.write_text("# Other\n\nkept\n")

    adbench_report.write_section(report, memory, ("memory",))
    first = report.read_text()
    assert "### Memory ladder" in first and "### Time" not in first
    ladder = first[first.index("### Memory ladder"):]
    adbench_report.write_section(report, times, ("time",))
    both = report.read_text()
    assert both.startswith("# Other\n\nkept\n") and both.count("## ADBench (issue 11)") == 1
    assert both.index("### Time") < both.index("### Memory ladder") and both.endswith(ladder)
    time_part = both[both.index("### Time"):both.index("### Memory ladder")]

    results = json.loads((memory / "adbench_memory.json").read_text())
    results["machine"]["date"] = "1999-12-31 23:59 UTC"  # a new memory run
    (memory / "adbench_memory.json").write_text(json.dumps(results))
    adbench_report.write_section(report, memory, ("memory",))
    again = report.read_text()
    assert time_part in again and "1999-12-31 23:59 UTC" in again and again.count("### Memory ladder") == 1


def test_scan_filter_benchmark_checks_and_times_every_case(tmp_path):
    """``python -m benchmarks.scan_filter --quick``: every case agreed with numpy (it asserts so
    before timing) and was timed at both sizes; the JSON and the plot are written."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.scan_filter", "--quick", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "scan_filter.json").read_text())
    assert {p.name for p in tmp_path.iterdir()} >= {"scan_filter.json", "scan_filter.png"}
    assert set(results["cases"]) == {"cumsum", "filter", "filter+sum"}
    for name, by_size in results["cases"].items():
        assert set(by_size) == {str(n) for n in results["settings"]["sizes"]}, name
        for row in by_size.values():
            assert row["fsmooth_s"] > 0 and row["numpy_s"] > 0
            assert math.isclose(row["numpy_over_fsmooth"], row["numpy_s"] / row["fsmooth_s"])
            assert row["scratch_bytes"] == 0  # the scan and the filter write the result, the fused one nothing
    assert "load average" in done.stdout


def test_scan_filter_opencl_benchmark_refreshes_only_its_section(tmp_path):
    """``python -m benchmarks.scan_filter --opencl`` at small sizes on the local OpenCL device:
    both cases checked and timed (device time, 50 calls), the JSON and the plot written, and its
    section of a RESULTS.md replaced (an earlier run's), with the other sections kept."""
    results_md = tmp_path / "RESULTS.md"
    results_md.write_text("# Results\n\n## Before\n\nkept\n\n## OpenCL: scan and filter against torch on the GPU "
                          "(issue 14)\n\nstale\n\n## After\n\nkept too\n")
    command = [sys.executable, "-m", "benchmarks.scan_filter", "--opencl", "--sizes", "0.01,0.1",
               "--repeats", "50", "--out", str(tmp_path), "--results-md", str(results_md)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "scan_filter_opencl.json").read_text())
    assert {"scan_filter_opencl.json", "scan_filter_opencl.png"} <= {p.name for p in tmp_path.iterdir()}
    assert set(results["cases"]) == {"cumsum", "filter", "filter one launch"}
    for name, by_size in results["cases"].items():
        assert set(by_size) == {str(n) for n in results["settings"]["sizes"]}
        for row in by_size.values():
            assert row["fsmooth_s"] > 0 and row["baseline_s"] > 0 and len(row["fsmooth_times_s"]) == 50
            # the single-pass scan (dpia.scan_opencl); a filter's three phases and its length's copy
            assert len(row["launches"]) == (4 if name == "filter" else 1)
    text = results_md.read_text()
    assert text.count("## OpenCL: scan and filter") == 1 and "stale" not in text
    assert "kept\n" in text and "kept too" in text and "| cumsum |" in text
    assert text.index("## Before") < text.index("## OpenCL: scan and filter") < text.index("## After")
