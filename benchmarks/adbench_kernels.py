"""The memory ladder's loops (DPS paper Fig. 12 b, d, f): ADBench's objectives called ``calls``
times inside one F̃ ``ifold``, so that every variant runs the whole loop in C.  Each call's
result is read at an index that changes with the call, so no call can be dropped, and the
values read are summed (the loop's checksum)."""
import fsmooth as fs
from fsmooth import Array, Bool, Card, Double, Index, ifold, length

from corpus import adbench_ba, adbench_gmm, adbench_hand


@fs.kernel
def gmm_loop(alphas: Array[Double], means: Array[Array[Double]], icf: Array[Array[Double]],
             x: Array[Array[Double]], wishart_gamma: Double, wishart_m: Index,
             calls: Card) -> Double:
    return ifold(lambda acc, it: acc + adbench_gmm.gmm_full_objective(
        alphas, means, icf, x, wishart_gamma, wishart_m), 0.0, calls)


@fs.kernel
def ba_read(errors: tuple[Array[Array[Double]], Array[Double]], it: Index) -> Double:
    reproj_err, w_err = errors
    return reproj_err[it % length(w_err)][0] + w_err[it % length(w_err)]


@fs.kernel
def ba_loop(cams: Array[Array[Double]], x: Array[Array[Double]], w: Array[Double],
            obs: Array[Array[Index]], feats: Array[Array[Double]], calls: Card) -> Double:
    return ifold(lambda acc, it: acc + ba_read(adbench_ba.ba_objective(cams, x, w, obs, feats), it),
                 0.0, calls)


@fs.kernel
def hand_read(err: Array[Array[Double]], it: Index) -> Double:
    return err[it % length(err)][0]


@fs.kernel
def hand_loop(theta: Array[Double], parents: Array[Index],
              base_relatives: Array[Array[Array[Double]]],
              inverse_base_absolutes: Array[Array[Array[Double]]],
              base_positions: Array[Array[Double]], weights: Array[Array[Double]],
              is_mirrored: Bool, correspondences: Array[Index], points: Array[Array[Double]],
              calls: Card) -> Double:
    return ifold(lambda acc, it: acc + hand_read(adbench_hand.hand_objective(
        theta, parents, base_relatives, inverse_base_absolutes, base_positions, weights,
        is_mirrored, correspondences, points), it), 0.0, calls)
