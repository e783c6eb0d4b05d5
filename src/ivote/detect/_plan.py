"""Geometry of iterative voting, computed once on the host and shared by the
NumPy reference and the CUDA kernels so that both make the same decisions.

Every quantity that decides whether a pixel lies in a voter's cone is computed
in float32 with the same operations, in the same order, as in
``kernels/ivote.cu`` (compiled without fused multiply-add); weights and votes
are integers. The two paths therefore agree exactly, not approximately.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["VotingPlan", "make_plan", "cone_angles", "DIRECTION_SCALE", "VOTER_FLOOR"]

DIRECTION_SCALE = 32767.0
"""Voter directions are stored as int16 vectors of about this length."""

VOTER_FLOOR = 1.0 / 64.0
"""Voters whose gradient magnitude is below this fraction of the largest are skipped.

Every backend reads it as ``VotingPlan.min_weight`` (the quantised weight must reach
``ceil(VOTER_FLOOR * weight_scale)``). Being relative to the single largest gradient,
it decides how far below the brightest object a nucleus can be and still vote. Higher
floors were measured (2026-11-24, ``benchmarks/studies/voter_floor.py``, docs/detect.md "The voter
floor"): 1/48 silences nuclei of 0.15 x a bright one beside a speck 10 x
brighter that 1/64 finds, 1/32 costs 0.006 F1 on dsb2018 and 1/16 0.03-0.07 on four
datasets, while the CPU time falls far less than the voters (1/48: -8 % in 2D, nothing
measurable in 3D). So it stays at 1/64."""

_MAX_WEIGHT = 65535
_MIN_WEIGHT_SCALE = 16


@dataclass(frozen=True)
class VotingPlan:
    """Everything about the voting that depends only on radius, spacing and ndim."""

    ndim: int
    radius: float
    """Voting radius, physical units."""
    spacing: tuple
    """Voxel spacing (float64)."""
    spacing32: np.ndarray
    """The spacing as float32, as the kernels see it."""
    radius_sq32: np.float32
    """radius**2 in float32: an offset votes when its squared length is below it."""
    window: tuple
    """Largest |offset| along each axis, pixels."""
    offsets: np.ndarray
    """(K, ndim) int64 pixel offsets of the voting disc/ball, without 0, lexicographic order."""
    offsets_physical: np.ndarray
    """(K, ndim) float32 offsets times spacing."""
    offset_norms: np.ndarray
    """(K,) float32 length of each physical offset."""
    offset_directions: np.ndarray
    """(K, ndim) int16 direction a voter takes when it turns towards that offset (and, for the
    nearest one, its initial direction, or below a few pixels of radius one of a larger
    ball's: ``_cone_tables.initial_directions``)."""
    cone_angles: tuple
    """Full cone angle phi of each pass, radians: pi/2 halving until below atan(1/r)."""
    cos_half32: tuple
    """cos(phi/2) of each pass as float32."""
    weight_scale: int
    """Largest integer voter weight; votes of any pixel then fit in uint32."""
    min_weight: int
    """Voters with a smaller integer weight are skipped (negligible gradient)."""
    maxima_half_width: tuple
    """Half width per axis of the box inscribed in the radius, for local maxima."""

    @property
    def n_passes(self) -> int:
        return len(self.cone_angles)


def _sum_in_order(terms):
    """terms[0] + terms[1] + ... evaluated left to right (as the kernels do)."""
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def make_plan(radius: float, spacing: tuple, ndim: int) -> VotingPlan:
    """The plan for a radius, spacing and number of axes (memoized: a radius slider
    asks for the same few plans again and again; the arrays are read-only)."""
    return _make_plan(float(radius), tuple(float(s) for s in spacing), int(ndim))


def cone_angles(radius_px: float, *, narrowing: float = 2.0, first: float = math.pi / 2) -> tuple:
    """The full cone angle phi of each pass, radians: ``first``, then each pass's
    divided by ``narrowing``, until it is under one pixel wide at the radius
    (phi < atan(1 / radius_px), radius_px in pixels of the finest axis).

    ``_make_plan`` calls this module's ``cone_angles`` with the defaults (pi/2,
    halving). It is the one hook of ``benchmarks/studies/cone_schedule.py``, which replaces
    it to measure other schedules (and then clears the detection's memoized tables,
    which are keyed on radius, spacing and ndim only)."""
    if not narrowing > 1:
        raise ValueError(f"narrowing must be greater than 1; got {narrowing!r}")
    stop = math.atan(1.0 / radius_px)
    angles = [float(first)]
    while angles[-1] >= stop:
        angles.append(angles[-1] / narrowing)
    return tuple(angles)


@functools.lru_cache(maxsize=16)
def _make_plan(radius: float, spacing: tuple, ndim: int) -> VotingPlan:
    spacing32 = np.asarray(spacing, dtype=np.float32)
    radius32 = np.float32(radius)
    radius_sq32 = radius32 * radius32
    window = tuple(int(math.floor(radius / s)) + 1 for s in spacing)

    grids = np.meshgrid(*[np.arange(-w, w + 1) for w in window], indexing="ij")
    offsets = np.stack([g.ravel() for g in grids], axis=1)  # lexicographic order
    physical = offsets.astype(np.float32) * spacing32
    length_sq = _sum_in_order([physical[:, i] * physical[:, i] for i in range(ndim)])
    keep = (length_sq < radius_sq32) & np.any(offsets != 0, axis=1)
    offsets, physical, length_sq = offsets[keep], physical[keep], length_sq[keep]
    norms = np.sqrt(length_sq)
    directions = np.rint((physical / norms[:, None]) * np.float32(DIRECTION_SCALE)).astype(np.int16)

    angles = cone_angles(radius / min(spacing))  # looked up here: benchmarks/studies/cone_schedule.py swaps it
    cos_half = tuple(np.float32(math.cos(phi / 2)) for phi in angles)

    weight_scale = min(_MAX_WEIGHT, (2**32 - 1) // max(len(offsets), 1))
    if weight_scale < _MIN_WEIGHT_SCALE:
        raise ValueError(
            f"radius must be smaller: {radius:g} spans {len(offsets)} pixels, too many to count votes exactly"
        )
    min_weight = max(1, int(math.ceil(VOTER_FLOOR * weight_scale)))
    half_width = tuple(int(math.floor(radius / (math.sqrt(ndim) * s))) for s in spacing)
    for array in (spacing32, offsets, physical, norms, directions):
        array.flags.writeable = False  # shared by every caller of the memoized plan
    return VotingPlan(
        ndim=ndim,
        radius=float(radius),
        spacing=tuple(float(s) for s in spacing),
        spacing32=spacing32,
        radius_sq32=radius_sq32,
        window=window,
        offsets=offsets,
        offsets_physical=physical,
        offset_norms=norms,
        offset_directions=directions,
        cone_angles=tuple(angles),
        cos_half32=cos_half,
        weight_scale=int(weight_scale),
        min_weight=min_weight,
        maxima_half_width=half_width,
    )
