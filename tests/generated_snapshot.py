"""Write the generated C and OpenCL of every corpus module into one folder, so that a refactoring
can be checked byte for byte: ``python tests/generated_snapshot.py BEFORE``, change the compiler,
``python tests/generated_snapshot.py AFTER``, ``diff -r BEFORE AFTER``.

Each module is compiled with ``fsmooth compile`` as a user would: the default C library, the C
library with OpenMP and with the malloc variant, and the OpenCL program with its launch plan.
"""
from __future__ import annotations

import concurrent.futures
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODES = {"c": [], "parallel": ["--parallel"], "malloc": ["--variant", "malloc"], "opencl": ["--target", "opencl"]}


def modules() -> list[str]:
    corpus = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "corpus").glob("*.py")
                    if p.name != "__init__.py")
    return corpus + ["fsmooth/examples.py", "benchmarks/micro_kernels.py", "examples/embed/blur.py"]


def compile_one(module: str, mode: str, out: pathlib.Path) -> str:
    target = out / mode / module.replace("/", ".")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    run = subprocess.run([sys.executable, "-m", "fsmooth", "compile", module, "-o", str(target), *MODES[mode]],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    # The messages name the output folder; everything else of them belongs in the snapshot.
    log = (run.stdout + run.stderr).replace(str(target), "OUT")
    target.mkdir(parents=True, exist_ok=True)
    (target / "log.txt").write_text(f"exit {run.returncode}\n{log}")
    return f"{mode:8} {module}: exit {run.returncode}"


def main(out_dir: str) -> None:
    out = pathlib.Path(out_dir).resolve()
    jobs = [(m, mode) for m in modules() for mode in MODES]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for line in pool.map(lambda job: compile_one(*job, out), jobs):
            print(line)


if __name__ == "__main__":
    main(sys.argv[1])
