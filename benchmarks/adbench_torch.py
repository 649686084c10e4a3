"""PyTorch versions of ADBench's four objectives: vectorised tensor code, the way ADBench's
PyTorch module writes them.  The tensors are made from the numpy inputs once (``inputs``), outside
the timed call; a call returns tensors, turned back into numpy only to check them.  Every tensor a
call makes lives on its inputs' device, so the same code runs on the CPU (benchmarks/adbench.py:
float64, one thread) and on CUDA (benchmarks/gpu_apps.py, eager and through ``torch.compile``)."""
import math

import torch


def inputs(args: tuple) -> tuple:
    return tuple(torch.from_numpy(a) if hasattr(a, "dtype") else a for a in args)


def _logsumexp(v, dim=-1):
    mx = v.max(dim=dim, keepdim=True).values
    return (torch.log(torch.exp(v - mx).sum(dim=dim, keepdim=True)) + mx).squeeze(dim)


def _lower_factors(icf, d):
    k = icf.shape[0]
    q = torch.zeros((k, d, d), dtype=icf.dtype, device=icf.device)
    # (column, row): column-major over the strict lower part
    cols, rows = torch.triu_indices(d, d, 1, device=icf.device)
    q[:, rows, cols] = icf[:, d:]
    idx = torch.arange(d, device=icf.device)
    q[:, idx, idx] = torch.exp(icf[:, :d])
    return q


def gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m):
    n, d = x.shape
    k = alphas.shape[0]
    qs = _lower_factors(icf, d)
    sum_qs = icf[:, :d].sum(dim=1)
    centred = x[:, None, :] - means[None, :, :]  # n × K × d
    qx = torch.einsum("kij,nkj->nki", qs, centred)
    terms = alphas[None, :] + sum_qs[None, :] - 0.5 * (qx * qx).sum(dim=2)
    big_n = d + wishart_m + 1
    lgamma_d = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * big_n - 0.5 * j) for j in range(d))
    c = big_n * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - lgamma_d
    prior = (0.5 * wishart_gamma ** 2 * (qs * qs).sum(dim=(1, 2)) - wishart_m * sum_qs).sum() - k * c
    return (-0.5 * n * d * math.log(2 * math.pi) + _logsumexp(terms, dim=1).sum()
            - n * _logsumexp(alphas, dim=0) + prior)


def _rotate(rots, pts):
    theta = torch.linalg.norm(rots, dim=1, keepdim=True)
    safe = torch.where(theta == 0.0, torch.ones_like(theta), theta)
    w = rots / safe
    cos, sin = torch.cos(theta), torch.sin(theta)
    rotated = (pts * cos + torch.linalg.cross(w, pts) * sin
               + w * (w * pts).sum(dim=1, keepdim=True) * (1.0 - cos))
    return torch.where(theta == 0.0, pts + torch.linalg.cross(rots, pts), rotated)


def ba_objective(cams, x, w, obs, feats):
    c = cams[obs[:, 0]]
    xcam = _rotate(c[:, 0:3], x[obs[:, 1]] - c[:, 3:6])
    p = xcam[:, :2] / xcam[:, 2:3]
    rsq = (p * p).sum(dim=1, keepdim=True)
    proj = p * (1.0 + c[:, 9:10] * rsq + c[:, 10:11] * rsq * rsq) * c[:, 6:7] + c[:, 7:9]
    return w[:, None] * (proj - feats), 1.0 - w * w


def _axis_rotations(axis, angles):
    """B × 3 × 3 rotations about a coordinate axis."""
    c, s = torch.cos(angles), torch.sin(angles)
    one, zero = torch.ones_like(angles), torch.zeros_like(angles)
    rows = {0: [[one, zero, zero], [zero, c, -s], [zero, s, c]],
            1: [[c, zero, s], [zero, one, zero], [-s, zero, c]],
            2: [[c, -s, zero], [s, c, zero], [zero, zero, one]]}[axis]
    return torch.stack([torch.stack(r, dim=-1) for r in rows], dim=-2)


def hand_objective(theta, parents, base_relatives, inverse_base_absolutes, base_positions,
                   weights, is_mirrored, correspondences, points):
    n_bones = parents.shape[0]
    fingers = (n_bones - 2) // 4
    like = dict(dtype=theta.dtype, device=theta.device)
    pose = torch.zeros((n_bones + 3, 3), **like)
    pose[0], pose[1], pose[2] = theta[0:3], 1.0, theta[3:6]
    per_finger = theta[6:].reshape(fingers, 4)
    first = 5 + 4 * torch.arange(fingers, device=theta.device)
    pose[first, 0], pose[first, 1] = per_finger[:, 0], per_finger[:, 1]
    pose[first + 1, 0], pose[first + 2, 0] = per_finger[:, 2], per_finger[:, 3]
    angles = pose[3:]
    rot = _axis_rotations(2, angles[:, 1]) @ _axis_rotations(1, angles[:, 2]) @ _axis_rotations(0, angles[:, 0])
    local = torch.eye(4, **like).repeat(n_bones, 1, 1)
    local[:, :3, :3] = rot
    relatives = base_relatives @ local
    absolutes = []
    for b, parent in enumerate(parents.tolist()):  # the hierarchy: parents first (one read of parents)
        absolutes.append(relatives[b] if parent < 0 else absolutes[parent] @ relatives[b])
    transforms = torch.stack(absolutes) @ inverse_base_absolutes
    per_bone = torch.einsum("bij,vj->bvi", transforms[:, :3, :], base_positions)
    positions = torch.einsum("bv,bvi->vi", weights, per_bone)
    if is_mirrored:
        positions = positions * torch.tensor([-1.0, 1.0, 1.0], **like)
    aa = pose[0]
    norm = float(torch.linalg.norm(aa))
    if norm < 1e-4:
        global_rot = torch.eye(3, **like)
    else:
        u = aa / norm
        skew = torch.zeros((3, 3), **like)
        skew[0, 1], skew[0, 2], skew[1, 0] = -u[2], u[1], u[2]
        skew[1, 2], skew[2, 0], skew[2, 1] = -u[0], -u[1], u[0]
        global_rot = (math.cos(norm) * torch.eye(3, **like)
                      + (1 - math.cos(norm)) * torch.outer(u, u) + math.sin(norm) * skew)
    positions = positions @ (global_rot * pose[1][None, :]).T + pose[2][None, :]
    return points - positions[correspondences]


def lstm_step(main_params, extra_params, hidden, cell, x, target):
    """One character: the layers on input ``x`` (the hidden and cell states, one tensor per layer,
    replaced in the lists), and this step's term of the loss against the next character."""
    b = x.shape[0]
    x = x * extra_params[0]
    for i in range(len(hidden)):
        gates = torch.cat([x, hidden[i], x, hidden[i]]) * main_params[2 * i] + main_params[2 * i + 1]
        forget, ingate, outgate = (torch.sigmoid(g) for g in gates[:3 * b].split(b))
        change = torch.tanh(gates[3 * b:])
        cell[i] = cell[i] * forget + ingate * change
        hidden[i] = outgate * torch.tanh(cell[i])
        x = hidden[i]
    ypred = x * extra_params[1] + extra_params[2]
    return hidden, cell, (target * (ypred - torch.log(torch.exp(ypred).sum() + 2.0))).sum()


def lstm_objective(main_params, extra_params, state, sequence, step=lstm_step):
    """``step`` is ``lstm_step`` or a compiled version of it: ``torch.compile`` of the whole
    objective would unroll its loop over the c characters."""
    c, b = sequence.shape
    layers = state.shape[0] // 2
    hidden = [state[2 * i] for i in range(layers)]
    cell = [state[2 * i + 1] for i in range(layers)]
    total = torch.zeros((), dtype=sequence.dtype, device=sequence.device)
    for t in range(c - 1):
        hidden, cell, term = step(main_params, extra_params, hidden, cell, sequence[t], sequence[t + 1])
        total = total + term
    return -total / ((c - 1) * b)
