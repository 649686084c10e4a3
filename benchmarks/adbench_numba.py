"""Numba versions of ADBench's four objectives: the plain loops of the hand-written C++
(``baselines/adbench_manual.cpp``) as Numba compiles them (``cache=True``: the machine code is
kept in ``__pycache__``).  Imported only by the Numba runners: importing Numba takes time."""
import math

import numpy as np
from numba import njit


@njit(cache=True)
def _logsumexp(x):
    mx = x.max()
    s = 0.0
    for v in x:
        s += math.exp(v - mx)
    return math.log(s) + mx


@njit(cache=True)
def gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m):
    n, d = x.shape
    k = len(alphas)
    sum_qs = np.zeros(k)
    for ik in range(k):
        for l in range(d):
            sum_qs[ik] += icf[ik, l]
    xc = np.empty(d)
    qx = np.empty(d)
    main_term = np.empty(k)
    slse = 0.0
    for i in range(n):
        for ik in range(k):
            for l in range(d):
                xc[l] = x[i, l] - means[ik, l]
            for l in range(d):
                qx[l] = math.exp(icf[ik, l]) * xc[l]
            at = d
            for j in range(d):
                for r in range(j + 1, d):
                    qx[r] += icf[ik, at] * xc[j]
                    at += 1
            sq = 0.0
            for l in range(d):
                sq += qx[l] * qx[l]
            main_term[ik] = alphas[ik] + sum_qs[ik] - 0.5 * sq
        slse += _logsumexp(main_term)
    big_n = d + wishart_m + 1
    lgamma_d = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(d):
        lgamma_d += math.lgamma(0.5 * big_n - 0.5 * j)
    c = big_n * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - lgamma_d
    prior = 0.0
    for ik in range(k):
        frobenius = 0.0
        for l in range(d):
            q = math.exp(icf[ik, l])
            frobenius += q * q
        for l in range(d, icf.shape[1]):
            frobenius += icf[ik, l] * icf[ik, l]
        prior += 0.5 * wishart_gamma * wishart_gamma * frobenius - wishart_m * sum_qs[ik]
    return (-0.5 * n * d * math.log(2.0 * math.pi) + slse - n * _logsumexp(alphas)
            + prior - k * c)


@njit(cache=True)
def ba_objective(cams, x, w, obs, feats):
    p = len(w)
    reproj_err = np.empty((p, 2))
    for i in range(p):
        cam = cams[obs[i, 0]]
        pt = x[obs[i, 1]]
        x0, x1, x2 = pt[0] - cam[3], pt[1] - cam[4], pt[2] - cam[5]
        sqtheta = cam[0] * cam[0] + cam[1] * cam[1] + cam[2] * cam[2]
        if sqtheta != 0.0:
            theta = math.sqrt(sqtheta)
            cos, sin = math.cos(theta), math.sin(theta)
            w0, w1, w2 = cam[0] / theta, cam[1] / theta, cam[2] / theta
            c0, c1, c2 = w1 * x2 - w2 * x1, w2 * x0 - w0 * x2, w0 * x1 - w1 * x0
            along = (w0 * x0 + w1 * x1 + w2 * x2) * (1.0 - cos)
            r0 = x0 * cos + c0 * sin + w0 * along
            r1 = x1 * cos + c1 * sin + w1 * along
            r2 = x2 * cos + c2 * sin + w2 * along
        else:
            r0 = x0 + cam[1] * x2 - cam[2] * x1
            r1 = x1 + cam[2] * x0 - cam[0] * x2
            r2 = x2 + cam[0] * x1 - cam[1] * x0
        p0, p1 = r0 / r2, r1 / r2
        rsq = p0 * p0 + p1 * p1
        scale = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
        reproj_err[i, 0] = w[i] * (p0 * scale * cam[6] + cam[7] - feats[i, 0])
        reproj_err[i, 1] = w[i] * (p1 * scale * cam[6] + cam[8] - feats[i, 1])
    return reproj_err, 1.0 - w * w


@njit(cache=True)
def _rotation_about(u, s, c):
    skew = np.array([[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]])
    r = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            r[i, j] = (c if i == j else 0.0) + (1.0 - c) * u[i] * u[j] + s * skew[i, j]
    return r


@njit(cache=True)
def _euler(xzy):
    cx, sx = math.cos(xzy[0]), math.sin(xzy[0])
    cz, sz = math.cos(xzy[1]), math.sin(xzy[1])
    cy, sy = math.cos(xzy[2]), math.sin(xzy[2])
    rz = np.array([[cz, -sz, 0.0], [sz, cz, 0.0], [0.0, 0.0, 1.0]])
    ry = np.array([[cy, 0.0, sy], [0.0, 1.0, 0.0], [-sy, 0.0, cy]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cx, -sx], [0.0, sx, cx]])
    return rz @ ry @ rx


@njit(cache=True)
def hand_objective(theta, parents, base_relatives, inverse_base_absolutes, base_positions,
                   weights, is_mirrored, correspondences, points):
    n_bones = len(parents)
    n_verts = len(base_positions)
    pose = np.zeros((n_bones + 3, 3))
    pose[0] = theta[0:3]
    pose[1] = 1.0
    pose[2] = theta[3:6]
    for f in range((n_bones - 2) // 4):
        row = 5 + 4 * f
        pose[row, 0] = theta[6 + 4 * f]
        pose[row, 1] = theta[6 + 4 * f + 1]
        pose[row + 1, 0] = theta[6 + 4 * f + 2]
        pose[row + 2, 0] = theta[6 + 4 * f + 3]
    absolutes = np.empty((n_bones, 4, 4))
    transforms = np.empty((n_bones, 4, 4))
    for b in range(n_bones):
        local = np.eye(4)
        local[:3, :3] = _euler(pose[3 + b])
        relative = base_relatives[b] @ local
        absolutes[b] = relative if parents[b] == -1 else absolutes[parents[b]] @ relative
        transforms[b] = absolutes[b] @ inverse_base_absolutes[b]
    positions = np.zeros((n_verts, 3))
    for v in range(n_verts):
        for r in range(3):
            s = 0.0
            for b in range(n_bones):
                t = 0.0
                for c in range(4):
                    t += transforms[b, r, c] * base_positions[v, c]
                s += weights[b, v] * t
            positions[v, r] = -s if is_mirrored and r == 0 else s
    aa = pose[0]
    norm = math.sqrt(aa[0] * aa[0] + aa[1] * aa[1] + aa[2] * aa[2])
    rot = np.eye(3) if norm < 0.0001 else _rotation_about(aa / norm, math.sin(norm), math.cos(norm))
    err = np.empty((len(correspondences), 3))
    for i in range(len(correspondences)):
        v = correspondences[i]
        for r in range(3):
            s = 0.0
            for j in range(3):
                s += rot[r, j] * pose[1, j] * positions[v, j]
            err[i, r] = points[i, r] - (s + pose[2, r])
    return err


@njit(cache=True)
def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit(cache=True)
def lstm_objective(main_params, extra_params, state_in, sequence):
    c, b = sequence.shape
    layers = len(state_in) // 2
    state = state_in.copy()
    inp = np.empty(b)
    ypred = np.empty(b)
    total = 0.0
    for t in range(c - 1):
        for i in range(b):
            inp[i] = sequence[t, i] * extra_params[0, i]
        for layer in range(layers):
            w, bias = main_params[2 * layer], main_params[2 * layer + 1]
            hidden, cell = state[2 * layer], state[2 * layer + 1]
            for i in range(b):
                forget = _sigmoid(inp[i] * w[i] + bias[i])
                ingate = _sigmoid(hidden[i] * w[b + i] + bias[b + i])
                outgate = _sigmoid(inp[i] * w[2 * b + i] + bias[2 * b + i])
                change = math.tanh(hidden[i] * w[3 * b + i] + bias[3 * b + i])
                cell[i] = cell[i] * forget + ingate * change
                hidden[i] = outgate * math.tanh(cell[i])
            inp[:] = hidden
        s = 0.0
        for i in range(b):
            ypred[i] = inp[i] * extra_params[1, i] + extra_params[2, i]
            s += math.exp(ypred[i])
        lse = math.log(s + 2.0)
        for i in range(b):
            total += sequence[t + 1, i] * (ypred[i] - lse)
    return -total / ((c - 1) * b)
