"""The cells of the CPU's detection: the vote field's local maxima, their order, close
pairs and contrast numerators (``ivote_contrast``). The maxima are NumPy on ranges of
rows in parallel, so they add nothing to the first call's compile. Part of the Numba
detection (``_numba.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .._numba_intrinsics import _max, _min
from .._parallel import for_ranges
from ._contrast import BUMP_DEPTH, BUMP_SHARE, bump_ring
from ._numba_voters import _Frame, _shape3
from ._plan import VotingPlan
from ._reference import close_pairs

__all__ = ["contrast_numerators"]


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _contrast_numerators(first, last, out, s, points, wz, wy, wx, sign, ring, part, whole, depth):
    """Cells first..last (``points``: (N, 3) z, y, x; Z = 1 in 2D): sign*s at the
    cell minus the minimum of sign*s over the box of half-width min(window,
    distance to either border) around it, s rounded to float32; 0 unless at least
    ``BUMP_SHARE`` (part / whole) of the ``ring`` offsets ((R, 3),
    ``_contrast.bump_ring``) that fit in that box land below centre - (centre -
    m) * ``BUMP_DEPTH``, m the minimum over the window clipped to the image
    (``_contrast.contrast_numerators``, ``ivote_contrast``)."""
    Z, Y, X = s.shape
    for j in range(first, last):
        z, y, x = points[j, 0], points[j, 1], points[j, 2]
        hz = _min(wz, _min(z, Z - 1 - z))
        hy = _min(wy, _min(y, Y - 1 - y))
        hx = _min(wx, _min(x, X - 1 - x))
        deepest = np.float32(np.inf)  # the window clipped to the image
        lowest = np.float32(np.inf)  # the window clipped symmetrically
        for qz in range(_max(z - wz, 0), _min(z + wz, Z - 1) + 1):
            for qy in range(_max(y - wy, 0), _min(y + wy, Y - 1) + 1):
                inner = abs(qz - z) <= hz and abs(qy - y) <= hy
                for qx in range(_max(x - wx, 0), _min(x + wx, X - 1) + 1):
                    value = sign * np.float32(s[qz, qy, qx])
                    deepest = _min(deepest, value)
                    if inner and abs(qx - x) <= hx:
                        lowest = _min(lowest, value)
        centre = sign * np.float32(s[z, y, x])
        level = centre - (centre - deepest) * depth
        fits = 0
        lower = 0
        for e in range(ring.shape[0]):
            dz, dy, dx = ring[e, 0], ring[e, 1], ring[e, 2]
            if abs(dz) > hz or abs(dy) > hy or abs(dx) > hx:
                continue
            fits += 1
            if sign * np.float32(s[z + dz, y + dy, x + dx]) < level:
                lower += 1
        bump = fits > 0 and whole * lower >= part * fits
        out[j] = np.float64(centre) - np.float64(lowest) if bump else 0.0


def contrast_numerators(smoothed, coords, window, sign, ring):
    """``_contrast.contrast_numerators`` of the cells ``coords`` ((N, ndim)) in ``smoothed`` (float64)."""
    ndim = smoothed.ndim
    pad = 3 - ndim
    points = np.zeros((len(coords), 3), dtype=np.int64)
    points[:, pad:] = coords
    ring3 = np.zeros((len(ring), 3), dtype=np.int64)
    ring3[:, pad:] = np.asarray(ring, dtype=np.int64).reshape(-1, ndim)
    wz, wy, wx = (0,) * pad + tuple(int(w) for w in window)
    out = np.zeros(len(coords))
    part, whole = BUMP_SHARE
    for_ranges(_contrast_numerators, len(points), out, smoothed.reshape(_shape3(smoothed.shape)), points, wz, wy, wx,
               np.float32(sign), ring3, part, whole, np.float32(BUMP_DEPTH), grain=64)
    return out


def _running_max(values, h, axis, out):
    """``out`` = the largest of ``values`` within ``h`` along ``axis``, at positions h .. n - h - 1
    (0 nearer the ends): the largest over spans doubled in length, then two reads (3x SciPy's
    ``maximum_filter1d``, which works on float64 copies of the lines). ``out`` may be
    ``values``: they are read before it is written."""
    n = values.shape[axis]

    def along(array, first, last):
        index = [slice(None)] * array.ndim
        index[axis] = slice(first, last)
        return array[tuple(index)]

    spans, scratch = values, np.empty_like(values)
    span = 1
    while 2 * span <= 2 * h + 1:  # spans: the largest of span pixels from each one on
        np.maximum(along(spans, 0, n - span), along(spans, span, n), out=along(scratch, 0, n - span))
        along(scratch, n - span, n)[...] = along(spans, n - span, n)
        spans, scratch = scratch, (np.empty_like(values) if spans is values else spans)
        span *= 2
    along(out, 0, h)[...] = 0
    along(out, n - h, n)[...] = 0
    np.maximum(along(spans, 0, n - 2 * h), along(spans, 2 * h + 1 - span, n + 1 - span), out=along(out, h, n - h))


def _peak_part(first, last, field, half_width, out):
    """``out[first:last]``: the largest vote within ``half_width`` along every axis but the
    first of slices first..last (where a box of the field's padding, wider, fits)."""
    part = field[first:last]
    for axis in range(field.ndim - 1, 0, -1):  # in place after the first axis: the values are read first
        _running_max(part, half_width[axis], axis, out[first:last])
        part = out[first:last]


def _peak_check(first, last, field, across, half_width, found):
    """Local maxima of slices first..last: pixels positive and equal to ``across`` (their
    box's largest along every axis but the first), then along the first; appended to
    ``found`` as (first, flat indices)."""
    stride = math.prod(field.shape[1:])  # the padding keeps every step inside the field
    flat, across = field.reshape(-1), across.reshape(-1)
    part = slice(first * stride, last * stride)
    candidates = first * stride + np.flatnonzero((flat[part] > 0) & (flat[part] >= across[part]))
    values = flat[candidates]
    keep = np.ones(len(candidates), dtype=bool)
    for step in range(-half_width[0], half_width[0] + 1):
        if step:
            keep &= across[candidates + step * stride] <= values
    found.append((first, candidates[keep]))


def _local_maxima(field, half_width):
    """Flat indices (ascending) of the local maxima of ``field`` (0 in its padding, wider than
    ``half_width``): positive and equal to the largest vote of the box of ``half_width`` around
    them, as ``maximum_filter(field, mode='constant', cval=0) == field``. Separably, in
    parallel: the box's largest along every axis but the first, then along the first only at
    the pixels equal to theirs (few: 4% of a 1024² field, 2% of its positive pixels)."""
    across = np.empty_like(field)
    for_ranges(_peak_part, field.shape[0], field, half_width, across, grain=16)
    found = []
    for_ranges(_peak_check, field.shape[0], field, across, half_width, found, grain=16)
    return np.concatenate([indices for _, indices in sorted(found, key=lambda part: part[0])] + [np.zeros(0, np.intp)])


def _cells(frame: _Frame, votes, plan: VotingPlan, smoothed, sign):
    """Maxima sorted best first (image flat indices), their votes, close pairs and contrast numerators."""
    # the padding holds 0 (maximum_filter's cval=0) and is wider than the half-widths (below the window)
    maxima = _local_maxima(votes.reshape(frame.padded_shape), plan.maxima_half_width)
    values = votes[maxima].astype(np.int64)
    order = np.lexsort((maxima, -values))  # best first; ties: lower index (frame order is image order)
    maxima, values = maxima[order], values[order]
    coords = np.stack(np.unravel_index(maxima, frame.padded_shape), axis=1) - np.asarray(frame.window)
    pairs = close_pairs(coords, plan)
    flat = np.ravel_multi_index(tuple(coords.T), frame.shape).astype(np.int64) if len(coords) else np.zeros(0, np.int64)
    numerators = contrast_numerators(smoothed, coords, plan.window, float(sign), bump_ring(plan))
    return flat, values, pairs, numerators
