"""The arrays a compiled detection backend (CUDA or Numba) hands back to ``_backends``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["GlobalStatistics", "RawDetection"]


@dataclass
class RawDetection:
    """What ``_cuda.detect`` and ``_numba.detect`` return; ``flat``, ``values`` and ``pairs`` as
    ``sorted_close_pairs``."""

    votes: object
    flat: np.ndarray
    values: np.ndarray
    pairs: np.ndarray
    extremes: tuple
    """(min, max) of the image, or (nan,) when it (or ``also_finite``) holds NaN/Inf."""
    numerators: np.ndarray | None = None
    """Contrast numerators of the maxima, in the order of ``flat`` (``_contrast``)."""
    residuals: np.ndarray | None = None
    """The noise grid's residuals (``_contrast.noise_residuals``)."""


@dataclass(frozen=True)
class GlobalStatistics:
    """The statistics of a whole image that one block of it is detected with
    (``ivote.distributed.detect_chunked``), instead of the block's own: the
    backends then normalise, weigh the voters and test the contrast as the whole
    image would, and return every local maximum (the suppression of maxima
    closer than the radius is done over the whole image)."""

    low: float
    """The image's minimum (normalisation)."""
    high: float
    """The image's maximum."""
    largest: float
    """The largest gradient magnitude of the normalised, blurred image (voter weights)."""
    noise_sigma: float
    """The noise's standard deviation (``_contrast.noise_sigma`` of the image's noise grid)."""
