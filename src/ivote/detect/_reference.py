"""NumPy reference of the voting passes: readable, vectorised over voters.

Each loop runs over the K pixel offsets of the voting disc/ball and does
whole-array operations over all voters at once. The arithmetic that decides
cone membership is the float32 arithmetic of ``kernels/ivote.cu`` (see
``_plan.py``), so this module is the oracle the GPU path is tested against.
"""

from __future__ import annotations

import numpy as np

from ._cone_tables import quantise_directions
from ._plan import DIRECTION_SCALE, VotingPlan, _sum_in_order

__all__ = ["close_pairs", "gradient", "prepare_voters", "run_passes", "sorted_close_pairs"]

_OFFSETS_PER_BINCOUNT = 64


def gradient(smoothed: np.ndarray, spacing) -> list[np.ndarray]:
    """``np.gradient(smoothed, *spacing)``, with 0 along axes of length 1."""
    return [
        np.gradient(smoothed, s, axis=axis) if smoothed.shape[axis] > 1 else np.zeros_like(smoothed)
        for axis, s in enumerate(spacing)
    ]


def prepare_voters(smoothed: np.ndarray, plan: VotingPlan, sign: float, largest: float | None = None):
    """Voters (flat index), integer weights and int16 directions.

    Every pixel whose quantised gradient magnitude reaches ``plan.min_weight``
    votes; its direction is the gradient (``sign=+1``, bright nuclei) or its
    opposite (``sign=-1``, dark nuclei), as int16 of length ~``DIRECTION_SCALE``,
    then replaced by the nearest offset direction of the plan
    (``_cone_tables.quantise_directions``: a table of the direction's bin; within
    ``initial_directions(plan).bound`` of it), as every backend does.
    ``largest``: the largest magnitude of the whole image when ``smoothed`` is a
    block of it (default: this image's).
    """
    grad = gradient(smoothed, plan.spacing)
    magnitude = np.sqrt(_sum_in_order([g * g for g in grad]))
    largest = magnitude.max() if largest is None else largest
    if largest == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros((0, plan.ndim), dtype=np.int16)
    quantised = np.floor(magnitude * (plan.weight_scale / largest) + 0.5)
    voters = np.flatnonzero(quantised >= plan.min_weight)
    weights = quantised.ravel()[voters].astype(np.int64)
    norm = magnitude.ravel()[voters]
    directions = np.stack(
        [np.rint(((sign * g.ravel()[voters]) / norm) * DIRECTION_SCALE) for g in grad], axis=1
    ).astype(np.int16)
    return voters, weights, quantise_directions(directions, plan)[1]


class _Voters:
    """Voter positions in a zero-padded frame, so that no offset leaves the array."""

    def __init__(self, voters, shape, plan: VotingPlan):
        self.shape = shape
        self.padded_shape = tuple(n + 2 * w for n, w in zip(shape, plan.window))
        coords = np.unravel_index(voters, shape)
        padded = tuple(c + w for c, w in zip(coords, plan.window))
        self.flat = np.ravel_multi_index(padded, self.padded_shape)
        self.inside = tuple(slice(w, w + n) for n, w in zip(shape, plan.window))
        strides = np.cumprod((self.padded_shape[1:] + (1,))[::-1])[::-1]
        self.steps = plan.offsets @ strides  # flat step of each offset
        self.size = int(np.prod(self.padded_shape))


def _in_cone(plan: VotingPlan, k: int, direction, direction_norm, cos_half):
    """Which voters have offset ``k`` inside their cone (float32, kernel order)."""
    o = plan.offsets_physical[k]
    dot = _sum_in_order([o[i] * direction[i] for i in range(plan.ndim)])
    return dot >= (cos_half * plan.offset_norms[k]) * direction_norm


def _vote(frame: _Voters, plan: VotingPlan, weights, direction, direction_norm, cos_half):
    """V: the sum of the weights of the voters whose cone holds each pixel."""
    votes = np.zeros(frame.size, dtype=np.int64)
    targets, amounts = [], []
    for k in range(len(plan.offsets)):
        hit = _in_cone(plan, k, direction, direction_norm, cos_half)
        targets.append(frame.flat[hit] + frame.steps[k])
        amounts.append(weights[hit])
        if len(targets) == _OFFSETS_PER_BINCOUNT or k == len(plan.offsets) - 1:
            # float64 sums of integers below 2**53 are exact
            votes += np.bincount(
                np.concatenate(targets), weights=np.concatenate(amounts), minlength=frame.size
            ).astype(np.int64)
            targets, amounts = [], []
    # votes that fell outside the image are dropped, so the padding stays 0
    inside = np.zeros(frame.padded_shape, dtype=np.int64)
    inside[frame.inside] = votes.reshape(frame.padded_shape)[frame.inside]
    return inside.ravel()


def _turn(frame: _Voters, plan: VotingPlan, votes, directions, direction, direction_norm, cos_half):
    """Point each voter at the largest vote inside its cone (first in offset
    order on ties; unchanged when its cone holds no votes)."""
    best = np.zeros(len(directions), dtype=np.int64)
    best_offset = np.full(len(directions), -1)
    for k in range(len(plan.offsets)):
        hit = _in_cone(plan, k, direction, direction_norm, cos_half)
        value = votes[frame.flat + frame.steps[k]]  # padding holds 0: never chosen
        better = hit & (value > best)
        best[better] = value[better]
        best_offset[better] = k
    moved = best_offset >= 0
    directions[moved] = plan.offset_directions[best_offset[moved]]


def _as_float32_axes(directions):
    direction = [directions[:, i].astype(np.float32) for i in range(directions.shape[1])]
    norm = np.sqrt(_sum_in_order([d * d for d in direction]))
    return direction, norm


def run_passes(smoothed: np.ndarray, plan: VotingPlan, sign: float, iter_callback=None) -> np.ndarray:
    """The vote field V (uint32, image shape) after the last pass.

    ``smoothed`` may be a one-element list holding the image (taken out of it).
    """
    if isinstance(smoothed, list):
        smoothed = smoothed.pop()
    voters, weights, directions = prepare_voters(smoothed, plan, sign)
    frame = _Voters(voters, smoothed.shape, plan)
    votes = np.zeros(frame.size, dtype=np.int64)
    for index, cos_half in enumerate(plan.cos_half32):
        direction, norm = _as_float32_axes(directions)
        votes = _vote(frame, plan, weights, direction, norm, cos_half)
        if index < plan.n_passes - 1:
            _turn(frame, plan, votes, directions, direction, norm, cos_half)
        if iter_callback is not None:
            iter_callback(index, plan.n_passes)
    field = votes.reshape(frame.padded_shape)[frame.inside]
    return np.ascontiguousarray(field, dtype=np.uint32)


def sorted_close_pairs(votes: np.ndarray, flat: np.ndarray, plan: VotingPlan):
    """Maxima (flat indices) sorted best first (ties: lower index first), their
    votes, and every (better, worse) pair of them closer than the radius.

    "Closer" is the voting disc's float32 test (``plan.offsets``), as in the
    GPU's ``ivote_close_pairs``, so both backends keep the same maxima.
    """
    values = votes.ravel()[flat].astype(np.int64)
    order = np.lexsort((flat, -values))
    flat, values = flat[order], values[order]
    coords = np.stack(np.unravel_index(flat, votes.shape), axis=1)
    return flat, values, close_pairs(coords, plan)


def close_pairs(coords: np.ndarray, plan: VotingPlan) -> np.ndarray:
    """Every (better, worse) pair of rows of ``coords`` ((M, ndim) integer
    pixel coordinates of maxima, best first) closer than the radius: the voting
    disc's float32 test, as ``ivote_close_pairs``; (P, 2) int64, sorted."""
    from scipy.spatial import cKDTree

    if len(coords) < 2:
        return np.zeros((0, 2), dtype=np.int64)
    physical = coords * np.asarray(plan.spacing)
    pairs = cKDTree(physical).query_pairs(plan.radius * (1 + 1e-6), output_type="ndarray")
    if len(pairs):
        pairs = np.sort(pairs, axis=1)  # (better, worse): rows are sorted best first
        offset = (coords[pairs[:, 1]] - coords[pairs[:, 0]]).astype(np.float32) * plan.spacing32
        length_sq = _sum_in_order([offset[:, i] * offset[:, i] for i in range(plan.ndim)])
        pairs = pairs[length_sq < plan.radius_sq32]
        pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    return pairs.reshape(-1, 2).astype(np.int64)
