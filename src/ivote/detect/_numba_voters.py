"""The voters of the CPU's detection (``ivote_gradient_max``, ``ivote_voters``): the
gradient, each voter's weight and initial direction, and their records in the order
the passes keep them (``_numba_passes.py``). Part of the Numba detection (``_numba.py``).

Arrays live in a frame padded by the window on every side (``_Frame``), so no
offset of a voter's table leaves the array; votes that land in the padding are
dropped after each pass (the reference drops votes outside the image), and the
padding's zeros are the local maxima's ``cval=0``.

Voters are kept in slabs at least twice the window thick along the image's first
axis (2D), or its first two (3D) (``_colours``): slabs of the same parity (2D) or
parity pair (3D) never mark the same pixel, so each colour's slabs vote in parallel.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .._numba_intrinsics import _max, _min
from .._parallel import for_ranges
from ._cone_tables import class_directions, initial_directions
from ._plan import VotingPlan

__all__ = ["prepare_voters"]

_FRAME, _PACKED = 0, 1
"""Columns of a voter's record in the order of the passes (``_regroup``): its frame index,
and its weight and class packed as ``weight << shift | class``, shift half the bits of the
records' dtype (``_record_layout``: uint32 where they fit, half the bytes to move; else
uint64); ``_record_fields`` reads them in NumPy. The kernels read the class as
``packed & mask`` in place, not through a helper function: each compiled helper costs
~0.08 s of the first call's compile (measured: four accessors, 0.3 s)."""


def _exact_inverse(h: float) -> float:
    """1 / h where multiplying by it gives the quotient by h exactly (h a power of two, its
    inverse a double: x * (1 / h) is then the real x / h, rounded once, as x / h), else 0."""
    inverse = 1.0 / h if h != 0.0 else 0.0
    return inverse if math.isfinite(inverse) and math.frexp(h)[0] == 0.5 and inverse * h == 1.0 else 0.0


def _differences(spacing3):
    """Per axis (z, y, x): the divisors of np.gradient's differences (edge: h, inside: 2h) and
    their exact inverses (``_exact_inverse``: a multiplication instead of a division)."""
    return np.array([(h, 2.0 * h, _exact_inverse(h), _exact_inverse(2.0 * h)) for h in spacing3])


@njit(cache=True, no_cfunc_wrapper=True, error_model="numpy")
def _steps(pos, n, stride, h):
    """np.gradient's difference (edge_order=1) at ``pos`` of an axis of ``n`` pixels as
    ``(f[i + up] - f[i - down]) / d``: ``(up, down, d, 1 / d or 0)`` (``h``: the axis' row
    of ``_differences``; 0 steps where n < 2: 0 / h is 0). Steps of the type of ``stride``
    (uint64: unsigned indices need no test for Python's negative indexing)."""
    zero = stride - stride
    if n < 2:
        return zero, zero, h[0], h[2]
    if pos == 0:
        return stride, zero, h[0], h[2]
    if pos == n - 1:
        return zero, stride, h[0], h[2]
    return stride, stride, h[1], h[3]


@njit(cache=True, no_cfunc_wrapper=True, error_model="numpy")
def _quotient(difference, d, inverse):
    """difference / d, by the exact inverse where there is one (a division costs ~4x a product)."""
    return difference * inverse if inverse != 0.0 else difference / d


@njit(cache=True, no_cfunc_wrapper=True, error_model="numpy")
def _gradient_at(f, i, x, X, uz, dz, hz, iz, uy, dy, hy, iy, hx):
    """(gz, gy, gx) at pixel i (uint64), column x of its row (whose z and y steps are given)."""
    ux, dx, dx_h, ix = _steps(x, X, np.uint64(1), hx)
    return (_quotient(f[i + uz] - f[i - dz], hz, iz), _quotient(f[i + uy] - f[i - dy], hy, iy),
            _quotient(f[i + ux] - f[i - dx], dx_h, ix))


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _voters(first, last, stage, row_max, row_start, magnitude, scale, min_weight, f, Z, Y, X, differences, sign,
            records, PY, PX, wz, wy, wx, ndim, cells, offset_of_bin):
    """Rows first..last (of Z * Y), row by row (no index division per pixel), in three stages.

    0. ``magnitude`` = |grad f| (the sum of squares in the kernels' order), ``row_max``
       each row's largest.
    1. ``row_start[r]`` = the number of voters of row r: pixels whose weight
       floor(|grad f| * scale + 0.5) is at least ``min_weight``.
    2. The voters of row r, from ``row_start[r]`` on: their records (``_PACKED``), frame
       index, weight and class: the class c that quantises its initial direction (the int16 direction
       along (sign=+1) or against (-1) the gradient, length ~32767, whose bin in a
       cube map of ``cells`` per axis picks ``offset_of_bin``:
       ``_cone_tables.quantise_directions``).
    """
    shift = np.uint64(4 * records.itemsize)  # _PACKED
    for r in range(first, last):
        if stage == 1:
            n = 0
            for i in range(r * X, (r + 1) * X):
                n += math.floor(magnitude[i] * scale + 0.5) >= min_weight
            row_start[r] = n
            continue
        z, y = r // Y, r % Y
        uz, dz, hz, iz = _steps(z, Z, np.uint64(X * Y), differences[0])
        uy, dy, hy, iy = _steps(y, Y, np.uint64(X), differences[1])
        if stage == 0:
            top = 0.0
            for x in range(X):
                i = np.uint64(r * X + x)
                gz, gy, gx = _gradient_at(f, i, x, X, uz, dz, hz, iz, uy, dy, hy, iy, differences[2])
                magnitude[i] = math.sqrt((gz * gz + gy * gy) + gx * gx)
                top = _max(top, magnitude[i])
            row_max[r] = top
            continue
        v = np.uint64(row_start[r])
        base = ((z + wz) * PY + (y + wy)) * PX + wx
        for x in range(X):
            i = np.uint64(r * X + x)
            m = magnitude[i]
            q = math.floor(m * scale + 0.5)
            if q < min_weight:
                continue
            gz, gy, gx = _gradient_at(f, i, x, X, uz, dz, hz, iz, uy, dy, hy, iy, differences[2])
            ez = np.int16(np.rint(((sign * gz) / m) * 32767.0)) if ndim == 3 else np.int16(0)
            ey = np.int16(np.rint(((sign * gy) / m) * 32767.0))
            ex = np.int16(np.rint(((sign * gx) / m) * 32767.0))
            c = offset_of_bin[np.uint64(_direction_bin(np.int64(ez), np.int64(ey), np.int64(ex), cells, ndim))]
            records[v, _FRAME] = base + x
            records[v, _PACKED] = (np.uint64(q) << shift) | np.uint64(c)
            v += np.uint64(1)


@njit(cache=True, no_cfunc_wrapper=True, error_model="numpy")
def _direction_bin(ez, ey, ex, cells, ndim):
    """The cube-map bin of an int16 direction given as integers (2D: the square map of
    (ey, ex)), the float32 operations of ``_cone_tables.direction_bins`` (an int16 is
    exact in float32, so the integers compare as the float32 components)."""
    # the major axis: the first of the largest components (z, y, x; no z in 2D), the others in
    # order; chosen on integers, which become selects where floats would become branches
    on_z = (ndim == 3) & (abs(ez) >= abs(ey)) & (abs(ez) >= abs(ex))
    on_y = (not on_z) & (abs(ey) >= abs(ex))
    major = ez if on_z else (ey if on_y else ex)
    first = ey if on_z else ez
    second = ex if on_z | on_y else ey
    face = 0 if on_z else (2 * (ndim - 2) if on_y else 2 * (ndim - 1))
    size = np.float32(abs(major))
    half_cells = np.float32(0.5 * cells)
    b = face + (1 if major < 0 else 0)
    if ndim == 3:
        cell = int(math.floor(np.float64((np.float32(first) / size + np.float32(1.0)) * half_cells)))
        b = b * cells + _min(_max(cell, 0), cells - 1)
    # floor of the float32 product, as float64 (exact): math.floor of a float32 calls libm's floorf
    cell = int(math.floor(np.float64((np.float32(second) / size + np.float32(1.0)) * half_cells)))
    return b * cells + _min(_max(cell, 0), cells - 1)


def _colours(row_counts, rows_shape, plan: VotingPlan):
    """Voters grouped in slabs of at least twice the window along the first axis
    (2D) or the first two (3D), from the number of voters of each row (image rows,
    ``rows_shape``: (Z, Y), Z = 1 in 2D): where each row's voters start in the
    order they are kept in (rows in flat order within a slab), each slab's range
    in it, and the slabs of each colour (no two of a colour add to the same pixel; a colour
    with no voters has none: the pass still calls ``_vote`` for it, a dry run's record of the
    kernels it needs, ``_compile_first``, then names it)."""
    ndim = plan.ndim
    axes = 1 if ndim == 2 else 2
    row_counts = np.asarray(row_counts, dtype=np.int64)
    occupied = np.flatnonzero(row_counts)
    row_coords = np.unravel_index(occupied, rows_shape)[2 - axes:]
    slab_id = np.zeros(len(occupied), dtype=np.int64)
    counts = []
    for a in range(axes):
        thick = 2 * plan.window[a]
        index = row_coords[a] // thick
        n = int(index.max(initial=0)) + 1
        counts.append(n)
        slab_id = slab_id * n + index
    # rows stay in flat order within a slab; slabs along the first axis alone are in flat order already
    order = slice(None) if axes == 1 else np.argsort(slab_id, kind="stable")
    row_start = np.zeros(len(row_counts), dtype=np.int64)
    in_order = row_counts[occupied[order]]
    row_start[occupied[order]] = np.cumsum(in_order) - in_order
    n_slabs = math.prod(counts)
    slab_starts = np.zeros(n_slabs + 1, dtype=np.int64)
    slab_starts[1:] = np.cumsum(np.bincount(slab_id, weights=row_counts[occupied], minlength=n_slabs))  # exact below 2**53
    index_per_axis = np.unravel_index(np.arange(n_slabs), counts)
    slab_colour = np.zeros(n_slabs, dtype=np.int64)
    for i in index_per_axis:
        slab_colour = slab_colour * 2 + (i & 1)
    filled = slab_starts[1:] > slab_starts[:-1]
    groups = [np.flatnonzero((slab_colour == c) & filled) for c in range(2**axes)]
    return row_start, slab_starts, groups


class _Frame:
    """The image in a frame padded by the window (one more pixel along the last
    axis, so that no run of a cone starts at a row's first pixel or ends past
    its last: ``_scan_rows`` sums rows alone): shape, strides and voter positions."""

    def __init__(self, shape, plan: VotingPlan):
        self.shape = tuple(shape)
        self.window = tuple(plan.window[:-1]) + (plan.window[-1] + 1,)
        self.padded_shape = tuple(n + 2 * w for n, w in zip(shape, self.window))
        self.size = math.prod(self.padded_shape)
        self.inside = tuple(slice(w, w + n) for n, w in zip(shape, self.window))

    def padded3(self):
        """(PZ, PY, PX) and (wz, wy, wx), with Z = 1 and wz = 0 in 2D."""
        if len(self.shape) == 2:
            return (1,) + self.padded_shape, (0,) + self.window
        return self.padded_shape, self.window


def _shape3(shape):
    return (1,) * (3 - len(shape)) + tuple(shape)


def _spacing3(spacing):
    return (1.0,) * (3 - len(spacing)) + tuple(float(s) for s in spacing)


def prepare_voters(smoothed: np.ndarray, plan: VotingPlan, sign: float, largest: float | None = None,
                   frame: _Frame | None = None):
    """As ``_reference.prepare_voters``, in the order the passes keep them (``_colours``):
    each voter's record (``_PACKED``: its index in ``frame``, weight and class, the class
    direction its initial direction becomes, ``_cone_tables.initial_directions``; read them
    with ``_record_fields``); each slab's range of voters and the slabs of each colour."""
    frame = _Frame(smoothed.shape, plan) if frame is None else frame
    quantise = initial_directions(plan)
    Z, Y, X = _shape3(smoothed.shape)
    (_, PY, PX), (wz, wy, wx) = frame.padded3()
    flat = smoothed.reshape(-1)
    magnitude, row_max, row_counts = np.empty(flat.size), np.zeros(Z * Y), np.zeros(Z * Y, dtype=np.int64)
    records = np.zeros((0, 2), np.uint32)  # stages 0 and 1 write none (uint32: the usual layout's signature)
    image_args = (flat, Z, Y, X, _differences(_spacing3(plan.spacing)), float(sign))
    frame_args = (PY, PX, wz, wy, wx, plan.ndim, quantise.cells, quantise.offset_of_bin)
    for_ranges(_voters, Z * Y, 0, row_max, row_counts, magnitude, 0.0, 0, *image_args, records, *frame_args,
               grain=8)
    largest = row_max.max() if largest is None else largest
    scale = float(plan.weight_scale / largest) if largest > 0 else 0.0  # 0: floor(0.5) is below min_weight, no voter
    # a block's largest gradient can exceed the whole image's (``largest`` given): weights above weight_scale
    heaviest = math.floor(row_max.max(initial=0.0) * scale + 0.5)
    dtype = _record_layout(frame.size, len(class_directions(plan)), heaviest)
    for_ranges(_voters, Z * Y, 1, row_max, row_counts, magnitude, scale, plan.min_weight, *image_args, records,
               *frame_args, grain=8)
    row_start, slab_starts, colours = _colours(row_counts, (Z, Y), plan)
    n = int(slab_starts[-1])
    records = np.empty((n, 2), dtype)
    for_ranges(_voters, Z * Y, 2, row_max, row_start, magnitude, scale, plan.min_weight, *image_args, records,
               *frame_args, grain=8)
    return records, slab_starts, colours


def _record_layout(frame_size: int, n_classes: int, heaviest: int = 0):
    """The dtype of the voters' records (``_PACKED``): uint32 where the frame index, the
    weight (at most ``heaviest``: ``weight_scale`` < 2**16, or more in a block whose
    gradient exceeds the whole image's) and the class fit, else uint64 (a weight's low 32
    bits, as the uint32 weights before the packing)."""
    return np.uint32 if frame_size < 2**32 and n_classes <= 2**16 and heaviest < 2**16 else np.uint64


def _record_fields(grouped):
    """(frame index, weight, class) of every record (``_PACKED``), as int64 arrays."""
    shift = 4 * grouped.itemsize
    packed = grouped[:, _PACKED].astype(np.uint64)
    return (grouped[:, _FRAME].astype(np.int64), (packed >> np.uint64(shift)).astype(np.int64),
            (packed & np.uint64((1 << shift) - 1)).astype(np.int64))
