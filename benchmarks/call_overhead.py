"""The cost of calling a tiny kernel from Python: fsmooth against Numba and a plain cffi call.

    python -m benchmarks.call_overhead            # full run
    python -m benchmarks.call_overhead --quick    # smoke run

Each kernel does almost nothing, so the time per call is the calling convention: checking and
converting the arguments, the size plan, the result, the C call.  Three ways to call the same
work:

  - fsmooth: ``kernel(*args)``, every check included (types, dtypes, layout, sizes, scratch);
  - numba: an ``@njit`` function, called with the same arguments (its dispatcher checks types);
  - cffi: the compiled C function of the fsmooth kernel called the way a hand-written cffi
    binding would, with no check: ``ffi.new`` for a scalar result, ``ffi.from_buffer`` for each
    array, the arena pointer, ``K(...)``; the floor of any cffi-based call (fsmooth's call is its
    own C entry point, ``fsmooth.python_entry``, not a cffi call).

Time: ``time.process_time`` (CPU time of this process, so that other processes on a busy
machine do not count) per call, the minimum over the repetitions of a batch of calls.  Prints a
table (µs per call, fsmooth's time as a multiple of Numba's and of the plain cffi call's) and
writes ``results/call_overhead.json``.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time
import timeit

if __package__ in (None, ""):  # run as a script: python benchmarks/call_overhead.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import fsmooth as fs  # noqa: E402
from fsmooth import Array, Double  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


@fs.kernel
def add(x: Double, y: Double) -> Double:
    return x + y


@fs.kernel
def total(v: Array[Double]) -> Double:
    return fs.ifold(lambda acc, i: acc + v[i], 0.0, fs.length(v))


@fs.kernel
def scale(v: Array[Double], s: Double) -> Array[Double]:
    return fs.build(fs.length(v), lambda i: s * v[i])


def numba_versions() -> dict:
    from numba import njit

    @njit
    def numba_add(x, y):
        return x + y

    @njit
    def numba_total(v):
        acc = 0.0
        for i in range(v.shape[0]):
            acc += v[i]
        return acc

    @njit
    def numba_scale(v, s):
        out = np.empty_like(v)
        for i in range(v.shape[0]):
            out[i] = s * v[i]
        return out

    return {"add": numba_add, "total": numba_total, "scale": numba_scale}


def plain_cffi(kernel, args: tuple):
    """A call of ``kernel``'s C function as a hand-written cffi binding makes it: no checks."""
    executable = kernel.executable()
    ffi, K = executable._ffi, executable._kernel
    (result_rank, _, out_type), = executable._outputs
    buffer_types = executable._buffer_types
    scratch = executable._scratch(kernel.scratch_bytes(*args))
    if [t is None for t in buffer_types] == [True, True]:  # add(x, y)
        def call(x, y):
            out = ffi.new(out_type)
            K(scratch, out, x, y)
            return out[0]
    elif result_rank == 0:  # total(v)
        buffer_type, = buffer_types

        def call(v):
            out = ffi.new(out_type)
            K(scratch, out, ffi.from_buffer(buffer_type, v), v.shape[0])
            return out[0]
    else:  # scale(v, s)
        buffer_type = buffer_types[0]

        def call(v, s):
            result = np.empty(v.shape[0])
            K(scratch, ffi.from_buffer(out_type, result), ffi.from_buffer(buffer_type, v), v.shape[0], s)
            return result
    return call


def per_call(fn, args: tuple, number: int, repeat: int) -> float:
    """Seconds of CPU time per call of ``fn(*args)``, the best batch of ``repeat``."""
    fn(*args)
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat, timer=time.process_time)) / number


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls: a smoke run")
    parser.add_argument("--out", default=str(RESULTS), help="directory of call_overhead.json")
    args = parser.parse_args(argv)
    number, repeat = (2_000, 3) if args.quick else (200_000, 7)

    v = np.arange(8.0)
    cases = {"add": (add, (1.0, 2.0)), "total": (total, (v,)), "scale": (scale, (v, 3.0))}
    numba = numba_versions()
    rows = {}
    for name, (kernel, kernel_args) in cases.items():
        calls = {"fsmooth": kernel, "numba": numba[name], "cffi": plain_cffi(kernel, kernel_args)}
        results = [np.asarray(f(*kernel_args)) for f in calls.values()]
        for result in results:  # the three compute the same, and the reference agrees
            np.testing.assert_allclose(result, np.asarray(kernel.reference(*kernel_args)), rtol=1e-12)
        times = {way: per_call(f, kernel_args, number, repeat) for way, f in calls.items()}
        rows[name] = {"us_per_call": {way: t * 1e6 for way, t in times.items()},
                      "fsmooth_over_numba": times["fsmooth"] / times["numba"],
                      "fsmooth_over_cffi": times["fsmooth"] / times["cffi"],
                      "cffi_over_numba": times["cffi"] / times["numba"]}

    print(f"{'kernel':<8} {'fsmooth µs':>11} {'numba µs':>9} {'cffi µs':>8} {'fs/numba':>9} {'fs/cffi':>8} "
          f"{'cffi/numba':>11}")
    for name, row in rows.items():
        us = row["us_per_call"]
        print(f"{name:<8} {us['fsmooth']:>11.3f} {us['numba']:>9.3f} {us['cffi']:>8.3f} "
              f"{row['fsmooth_over_numba']:>8.2f}× {row['fsmooth_over_cffi']:>7.2f}× {row['cffi_over_numba']:>10.2f}×")

    import numba as numba_module

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"settings": {"calls_per_batch": number, "batches": repeat, "timer": "time.process_time",
                           "python": platform.python_version(), "numpy": np.__version__,
                           "numba": numba_module.__version__, "fsmooth": fs.__version__,
                           "machine": platform.platform(),
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "kernels": rows}
    (out / "call_overhead.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out / 'call_overhead.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
