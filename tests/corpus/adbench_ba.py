"""ADBench's BA objective (``ba_objective``): the reprojection errors of p observations and
Zach's weight errors, both from one kernel, as a tuple.

    cams   n × 11   [r(3) axis-angle, C(3) centre, f, x0(2), kappa(2)] (see ``ba.py``)
    X      m × 3    points
    w      p        observation weights
    obs    p × 2    (camera index, point index) per observation, int64
    feats  p × 2    measured features

    reproj_err[i] = w[i] (project(cams[obs[i][0]], X[obs[i][1]]) - feats[i])     p × 2
    w_err[i]      = 1 - w[i]²                                                    p
"""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Index, build, length

from . import ba


@fs.kernel
def weight_errors(w: Array[Double]) -> Array[Double]:
    return build(length(w), lambda i: 1.0 - w[i] * w[i])


@fs.kernel
def ba_objective(cams: Array[Array[Double]], x: Array[Array[Double]], w: Array[Double],
                 obs: Array[Array[Index]], feats: Array[Array[Double]]
                 ) -> tuple[Array[Array[Double]], Array[Double]]:
    reproj_err = build(length(obs), lambda i: ba.reprojection_error(
        cams[obs[i][0]], x[obs[i][1]], w[i], feats[i]))
    return reproj_err, weight_errors(w)


# ----------------------------------------------------------------------------- numpy oracles

def _rotate(rots, pts):
    """Rodrigues' rotation of pts[i] by rots[i], vectorised (first-order form at angle 0)."""
    theta = np.linalg.norm(rots, axis=1, keepdims=True)
    safe = np.where(theta == 0.0, 1.0, theta)
    k = rots / safe
    cos, sin = np.cos(theta), np.sin(theta)
    rotated = (pts * cos + np.cross(k, pts) * sin
               + k * np.sum(k * pts, axis=1, keepdims=True) * (1.0 - cos))
    return np.where(theta == 0.0, pts + np.cross(rots, pts), rotated)


def np_weight_errors(w):
    return 1.0 - w ** 2


def np_ba_objective(cams, x, w, obs, feats):
    c = cams[obs[:, 0]]
    xcam = _rotate(c[:, 0:3], x[obs[:, 1]] - c[:, 3:6])
    p = xcam[:, :2] / xcam[:, 2:3]
    rsq = np.sum(p ** 2, axis=1, keepdims=True)
    distorted = p * (1.0 + c[:, 9:10] * rsq + c[:, 10:11] * rsq ** 2)
    proj = distorted * c[:, 6:7] + c[:, 7:9]
    return (w[:, None] * (proj - feats)).reshape(len(obs), 2), np_weight_errors(w)
