"""ADBench's BA objective in single precision: ``ba.py``'s projection and ``adbench_ba.py``'s
``ba_objective`` with Float annotations (F̃ has no type parameters), for the GPU application
benchmark's float32 BA.  The same formulas; ``dot3_f32`` adds its three products directly, since
a fold from the literal 0.0 would compute in Double.
"""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Float, Index, build, length

from . import adbench_ba, ba


@fs.kernel
def dot3_f32(a: Array[Float], b: Array[Float]) -> Float:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@fs.kernel
def cross3_f32(a: Array[Float], b: Array[Float]) -> Array[Float]:
    return build(3, lambda i: (a[1] * b[2] - a[2] * b[1]) if i == 0 else
                 ((a[2] * b[0] - a[0] * b[2]) if i == 1 else (a[0] * b[1] - a[1] * b[0])))


@fs.kernel
def rodrigues_rotate_point_f32(rot: Array[Float], x: Array[Float]) -> Array[Float]:
    sqtheta = dot3_f32(rot, rot)
    if sqtheta != 0:
        theta = fs.sqrt(sqtheta)
        costheta = fs.cos(theta)
        sintheta = fs.sin(theta)
        w = build(3, lambda i: rot[i] / theta)
        w_cross_x = cross3_f32(w, x)
        along_axis = dot3_f32(w, x) * (1.0 - costheta)
        return build(3, lambda i: x[i] * costheta + w_cross_x[i] * sintheta + w[i] * along_axis)
    else:
        rot_cross_x = cross3_f32(rot, x)
        return build(3, lambda i: x[i] + rot_cross_x[i])


@fs.kernel
def project_f32(cam: Array[Float], x: Array[Float]) -> Array[Float]:
    x_cam = rodrigues_rotate_point_f32(build(3, lambda i: cam[i]), build(3, lambda i: x[i] - cam[i + 3]))
    p = build(2, lambda i: x_cam[i] / x_cam[2])
    rsq = p[0] * p[0] + p[1] * p[1]
    scale = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    return build(2, lambda i: p[i] * scale * cam[6] + cam[i + 7])


@fs.kernel
def reprojection_error_f32(cam: Array[Float], x: Array[Float], weight: Float, feat: Array[Float]) -> Array[Float]:
    proj = project_f32(cam, x)
    return build(2, lambda j: weight * (proj[j] - feat[j]))


@fs.kernel
def ba_objective_f32(cams: Array[Array[Float]], x: Array[Array[Float]], w: Array[Float],
                     obs: Array[Array[Index]], feats: Array[Array[Float]]
                     ) -> tuple[Array[Array[Float]], Array[Float]]:
    reproj_err = build(length(obs), lambda i: reprojection_error_f32(cams[obs[i][0]], x[obs[i][1]], w[i], feats[i]))
    return reproj_err, build(length(w), lambda i: 1.0 - w[i] * w[i])


# ----------------------------------------------------------------------------- numpy oracles
# ``ba.py``'s and ``adbench_ba.py``'s, on float64 copies of the data.

def _in_float64(oracle):
    return lambda *args: oracle(*(a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
                                  else a for a in args))


np_dot3_f32 = _in_float64(ba.np_dot3)
np_cross3_f32 = _in_float64(ba.np_cross3)
np_rodrigues_rotate_point_f32 = _in_float64(ba.np_rodrigues_rotate_point)
np_project_f32 = _in_float64(ba.np_project)
np_reprojection_error_f32 = _in_float64(ba.np_reprojection_error)
np_ba_objective_f32 = _in_float64(adbench_ba.np_ba_objective)
