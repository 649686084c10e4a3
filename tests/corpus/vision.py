"""Vision and ML kernels of the GPU application benchmark (``benchmarks/gpu_apps.py``), written
without strategy annotations: 5×5 box and Gaussian blurs, a Sobel gradient magnitude, and the
single-precision versions of these, of ``image.py``'s 3×3 blurs and of ``ml.py``'s row-wise
softmax.  Borders are clamped (edge pixels repeat), as in ``image.py``.

    box_blur5(img)[r][c]       = mean of the 5×5 window around (r, c)
    gaussian_blur5(img)        = the binomial weights (1 4 6 4 1) / 16 along rows, then columns
    sobel_magnitude(img)[r][c] = sqrt(gx² + gy²), gx and gy the 3×3 Sobel derivatives
                                 (gx: right column minus left, gy: bottom row minus top;
                                 weights 1 2 1 across)

F̃ has no type parameters, so a Float kernel is written again with Float annotations.  The box
blurs are sums of row sums, with no fold: a fold's initial 0.0, a Double literal alone, would make
its state a Double.
"""
import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Float, Index, build, length

from . import image, ml


# ----------------------------------------------------------------------------- float64

@fs.kernel
def row_sum5(img: Array[Array[Double]], r: Index, c: Index) -> Double:
    """Σ img[r][c - 2 .. c + 2], clamped."""
    return (image.pixel(img, r, c - 2) + image.pixel(img, r, c - 1) + image.pixel(img, r, c)
            + image.pixel(img, r, c + 1) + image.pixel(img, r, c + 2))


@fs.kernel
def box_blur5(img: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(img), lambda r: build(length(img[0]), lambda c: (
        row_sum5(img, r - 2, c) + row_sum5(img, r - 1, c) + row_sum5(img, r, c)
        + row_sum5(img, r + 1, c) + row_sum5(img, r + 2, c)) / 25.0))


@fs.kernel
def gaussian_blur5(img: Array[Array[Double]]) -> Array[Array[Double]]:
    horizontal = build(length(img), lambda r: build(length(img[0]), lambda c: (
        image.pixel(img, r, c - 2) + 4.0 * image.pixel(img, r, c - 1) + 6.0 * img[r][c]
        + 4.0 * image.pixel(img, r, c + 1) + image.pixel(img, r, c + 2)) / 16.0))
    return build(length(img), lambda r: build(length(img[0]), lambda c: (
        image.pixel(horizontal, r - 2, c) + 4.0 * image.pixel(horizontal, r - 1, c) + 6.0 * horizontal[r][c]
        + 4.0 * image.pixel(horizontal, r + 1, c) + image.pixel(horizontal, r + 2, c)) / 16.0))


@fs.kernel
def sobel_at(img: Array[Array[Double]], r: Index, c: Index) -> Double:
    gx = (image.pixel(img, r - 1, c + 1) + 2.0 * image.pixel(img, r, c + 1) + image.pixel(img, r + 1, c + 1)
          - image.pixel(img, r - 1, c - 1) - 2.0 * image.pixel(img, r, c - 1) - image.pixel(img, r + 1, c - 1))
    gy = (image.pixel(img, r + 1, c - 1) + 2.0 * image.pixel(img, r + 1, c) + image.pixel(img, r + 1, c + 1)
          - image.pixel(img, r - 1, c - 1) - 2.0 * image.pixel(img, r - 1, c) - image.pixel(img, r - 1, c + 1))
    return fs.sqrt(gx * gx + gy * gy)


@fs.kernel
def sobel_magnitude(img: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(img), lambda r: build(length(img[0]), lambda c: sobel_at(img, r, c)))


# ----------------------------------------------------------------------------- float32

@fs.kernel
def pixel_f32(img: Array[Array[Float]], r: Index, c: Index) -> Float:
    return img[image.clamp(r, length(img))][image.clamp(c, length(img[0]))]


@fs.kernel
def row_sum3_f32(img: Array[Array[Float]], r: Index, c: Index) -> Float:
    """Σ img[r][c - 1 .. c + 1], clamped."""
    return pixel_f32(img, r, c - 1) + pixel_f32(img, r, c) + pixel_f32(img, r, c + 1)


@fs.kernel
def box_blur3_f32(img: Array[Array[Float]]) -> Array[Array[Float]]:
    return build(length(img), lambda r: build(length(img[0]), lambda c: (
        row_sum3_f32(img, r - 1, c) + row_sum3_f32(img, r, c) + row_sum3_f32(img, r + 1, c)) / 9.0))


@fs.kernel
def row_sum5_f32(img: Array[Array[Float]], r: Index, c: Index) -> Float:
    """Σ img[r][c - 2 .. c + 2], clamped."""
    return (pixel_f32(img, r, c - 2) + pixel_f32(img, r, c - 1) + pixel_f32(img, r, c)
            + pixel_f32(img, r, c + 1) + pixel_f32(img, r, c + 2))


@fs.kernel
def box_blur5_f32(img: Array[Array[Float]]) -> Array[Array[Float]]:
    return build(length(img), lambda r: build(length(img[0]), lambda c: (
        row_sum5_f32(img, r - 2, c) + row_sum5_f32(img, r - 1, c) + row_sum5_f32(img, r, c)
        + row_sum5_f32(img, r + 1, c) + row_sum5_f32(img, r + 2, c)) / 25.0))


@fs.kernel
def gaussian_blur3_f32(img: Array[Array[Float]]) -> Array[Array[Float]]:
    horizontal = build(length(img), lambda r: build(length(img[0]), lambda c: 0.25 * pixel_f32(img, r, c - 1)
                                                    + 0.5 * img[r][c] + 0.25 * pixel_f32(img, r, c + 1)))
    return build(length(img), lambda r: build(length(img[0]), lambda c: 0.25 * pixel_f32(horizontal, r - 1, c)
                                              + 0.5 * horizontal[r][c] + 0.25 * pixel_f32(horizontal, r + 1, c)))


@fs.kernel
def gaussian_blur5_f32(img: Array[Array[Float]]) -> Array[Array[Float]]:
    horizontal = build(length(img), lambda r: build(length(img[0]), lambda c: (
        pixel_f32(img, r, c - 2) + 4.0 * pixel_f32(img, r, c - 1) + 6.0 * img[r][c]
        + 4.0 * pixel_f32(img, r, c + 1) + pixel_f32(img, r, c + 2)) / 16.0))
    return build(length(img), lambda r: build(length(img[0]), lambda c: (
        pixel_f32(horizontal, r - 2, c) + 4.0 * pixel_f32(horizontal, r - 1, c) + 6.0 * horizontal[r][c]
        + 4.0 * pixel_f32(horizontal, r + 1, c) + pixel_f32(horizontal, r + 2, c)) / 16.0))


@fs.kernel
def sobel_at_f32(img: Array[Array[Float]], r: Index, c: Index) -> Float:
    gx = (pixel_f32(img, r - 1, c + 1) + 2.0 * pixel_f32(img, r, c + 1) + pixel_f32(img, r + 1, c + 1)
          - pixel_f32(img, r - 1, c - 1) - 2.0 * pixel_f32(img, r, c - 1) - pixel_f32(img, r + 1, c - 1))
    gy = (pixel_f32(img, r + 1, c - 1) + 2.0 * pixel_f32(img, r + 1, c) + pixel_f32(img, r + 1, c + 1)
          - pixel_f32(img, r - 1, c - 1) - 2.0 * pixel_f32(img, r - 1, c) - pixel_f32(img, r - 1, c + 1))
    return fs.sqrt(gx * gx + gy * gy)


@fs.kernel
def sobel_magnitude_f32(img: Array[Array[Float]]) -> Array[Array[Float]]:
    return build(length(img), lambda r: build(length(img[0]), lambda c: sobel_at_f32(img, r, c)))


@fs.kernel
def softmax_rows_f32(m: Array[Array[Float]]) -> Array[Array[Float]]:
    return build(length(m), lambda i: ml.softmax_f32(m[i]))


# ----------------------------------------------------------------------------- numpy oracles

def _window_sum(img, radius, weights):
    """Σ weights[dr] weights[dc] img[r + dr - radius][c + dc - radius], borders clamped."""
    h, w = img.shape
    padded = np.pad(img, radius, mode="edge")
    return sum(weights[dr] * weights[dc] * padded[dr: dr + h, dc: dc + w]
               for dr in range(2 * radius + 1) for dc in range(2 * radius + 1))


def np_box_blur5(img):
    return _window_sum(img, 2, np.ones(5)) / 25.0


def _binomial5(img, axis):
    padded = np.pad(img, [(2, 2) if a == axis else (0, 0) for a in range(2)], mode="edge")
    n = img.shape[axis]
    taps = [np.take(padded, range(k, k + n), axis=axis) for k in range(5)]
    return (taps[0] + 4.0 * taps[1] + 6.0 * taps[2] + 4.0 * taps[3] + taps[4]) / 16.0


def np_gaussian_blur5(img):
    return _binomial5(_binomial5(img, axis=1), axis=0)


def np_sobel_magnitude(img):
    h, w = img.shape
    p = np.pad(img, 1, mode="edge")

    def at(dr, dc):  # img[r + dr][c + dc], clamped
        return p[1 + dr: 1 + dr + h, 1 + dc: 1 + dc + w]
    gx = at(-1, 1) + 2.0 * at(0, 1) + at(1, 1) - at(-1, -1) - 2.0 * at(0, -1) - at(1, -1)
    gy = at(1, -1) + 2.0 * at(1, 0) + at(1, 1) - at(-1, -1) - 2.0 * at(-1, 0) - at(-1, 1)
    return np.sqrt(gx * gx + gy * gy)


def np_row_sum5(img, r, c):
    return float(sum(image.np_pixel(img, r, c + dc) for dc in range(-2, 3)))


def np_sobel_at(img, r, c):
    def at(dr, dc):
        return image.np_pixel(img, r + dr, c + dc)
    gx = at(-1, 1) + 2.0 * at(0, 1) + at(1, 1) - at(-1, -1) - 2.0 * at(0, -1) - at(1, -1)
    gy = at(1, -1) + 2.0 * at(1, 0) + at(1, 1) - at(-1, -1) - 2.0 * at(-1, 0) - at(-1, 1)
    return float(np.sqrt(gx * gx + gy * gy))


def np_pixel_f32(img, r, c):
    return image.np_pixel(img, r, c)


def np_row_sum3_f32(img, r, c):
    return float(sum(image.np_pixel(img, r, c + dc) for dc in range(-1, 2)))


np_row_sum5_f32 = np_row_sum5


def _in_f32(oracle):
    """The float64 oracle on float32 data: the reference the Float kernels are checked against."""
    return lambda img: oracle(np.asarray(img, dtype=np.float64))


np_box_blur3_f32 = _in_f32(image.np_box_blur3)
np_box_blur5_f32 = _in_f32(np_box_blur5)
np_gaussian_blur3_f32 = _in_f32(image.np_gaussian_blur3)
np_gaussian_blur5_f32 = _in_f32(np_gaussian_blur5)
np_sobel_magnitude_f32 = _in_f32(np_sobel_magnitude)
np_softmax_rows_f32 = _in_f32(ml.np_softmax_rows)


def np_sobel_at_f32(img, r, c):
    return np_sobel_at(np.asarray(img, dtype=np.float64), r, c)
