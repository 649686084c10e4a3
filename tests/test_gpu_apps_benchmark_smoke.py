"""Smoke test of the GPU application benchmark (``python -m benchmarks.gpu_apps --preset tiny``)
on the OpenCL tests' device (fsmooth's default where it builds kernels, else Oclgrind): kernels of
each kind (a scalar and a tuple result from ADBench, the latter in both precisions, a two-launch
stencil, the row softmax) run through fsmooth's OpenCL and the CPU baselines, every result passes the check
against the numpy oracle before it is timed, and the JSON, the table and the RESULTS.md section
hold what the report needs.  A kernel that does not compile through OpenCL is recorded with its
error.  No timing is asserted."""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pyopencl")

from test_blas_benchmark_smoke import _device_environment  # noqa: E402

import fsmooth as fs  # noqa: E402
from fsmooth import Array, Double, build, length  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ("gmm", "ba", "gaussian_blur3", "softmax_rows")


def _benchmarks():
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from benchmarks import gpu_apps, gpu_apps_report
    finally:
        sys.path.remove(str(REPO_ROOT))
    return gpu_apps, gpu_apps_report


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_apps")
    command = [sys.executable, "-m", "benchmarks.gpu_apps", "--preset", "tiny", "--kernels", ",".join(KERNELS),
               "--out", str(out)]
    try:
        import torch  # noqa: F401
    except ImportError:
        command += ["--baselines", "numpy"]
    else:
        command += ["--torch-threads", "1"]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                          env=_device_environment())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    written = sorted(out.glob("gpu_apps*.json"))
    assert len(written) == 1, [p.name for p in out.iterdir()]
    return json.loads(written[0].read_text()), done.stdout, out


def test_every_kernel_is_checked_then_timed_against_the_baselines(tiny_run):
    results, stdout, _ = tiny_run
    assert results["settings"]["preset"] == "tiny"
    assert results["kind"] in ("cpu", "simulator")
    baselines = results["settings"]["baselines"]
    assert "numpy" in baselines and "torch.compile" not in baselines
    seen = {(r["kernel"], r["dtype"]) for r in results["records"]}
    assert seen == {("gmm", "float64"), ("ba", "float32"), ("ba", "float64"), ("gaussian_blur3", "float32"),
                    ("gaussian_blur3", "float64"), ("softmax_rows", "float32"), ("softmax_rows", "float64")}
    for r in results["records"]:
        assert set(r["implementations"]) == {"fsmooth", *baselines}
        for impl, side in r["implementations"].items():
            where = (r["kernel"], r["dtype"], impl)
            assert side["status"] == "ok", (where, side.get("note"))
            assert side["check"]["ok"] and side["check"]["max_error_over_scale"] <= side["check"]["rtol"], where
            assert side["runs"] == results["settings"]["repeats"] == len(side["times_s"]), where
            assert side["median_s"] > 0, where
        assert set(r["speed"]) == set(baselines)
        for b in baselines:
            assert r["speed"][b] == pytest.approx(r["implementations"][b]["median_s"]
                                                  / r["implementations"]["fsmooth"]["median_s"])
    fsmooth = {(r["kernel"], r["dtype"]): r["implementations"]["fsmooth"] for r in results["records"]}
    assert fsmooth[("gaussian_blur3", "float32")]["launches"] == 2  # the two passes of the blur
    assert "speed vs numpy" in stdout and "gaussian_blur3" in stdout


def test_the_report_section_names_the_device_and_reads_the_figures(tiny_run, tmp_path):
    results, _, out = tiny_run
    _, report = _benchmarks()
    if results["kind"] != "cpu":
        pytest.skip("the report holds GPU and CPU-device runs; this one ran on a simulator")
    (tmp_path / "RESULTS.md").write_text("# Results\n\n## Another section\n\nkept\n")
    report.write_section(tmp_path / "RESULTS.md", out)
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## Another section\n\nkept" in text
    assert text.count(report.SECTION_TITLE) == 1
    assert results["device"]["name"] in text and results["machine"]["cpu"] in text
    assert "Preset tiny" in text and "gaussian_blur3" in text
    assert f"No results yet (`{out.name}/gpu_apps.json` is missing)" in text  # no GPU run there
    report.write_section(tmp_path / "RESULTS.md", out)  # replaces its own section only
    assert (tmp_path / "RESULTS.md").read_text() == text


@fs.foreign(c_source="double twice(double x) { return 2.0 * x; }")
def twice(x: Double) -> Double:
    return 2.0 * x


@fs.kernel
def doubled(v: Array[Double]) -> Array[Double]:
    return build(length(v), lambda i: twice(v[i]))


def test_a_kernel_that_does_not_compile_through_opencl_is_recorded():
    """A foreign function without OpenCL source compiles to C but not to OpenCL: the record says
    so, with the compiler's message, and the run goes on."""
    gpu_apps, report = _benchmarks()
    from benchmarks.blas import NoDeviceError, choose_context

    try:
        context = choose_context("any")
    except NoDeviceError as err:
        pytest.skip(str(err))
    case = gpu_apps.Case("doubled", "3", "float64", 3, lambda rng: (np.arange(3.0),), doubled,
                         lambda v: 2.0 * v, None)
    settings = dict(gpu_apps.PRESETS["tiny"], baselines=["numpy"])
    record = gpu_apps.run_case(case, context, "cpu", ("numpy",), settings,
                               gpu_apps.Extrapolation(settings["max_call_s"]), lambda what: None)
    fsmooth = record["implementations"]["fsmooth"]
    assert fsmooth["status"] == "compile failed"
    assert "CompileError" in fsmooth["note"] and "twice" in fsmooth["error"]
    assert record["implementations"]["numpy"]["status"] == "ok" and record["speed"] == {}
    results = {"settings": settings, "records": [record]}
    assert "compile failed" in report.text_table(results)
    assert report.problems(results) == [f"doubled 3 float64: fsmooth compile failed: {fsmooth['note']}"]


def test_a_size_too_slow_by_extrapolation_is_not_run():
    gpu_apps, _ = _benchmarks()
    extrapolation = gpu_apps.Extrapolation(max_call_s=1.0)
    small, large = (gpu_apps.Case("k", label, "float64", work, None, None, None, None)
                    for label, work in (("small", 10), ("large", 1000)))
    assert extrapolation.too_slow("fsmooth", small) is None  # nothing measured yet: it runs
    extrapolation.record("fsmooth", small, {"status": "ok", "median_s": 0.02})
    skipped = extrapolation.too_slow("fsmooth", large)  # 0.02 s × 100 = 2 s > 1 s
    assert skipped["status"] == "not run" and skipped["predicted_s"] == pytest.approx(2.0)
    assert extrapolation.too_slow("numpy", large) is None  # another implementation's own history
    assert gpu_apps.repeats_within(10.0, {"repeats": 50, "budget_s": 8.0}) == gpu_apps.MIN_REPEATS
    assert gpu_apps.repeats_within(1e-4, {"repeats": 50, "budget_s": 8.0}) == 50


def test_a_case_after_the_time_limit_is_recorded_as_not_run():
    gpu_apps, report = _benchmarks()
    case = gpu_apps.Case("softmax_rows", "8192²", "float32", 8192 ** 2, None, None, None, None)
    record = gpu_apps.over_time(case, ("torch", "torch.compile"), 450.0)
    assert set(record["implementations"]) == {"fsmooth", "torch", "torch.compile"} and record["speed"] == {}
    assert all(side["status"] == "not run" and "time limit of 7.5 min" in side["note"]
               for side in record["implementations"].values())
    results = {"kind": "gpu", "settings": {"baselines": ["torch", "torch.compile"]}, "records": [record]}
    assert report.text_table(results).splitlines()[-1].split()[3:6] == ["not", "run", "not"]
    assert report.rows(results)[0][-2] == "not judged"


def test_a_run_in_parts_merges_into_one_json():
    """A full GPU run does not fit in one command of the GPU machine: its parts (other --kernels)
    merge, a case measured again replacing the earlier record."""
    gpu_apps, _ = _benchmarks()

    def record(kernel, ms):
        return {"kernel": kernel, "size": "1", "dtype": "float32", "speed": {}, "implementations": {"ms": ms}}
    earlier = {"records": [record("ba", 1), record("gmm", 2)], "wall_s": 60.0, "command": "part 1", "complete": True}
    later = {"records": [record("gmm", 3), record("softmax_rows", 4)], "wall_s": 30.0, "command": "part 2",
             "complete": True}
    both = gpu_apps.merged(later, earlier)
    assert [(r["kernel"], r["implementations"]["ms"]) for r in both["records"]] == [("ba", 1), ("gmm", 3),
                                                                                   ("softmax_rows", 4)]
    assert both["wall_s"] == 90.0 and both["command"] == "part 1; then part 2" and both["complete"]
    assert gpu_apps.merged(later, None) is later
