"""Cone tables: for every direction bin, the voting offsets that can lie in the
cone of any direction of that bin (the GPU kernels' replacement for a
bounding box).

A cone of half-angle ``alpha`` around a thin diagonal direction fills a tiny
part of its axis-aligned bounding box (1 cell in 20-130 in the narrow passes),
so testing every box cell wastes most of the work. Instead, directions are
sorted into bins (a cube map: the dominant axis and its sign pick a face, the
other components divided by the dominant one pick a cell of an ``n`` x ``n``
grid on it; a square map of 4 x ``n`` bins in 2D) and each bin lists, in
lexicographic order, the offsets within ``alpha + delta`` of its centre
direction, where ``delta`` bounds the angle between the centre and any
direction of the bin. Every offset of the exact cone of a direction of the bin
is in the list (the kernel still makes the exact float32 test), so the vote
field is the same as with the full disc/ball of ``_reference.py``, and the
order keeps the turn step's tie-break (first offset in lexicographic order).

Offsets are packed into one int32 per entry: ``dy, dx`` as two int16 in 2D,
``dz, dy, dx`` as three 10-bit fields (|offset| <= 511) in 3D.

The same cube map, finer, quantises the voters' *initial* directions
(:func:`initial_directions`): every backend replaces a voter's gradient
direction by the class direction (:func:`class_directions`: an offset
direction ``plan.offset_directions[k]``, the directions the turn step gives
anyway, or below a few pixels of radius one of a larger ball's) that the
table gives its bin, so that from the first pass on every voter holds one of
a fixed set of directions.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ._plan import VotingPlan, make_plan

__all__ = [
    "ConeTable", "InitialDirections", "check_packable", "class_directions", "cone_tables", "direction_bins",
    "initial_directions", "pack_offsets", "quantise_directions", "unpack_offsets",
]

_PACK_LIMIT = {2: 32767, 3: 511}
"""Largest |offset| per axis that an int32 entry holds (two int16 in 2D, three 10-bit fields in 3D)."""

MARGIN = 1e-3
"""Extra angle (radians) for float32 rounding of directions, bins and cone tests."""

_MAX_CELLS_PER_FACE = {2: 256, 3: 32}
_ANGLE_FRACTION = 3.0  # bin half-width about alpha / 3: lists hold ~1.3x (2D) / ~1.8x (3D) the cone
_CHUNK = 1 << 24  # bins x offsets evaluated per chunk


@dataclass(frozen=True)
class ConeTable:
    """One pass's table: entries of bin b are ``entries[starts[b]:starts[b + 1]]``."""

    cells: int
    """Bins per face axis (n)."""
    starts: object
    """(n_bins + 1,) int32 array of the backend."""
    entries: object
    """(n_entries,) int32 packed offsets, lexicographic within each bin."""

    @property
    def n_bins(self) -> int:
        return len(self.starts) - 1


def check_packable(plan: VotingPlan) -> None:
    """Raise (naming the radius) if the plan's offsets do not fit the packed entries."""
    limit = _PACK_LIMIT[plan.ndim]
    largest = int(np.abs(plan.offsets).max(initial=0))
    if largest > limit:
        raise ValueError(
            f"radius must be at most {limit} pixels along each axis (radius / spacing) for {plan.ndim}D voting "
            f"on the GPU; radius {plan.radius:g} with spacing {plan.spacing} reaches {largest} (use backend='numpy')"
        )


def pack_offsets(offsets: np.ndarray) -> np.ndarray:
    """(K, ndim) int offsets -> (K,) int32 packed as the kernels decode them."""
    offsets = np.asarray(offsets, dtype=np.int64)
    ndim = offsets.shape[1]
    if np.abs(offsets).max(initial=0) > _PACK_LIMIT[ndim]:
        raise ValueError(
            f"radius must be at most {_PACK_LIMIT[ndim]} pixels along each axis (radius / spacing) for {ndim}D "
            "voting on the GPU"
        )
    if ndim == 2:
        packed = ((offsets[:, 0] & 0xFFFF) << 16) | (offsets[:, 1] & 0xFFFF)
    else:
        packed = ((offsets[:, 0] + 512) << 20) | ((offsets[:, 1] + 512) << 10) | (offsets[:, 2] + 512)
    return packed.astype(np.uint32).view(np.int32)


def unpack_offsets(packed: np.ndarray, ndim: int) -> np.ndarray:
    """Inverse of :func:`pack_offsets` (the kernels' decoding, for tests)."""
    bits = np.asarray(packed).view(np.uint32).astype(np.int64)
    if ndim == 2:
        fields = [(bits >> 16) & 0xFFFF, bits & 0xFFFF]
        return np.stack([np.where(f >= 0x8000, f - 0x10000, f) for f in fields], axis=1)
    return np.stack([((bits >> s) & 0x3FF) - 512 for s in (20, 10, 0)], axis=1)


def direction_bins(directions, cells: int, ndim: int) -> np.ndarray:
    """The bin of each (N, ndim) direction, as the kernels compute it (float32)."""
    a = np.asarray(directions, dtype=np.float32)
    magnitude = np.abs(a)
    axis = np.argmax(magnitude, axis=1)  # first of equal components, as the kernels
    rows = np.arange(len(a))
    major = magnitude[rows, axis]
    face = 2 * axis + (a[rows, axis] < 0)
    bins = face.astype(np.int64)
    for j in range(ndim - 1):
        other = np.where(np.arange(ndim - 1)[j] < axis, j, j + 1)  # the j-th axis other than `axis`
        u = a[rows, other] / major
        cell = np.floor((u + np.float32(1)) * np.float32(0.5 * cells)).astype(np.int64)
        bins = bins * cells + np.clip(cell, 0, cells - 1)
    return bins


def _bin_geometry(cells: int, ndim: int):
    """Unit centre direction (n_bins, ndim) and angular radius (n_bins,) of every bin."""
    edges = np.linspace(-1.0, 1.0, cells + 1)
    centres_1d = 0.5 * (edges[:-1] + edges[1:])
    grids = np.meshgrid(*[np.arange(cells)] * (ndim - 1), indexing="ij")
    cell_index = np.stack([g.ravel() for g in grids], axis=1)  # (n^(ndim-1), ndim-1)
    centres, radii = [], []
    for face in range(2 * ndim):
        axis, sign = divmod(face, 2)
        sign = -1.0 if sign else 1.0
        others = [i for i in range(ndim) if i != axis]

        def direction(uv):
            d = np.zeros((len(uv), ndim))
            d[:, axis] = sign
            for j, o in enumerate(others):
                d[:, o] = uv[:, j]
            return d / np.linalg.norm(d, axis=1, keepdims=True)

        centre = direction(centres_1d[cell_index])
        # the largest angle to the centre is at a corner of the cell (quasi-convexity)
        worst = np.zeros(len(cell_index))
        for corner in np.ndindex(*(2,) * (ndim - 1)):
            corner_dir = direction(edges[cell_index + np.asarray(corner)])
            cos = np.clip(np.sum(corner_dir * centre, axis=1), -1.0, 1.0)
            worst = np.maximum(worst, np.arccos(cos))
        centres.append(centre)
        radii.append(worst)
    return np.concatenate(centres), np.concatenate(radii)


def cells_for(half_angle: float, ndim: int) -> int:
    """Bins per face axis for a pass: bin radius about half_angle / 3, capped."""
    reach = 1.0 if ndim == 2 else math.sqrt(2.0)  # angular radius of a face cell ~ reach / n
    cells = math.ceil(reach * _ANGLE_FRACTION / half_angle)
    return int(min(max(cells, 1), _MAX_CELLS_PER_FACE[ndim]))


def _table(plan: VotingPlan, cos_half, xp) -> ConeTable:
    ndim = plan.ndim
    alpha = math.acos(min(1.0, float(cos_half)))  # the float32 test's half-angle
    cells = cells_for(alpha, ndim)
    centres, radii = _bin_geometry(cells, ndim)
    limit = np.cos(np.minimum(alpha + radii + MARGIN, math.pi))  # offset kept when cos(angle) >= limit
    physical = plan.offsets_physical.astype(np.float64)
    unit = physical / np.linalg.norm(physical, axis=1, keepdims=True)
    unit_d, packed_d = xp.asarray(unit), xp.asarray(pack_offsets(plan.offsets))
    centres_d, limit_d = xp.asarray(centres), xp.asarray(limit)
    n_bins, n_offsets = len(centres), len(unit)
    step = max(1, _CHUNK // max(n_offsets, 1))
    counts, parts = [], []
    for first in range(0, n_bins, step):
        last = min(n_bins, first + step)
        keep = (centres_d[first:last] @ unit_d.T) >= limit_d[first:last, None]
        counts.append(keep.sum(axis=1))
        rows, columns = xp.nonzero(keep)  # row-major: by bin, then offset (lexicographic)
        parts.append(packed_d[columns])
    totals = xp.cumsum(xp.concatenate(counts))
    if n_bins and int(totals[-1]) >= 2**31:
        raise ValueError(f"radius {plan.radius:g} is too large for the GPU cone tables (over 2**31 entries)")
    starts = xp.zeros(n_bins + 1, dtype=np.int32)
    starts[1:] = totals
    entries = xp.concatenate(parts).astype(np.int32) if parts else xp.zeros(0, np.int32)
    return ConeTable(cells=cells, starts=starts, entries=entries)


def cone_tables(plan: VotingPlan, xp=np) -> tuple:
    """One :class:`ConeTable` per pass, as arrays of ``xp``."""
    return tuple(_table(plan, cos_half, xp) for cos_half in plan.cos_half32)


# ---------------------------------------------------------------------------
# The voters' initial direction, quantised to a class direction
# ---------------------------------------------------------------------------

INITIAL_RADIUS = {2: 5.0, 3: 8.0}
"""Finest pixels: below this radius a plan's few offset directions lie too far apart to start a
voter's first cone near its gradient (2D radius 2 px: 8 offsets, up to 22.6 degrees away; the
F1 of 60 synthetic nuclei of that radius fell from 0.667 to 0.443), so the directions of the
offsets of a ball of this radius (same spacing) are added as classes (``class_directions``):
the bound is then that of this radius at any smaller one (2D: 7.2 degrees, 3D: 6.4)."""

INITIAL_CELLS = {2: 256, 3: 64}
"""Bins per face axis of the map that quantises initial directions (2D: 1024 bins, each
within 0.22 degrees of its centre; 3D: 24576 bins, within 1.3 degrees). The offsets' own
directions are further apart: no direction is more than 2.6 degrees from an offset
direction at radius 12 px in 2D, 5.5 at radius 8 px in 3D, so the bins add little: the
bounds (``InitialDirections.bound``) are 2.7 and 6.4 degrees (3D: 6.9 with 32 cells, 6.4
with 128, whose table takes 4x longer to build)."""


_NEAREST = 8  # candidates per bin (the nearest by chord; the largest cosine is among them)


@dataclass(frozen=True)
class InitialDirections:
    """How a voter's initial direction is quantised (:func:`initial_directions`)."""

    cells: int
    """Bins per face axis of the cube map (``direction_bins``)."""
    offset_of_bin: np.ndarray
    """(n_bins,) int32: the class c whose direction ``class_directions(plan)[c]`` replaces
    every direction of the bin (c < K: offset k's direction ``plan.offset_directions[k]``)."""
    bound: float
    """Radians: no direction is further than this from the class direction it becomes."""


def class_directions(plan: VotingPlan) -> np.ndarray:
    """The voters' directions, one per class (memoized per plan; read-only (C, ndim) int16).

    Classes 0..K-1 are the plan's offset directions (``plan.offset_directions``, the
    directions the turn step gives: class k is offset k's). Below ``INITIAL_RADIUS``
    finest pixels, the distinct directions of the offsets of a ball of that radius
    (same spacing) that no offset of the plan has follow, in that ball's offset
    order: a voter may start along one of them (:func:`initial_directions`) and keeps
    it until its cone holds a vote. At larger radii C = K.
    """
    return _class_directions(plan.radius, plan.spacing, plan.ndim)


@functools.lru_cache(maxsize=16)
def _class_directions(radius: float, spacing: tuple, ndim: int) -> np.ndarray:
    plan = make_plan(radius, spacing, ndim)
    finest = min(spacing)
    if radius / finest >= INITIAL_RADIUS[ndim] or len(plan.offsets) == 0:
        return plan.offset_directions
    ball = make_plan(INITIAL_RADIUS[ndim] * finest, spacing, ndim).offset_directions
    known = {tuple(d) for d in plan.offset_directions}
    extra = [d for d in dict.fromkeys(map(tuple, ball)) if d not in known]
    directions = np.concatenate([plan.offset_directions, np.asarray(extra, dtype=np.int16).reshape(-1, ndim)])
    directions.flags.writeable = False  # shared by every caller
    return directions


def initial_directions(plan: VotingPlan) -> InitialDirections:
    """The table that quantises the voters' initial directions (memoized per plan).

    Bin b of a cube map of ``INITIAL_CELLS[ndim]`` cells per face axis (the bins
    ``direction_bins`` computes, in float32, as every backend) maps to the class c
    whose int16 direction ``class_directions(plan)[c]`` (an offset direction of the
    plan, or below ``INITIAL_RADIUS`` of a larger ball) is nearest (largest cosine,
    float64) the bin's centre direction, the first c on ties; colinear offsets share
    their int16 direction, so which of them is taken changes nothing. ``bound`` is
    the largest, over bins, of the angle between the centre and its class direction
    plus the bin's angular radius (and ``MARGIN`` for float32 rounding).
    """
    return _initial_directions(plan.radius, plan.spacing, plan.ndim)


@functools.lru_cache(maxsize=16)
def _initial_directions(radius: float, spacing: tuple, ndim: int) -> InitialDirections:
    plan = make_plan(radius, spacing, ndim)
    cells = INITIAL_CELLS[ndim]
    centres, radii = _bin_geometry(cells, ndim)
    if len(plan.offsets) == 0:  # radius under a pixel: nothing votes, nothing to turn to
        return InitialDirections(cells=cells, offset_of_bin=np.zeros(len(centres), np.int32), bound=math.pi)
    # each distinct int16 direction once, at its first class (argmax keeps the first of equal cosines)
    distinct, first_k = np.unique(class_directions(plan), axis=0, return_index=True)
    order = np.argsort(first_k)
    distinct, first_k = distinct[order].astype(np.float64), first_k[order]
    unit = distinct / np.linalg.norm(distinct, axis=1, keepdims=True)
    # the nearest few by chord length (a k-d tree), then the largest cosine among them, first k on ties
    from scipy.spatial import cKDTree

    near = cKDTree(unit).query(centres, k=min(_NEAREST, len(unit)))[1].reshape(len(centres), -1)
    near = np.sort(near, axis=1)  # in k order: argmax keeps the first of equal cosines
    cosines = np.einsum("bd,bjd->bj", centres, unit[near])
    best = np.argmax(cosines, axis=1)
    chosen = near[np.arange(len(near)), best]
    cosine = cosines[np.arange(len(near)), best]
    bound = float(np.max(np.arccos(np.clip(cosine, -1.0, 1.0)) + radii, initial=0.0)) + MARGIN
    offset_of_bin = first_k[chosen].astype(np.int32)
    offset_of_bin.flags.writeable = False  # shared by every caller
    return InitialDirections(cells=cells, offset_of_bin=offset_of_bin, bound=bound)


def quantise_directions(directions, plan: VotingPlan):
    """(N, ndim) int16 directions -> (class c (N,) int64, its int16 direction (N, ndim)),
    by :func:`initial_directions` (the directions unchanged when the plan has no offsets)."""
    table = initial_directions(plan)
    if len(plan.offsets) == 0:
        return np.zeros(len(directions), dtype=np.int64), np.asarray(directions, dtype=np.int16)
    ks = table.offset_of_bin[direction_bins(directions, table.cells, plan.ndim)].astype(np.int64)
    return ks, class_directions(plan)[ks]
