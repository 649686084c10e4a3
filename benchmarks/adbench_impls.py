"""What the ADBench benchmark compares: the cases (ADBench's objectives at ADBench's sizes, with
inputs generated as ADBench's generators and readers make them) and the implementations, each
turned into a function ``call()`` that runs one objective once and returns its result in the
numpy oracle's form (a float, an array, or a tuple of arrays).

The F̃ kernels and their numpy oracles are tests/corpus/adbench_*.py; the hand-written C++ and
the Eigen versions are baselines/adbench_manual.cpp and baselines/adbench_eigen.cpp; Numba and
PyTorch are adbench_numba.py and adbench_torch.py.
"""
from __future__ import annotations

import ctypes
import pathlib
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from fsmooth.options import VARIANTS

from . import micro_impls
from .micro_impls import BASELINES, DEFAULT_VARIANT, EIGEN_INCLUDE

TESTS = pathlib.Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:  # the F̃ kernels live in the test corpus
    sys.path.insert(0, str(TESTS))

from corpus import adbench_ba, adbench_gmm, adbench_hand, adbench_lstm  # noqa: E402

MANUAL_FLAGS = ("-O3", "-march=native", "-shared", "-fPIC")  # as ADBench builds its manual module
EIGEN_FLAGS = ("-O3", "-march=native", "-DNDEBUG", "-shared", "-fPIC")
HEAP_COUNTER_FLAGS = ("-O2", "-shared", "-fPIC")
SEED = 20180726  # ADBench's arXiv date; every case's inputs come from its own stream of it

# The DPS paper's names of the variants (§5), for the memory ladder.
PAPER_NAMES = {"leaky": "CL", "leaky_fused": "CLF", "gc": "CG", "malloc": "D", "fused": "DF",
               "buffers": "DFB", "arena": "DFBS"}


# ----------------------------------------------------------------------------- cases

@dataclass(frozen=True)
class Case:
    objective: str  # gmm, ba, hand, lstm
    name: str  # ADBench's file name for these sizes
    sizes: tuple  # the objective's size parameters (see ``inputs``)
    size: int  # the x axis of the plots: a measure of the work (see the *_case functions)

    def inputs(self) -> tuple:
        """The F̃ kernel's arguments, made afresh from the case's seed."""
        rng = np.random.default_rng([SEED, *map(ord, self.name)])
        return INPUTS[self.objective](rng, *self.sizes)


def gmm_inputs(rng, d, k, n):
    """As ADBench's GMM generator: uniform alphas, means and x, icf with the diagonal logs first,
    Wishart γ = 1, m = 0."""
    icf = np.concatenate([rng.uniform(-0.5, 0.5, (k, d)), rng.uniform(-1.0, 1.0, (k, d * (d - 1) // 2))],
                         axis=1)
    return (rng.uniform(-1.0, 1.0, k), rng.uniform(-2.0, 2.0, (k, d)), icf,
            rng.uniform(-2.0, 2.0, (n, d)), 1.0, 0)


def ba_inputs(rng, n, m, p):
    """As ADBench's BA reader: its file holds one camera, one point, one weight and one feature,
    tiled to n cameras, m points and p observations, observation i = (i mod n, i mod m).  Each copy
    is jittered here (1e-3 relative) so that no value is the same in every copy, which a compiler
    could exploit."""
    cam = np.array([0.3, -0.2, 0.1, 0.1, 0.2, -4.0, 500.0, 0.1, -0.1, 1e-3, -1e-4])
    point = np.array([0.5, -0.3, 2.0])
    cams = np.tile(cam, (n, 1)) * (1.0 + 1e-3 * rng.uniform(-1.0, 1.0, (n, 11)))
    points = np.tile(point, (m, 1)) * (1.0 + 1e-3 * rng.uniform(-1.0, 1.0, (m, 3)))
    weights = 0.8 * (1.0 + 1e-3 * rng.uniform(-1.0, 1.0, p))
    feats = np.tile([-120.0, 70.0], (p, 1)) * (1.0 + 1e-3 * rng.uniform(-1.0, 1.0, (p, 2)))
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1).astype(np.int64)
    return cams, points, weights, obs, feats


HAND_VERTICES = 544  # ADBench's hand model: 22 bones, 544 vertices


def hand_inputs(rng, n_corr):
    """A hand with ADBench's structure (5 fingers: 22 bones, 26 pose parameters) and 544
    vertices, ``n_corr`` correspondences, the simple objective (tests/test_adbench_corpus.py's
    synthetic model: ADBench's model files are not needed for the arithmetic)."""
    from test_adbench_corpus import hand_model, hand_theta

    parents, rel, inv, pos, weights, _ = hand_model(rng, 5, HAND_VERTICES)
    theta = hand_theta(rng, 5, False)
    corr = rng.integers(0, HAND_VERTICES, n_corr).astype(np.int64)
    return theta, parents, rel, inv, pos, weights, False, corr, rng.uniform(-3.0, 3.0, (n_corr, 3))


LSTM_CHAR_BITS = 14  # ADBench's LSTM data: each character as its 14 bits (b = 14)


def lstm_inputs(rng, layers, chars):
    """As ADBench's LSTM generator: parameters and state uniform in [0, 1), the text as the bits
    of its characters (here random characters below 2^14)."""
    b = LSTM_CHAR_BITS
    codes = rng.integers(32, 2 ** b, chars)
    sequence = ((codes[:, None] >> np.arange(b)[None, :]) & 1).astype(np.float64)
    return (rng.random((2 * layers, 4 * b)), rng.random((3, b)), rng.random((2 * layers, b)), sequence)


INPUTS = {"gmm": gmm_inputs, "ba": ba_inputs, "hand": hand_inputs, "lstm": lstm_inputs}

GMM_D = (2, 10, 20, 32, 64, 128)
GMM_K = (5, 10, 25, 50, 100, 200)
# ADBench's ba1 ... ba10: (cameras n, points m, observations p)
BA_SIZES = ((49, 7776, 31843), (21, 11315, 36455), (161, 48126, 182072), (372, 47423, 204472),
            (257, 65132, 225911), (539, 65220, 277273), (93, 61203, 287451), (88, 64298, 383937),
            (810, 88814, 393775), (1197, 126327, 563734))
# ADBench's hand1 ... hand12 (t26: 26 pose parameters): the correspondence counts
HAND_CORRESPONDENCES = (100, 192, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200, 100000)
LSTM_SIZES = ((2, 1024), (2, 4096), (4, 1024), (4, 4096))


def gmm_case(d, k, n):
    # size: the multiply-adds of Q_k (x_i - means[k]) over all points and components
    return Case("gmm", f"gmm_d{d}_K{k}_n{n // 1000}k", (d, k, n), n * k * d * (d + 1) // 2)


def ba_case(i):
    n, m, p = BA_SIZES[i - 1]
    return Case("ba", f"ba{i}_n{n}_m{m}_p{p}", (n, m, p), p)


def hand_case(i):
    c = HAND_CORRESPONDENCES[i - 1]
    return Case("hand", f"hand{i}_t26_c{c}", (c,), c)


def lstm_case(layers, chars):
    return Case("lstm", f"lstm_l{layers}_c{chars}", (layers, chars), layers * chars)


FULL_CASES = ([gmm_case(d, k, n) for n in (1000, 10000) for d in GMM_D for k in GMM_K]
              + [ba_case(i) for i in range(1, 11)]
              + [hand_case(i) for i in range(1, 13)]
              + [lstm_case(l, c) for l, c in LSTM_SIZES])
# What a shared, loaded 2-core machine can run in reasonable time (benchmarks/RESULTS.md's run).
REDUCED_CASES = ([gmm_case(d, k, 1000) for d in (2, 10, 20) for k in (5, 25)]
                 + [ba_case(i) for i in (1, 2, 3)]
                 + [hand_case(i) for i in (1, 2, 3, 4, 5)]
                 + [lstm_case(2, 1024)])
QUICK_CASES = [gmm_case(2, 5, 1000), ba_case(1), hand_case(1), lstm_case(2, 1024)]

# The memory ladder's cases: one size per objective, small enough for the leaky variants'
# memory at the largest call count to fit the machine.
MEMORY_CASES = {"gmm": gmm_case(10, 5, 1000), "ba": ba_case(1), "hand": hand_case(1)}


# ----------------------------------------------------------------------------- implementations

@dataclass(frozen=True)
class Implementation:
    key: str  # stable name in the JSON
    label: str  # name in tables and plots
    family: str  # fsmooth, C++, Eigen, Numba, numpy, PyTorch
    variant: str | None = None  # the fsmooth variant
    fastmath: bool = False  # fsmooth's Options.fastmath (reassociation and multiply-add contraction)


def implementations() -> list[Implementation]:
    """The time comparison's implementations: fsmooth's default, the same with ``fastmath`` (the
    licence g++ takes by default, which the manual C++ has: multiply-adds contracted) and the
    baselines."""
    return [Implementation(f"fsmooth-{DEFAULT_VARIANT}", f"fsmooth {DEFAULT_VARIANT} (default)",
                           "fsmooth", DEFAULT_VARIANT),
            Implementation("fsmooth-fastmath", "fsmooth fastmath", "fsmooth", DEFAULT_VARIANT, fastmath=True),
            Implementation("manual", "manual C++", "C++"),
            Implementation("eigen", "Eigen", "Eigen"),
            Implementation("numba", "Numba", "Numba"),
            Implementation("numpy", "numpy", "numpy"),
            Implementation("pytorch", "PyTorch (CPU)", "PyTorch")]


def ladder_implementations() -> list[Implementation]:
    """The memory ladder's: every fsmooth variant, manual C++, numpy and PyTorch."""
    return ([Implementation(f"fsmooth-{name}", f"{PAPER_NAMES[name]} ({name})"
                            + (", default" if name == DEFAULT_VARIANT else ""), "fsmooth", name)
             for name in VARIANTS]
            + [Implementation("manual", "manual C++", "C++"), Implementation("numpy", "numpy", "numpy"),
               Implementation("pytorch", "PyTorch (CPU)", "PyTorch")])


def unavailable(impl: Implementation) -> str | None:
    """Why ``impl`` cannot run here, or None."""
    if impl.family == "fsmooth":
        return micro_impls.unavailable(micro_impls.Implementation(impl.key, impl.label, "fsmooth",
                                                                  impl.variant))
    if impl.family in ("Eigen", "Numba"):
        return micro_impls.unavailable(micro_impls.Implementation(impl.key, impl.label, impl.family))
    if impl.family == "PyTorch":
        try:
            import torch  # noqa: F401
        except ImportError:
            return "PyTorch is not installed (pip install torch; a CPU wheel is enough)"
    return None


NUMPY_CHUNK_ELEMENTS = 1 << 22  # 32 MiB of doubles per n × K × d block


def numpy_gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m):
    """The numpy oracle of the GMM objective over blocks of points: the oracle itself builds
    n × K × d arrays (2 GB at ADBench's largest size).  Each block's objective counts the Wishart
    prior once, so all but one are taken off again."""
    n, d = x.shape
    rows = max(1, NUMPY_CHUNK_ELEMENTS // (len(alphas) * d))
    blocks = [x[i:i + rows] for i in range(0, n, rows)]
    total = sum(adbench_gmm.np_gmm_full_objective(alphas, means, icf, block, wishart_gamma, wishart_m)
                for block in blocks)
    return total - (len(blocks) - 1) * adbench_gmm.np_log_wishart_prior(d, icf, wishart_gamma, wishart_m)


ORACLES = {"gmm": numpy_gmm_objective, "ba": adbench_ba.np_ba_objective,
           "hand": adbench_hand.np_hand_objective, "lstm": adbench_lstm.np_lstm_objective}
KERNELS = {"gmm": adbench_gmm.gmm_full_objective, "ba": adbench_ba.ba_objective,
           "hand": adbench_hand.hand_objective, "lstm": adbench_lstm.lstm_objective}


def manual_library() -> ctypes.CDLL:
    return ctypes.CDLL(str(micro_impls.cxx_library_path(BASELINES / "adbench_manual.cpp", MANUAL_FLAGS)))


def heap_counter_path() -> pathlib.Path:
    """The memory ladder's malloc counter (baselines/heap_counter.cpp), for LD_PRELOAD."""
    return micro_impls.cxx_library_path(BASELINES / "heap_counter.cpp", HEAP_COUNTER_FLAGS)


def eigen_library() -> ctypes.CDLL:
    return ctypes.CDLL(str(micro_impls.cxx_library_path(BASELINES / "adbench_eigen.cpp",
                                                        (*EIGEN_FLAGS, f"-I{EIGEN_INCLUDE}"))))


def _native_call(function, objective: str, args: tuple) -> Callable:
    """``call()`` of one of the C++ objectives (manual or Eigen: the same signatures), with its
    outputs allocated per call, as the F̃ kernels allocate theirs."""
    p, i64, dbl = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    if objective == "gmm":
        alphas, means, icf, x, gamma, m = args
        function.argtypes = [i64, i64, i64, p, p, p, p, dbl, i64]
        function.restype = dbl
        return lambda: function(x.shape[1], len(alphas), len(x), alphas.ctypes.data, means.ctypes.data,
                                icf.ctypes.data, x.ctypes.data, gamma, m)
    if objective == "ba":
        cams, x, w, obs, feats = args
        function.argtypes = [i64, p, p, p, p, p, p, p]
        pointers = [a.ctypes.data for a in (cams, x, w, obs, feats)]

        def call(keep_alive=args):  # the pointers are into ``args``: it must outlive ``call``
            reproj_err, w_err = np.empty((len(w), 2)), np.empty(len(w))
            function(len(w), *pointers, reproj_err.ctypes.data, w_err.ctypes.data)
            return reproj_err, w_err
        return call
    if objective == "hand":
        theta, parents, rel, inv, pos, weights, mirrored, corr, points = args
        function.argtypes = [i64, i64, i64, p, p, p, p, p, p, i64, p, p, p]
        pointers = [a.ctypes.data for a in (theta, parents, rel, inv, pos, weights)]

        def call(keep_alive=args):  # as for ba
            err = np.empty((len(corr), 3))
            function(len(parents), len(pos), len(corr), *pointers, int(mirrored), corr.ctypes.data,
                     points.ctypes.data, err.ctypes.data)
            return err
        return call
    if objective == "lstm":
        main, extra, state, seq = args
        function.argtypes = [i64, i64, i64, p, p, p, p]
        function.restype = dbl
        return lambda: function(len(state) // 2, len(seq), seq.shape[1], main.ctypes.data,
                                extra.ctypes.data, state.ctypes.data, seq.ctypes.data)
    raise ValueError(f"unknown objective {objective!r}")


def _as_numpy(value):
    if isinstance(value, tuple):
        return tuple(_as_numpy(v) for v in value)
    if hasattr(value, "numpy"):  # a torch tensor
        return value.numpy() if value.dim() else float(value)
    return value


def runner(impl: Implementation, case: Case) -> tuple[Callable, Callable]:
    """(``call()``, ``result(value)``): one run of the objective on the case's inputs, and what
    turns its value into the oracle's form (for the check; not timed).  Building, loading and
    converting the inputs happen here, not in ``call``."""
    args = case.inputs()
    objective = case.objective
    if impl.family == "fsmooth":
        kernel = KERNELS[objective].variant(impl.variant)
        if impl.fastmath:
            kernel = kernel.with_options(fastmath=True)
        return (lambda: kernel(*args)), _as_numpy
    if impl.family in ("C++", "Eigen"):
        library = manual_library() if impl.family == "C++" else eigen_library()
        function = getattr(library, f"{objective}_objective_{'manual' if impl.family == 'C++' else 'eigen'}")
        return _native_call(function, objective, args), _as_numpy
    if impl.family == "Numba":
        from . import adbench_numba

        function = getattr(adbench_numba, f"{objective}_objective")
        return (lambda: function(*args)), _as_numpy
    if impl.family == "numpy":
        oracle = ORACLES[objective]
        return (lambda: oracle(*args)), _as_numpy
    if impl.family == "PyTorch":
        import torch

        from . import adbench_torch

        torch.set_num_threads(1)  # every other implementation runs on one core
        function = getattr(adbench_torch, f"{objective}_objective")
        tensors = adbench_torch.inputs(args)
        return (lambda: function(*tensors)), _as_numpy
    raise ValueError(f"unknown implementation family {impl.family!r}")


def oracle_result(case: Case):
    return ORACLES[case.objective](*case.inputs())


def check(got, expected, rtol: float = 1e-9) -> str | None:
    """None if ``got`` equals the oracle's ``expected`` to ``rtol`` (relative to the largest
    magnitude of the result, so that a near-zero entry is not held to a relative bound), else
    what differs."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple) or len(got) != len(expected):
            return f"a {type(got).__name__} where a tuple of {len(expected)} was expected"
        for g, e in zip(got, expected):
            problem = check(g, e, rtol)
            if problem:
                return problem
        return None
    got, expected = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    scale = max(float(np.max(np.abs(expected))) if expected.size else 0.0, 1.0)
    error = float(np.max(np.abs(got - expected))) if expected.size else 0.0
    if not np.isfinite(error) or error > rtol * scale:
        return f"max error {error:.3g} (tolerance {rtol * scale:.3g})"
    return None
