"""An image module for C programs on OpenCL: ``fsmooth compile imaging.py -o build --target opencl``
(see main.c, Makefile).

An image is a 2-D array img[row][col]; the 3x3 box blur clamps at the borders (edge pixels
repeat).  On OpenCL the outermost ``build`` of each kernel is a map over global work-items.
"""
import fsmooth as fs
from fsmooth import Array, Double, Index, build, ifold, length


@fs.kernel
def box_blur(img: Array[Array[Double]]) -> Array[Array[Double]]:
    """The mean of each pixel's 3x3 neighbourhood, borders clamped: one work-item per row."""
    rows = length(img)
    cols = length(img[0])
    return build(rows, lambda r: build(cols, lambda c: ifold(
        lambda acc, dr: ifold(
            lambda acc2, dc: acc2 + img[fs.min(fs.max(r + dr - 1, 0), rows - 1)]
                                       [fs.min(fs.max(c + dc - 1, 0), cols - 1)],
            acc, 3),
        0.0, 3) / 9.0))


@fs.kernel
def weighted_mean(v: Array[Double], w: Array[Double]) -> Double:
    """sum(v[i] w[i]) / sum(w[i]) over the indices of v: w must be at least as long as v."""
    return (ifold(lambda acc, i: acc + v[i] * w[i], 0.0, length(v))
            / ifold(lambda acc, i: acc + w[i], 0.0, length(v)))


@fs.kernel
def gather(v: Array[Double], at: Array[Index]) -> Array[Double]:
    """v[at[i]] for each i: an index read from data, checked on the device."""
    return build(length(at), lambda i: v[at[i]])
