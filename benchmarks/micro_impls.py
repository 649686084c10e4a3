"""What the micro-benchmarks compare: the two benchmarks (their inputs and their loop in every
language) and the implementations, each turned into a function ``run(iters) -> checksum``.

Every implementation computes, for ``it`` in ``0 .. iters-1``, a result vector ``t`` (add3:
``(a + b) + c`` of three 100-vectors; cross: the cross product of two 3-vectors) and adds
``t[it % n] + t[(it*7 + 3) % n]`` to an accumulator: the same arithmetic in the same order, so
the checksums agree to rounding.  The C baselines are compiled the way fsmooth compiles its own
C (hand-written C: through ``fsmooth.cache`` itself, so with identical flags) and are called once
for the whole loop, like the fsmooth kernels.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Callable

import numpy as np

from fsmooth import cache
from fsmooth.options import VARIANTS, Options

from . import micro_kernels

BASELINES = pathlib.Path(__file__).resolve().parent / "baselines"
EIGEN_INCLUDE = pathlib.Path("/usr/include/eigen3")
EIGEN_FLAGS = ("-O3", "-march=native", "-DNDEBUG", "-shared", "-fPIC")  # for the host, as the others
SEED = 20170907  # inputs are rng.random(n) from this seed, the same in every process


# ----------------------------------------------------------------------------- numpy versions

def add3_loop_numpy(a, b, c, iters):
    n = len(a)
    acc = 0.0
    for it in range(iters):
        t = a + b + c
        acc = acc + (t[it % n] + t[(it * 7 + 1) % n])
    return acc


def cross_loop_numpy(a, b, iters):
    acc = 0.0
    for it in range(iters):
        t = np.cross(a, b)
        acc = acc + (t[it % 3] + t[(it * 7 + 1) % 3])
    return acc


# ----------------------------------------------------------------------------- benchmarks

@dataclass(frozen=True)
class Benchmark:
    name: str
    description: str
    lengths: tuple  # the length of each input vector
    kernel: object  # the F̃ loop, an fsmooth kernel taking the vectors and the iteration count
    function: str  # the loop's name in the C, Eigen and Numba baselines (with a suffix there)
    numpy: Callable
    length_argument: bool  # the C and Eigen loops take the vector length after the vectors

    def inputs(self) -> tuple:
        rng = np.random.default_rng(SEED)
        return tuple(rng.random(n) for n in self.lengths)


BENCHMARKS = {
    "add3": Benchmark("add3", "vector_add(vector_add(a, b), c), three vectors of 100 doubles",
                      (100, 100, 100), micro_kernels.add3_loop, "add3_loop", add3_loop_numpy, True),
    "cross": Benchmark("cross", "cross product of two 3-vectors",
                       (3, 3), micro_kernels.cross_loop, "cross_loop", cross_loop_numpy, False),
}


# ----------------------------------------------------------------------------- implementations

@dataclass(frozen=True)
class Implementation:
    key: str  # stable name in the JSON
    label: str  # name in tables and plots
    family: str  # fsmooth, C, Eigen, Numba, numpy
    variant: str | None = None  # the fsmooth variant (``options.VARIANTS``)


DEFAULT_VARIANT = next(name for name, options in VARIANTS.items() if options == Options())


def implementations() -> list[Implementation]:
    """Every implementation, whether or not it can run here (``unavailable`` says)."""
    fsmooth = [Implementation(f"fsmooth-{name}",
                              f"fsmooth {name}" + (" (default)" if name == DEFAULT_VARIANT else ""),
                              "fsmooth", name)
               for name in VARIANTS]
    return fsmooth + [
        Implementation("hand-c", "hand-written C", "C"),
        Implementation("eigen", "Eigen", "Eigen"),
        Implementation("numba", "Numba (array per iteration)", "Numba"),
        Implementation("numba-fused", "Numba (fused loop)", "Numba"),
        Implementation("numpy", "numpy", "numpy"),
    ]


def unavailable(impl: Implementation) -> str | None:
    """Why ``impl`` cannot run on this machine, or None."""
    if impl.variant is not None and VARIANTS[impl.variant].allocation == "gc" and \
            not cache.system_library_available("gc.h", "gc"):
        return "Boehm's libgc is not installed (Debian: libgc-dev)"
    if impl.family == "Eigen":
        if not (EIGEN_INCLUDE / "Eigen" / "Dense").is_file():
            return f"Eigen headers not found under {EIGEN_INCLUDE} (install libeigen3-dev)"
        if shutil.which("g++") is None:
            return "no g++ on PATH"
    if impl.family == "Numba":
        try:
            import numba  # noqa: F401
        except ImportError:
            return "numba is not installed (pip install '.[bench]')"
    return None


# ----------------------------------------------------------------------------- the C baselines

HAND_CDEF = """
double add3_loop_hand(const double *a, const double *b, const double *c, int64_t n, int64_t iters);
double cross_loop_hand(const double *a, const double *b, int64_t iters);
"""


def hand_library():
    """The hand-written C as a cffi module, built by fsmooth's own cache: the same compiler,
    flags (``fsmooth.cache.COMPILE_ARGS``, and ``host_flags`` as a kernel's in-process build) and
    build route as every fsmooth kernel."""
    return cache.load_module((BASELINES / "micro_hand.c").read_text(), HAND_CDEF, cache.host_flags())


def eigen_library_path() -> pathlib.Path:
    """The Eigen baseline as a shared library (``cxx_library_path``)."""
    return cxx_library_path(BASELINES / "micro_eigen.cpp", (*EIGEN_FLAGS, f"-I{EIGEN_INCLUDE}"))


def cxx_library_path(source: pathlib.Path, flags: tuple) -> pathlib.Path:
    """A C++ baseline as a shared library, built once per source, flags and compiler version into
    fsmooth's cache directory (written atomically, like fsmooth's own builds)."""
    compiler = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\0".join([source.read_text(), *flags, compiler]).encode()).hexdigest()
    target = cache.cache_dir() / "benchmarks" / f"{source.stem}-{key[:16]}.so"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".so")
        os.close(fd)
        try:
            subprocess.run(["g++", *flags, str(source), "-o", tmp],
                           check=True, capture_output=True, text=True)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return target


# ----------------------------------------------------------------------------- runners

def runner(impl: Implementation, bench: Benchmark) -> Callable[[int], float]:
    """``run(iters)``: the whole loop of ``bench`` in ``impl``, returning its checksum.  Building
    and loading happen here, not in ``run``."""
    arrays = bench.inputs()
    if impl.family == "fsmooth":
        kernel = bench.kernel.variant(impl.variant)
        return lambda iters: kernel(*arrays, iters)
    if impl.family == "C":
        module = hand_library()
        function = getattr(module.lib, f"{bench.function}_hand")
        buffers = [module.ffi.from_buffer("double[]", x) for x in arrays]
        sizes = (len(arrays[0]),) if bench.length_argument else ()
        return lambda iters: function(*buffers, *sizes, iters)
    if impl.family == "Eigen":
        function = getattr(ctypes.CDLL(str(eigen_library_path())), f"{bench.function}_eigen")
        sizes = (len(arrays[0]),) if bench.length_argument else ()
        function.argtypes = [ctypes.c_void_p] * len(arrays) + [ctypes.c_int64] * (len(sizes) + 1)
        function.restype = ctypes.c_double
        pointers = [x.ctypes.data for x in arrays]
        return lambda iters: function(*pointers, *sizes, iters)
    if impl.family == "Numba":
        from . import micro_numba

        suffix = "fused" if impl.key == "numba-fused" else "alloc"
        function = getattr(micro_numba, f"{bench.function}_{suffix}")
        return lambda iters: function(*arrays, iters)
    if impl.family == "numpy":
        return lambda iters: bench.numpy(*arrays, iters)
    raise ValueError(f"unknown implementation family {impl.family!r}")
