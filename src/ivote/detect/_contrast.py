"""Contrast of detected cells against the image noise: the ``min_contrast`` test.

Votes are in units of the image's strongest voter and Otsu's threshold always
splits the scores in two, so an image without nuclei (pure noise, an empty
field of view) would still give cells. A cell must also stand out from the
noise: its contrast is

    (s(x) - min of s over the voting window around x) / sigma

where s is the normalised, blurred image the detector votes on (nuclei bright)
and sigma the noise's standard deviation in the normalised image, estimated
robustly from the residuals of a 3^ndim box mean: 1.4826 x their median
absolute deviation (a lower median), rescaled for the box's own share of the
noise (sqrt(1 - 1/3^ndim)), and for integer images at least the rounding noise
of one grey level (step / sqrt(12)). Residuals come from a fixed grid of about
``NOISE_SAMPLES`` interior pixels, the same on both backends, so both find the
same sigma; s is compared in float32 on both. On the evaluation data the
correctly detected nuclei's contrasts have a 1st percentile of at least 4 on
every dataset, while the maxima of empty images score about 1
(benchmarks/results/detect_accuracy.md). A noiseless float
image (sigma 0) gives every cell an infinite contrast.

Functions here are the NumPy reference; the CUDA kernels are
``ivote_noise_samples`` and ``ivote_contrast`` in ``kernels/ivote.cu``.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

__all__ = [
    "NOISE_SAMPLES", "contrast_numerators", "contrasts", "grey_step", "noise_positions", "noise_residuals", "noise_sigma",
]

NOISE_SAMPLES = 2048
_MAD_TO_SIGMA = 1.4826


@functools.lru_cache(maxsize=64)
def noise_positions(shape: tuple) -> np.ndarray:
    """Flat indices (int64, C order) of a grid of about NOISE_SAMPLES pixels, each
    at least one pixel inside every border (none if an axis is shorter than 3)."""
    ndim = len(shape)
    if min(shape) < 3:
        return np.zeros(0, dtype=np.int64)
    per_axis = math.ceil(NOISE_SAMPLES ** (1 / ndim))
    axes = [np.unique(np.round(np.linspace(1, n - 2, min(per_axis, n - 2))).astype(np.int64)) for n in shape]
    grid = np.meshgrid(*axes, indexing="ij")
    flat = np.ravel_multi_index(tuple(g.ravel() for g in grid), shape).astype(np.int64)
    flat.setflags(write=False)
    return flat


def noise_residuals(normalised: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Residual of each listed pixel from its 3^ndim box mean (the kernel's order of sums)."""
    shape = normalised.shape
    ndim = len(shape)
    centre = np.unravel_index(positions, shape)
    total = np.zeros(len(positions), dtype=np.float64)
    for offset in itertools.product((-1, 0, 1), repeat=ndim):
        total = total + normalised[tuple(c + o for c, o in zip(centre, offset))]
    return normalised[centre] - total / float(3**ndim)


def _lower_median(values: np.ndarray) -> float:
    k = (len(values) - 1) // 2
    return float(np.partition(values, k)[k])


def noise_sigma(residuals: np.ndarray, ndim: int, step: float = 0.0) -> float:
    """Robust standard deviation of the noise from box-mean residuals, at least
    the rounding noise of grey levels ``step`` apart (step / sqrt(12); 0 for
    float images): a flat, quantised background (more than half the residuals
    exactly 0) has no measurable noise, but its grey levels still only resolve
    contrasts of about one step."""
    floor = step / math.sqrt(12.0)
    if len(residuals) == 0:
        return floor
    mad = _lower_median(np.abs(residuals - _lower_median(residuals)))
    return max(_MAD_TO_SIGMA * mad / math.sqrt(1.0 - 1.0 / 3**ndim), floor)


def grey_step(dtype, low: float, high: float) -> float:
    """One grey level of an integer image normalised from [low, high] to [0, 1]; 0 for floats."""
    return 1.0 / (high - low) if np.dtype(dtype).kind in "biu" and high > low else 0.0


def contrast_numerators(smoothed32: np.ndarray, coords: np.ndarray, window: tuple, sign: float) -> np.ndarray:
    """For each cell (``coords``, (N, ndim) int): sign*s at it minus the minimum of
    sign*s over the box of half-width ``window`` around it, clipped to the image;
    ``smoothed32`` is s in float32. As ``ivote_contrast``."""
    sign32 = np.float32(sign)
    out = np.empty(len(coords), dtype=np.float64)
    shape = smoothed32.shape
    for i, point in enumerate(coords):
        box = tuple(slice(max(c - w, 0), min(c + w, n - 1) + 1) for c, w, n in zip(point, window, shape))
        lowest = (sign32 * smoothed32[box]).min()
        out[i] = float(sign32 * smoothed32[tuple(point)]) - float(lowest)
    return out


def contrasts(numerators: np.ndarray, sigma: float) -> np.ndarray:
    """Contrast-to-noise ratios; infinite where the image has no measurable noise."""
    numerators = np.asarray(numerators, dtype=np.float64)
    if not sigma > 0:
        return np.full(numerators.shape, np.inf)
    return numerators / sigma
