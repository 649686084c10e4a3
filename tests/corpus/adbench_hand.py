"""ADBench's hand-tracking objectives (``hand_objective``, simple and complicated), on a
linear-blend-skinned hand model with ADBench's structure.

The model (ADBench's ``HandModel``), with B bones and V vertices:

    parents                  B        parent bone, -1 for the root; parents come before children
    base_relatives           B × 4×4  rest transform of each bone relative to its parent
    inverse_base_absolutes   B × 4×4  inverse rest transform of each bone relative to the world
    base_positions           V × 4    rest vertex positions, homogeneous (ADBench: 4 × V)
    weights                  B × V    skinning weight of bone b for vertex v
    triangles                T × 3    vertex indices (complicated objective only)
    is_mirrored              Bool     a left hand: x is negated after skinning

ADBench's layout: bone 0 the root, bone 1 the wrist, then per finger four bones (three posed
joints and the tip), so B = 2 + 4F and ADBench's hand (F = 5) has 22 bones; theta has
6 + 4F = 26 entries: global rotation (axis-angle, 3), global translation (3), then per finger
flexion and abduction of its first joint and flexion of the next two.  ``to_pose_params``
turns theta into ADBench's pose matrix, here (B + 3) × 3 (ADBench's 3 × (B + 3), transposed):
row 0 the global rotation, row 1 the scale (1, 1, 1), row 2 the global translation, row 3 + b
bone b's Euler angles in ADBench's xzy order.

    relatives[b]  = base_relatives[b] · [R_euler(pose[3 + b]) 0; 0 1]
    absolutes[b]  = relatives[b] if parents[b] = -1 else absolutes[parents[b]] · relatives[b]
    position[v]   = Σ_b weights[b][v] (absolutes[b] · inverse_base_absolutes[b] · base[v])[0:3]
    (x negated if mirrored), then  R_aa(pose[0]) diag(pose[1]) position[v] + pose[2]

The simple objective: err[i] = points[i] - position[correspondences[i]]; the complicated one
uses a surface point of triangle correspondences[i] with barycentric coordinates us[i]:
u0 P[t0] + u1 P[t1] + (1 - u0 - u1) P[t2].  Both are n_corr × 3 (ADBench: flat 3 n_corr).

The bone hierarchy is walked with an ifold over bones whose state is every absolute transform.
Rotation matrices use R = c I + (1 - c) u uᵀ + s [u]× for a unit axis u; the Euler matrices are
Rz · Ry · Rx with (x, z, y) = pose angles as ADBench; the axis-angle rotation is the identity
below an angle of 1e-4, as ADBench's.
"""
import numpy as np
from scipy.spatial.transform import Rotation

import fsmooth as fs
from fsmooth import Array, Bool, Card, Double, Index, build, ifold, length


@fs.kernel
def mat_mult(a: Array[Array[Double]], b: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(a), lambda i: build(length(b[0]), lambda j: ifold(
        lambda acc, k: acc + a[i][k] * b[k][j], 0.0, length(b))))


@fs.kernel
def skew_entry(u: Array[Double], i: Index, j: Index) -> Double:
    """[u]×[i][j], the cross-product matrix of u."""
    return (0.0 if i == j else
            (-u[2] if j == 1 else u[1]) if i == 0 else
            (u[2] if j == 0 else -u[0]) if i == 1 else
            (-u[1] if j == 0 else u[0]))


@fs.kernel
def rotation_about(u: Array[Double], s: Double, c: Double) -> Array[Array[Double]]:
    """The rotation by the angle of sine s and cosine c about the unit axis u."""
    return build(3, lambda i: build(3, lambda j: (c if i == j else 0.0)
                                    + (1.0 - c) * u[i] * u[j] + s * skew_entry(u, i, j)))


@fs.kernel
def axis_rotation(axis: Index, angle: Double) -> Array[Array[Double]]:
    return rotation_about(build(3, lambda k: 1.0 if k == axis else 0.0), fs.sin(angle),
                          fs.cos(angle))


@fs.kernel
def angle_axis_to_rotation_matrix(angle_axis: Array[Double]) -> Array[Array[Double]]:
    norm = fs.sqrt(angle_axis[0] * angle_axis[0] + angle_axis[1] * angle_axis[1]
                   + angle_axis[2] * angle_axis[2])
    if norm < 0.0001:
        return build(3, lambda i: build(3, lambda j: 1.0 if i == j else 0.0))
    else:
        return rotation_about(build(3, lambda k: angle_axis[k] / norm), fs.sin(norm), fs.cos(norm))


@fs.kernel
def euler_angles_to_rotation_matrix(xzy: Array[Double]) -> Array[Array[Double]]:
    return mat_mult(mat_mult(axis_rotation(2, xzy[1]), axis_rotation(1, xzy[2])),
                    axis_rotation(0, xzy[0]))


@fs.kernel
def pose_param(theta: Array[Double], p: Index, r: Index) -> Double:
    """Entry r of row p of the pose matrix: ADBench's ``to_pose_params``."""
    bone = p - 3
    finger = (bone - 2) // 4
    joint = (bone - 2) % 4  # 0: flexion and abduction, 1 and 2: flexion, 3: the tip, unposed
    if p < 3:
        return theta[r] if p == 0 else (1.0 if p == 1 else theta[3 + r])
    else:
        unposed = bone < 2 or joint == 3 or r == 2 or (r == 1 and joint > 0)
        return 0.0 if unposed else theta[6 + 4 * finger + (r if joint == 0 else joint + 1)]


@fs.kernel
def to_pose_params(theta: Array[Double], n_bones: Card) -> Array[Array[Double]]:
    return build(n_bones + 3, lambda p: build(3, lambda r: pose_param(theta, p, r)))


@fs.kernel
def get_posed_relatives(base_relatives: Array[Array[Array[Double]]],
                        pose_params: Array[Array[Double]]) -> Array[Array[Array[Double]]]:
    return build(length(base_relatives), lambda b: posed_relative(
        base_relatives[b], euler_angles_to_rotation_matrix(pose_params[b + 3])))


@fs.kernel
def posed_relative(base_relative: Array[Array[Double]],
                   rot: Array[Array[Double]]) -> Array[Array[Double]]:
    """base_relative · [rot 0; 0 1]."""
    return mat_mult(base_relative, build(4, lambda i: build(4, lambda j: rot[i][j] if i < 3 and j < 3
                                                            else (1.0 if i == j else 0.0))))


@fs.kernel
def relatives_to_absolutes(relatives: Array[Array[Array[Double]]],
                           parents: Array[Index]) -> Array[Array[Array[Double]]]:
    """Walks the hierarchy (parents first): an ifold over bones whose state is every absolute
    transform, the bones not reached yet holding anything of the right shape."""
    start = build(length(relatives), lambda b: build(4, lambda i: build(
        4, lambda j: relatives[b][i][j])))
    return ifold(lambda absolutes, b: with_absolute(absolutes, relatives, parents, b),
                 start, length(parents))


@fs.kernel
def with_absolute(absolutes: Array[Array[Array[Double]]], relatives: Array[Array[Array[Double]]],
                  parents: Array[Index], b: Index) -> Array[Array[Array[Double]]]:
    """``absolutes`` (4 × 4 transforms) with bone b's set: its relative transform if it is the
    root, else its parent's absolute (already there) times its relative."""
    parent = parents[b]
    absolute = build(4, lambda i: build(4, lambda j: relatives[b][i][j] if parent == -1 else ifold(
        lambda acc, k: acc + absolutes[parent][i][k] * relatives[b][k][j], 0.0, 4)))
    return build(length(absolutes), lambda k: build(4, lambda i: build(
        4, lambda j: absolute[i][j] if k == b else absolutes[k][i][j])))


@fs.kernel
def apply_global_transform(pose_params: Array[Array[Double]],
                           positions: Array[Array[Double]]) -> Array[Array[Double]]:
    rot = angle_axis_to_rotation_matrix(pose_params[0])
    return build(length(positions), lambda v: build(3, lambda r: ifold(
        lambda acc, j: acc + rot[r][j] * pose_params[1][j] * positions[v][j], 0.0, 3)
        + pose_params[2][r]))


@fs.kernel
def get_skinned_vertex_positions(parents: Array[Index],
                                 base_relatives: Array[Array[Array[Double]]],
                                 inverse_base_absolutes: Array[Array[Array[Double]]],
                                 base_positions: Array[Array[Double]],
                                 weights: Array[Array[Double]], is_mirrored: Bool,
                                 pose_params: Array[Array[Double]]) -> Array[Array[Double]]:
    absolutes = relatives_to_absolutes(get_posed_relatives(base_relatives, pose_params), parents)
    n_bones = length(parents)
    transforms = build(n_bones, lambda b: mat_mult(absolutes[b], inverse_base_absolutes[b]))
    skinned = build(length(base_positions), lambda v: build(3, lambda r: ifold(
        lambda acc, b: acc + weights[b][v] * ifold(
            lambda s, c: s + transforms[b][r][c] * base_positions[v][c], 0.0, 4),
        0.0, n_bones)))
    mirrored = build(length(skinned), lambda v: build(3, lambda r: -skinned[v][r]
                                                      if is_mirrored and r == 0 else skinned[v][r]))
    return apply_global_transform(pose_params, mirrored)


@fs.kernel
def hand_vertex_positions(theta: Array[Double], parents: Array[Index],
                          base_relatives: Array[Array[Array[Double]]],
                          inverse_base_absolutes: Array[Array[Array[Double]]],
                          base_positions: Array[Array[Double]], weights: Array[Array[Double]],
                          is_mirrored: Bool) -> Array[Array[Double]]:
    return get_skinned_vertex_positions(parents, base_relatives, inverse_base_absolutes,
                                        base_positions, weights, is_mirrored,
                                        to_pose_params(theta, length(parents)))


@fs.kernel
def hand_objective(theta: Array[Double], parents: Array[Index],
                   base_relatives: Array[Array[Array[Double]]],
                   inverse_base_absolutes: Array[Array[Array[Double]]],
                   base_positions: Array[Array[Double]], weights: Array[Array[Double]],
                   is_mirrored: Bool, correspondences: Array[Index],
                   points: Array[Array[Double]]) -> Array[Array[Double]]:
    positions = hand_vertex_positions(theta, parents, base_relatives, inverse_base_absolutes,
                                      base_positions, weights, is_mirrored)
    return build(length(correspondences), lambda i: build(
        3, lambda j: points[i][j] - positions[correspondences[i]][j]))


@fs.kernel
def hand_objective_complicated(theta: Array[Double], us: Array[Array[Double]],
                               parents: Array[Index],
                               base_relatives: Array[Array[Array[Double]]],
                               inverse_base_absolutes: Array[Array[Array[Double]]],
                               base_positions: Array[Array[Double]],
                               weights: Array[Array[Double]], is_mirrored: Bool,
                               triangles: Array[Array[Index]], correspondences: Array[Index],
                               points: Array[Array[Double]]) -> Array[Array[Double]]:
    positions = hand_vertex_positions(theta, parents, base_relatives, inverse_base_absolutes,
                                      base_positions, weights, is_mirrored)
    return build(length(correspondences), lambda i: build(3, lambda j: points[i][j] - (
        us[i][0] * positions[triangles[correspondences[i]][0]][j]
        + us[i][1] * positions[triangles[correspondences[i]][1]][j]
        + (1.0 - us[i][0] - us[i][1]) * positions[triangles[correspondences[i]][2]][j])))


# ----------------------------------------------------------------------------- numpy oracles

def np_mat_mult(a, b):
    return a @ b


def np_skew_entry(u, i, j):
    return float(np.cross(u, np.eye(3)[j])[i])  # [u]× e_j = u × e_j


def np_rotation_about(u, s, c):
    return np.array(Rotation.from_rotvec(u * np.arctan2(s, c)).as_matrix())


def np_axis_rotation(axis, angle):
    return Rotation.from_rotvec(np.eye(3)[axis] * angle).as_matrix()


def np_angle_axis_to_rotation_matrix(angle_axis):
    if np.linalg.norm(angle_axis) < 1e-4:
        return np.eye(3)
    return Rotation.from_rotvec(angle_axis).as_matrix()


def _euler_matrices(angles):
    """B × 3 × 3: Rz(a[:, 1]) Ry(a[:, 2]) Rx(a[:, 0]) for ADBench's xzy angles."""
    # scipy's extrinsic "xyz" composes R = Rz Ry Rx.
    return Rotation.from_euler("xyz", angles[:, [0, 2, 1]]).as_matrix().reshape(-1, 3, 3)


def np_euler_angles_to_rotation_matrix(xzy):
    return _euler_matrices(np.asarray(xzy)[None, :])[0]


def np_to_pose_params(theta, n_bones):
    pose = np.zeros((n_bones + 3, 3))
    pose[0], pose[1], pose[2] = theta[0:3], 1.0, theta[3:6]
    fingers = np.asarray(theta[6:]).reshape(-1, 4)  # per finger: 4 angles
    first = 5 + 4 * np.arange(len(fingers))  # pose row of each finger's first posed bone
    pose[first, 0], pose[first, 1] = fingers[:, 0], fingers[:, 1]
    pose[first + 1, 0], pose[first + 2, 0] = fingers[:, 2], fingers[:, 3]
    return pose


def np_pose_param(theta, p, r):
    return float(np_to_pose_params(theta, (len(theta) - 6) + 2)[p, r])


def np_get_posed_relatives(base_relatives, pose_params):
    n_bones = len(base_relatives)
    local = np.tile(np.eye(4), (n_bones, 1, 1))
    local[:, :3, :3] = _euler_matrices(pose_params[3:3 + n_bones])
    return base_relatives @ local


def np_posed_relative(base_relative, rot):
    local = np.eye(4)
    local[:3, :3] = rot
    return base_relative @ local


def np_relatives_to_absolutes(relatives, parents):
    absolutes = np.empty_like(relatives)
    for b, parent in enumerate(parents):  # parents come first
        absolutes[b] = relatives[b] if parent < 0 else absolutes[parent] @ relatives[b]
    return absolutes


def np_with_absolute(absolutes, relatives, parents, b):
    out = np.array(absolutes, dtype=float)
    out[b] = relatives[b] if parents[b] < 0 else absolutes[parents[b]] @ relatives[b]
    return out


def np_apply_global_transform(pose_params, positions):
    rot = np_angle_axis_to_rotation_matrix(pose_params[0]) * pose_params[1][None, :]
    return positions @ rot.T + pose_params[2][None, :]


def np_get_skinned_vertex_positions(parents, base_relatives, inverse_base_absolutes,
                                    base_positions, weights, is_mirrored, pose_params):
    absolutes = np_relatives_to_absolutes(np_get_posed_relatives(base_relatives, pose_params),
                                          parents)
    transforms = absolutes @ inverse_base_absolutes
    per_bone = np.einsum("bij,vj->bvi", transforms, base_positions)[:, :, :3]
    positions = np.einsum("bv,bvi->vi", weights, per_bone)
    if is_mirrored:
        positions = positions * np.array([-1.0, 1.0, 1.0])
    return np_apply_global_transform(pose_params, positions)


def np_hand_vertex_positions(theta, parents, base_relatives, inverse_base_absolutes,
                             base_positions, weights, is_mirrored):
    return np_get_skinned_vertex_positions(parents, base_relatives, inverse_base_absolutes,
                                           base_positions, weights, is_mirrored,
                                           np_to_pose_params(theta, len(parents)))


def np_hand_objective(theta, parents, base_relatives, inverse_base_absolutes, base_positions,
                      weights, is_mirrored, correspondences, points):
    positions = np_hand_vertex_positions(theta, parents, base_relatives, inverse_base_absolutes,
                                         base_positions, weights, is_mirrored)
    return points - positions[correspondences]


def np_hand_objective_complicated(theta, us, parents, base_relatives, inverse_base_absolutes,
                                  base_positions, weights, is_mirrored, triangles,
                                  correspondences, points):
    positions = np_hand_vertex_positions(theta, parents, base_relatives, inverse_base_absolutes,
                                         base_positions, weights, is_mirrored)
    corners = positions[triangles[correspondences]]  # n_corr × 3 corners × 3
    bary = np.stack([us[:, 0], us[:, 1], 1.0 - us[:, 0] - us[:, 1]], axis=1)
    return points - np.einsum("ic,icj->ij", bary, corners)
