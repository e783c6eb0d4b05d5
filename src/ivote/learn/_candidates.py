"""The learned detector's candidates: the detector's maxima, and the vote field's closer ones.

The detector keeps maxima at least the voting radius apart (about 1.5 typical
nucleus radii), so a small nucleus beside a larger one, or a large nucleus
whose vote peak split off-centre, has no candidate of its own. The learned
detector also looks at the maxima of the vote field a third of the radius
apart, and after scoring keeps the most probable of points closer than a
distance chosen on the training images (:func:`suppress`).

Corrected nuclei that no candidate lies near widen the search: the vote
field's maxima of their 3x3 box near them give a floor (:func:`search_floor`),
and every such maximum above that floor, away from the other candidates,
becomes a candidate too, on the training images and on every image the
detector is applied to.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .._backend import get_array_module, ndimage_module, to_host, use_numba

__all__ = ["DENSE_FRACTION", "default_score", "search_floor", "suppress", "widen"]

DENSE_FRACTION = 1 / 3
"""Added maxima are local maxima of the vote field in a box of this many radii
(half-width) and at least this many radii from any better one."""

SEARCH_HALF_WIDTH = 1
"""Pixels: the search below the floor looks at the vote field's maxima of their 3x3 (3x3x3) box."""

SEARCH_SHARE = 0.5
"""The search below the floor adds at most this many candidates per detector candidate (the
best-scoring ones). On a dense synthetic 1024² image trained on every true centre, the floor of
the weakest missed nucleus admitted 14,790 maxima beside 2,091 candidates (7x the learning's
time); on bbbc039's first image 500 beside 119."""


def default_score(detections) -> float:
    """The default rule's score threshold (``auto_threshold``) of the detector's own candidates,
    or their lowest score where the rule finds none: the scale the search floor is relative to."""
    from ..detect._thresholds import _DEFAULT_MIN_CONTRAST, auto_threshold

    scores = np.maximum(np.asarray(detections.candidate_scores, dtype=np.float64), 1e-12)
    contrasts = np.asarray(detections.candidate_contrasts, dtype=np.float64)
    if len(scores) == 0:
        return 1.0
    value, _ = auto_threshold(scores, contrasts, _DEFAULT_MIN_CONTRAST)
    return float(value) if np.isfinite(value) and value > 0 else float(np.min(scores))


def widen(detections, floor: float | None = None, *, return_searched: bool = False):
    """``detections`` with the closer maxima of their vote field added after the detector's own
    candidates (score: their vote; contrast: the nearest detector candidate's); with ``floor``
    (a log score relative to :func:`default_score`, see :func:`search_floor`), also the vote
    field's maxima of their 3x3 box scoring at least that, as far from any other candidate (the
    best first) as the closer maxima are from each other, at most :data:`SEARCH_SHARE` per
    detector candidate.

    Returns ``(detections, original)``, ``original`` (M,) True for the detector's own candidates;
    with ``return_searched``, also (M,) True for the candidates the search below the floor added.
    """
    from scipy.spatial import cKDTree

    votes = detections.vote_field
    own = np.asarray(detections.candidates, dtype=np.float64)
    if votes is None or len(own) == 0:
        kinds = (np.ones(len(own), dtype=bool), np.zeros(len(own), dtype=bool))
        return (detections, *kinds) if return_searched else (detections, kinds[0])
    xp = get_array_module(votes)
    spacing = np.asarray(detections.spacing, dtype=np.float64)
    reach = DENSE_FRACTION * float(detections.radius)
    half = np.maximum(1, np.rint(reach / spacing)).astype(int)
    coords, values = _thinned_maxima(votes, half, reach, spacing, xp)
    distance, _ = cKDTree(own * spacing).query(coords * spacing, k=1)
    new = distance > reach  # the detector's own maxima, or next to one
    added_closer = coords[new]
    added, scores = [added_closer], [values[new]]
    if floor is not None and np.isfinite(floor):
        lowest = math.exp(float(floor)) * default_score(detections)
        low, low_values = _thinned_maxima(votes, np.full(len(spacing), SEARCH_HALF_WIDTH), reach, spacing, xp, lowest)
        if len(low):
            taken = np.concatenate([own, added[0]])
            far = np.flatnonzero(cKDTree(taken * spacing).query(low * spacing, k=1)[0] > reach)
            far = far[: int(SEARCH_SHARE * len(own))]  # the best: a bounded cost on an image of noise maxima
            added.append(low[far])
            scores.append(low_values[far])
    added, scores = np.concatenate(added), np.concatenate(scores)
    nearest = cKDTree(own * spacing).query(added * spacing, k=1)[1] if len(added) else np.zeros(0, np.int64)
    contrasts = np.asarray(detections.candidate_contrasts, dtype=np.float64)
    widened = replace(
        detections,
        candidates=np.concatenate([own, added]),
        candidate_scores=np.concatenate([np.asarray(detections.candidate_scores, dtype=np.float64), scores]),
        candidate_contrasts=np.concatenate([contrasts, contrasts[nearest]]),
    )
    original = np.r_[np.ones(len(own), dtype=bool), np.zeros(len(added), dtype=bool)]
    if not return_searched:
        return widened, original
    searched = np.zeros(len(original), dtype=bool)
    searched[len(own) + len(added_closer):] = True
    return widened, original, searched


def _thinned_maxima(votes, half, reach, spacing, xp, lowest: float = 0.0):
    """The vote field's local maxima in the box of ``half``, scoring at least ``lowest``, best
    first, each at least ``reach`` from a better one: (coordinates (K, ndim), votes (K,))."""
    from scipy.spatial import cKDTree

    from ..detect._cells import _greedy_keep

    flat = to_host(_local_maxima(votes, half, xp))
    values = to_host(votes.ravel()[flat if xp is np else xp.asarray(flat)]).astype(np.float64)
    if lowest > 0:
        flat, values = flat[values >= lowest], values[values >= lowest]
    order = np.lexsort((flat, -values))
    flat, values = flat[order], values[order]
    coords = np.stack(np.unravel_index(flat, votes.shape), axis=1).astype(np.float64)
    pairs = (cKDTree(coords * spacing).query_pairs(reach, output_type="ndarray") if len(coords) > 1
             else np.zeros((0, 2), int))
    keep = _greedy_keep(len(coords), np.sort(pairs, axis=1).astype(np.int64))
    return coords[keep], values[keep]


def search_floor(detections, points, tolerance: float) -> float | None:
    """The floor of the search for nuclei the candidates missed: of the vote field's maxima of
    their 3x3 box within ``tolerance`` of each of ``points`` (corrected nuclei without a
    candidate, pixel coordinates), the best one's score, the lowest of those over the points,
    as a log score relative to :func:`default_score`; None when no point has one."""
    from scipy.spatial import cKDTree

    votes = detections.vote_field
    if votes is None or len(points) == 0 or len(detections.candidates) == 0:
        return None
    xp = get_array_module(votes)
    spacing = np.asarray(detections.spacing, dtype=np.float64)
    flat = to_host(_local_maxima(votes, np.full(len(spacing), SEARCH_HALF_WIDTH), xp))
    if len(flat) == 0:
        return None
    values = to_host(votes.ravel()[flat if xp is np else xp.asarray(flat)]).astype(np.float64)
    coords = np.stack(np.unravel_index(flat, votes.shape), axis=1).astype(np.float64)
    near = cKDTree(coords * spacing).query_ball_point(np.asarray(points, np.float64) * spacing, tolerance)
    best = [values[rows].max() for rows in near if len(rows)]
    if not best:
        return None
    return float(math.log(min(best)) - math.log(default_score(detections)))


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

    from ..detect._cells import _greedy_keep

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
