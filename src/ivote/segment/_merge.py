"""Merge objects that are one nucleus split between two seeds (host-side, after the evolution).

Two touching objects are merged when their union is convex (solidity, union area over its
convex hull's area, at least ``min_solidity``) and no larger than the largest expected
nucleus: two true nuclei that overlap leave a concave neck, one nucleus seeded twice does not.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage as ndi

__all__ = ["merge_split_objects"]


def _touching_pairs(labels: np.ndarray) -> np.ndarray:
    pairs = []
    for axis in range(labels.ndim):
        a = np.moveaxis(labels, axis, 0)[:-1].ravel()
        b = np.moveaxis(labels, axis, 0)[1:].ravel()
        touch = (a != b) & (a > 0) & (b > 0)
        pairs.append(np.stack([np.minimum(a[touch], b[touch]), np.maximum(a[touch], b[touch])], axis=1))
    pairs = np.concatenate(pairs)
    return np.unique(pairs, axis=0) if len(pairs) else pairs


def _solidity(mask: np.ndarray) -> float:
    from skimage.morphology import convex_hull_image

    hull = convex_hull_image(mask)
    return float(mask.sum()) / max(float(hull.sum()), 1.0)


def merge_split_objects(labels: np.ndarray, *, max_volume: float, min_solidity: float = 0.95) -> np.ndarray:
    """Relabel ``labels`` (NumPy) so that convex, small-enough touching pairs become one object.

    ``max_volume`` is in pixels. Each object merges at most once (with the partner giving the
    most convex union); the merged object keeps the lower label.
    """
    pairs = _touching_pairs(labels)
    if len(pairs) == 0:
        return labels
    boxes = ndi.find_objects(labels)
    sizes = np.bincount(labels.ravel())
    candidates = []
    for a, b in pairs:
        if sizes[a] + sizes[b] > max_volume:
            continue
        box = tuple(slice(min(sa.start, sb.start), max(sa.stop, sb.stop)) for sa, sb in zip(boxes[a - 1], boxes[b - 1]))
        crop = labels[box]
        union = (crop == a) | (crop == b)
        if min(union.shape) < 2:
            continue
        try:
            solidity = _solidity(union)
        except Exception:  # degenerate hull (flat objects)
            continue
        if solidity >= min_solidity:
            candidates.append((solidity, a, b))
    merged = labels.copy()
    used = set()
    for _, a, b in sorted(candidates, reverse=True):
        if a in used or b in used:
            continue
        used.update((a, b))
        merged[labels == b] = a
    return merged


def max_volume_pixels(radius: float, spacing) -> float:
    """Volume (pixels) of a disc/ball of ``radius`` (physical units)."""
    ndim = len(spacing)
    unit = math.pi if ndim == 2 else 4.0 / 3.0 * math.pi
    return unit * radius**ndim / float(np.prod(spacing))
