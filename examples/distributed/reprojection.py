"""Reprojection errors of a bundle-adjustment problem, sharded by observation over a dask cluster.

The kernel is ordinary fsmooth; dask does the distribution.  Each chunk of observations (with
their weights and measured features) goes to a worker with the whole camera and point arrays;
the kernel is pickled by reference, so a worker imports this module and compiles the kernel once
(through the shared build cache: on one machine, the first worker builds and the others load).

    python examples/distributed/reprojection.py [observations] [workers]

A camera here is 15 doubles: a rotation matrix R (row-major), a translation t, the focal length
f and two radial distortion coefficients k1, k2; a point X projects to
    Xc = R X + t;   p = Xc[0:2] / Xc[2];   proj = f p (1 + k1 |p|² + k2 |p|⁴).
"""
from __future__ import annotations

import sys
import time

import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Index, build, ifold, length


@fs.kernel
def project(cam: Array[Double], x: Array[Double]) -> Array[Double]:
    xc = build(3, lambda r: ifold(lambda acc, c: acc + cam[3 * r + c] * x[c], cam[9 + r], 3))
    p = build(2, lambda i: xc[i] / xc[2])
    rsq = p[0] * p[0] + p[1] * p[1]
    scale = cam[12] * (1.0 + cam[13] * rsq + cam[14] * rsq * rsq)
    return build(2, lambda i: p[i] * scale)


@fs.kernel
def reprojection_errors(cams: Array[Array[Double]], points: Array[Array[Double]], weights: Array[Double],
                        obs: Array[Array[Index]], feats: Array[Array[Double]]) -> Array[Array[Double]]:
    """Observation i sees point obs[i][1] from camera obs[i][0]; its error is w_i (proj - feat_i)."""
    return build(length(obs), lambda i: build(2, lambda j: weights[i] * (
        project(cams[obs[i][0]], points[obs[i][1]])[j] - feats[i][j])))


def problem(n_cams: int, n_points: int, n_obs: int, seed: int = 0):
    """A random problem whose points lie in front of every camera."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n_cams, 3, 3)))
    cams = np.concatenate([q.reshape(n_cams, 9), rng.uniform(-0.5, 0.5, (n_cams, 2)),
                           rng.uniform(8.0, 10.0, (n_cams, 1)), rng.uniform(500, 1000, (n_cams, 1)),
                           rng.uniform(-1e-3, 1e-3, (n_cams, 2))], axis=1)
    points = rng.uniform(-1.0, 1.0, (n_points, 3))
    obs = np.stack([rng.integers(0, n_cams, n_obs), rng.integers(0, n_points, n_obs)], axis=1)
    return cams, points, rng.uniform(0.5, 1.5, n_obs), obs, rng.uniform(-100, 100, (n_obs, 2))


def _block_errors(weights, obs, feats, cams, points):
    return reprojection_errors(cams, points, weights[:, 0], obs, feats)


def distributed_errors(client, cams, points, weights, obs, feats, chunk: int):
    """``reprojection_errors`` over chunks of ``chunk`` observations on ``client``'s workers."""
    import dask.array as da

    # 2-D blocks throughout, so that the chunks of the three arrays line up row by row
    w = da.from_array(weights[:, None], chunks=(chunk, 1))
    o = da.from_array(obs, chunks=(chunk, 2))
    f = da.from_array(feats, chunks=(chunk, 2))
    shared = client.scatter([cams, points], broadcast=True)
    out = da.map_blocks(_block_errors, w, o, f, *shared, dtype=np.float64, chunks=f.chunks)
    return client.compute(out).result()


def main(n_obs: int = 2_000_000, workers: int = 2) -> None:
    from dask.distributed import Client, LocalCluster

    cams, points, weights, obs, feats = problem(1000, 20_000, n_obs)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster, Client(cluster) as client:
        start = time.perf_counter()
        out = distributed_errors(client, cams, points, weights, obs, feats, chunk=-(-n_obs // (4 * workers)))
        print(f"{n_obs} observations on {workers} workers: {time.perf_counter() - start:.2f} s "
              f"(the first call includes each worker's import and load of the kernel)")
    start = time.perf_counter()
    single = reprojection_errors(cams, points, weights, obs, feats)
    print(f"one process: {time.perf_counter() - start:.2f} s; largest difference {np.max(np.abs(out - single)):.3g}")


if __name__ == "__main__":
    # the workers unpickle the kernel by module and name: run main from the importable module
    # ``reprojection`` (this file's folder is on sys.path), not from __main__
    import reprojection

    reprojection.main(*map(int, sys.argv[1:]))
