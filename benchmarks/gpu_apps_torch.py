"""The natural PyTorch code of the GPU application benchmark's vision and ML kernels
(``tests/corpus/vision.py``, ``image.py``, ``ml.py``): a stencil is ``F.conv2d`` of the image
padded with ``mode="replicate"`` (the corpus's clamped borders) by its weights, a separable blur
is its two 1-D passes, softmax is ``torch.softmax``.  ``stencil(name, device, dtype)`` makes the
weights once, on the device, and returns the function of the image that is timed; ADBench's
objectives are ``adbench_torch``'s.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SOBEL_X = ((-1.0, 0.0, 1.0), (-2.0, 0.0, 2.0), (-1.0, 0.0, 1.0))  # right column minus left
BINOMIAL = {3: (0.25, 0.5, 0.25), 5: (1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16)}


def _filter(img, weights, pad):
    """Cross-correlation of one image with ``weights`` (out_channels × 1 × h × w), borders
    clamped; ``pad`` is F.pad's (left, right, top, bottom)."""
    return F.conv2d(F.pad(img[None, None], pad, mode="replicate"), weights)


def box_blur(size: int, device, dtype):
    weights = torch.full((1, 1, size, size), 1.0 / (size * size), device=device, dtype=dtype)
    r = size // 2
    return lambda img: _filter(img, weights, (r, r, r, r))[0, 0]


def gaussian_blur(size: int, device, dtype):
    taps = torch.tensor(BINOMIAL[size], device=device, dtype=dtype)
    along_rows, along_cols = taps.reshape(1, 1, 1, size), taps.reshape(1, 1, size, 1)
    r = size // 2

    def blur(img):
        horizontal = _filter(img, along_rows, (r, r, 0, 0))[0, 0]
        return _filter(horizontal, along_cols, (0, 0, r, r))[0, 0]
    return blur


def sobel_magnitude(device, dtype):
    gx = torch.tensor(SOBEL_X, device=device, dtype=dtype)
    weights = torch.stack([gx, gx.T])[:, None]  # 2 × 1 × 3 × 3: d/dx, d/dy

    def magnitude(img):
        g = _filter(img, weights, (1, 1, 1, 1))[0]
        return torch.sqrt(g[0] * g[0] + g[1] * g[1])
    return magnitude


def softmax_rows(device, dtype):
    return lambda m: torch.softmax(m, dim=1)


STENCILS = {"box_blur3": lambda d, t: box_blur(3, d, t), "box_blur5": lambda d, t: box_blur(5, d, t),
            "gaussian_blur3": lambda d, t: gaussian_blur(3, d, t),
            "gaussian_blur5": lambda d, t: gaussian_blur(5, d, t),
            "sobel_magnitude": sobel_magnitude, "softmax_rows": softmax_rows}


def stencil(name: str, device, dtype):
    return STENCILS[name](device, dtype)
