"""ADBench's GMM objective in full: Gaussian mixture log-likelihood with full covariances and
the Wishart prior (ADBench ``gmm_objective``, ``log_wishart_prior``, ``log_gamma_distrib``).

Sizes: n points of dimension d, K components.

    alphas  K        unnormalised log mixture weights
    means   K × d
    icf     K × d(d+1)/2   inverse covariance factor L_k (lower triangular): first the d logs
                           of its diagonal, then its strict lower triangle packed column by
                           column, so that L_k[i][j] (i > j) = icf[k][d + j(2d-j-1)/2 + (i-j-1)]
    x       n × d
    wishart_gamma, wishart_m   the Wishart prior's parameters

    Q_k = diag(exp(icf[k][0:d])) + strict lower part,   sum_qs[k] = Σ_l icf[k][l]
    log p = -n d/2 log 2π + Σ_i logsumexp_k(alphas[k] + sum_qs[k] - ½|Q_k (x_i - means[k])|²)
            - n logsumexp(alphas) + log_wishart_prior
    log_wishart_prior = Σ_k (½ γ² ‖Q_k‖_F² - m sum_qs[k]) - K C,
    C = N d (log γ - ½ log 2) - log Γ_d(N/2),  N = d + m + 1,
    log Γ_d(a) = d(d-1)/4 log π + Σ_{j=1..d} lgamma(a + (1-j)/2)   (multivariate log-gamma)

As in ADBench, sum_qs and the exp of the diagonals (``q_diagonals``) are computed once, before
the loop over the points; fusion keeps them so (it never fuses a producer into a deeper loop).
The triangle is walked as a triangle: row i of Q_k x is a fold counted by the row index i
(``ifold(..., i)``, an Index count), not a d × d loop with a mask.  logsumexp subtracts the
maximum (gmm.logsumexp).  ADBench's C++ writes π as 3.14159265359; here it is the double π.
"""
import math

import numpy as np
from scipy.special import multigammaln

import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, ifold, length

from . import gmm


@fs.kernel
def log_gamma_distrib(a: Double, p: Card) -> Double:
    """The multivariate log-gamma function log Γ_p(a)."""
    return 0.25 * p * (p - 1) * fs.log(3.141592653589793) + ifold(
        lambda acc, j: acc + math.lgamma(a - 0.5 * j), 0.0, p)


@fs.kernel
def sum_log_diag(icf_k: Array[Double], d: Card) -> Double:
    return ifold(lambda acc, l: acc + icf_k[l], 0.0, d)


@fs.kernel
def q_diagonals(icf: Array[Array[Double]], d: Card) -> Array[Array[Double]]:
    """exp of the d diagonal logs of each Q_k (ADBench's ``Qdiags``), computed once per call."""
    return build(length(icf), lambda k: build(d, lambda i: fs.exp(icf[k][i])))


@fs.kernel
def sum_qs(icf: Array[Array[Double]], d: Card) -> Array[Double]:
    """Σ_l icf[k][l] over the diagonal logs of each Q_k (ADBench's ``sum_qs``)."""
    return build(length(icf), lambda k: sum_log_diag(icf[k], d))


@fs.kernel
def lower_times_x(q_diag_k: Array[Double], icf_k: Array[Double], xc: Array[Double]) -> Array[Double]:
    """Q_k xc with Q_k lower triangular, its diagonal given: row i folds over the i entries left
    of the diagonal."""
    d = length(xc)
    return build(d, lambda i: ifold(
        lambda acc, j: acc + icf_k[d + j * (2 * d - j - 1) // 2 + (i - j - 1)] * xc[j],
        q_diag_k[i] * xc[i], i))


@fs.kernel
def q_times_x(icf_k: Array[Double], xc: Array[Double]) -> Array[Double]:
    """Q_k xc with Q_k lower triangular."""
    return lower_times_x(build(length(xc), lambda i: fs.exp(icf_k[i])), icf_k, xc)


@fs.kernel
def main_terms(alphas: Array[Double], sums: Array[Double], q_diags: Array[Array[Double]],
               means: Array[Array[Double]], icf: Array[Array[Double]], point: Array[Double]) -> Array[Double]:
    """Per component k: alphas[k] + sum_qs[k] - ½ |Q_k (point - means[k])|², given sum_qs and
    the diagonals of the Q_k."""
    d = length(point)
    return build(length(alphas), lambda k: alphas[k] + sums[k] - 0.5 * gmm.sqnorm(
        lower_times_x(q_diags[k], icf[k], build(d, lambda l: point[l] - means[k][l]))))


@fs.kernel
def gmm_main_terms(alphas: Array[Double], means: Array[Array[Double]],
                   icf: Array[Array[Double]], point: Array[Double]) -> Array[Double]:
    """Per component k: alphas[k] + sum_qs[k] - ½ |Q_k (point - means[k])|²."""
    d = length(point)
    return main_terms(alphas, sum_qs(icf, d), q_diagonals(icf, d), means, icf, point)


@fs.kernel
def log_wishart_prior(d: Card, icf: Array[Array[Double]], wishart_gamma: Double,
                      wishart_m: Index) -> Double:
    k = length(icf)
    n = d + wishart_m + 1
    c = n * d * (fs.log(wishart_gamma) - 0.5 * fs.log(2.0)) - log_gamma_distrib(0.5 * n, d)
    out = ifold(lambda acc, ik: acc + 0.5 * wishart_gamma * wishart_gamma * (
        ifold(lambda s, l: s + fs.exp(icf[ik][l]) * fs.exp(icf[ik][l]), 0.0, d)
        + ifold(lambda s, l: s + icf[ik][d + l] * icf[ik][d + l], 0.0, length(icf[ik]) - d))
        - wishart_m * sum_log_diag(icf[ik], d), 0.0, k)
    return out - k * c


@fs.kernel
def gmm_full_objective(alphas: Array[Double], means: Array[Array[Double]],
                       icf: Array[Array[Double]], x: Array[Array[Double]],
                       wishart_gamma: Double, wishart_m: Index) -> Double:
    n = length(x)
    d = length(x[0])
    constant = -0.5 * n * d * fs.log(2.0 * 3.141592653589793)
    # as ADBench does: sum_qs and the exp of the diagonals once, not once per point
    sums = sum_qs(icf, d)
    q_diags = q_diagonals(icf, d)
    slse = ifold(lambda acc, i: acc + gmm.logsumexp(main_terms(alphas, sums, q_diags, means, icf, x[i])),
                 0.0, n)
    return (constant + slse - n * gmm.logsumexp(alphas)
            + log_wishart_prior(d, icf, wishart_gamma, wishart_m))


# ----------------------------------------------------------------------------- numpy oracles

def _lower_factors(icf, d):
    """K × d × d matrices Q_k from ADBench's packing (diagonal logs, then columns of the strict
    lower triangle)."""
    k = icf.shape[0]
    q = np.zeros((k, d, d))
    cols, rows = np.triu_indices(d, 1)  # (column, row) pairs, column-major over the triangle
    q[:, rows, cols] = icf[:, d:]
    q[:, np.arange(d), np.arange(d)] = np.exp(icf[:, :d])
    return q


def _logsumexp(v, axis=-1):
    mx = np.max(v, axis=axis, keepdims=True)
    return np.squeeze(np.log(np.sum(np.exp(v - mx), axis=axis, keepdims=True)) + mx, axis=axis)


def np_log_gamma_distrib(a, p):
    return float(multigammaln(a, p))


def np_sum_log_diag(icf_k, d):
    return float(np.sum(icf_k[:d]))


def np_q_diagonals(icf, d):
    return np.exp(icf[:, :d])


def np_sum_qs(icf, d):
    return icf[:, :d].sum(axis=1)


def np_lower_times_x(q_diag_k, icf_k, xc):
    d = len(xc)
    q = _lower_factors(icf_k[None, :], d)[0]
    q[np.arange(d), np.arange(d)] = q_diag_k[:d]
    return q @ xc


def np_main_terms(alphas, sums, q_diags, means, icf, point):
    d = len(point)
    q = _lower_factors(icf, d)
    q[:, np.arange(d), np.arange(d)] = q_diags[:, :d]
    qx = np.einsum("kij,kj->ki", q, point[None, :] - means)
    return alphas + sums - 0.5 * np.sum(qx ** 2, axis=1)


def np_q_times_x(icf_k, xc):
    d = len(xc)
    return _lower_factors(icf_k[None, :], d)[0] @ xc


def np_gmm_main_terms(alphas, means, icf, point):
    d = len(point)
    qx = np.einsum("kij,kj->ki", _lower_factors(icf, d), point[None, :] - means)
    return alphas + icf[:, :d].sum(axis=1) - 0.5 * np.sum(qx ** 2, axis=1)


def np_log_wishart_prior(d, icf, wishart_gamma, wishart_m):
    k = icf.shape[0]
    n = d + wishart_m + 1
    c = n * d * (np.log(wishart_gamma) - 0.5 * np.log(2.0)) - multigammaln(0.5 * n, d)
    frobenius = np.sum(_lower_factors(icf, d) ** 2, axis=(1, 2))
    return float(np.sum(0.5 * wishart_gamma ** 2 * frobenius - wishart_m * icf[:, :d].sum(axis=1))
                 - k * c)


def np_gmm_full_objective(alphas, means, icf, x, wishart_gamma, wishart_m):
    n, d = x.shape
    centred = x[:, None, :] - means[None, :, :]  # n × K × d
    qx = np.einsum("kij,nkj->nki", _lower_factors(icf, d), centred)
    terms = alphas[None, :] + icf[:, :d].sum(axis=1)[None, :] - 0.5 * np.sum(qx ** 2, axis=2)
    return float(-0.5 * n * d * np.log(2 * np.pi) + _logsumexp(terms, axis=1).sum()
                 - n * _logsumexp(alphas) + np_log_wishart_prior(d, icf, wishart_gamma, wishart_m))
