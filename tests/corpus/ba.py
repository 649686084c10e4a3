"""Bundle adjustment: the camera projection of ADBench's BA objective (DPS paper Fig. 13).

A camera is 11 doubles, laid out as ADBench lays it out:
    cam[0:3]  axis-angle rotation r (Rodrigues)     cam[3:6]  camera centre C
    cam[6]    focal length f                        cam[7:9]  principal point x0
    cam[9:11] radial distortion kappa
The projection of a world point X is
    Xcam = R(r) (X - C);   p = Xcam[0:2] / Xcam[2];   p' = p (1 + k1 |p|^2 + k2 |p|^4);
    proj = f p' + x0.
The rotation uses the closed form of Rodrigues' formula and, when the angle is zero, its
first-order form X + r × X (ADBench does the same to keep the derivative defined there).
"""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Index, build, ifold, length


@fs.kernel
def dot3(a: Array[Double], b: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + a[i] * b[i], 0.0, 3)


@fs.kernel
def cross3(a: Array[Double], b: Array[Double]) -> Array[Double]:
    return build(3, lambda i: (a[1] * b[2] - a[2] * b[1]) if i == 0 else
                 ((a[2] * b[0] - a[0] * b[2]) if i == 1 else (a[0] * b[1] - a[1] * b[0])))


@fs.kernel
def rodrigues_rotate_point(rot: Array[Double], x: Array[Double]) -> Array[Double]:
    sqtheta = dot3(rot, rot)
    if sqtheta != 0:
        theta = fs.sqrt(sqtheta)
        costheta = fs.cos(theta)
        sintheta = fs.sin(theta)
        w = build(3, lambda i: rot[i] / theta)
        w_cross_x = cross3(w, x)
        along_axis = dot3(w, x) * (1.0 - costheta)
        return build(3, lambda i: x[i] * costheta + w_cross_x[i] * sintheta + w[i] * along_axis)
    else:
        rot_cross_x = cross3(rot, x)
        return build(3, lambda i: x[i] + rot_cross_x[i])


@fs.kernel
def radial_distort(kappa: Array[Double], p: Array[Double]) -> Array[Double]:
    rsq = p[0] * p[0] + p[1] * p[1]
    scale = 1.0 + kappa[0] * rsq + kappa[1] * rsq * rsq
    return build(2, lambda i: p[i] * scale)


@fs.kernel
def project(cam: Array[Double], x: Array[Double]) -> Array[Double]:
    rot = build(3, lambda i: cam[i])
    x_centred = build(3, lambda i: x[i] - cam[i + 3])
    x_cam = rodrigues_rotate_point(rot, x_centred)
    p = build(2, lambda i: x_cam[i] / x_cam[2])
    kappa = build(2, lambda i: cam[i + 9])
    distorted = radial_distort(kappa, p)
    return build(2, lambda i: distorted[i] * cam[6] + cam[i + 7])


@fs.kernel
def reprojection_error(cam: Array[Double], x: Array[Double], weight: Double,
                       feat: Array[Double]) -> Array[Double]:
    proj = project(cam, x)
    return build(2, lambda j: weight * (proj[j] - feat[j]))


@fs.kernel
def reprojection_errors(cams: Array[Array[Double]], points: Array[Array[Double]],
                        weights: Array[Double], obs: Array[Array[Index]],
                        feats: Array[Array[Double]]) -> Array[Array[Double]]:
    """ADBench's residuals: observation i sees point obs[i][1] from camera obs[i][0]."""
    return build(length(obs), lambda i: reprojection_error(
        cams[obs[i][0]], points[obs[i][1]], weights[i], feats[i]))


# ----------------------------------------------------------------------------- numpy oracles

def np_dot3(a, b):
    return float(a @ b)


def np_cross3(a, b):
    return np.cross(a, b)


def np_rodrigues_rotate_point(rot, x):
    theta = np.linalg.norm(rot)
    if theta == 0:
        return x + np.cross(rot, x)
    # The rotation matrix R = I + sin θ [k]× + (1 - cos θ) [k]×², k = rot / θ.
    k = rot / theta
    k_cross = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    rotation = np.eye(3) + np.sin(theta) * k_cross + (1.0 - np.cos(theta)) * (k_cross @ k_cross)
    return rotation @ x


def np_radial_distort(kappa, p):
    rsq = float(p @ p)
    return p * (1.0 + kappa[0] * rsq + kappa[1] * rsq ** 2)


def np_project(cam, x):
    x_cam = np_rodrigues_rotate_point(cam[0:3], x - cam[3:6])
    p = x_cam[:2] / x_cam[2]
    return np_radial_distort(cam[9:11], p) * cam[6] + cam[7:9]


def np_reprojection_error(cam, x, weight, feat):
    return weight * (np_project(cam, x) - feat)


def np_reprojection_errors(cams, points, weights, obs, feats):
    projections = np.array([np_project(cams[c], points[p]) for c, p in obs]).reshape(len(obs), 2)
    return weights[:, None] * (projections - feats)
