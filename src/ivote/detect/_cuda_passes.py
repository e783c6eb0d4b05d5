"""The voters and the voting passes of a GPU detection: dense weights and initial
directions (``ivote_voters``), then each pass's votes and turn, over cone tables
or in tiles of shared memory (``_cuda_tables._schedule``). Part of the GPU
detection (``_cuda.py``)."""

from __future__ import annotations

import numpy as np

from ._cuda_kernels import _BLOCK, _dims, _grid, _launch_tiled
from ._cuda_tables import _initial_directions, _schedule
from ._plan import VotingPlan
from ._reach import clear_outside


def _voters(smoothed, plan: VotingPlan, sign: float, largest, kernels, index: str, xp, out=None,
            largest_given: bool = False, initial=None):
    """Dense uint16 weights (image shape, 0: no voter) and int16 directions (size x ndim;
    the initial direction quantised to an offset direction), into ``out`` = (weights,
    directions) when given; ``largest_given``: ``largest`` already holds the whole image's
    largest gradient (a block of it); ``initial``: ``_initial_directions(plan, xp)`` when
    already looked up (a graph's capture must not look it up)."""
    Z, Y, X = _dims(smoothed.shape)
    size = smoothed.size
    spacing64 = (1.0,) * (3 - plan.ndim) + plan.spacing
    geometry = (
        np.int32(size) if index == "int" else np.int64(size), np.int32(Z), np.int32(Y), np.int32(X),
        *map(np.float64, spacing64),
    )
    grid = (min(_grid(size)[0], 2048),)
    if not largest_given:
        kernels["ivote_gradient_max"](grid, (_BLOCK,), (smoothed, *geometry, largest))
    if out is None:
        out = (xp.empty(smoothed.shape, dtype=np.uint16), xp.empty((size, plan.ndim), dtype=np.int16))
    weights, directions = out
    cells, offset_of_bin, offset_directions = _initial_directions(plan, xp) if initial is None else initial
    kernels["ivote_voters"](
        (min(_grid(size)[0], 1 << 16),), (_BLOCK,),
        (smoothed, *geometry, largest, np.float64(plan.weight_scale), np.uint32(plan.min_weight), np.float64(sign),
         cells, offset_of_bin, offset_directions, weights, directions),
    )
    return weights, directions


def _passes(weights, directions, plan: VotingPlan, index: str, iter_callback, kernels, xp, buffers=None,
            schedule=None, boxes=None):
    """The vote field (uint32, image shape) after the last pass. ``buffers``: the
    two vote buffers (uint32, image shape), the first zeroed (default: new ones);
    ``schedule``: ``_schedule(plan, index, xp)`` when already looked up; ``boxes``:
    per pass, the box whose voters it needs (``_reach.pass_boxes``, a block of an
    image): the weights outside are zeroed before the pass and before the turn
    that precedes it, so those voters neither vote nor turn."""
    shape = weights.shape
    ndim = plan.ndim
    Z, Y, X = _dims(shape)
    size = weights.size
    spacing32 = tuple(np.float32(s) for s in (1.0,) * (3 - ndim) + tuple(plan.spacing32))
    size_arg = np.int32(size) if index == "int" else np.int64(size)
    if buffers is None:
        votes = xp.zeros(shape, dtype=np.uint32)
        spare = xp.empty(shape, dtype=np.uint32) if plan.n_passes > 1 else None  # zeroed by each turn step
    else:
        votes, spare = buffers
    schedule, reach = _schedule(plan, index, xp) if schedule is None else schedule
    reach = tuple(map(np.int32, reach))
    if boxes is not None:
        clear_outside(weights, boxes[0])
    for pass_index, ((table, limits, halo), cos_half) in enumerate(zip(schedule, plan.cos_half32)):
        last = pass_index == plan.n_passes - 1
        cos_half = np.float32(cos_half)
        if halo is not None:
            geometry = (
                np.int32(Z), np.int32(Y), np.int32(X), *spacing32, cos_half, np.int32(table.cells),
                table.starts, table.entries, limits, *map(np.int32, halo),
            )
            _launch_tiled(kernels["ivote_vote_tiled"], shape, ndim, halo, (weights, directions, *geometry, votes))
            if not last and boxes is not None:
                clear_outside(weights, boxes[pass_index + 1])
            if not last:
                _launch_tiled(kernels["ivote_turn_tiled"], shape, ndim, halo,
                              (weights, directions, *geometry, votes, spare))
        else:
            geometry = (
                size_arg, np.int32(Z), np.int32(Y), np.int32(X), *spacing32, cos_half, np.int32(table.cells),
                table.starts, table.entries, limits, *reach,
            )
            kernels["ivote_vote_table"](_grid(size), (_BLOCK,), (weights, directions, *geometry, votes))
            if not last and boxes is not None:
                clear_outside(weights, boxes[pass_index + 1])
            if not last:
                kernels["ivote_turn_table"](_grid(size), (_BLOCK,), (weights, directions, *geometry, votes, spare))
        if not last:
            votes, spare = spare, votes
        if iter_callback is not None:
            iter_callback(pass_index, plan.n_passes)
    return votes
