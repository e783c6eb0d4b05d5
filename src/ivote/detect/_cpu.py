"""The voting passes on NumPy, over the GPU kernels' cone tables.

``_reference.py`` tests every offset of the voting disc/ball for every voter
(readable; the oracle of the tests). Here, as in the CUDA kernels, a voter
only tests the offsets listed for its direction's bin (``_cone_tables.py``),
about 1.3x (2D) to 2x (3D) its cone instead of the whole ball: the same
float32 tests in the same order, the same integer sums, the same tie-break
(offsets in lexicographic order, first maximum kept), so the vote field is the
reference's exactly, 5-15 times sooner. Voters are grouped by bin and each
group is tested against its bin's offsets as one matrix.
"""

from __future__ import annotations

import functools

import numpy as np

from ._cone_tables import cone_tables, direction_bins, pack_offsets
from ._plan import VotingPlan, _sum_in_order, make_plan
from ._reach import inside_box
from ._reference import _as_float32_axes, _Voters, prepare_voters

__all__ = ["run_passes"]

_CHUNK = 1 << 21  # voter x offset cells per matrix


@functools.lru_cache(maxsize=8)
def _tables(radius: float, spacing: tuple, ndim: int):
    """Per pass: (bins per face axis, starts, offset indices k of each bin's entries)."""
    plan = make_plan(radius, spacing, ndim)
    packed = pack_offsets(plan.offsets)
    sorter = np.argsort(packed)
    result = []
    for table in cone_tables(plan, np):
        k = sorter[np.searchsorted(packed, table.entries, sorter=sorter)]
        result.append((table.cells, np.asarray(table.starts, dtype=np.int64), k))
    return tuple(result)


def _groups(directions, cells: int, ndim: int, chunk_rows):
    """(voter indices, bin) of every group of voters sharing a bin, in chunks of at most chunk_rows(bin)."""
    bins = direction_bins(directions, cells, ndim)
    order = np.argsort(bins, kind="stable")
    sorted_bins = bins[order]
    edges = np.flatnonzero(np.diff(sorted_bins)) + 1
    for group in np.split(order, edges):
        if len(group) == 0:
            continue
        b = int(bins[group[0]])
        rows = max(1, chunk_rows(b))
        for first in range(0, len(group), rows):
            yield group[first:first + rows], b


def _hits(plan: VotingPlan, ks, direction, norm, voters, cos_half):
    """(voters x offsets) bool: offset ks[j] inside voter i's cone (the reference's float32 test)."""
    o = plan.offsets_physical[ks]
    dot = _sum_in_order([direction[i][voters][:, None] * o[:, i][None, :] for i in range(plan.ndim)])
    return dot >= (cos_half * plan.offset_norms[ks])[None, :] * norm[voters][:, None]


def run_passes(smoothed: np.ndarray, plan: VotingPlan, sign: float, iter_callback=None,
               largest: float | None = None, boxes=None) -> np.ndarray:
    """The vote field V (uint32, image shape) after the last pass; as ``_reference.run_passes``
    (``largest``: the whole image's largest gradient, for a block of it; ``boxes``: per
    pass, the box whose voters it needs, ``_reach.pass_boxes``: the others are dropped)."""
    if isinstance(smoothed, list):
        smoothed = smoothed.pop()
    shape = smoothed.shape
    voters, weights, directions = prepare_voters(smoothed, plan, sign, largest)
    frame = _Voters(voters, shape, plan)
    tables = _tables(plan.radius, plan.spacing, plan.ndim)
    for index, ((cells, starts, entry_k), cos_half) in enumerate(zip(tables, plan.cos_half32)):
        if boxes is not None:
            keep = inside_box(np.unravel_index(voters, shape), boxes[index])
            if not keep.all():
                voters, weights, directions = voters[keep], weights[keep], directions[keep]
                frame = _Voters(voters, shape, plan)
        direction, norm = _as_float32_axes(directions)

        def chunk_rows(b, starts=starts):
            return _CHUNK // max(1, int(starts[b + 1] - starts[b]))

        groups = [(g, b) for g, b in _groups(directions, cells, plan.ndim, chunk_rows) if starts[b + 1] > starts[b]]
        votes = np.zeros(frame.size, dtype=np.int64)
        targets, amounts, pending = [], [], 0
        for group, b in groups:
            ks = entry_k[starts[b]:starts[b + 1]]
            hit = _hits(plan, ks, direction, norm, group, cos_half)
            rows, columns = np.nonzero(hit)
            targets.append(frame.flat[group][rows] + frame.steps[ks][columns])
            amounts.append(weights[group][rows])
            pending += len(rows)
            if pending > _CHUNK:
                votes += np.bincount(np.concatenate(targets), np.concatenate(amounts), frame.size).astype(np.int64)
                targets, amounts, pending = [], [], 0
        if targets:
            votes += np.bincount(np.concatenate(targets), np.concatenate(amounts), frame.size).astype(np.int64)
        inside = np.zeros(frame.padded_shape, dtype=np.int64)  # votes outside the image are dropped
        inside[frame.inside] = votes.reshape(frame.padded_shape)[frame.inside]
        votes = inside.ravel()
        if index < plan.n_passes - 1:  # in place: the tests read the float32 copy taken above
            for group, b in groups:
                ks = entry_k[starts[b]:starts[b + 1]]
                hit = _hits(plan, ks, direction, norm, group, cos_half)
                values = np.where(hit, votes[frame.flat[group][:, None] + frame.steps[ks][None, :]], 0)
                best = np.argmax(values, axis=1)  # first of equal maxima: lexicographic order
                moved = values[np.arange(len(group)), best] > 0
                directions[group[moved]] = plan.offset_directions[ks[best[moved]]]
        if iter_callback is not None:
            iter_callback(index, plan.n_passes)
    field = votes.reshape(frame.padded_shape)[frame.inside]
    return np.ascontiguousarray(field, dtype=np.uint32)
