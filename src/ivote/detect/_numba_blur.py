"""The pre-blur of the CPU's detection: ``scipy.ndimage.gaussian_filter``'s sums
(mode 'reflect', symmetric taps, ``gaussian_filter``'s taps), compiled and run on
ranges of lines in parallel (SciPy's ``correlate1d`` holds the GIL), bit for bit
as SciPy. Part of the Numba detection (``_numba.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy import ndimage

from .._numba_intrinsics import _empty, _min
from .._parallel import for_ranges
from ._cuda_tables import gaussian_taps  # scipy's taps (plain NumPy; _cuda_tables imports no CuPy)

__all__ = ["gaussian_blur"]


def _blur_part(first, last, current, out, taps):
    """Rows first..last of the blur along the last axis (``correlate1d``: its lines are contiguous there)."""
    ndimage.correlate1d(current[first:last], taps, axis=-1, output=out[first:last], mode="reflect")


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _blur_along(first, last, current, out, taps, reflected):
    """Rows first..last of ``out`` (R, X): the rows of ``current`` blurred along themselves,
    ``correlate1d(mode='reflect')``'s sums for symmetric taps in its order (as
    ``_blur_across``), each row first copied into a line extended by its reflections
    (``reflected``: position + half -> the column read). SciPy's ``correlate1d`` holds the
    GIL, so its rows ran one thread at a time (measured: 2D 1024², 6.3 ms on one thread, no
    faster on two; this, 4.0 ms on one)."""
    half = len(taps) // 2
    X = current.shape[1]
    line = _empty(len(reflected), np.float64)
    centre = taps[half]
    shift = np.uint64(half)
    for r in range(first, last):
        row = np.uint64(r)
        for i in range(np.uint64(X)):
            line[i + shift] = current[row, i]
        for i in range(half):  # the reflected ends
            line[i] = current[row, np.uint64(reflected[i])]
            line[half + X + i] = current[row, np.uint64(reflected[half + X + i])]
        for x in range(np.uint64(X)):
            out[row, x] = line[x + shift] * centre
        for j in range(half, 0, -1):
            lower = np.uint64(half - j)
            upper = np.uint64(half + j)
            tap = taps[half - j]
            for x in range(np.uint64(X)):
                out[row, x] += (line[x + lower] + line[x + upper]) * tap


_BLUR_COLUMNS = 512
"""Pixels per piece of the rows in the blur across rows: the piece being summed stays in L1."""


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _blur_across(first, last, current, out, taps, reflected, n):
    """Rows first..last of ``out`` (R, B): ``current`` (R / n groups of n rows) blurred across
    its rows, ``correlate1d(mode='reflect')``'s sums for symmetric taps in its order (the
    centre times its tap, then each pair of rows added and times its tap, from the outermost
    pair in; ``reflected``: row index + half -> the row read), by pieces of ``_BLUR_COLUMNS``
    (twice NumPy's speed over whole rows, SciPy's ``correlate1d`` copies every line across
    the rows). Unsigned indices: no negative-index test, the loops vectorise."""
    half = len(taps) // 2
    B = np.uint64(current.shape[1])
    piece = np.uint64(_BLUR_COLUMNS)
    for t in range(first, last):
        row = np.uint64(t)
        group, i = np.uint64(t - t % n), t % n
        for c in range(np.uint64(0), B, piece):
            e = _min(c + piece, B)
            centre = taps[half]
            for x in range(c, e):
                out[row, x] = current[row, x] * centre
            for j in range(half, 0, -1):
                lower = group + np.uint64(reflected[i - j + half])
                upper = group + np.uint64(reflected[i + j + half])
                tap = taps[half - j]
                for x in range(c, e):
                    out[row, x] += (current[lower, x] + current[upper, x]) * tap


def gaussian_blur(image: np.ndarray, sigma) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter(image, sigma, mode='reflect')`` for a float64
    C-contiguous image, bit for bit: ``correlate1d``'s sums for symmetric taps, along rows
    (``_blur_along``) and across them (``_blur_across``, 1024² one thread 8.6 -> 2.7 ms
    against NumPy on whole rows), compiled and on ranges of lines in parallel; taps that
    ``correlate1d`` does not sum as symmetric go to SciPy itself."""
    current = image
    for axis, s in enumerate(sigma):
        taps = gaussian_taps(s)
        if taps is None:
            continue
        out = np.empty_like(current)
        half = len(taps) // 2
        # correlate1d's own test: taps within an epsilon of symmetric are summed as symmetric (the left taps)
        symmetric = np.all(np.abs(taps[half + 1:] - taps[:half][::-1]) <= np.finfo(float).eps)
        n = current.shape[axis]
        index = np.arange(-half, n + half) % (2 * n)
        reflected = np.where(index < n, index, 2 * n - 1 - index)  # d c b a | a b c d | d c b a
        if axis == image.ndim - 1:
            rows = current.reshape(-1, current.shape[-1])
            if symmetric:
                for_ranges(_blur_along, len(rows), rows, out.reshape(rows.shape), taps, reflected, grain=16)
            else:
                for_ranges(_blur_part, len(rows), rows, out.reshape(rows.shape), taps, grain=16)
        elif symmetric:
            rows = (-1, math.prod(current.shape[axis + 1:]))
            for_ranges(_blur_across, math.prod(current.shape[:axis + 1]), current.reshape(rows), out.reshape(rows),
                       taps, reflected, n, grain=16)
        else:
            ndimage.correlate1d(current, taps, axis=axis, output=out, mode="reflect")
        current = out
    return current
