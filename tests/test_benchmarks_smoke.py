"""Smoke test of the micro-benchmark harness: ``python -m benchmarks.micro --quick`` runs every
implementation, agrees on the checksums and writes its outputs.  No timing is asserted."""
import json
import math
import pathlib
import subprocess
import sys

import pytest

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
