"""Run tables: the cone tables of ``_cone_tables.py`` cut into runs of pixels
that need no cone test, for the CPU's compiled passes (``_numba.py``).

The bin tables make a voter test about 1.3x (2D) to 2x (3D) its cone, entry by
entry, with a branch on each test. Two facts remove most of those tests
without changing a single vote:

* **After the first turn a voter's direction is one of the plan's offset
  directions** (``plan.offset_directions[k]``: the turn step copies the
  direction of the offset it turns to). The cone of direction ``k`` in pass
  ``p`` is therefore a fixed set of offsets, found once per plan with the very
  float32 test the kernels make (``discrete_runs``). A voter then walks
  exactly its cone, with no test at all.
* **In the first pass** directions are the gradient's (any int16 vector). A
  finer cube map (``fine_cells``) bounds each bin's directions within ``delta``
  of its centre; every offset within ``alpha - delta - MARGIN`` of the centre
  is in the cone of every direction of the bin (the *core*: no test needed),
  every offset beyond ``alpha + delta + MARGIN`` in none; only the thin *ring*
  between is tested (``fine_runs``), as ``_cone_tables`` bounds its lists.

Cones are stored as *items* in lexicographic order of their first offset: a
run of ``length`` consecutive offsets along the last (contiguous) axis, or,
with ``length`` 0, one ring offset to test. Voting adds the weight along each
run (a loop the compiler vectorises); the turn takes the maximum of each run,
and keeps the first offset (lexicographic order) holding the largest vote, as
the reference's tie-break. Item arrays: ``starts`` ((classes + 1,) int64),
``first`` ((items,) int64 offset index ``k`` of the item's first offset),
``length`` ((items,) int64).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._cone_tables import MARGIN, _bin_geometry, direction_bins
from ._cpu import _hits, _tables
from ._plan import make_plan
from ._reference import _as_float32_axes

__all__ = ["discrete_runs", "fine_cells", "fine_runs", "split_runs"]

_FINE_CELLS = {2: 128, 3: 24}
"""Bins per face axis of the first pass's map (2D: 512 bins, bin radius ~0.45 degrees, a ring of
~2 of the ~110 offsets of a cone at radius 12 px; 3D: 3456 bins, ~3.4 degrees). Measured: 2D
1024^2 took 3-5% less time at 128 than at 64. 3D: since a bin's ring is tested in one vectorised
loop per voter (``_numba._ring_flags``), a larger ring costs little and larger groups of voters of
one bin pay: 96^3, radius 8, the first pass's vote and turn took ~20% less CPU time at 24 than at
48 (no less at 32, more at 16), and the tables 1.3 s instead of 2.2 s to build."""
_LATER_CELLS = 8
"""Bins per face axis in later passes, only for the few voters whose cone never held a vote."""
_CHUNK = 1 << 22  # class x offset tests per block


def fine_cells(ndim: int, pass_index: int = 0) -> int:
    """Bins per face axis of a pass's core/ring map."""
    return _FINE_CELLS[ndim] if pass_index == 0 else _LATER_CELLS


def _items(classes: np.ndarray, ks: np.ndarray, tested: np.ndarray, offsets: np.ndarray, n_classes: int):
    """Items (runs of consecutive untested offsets along the last axis, and single
    tested offsets) from (class, k) pairs sorted by class then k."""
    n = len(ks)
    begins = np.ones(n, dtype=bool)
    if n > 1:
        same_class = classes[1:] == classes[:-1]
        next_k = ks[1:] == ks[:-1] + 1
        same_row = np.all(offsets[ks[1:], :-1] == offsets[ks[:-1], :-1], axis=1)
        next_x = offsets[ks[1:], -1] == offsets[ks[:-1], -1] + 1
        untested = ~tested[1:] & ~tested[:-1]
        begins[1:] = ~(same_class & next_k & same_row & next_x & untested)
    heads = np.flatnonzero(begins)
    lengths = np.diff(np.append(heads, n))
    lengths[tested[heads]] = 0  # a tested offset is an item of length 0
    starts = np.zeros(n_classes + 1, dtype=np.int64)
    np.add.at(starts, classes[heads] + 1, 1)
    return np.cumsum(starts), ks[heads].astype(np.int64), lengths.astype(np.int64)


def split_runs(starts, first, length, longest: int):
    """The same items with runs longer than ``longest`` cut into pieces of at most ``longest``."""
    pieces = np.maximum(1, -(-length // longest))
    index = np.repeat(np.arange(len(first)), pieces)
    within = np.arange(len(index)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    new_first = first[index] + within * longest
    new_length = np.where(length[index] > 0, np.minimum(longest, length[index] - within * longest), 0)
    new_starts = np.concatenate([[0], np.cumsum(pieces)])[starts]
    return new_starts, new_first, new_length


def _float32_hits(plan, directions, ks, cos_half):
    """(directions x ks) bool: offset k in the cone of each int16 direction, the
    kernels' float32 test (``_cpu._hits`` on the reference's float32 axes)."""
    direction, norm = _as_float32_axes(np.asarray(directions))
    return _hits(plan, ks, direction, norm, slice(None), cos_half)


@functools.lru_cache(maxsize=16)
def discrete_runs(radius: float, spacing: tuple, ndim: int, pass_index: int):
    """The cone of every offset direction k (class k) in one pass, as untested
    runs: ``(starts, first, length)``, exact by construction."""
    plan = make_plan(radius, spacing, ndim)
    cos_half = plan.cos_half32[pass_index]
    cells, bin_starts, entry_k = _tables(radius, spacing, ndim)[pass_index]
    bins = direction_bins(plan.offset_directions, cells, ndim)
    classes, ks = [], []
    for b in np.unique(bins):
        members = np.flatnonzero(bins == b)
        candidates = np.sort(entry_k[bin_starts[b]:bin_starts[b + 1]])
        step = max(1, _CHUNK // max(len(candidates), 1))
        for first in range(0, len(members), step):
            group = members[first:first + step]
            rows, columns = np.nonzero(_float32_hits(plan, plan.offset_directions[group], candidates, cos_half))
            classes.append(group[rows])
            ks.append(candidates[columns])
    classes = np.concatenate(classes) if classes else np.zeros(0, np.int64)
    ks = np.concatenate(ks) if ks else np.zeros(0, np.int64)
    order = np.lexsort((ks, classes))
    classes, ks = classes[order], ks[order]
    return _items(classes, ks, np.zeros(len(ks), dtype=bool), plan.offsets, len(plan.offsets))


@functools.lru_cache(maxsize=16)
def fine_runs(radius: float, spacing: tuple, ndim: int, pass_index: int, cells: int):
    """Per bin of a cube map of ``cells`` per face axis: the offsets in the cone
    of any of its directions, the core as untested runs, the ring as tested
    offsets: ``(starts, first, length)``."""
    plan = make_plan(radius, spacing, ndim)
    alpha = math.acos(min(1.0, float(plan.cos_half32[pass_index])))
    centres, radii = _bin_geometry(cells, ndim)
    outer = np.cos(np.minimum(alpha + radii + MARGIN, math.pi))
    inner_angle = alpha - radii - MARGIN
    inner = np.where(inner_angle > 0, np.cos(np.maximum(inner_angle, 0.0)), 2.0)  # 2: no core
    physical = plan.offsets_physical.astype(np.float64)
    unit = physical / np.linalg.norm(physical, axis=1, keepdims=True)
    n_bins = len(centres)
    step = max(1, _CHUNK // max(len(unit), 1))
    classes, ks, tested = [], [], []
    for first in range(0, n_bins, step):
        last = min(n_bins, first + step)
        cos = centres[first:last] @ unit.T
        rows, columns = np.nonzero(cos >= outer[first:last, None])  # by bin, then k
        classes.append(rows + first)
        ks.append(columns)
        tested.append(cos[rows, columns] < inner[first + rows])
    classes, ks, tested = np.concatenate(classes), np.concatenate(ks), np.concatenate(tested)
    return _items(classes, ks, tested, plan.offsets, n_bins)
