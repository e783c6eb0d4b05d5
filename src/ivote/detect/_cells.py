"""The cells of a vote field: its local maxima, and the greedy scan that keeps, of maxima
closer than the radius, the best (NumPy; the GPU and Numba find the maxima in their kernels
and share the scan)."""

from __future__ import annotations

import numpy as np

from .._backend import ndimage_module
from ._plan import VotingPlan


def _candidates(votes, plan: VotingPlan, suppress: bool = True):
    """Local maxima of the vote field at least ``radius`` apart, best first (NumPy;
    the GPU finds them inside ``_cuda.detect``).

    A local maximum holds the largest vote of the box inscribed in the radius
    (and a positive one). Of maxima closer than the radius, the greedy scan in
    order of score (ties: lower flat index first) keeps the best: a maximum is
    kept unless a better one within the radius was (not with ``suppress=False``:
    every maximum). Returns (M, ndim) int64 coordinates and (M,) int64 votes.
    """
    from ._reference import sorted_close_pairs

    size = tuple(2 * h + 1 for h in plan.maxima_half_width)
    largest = ndimage_module(np).maximum_filter(votes, size=size, mode="constant", cval=0)
    flat = np.flatnonzero((votes == largest) & (votes > 0))
    del largest
    if not suppress:
        values = votes.ravel()[flat]
        order = np.lexsort((flat, -values.astype(np.int64)))
        return _cells_at(flat[order], values[order], slice(None), votes.shape)
    return _kept_cells(*sorted_close_pairs(votes, flat, plan), votes.shape)


def _kept_cells(flat, values, pairs, shape):
    """(M, ndim) int64 coordinates and (M,) int64 votes of the maxima (best
    first, as ``sorted_close_pairs`` returns them) that the greedy scan keeps."""
    return _cells_at(flat, values, _greedy_keep(len(flat), pairs), shape)


def _cells_at(flat, values, keep, shape):
    """(M, ndim) int64 coordinates and (M,) int64 votes of the maxima ``keep`` selects."""
    kept = flat[keep]
    coords = np.empty((len(kept), len(shape)), dtype=np.int64)
    for axis in range(len(shape) - 1, 0, -1):  # np.unravel_index, without its tuple and copies
        kept, coords[:, axis] = np.divmod(kept, shape[axis])
    coords[:, 0] = kept
    return coords, values[keep].astype(np.int64)


_FEW_PAIRS = 256  # below this, the scan over the pairs beats the vectorised rounds


def _greedy_keep(n: int, pairs) -> np.ndarray:
    """Which of n maxima (best first) the greedy scan keeps, given the (better,
    worse) index pairs closer than the radius.

    The scan is sequential, but a maximum can be decided as soon as all its
    better neighbours are: it is kept unless one of them was. Deciding all such
    maxima at once, round after round, gives the scan's answer in a few
    vectorised rounds.
    """
    kept = np.zeros(n, dtype=bool)
    if len(pairs) == 0:
        kept[:] = True
        return kept
    better, worse = pairs[:, 0], pairs[:, 1]
    if len(pairs) <= _FEW_PAIRS:  # in order of the worse maximum, its better ones are all decided
        kept[:] = True
        order = np.argsort(worse, kind="stable")
        for b, w in zip(better[order].tolist(), worse[order].tolist()):
            if kept[b]:
                kept[w] = False
        return kept
    decided = np.zeros(n, dtype=bool)
    while not decided.all():
        waiting = np.bincount(worse[~decided[better]], minlength=n) > 0  # a better neighbour is undecided
        beaten = np.bincount(worse[kept[better]], minlength=n) > 0  # a better neighbour is kept
        ready = ~decided & ~waiting
        kept[ready & ~beaten] = True
        decided |= ready
    return kept

