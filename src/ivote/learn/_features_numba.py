"""The candidate features' reads as a compiled loop (Numba): equal to
``_features.gather_reference``, without its (M, K, ndim) index arrays."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["gather"]


@njit(nogil=True, cache=True)
def _gather_2d(array, points, offsets, out):
    ny, nx = array.shape
    for m in range(points.shape[0]):
        for k in range(offsets.shape[0]):
            y = min(max(points[m, 0] + offsets[k, 0], 0), ny - 1)
            x = min(max(points[m, 1] + offsets[k, 1], 0), nx - 1)
            out[m, k] = array[y, x]


@njit(nogil=True, cache=True)
def _gather_3d(array, points, offsets, out):
    nz, ny, nx = array.shape
    for m in range(points.shape[0]):
        for k in range(offsets.shape[0]):
            z = min(max(points[m, 0] + offsets[k, 0], 0), nz - 1)
            y = min(max(points[m, 1] + offsets[k, 1], 0), ny - 1)
            x = min(max(points[m, 2] + offsets[k, 2], 0), nx - 1)
            out[m, k] = array[z, y, x]


def gather(array: np.ndarray, points: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``array`` at ``points + offsets``, nearest pixel, clipped: (M, K) float64."""
    out = np.empty((len(points), len(offsets)), dtype=np.float64)
    kernel = _gather_2d if array.ndim == 2 else _gather_3d
    kernel(array, points.astype(np.int64), offsets.astype(np.int64), out)
    return out
