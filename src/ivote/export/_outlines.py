"""Outlines of a label image: one polygon (with its holes, or several parts) per label and plane.

The rings are scikit-image's :func:`~skimage.measure.find_contours` at level 0.5 of each label's
mask (marching squares), so their vertices lie on the midpoints between pixel centres; a pixel
centre is inside the polygon exactly when the pixel belongs to the label, so rasterising the
polygon (pixel centres, even-odd rule) gives the label back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Outline", "label_outlines"]


@dataclass(frozen=True)
class Outline:
    """The outline of one label in one plane.

    Coordinates are pixel coordinates ``(y, x)`` with pixel centres on integers (NumPy's,
    scikit-image's and napari's convention).
    """

    label: int
    plane: int | None
    """The Z index of the plane for a 3D label image, None in 2D."""
    polygons: tuple
    """``((exterior, (hole, ...)), ...)``: one entry per connected part, each ring an (N, 2)
    float64 array of ``(y, x)`` vertices, closed (last vertex = first)."""

    @property
    def has_holes(self) -> bool:
        return any(holes for _, holes in self.polygons)


def _signed_area(ring: np.ndarray) -> float:
    """Shoelace area of a closed ``(y, x)`` ring; positive when it turns from +x towards +y."""
    y, x = ring[:, 0], ring[:, 1]
    return 0.5 * float(np.dot(x[:-1], y[1:]) - np.dot(x[1:], y[:-1]))


def _drop_collinear(ring: np.ndarray) -> np.ndarray:
    """The closed ring without the vertices that lie on the straight line through their
    neighbours (marching squares puts one on every pixel edge): the same polygon, fewer vertices."""
    open_ring = ring[:-1]
    before, after = np.roll(open_ring, 1, axis=0), np.roll(open_ring, -1, axis=0)
    cross = (open_ring[:, 0] - before[:, 0]) * (after[:, 1] - open_ring[:, 1]) - \
        (open_ring[:, 1] - before[:, 1]) * (after[:, 0] - open_ring[:, 0])
    kept = open_ring[cross != 0]
    return np.concatenate([kept, kept[:1]]) if len(kept) >= 3 else ring


def _nest(rings: list[np.ndarray]) -> tuple:
    """Group non-crossing closed rings into (exterior, holes) parts by their nesting depth:
    a ring inside an even number of others bounds a part, one inside an odd number a hole of
    the smallest ring around it (the even-odd rule, as the label's pixels fill them)."""
    from skimage.measure import points_in_poly

    areas = [abs(_signed_area(r)) for r in rings]
    order = np.argsort(areas)[::-1]  # largest first: a ring's container comes before it
    rings = [rings[i] for i in order]
    parent = [-1] * len(rings)
    depth = [0] * len(rings)
    for i, ring in enumerate(rings):
        probe = ring[:1]  # rings do not cross: one vertex says which rings hold this one
        for j in range(i - 1, -1, -1):  # the smallest container is the last one found, scanning down
            if points_in_poly(probe, rings[j])[0]:
                parent[i], depth[i] = j, depth[j] + 1
                break
    parts = []
    for i, ring in enumerate(rings):
        if depth[i] % 2 == 0:
            holes = tuple(rings[k] for k in range(len(rings)) if parent[k] == i)
            parts.append((ring, holes))
    return tuple(parts)


def _plane_outlines(plane: np.ndarray, z: int | None, first_row: int = 0) -> list[Outline]:
    """Outlines of the labels of one plane (or of a band of rows starting at ``first_row``)."""
    from scipy import ndimage
    from skimage.measure import find_contours

    from ..measure._measure import _compact

    compact, given = _compact(plane)  # ids such as 2**40 would make find_objects list that many boxes
    outlines = []
    for index, box in enumerate(ndimage.find_objects(compact)):
        if box is None:
            continue
        label = index + 1 if given is None else int(given[index + 1])
        mask = np.pad(compact[box] == index + 1, 1).astype(np.float32)
        # 'high': pixels of the label touching at a corner stay one outline, as 8-connected
        # components are one nucleus
        rings = find_contours(mask, 0.5, fully_connected="high")
        offset = np.array([first_row + box[0].start - 1, box[1].start - 1], dtype=np.float64)
        rings = [_drop_collinear(r.astype(np.float64) + offset) for r in rings if len(r) >= 4]
        if rings:
            outlines.append(Outline(label, z, _nest(rings)))
    return outlines


def label_outlines(labels) -> list[Outline]:
    """The outline of every label of a 2D label image, or of every label in every plane of a 3D one.

    Parameters
    ----------
    labels : (Y, X) or (Z, Y, X) int array
        0 for background.

    Returns
    -------
    list of Outline
        Sorted by plane, then label. A label made of several pieces in a plane gives one
        Outline with several parts; a label with holes keeps them.

    Examples
    --------
    >>> import numpy as np
    >>> labels = np.zeros((7, 7), int)
    >>> labels[1:6, 1:6] = 3
    >>> labels[3, 3] = 0
    >>> (outline,) = label_outlines(labels)
    >>> outline.label, len(outline.polygons), len(outline.polygons[0][1])
    (3, 1, 1)
    """
    from ..measure._measure import _check_labels

    labels = _check_labels(labels)
    if labels.ndim == 2:
        return _plane_outlines(labels, None)
    return [outline for z in range(labels.shape[0]) for outline in _plane_outlines(labels[z], z)]
