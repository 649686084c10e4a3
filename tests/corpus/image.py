"""Image blurs on a 2-D image img[row][col], with borders clamped (edge pixels repeat)."""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Card, Double, Index, build, ifold, length


@fs.kernel
def clamp(i: Index, n: Card) -> Index:
    return fs.min(fs.max(i, 0), n - 1)


@fs.kernel
def pixel(img: Array[Array[Double]], r: Index, c: Index) -> Double:
    return img[clamp(r, length(img))][clamp(c, length(img[0]))]


@fs.kernel
def box_blur3(img: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(img), lambda r: build(length(img[0]), lambda c: ifold(
        lambda acc, dr: ifold(lambda acc2, dc: acc2 + pixel(img, r + dr - 1, c + dc - 1), acc, 3),
        0.0, 3) / 9.0))


# Binomial weights ¼ ½ ¼: one pass along rows, then one along columns of the intermediate image.
@fs.kernel
def blur_rows(img: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(img), lambda r: build(length(img[0]), lambda c: 0.25 * pixel(img, r, c - 1)
                                              + 0.5 * img[r][c] + 0.25 * pixel(img, r, c + 1)))


@fs.kernel
def blur_cols(img: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(img), lambda r: build(length(img[0]), lambda c: 0.25 * pixel(img, r - 1, c)
                                              + 0.5 * img[r][c] + 0.25 * pixel(img, r + 1, c)))


@fs.kernel
def gaussian_blur3(img: Array[Array[Double]]) -> Array[Array[Double]]:
    horizontal = blur_rows(img)
    return blur_cols(horizontal)


# ----------------------------------------------------------------------------- numpy oracles

def np_clamp(i, n):
    return int(np.clip(i, 0, n - 1))


def np_pixel(img, r, c):
    return float(img[np.clip(r, 0, img.shape[0] - 1), np.clip(c, 0, img.shape[1] - 1)])


def np_box_blur3(img):
    h, w = img.shape
    padded = np.pad(img, 1, mode="edge")
    return sum(padded[dr: dr + h, dc: dc + w] for dr in range(3) for dc in range(3)) / 9.0


def _binomial(img, axis):
    padded = np.pad(img, [(1, 1) if a == axis else (0, 0) for a in range(2)], mode="edge")
    n = img.shape[axis]
    before, centre, after = (np.take(padded, range(k, k + n), axis=axis) for k in range(3))
    return 0.25 * before + 0.5 * centre + 0.25 * after


def np_blur_rows(img):
    return _binomial(img, axis=1)


def np_blur_cols(img):
    return _binomial(img, axis=0)


def np_gaussian_blur3(img):
    return np_blur_cols(np_blur_rows(img))
