"""Run tables: the cone of every offset direction, cut into runs of pixels
along rows, for the CPU's compiled passes (``_numba.py``).

The bin tables of ``_cone_tables.py`` make a voter test about 1.3x (2D) to
2x (3D) its cone, entry by entry, with a branch on each test. On the CPU no
test is needed at all: **every voter's direction is one of a fixed set of
class directions** (``_cone_tables.class_directions``: the plan's offset
directions ``plan.offset_directions[k]``, class k, and below a radius of a
few pixels those of a larger ball), from the first pass on (the initial
direction is quantised to one, ``_cone_tables.initial_directions``) and after
every turn (the turn step copies the direction of the offset it turns to).
The cone of class ``c`` in pass ``p`` is therefore a fixed set of offsets,
found once per plan with the very float32 test the kernels make
(``discrete_runs``), and a voter walks exactly its cone.

Cones are stored as *items* in lexicographic order of their first offset: a
run of ``length`` consecutive offsets along the last (contiguous) axis.
Voting adds the weight along each run (a loop the compiler vectorises); the
turn takes the maximum of each run, and keeps the first offset (lexicographic
order) holding the largest vote, as the reference's tie-break. Item arrays:
``starts`` ((C + 1,) int64: the items of class c are ``starts[c]`` ..
``starts[c + 1]``), ``first`` ((items,) int64 offset index ``k`` of the item's
first offset), ``length`` ((items,) int64).

In the narrow passes most runs are a single pixel (2D radius 12: 80% and 94% of
the items of the last two passes), which the difference array marks twice (+w,
then -w after it). There a voter adds its weight straight into each pixel
instead, two pixels per item (``pixel_pairs``); the pass's scan then copies the
field rather than summing it.
"""

from __future__ import annotations

import functools

import numpy as np

from ._cone_tables import class_directions, direction_bins
from ._cpu import _hits, _tables
from ._plan import make_plan
from ._reference import _as_float32_axes

__all__ = ["discrete_runs", "pixel_pairs", "split_runs"]

_CHUNK = 1 << 22  # class x offset tests per block


def _items(classes: np.ndarray, ks: np.ndarray, offsets: np.ndarray, n_classes: int):
    """Items (runs of consecutive offsets along the last axis) from (class, k) pairs
    sorted by class then k."""
    n = len(ks)
    begins = np.ones(n, dtype=bool)
    if n > 1:
        same_class = classes[1:] == classes[:-1]
        next_k = ks[1:] == ks[:-1] + 1
        same_row = np.all(offsets[ks[1:], :-1] == offsets[ks[:-1], :-1], axis=1)
        next_x = offsets[ks[1:], -1] == offsets[ks[:-1], -1] + 1
        begins[1:] = ~(same_class & next_k & same_row & next_x)
    heads = np.flatnonzero(begins)
    lengths = np.diff(np.append(heads, n))
    starts = np.zeros(n_classes + 1, dtype=np.int64)
    np.add.at(starts, classes[heads] + 1, 1)
    return np.cumsum(starts), ks[heads].astype(np.int64), lengths.astype(np.int64)


def split_runs(starts, first, length, longest: int):
    """The same items with runs longer than ``longest`` cut into pieces of at most ``longest``."""
    pieces = np.maximum(1, -(-length // longest))
    index = np.repeat(np.arange(len(first)), pieces)
    within = np.arange(len(index)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    new_first = first[index] + within * longest
    new_length = np.minimum(longest, length[index] - within * longest)
    new_starts = np.concatenate([[0], np.cumsum(pieces)])[starts]
    return new_starts, new_first, new_length


def pixel_pairs(starts, first, length):
    """The same cones pixel by pixel, two pixels an item: ``(bounds, a, b)``.

    Class c's pixels (offset indices, in the items' order) are paired in turn:
    ``a[i], b[i]`` for items ``bounds[2c]`` .. ``bounds[2c + 1]``; an odd last
    pixel is the one item ``bounds[2c + 1]`` .. ``bounds[2c + 2]`` (``a`` only,
    ``b`` repeats it). ``bounds``: (2C + 1,) int64; ``a``, ``b``: int64.
    """
    n_classes = len(starts) - 1
    pixel_class = np.repeat(np.repeat(np.arange(n_classes), np.diff(starts)), length)
    within = np.arange(len(pixel_class)) - np.repeat(np.cumsum(length) - length, length)
    pixel_k = np.repeat(first, length) + within
    per_class = np.bincount(pixel_class, minlength=n_classes)
    rank = np.arange(len(pixel_k)) - np.repeat(np.cumsum(per_class) - per_class, per_class)
    heads = np.flatnonzero(rank % 2 == 0)  # each pair's first pixel, or the odd last one
    lone = rank[heads] + 1 == per_class[pixel_class[heads]]
    a = pixel_k[heads]
    b = pixel_k[np.where(lone, heads, heads + 1)]
    # pairs of class c, then its odd pixel: (class, lone) is already ascending
    bounds = np.zeros(2 * n_classes + 1, dtype=np.int64)
    np.add.at(bounds, 2 * pixel_class[heads] + lone + 1, 1)
    return np.cumsum(bounds), a.astype(np.int64), b.astype(np.int64)


def _float32_hits(plan, directions, ks, cos_half):
    """(directions x ks) bool: offset k in the cone of each int16 direction, the
    kernels' float32 test (``_cpu._hits`` on the reference's float32 axes)."""
    direction, norm = _as_float32_axes(np.asarray(directions))
    return _hits(plan, ks, direction, norm, slice(None), cos_half)


@functools.lru_cache(maxsize=16)
def discrete_runs(radius: float, spacing: tuple, ndim: int, pass_index: int):
    """The cone of every class direction c (``class_directions``; c < K: offset
    direction c) in one pass, as untested runs: ``(starts, first, length)``,
    exact by construction."""
    plan = make_plan(radius, spacing, ndim)
    directions = class_directions(plan)
    cos_half = plan.cos_half32[pass_index]
    cells, bin_starts, entry_k = _tables(radius, spacing, ndim)[pass_index]
    bins = direction_bins(directions, cells, ndim)
    classes, ks = [], []
    for b in np.unique(bins):
        members = np.flatnonzero(bins == b)
        candidates = np.sort(entry_k[bin_starts[b]:bin_starts[b + 1]])
        step = max(1, _CHUNK // max(len(candidates), 1))
        for first in range(0, len(members), step):
            group = members[first:first + step]
            rows, columns = np.nonzero(_float32_hits(plan, directions[group], candidates, cos_half))
            classes.append(group[rows])
            ks.append(candidates[columns])
    classes = np.concatenate(classes) if classes else np.zeros(0, np.int64)
    ks = np.concatenate(ks) if ks else np.zeros(0, np.int64)
    order = np.lexsort((ks, classes))
    classes, ks = classes[order], ks[order]
    return _items(classes, ks, plan.offsets, len(directions))
