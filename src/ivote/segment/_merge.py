"""Merge objects that are one nucleus split between two seeds (after the evolution).

Two touching objects are merged when their union is convex (solidity, union area over its
convex hull's area, at least ``min_solidity``) and no larger than the largest expected
nucleus: two true nuclei that overlap leave a concave neck, one nucleus seeded twice does not.

The label image stays where it is (NumPy or CuPy): the touching pairs, the sizes and the final
relabelling are array operations on its backend; only the few candidate pairs' union masks
come to the host for their convex hulls.
"""

from __future__ import annotations

import math
import os

import numpy as np

from .._backend import get_array_module, to_host

__all__ = ["merge_split_objects", "solidity", "max_volume_pixels"]


def _touching_pairs(labels, n=None) -> np.ndarray:
    """(P, 2) host array of the label pairs (a < b) that touch along an axis, sorted
    (``n``: the largest label, when known)."""
    xp = get_array_module(labels)
    n = int(labels.max()) if n is None else int(n)
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    codes = []
    for axis in range(labels.ndim):
        moved = xp.moveaxis(labels, axis, 0)
        a, b = moved[:-1], moved[1:]
        touch = (a != b) & (a > 0) & (b > 0)
        lo = xp.minimum(a, b)[touch].astype(xp.int64)
        hi = xp.maximum(a, b)[touch].astype(xp.int64)
        codes.append(lo * (n + 1) + hi)
    codes = to_host(xp.unique(xp.concatenate(codes)))
    return np.stack([codes // (n + 1), codes % (n + 1)], axis=1)


def _hull_count_3d(mask: np.ndarray) -> int:
    """Voxels of ``skimage.morphology.convex_hull_image(mask)`` (3D), counted line by line.

    The same hull (of the voxels' face centres, as scikit-image builds it, but from the
    first and last voxel of every x line, which span the same hull) and the same inclusion
    test (every facet equation below 1e-10 at the voxel), solved for the interval of x on
    each (z, y) line instead of testing every voxel against every facet.
    """
    from scipy.spatial import ConvexHull

    nz, ny, nx = mask.shape
    any_x = mask.any(axis=2)
    first = np.argmax(mask, axis=2)
    last = nx - 1 - np.argmax(mask[:, :, ::-1], axis=2)
    zz, yy = np.nonzero(any_x)
    points = np.concatenate([np.stack([zz, yy, first[zz, yy]], 1), np.stack([zz, yy, last[zz, yy]], 1)])
    hull0 = ConvexHull(points.astype(np.float64))
    coords = hull0.points[hull0.vertices]
    offsets = np.concatenate([np.eye(3) * 0.5, -np.eye(3) * 0.5])
    coords = np.unique((coords[:, None, :] + offsets).reshape(-1, 3), axis=0)
    equations = ConvexHull(coords).equations  # (F, 4): n . p + d <= 0 inside
    # qhull triangulates: coplanar facets repeat one plane (to rounding), keep one of each
    _, first_of_plane = np.unique(np.round(equations, 8), axis=0, return_index=True)
    equations = equations[np.sort(first_of_plane)]
    tolerance = 1e-10
    z, y = np.meshgrid(np.arange(nz, dtype=np.float64), np.arange(ny, dtype=np.float64), indexing="ij")
    rest = z[..., None] * equations[:, 0] + y[..., None] * equations[:, 1] + equations[:, 3]  # (nz, ny, F)
    c = equations[:, 2]
    # c x + rest < tol for every facet
    flat = np.abs(c) < 1e-12
    lo = np.full((nz, ny), 0.0)
    hi = np.full((nz, ny), nx - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = (tolerance - rest) / np.where(flat, 1.0, c)
    pos, neg = (c > 0) & ~flat, (c < 0) & ~flat
    if pos.any():
        # x < bound: the largest integer strictly below
        hi = np.minimum(hi, np.ceil(bound[..., pos]).min(axis=-1) - 1)
    if neg.any():
        lo = np.maximum(lo, np.floor(bound[..., neg]).max(axis=-1) + 1)
    ok = np.all(rest[..., flat] < tolerance, axis=-1) if flat.any() else np.ones((nz, ny), dtype=bool)
    return int(np.where(ok, np.clip(hi - lo + 1, 0, None), 0).sum())


def solidity(mask: np.ndarray) -> float:
    """Area (volume) of ``mask`` over that of its convex hull, as scikit-image computes the hull."""
    if mask.ndim == 3:
        hull = _hull_count_3d(mask)
    else:
        from skimage.morphology import convex_hull_image

        hull = int(convex_hull_image(mask).sum())
    return float(mask.sum()) / max(float(hull), 1.0)


def _safe_solidity(mask):
    try:
        return solidity(mask)
    except Exception:  # degenerate hull (flat objects)
        return None


def _solidities(masks):
    if len(masks) < 3:
        return [_safe_solidity(m) for m in masks]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1, len(masks)))) as pool:
        return list(pool.map(_safe_solidity, masks))


def _union_mask(labels, a, b, boxes):
    """Host crop of (labels == a) | (labels == b), tight around the union."""
    xp = get_array_module(labels)
    if boxes is None:
        region = tuple(slice(None) for _ in range(labels.ndim))
    else:
        origins, box_shape = boxes
        region = tuple(
            slice(max(0, min(origins[a - 1][j], origins[b - 1][j])),
                  max(0, min(labels.shape[j], max(origins[a - 1][j], origins[b - 1][j]) + box_shape[j])))
            for j in range(labels.ndim))
    crop = labels[region]
    union = to_host(((crop == a) | (crop == b)).astype(xp.uint8)).astype(bool)
    nonzero = np.nonzero(union)
    if len(nonzero[0]) == 0:
        return union[(slice(0, 0),) * labels.ndim]
    return union[tuple(slice(int(i.min()), int(i.max()) + 1) for i in nonzero)]


def merge_split_objects(labels, *, max_volume: float, min_solidity: float = 0.95, boxes=None, sizes=None):
    """Relabel ``labels`` (NumPy or CuPy) so that convex, small-enough touching pairs become one object.

    ``max_volume`` is in pixels. Each object merges at most once (with the partner giving the
    most convex union); the merged object keeps the lower label. ``boxes``: optional
    ``(origins (N, ndim), box_shape)`` of the regions that hold each label k (row k - 1), so
    that only those are searched for a candidate pair's pixels; ``sizes``: optional host
    array of every label's pixel count (index = label), found by a bincount otherwise.
    The convex hulls of the candidate pairs are computed on a few threads (qhull and
    NumPy release the GIL).
    """
    xp = get_array_module(labels)
    n = len(sizes) - 1 if sizes is not None else int(labels.max())
    pairs = _touching_pairs(labels, n)
    if len(pairs) == 0:
        return labels
    if sizes is None:
        sizes = to_host(xp.bincount(labels.ravel(), minlength=n + 1))
    if boxes is not None:
        boxes = (np.asarray(to_host(boxes[0])), tuple(boxes[1]))
    unions = []
    for a, b in pairs:
        if sizes[a] + sizes[b] > max_volume:
            continue
        union = _union_mask(labels, int(a), int(b), boxes)
        if min(union.shape) < 2:
            continue
        unions.append((int(a), int(b), union))
    values = _solidities([u for _, _, u in unions])
    candidates = [(value, a, b) for (a, b, _), value in zip(unions, values)
                  if value is not None and value >= min_solidity]
    if not candidates:
        return labels
    lut = np.arange(n + 1, dtype=np.int32)
    used = set()
    for _, a, b in sorted(candidates, reverse=True):
        if a in used or b in used:
            continue
        used.update((a, b))
        lut[b] = a
    return xp.asarray(lut)[labels]


def max_volume_pixels(radius: float, spacing) -> float:
    """Volume (pixels) of a disc/ball of ``radius`` (physical units)."""
    ndim = len(spacing)
    unit = math.pi if ndim == 2 else 4.0 / 3.0 * math.pi
    return unit * radius**ndim / float(np.prod(spacing))
