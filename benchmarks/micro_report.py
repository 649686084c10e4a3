"""Turning the micro-benchmarks' measurements (``micro.json``'s dict) into tables, plots and
``RESULTS.md``, with a reading of the numbers against the targets of issue 3 (within 1.1× the
hand-written C, faster than Eigen, constant memory) and issue 11 (faster than Numba's fused
loop, everyone built for the host) that is computed from them, so that it stays true when the
numbers change."""
from __future__ import annotations

import datetime
import os
import pathlib
import platform
import subprocess

TARGET_RATIO = 1.1  # the default variant within 1.1x of the hand-written C
CONSTANT_SLACK_KIB = 256  # peak growth this close at the smallest and largest count is "constant"
PLOT_FLOOR_BYTES = 1024  # log axes: a growth below 1 KiB (RSS is counted in KiB) is drawn here
FAMILY_COLOURS = {"fsmooth": "tab:blue", "C": "tab:green", "Eigen": "tab:purple",
                  "Numba": "tab:orange", "numpy": "tab:red"}


# ----------------------------------------------------------------------------- the machine

def _first_line(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "not found"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    import numpy

    facts = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "gcc": _first_line(["gcc", "--version"]),
        "g++": _first_line(["g++", "--version"]),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    try:
        import numba

        facts["numba"] = numba.__version__
    except ImportError:
        facts["numba"] = "not installed"
    return facts


# ----------------------------------------------------------------------------- reading records

def peak_kib(memory: dict) -> int:
    """The peak RSS growth of one run: reset-peak measurement where there is one, else ru_maxrss."""
    return memory["peak_growth_kib"] if memory["peak_growth_kib"] is not None else memory["maxrss_growth_kib"]


def _ok(by_impl: dict) -> dict:
    return {key: record for key, record in by_impl.items() if record["status"] == "ok"}


def _same_c(by_impl: dict, key: str) -> list[str]:
    """The other fsmooth variants whose generated C is identical to ``key``'s."""
    sha = by_impl[key].get("c_sha256")
    return [other for other, record in by_impl.items()
            if other != key and sha is not None and record.get("c_sha256") == sha]


def _same_c_note(by_impl: dict, key: str) -> str:
    """'same C as the default', or 'same C as <an earlier variant>', or ''."""
    same = _same_c(by_impl, key)
    if _default_key(by_impl) in same:
        return "same C as the default"
    order = list(by_impl)
    earlier = [other for other in same if order.index(other) < order.index(key)]
    return f"same C as {by_impl[earlier[0]]['variant']}" if earlier else ""


def _default_key(by_impl: dict) -> str:
    return next(key for key, record in by_impl.items() if record["label"].endswith("(default)"))


def _kib(value: float) -> str:
    return f"{value:,.0f}"


# ----------------------------------------------------------------------------- tables

def _time_rows(results: dict, bench: str) -> list[list[str]]:
    settings = results["settings"]
    n = str(settings["iterations"])
    by_impl = results["benchmarks"][bench]["implementations"]
    rows = []
    for key, record in by_impl.items():
        if record["status"] == "ok":
            scratch = record.get("scratch_bytes", {}).get(n)
            rows.append([record["label"], f"{record['median_s'] * 1e3:.2f}",
                         f"{record['ratio_to_hand_c']:.2f}", str(len(record["times_s"])),
                         _kib(peak_kib(record["memory"][n])),
                         "" if scratch is None else f"{scratch:,}", _same_c_note(by_impl, key)])
        else:
            rows.append([record["label"], "", "", "", "", "", f"{record['status']}: {record['note']}"])
    return rows


TIME_HEADER = ["implementation", "median time (ms)", "× hand C", "runs", "peak RSS growth (KiB)",
               "arena bytes", "note"]


def _memory_rows(results: dict, bench: str) -> tuple[list[str], list[list[str]]]:
    counts = sorted(int(c) for c in results["settings"]["counts"])
    by_impl = results["benchmarks"][bench]["implementations"]
    header = ["implementation"] + [f"{c:.0e}".replace("e+0", "e") for c in counts]
    rows = [[record["label"]] + [_kib(peak_kib(record["memory"][str(c)])) for c in counts]
            for record in _ok(by_impl).values()]
    return header, rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header] + rows]
    return "\n".join([lines[0], "-" * len(lines[0])] + lines[1:])


def text_tables(results: dict) -> str:
    n = results["settings"]["iterations"]
    parts = []
    for bench, data in results["benchmarks"].items():
        parts.append(f"\n{bench}: {data['description']}, {n:,} iterations")
        parts.append(_text_table(TIME_HEADER, _time_rows(results, bench)))
    return "\n".join(parts)


# ----------------------------------------------------------------------------- reading

def _grows_at_the_top(record: dict, counts: list[int]) -> bool:
    """Whether the peak growth still rises between the two largest counts: a leak, not a heap
    that reaches its size early (as a garbage collector's does) and stays there."""
    below, top = (peak_kib(record["memory"][str(c)]) for c in counts[-2:])
    return top - below > CONSTANT_SLACK_KIB


def reading(results: dict) -> list[str]:
    """Sentences on the targets, each computed from the numbers."""
    counts = sorted(int(c) for c in results["settings"]["counts"])
    sentences = []
    for bench, data in results["benchmarks"].items():
        by_impl = data["implementations"]
        default = _default_key(by_impl)
        record = by_impl[default]
        if record["status"] != "ok":
            sentences.append(f"**{bench}**: the default variant did not run ({record['status']}: "
                             f"{record['note']}), so no target can be judged.")
            continue
        ratio = record["ratio_to_hand_c"]
        verdict = "met" if ratio <= TARGET_RATIO else "**not met**"
        text = (f"**{bench}**: the default variant takes {ratio:.2f}× the hand-written C's time "
                f"(target ≤ {TARGET_RATIO}×: {verdict}).")
        eigen = by_impl.get("eigen", {})
        if eigen.get("status") == "ok":
            faster = record["median_s"] < eigen["median_s"]
            text += (f" Eigen takes {eigen['ratio_to_hand_c']:.2f}×, so the default variant is "
                     f"{'faster' if faster else '**slower**'} than Eigen "
                     f"(target: faster; {'met' if faster else 'not met'}).")
        else:
            text += f" Eigen: {eigen.get('status', 'absent')}, no comparison."
        numba = by_impl.get("numba-fused", {})
        if numba.get("status") == "ok":
            over = record["median_s"] / numba["median_s"]
            text += (f" Numba's fused loop takes {numba['ratio_to_hand_c']:.2f}× the hand-written C's time "
                     f"and the default variant {over:.2f}× Numba's (target (issue 11): faster than "
                     f"Numba's fused loop; {'met' if over < 1.0 else '**not met**'}).")
        else:
            text += f" Numba's fused loop: {numba.get('status', 'absent')}, no comparison."
        growths = [peak_kib(record["memory"][str(c)]) for c in counts]
        scratch = sorted(set(record.get("scratch_bytes", {}).values()))
        arena = (f"its arena is {scratch[0]:,} bytes at every count." if len(scratch) == 1
                 else f"its arena is {', '.join(f'{s:,}' for s in scratch)} bytes over the counts.")
        if len(counts) == 1:
            text += (f" Its peak RSS growth is {_kib(growths[0])} KiB at {counts[0]:,} iterations "
                     f"(one iteration count only: constancy not judged); {arena}")
        else:
            constant = max(growths) - min(growths) <= CONSTANT_SLACK_KIB
            text += (f" Its peak RSS growth is {_kib(growths[0])} KiB at {counts[0]:,} iterations and "
                     f"{_kib(growths[-1])} KiB at {counts[-1]:,} "
                     f"({'constant' if constant else '**not constant**'} within {CONSTANT_SLACK_KIB} KiB "
                     f"over the counts; target: constant, {'met' if constant else 'not met'}); {arena}")
        if len(counts) > 1:
            growing = [f"{r['label']} ({' → '.join(_kib(peak_kib(r['memory'][str(c)])) for c in counts)} KiB)"
                       for r in _ok(by_impl).values() if _grows_at_the_top(r, counts)]
            text += (f" Memory that still grows from {counts[-2]:,} to {counts[-1]:,} iterations: "
                     + "; ".join(growing) + "." if growing
                     else f" No implementation's memory grows from {counts[-2]:,} to {counts[-1]:,} iterations.")
        same = _same_c(by_impl, default)
        if same:
            text += (f" The variants {', '.join(s.removeprefix('fsmooth-') for s in same)} compile to "
                     f"the same C as the default here, so their rows measure the same program "
                     f"(those options do not change the generated code for this kernel).")
        failed = [f"{r['label']} ({r['status']})" for r in by_impl.values() if r["status"] != "ok"]
        if failed:
            text += " Not measured: " + "; ".join(failed) + "."
        sentences.append(text)
    return sentences


# ----------------------------------------------------------------------------- plots

def plot(results: dict, out: pathlib.Path) -> list[pathlib.Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    benches = list(results["benchmarks"])
    n = results["settings"]["iterations"]

    fig, axes = plt.subplots(1, len(benches), figsize=(6.5 * len(benches), 5), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        by_impl = _ok(results["benchmarks"][bench]["implementations"])
        labels = [r["label"] for r in by_impl.values()][::-1]
        times = [r["median_s"] * 1e3 for r in by_impl.values()][::-1]
        colours = [FAMILY_COLOURS[r["family"]] for r in by_impl.values()][::-1]
        ax.barh(labels, times, color=colours)
        for y, (t, r) in enumerate(zip(times, list(by_impl.values())[::-1])):
            ax.text(t, y, f" {r['ratio_to_hand_c']:.2f}×", va="center", fontsize=8)
        if "hand-c" in by_impl:
            ax.axvline(by_impl["hand-c"]["median_s"] * 1e3, color="tab:green", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel(f"median time of {n:,} iterations (ms, log scale)")
        ax.set_title(f"{bench}: time (× hand-written C)")
        ax.margins(x=0.25)
    fig.tight_layout()
    time_png = out / "micro_time.png"
    fig.savefig(time_png, dpi=120)
    plt.close(fig)

    counts = sorted(int(c) for c in results["settings"]["counts"])
    fig, axes = plt.subplots(1, len(benches), figsize=(5.5 * len(benches) + 3, 5), squeeze=False)
    markers = "os^vD<>pP*Xh"
    for ax, bench in zip(axes[0], benches):
        by_impl = results["benchmarks"][bench]["implementations"]
        variants = [key for key, r in by_impl.items() if r["family"] == "fsmooth"]
        blues = plt.cm.Blues(np.linspace(0.35, 1.0, len(variants)))
        top = 0
        for k, (key, record) in enumerate(by_impl.items()):
            if record["status"] != "ok":
                continue
            growth = [max(peak_kib(record["memory"][str(c)]) * 1024, PLOT_FLOOR_BYTES) for c in counts]
            top = max(top, *growth)
            colour = (blues[variants.index(key)] if record["family"] == "fsmooth"
                      else FAMILY_COLOURS[record["family"]])
            ax.plot(counts, growth, marker=markers[k % len(markers)], color=colour,
                    ls=":" if key == "numba-fused" else "-", label=record["label"])
        default = by_impl[_default_key(by_impl)]
        if default["status"] == "ok":
            ax.plot(counts, [default["scratch_bytes"][str(c)] for c in counts], "k--",
                    label="fsmooth default: arena bytes (scratch_bytes)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(10, max(10 * top, 10 ** 7))
        ax.set_xlabel("iterations (log scale)")
        ax.set_ylabel(f"peak RSS growth, bytes (log; < {PLOT_FLOOR_BYTES} drawn at {PLOT_FLOOR_BYTES})")
        ax.set_title(f"{bench}: peak memory against iterations")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1 - 2.8 / fig.get_figwidth(), 1))
    memory_png = out / "micro_memory.png"
    fig.savefig(memory_png, dpi=120)
    plt.close(fig)
    return [time_png, memory_png]


# ----------------------------------------------------------------------------- RESULTS.md

def load_caveat(facts: dict, memory: bool = False) -> list[str]:
    """A warning when other work shared the cores (1-minute load above half the cores), for the
    time or (``memory``) the memory measurements."""
    load, cores = facts.get("load_average_1min"), facts.get("cores") or 1
    if load is None or load <= cores / 2:
        return []
    effect = ("memory is measured per process, so the load matters little here, but "
              "memory_profiler samples less often on a busy machine and may miss short peaks"
              if memory else
              "every time here is noisy and probably too high, each implementation's by a different "
              "amount; a ratio within some tens of percent of 1 may go either way on an idle machine. "
              "Rerun on an idle machine for figures to rely on")
    return [f"**Load caveat**: the machine was shared while this ran (1-minute load average "
            f"{load:.1f} on {cores} cores before the run): {effect}.", ""]


def _checksum_sentence(results: dict) -> str:
    wrong = [f"{bench} {record['label']} ({record['note']})"
             for bench, data in results["benchmarks"].items()
             for record in data["implementations"].values() if record["status"] == "wrong checksum"]
    if wrong:
        return "**Wrong checksums** (these rows have no numbers): " + "; ".join(wrong) + "."
    return ("Every implementation that ran gives the hand-written C's checksum (to a relative 1e-9) "
            "at every iteration count.")


def markdown(results: dict, plots: list[pathlib.Path], report_dir: pathlib.Path) -> str:
    settings, facts = results["settings"], results["machine"]
    n = settings["iterations"]
    counts = ", ".join(f"{int(c):,}" for c in sorted(settings["counts"]))
    parts = [
        "# Micro-benchmarks (DPS paper §5.1, Fig. 11)",
        "",
        "Generated by `python -m benchmarks.micro`" + (" --quick" if settings["quick"] else "")
        + "; do not edit by hand (the numbers and the reading below are rewritten on every run). "
        "To run it: `pip install '.[bench]'` (tqdm, matplotlib, Numba), then "
        "`python -m benchmarks.micro` (about ten minutes on two cores; `--quick` for a smoke run, "
        "`--help` for the options).",
        "",
        f"**Machine**: {facts['cpu']}, {facts['cores']} cores; {facts['gcc']}; Python {facts['python']}, "
        f"numpy {facts['numpy']}, Numba {facts['numba']}; {facts['platform']}; run on {facts['date']}"
        f" (1-minute load average before the run: {facts['load_average_1min']:.2f}).",
        "",
        *load_caveat(facts),
        "**What is measured.** Each loop runs whole in one call: in C for fsmooth (the loop is an "
        "F̃ `ifold`, `benchmarks/micro_kernels.py`), the hand-written C and Eigen; in Numba's "
        "machine code; in the interpreter for numpy. Every measurement runs in a fresh process, "
        f"after a one-iteration warm-up. Time: the median of {settings['repeats']} calls "
        f"(at least {settings['min_repeats']}, fewer than {settings['repeats']} only where the calls "
        f"took more than {settings['budget_s']:g} s in all; the `runs` column says how many). "
        "Memory: the growth of the peak resident set during one call (peak after minus resident "
        "before, with the peak reset after the warm-up; `ru_maxrss` after minus before is in "
        "`results/micro.json` too). Arena bytes: `kernel.scratch_bytes(...)` of the call.",
        "",
        _checksum_sentence(results),
        "",
    ]
    if settings["jobs"] > 1:
        parts += [f"**{settings['jobs']} measurements ran at once (`--jobs`): the times are "
                  "disturbed by each other and only good as a smoke test.**", ""]
    parts += [
        f"**Flags.** fsmooth and the hand-written C are compiled by `fsmooth.cache` with the same "
        f"flags: `{' '.join(settings['c_flags'])}` (plus Python's extension flags); Eigen with "
        f"`g++ {' '.join(settings['eigen_flags'])}`. Numba and numpy: defaults.",
        "",
        "**About the loops.** As in the paper, the input vectors are the same in every iteration, and "
        "each iteration's vector is read twice, at indices that change with the iteration, so it must "
        "exist. A compiler that sees that the vector does not change may still compute it once, "
        "before the loop (gcc 12 did so for the hand-written cross loop when we read its assembly), "
        "so that row may measure little more than the consumer. "
        "Every compiled column is built for this machine's CPU: fsmooth and the hand-written C with "
        "`-march=native` (fsmooth's default in-process build, `fsmooth.cache.host_flags`), Eigen "
        "likewise (and its own SIMD packets), Numba by LLVM for the host CPU. In add3 each "
        "iteration reads at `it % n` and `(7·it + 1) % n`: the hand-written C divides in 64 bits "
        "twice per iteration (gcc), Numba's LLVM keeps `it % n` as a counter that wraps around and "
        "divides in 32 bits for the other where both operands fit (read in its assembly), and "
        "fsmooth keeps both remainders running (`reduce_strength`, `fsmooth.dpia.strength_reduction`): "
        "b mod n and a mod n once before the loop, then a comparison and an addition per iteration, "
        "no division (callgrind counts a division as one instruction, so instruction counts do not "
        "show the difference; `tests/test_running_remainder.py` counts the divisions).",
        "",
        "## Reading against the targets",
        "",
    ]
    parts += [f"- {sentence}" for sentence in reading(results)]
    for bench, data in results["benchmarks"].items():
        parts += ["", f"## {bench}: {data['description']}, {n:,} iterations", "",
                  _markdown_table(TIME_HEADER, _time_rows(results, bench)), "",
                  f"Peak RSS growth (KiB) against the iteration count ({counts}):", ""]
        parts.append(_markdown_table(*_memory_rows(results, bench)))
    parts += ["", "## Plots", ""]
    parts += [f"![{p.stem}]({pathlib.Path(os.path.relpath(p, report_dir)).as_posix()})" for p in plots]
    return "\n".join(parts) + "\n"
