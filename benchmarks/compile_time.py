"""Compile time of every corpus kernel (``tests/corpus/*``) through the C and the OpenCL pipeline,
before any C compiler runs (issue 11), and of three long programs that are generated as source text
(a sum of N array elements, a chain of N dependent lets; issue 13; a chain of N dependent integer
lets, issue 11):

    python benchmarks/compile_time.py                      # everything; writes results/compile_time.json
    python benchmarks/compile_time.py --only adbench_ba    # modules (or "synthetic") whose name contains it
    python benchmarks/compile_time.py --out /tmp/ct.json

Each kernel is compiled as if alone: sympy's cache and fsmooth's memo tables are emptied first,
so that a kernel measured late is not helped by the sizes of those before it.  The front end
(Python ``ast`` to typed F̃) is timed apart from each pipeline (``fsmooth.driver.c_passes`` /
``opencl_passes``), whose slowest pass the table names; the JSON has every pass's time.  Times
are CPU seconds of the process (``time.process_time``), which a machine shared with other work
inflates less than wall-clock time; each is one run: a figure, not a test (the tests count work).
"""
from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: python benchmarks/compile_time.py
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the corpus is the package ``corpus`` there

import sympy  # noqa: E402

import fsmooth  # noqa: E402
from fsmooth import driver  # noqa: E402
from fsmooth.deep_stack import on_deep_stack  # noqa: E402
from fsmooth.embed import exported_kernels  # noqa: E402
from fsmooth.errors import CompileError  # noqa: E402
from fsmooth.frontend import parse_program  # noqa: E402

SYNTHETIC_SIZES = (250, 1000)


def long_sum(n: int) -> str:
    """A kernel returning ``v[0] + v[1] + ... + v[n-1]``."""
    terms = " + ".join(f"v[{i}]" for i in range(n))
    return f"@fs.kernel\ndef long_sum_{n}(v: Array[Double]) -> Double:\n    return {terms}\n"


def let_chain(n: int) -> str:
    """A kernel of ``n`` dependent lets ``a{k} = a{k-1} * 1.0001 + v[k]``."""
    lines = [f"    a{k} = a{k - 1} * 1.0001 + v[{k}]" for k in range(1, n + 1)]
    return (f"@fs.kernel\ndef let_chain_{n}(v: Array[Double]) -> Double:\n    a0 = v[0]\n" + "\n".join(lines)
            + f"\n    return a{n}\n")


def index_chain(n: int) -> str:
    """A kernel of ``n`` dependent integer lets ``a{k} = (a{k-1} * 31 + v[k]) % 1000003``: one deep
    integer expression once its lets are inlined, each of whose operations code generation asks
    whether it may overflow int64."""
    lines = [f"    a{k} = (a{k - 1} * 31 + v[{k}]) % 1000003" for k in range(1, n + 1)]
    return (f"@fs.kernel\ndef index_chain_{n}(v: Array[Index]) -> Index:\n    a0 = v[0]\n" + "\n".join(lines)
            + f"\n    return a{n}\n")


def synthetic_module(directory: pathlib.Path, sizes: tuple[int, ...] = SYNTHETIC_SIZES):
    """A module of the long programs of each size, written to ``directory`` (the front end reads a
    kernel's source)."""
    path = directory / "synthetic.py"
    path.write_text("import fsmooth as fs\nfrom fsmooth import Array, Double, Index\n\n\n"
                    + "\n\n".join(make(n) for n in sizes for make in (long_sum, let_chain, index_chain)))
    spec = importlib.util.spec_from_file_location("synthetic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus_modules() -> list[str]:
    return sorted(p.stem for p in (ROOT / "tests" / "corpus").glob("*.py") if p.name != "__init__.py")


def forget_caches() -> None:
    """Empty sympy's cache and every ``functools`` cache of fsmooth's modules."""
    sympy.core.cache.clear_cache()
    for name, module in list(sys.modules.items()):
        if name.startswith("fsmooth"):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def timed_passes(passes, program) -> dict[str, float]:
    """Seconds per pass of one run of ``passes`` (as ``driver.run_passes``, on the deep stack)."""
    def run() -> dict[str, float]:
        forms, seconds = {"core": program}, {}
        for p in passes:
            start = time.process_time()
            forms[p.name] = p.run(forms, lambda name, form: None)
            seconds[p.name] = time.process_time() - start
        return seconds
    return on_deep_stack(run, program.entry, program.main.loc)


def measure(kernel) -> dict:
    forget_caches()
    start = time.process_time()
    program = parse_program(kernel)  # not ``kernel.program()``, which may be made already
    record = {"front_end_s": time.process_time() - start}
    for target, passes in (("c", driver.c_passes), ("opencl", driver.opencl_passes)):
        forget_caches()
        try:
            seconds = timed_passes(passes(kernel.options), program)
        except CompileError as err:  # a strategy fragment that is no OpenCL program alone
            record[target] = {"error": str(err).splitlines()[0]}
            continue
        slowest = max(seconds, key=seconds.get)
        record[target] = {"total_s": sum(seconds.values()), "passes_s": seconds, "slowest": slowest}
    return record


def warm_up() -> None:
    """Import every stage and compile one small kernel, so that the first measured kernel does
    not pay for imports."""
    from corpus import linalg

    for passes in (driver.c_passes, driver.opencl_passes):
        timed_passes(passes(linalg.vector_smul.options), linalg.vector_smul.program())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[],
                        help="measure the modules whose name contains this ('synthetic': the long programs)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compile_time.json"))
    args = parser.parse_args(argv)
    warm_up()
    results: dict = {"fsmooth": str(pathlib.Path(fsmooth.__file__).parent), "kernels": {}}
    names = [*corpus_modules(), "synthetic"]
    names = [n for n in names if not args.only or any(o in n for o in args.only)]
    print("CPU seconds (front: the front end; C, OpenCL: the passes of each pipeline, before any C compiler)")
    print(f"{'kernel':42} {'front':>7} {'C':>7} {'slowest C pass':>24} {'OpenCL':>7} {'slowest OpenCL pass':>24}")
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            module = synthetic_module(pathlib.Path(scratch)) if name == "synthetic" \
                else importlib.import_module(f"corpus.{name}")
            for kernel in exported_kernels(module):
                record = results["kernels"][f"{name}.{kernel.name}"] = measure(kernel)
                cells = []
                for target in ("c", "opencl"):
                    r = record[target]
                    cells += ([f"{'-':>7}", f"{'(no OpenCL program)':>24}"] if "error" in r else
                              [f"{r['total_s']:7.3f}", f"{r['slowest']} {r['passes_s'][r['slowest']]:.3f}".rjust(24)])
                print(f"{name + '.' + kernel.name:42} {record['front_end_s']:7.3f} " + " ".join(cells), flush=True)
    for target in ("c", "opencl"):
        totals = {k: r[target]["total_s"] for k, r in results["kernels"].items() if "total_s" in r[target]}
        if totals:
            worst = max(totals, key=totals.get)
            print(f"{target}: {len(totals)} kernels, {sum(totals.values()):.2f} s in all, slowest {worst} "
                  f"{totals[worst]:.3f} s")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
