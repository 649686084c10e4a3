"""Smoke test of the BLAS benchmark (``python -m benchmarks.blas --quick``): on the OpenCL device
the OpenCL tests use (fsmooth's default device where it builds kernels, else Oclgrind's
simulator), every kernel runs, its result passes the check against the numpy oracle, numpy is the
baseline, and the JSON, and the RESULTS.md section made from it, hold what the report needs.  No
timing is asserted."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

cl = pytest.importorskip("pyopencl")

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = {"scal", "asum", "dot", "gemv", "dot_auto", "asum_auto", "gemv_auto"}


def _device_environment() -> dict:
    """The environment that puts the benchmark on the OpenCL tests' device: fsmooth's default
    where it builds a trivial kernel (Intel's CPU runtime, or PoCL), else Oclgrind (PoCL 3.0's
    LLVM cannot target some newer CPUs)."""
    from fsmooth.opencl_device import builds_kernels, select_context

    env = dict(os.environ)
    if env.get("PYOPENCL_CTX"):
        return env
    try:
        if builds_kernels(select_context().devices[0]):
            return env
    except RuntimeError:
        pass
    if not any(p.name == "Oclgrind" for p in cl.get_platforms()):
        pytest.skip("no OpenCL device builds kernels here, and Oclgrind is not installed")
    env["PYOPENCL_CTX"] = "oclgrind"
    return env


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("blas")
    done = subprocess.run([sys.executable, "-m", "benchmarks.blas", "--quick", "--device", "any",
                           "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,  # bounded by --quick; generous for a loaded machine
                          env=_device_environment())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    written = sorted(out.glob("blas_*.json"))
    assert len(written) == 1, [p.name for p in out.iterdir()]
    return json.loads(written[0].read_text()), done.stdout


def test_quick_run_checks_every_kernel_against_numpy(quick_run):
    results, stdout = quick_run
    assert results["settings"]["quick"] is True
    assert results["device"]["kind"] in ("cpu", "simulator")
    assert results["baseline"] == "numpy"
    assert results["device"]["name"] and results["device"]["driver"]
    by_kernel = {r["kernel"]: r for r in results["records"]}
    assert set(by_kernel) == KERNELS
    for kernel, record in by_kernel.items():
        for side in ("fsmooth", "baseline"):
            assert "error" not in record[side], (kernel, side, record[side].get("error"))
            assert record[side]["check"]["ok"] is True, (kernel, side, record[side]["check"])
            assert len(record[side]["times_s"]) == results["settings"]["repeats"]
            assert record[side]["median_s"] > 0 and record[side]["gb_per_s"] > 0
        assert record["speed_vs_baseline"] > 0
        assert record["bytes_moved"] > 0
    assert by_kernel["dot"]["bytes_moved"] == 8 * by_kernel["dot"]["size"]
    assert "gemv" in stdout and "WRONG" not in stdout


def test_report_section_replaces_only_itself(quick_run, tmp_path):
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from benchmarks import blas_report
    finally:
        sys.path.remove(str(REPO_ROOT))
    results, _ = quick_run
    (tmp_path / "blas_cpu.json").write_text(json.dumps(results))
    report = tmp_path / "RESULTS.md"
    micro = "# Micro-benchmarks\n\ntext\n\n## add3\n\n| a |\n|---|\n"
    report.write_text(micro)
    blas_report.write_section(report, tmp_path)
    blas_report.write_section(report, tmp_path)  # a second run replaces, never duplicates
    text = report.read_text()
    assert text.startswith(micro)
    assert text.count(blas_report.SECTION_TITLE) == 1
    section = text[text.index(blas_report.SECTION_TITLE):]
    assert "smoke run" in section and results["device"]["name"] in section
    assert "No results yet" in section  # no blas_gpu.json here
    for kernel in KERNELS:
        assert f"**{kernel}**" in section
