"""The learned detector's candidates: the detector's maxima, and the vote field's closer ones.

The detector keeps maxima at least the voting radius apart (about 1.5 typical
nucleus radii), so a small nucleus beside a larger one, or a large nucleus
whose vote peak split off-centre, has no candidate of its own. The learned
detector also looks at the maxima of the vote field a third of the radius
apart, and after scoring keeps the most probable of points closer than a
distance chosen on the training images (:func:`suppress`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .._backend import get_array_module, ndimage_module, to_host, use_numba

__all__ = ["DENSE_FRACTION", "suppress", "widen"]

DENSE_FRACTION = 1 / 3
"""Added maxima are local maxima of the vote field in a box of this many radii
(half-width) and at least this many radii from any better one."""


def widen(detections):
    """``detections`` with the closer maxima of their vote field added after the detector's own
    candidates (score: their vote; contrast: the nearest detector candidate's).

    Returns ``(detections, original)``, ``original`` (M,) True for the detector's own candidates.
    """
    from scipy.spatial import cKDTree

    from ..detect._voting import _greedy_keep

    votes = detections.vote_field
    own = np.asarray(detections.candidates, dtype=np.float64)
    if votes is None or len(own) == 0:
        return detections, np.ones(len(own), dtype=bool)
    xp = get_array_module(votes)
    spacing = np.asarray(detections.spacing, dtype=np.float64)
    reach = DENSE_FRACTION * float(detections.radius)
    half = np.maximum(1, np.rint(reach / spacing)).astype(int)
    flat = to_host(_local_maxima(votes, half, xp))
    values = to_host(votes.ravel()[flat if xp is np else xp.asarray(flat)]).astype(np.float64)
    order = np.lexsort((flat, -values))
    flat, values = flat[order], values[order]
    coords = np.stack(np.unravel_index(flat, votes.shape), axis=1).astype(np.float64)
    physical = coords * spacing
    pairs = cKDTree(physical).query_pairs(reach, output_type="ndarray") if len(coords) > 1 else np.zeros((0, 2), int)
    keep = _greedy_keep(len(coords), np.sort(pairs, axis=1).astype(np.int64))
    coords, values = coords[keep], values[keep]
    distance, nearest = cKDTree(own * spacing).query(coords * spacing, k=1)
    new = distance > reach  # the detector's own maxima, or next to one
    contrasts = np.asarray(detections.candidate_contrasts, dtype=np.float64)
    widened = replace(
        detections,
        candidates=np.concatenate([own, coords[new]]),
        candidate_scores=np.concatenate([np.asarray(detections.candidate_scores, dtype=np.float64), values[new]]),
        candidate_contrasts=np.concatenate([contrasts, contrasts[nearest[new]]]),
    )
    original = np.r_[np.ones(len(own), dtype=bool), np.zeros(int(new.sum()), dtype=bool)]
    return widened, original


def _local_maxima(votes, half, xp):
    """Flat indices (ascending) of the pixels positive and largest in the box of ``half`` around
    them, the box padded with 0 (``maximum_filter(mode='constant', cval=0) == votes``): on the
    CPU the detection's separable maxima (``detect._numba_cells._local_maxima``, in parallel,
    a third of SciPy's filter's time), which need a border of zeros wider than the box."""
    if xp is not np or not use_numba(np):
        largest = ndimage_module(xp).maximum_filter(votes, size=tuple(2 * half + 1), mode="constant", cval=0)
        return xp.flatnonzero((votes == largest) & (votes > 0))
    from ..detect._numba_cells import _local_maxima as separable_maxima

    border = [(int(h) + 1, int(h) + 1) for h in half]
    padded = np.pad(votes, border)
    inside = np.unravel_index(separable_maxima(padded, tuple(int(h) for h in half)), padded.shape)
    return np.ravel_multi_index(tuple(i - b for i, (b, _) in zip(inside, border)), votes.shape)


def suppress(points, probability, spacing, distance: float) -> np.ndarray:
    """Which ``points`` to keep: in order of ``probability`` (best first), a point is dropped when a
    kept one lies closer than ``distance`` (units of ``spacing``). Returns (M,) bool."""
    from scipy.spatial import cKDTree

    from ..detect._voting import _greedy_keep

    m = len(points)
    if m < 2 or distance <= 0:
        return np.ones(m, dtype=bool)
    order = np.lexsort((np.arange(m), -probability))
    physical = np.asarray(points, dtype=np.float64)[order] * np.asarray(spacing, dtype=np.float64)
    pairs = cKDTree(physical).query_pairs(distance * (1 - 1e-9), output_type="ndarray")
    kept_sorted = _greedy_keep(m, np.sort(pairs, axis=1).astype(np.int64))
    kept = np.zeros(m, dtype=bool)
    kept[order[kept_sorted]] = True
    return kept
