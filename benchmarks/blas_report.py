"""Turning the BLAS benchmarks' measurements (``blas_<kind>.json``) into a table, a plot and the
"BLAS on OpenCL" section of ``RESULTS.md``, with the reading against issue 12's target (at least
cuBLAS's speed on every kernel and size, with the strategies written by hand and with none)
computed from the numbers.

    python -m benchmarks.blas_report     # rewrite the section from benchmarks/results/blas_*.json

Only that section of ``RESULTS.md`` is replaced (or appended): the rest of the file is kept.
Table helpers and the machine facts are ``micro_report``'s.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

if __package__ in (None, ""):  # run as a script: python benchmarks/blas_report.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks.micro_report import _markdown_table, _text_table  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
REPORT = REPO_ROOT / "benchmarks" / "RESULTS.md"

SECTION_TITLE = "## BLAS on OpenCL (DPIA paper §7)"
TARGET_SPEED = 1.0  # issue 12 (issue 4's was 0.9): at least cuBLAS's speed on every kernel and size
KINDS = ("gpu", "cpu")  # the JSON files the report reads: blas_gpu.json, blas_cpu.json
GPU_COMMAND = "bash benchmarks/run_blas_gpu.sh"
COLOURS = {"fsmooth": "tab:blue", "baseline": "tab:red"}


# ----------------------------------------------------------------------------- one record

def _ms(side: dict) -> str:
    return f"{side['median_ms']:.4f}" if "median_ms" in side else ""


def _gbs(side: dict) -> str:
    return f"{side['gb_per_s']:.1f}" if "gb_per_s" in side else ""


def _check(side: dict) -> str:
    check = side.get("check", {})
    if side.get("error"):
        return f"not run: {side['error']}"
    if check.get("ok") is None:
        return ""
    if check["ok"]:
        return f"ok ({check['max_error_over_magnitude']:.1e})"
    return f"**wrong**: {check.get('note', '')}"


def _verdict(record: dict, is_gpu: bool) -> str:
    speed = record.get("speed_vs_baseline")
    if speed is None or not is_gpu:
        return ""
    return "met" if speed >= TARGET_SPEED else "**not met**"


def one_line(record: dict) -> str:
    """fsmooth's and the baseline's times and the speed, for the progress lines."""
    parts = []
    for side in ("fsmooth", "baseline"):
        data = record[side]
        if "median_ms" in data:
            parts.append(f"{side} {data['median_ms']:.3f} ms ({data['gb_per_s']:.1f} GB/s)")
        else:
            parts.append(f"{side}: {data.get('error', 'no time')}")
        if data.get("check", {}).get("ok") is False:
            parts[-1] += " WRONG RESULT"
    if "speed_vs_baseline" in record:
        parts.append(f"speed {record['speed_vs_baseline']:.2f}×")
    return "; ".join(parts)


HEADER = ["kernel", "size", "fsmooth ms", "fsmooth GB/s", "{b} ms", "{b} GB/s",
          "speed ({b} time / fsmooth time)", f"target ≥ {TARGET_SPEED}×", "fsmooth check (max error / magnitude)",
          "{b} check"]


def _header(results: dict) -> list[str]:
    return [h.format(b=results["baseline"]) for h in HEADER]


def rows(results: dict) -> list[list[str]]:
    is_gpu = results["device"]["kind"] == "gpu"
    return [[r["kernel"], r["label"], _ms(r["fsmooth"]), _gbs(r["fsmooth"]), _ms(r["baseline"]),
             _gbs(r["baseline"]),
             f"{r['speed_vs_baseline']:.2f}×" if "speed_vs_baseline" in r else "",
             _verdict(r, is_gpu), _check(r["fsmooth"]), _check(r["baseline"])]
            for r in results["records"]]


def text_table(results: dict) -> str:
    header = _header(results)
    keep = [i for i, h in enumerate(header) if not h.startswith("target") or results["device"]["kind"] == "gpu"]
    return _text_table([header[i] for i in keep], [[row[i].replace("**", "") for i in keep]
                                                   for row in rows(results)])


# ----------------------------------------------------------------------------- plot

def plot(results: dict, path: pathlib.Path) -> pathlib.Path | None:
    """Median times of fsmooth and the baseline per kernel and size, log scale; None without
    matplotlib (the GPU machine may not have it)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in results["records"] if "median_ms" in r["fsmooth"] or "median_ms" in r["baseline"]]
    if not records:
        return None
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(records) + 2), 4.8))
    width = 0.38
    for offset, side, label in ((-width / 2, "fsmooth", "fsmooth OpenCL"),
                                (width / 2, "baseline", results["baseline"])):
        xs = [i + offset for i, r in enumerate(records) if "median_ms" in r[side]]
        ys = [r[side]["median_ms"] for r in records if "median_ms" in r[side]]
        ax.bar(xs, ys, width, label=label, color=COLOURS[side])
    for i, r in enumerate(records):
        if "speed_vs_baseline" in r:
            top = max(r[s].get("median_ms", 0) for s in ("fsmooth", "baseline"))
            ax.text(i, top * 1.15, f"{r['speed_vs_baseline']:.2f}×", ha="center", fontsize=8)
    ax.set_xticks(range(len(records)), [f"{r['kernel']}\n{r['label']}" for r in records])
    ax.set_yscale("log")
    ax.set_ylabel(f"median time of {results['settings']['repeats']} calls (ms, log scale)")
    ax.set_title(f"BLAS on {results['device']['name']}: fsmooth vs {results['baseline']} "
                 f"(speed = {results['baseline']} time / fsmooth time)", fontsize=9)
    ax.margins(y=0.2)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- RESULTS.md

def _machine_line(results: dict) -> str:
    d, m = results["device"], results["machine"]
    software = f"Python {m['python']}, numpy {m['numpy']}, pyopencl {m['pyopencl']}"
    if results["baseline"] == "cuBLAS":
        software += f", PyTorch {m.get('torch')} (CUDA {m.get('torch_cuda')}), CuPy {m.get('cupy')}"
    return (f"**Device**: {d['name']} ({d['platform']}, {d['opencl_version']}, driver {d['driver']}, "
            f"{d['compute_units']} compute units, {d['global_memory_gib']} GiB); host {m['cpu']}, "
            f"{m['cores']} cores; {software}; run on {m['date']} with `{results['command']}`.")


def _reading(results: dict) -> list[str]:
    """Per kernel: whether fsmooth reaches TARGET_SPEED times the baseline at every size (GPU), or how it
    compares (CPU); failed checks and missing measurements said."""
    is_gpu = results["device"]["kind"] == "gpu"
    sentences = []
    for kernel in dict.fromkeys(r["kernel"] for r in results["records"]):
        records = [r for r in results["records"] if r["kernel"] == kernel]
        speeds = [f"{r['speed_vs_baseline']:.2f}× at {r['label']}" for r in records if "speed_vs_baseline" in r]
        missing = [r["label"] for r in records if "speed_vs_baseline" not in r]
        wrong = [r["label"] for r in records if r["fsmooth"]["check"].get("ok") is False]
        text = f"**{kernel}**: " + ("; ".join(speeds) if speeds else "no comparison")
        if is_gpu:
            if missing:
                verdict = f"target ≥ {TARGET_SPEED}× cuBLAS not judged (no comparison at {', '.join(missing)})"
            elif all(r["speed_vs_baseline"] >= TARGET_SPEED for r in records):
                verdict = f"target ≥ {TARGET_SPEED}× cuBLAS **met** at every size"
            else:
                short = [r["label"] for r in records if r["speed_vs_baseline"] < TARGET_SPEED]
                verdict = f"target ≥ {TARGET_SPEED}× cuBLAS **not met** (at {', '.join(short)})"
            text += f" — {verdict}."
        else:
            text += " of numpy's speed." if speeds else "."
            if missing:
                text += f" Not compared at {', '.join(missing)}."
        if wrong:
            text += f" fsmooth's result is **wrong** at {', '.join(wrong)}, so its times mean nothing there."
        sentences.append(text)
    return sentences


def _kind_section(kind: str, results: dict | None, report_dir: pathlib.Path,
                  results_dir: pathlib.Path) -> list[str]:
    title = {"gpu": "GPU: fsmooth's OpenCL against cuBLAS",
             "cpu": "CPU OpenCL device: fsmooth's OpenCL against numpy"}[kind]
    parts = ["", f"### {title}", ""]
    if results is None:
        how = GPU_COMMAND if kind == "gpu" else "python -m benchmarks.blas --device cpu"
        return parts + [f"No results yet (`{results_dir.name}/blas_{kind}.json` is missing): run `{how}`."]
    if results["settings"].get("quick"):
        parts += ["**A `--quick` smoke run (tiny sizes, few calls): these numbers are not the benchmark.**", ""]
    parts += [_machine_line(results), "",
              _markdown_table(_header(results) if kind == "gpu" else
                              [h for h in _header(results) if not h.startswith("target")],
                              [row if kind == "gpu" else row[:7] + row[8:] for row in rows(results)]),
              "", "Baselines: " + "; ".join(dict.fromkeys(
                  f"{r['kernel']}: {r['baseline'].get('implementation')}" for r in results["records"])) + ".",
              ""]
    parts += [f"- {sentence}" for sentence in _reading(results)]
    png = results_dir / f"blas_{kind}.png"
    if png.exists():
        parts += ["", f"![blas_{kind}]({pathlib.Path(os.path.relpath(png, report_dir)).as_posix()})"]
    return parts


def markdown_section(by_kind: dict, report_dir: pathlib.Path, results_dir: pathlib.Path) -> str:
    parts = [
        SECTION_TITLE,
        "",
        "Generated by `python -m benchmarks.blas` (or `python -m benchmarks.blas_report` from the JSON "
        f"files in `{os.path.relpath(results_dir, REPO_ROOT)}`); do not edit by hand. The kernels are "
        "`tests/corpus/blas.py` (scal 4-wide vectorised; asum and dot as DPIA §6.3's two-phase "
        "reduction, 4-wide vectorised, with local memory, in one launch: the last work-group to finish "
        "combines the partials (each result's `launches` in the JSON: two before that); gemv one work-group per "
        "row), at the paper's "
        "sizes (scal, asum, dot: 16 Mi and 128 Mi floats; gemv: 4096² and 8192², float32). "
        "fsmooth's time is the device time of one call from the OpenCL profiling events (the sum of "
        "its launches, inputs on the device); cuBLAS's is one call between two CUDA events; numpy's "
        "is `time.perf_counter` around one call. Each is the median of the number of calls in the "
        "command (100 by default) after 10 warm-up calls. fsmooth's time leaves out the gaps between "
        "its launches where a call has several, which the CUDA events around a cuBLAS call include: "
        "if anything, this favours fsmooth. GB/s counts the bytes the operation must move: "
        "scal 2·4n, asum 4n, dot 8n, gemv 4(mn + m + n). Speed is the baseline's time over "
        "fsmooth's (1.0: as fast; the target on the GPU is ≥ 1.0, issue 12's; issue 4's was 0.9). Each result is checked against "
        "the numpy oracle in float64: |error| ≤ rtol × the same operation on absolute values "
        "(rtol 1e-4 for the sums, 1e-6 for scal). At 16 Mi a call lasts about 50 µs, and the same "
        "baseline's median there varied by up to 25% between runs on fresh H100 machines (torch.dot: "
        "0.053 to 0.068 ms on 2026-11-23): read a ratio near 1.0 at that size with this in mind.",
        "",
        f"To run: on the GPU machine, from the repository root, `{GPU_COMMAND}` (installs the wheels "
        "of `.whl/` into /tmp/site, registers the NVIDIA OpenCL ICD, runs `--device gpu`, then "
        "`--device cpu` if a PoCL CPU device builds kernels there; the JSON and plots go to `$OUT`, "
        "default `benchmarks/results`). Copy them into `benchmarks/results/` and run "
        "`python -m benchmarks.blas_report` to refresh this section.",
    ]
    for kind in KINDS:
        parts += _kind_section(kind, by_kind.get(kind), report_dir, results_dir)
    return "\n".join(parts) + "\n"


def load_results(results_dir: pathlib.Path) -> dict:
    by_kind = {}
    for kind in KINDS:
        path = results_dir / f"blas_{kind}.json"
        if path.exists():
            by_kind[kind] = json.loads(path.read_text())
    return by_kind


def replace_section(text: str, section: str, title: str = SECTION_TITLE) -> str:
    """``text`` with the section ``title`` (the BLAS one unless told: from its title to the next
    '## ' or '# ' heading, or the end) replaced by ``section``, or with ``section`` appended when
    there is none."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == title), None)
    if start is None:
        return (text.rstrip("\n") + "\n\n" if text.strip() else "") + section
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("## ") or lines[i].startswith("# ")), len(lines))
    after = "".join(lines[end:])
    return "".join(lines[:start]) + section + ("\n" + after if after else "")


def rewrite_section(report: pathlib.Path, section: str, title: str = SECTION_TITLE) -> None:
    """``report`` with its section ``title`` replaced by ``section`` (``replace_section``)."""
    old = report.read_text() if report.exists() else ""
    report.write_text(replace_section(old, section, title))


def write_section(report: pathlib.Path = REPORT, results_dir: pathlib.Path = RESULTS_DIR) -> None:
    rewrite_section(report, markdown_section(load_results(results_dir), report.parent, results_dir))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.blas_report", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS_DIR,
                        help="where blas_gpu.json and blas_cpu.json are (default: benchmarks/results)")
    parser.add_argument("--report", type=pathlib.Path, default=REPORT,
                        help="the Markdown file whose BLAS section is rewritten (default: benchmarks/RESULTS.md)")
    args = parser.parse_args(argv)
    by_kind = load_results(args.results)
    write_section(args.report, args.results)
    for results in by_kind.values():
        print(text_table(results))
    print(f"rewrote the BLAS section of {args.report} from {', '.join(sorted(by_kind)) or 'no'} results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
