"""ADBench's four objectives in F̃ (tests/corpus/adbench_*.py): every exported kernel's reference
semantics against an independent vectorised numpy oracle over several sizes, the smallest
meaningful ones included; then, in a separate section (``COMPILED_CASES``), the compiled C and
the OpenCL version against the reference and the oracle."""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import fsmooth as fs
from corpus import adbench_ba, adbench_gmm, adbench_hand, adbench_lstm

MODULES = (adbench_gmm, adbench_ba, adbench_hand, adbench_lstm)
TOL = dict(rtol=1e-9, atol=1e-12)


@dataclass(frozen=True)
class Case:
    kernel: fs.Kernel
    make_args: Callable  # (rng, variant) -> tuple of arguments
    variants: tuple
    dims: tuple = ()  # names of a variant's entries, for the test ids

    @property
    def module(self):
        return next(m for m in MODULES if getattr(m, self.kernel.name, None) is self.kernel)

    @property
    def oracle(self) -> Callable:
        return getattr(self.module, f"np_{self.kernel.name}")

    def label(self, variant) -> str:
        values = variant if isinstance(variant, tuple) else (variant,)
        names = self.dims or ("",) * len(values)
        shown = "-".join(f"{n}{_show(v)}" for n, v in zip(names, values))
        return f"{self.module.__name__.split('.')[-1]}.{self.kernel.name}[{shown}]"


def _show(v) -> str:
    return {True: "yes", False: "no"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def arguments(case: Case, variant) -> tuple:
    seed = zlib.crc32(f"{case.kernel.name}/{variant}".encode())
    return case.make_args(np.random.default_rng(seed), variant)


def assert_same(got, expected):
    """Equal results, a tuple result entry by entry."""
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
        return
    assert np.shape(got) == np.shape(expected)
    np.testing.assert_allclose(got, expected, **TOL)


# ----------------------------------------------------------------------------- GMM

def gmm_args(rng, sizes):
    """ADBench's GMM inputs: n points, K components of dimension d, Wishart (γ, m)."""
    n, k, d = sizes
    icf = np.concatenate([rng.uniform(-0.5, 0.5, (k, d)),
                          rng.uniform(-1.0, 1.0, (k, d * (d - 1) // 2))], axis=1)
    return (rng.uniform(-1.0, 1.0, k), rng.uniform(-2.0, 2.0, (k, d)), icf,
            rng.uniform(-2.0, 2.0, (n, d)), float(rng.uniform(0.5, 2.0)), int(rng.integers(0, 4)))


GMM_SIZES = ((1, 1, 1), (1, 2, 1), (5, 3, 2), (10, 4, 5), (16, 6, 8))
GMM_CASES = [
    Case(adbench_gmm.log_gamma_distrib, lambda rng, p: (float(rng.uniform(p, p + 5)), p),
         (1, 2, 5, 10), ("p",)),
    Case(adbench_gmm.sum_log_diag,
         lambda rng, d: (gmm_args(rng, (1, 1, d))[2][0], d), (1, 2, 5), ("d",)),
    Case(adbench_gmm.q_diagonals, lambda rng, s: (gmm_args(rng, (1, *s))[2], s[1]),
         ((1, 1), (3, 2), (4, 5)), ("K", "d")),
    Case(adbench_gmm.sum_qs, lambda rng, s: (gmm_args(rng, (1, *s))[2], s[1]),
         ((1, 1), (3, 2), (4, 5)), ("K", "d")),
    Case(adbench_gmm.lower_times_x,
         lambda rng, d: (rng.uniform(0.5, 2.0, d),) + (gmm_args(rng, (1, 1, d))[2][0], rng.uniform(-2, 2, d)),
         (1, 2, 3, 8), ("d",)),
    Case(adbench_gmm.main_terms,
         lambda rng, s: ((lambda a, m, icf: (a, rng.uniform(-1, 1, s[0]), rng.uniform(0.5, 2.0, (s[0], s[1])),
                                             m, icf))(*gmm_args(rng, (1, *s))[:3]) + (rng.uniform(-2, 2, s[1]),)),
         ((1, 1), (3, 2), (4, 5)), ("K", "d")),
    Case(adbench_gmm.q_times_x,
         lambda rng, d: (gmm_args(rng, (1, 1, d))[2][0], rng.uniform(-2, 2, d)), (1, 2, 3, 8),
         ("d",)),
    Case(adbench_gmm.gmm_main_terms,
         lambda rng, s: gmm_args(rng, (1, *s))[:3] + (rng.uniform(-2, 2, s[1]),),
         ((1, 1), (3, 2), (4, 5)), ("K", "d")),
    Case(adbench_gmm.log_wishart_prior,
         lambda rng, s: (s[1],) + gmm_args(rng, (1, *s))[2:3] + gmm_args(rng, (1, *s))[4:],
         ((1, 1), (3, 2), (4, 5)), ("K", "d")),
    Case(adbench_gmm.gmm_full_objective, gmm_args, GMM_SIZES, ("n", "K", "d")),
]


def test_gmm_wishart_m_and_gamma_matter():
    """The prior is really there: the objective changes with m and γ as ADBench's formula says."""
    alphas, means, icf, x, gamma, _ = gmm_args(np.random.default_rng(3), (4, 2, 3))
    f = adbench_gmm.gmm_full_objective.reference
    base = f(alphas, means, icf, x, gamma, 0)
    shifted = f(alphas, means, icf, x, gamma, 1)
    # m → m + 1: -Σ_k sum_qs[k] in the sum, and -K ΔC with N = d + m + 1
    d, k = 3, 2

    def c(m):
        big_n = d + m + 1
        return big_n * d * (math.log(gamma) - 0.5 * math.log(2)) - adbench_gmm.np_log_gamma_distrib(
            0.5 * big_n, d)
    np.testing.assert_allclose(shifted - base, -icf[:, :d].sum() - k * (c(1) - c(0)), rtol=1e-9)


# ----------------------------------------------------------------------------- BA

def camera(rng, angle):
    axis = rng.normal(size=3)
    return np.concatenate([axis / np.linalg.norm(axis) * angle, rng.uniform(-0.5, 0.5, 3),
                           [rng.uniform(0.5, 2.0)], rng.uniform(-0.2, 0.2, 2),
                           rng.uniform(-0.1, 0.1, 2)])


def ba_args(rng, sizes):
    """n cameras (the first unrotated: Rodrigues' zero-angle branch), m points in front of them,
    p observations."""
    n, m, p = sizes
    cams = np.stack([camera(rng, 0.0 if i == 0 else rng.uniform(0.1, 1.0)) for i in range(n)])
    points = np.stack([rng.uniform(-1.0, 1.0, m), rng.uniform(-1.0, 1.0, m),
                       rng.uniform(4.0, 8.0, m)], axis=1)
    obs = np.stack([rng.integers(0, n, p), rng.integers(0, m, p)], axis=1).astype(np.int64)
    return cams, points, rng.uniform(0.5, 1.5, p), obs, rng.uniform(-1.0, 1.0, (p, 2))


BA_CASES = [
    Case(adbench_ba.weight_errors, lambda rng, p: (rng.uniform(0.5, 1.5, p),), (1, 4, 17), ("p",)),
    Case(adbench_ba.ba_objective, ba_args, ((1, 1, 1), (2, 3, 5), (4, 10, 25), (6, 20, 60)),
         ("n", "m", "p")),
]


# ----------------------------------------------------------------------------- hand

def rigid(rng, length):
    """A 4 × 4 rest transform: a small rotation and an offset mostly along the bone."""
    t = np.eye(4)
    t[:3, :3] = Rotation.from_rotvec(rng.uniform(-0.4, 0.4, 3)).as_matrix()
    t[:3, 3] = [rng.uniform(-0.2, 0.2), length, rng.uniform(-0.2, 0.2)]
    return t


def hand_model(rng, fingers, n_verts, n_triangles=0):
    """A synthetic hand with ADBench's structure: bone 0 the root, bone 1 the wrist, then per
    finger a chain of four bones hanging from the wrist (F = 5: ADBench's 22 bones); rest
    transforms, their inverse absolutes, homogeneous vertices near the bones, skinning weights
    that sum to 1 per vertex, and triangles."""
    parents = [-1, 0] + [p for f in range(fingers) for p in (1, 2 + 4 * f, 3 + 4 * f, 4 + 4 * f)]
    n_bones = len(parents)
    relatives = np.stack([rigid(rng, rng.uniform(0.3, 1.0)) for _ in range(n_bones)])
    absolutes = np.empty_like(relatives)
    for b, p in enumerate(parents):
        absolutes[b] = relatives[b] if p < 0 else absolutes[p] @ relatives[b]
    near = absolutes[rng.integers(0, n_bones, n_verts), :3, 3]
    base_positions = np.concatenate([near + rng.uniform(-0.3, 0.3, (n_verts, 3)),
                                     np.ones((n_verts, 1))], axis=1)
    weights = rng.uniform(0.0, 1.0, (n_bones, n_verts)) ** 4
    weights /= weights.sum(axis=0, keepdims=True)
    triangles = np.array([rng.choice(n_verts, 3, replace=False) for _ in range(n_triangles)],
                         dtype=np.int64).reshape(n_triangles, 3)
    return (np.array(parents, dtype=np.int64), relatives, np.linalg.inv(absolutes),
            base_positions, weights, triangles)


def hand_theta(rng, fingers, still):
    """ADBench's 6 + 4F pose parameters; ``still``: no global rotation (the identity branch)."""
    theta = np.concatenate([rng.uniform(-1.0, 1.0, 3), rng.uniform(-2.0, 2.0, 3),
                            rng.uniform(-0.8, 0.8, 4 * fingers)])
    if still:
        theta[0:3] = 0.0
    return theta


def hand_args(rng, variant, complicated=False):
    fingers, n_verts, n_corr, mirrored, still = variant
    parents, rel, inv, pos, weights, triangles = hand_model(rng, fingers, n_verts, n_verts)
    theta = hand_theta(rng, fingers, still)
    points = rng.uniform(-3.0, 3.0, (n_corr, 3))
    if complicated:
        us = rng.uniform(0.0, 1.0, (n_corr, 2))
        corr = rng.integers(0, len(triangles), n_corr).astype(np.int64)
        return theta, us, parents, rel, inv, pos, weights, mirrored, triangles, corr, points
    corr = rng.integers(0, n_verts, n_corr).astype(np.int64)
    return theta, parents, rel, inv, pos, weights, mirrored, corr, points


def skinning_args(rng, variant):
    fingers, n_verts, _, mirrored, still = variant
    parents, rel, inv, pos, weights, _ = hand_model(rng, fingers, n_verts)
    pose = adbench_hand.np_to_pose_params(hand_theta(rng, fingers, still), len(parents))
    return parents, rel, inv, pos, weights, mirrored, pose


HAND_DIMS = ("F", "V", "C", "mirrored-", "still-")
# (fingers, vertices, correspondences, mirrored, no global rotation); F = 5 is ADBench's hand
HAND_SIZES = ((0, 3, 2, False, False), (1, 8, 5, False, True), (2, 20, 12, True, False),
              (5, 40, 30, False, False))
ANGLES = (0.0, 5e-5, 0.7, 3.0)  # below 1e-4: ADBench's identity


def rotvec(rng, angle):
    axis = rng.normal(size=3)
    return axis / np.linalg.norm(axis) * angle


def mat(rng, rows, cols):
    return rng.uniform(-2.0, 2.0, (rows, cols))


HAND_CASES = [
    Case(adbench_hand.mat_mult, lambda rng, s: (mat(rng, s[0], s[1]), mat(rng, s[1], s[2])),
         ((1, 1, 1), (3, 3, 3), (4, 4, 4), (2, 5, 3)), ("", "x", "x")),
    Case(adbench_hand.skew_entry, lambda rng, ij: (rng.normal(size=3), *ij),
         tuple((i, j) for i in range(3) for j in range(3)), ("i", "j")),
    Case(adbench_hand.rotation_about,
         lambda rng, a: (rotvec(rng, 1.0), math.sin(a), math.cos(a)), (0.0, 0.7, 3.0), ("angle",)),
    Case(adbench_hand.axis_rotation, lambda rng, axis: (axis, float(rng.uniform(-3, 3))),
         (0, 1, 2), ("axis",)),
    Case(adbench_hand.angle_axis_to_rotation_matrix, lambda rng, a: (rotvec(rng, a),), ANGLES,
         ("angle",)),
    Case(adbench_hand.euler_angles_to_rotation_matrix, lambda rng, a: (rng.uniform(-a, a, 3),),
         (0.0, 0.7, 3.0), ("range",)),
    Case(adbench_hand.pose_param,
         lambda rng, pr: (hand_theta(rng, 5, False), *pr),
         ((0, 1), (1, 2), (2, 0), (3, 0), (5, 0), (5, 1), (5, 2), (6, 0), (6, 1), (7, 0), (8, 0),
          (9, 0), (21, 1), (24, 0)), ("row", "col")),
    Case(adbench_hand.to_pose_params,
         lambda rng, f: (hand_theta(rng, f, False), 2 + 4 * f), (0, 1, 5), ("F",)),
    Case(adbench_hand.get_posed_relatives,
         lambda rng, f: (hand_model(rng, f, 1)[1],
                         adbench_hand.np_to_pose_params(hand_theta(rng, f, False), 2 + 4 * f)),
         (0, 1, 5), ("F",)),
    Case(adbench_hand.posed_relative,
         lambda rng, a: (rigid(rng, 0.5), Rotation.from_rotvec(rotvec(rng, a)).as_matrix()),
         (0.0, 0.7), ("angle",)),
    Case(adbench_hand.relatives_to_absolutes,
         lambda rng, f: (hand_model(rng, f, 1)[1], hand_model(rng, f, 1)[0]), (0, 1, 5), ("F",)),
    Case(adbench_hand.with_absolute,
         lambda rng, b: (np.stack([rigid(rng, 1.0) for _ in range(6)]),
                         np.stack([rigid(rng, 1.0) for _ in range(6)]),
                         hand_model(rng, 1, 1)[0], b), (0, 1, 2, 5), ("bone",)),
    Case(adbench_hand.apply_global_transform,
         lambda rng, v: (adbench_hand.np_to_pose_params(hand_theta(rng, 1, v[1]), 6),
                         rng.uniform(-2, 2, (v[0], 3))),
         ((1, False), (7, False), (7, True)), ("V", "still-")),
    Case(adbench_hand.get_skinned_vertex_positions, skinning_args, HAND_SIZES, HAND_DIMS),
    Case(adbench_hand.hand_vertex_positions, lambda rng, v: hand_args(rng, v)[:7], HAND_SIZES,
         HAND_DIMS),
    Case(adbench_hand.hand_objective, hand_args, HAND_SIZES, HAND_DIMS),
    Case(adbench_hand.hand_objective_complicated, lambda rng, v: hand_args(rng, v, True),
         HAND_SIZES, HAND_DIMS),
]


# ----------------------------------------------------------------------------- LSTM

def lstm_args(rng, sizes):
    """ADBench's LSTM inputs: l layers, hidden size b, c characters."""
    l, b, c = sizes
    return (rng.uniform(-1.0, 1.0, (2 * l, 4 * b)), rng.uniform(-1.0, 1.0, (3, b)),
            rng.uniform(-1.0, 1.0, (2 * l, b)), rng.uniform(-1.0, 1.0, (c, b)))


def lstm_layer_args(rng, s):
    main, _, state, seq = lstm_args(rng, (*s, 2))
    return main, (state, seq[0]), int(rng.integers(0, s[0]))


def lstm_step_args(rng, s):
    main, extra, state, seq = lstm_args(rng, s)
    return main, extra, seq, (state, float(rng.normal())), int(rng.integers(0, s[2] - 1))


LSTM_SIZES = ((1, 1, 2), (1, 3, 4), (2, 4, 6), (3, 8, 10))
LSTM_DIMS = ("l", "b", "c")
LSTM_CASES = [
    Case(adbench_lstm.sigmoid, lambda rng, x: (x,), (-30.0, -1.5, 0.0, 2.0, 30.0), ("x",)),
    Case(adbench_lstm.lstm_model,
         lambda rng, b: (rng.uniform(-1, 1, 4 * b), rng.uniform(-1, 1, 4 * b),
                         *rng.uniform(-1, 1, (3, b))), (1, 3, 8), ("b",)),
    Case(adbench_lstm.lstm_layer, lstm_layer_args, ((1, 1), (2, 3), (3, 5)), ("l", "b")),
    Case(adbench_lstm.lstm_predict, lambda rng, s: lstm_args(rng, (*s, 2))[:3]
         + (rng.uniform(-1, 1, s[1]),), ((1, 1), (2, 3), (3, 5)), ("l", "b")),
    Case(adbench_lstm.lstm_step, lstm_step_args, LSTM_SIZES[1:], LSTM_DIMS),
    Case(adbench_lstm.lstm_objective, lstm_args, LSTM_SIZES, LSTM_DIMS),
]

CASES = GMM_CASES + BA_CASES + HAND_CASES + LSTM_CASES
PARAMS = [pytest.param(case, variant, id=case.label(variant))
          for case in CASES for variant in case.variants]


def test_every_kernel_is_covered():
    covered = {case.kernel for case in CASES}
    for module in MODULES:
        kernels = [v for v in vars(module).values()
                   if isinstance(v, fs.Kernel) and v.fn.__module__ == module.__name__]
        assert kernels, module.__name__
        for k in kernels:
            assert k in covered, f"{module.__name__}.{k.name} has no test case"
            assert callable(getattr(module, f"np_{k.name}", None)), f"np_{k.name} is missing"


@pytest.mark.parametrize("case, variant", PARAMS)
def test_reference_matches_numpy(case: Case, variant):
    args = arguments(case, variant)
    assert_same(case.kernel.reference(*args), case.oracle(*args))


# ----------------------------------------------------------------------------- compiled
# The objectives (and a few of their parts) compiled to C and to OpenCL.

OBJECTIVES = {adbench_gmm.gmm_full_objective, adbench_ba.ba_objective,
              adbench_hand.hand_objective, adbench_hand.hand_objective_complicated,
              adbench_lstm.lstm_objective, adbench_gmm.log_gamma_distrib,
              adbench_gmm.q_times_x, adbench_hand.relatives_to_absolutes,
              adbench_lstm.lstm_predict}
def _compiled_param(case: Case, variant):
    return pytest.param(case, variant, id=case.label(variant))


COMPILED_CASES = [_compiled_param(case, variant)
                  for case in CASES if case.kernel in OBJECTIVES for variant in case.variants]
# OpenCL: one small size each (for the GMM objective the first with d > 1: a real triangle)
OPENCL_CASES = [_compiled_param(case, case.variants[2 if case.kernel is adbench_gmm.gmm_full_objective
                                                    else 0])
                for case in CASES if case.kernel in OBJECTIVES]


def _as_numpy(value):
    return tuple(_as_numpy(v) for v in value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("case, variant", COMPILED_CASES)
def test_compiled_matches_reference_and_numpy(case: Case, variant):
    args = arguments(case, variant)
    originals = [tuple(np.copy(x) for x in a) if isinstance(a, tuple) else np.copy(a) for a in args]
    got = _as_numpy(case.kernel(*args))
    assert_same(got, case.kernel.reference(*args))
    assert_same(got, case.oracle(*args))
    for before, after in zip(originals, args):  # inputs are read, never written
        if isinstance(before, tuple):
            for b, a in zip(before, after):
                np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("case, variant", OPENCL_CASES)
def test_opencl_matches_reference_and_numpy(opencl_context, case: Case, variant):
    if not opencl_context.devices[0].double_fp_config:
        pytest.skip("the ADBench objectives are double precision; this device has no fp64")
    args = arguments(case, variant)
    got = _as_numpy(case.kernel.opencl(*args, context=opencl_context))
    assert_same(got, case.kernel.reference(*args))
    assert_same(got, case.oracle(*args))
