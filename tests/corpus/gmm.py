"""Gaussian mixture log-likelihood, ADBench's GMM objective with diagonal covariances.

Component k has log-weight alphas[k] (unnormalised), mean means[k] and, per dimension, the
log of its inverse standard deviation qs[k][l] (ADBench's ``icf`` restricted to the
diagonal; no Wishart prior).  For points x[0..n-1] of dimension d:

    log p(x) = -n d/2 log 2π + Σ_i logsumexp_k (alphas[k] + Σ_l qs[k][l]
                                                  - ½ |exp(qs[k]) ⊙ (x[i] - means[k])|²)
               - n logsumexp(alphas)

logsumexp subtracts the maximum first, so that no exp overflows.
"""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, build, ifold, length


@fs.kernel
def array_sum(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + v[i], 0.0, length(v))


@fs.kernel
def array_max(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: fs.max(acc, v[i]), v[0], length(v))


@fs.kernel
def logsumexp(v: Array[Double]) -> Double:
    mx = array_max(v)
    shifted = build(length(v), lambda i: fs.exp(v[i] - mx))
    return fs.log(array_sum(shifted)) + mx


@fs.kernel
def sqnorm(v: Array[Double]) -> Double:
    return ifold(lambda acc, i: acc + v[i] * v[i], 0.0, length(v))


# Per component k: alphas[k] + log N(point | means[k], Σ_k) + d/2 log 2π.
@fs.kernel
def component_terms(alphas: Array[Double], means: Array[Array[Double]],
                    qs: Array[Array[Double]], point: Array[Double]) -> Array[Double]:
    return build(length(alphas), lambda k: alphas[k] + array_sum(qs[k]) - 0.5 * sqnorm(
        build(length(point), lambda l: fs.exp(qs[k][l]) * (point[l] - means[k][l]))))


@fs.kernel
def gmm_objective(alphas: Array[Double], means: Array[Array[Double]],
                  qs: Array[Array[Double]], x: Array[Array[Double]]) -> Double:
    n = length(x)
    d = length(x[0])
    constant = -0.5 * n * d * fs.log(2.0 * 3.141592653589793)
    data_term = ifold(lambda acc, i: acc + logsumexp(component_terms(alphas, means, qs, x[i])),
                      0.0, n)
    return constant + data_term - n * logsumexp(alphas)


# ----------------------------------------------------------------------------- numpy oracles

def np_array_sum(v):
    return float(np.sum(v))


def np_array_max(v):
    return float(np.max(v))


def np_logsumexp(v):
    mx = np.max(v)
    return float(np.log(np.sum(np.exp(v - mx))) + mx)


def np_sqnorm(v):
    return float(v @ v)


def np_component_terms(alphas, means, qs, point):
    scaled = np.exp(qs) * (point[None, :] - means)
    return alphas + qs.sum(axis=1) - 0.5 * np.sum(scaled ** 2, axis=1)


def np_gmm_objective(alphas, means, qs, x):
    n, d = x.shape
    scaled = np.exp(qs)[None, :, :] * (x[:, None, :] - means[None, :, :])  # n × k × d
    terms = alphas[None, :] + qs.sum(axis=1)[None, :] - 0.5 * np.sum(scaled ** 2, axis=2)
    mx = terms.max(axis=1, keepdims=True)
    per_point = np.log(np.exp(terms - mx).sum(axis=1)) + mx[:, 0]
    return float(-0.5 * n * d * np.log(2 * np.pi) + per_point.sum() - n * np_logsumexp(alphas))
