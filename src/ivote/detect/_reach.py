"""The voters each pass of a block's detection needs, so that the votes at the
voxels it owns equal the whole image's.

A block of an image (``ivote.distributed.detect_chunked``) is read with the
halo of ``distributed.detection_halo``: enough context for the last pass's
votes at every voxel the block owns. That context is spent one pass at a time.
With ``n`` passes, ``R`` the largest offset of the voting ball along an axis and
``h`` the half width of the local-maximum box (all in pixels, per axis):

- the maxima of the owned voxels read the last pass's votes within ``h`` of them;
- a vote of pass ``k`` at ``x`` sums the voters within ``R`` of ``x``;
- a voter's turn after pass ``k`` reads that pass's votes within ``R`` of it.

So pass ``k`` (from 0) needs exactly the voters within
``h + (2 (n - 1 - k) + 1) R`` of the owned region (the box :func:`pass_boxes`
gives); voters farther out cannot change any vote, turn or maximum that
reaches an owned voxel, and every backend drops them before the pass (before
the turn that precedes it). The first pass runs the voters of the whole halo;
the last only those within ``h + R``. This is exact: the same integer votes at
every owned voxel, as the tests check against the in-memory detection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._result import GlobalStatistics

__all__ = ["BlockStatistics", "pass_margin", "pass_boxes", "inside_box", "clear_outside"]


@dataclass(frozen=True)
class BlockStatistics(GlobalStatistics):
    """``GlobalStatistics`` of the whole image with the region the block owns:
    ``owned`` is ``((start, stop), ...)`` per axis in the block's coordinates."""

    owned: tuple | None = None


def pass_reach(plan) -> np.ndarray:
    """Largest |offset| of the voting ball per axis, pixels."""
    if len(plan.offsets) == 0:
        return np.zeros(plan.ndim, dtype=np.int64)
    return np.abs(plan.offsets).max(axis=0).astype(np.int64)


def pass_margin(plan, k: int) -> list:
    """Pixels per axis beyond the owned region whose voters pass ``k`` needs:
    ``h + (2 (n - 1 - k) + 1) R``."""
    return [int(h) + (2 * (plan.n_passes - 1 - k) + 1) * int(r)
            for h, r in zip(plan.maxima_half_width, pass_reach(plan))]


def pass_boxes(plan, shape, owned) -> list | None:
    """Per pass: ``((lo, hi), ...)`` per axis, the box of the block (``shape``)
    whose voters the pass needs for the votes at the ``owned`` voxels; None when
    ``owned`` is None (the whole image: every voter)."""
    if owned is None:
        return None
    boxes = []
    for k in range(plan.n_passes):
        margin = pass_margin(plan, k)
        boxes.append(tuple((max(int(lo) - m, 0), min(int(hi) + m, int(n)))
                           for (lo, hi), m, n in zip(owned, margin, shape)))
    return boxes


def inside_box(coords, box) -> np.ndarray:
    """Whether each point (a sequence of per-axis index arrays) lies in ``box``."""
    keep = np.ones(len(coords[0]), dtype=bool)
    for c, (lo, hi) in zip(coords, box):
        keep &= (c >= lo) & (c < hi)
    return keep


def clear_outside(weights, box) -> None:
    """Zero the dense voter weights (image shape; 0: no voter) outside ``box``, in place."""
    for axis, (lo, hi) in enumerate(box):
        before = tuple(slice(0, lo) if a == axis else slice(None) for a in range(weights.ndim))
        after = tuple(slice(hi, None) if a == axis else slice(None) for a in range(weights.ndim))
        weights[before] = 0
        weights[after] = 0
