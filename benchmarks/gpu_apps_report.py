"""Turning the GPU application benchmark's measurements (``gpu_apps.json`` from a GPU,
``gpu_apps_cpu.json`` from a CPU OpenCL device) into a table, a plot and the "GPU applications"
section of ``RESULTS.md``, with the reading against issue 12's target (fsmooth at least as fast as
``torch.compile`` on every kernel and size) computed from the numbers.

    python -m benchmarks.gpu_apps_report     # rewrite the section from benchmarks/results/gpu_apps*.json

Only that section of ``RESULTS.md`` is replaced (or appended); the rest of the file is kept.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

if __package__ in (None, ""):  # run as a script: python benchmarks/gpu_apps_report.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks.blas_report import rewrite_section  # noqa: E402
from benchmarks.micro_report import _markdown_table, _text_table  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
REPORT = REPO_ROOT / "benchmarks" / "RESULTS.md"

SECTION_TITLE = "## GPU applications without annotations: fsmooth's OpenCL against PyTorch (issue 12)"
TARGET = "torch.compile"
TARGET_SPEED = 1.0  # issue 12: at least as fast as torch.compile on every kernel and size
MIN_RUNS = 50  # the least number of timed calls behind a median
FILES = {"gpu": "gpu_apps.json", "cpu": "gpu_apps_cpu.json"}
NAMES = {"fsmooth": "fsmooth", "torch": "PyTorch eager", "torch.compile": "torch.compile", "numpy": "numpy"}
COLOURS = {"torch": "tab:orange", "torch.compile": "tab:red", "numpy": "tab:green"}


# ----------------------------------------------------------------------------- one record

def _time(side: dict) -> str:
    status = side.get("status")
    if status != "ok":
        return {"compile failed": "compile failed", "not run": "not run",
                "wrong result": "**wrong result**", "run failed": "run failed"}.get(status, status or "")
    runs = f" ({side['runs']} runs)" if side["runs"] < MIN_RUNS else ""
    return f"{side['median_ms']:.4g}{runs}"


def _speed(record: dict, baseline: str) -> str:
    speed = record["speed"].get(baseline)
    return f"{speed:.2f}×" if speed is not None else ""


def judged(results: dict) -> bool:
    """Whether the run is read against the target: a GPU run with torch.compile among the baselines."""
    return results.get("kind") == "gpu" and TARGET in results["settings"]["baselines"]


def _verdict(record: dict) -> str:
    speed = record["speed"].get(TARGET)
    if speed is None:
        return "not judged"
    return "met" if speed >= TARGET_SPEED else "**missed**"


def _notes(record: dict) -> str:
    fsmooth = record["implementations"]["fsmooth"]
    notes = []
    if "launches" in fsmooth:
        notes.append(f"{fsmooth['launches']} launch{'es' if fsmooth['launches'] != 1 else ''}"
                     + (" (a fallback: a row in global memory)" if fsmooth.get("fallbacks") else ""))
    if fsmooth.get("check", {}).get("ok"):
        notes.append(f"checked ({fsmooth['check']['max_error_over_scale']:.1e})")
    for impl, side in record["implementations"].items():
        if side.get("status") not in ("ok", None) and side.get("note"):
            notes.append(f"{NAMES[impl]}: {side['note']}")
    return "; ".join(notes)


def header(results: dict) -> list[str]:
    baselines = results["settings"]["baselines"]
    columns = ["kernel", "size", "dtype", "fsmooth ms"] + [f"{NAMES[b]} ms" for b in baselines]
    columns += [f"speed vs {NAMES[b]}" for b in baselines]
    if judged(results):
        columns.append(f"target ≥ {TARGET_SPEED:g}× {TARGET}")
    return columns + ["notes"]


def rows(results: dict) -> list[list[str]]:
    baselines = results["settings"]["baselines"]
    out = []
    for r in results["records"]:
        row = [r["kernel"], r["size"], r["dtype"], _time(r["implementations"]["fsmooth"])]
        row += [_time(r["implementations"][b]) for b in baselines]
        row += [_speed(r, b) for b in baselines]
        if judged(results):
            row.append(_verdict(r))
        out.append(row + [_notes(r)])
    return out


def text_table(results: dict) -> str:
    return _text_table(header(results), [[cell.replace("**", "") for cell in row] for row in rows(results)])


def one_line(record: dict) -> str:
    parts = [f"{NAMES[impl]} {_time(side)}" for impl, side in record["implementations"].items()]
    return "; ".join(parts + [f"speed vs {NAMES[b]} {s:.2f}×" for b, s in record["speed"].items()])


def problems(results: dict) -> list[str]:
    """A line per implementation that did not give a checked time: what failed and why."""
    lines = []
    for r in results["records"]:
        for impl, side in r["implementations"].items():
            if side.get("status") != "ok":
                lines.append(f"{r['kernel']} {r['size']} {r['dtype']}: {NAMES[impl]} {side['status']}: "
                             f"{side.get('note', '')}")
    return lines


# ----------------------------------------------------------------------------- plot

def plot(results: dict, path: pathlib.Path) -> pathlib.Path | None:
    """Speed (baseline time / fsmooth time) per case and baseline, log scale, the target line at
    1; None without matplotlib or without any speed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    baselines = results["settings"]["baselines"]
    records = results["records"]
    if not any(r["speed"] for r in records):
        return None
    height = 0.8 / max(1, len(baselines))
    fig, ax = plt.subplots(figsize=(9.0, 1.2 + 0.32 * len(records) * max(1, len(baselines)) ** 0.5))
    for j, baseline in enumerate(baselines):
        ys = [i + (j - (len(baselines) - 1) / 2) * height for i, r in enumerate(records) if baseline in r["speed"]]
        xs = [r["speed"][baseline] for r in records if baseline in r["speed"]]
        ax.barh(ys, xs, height, label=f"vs {NAMES[baseline]}", color=COLOURS.get(baseline))
    for i, r in enumerate(records):
        if not r["speed"]:
            status = r["implementations"]["fsmooth"].get("status", "")
            ax.text(1.0, i, f"  fsmooth: {status}", va="center", fontsize=7)
    ax.axvline(TARGET_SPEED, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(records)), [f"{r['kernel']} {r['size']} f{r['dtype'][5:]}" for r in records], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speed = baseline's median time / fsmooth's (log scale; > 1: fsmooth faster)")
    ax.set_title(f"{results['device']['name']}: fsmooth OpenCL (no annotations) against "
                 f"{', '.join(NAMES[b] for b in baselines)}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- RESULTS.md

def _machine_line(results: dict) -> str:
    d, m = results["device"], results["machine"]
    software = f"Python {m['python']}, numpy {m['numpy']}, pyopencl {m['pyopencl']}, PyTorch {m.get('torch')}"
    if m.get("torch_cuda"):
        software += f" (CUDA {m['torch_cuda']})"
    if results["kind"] != "gpu" and "torch_threads" in results["settings"]:
        software += f" on {results['settings']['torch_threads']} CPU thread(s)"
    gpu = f"; nvidia-smi: {m['nvidia_smi']}" if m.get("nvidia_smi") else ""
    if results["kind"] != "gpu" and m.get("load_average_1min") is not None:
        software += f"; load average {m['load_average_1min']:.1f} at the start"
    return (f"**Device**: {d['name']} ({d['platform']}, {d['opencl_version']}, driver {d['driver']}, "
            f"{d['compute_units']} compute units, {d['global_memory_gib']} GiB){gpu}; host CPU {m['cpu']}, "
            f"{m['cores']} cores; {software}; run on {m['date']} with `{results['command']}` "
            f"(preset {results['settings']['preset']}: {results['wall_s'] / 60:.1f} min in all"
            + ("" if results.get("complete", True) else "; **incomplete**: the run stopped before its end")
            + ").")


def reading(results: dict) -> list[str]:
    """Per kernel and dtype: the speed against each baseline at every size, and against
    torch.compile whether the target holds; failures said."""
    baselines = results["settings"]["baselines"]
    sentences = []
    groups = dict.fromkeys((r["kernel"], r["dtype"]) for r in results["records"])
    for kernel, dtype in groups:
        records = [r for r in results["records"] if (r["kernel"], r["dtype"]) == (kernel, dtype)]
        parts = []
        for b in baselines:
            speeds = [f"{r['speed'][b]:.2f}× at {r['size']}" for r in records if b in r["speed"]]
            if speeds:
                parts.append(f"vs {NAMES[b]} " + ", ".join(speeds))
        text = f"**{kernel}** ({dtype}): " + ("; ".join(parts) if parts else "no comparison")
        if judged(results):
            missing = [r["size"] for r in records if TARGET not in r["speed"]]
            short = [f"{r['size']} ({r['speed'][TARGET]:.2f}×)" for r in records
                     if r["speed"].get(TARGET, TARGET_SPEED) < TARGET_SPEED]
            if short:
                text += f" — target ≥ {TARGET_SPEED:g}× {TARGET} **missed** at {', '.join(short)}"
            elif not missing:
                text += f" — target ≥ {TARGET_SPEED:g}× {TARGET} **met** at every size"
            if missing:
                text += f"; not judged at {', '.join(missing)}"
        failures = [f"{NAMES[i]} {s['status']} at {r['size']} ({s.get('note', '')})" for r in records
                    for i, s in r["implementations"].items() if s.get("status") != "ok"]
        if failures:
            text += ". " + "; ".join(failures)
        sentences.append(text + ".")
    return sentences


def summary(results: dict) -> str | None:
    """How many kernel-sizes meet the target, on a GPU run."""
    if not judged(results):
        return None
    compared = [r for r in results["records"] if TARGET in r["speed"]]
    met = [r for r in compared if r["speed"][TARGET] >= TARGET_SPEED]
    return (f"Target ≥ {TARGET_SPEED:g}× {TARGET}: met on {len(met)} of {len(compared)} kernel-sizes compared "
            f"({len(results['records']) - len(compared)} not compared: fsmooth or {TARGET} gave no checked time).")


def _kind_section(kind: str, results: dict | None, report_dir: pathlib.Path, results_dir: pathlib.Path) -> list[str]:
    title = {"gpu": "GPU: against PyTorch eager and torch.compile on CUDA",
             "cpu": "CPU OpenCL device: against numpy and PyTorch on the CPU"}[kind]
    parts = ["", f"### {title}", ""]
    if results is None:
        how = ("python -m benchmarks.gpu_apps --device gpu" if kind == "gpu"
               else "python -m benchmarks.gpu_apps --device cpu --preset small")
        return parts + [f"No results yet (`{results_dir.name}/{FILES[kind]}` is missing): run `{how}`."]
    if results["settings"]["preset"] in ("small", "tiny"):
        parts += [f"**Preset {results['settings']['preset']}: sizes far below the issue's (images "
                  f"{results['settings']['image']}², softmax {results['settings']['softmax']}²), to show the "
                  "harness end to end on this device; not the benchmark's sizes.**", ""]
    parts += [_machine_line(results), "", _markdown_table(header(results), rows(results)), ""]
    line = summary(results)
    if line:
        parts += [line, ""]
    parts += [f"- {sentence}" for sentence in reading(results)]
    png = results_dir / f"{FILES[kind][:-5]}.png"
    if png.exists():
        parts += ["", f"![{png.stem}]({pathlib.Path(os.path.relpath(png, report_dir)).as_posix()})"]
    return parts


def markdown_section(by_kind: dict, report_dir: pathlib.Path, results_dir: pathlib.Path) -> str:
    parts = [
        SECTION_TITLE,
        "",
        "Generated by `python -m benchmarks.gpu_apps` (or `python -m benchmarks.gpu_apps_report` from the "
        f"JSON files in `{os.path.relpath(results_dir, REPO_ROOT)}`); do not edit by hand. Every kernel is "
        "written without strategy annotations (tests/corpus/: `adbench_gmm`, `adbench_ba`, `adbench_hand`, "
        "`adbench_lstm`, `ba_f32`, `image`, `ml`, `vision`), so its OpenCL is whatever fsmooth's default strategy "
        "makes of it. GMM, Hand and LSTM run in float64 (ADBench's type); BA, the blurs, the Sobel magnitude "
        "and the row softmax in float32 and float64. The baselines are the natural PyTorch code of the same "
        "computation (`benchmarks/adbench_torch.py`; `benchmarks/gpu_apps_torch.py`: `F.conv2d` of the "
        "replicate-padded image, `torch.softmax`), eager and through `torch.compile` (default mode, "
        "`dynamic=False`; LSTM's time step is compiled, not its loop over the characters; TF32 off, so "
        "that float32 is IEEE single precision as fsmooth's Float is), and on a CPU "
        "device numpy and PyTorch's CPU backend. Inputs are on the device before the timing; each "
        "implementation's first result is checked against the numpy oracle in float64 (|error| ≤ rtol × "
        "the largest |value|; rtol 1e-9 for float64, 1e-4 for float32). fsmooth's time is the device "
        "time of one call from the OpenCL profiling events (the sum of its launches, leaving out the "
        "gaps between them); PyTorch's on CUDA is one call between two CUDA events, which includes "
        "its launch gaps and Python dispatch where the GPU waits for it: if anything this favours "
        "fsmooth. Times are medians of 100 calls (50 with `--quick`) after warm-up; a call so slow that "
        "those do not fit in the measurement's budget gets fewer (at least 3), and the table says how "
        "many. A size whose time, extrapolated from the previous size, exceeds the per-call limit is "
        "not run and says so, as are the cases left when a run reaches its time limit (7.5 min with "
        "`--quick`, whose cases take about 5 min on one GPU by estimate; the full run, about 15 to 25 "
        "min by estimate: the machine line gives the measured time). Speed is the baseline's time over fsmooth's (> 1: fsmooth faster); "
        f"the issue's target is ≥ {TARGET_SPEED:g}× {TARGET} on every kernel and size.",
        "",
        "To run on the GPU machine (NVIDIA's OpenCL ICD registered and the wheels installed as "
        "`../shared/GPU.md` and `benchmarks/run_blas_gpu.sh` do): `python -m benchmarks.gpu_apps --device gpu` "
        "(`--quick`: one size per kernel; `--gmm-2.5m` adds GMM at 2.5M points), then copy "
        "`gpu_apps.json` and `gpu_apps.png` into `benchmarks/results/` and run "
        "`python -m benchmarks.gpu_apps_report`.",
    ]
    for kind in FILES:
        parts += _kind_section(kind, by_kind.get(kind), report_dir, results_dir)
    return "\n".join(parts) + "\n"


def load_results(results_dir: pathlib.Path) -> dict:
    return {kind: json.loads((results_dir / name).read_text()) for kind, name in FILES.items()
            if (results_dir / name).exists()}


def write_section(report: pathlib.Path = REPORT, results_dir: pathlib.Path = RESULTS_DIR) -> None:
    rewrite_section(report, markdown_section(load_results(results_dir), report.parent, results_dir), SECTION_TITLE)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_apps_report", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS_DIR,
                        help="where gpu_apps.json and gpu_apps_cpu.json are (default: benchmarks/results)")
    parser.add_argument("--report", type=pathlib.Path, default=REPORT,
                        help="the Markdown file whose section is rewritten (default: benchmarks/RESULTS.md)")
    args = parser.parse_args(argv)
    by_kind = load_results(args.results)
    write_section(args.report, args.results)
    for results in by_kind.values():
        print(text_table(results))
    print(f"rewrote the GPU applications section of {args.report} from {', '.join(sorted(by_kind)) or 'no'} results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
