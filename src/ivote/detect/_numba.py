"""Detection on the CPU's cores: the CUDA kernels of ``kernels/ivote.cu`` as
Numba-compiled loops run on a pool of threads (``ivote._parallel``).

Same entry point as ``_cuda.py`` (:func:`detect`, returning the fields of
``_result.RawDetection``), same arithmetic as the NumPy path (``_cpu.py`` walking
the cone tables, ``_reference.py`` the oracle): the blur is
``scipy.ndimage.correlate1d``'s sums with ``gaussian_filter``'s taps, the cone
tests the kernels' float32 operations, weights and votes are integers, so the
vote field, the cells and their scores equal the NumPy path's. Around the
passes, the voters' set-up is compiled (``_voters``, row by row, straight into
the passes' order) and so is the blur (``_blur_along``, ``_blur_across``: SciPy's
``correlate1d`` holds the GIL); the local maxima are NumPy on ranges of rows in
parallel, so they add nothing to the first call's compile.

Less work than the GPU's loop for the same votes (``_run_tables.py``): every
voter's direction is one of the class directions (``_cone_tables.class_directions``:
the plan's offset directions, and below a few pixels of radius a larger ball's; the
initial one is quantised to one, ``_cone_tables.initial_directions``, as on every
backend; every turn gives an offset direction), whose cone in each pass is a fixed list of runs of
pixels along rows, so no cone test is made at all. A voter adds its weight to
a run as two marks of a difference array (+w at its start, -w after its end)
that a running sum along each row turns into the vote field; in the narrow
passes, where most runs are one pixel, it adds it straight into each pixel, two
pixels an item, and the field is the marks themselves (``_vote_items``). The
turn reads each run's largest vote in two reads of a sparse table of row maxima.

Voters are handled by class (class direction c; c < K: offset direction c): each pass, the voters of a
slab are sorted by class with a stable counting sort (``_regroup``, from their flat order, the class
each has in a map by frame index that the turn writes), so the
voters of a group walk the same list of runs: the vote runs item by item (two
at a time) over the group's voters, the turn item by item too (each voter's best so far in a key), and no
loop's length changes from one voter to the next (a short loop whose length
the branch predictor cannot guess cost more than the marks themselves:
measured 3x on the votes of the later passes).

Races: a voter marks pixels within ``plan.window`` of it (one more along the
last axis; a direct pass adds to its cone's pixels alone). The image is cut
into slabs at least twice the window thick along its first axis (2D), or its
first two (3D); slabs of the same parity (2D) or
parity pair (3D) never mark the same pixel, so each colour's slabs run in
parallel straight into one array: no atomics, no per-thread copies to reduce.

Arrays live in a frame padded by the window on every side (``_Frame``), so no
offset of a voter's table leaves the array; votes that land in the padding are
dropped after each pass (the reference drops votes outside the image), and the
padding's zeros are the local maxima's ``cval=0``.

Compiled once per machine (``cache=True``, in ``__pycache__`` next to this
file, or in Numba's user cache directory when the package is read-only); the
kernels are serial ``nogil`` loops over ranges, which compile several times
sooner than ``parallel=True`` loops.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit
from scipy import ndimage

from .._backend import numba_lock
from .._compile import compile_ahead_once
from .._numba_intrinsics import _empty, _first_equal16, _max, _min, _prefetch
from .._parallel import for_ranges
from ._contrast import BUMP_DEPTH, BUMP_SHARE, bump_ring, noise_positions, noise_residuals
from ._cuda import gaussian_taps  # scipy's taps (plain NumPy; _cuda imports no CuPy)
from ._cone_tables import class_directions, initial_directions
from ._plan import VotingPlan, make_plan
from ._reference import close_pairs
from ._result import RawDetection
from ._reach import pass_boxes
from ._run_tables import discrete_runs, pixel_pairs, split_runs

_FRAME, _PACKED = 0, 1
"""Columns of a voter's record in the order of the passes (``_regroup``): its frame index,
and its weight and class packed as ``weight << shift | class``, shift half the bits of the
records' dtype (``_record_layout``: uint32 where they fit, half the bytes to move; else
uint64); ``_record_fields`` reads them in NumPy. The kernels read the class as
``packed & mask`` in place, not through a helper function: each compiled helper costs
~0.08 s of the first call's compile (measured: four accessors, 0.3 s)."""

_TOP_LEVELS = {2: 3, 3: 2}
"""Sparse-table levels above the vote field: a run of up to 2**(levels + 1) pixels is two
reads (2D: 16, longer runs are cut; 3D, shorter runs and larger fields: 8)."""

__all__ = ["detect", "run_passes"]

_LOCK = numba_lock
"""One detection at a time (and no other stage's Numba kernels meanwhile): Numba's workqueue
threading layer must not be entered from two threads at once (``_backend.numba_lock``)."""


# ---------------------------------------------------------------------------
# Blur: scipy.ndimage.gaussian_filter's sums (mode 'reflect', symmetric taps)
# ---------------------------------------------------------------------------


def _blur_part(first, last, current, out, taps):
    """Rows first..last of the blur along the last axis (``correlate1d``: its lines are contiguous there)."""
    ndimage.correlate1d(current[first:last], taps, axis=-1, output=out[first:last], mode="reflect")


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _blur_along(first, last, current, out, taps, reflected):
    """Rows first..last of ``out`` (R, X): the rows of ``current`` blurred along themselves,
    ``correlate1d(mode='reflect')``'s sums for symmetric taps in its order (as
    ``_blur_across``), each row first copied into a line extended by its reflections
    (``reflected``: position + half -> the column read). SciPy's ``correlate1d`` holds the
    GIL, so its rows ran one thread at a time (measured: 2D 1024², 6.3 ms on one thread, no
    faster on two; this, 4.0 ms on one)."""
    half = len(taps) // 2
    X = current.shape[1]
    line = _empty(len(reflected), np.float64)
    centre = taps[half]
    shift = np.uint64(half)
    for r in range(first, last):
        row = np.uint64(r)
        for i in range(np.uint64(X)):
            line[i + shift] = current[row, i]
        for i in range(half):  # the reflected ends
            line[i] = current[row, np.uint64(reflected[i])]
            line[half + X + i] = current[row, np.uint64(reflected[half + X + i])]
        for x in range(np.uint64(X)):
            out[row, x] = line[x + shift] * centre
        for j in range(half, 0, -1):
            lower = np.uint64(half - j)
            upper = np.uint64(half + j)
            tap = taps[half - j]
            for x in range(np.uint64(X)):
                out[row, x] += (line[x + lower] + line[x + upper]) * tap


_BLUR_COLUMNS = 512
"""Pixels per piece of the rows in the blur across rows: the piece being summed stays in L1."""


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _blur_across(first, last, current, out, taps, reflected, n):
    """Rows first..last of ``out`` (R, B): ``current`` (R / n groups of n rows) blurred across
    its rows, ``correlate1d(mode='reflect')``'s sums for symmetric taps in its order (the
    centre times its tap, then each pair of rows added and times its tap, from the outermost
    pair in; ``reflected``: row index + half -> the row read), by pieces of ``_BLUR_COLUMNS``
    (twice NumPy's speed over whole rows, SciPy's ``correlate1d`` copies every line across
    the rows). Unsigned indices: no negative-index test, the loops vectorise."""
    half = len(taps) // 2
    B = np.uint64(current.shape[1])
    piece = np.uint64(_BLUR_COLUMNS)
    for t in range(first, last):
        row = np.uint64(t)
        group, i = np.uint64(t - t % n), t % n
        for c in range(np.uint64(0), B, piece):
            e = _min(c + piece, B)
            centre = taps[half]
            for x in range(c, e):
                out[row, x] = current[row, x] * centre
            for j in range(half, 0, -1):
                lower = group + np.uint64(reflected[i - j + half])
                upper = group + np.uint64(reflected[i + j + half])
                tap = taps[half - j]
                for x in range(c, e):
                    out[row, x] += (current[lower, x] + current[upper, x]) * tap


def gaussian_blur(image: np.ndarray, sigma) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter(image, sigma, mode='reflect')`` for a float64
    C-contiguous image, bit for bit: ``correlate1d``'s sums for symmetric taps, along rows
    (``_blur_along``) and across them (``_blur_across``, 1024² one thread 8.6 -> 2.7 ms
    against NumPy on whole rows), compiled and on ranges of lines in parallel; taps that
    ``correlate1d`` does not sum as symmetric go to SciPy itself."""
    current = image
    for axis, s in enumerate(sigma):
        taps = gaussian_taps(s)
        if taps is None:
            continue
        out = np.empty_like(current)
        half = len(taps) // 2
        # correlate1d's own test: taps within an epsilon of symmetric are summed as symmetric (the left taps)
        symmetric = np.all(np.abs(taps[half + 1:] - taps[:half][::-1]) <= np.finfo(float).eps)
        n = current.shape[axis]
        index = np.arange(-half, n + half) % (2 * n)
        reflected = np.where(index < n, index, 2 * n - 1 - index)  # d c b a | a b c d | d c b a
        if axis == image.ndim - 1:
            rows = current.reshape(-1, current.shape[-1])
            if symmetric:
                for_ranges(_blur_along, len(rows), rows, out.reshape(rows.shape), taps, reflected, grain=16)
            else:
                for_ranges(_blur_part, len(rows), rows, out.reshape(rows.shape), taps, grain=16)
        elif symmetric:
            rows = (-1, math.prod(current.shape[axis + 1:]))
            for_ranges(_blur_across, math.prod(current.shape[:axis + 1]), current.reshape(rows), out.reshape(rows),
                       taps, reflected, n, grain=16)
        else:
            ndimage.correlate1d(current, taps, axis=axis, output=out, mode="reflect")
        current = out
    return current


# ---------------------------------------------------------------------------
# Gradient, weights, initial directions (ivote_gradient_max, ivote_voters)
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Voting passes over the run tables (ivote_vote_table, ivote_turn_table)
# ---------------------------------------------------------------------------


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


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _regroup(first_slab, last_slab, slab_starts, n_classes, source, classes, initial, grouped, widths):
    """Slabs first..last: the voters' records in flat order (``source``, as ``_voters`` wrote
    them) sorted by class into ``grouped`` (a counting sort, stable: frame order within a
    class), each with its class of this pass: ``classes[frame index]`` (the last turn wrote
    it there), or, where ``initial`` (the first pass), the one in its record, then written
    into ``classes``. ``widths[slab]``: its largest group, which sizes the scratch of
    ``_vote`` and ``_turn``.

    Every pass sorts the same records in flat order, whose frame indices rise, so the
    classes are read along ``classes`` (measured with one thread, 2D 1024², radius 12:
    regroups 29 -> 22 ms against sorting the last pass's groups, each group's records
    moved where the turn changed their class)."""
    shift = np.uint64(4 * source.itemsize)  # _PACKED
    mask = (np.uint64(1) << shift) - np.uint64(1)
    count = _empty(n_classes + 1, np.int64)
    for c in range(n_classes + 1):
        count[c] = 0
    for slab in range(first_slab, last_slab):
        a, b = slab_starts[slab], slab_starts[slab + 1]
        if initial:
            for v in range(a, b):
                c = np.uint64(source[v, _PACKED]) & mask
                classes[np.uint64(source[v, _FRAME])] = c
                count[np.int64(c) + 1] += 1
        else:
            for v in range(a, b):
                count[np.int64(classes[np.uint64(source[v, _FRAME])]) + 1] += 1
        widest = 0
        for c in range(n_classes):
            widest = _max(widest, count[c + 1])
            count[c + 1] += count[c]
        widths[slab] = widest
        for v in range(a, b):
            t = source[v, _FRAME]
            c = np.uint64(classes[np.uint64(t)])
            place = a + count[np.int64(c)]
            count[np.int64(c)] += 1
            grouped[place, _FRAME] = t
            grouped[place, _PACKED] = (np.uint64(source[v, _PACKED]) & ~mask) | c
        for c in range(n_classes + 1):
            count[c] = 0


@njit(cache=True, no_cfunc_wrapper=True, error_model="numpy")
def _group_end(grouped, v, b):
    """The end of the group of equal classes starting at v (before b)."""
    mask = (np.uint64(1) << np.uint64(4 * grouped.itemsize)) - np.uint64(1)  # _PACKED
    c = np.int64(np.uint64(grouped[v, _PACKED]) & mask)
    e = v + 1
    while e < b and np.int64(np.uint64(grouped[e, _PACKED]) & mask) == c:
        e += 1
    return e


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _vote(first_slab, last_slab, marks, colour_slabs, slab_starts, widths, grouped, bounds, step, end, direct):
    """Slabs first..last of one colour (run in parallel: they mark disjoint pixels).

    Each voter adds its weight to every pixel of its cone. The voters of a slab
    come grouped by class (``_regroup``): class direction c, whose cone is a
    fixed list of items (``_vote_items``), so the loop runs item by item over the
    group's voters (no branch on the voter, no test), two items a loop (one read of a
    voter's frame index and weight for four marks: 2D 1024² votes ~65 -> ~58 ms, one
    thread; four a loop, or helper functions, gained nothing more and cost 0.1-0.45 s of
    first compile). Items ``bounds[2c]`` .. ``bounds[2c + 1]`` are two marks each: of a
    difference array along rows (+w at ``step``, -w at ``end``, after the
    run), or, in a ``direct`` pass, two pixels the weight is added to
    (``_run_tables.pixel_pairs``); items ``bounds[2c + 1]`` .. ``bounds[2c + 2]``
    (a direct pass's odd pixel) add it to one pixel. The next two items' first
    marks are prefetched (as in ``_turn``; measured, one thread: votes 49.7 -> 47.2 ms).
    """
    shift = np.uint64(4 * grouped.itemsize)  # _PACKED
    mask = (np.uint64(1) << shift) - np.uint64(1)
    widest = 0  # the largest group (a slab can hold millions of voters)
    for slab_index in range(first_slab, last_slab):
        widest = _max(widest, widths[colour_slabs[slab_index]])
    frames, weights = _empty(widest, np.uint64), _empty(widest, np.uint32)  # the group's, in a row
    at_end = np.uint32(1) if direct else np.uint32(0xFFFFFFFF)  # w * at_end: +w, or -w (mod 2**32)
    for slab_index in range(first_slab, last_slab):
        slab = colour_slabs[slab_index]
        b = slab_starts[slab + 1]
        v = slab_starts[slab]
        while v < b:
            c = np.int64(np.uint64(grouped[v, _PACKED]) & mask)
            m = 0  # the group's voters, read once (no _group_end first)
            while v + m < b and np.int64(np.uint64(grouped[v + m, _PACKED]) & mask) == c:
                frames[m] = grouped[v + m, _FRAME]
                weights[m] = np.uint32(np.uint64(grouped[v + m, _PACKED]) >> shift)
                m += 1
            item, last = bounds[2 * c], bounds[2 * c + 1]
            while item + 2 <= last:  # two items a loop: one read of a voter's frame index and weight for four marks
                s0, f0, s1, f1 = step[item], end[item], step[item + 1], end[item + 1]
                ahead0, ahead1 = step[_min(item + 2, last - 1)], step[_min(item + 3, last - 1)]  # prefetched
                for j in range(m):
                    w = weights[j]
                    t = frames[j]
                    _prefetch(marks, t + ahead0)
                    _prefetch(marks, t + ahead1)
                    u = w * at_end
                    marks[t + s0] += w
                    marks[t + f0] += u
                    marks[t + s1] += w
                    marks[t + f1] += u
                item += 2
            if item < last:
                s = step[item]
                f = end[item]
                for j in range(m):
                    w = weights[j]
                    t = frames[j]
                    marks[t + s] += w
                    marks[t + f] += w * at_end
            for item in range(bounds[2 * c + 1], bounds[2 * c + 2]):
                s = step[item]
                for j in range(m):
                    marks[frames[j] + s] += weights[j]
            v += m


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _turn(first_slab, last_slab, flat, slab_starts, widths, grouped, starts, step, first_read, last_read,
          item_k, classes):
    """Slabs first..last (any order: nothing is shared): each voter turns towards
    the largest vote of its cone in the last pass (tables ``starts`` ..
    ``item_k``) in the field (the first level of the flat sparse table
    ``flat``), the first offset in lexicographic order on ties: its class
    becomes offset direction k (written into ``classes`` at its frame index: the
    next pass's ``_regroup`` reads it there). With no vote in its cone
    it keeps its direction, so its class.

    A run's largest vote is two reads of the sparse table (``_scan_rows``).
    Over a group of one class, item by item, each voter keeps the largest
    (vote, items left to the class's end) as one 64-bit key (no branch on the
    voter; the second part makes the first item win ties); the first offset of
    the best run holding that vote is then found in the field. The reads are
    scattered (a group's voters lie anywhere in the slab), and the next item's
    come one group later, past what the CPU runs ahead: each is prefetched one
    item ahead (``_prefetch``; measured, 2D 1024², one thread: 96 -> 75 ms).
    """
    shift = np.uint64(4 * grouped.itemsize)  # _PACKED
    mask = (np.uint64(1) << shift) - np.uint64(1)
    widest = 0  # the largest group (keys)
    for slab in range(first_slab, last_slab):
        widest = _max(widest, widths[slab])
    keys = _empty(widest, np.uint64)
    frames = _empty(widest, np.uint64)  # the group's frame indices in a row (measured: 2D turns 7% sooner)
    high = np.uint64(32)
    low = np.uint64(0xFFFFFFFF)
    for slab in range(first_slab, last_slab):
        b = slab_starts[slab + 1]
        v = slab_starts[slab]
        while v < b:
            c = np.int64(np.uint64(grouped[v, _PACKED]) & mask)
            e = _group_end(grouped, v, b)
            last_item = starts[c + 1]
            m = e - v
            for j in range(m):
                keys[j] = 0
                frames[j] = grouped[v + j, _FRAME]
            for item in range(starts[c], last_item):
                r0 = first_read[item]
                r1 = last_read[item]
                ahead = first_read[_min(item + 1, last_item - 1)]  # the next item's first read, prefetched
                rank = np.uint64(last_item - item)  # larger for earlier items: the first wins a tie
                for j in range(m):
                    t = frames[j]
                    _prefetch(flat, t + ahead)
                    key = (np.uint64(_max(flat[t + r0], flat[t + r1])) << high) | rank
                    keys[j] = _max(keys[j], key)
            for i in range(v, e):
                key = keys[i - v]
                best = np.uint32(key >> high)
                if best > 0:
                    item = last_item - np.int64(key & low)
                    # the first of the run's equal maxima: a run is at most 16 pixels (_TOP_LEVELS),
                    # and the 16 read from its start lie in ``flat`` (the field is its first level)
                    j = _first_equal16(flat, frames[i - v] + step[item], best)
                    classes[frames[i - v]] = item_k[item] + j
                # else: no vote in its cone, its class stays c
            v = e


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _scan_rows(first, last, marks, direct, tops, PZ, PY, PX, wz, wy, wx):
    """The vote field ``tops[0]`` from the marks (a running sum along each row:
    runs never leave their row, see ``_Frame``; after a ``direct`` pass, the
    marks themselves), 0 outside the image (votes that left it are dropped);
    the marks zeroed for the next pass. ``tops[l]``,
    l >= 1: the largest vote of the 2**l pixels from each pixel on (a sparse
    table: a run's largest vote is two reads).

    Indices unsigned: no test for negative indices, so the compiler vectorises
    the copies and the maxima (measured: the scan 2.5x sooner)."""
    votes = tops[0]
    n = np.uint64(PX)
    for r in range(first, last):
        z, y = r // PY, r % PY
        base = np.uint64(r * PX)
        end = base + n
        if z < wz or z >= PZ - wz or y < wy or y >= PY - wy:
            for level in range(tops.shape[0]):
                for i in range(base, end):
                    tops[level, i] = 0
            for i in range(base, end):
                marks[i] = 0
            continue
        if direct:
            for i in range(base, end):
                votes[i] = marks[i]
                marks[i] = 0
        else:
            total = np.uint32(0)
            for i in range(base, end):
                total += marks[i]
                votes[i] = total
                marks[i] = 0
        for x in range(np.uint64(wx)):
            votes[base + x] = 0
            votes[end - np.uint64(1) - x] = 0
        half = np.uint64(1)
        for level in range(1, tops.shape[0]):
            split = end - _min(half, n)  # unsigned: never below the row's start
            for i in range(base, split):
                tops[level, i] = _max(tops[level - 1, i], tops[level - 1, i + half])
            for i in range(split, end):
                tops[level, i] = tops[level - 1, i]
            half *= np.uint64(2)


def _unsigned(index):
    """int64 steps as uint64 (two's complement: adding one to a uint64 frame index
    wraps to the same index as the signed sum). Unsigned indices need no test
    for Python's negative indexing in the compiled loops (measured: 18% sooner)."""
    return np.ascontiguousarray(index, dtype=np.int64).view(np.uint64)


@functools.lru_cache(maxsize=8)
def _entries(radius: float, spacing: tuple, ndim: int, padded_shape: tuple):
    """Per pass: the run table in frame steps, ``(starts, step, vote, first read,
    last read, k)``: the items of class k (offset direction k, the cone
    ``_run_tables.discrete_runs`` lists) are ``starts[k]`` .. ``starts[k + 1]``,
    runs of at most ``2 ** (_TOP_LEVELS + 1)`` pixels from offset ``k`` on. Steps
    and the two reads of a run's largest vote in the flat sparse table (level *
    frame size + step) are unsigned (``_unsigned``). ``vote``: ``_vote``'s items
    (``_vote_items``)."""
    plan = make_plan(radius, spacing, ndim)
    size = math.prod(padded_shape)
    strides = np.cumprod((padded_shape[1:] + (1,))[::-1])[::-1]
    steps_all = plan.offsets @ np.asarray(strides, dtype=np.int64)
    passes = []
    for index in range(plan.n_passes):
        runs = discrete_runs(radius, spacing, ndim, index)
        item_starts, item_k, item_len = split_runs(*runs, 2 ** (_TOP_LEVELS[ndim] + 1))
        item_level = np.zeros(len(item_len), dtype=np.int64)
        item_level[item_len > 1] = np.ceil(np.log2(item_len[item_len > 1])).astype(np.int64) - 1  # 2 reads cover it
        step = steps_all[item_k]
        reads = item_level * size + step  # the run's largest vote: max(tops[first], tops[last]) of the flat table
        last = reads + np.maximum(item_len - (1 << item_level), 0)
        vote = _vote_items(*runs, steps_all)  # runs uncut: two marks whatever their length
        passes.append((item_starts, _unsigned(step), vote, _unsigned(reads), _unsigned(last), item_k))
    return tuple(passes)


_DIRECT_BELOW = 1.5
"""Pixels per run under which a pass adds weights pixel by pixel (two per item, one
read-modify-write each) rather than as two marks a run: 2D radius 12's last two
passes (1.3 and 1.2 pixels a run; 2.0 in the pass before, where both loops are as long)."""


def _vote_items(starts, first, length, steps_all):
    """``_vote``'s items of one pass from its runs (``_run_tables.discrete_runs``),
    ``(bounds, step, end, direct)``: the runs as marks of a difference array
    (``bounds``: ``starts`` with each class's empty second range), or, with
    fewer than ``_DIRECT_BELOW`` pixels a run, the pixels in pairs
    (``_run_tables.pixel_pairs``, ``direct``). Frame steps unsigned (``_unsigned``)."""
    direct = bool(length.sum() < _DIRECT_BELOW * len(length))
    if direct:
        bounds, a, b = pixel_pairs(starts, first, length)
        return bounds, _unsigned(steps_all[a]), _unsigned(steps_all[b]), direct
    step = steps_all[first]
    return np.repeat(starts, 2)[1:], _unsigned(step), _unsigned(step + length), direct


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


def _vote_field(smoothed: np.ndarray, plan: VotingPlan, sign: float, iter_callback=None, largest=None, boxes=None):
    """The padded frame and its vote field (uint32, padding zeroed) after the last pass.
    ``boxes``: per pass, the box whose voters it needs (``_reach.pass_boxes``, a block of
    an image): the others are dropped before the pass and before the turn preceding it."""
    frame = _Frame(smoothed.shape, plan)
    if len(plan.offsets) == 0:  # a radius under a pixel: no votes (the reference's empty loop)
        if iter_callback is not None:
            for index in range(plan.n_passes):
                iter_callback(index, plan.n_passes)
        return frame, np.zeros(frame.size, dtype=np.uint32)
    passes = _entries(plan.radius, plan.spacing, plan.ndim, frame.padded_shape)
    in_order, slab_starts, colours = prepare_voters(smoothed, plan, sign, largest, frame)  # records in flat order
    grouped = np.empty_like(in_order)  # each pass sorts them by class (frame order within a class)
    # each voter's class at its frame index (uint32 records hold at most 2**16 classes); written by the first
    # regroup, then by the turns
    classes = np.empty(frame.size, dtype=np.uint16 if in_order.dtype == np.uint32 else np.uint32)
    marks = np.zeros(frame.size, dtype=np.uint32)
    tops = np.zeros((_TOP_LEVELS[plan.ndim] + 1, frame.size), dtype=np.uint32)
    n_slabs = len(slab_starts) - 1
    widths = np.zeros(n_slabs, dtype=np.int64)  # per slab: its largest group (_regroup)
    (PZ, PY, PX), (wz, wy, wx) = frame.padded3()
    passes_of = None if boxes is None or not DROP_VOTERS else _passes_of_voters(frame, boxes)
    for index, (starts, step, vote, first_read, last_read, item_k) in enumerate(passes):
        if passes_of is not None:
            in_order, grouped, slab_starts = _drop_voters(passes_of, index, in_order, grouped, slab_starts)
        if index > 0:  # the turn in the last pass's field, with the last pass's cones
            last_starts, last_step, _, last_first, last_last, last_k = passes[index - 1]
            for_ranges(_turn, n_slabs, tops.reshape(-1), slab_starts, widths, grouped, last_starts, last_step,
                       last_first, last_last, last_k, classes)
        for_ranges(_regroup, n_slabs, slab_starts, len(starts) - 1, in_order, classes, index == 0, grouped,
                   widths)
        for slabs in colours:
            for_ranges(_vote, len(slabs), marks, slabs, slab_starts, widths, grouped, *vote)
        final = index == plan.n_passes - 1
        for_ranges(_scan_rows, PZ * PY, marks, vote[3], tops[:1] if final else tops, PZ, PY, PX, wz, wy, wx, grain=8)
        if iter_callback is not None:
            iter_callback(index, plan.n_passes)
    votes = tops[0]
    return frame, votes


#: whether a block's passes drop the voters they do not need (``_reach.pass_boxes``; exact either
#: way). Off: measured on 16 cores (bench_scale --detect --size 256 --chunks 128 --backend numba,
#: 2026-12-01) the serial compaction cost more than the passes saved (4.93 s against 4.41 s); on
#: 2 cores a 100³ block's passes took 0.64-0.97 s with it against 1.07-1.21 s without.
DROP_VOTERS = False


def _passes_of_voters(frame: _Frame, boxes) -> np.ndarray:
    """Per frame pixel (uint8): how many passes, from the first, need a voter there (nested boxes)."""
    count = np.zeros(frame.padded_shape, dtype=np.uint8)
    for box in boxes:
        count[tuple(slice(w + lo, w + hi) for (lo, hi), w in zip(box, frame.window))] += 1
    return count.reshape(-1)


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _compact_records(source, slab_starts, passes_of, index, out, new_starts):
    """The records of ``source`` whose frame pixel more than ``index`` passes need,
    in order, into ``out``; each slab's new range into ``new_starts``; their count."""
    j = 0
    for s in range(len(slab_starts) - 1):
        new_starts[s] = j
        for v in range(slab_starts[s], slab_starts[s + 1]):
            if passes_of[np.uint64(source[v, _FRAME])] > index:
                out[j, 0] = source[v, 0]
                out[j, 1] = source[v, 1]
                j += 1
    new_starts[len(slab_starts) - 1] = j
    return j


def _drop_voters(passes_of, index: int, in_order, grouped, slab_starts):
    """The voters (records in flat order and grouped by class, slab ranges) that pass
    ``index`` needs: each slab's records keep their order, so its groups stay whole
    (a serial copy: a few ms per million voters, against the passes' tens of ms)."""
    new_starts = np.empty_like(slab_starts)
    kept = np.empty_like(in_order)
    n = _compact_records(in_order, slab_starts, passes_of, index, kept, new_starts)
    if n == len(in_order):
        return in_order, grouped, slab_starts
    if index > 0:  # grouped holds the last pass's voters, which turn first: the same records per slab
        out = np.empty_like(grouped)
        _compact_records(grouped, slab_starts, passes_of, index, out, np.empty_like(slab_starts))
        grouped = out[:n]
    else:
        grouped = np.empty((n, 2), in_order.dtype)
    return kept[:n], grouped, new_starts


def run_passes(smoothed, plan: VotingPlan, sign: float, iter_callback=None) -> np.ndarray:
    """The vote field V (uint32, image shape) after the last pass; as ``_reference.run_passes``."""
    if isinstance(smoothed, list):
        smoothed = smoothed.pop()
    smoothed = np.ascontiguousarray(smoothed, dtype=np.float64)
    with _LOCK:
        frame, votes = _vote_field(smoothed, plan, sign, iter_callback)
    return np.ascontiguousarray(votes.reshape(frame.padded_shape)[frame.inside])


# ---------------------------------------------------------------------------
# Cells: local maxima, their order, close pairs, contrasts
# ---------------------------------------------------------------------------


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _contrast_numerators(first, last, out, s, points, wz, wy, wx, sign, ring, part, whole, depth):
    """Cells first..last (``points``: (N, 3) z, y, x; Z = 1 in 2D): sign*s at the
    cell minus the minimum of sign*s over the box of half-width min(window,
    distance to either border) around it, s rounded to float32; 0 unless at least
    ``BUMP_SHARE`` (part / whole) of the ``ring`` offsets ((R, 3),
    ``_contrast.bump_ring``) that fit in that box land below centre - (centre -
    m) * ``BUMP_DEPTH``, m the minimum over the window clipped to the image
    (``_contrast.contrast_numerators``, ``ivote_contrast``)."""
    Z, Y, X = s.shape
    for j in range(first, last):
        z, y, x = points[j, 0], points[j, 1], points[j, 2]
        hz = _min(wz, _min(z, Z - 1 - z))
        hy = _min(wy, _min(y, Y - 1 - y))
        hx = _min(wx, _min(x, X - 1 - x))
        deepest = np.float32(np.inf)  # the window clipped to the image
        lowest = np.float32(np.inf)  # the window clipped symmetrically
        for qz in range(_max(z - wz, 0), _min(z + wz, Z - 1) + 1):
            for qy in range(_max(y - wy, 0), _min(y + wy, Y - 1) + 1):
                inner = abs(qz - z) <= hz and abs(qy - y) <= hy
                for qx in range(_max(x - wx, 0), _min(x + wx, X - 1) + 1):
                    value = sign * np.float32(s[qz, qy, qx])
                    deepest = _min(deepest, value)
                    if inner and abs(qx - x) <= hx:
                        lowest = _min(lowest, value)
        centre = sign * np.float32(s[z, y, x])
        level = centre - (centre - deepest) * depth
        fits = 0
        lower = 0
        for e in range(ring.shape[0]):
            dz, dy, dx = ring[e, 0], ring[e, 1], ring[e, 2]
            if abs(dz) > hz or abs(dy) > hy or abs(dx) > hx:
                continue
            fits += 1
            if sign * np.float32(s[z + dz, y + dy, x + dx]) < level:
                lower += 1
        bump = fits > 0 and whole * lower >= part * fits
        out[j] = np.float64(centre) - np.float64(lowest) if bump else 0.0


def contrast_numerators(smoothed, coords, window, sign, ring):
    """``_contrast.contrast_numerators`` of the cells ``coords`` ((N, ndim)) in ``smoothed`` (float64)."""
    ndim = smoothed.ndim
    pad = 3 - ndim
    points = np.zeros((len(coords), 3), dtype=np.int64)
    points[:, pad:] = coords
    ring3 = np.zeros((len(ring), 3), dtype=np.int64)
    ring3[:, pad:] = np.asarray(ring, dtype=np.int64).reshape(-1, ndim)
    wz, wy, wx = (0,) * pad + tuple(int(w) for w in window)
    out = np.zeros(len(coords))
    part, whole = BUMP_SHARE
    for_ranges(_contrast_numerators, len(points), out, smoothed.reshape(_shape3(smoothed.shape)), points, wz, wy, wx,
               np.float32(sign), ring3, part, whole, np.float32(BUMP_DEPTH), grain=64)
    return out


def _running_max(values, h, axis, out):
    """``out`` = the largest of ``values`` within ``h`` along ``axis``, at positions h .. n - h - 1
    (0 nearer the ends): the largest over spans doubled in length, then two reads (3x SciPy's
    ``maximum_filter1d``, which works on float64 copies of the lines). ``out`` may be
    ``values``: they are read before it is written."""
    n = values.shape[axis]

    def along(array, first, last):
        index = [slice(None)] * array.ndim
        index[axis] = slice(first, last)
        return array[tuple(index)]

    spans, scratch = values, np.empty_like(values)
    span = 1
    while 2 * span <= 2 * h + 1:  # spans: the largest of span pixels from each one on
        np.maximum(along(spans, 0, n - span), along(spans, span, n), out=along(scratch, 0, n - span))
        along(scratch, n - span, n)[...] = along(spans, n - span, n)
        spans, scratch = scratch, (np.empty_like(values) if spans is values else spans)
        span *= 2
    along(out, 0, h)[...] = 0
    along(out, n - h, n)[...] = 0
    np.maximum(along(spans, 0, n - 2 * h), along(spans, 2 * h + 1 - span, n + 1 - span), out=along(out, h, n - h))


def _peak_part(first, last, field, half_width, out):
    """``out[first:last]``: the largest vote within ``half_width`` along every axis but the
    first of slices first..last (where a box of the field's padding, wider, fits)."""
    part = field[first:last]
    for axis in range(field.ndim - 1, 0, -1):  # in place after the first axis: the values are read first
        _running_max(part, half_width[axis], axis, out[first:last])
        part = out[first:last]


def _peak_check(first, last, field, across, half_width, found):
    """Local maxima of slices first..last: pixels positive and equal to ``across`` (their
    box's largest along every axis but the first), then along the first; appended to
    ``found`` as (first, flat indices)."""
    stride = math.prod(field.shape[1:])  # the padding keeps every step inside the field
    flat, across = field.reshape(-1), across.reshape(-1)
    part = slice(first * stride, last * stride)
    candidates = first * stride + np.flatnonzero((flat[part] > 0) & (flat[part] >= across[part]))
    values = flat[candidates]
    keep = np.ones(len(candidates), dtype=bool)
    for step in range(-half_width[0], half_width[0] + 1):
        if step:
            keep &= across[candidates + step * stride] <= values
    found.append((first, candidates[keep]))


def _local_maxima(field, half_width):
    """Flat indices (ascending) of the local maxima of ``field`` (0 in its padding, wider than
    ``half_width``): positive and equal to the largest vote of the box of ``half_width`` around
    them, as ``maximum_filter(field, mode='constant', cval=0) == field``. Separably, in
    parallel: the box's largest along every axis but the first, then along the first only at
    the pixels equal to theirs (few: 4% of a 1024² field, 2% of its positive pixels)."""
    across = np.empty_like(field)
    for_ranges(_peak_part, field.shape[0], field, half_width, across, grain=16)
    found = []
    for_ranges(_peak_check, field.shape[0], field, across, half_width, found, grain=16)
    return np.concatenate([indices for _, indices in sorted(found, key=lambda part: part[0])] + [np.zeros(0, np.intp)])


def _cells(frame: _Frame, votes, plan: VotingPlan, smoothed, sign):
    """Maxima sorted best first (image flat indices), their votes, close pairs and contrast numerators."""
    # the padding holds 0 (maximum_filter's cval=0) and is wider than the half-widths (below the window)
    maxima = _local_maxima(votes.reshape(frame.padded_shape), plan.maxima_half_width)
    values = votes[maxima].astype(np.int64)
    order = np.lexsort((maxima, -values))  # best first; ties: lower index (frame order is image order)
    maxima, values = maxima[order], values[order]
    coords = np.stack(np.unravel_index(maxima, frame.padded_shape), axis=1) - np.asarray(frame.window)
    pairs = close_pairs(coords, plan)
    flat = np.ravel_multi_index(tuple(coords.T), frame.shape).astype(np.int64) if len(coords) else np.zeros(0, np.int64)
    numerators = contrast_numerators(smoothed, coords, plan.window, float(sign), bump_ring(plan))
    return flat, values, pairs, numerators


def _normalise_part(first, last, signal, out, low, span):
    """Slices first..last of ``(signal - low) / span`` in float64 (the signal cast first)."""
    part = out[first:last]
    part[...] = signal[first:last]
    part -= low
    part /= span


def _compile_first(plan: VotingPlan, sign: float, sigma) -> None:
    """At the first detection of its kind (dimensions, blur) in this process, compile the kernels
    it needs ahead, several processes at once (``ivote._compile``: a dry run on a tiny image
    lists them; their argument types do not depend on the image's size, except the uint64
    records of frames of 2**32 pixels or of blocks whose gradient exceeds the whole image's,
    ``_record_layout``, which the call then compiles itself). Later calls, and calls in
    processes that find the kernels in the cache on disk, compile nothing."""
    tiny = np.arange(8.0**plan.ndim).reshape((8,) * plan.ndim)
    compile_ahead_once(("detect", plan.ndim, sigma is None), lambda: detect(tiny, plan, sign, sigma))


def detect(signal, plan: VotingPlan, sign: float, sigma=None, iter_callback=None, *, also_finite=None,
           reuse: bool = False, given=None) -> RawDetection:
    """Normalise, blur (``sigma`` per axis, pixels; None: no blur), vote, find the
    local maxima, their close pairs and contrasts: ``_cuda.detect`` on the CPU.

    ``also_finite``: another array (all channels of an RGB image) whose NaN/Inf
    are reported too. ``reuse``: the caller does not keep the vote field (then
    None). ``given``: the whole image's ``_result.GlobalStatistics`` when
    ``signal`` is a block of it. The caller checks ``extremes`` (NaN/Inf,
    constant image) first.
    """
    signal = np.asarray(signal)
    extremes = [signal.min(), signal.max()] if given is None else [given.low, given.high]
    if also_finite is not None:
        extremes += [np.min(also_finite), np.max(also_finite)]
    empty = np.zeros(0, dtype=np.int64)
    if not all(math.isfinite(float(v)) for v in extremes):
        return RawDetection(None, empty, empty, np.zeros((0, 2), np.int64), (float("nan"),))
    low, high = float(extremes[0]), float(extremes[1])
    if not high > low:
        votes = None if reuse else np.zeros(signal.shape, dtype=np.uint32)
        return RawDetection(votes, empty, empty, np.zeros((0, 2), np.int64), (low, high), np.zeros(0), np.zeros(0))
    _compile_first(plan, sign, sigma)
    smoothed = np.empty(signal.shape)  # as _voting._detect_on_cpu: the same roundings
    for_ranges(_normalise_part, len(signal), signal, smoothed, low, high - low, grain=64)
    residuals = noise_residuals(smoothed, noise_positions(tuple(signal.shape)))
    with _LOCK:
        if sigma is not None:
            smoothed = gaussian_blur(smoothed, sigma)
        frame, votes = _vote_field(smoothed, plan, sign, iter_callback, None if given is None else given.largest,
                                   pass_boxes(plan, signal.shape, getattr(given, "owned", None)))
        field = None if reuse else np.ascontiguousarray(votes.reshape(frame.padded_shape)[frame.inside])
        flat, values, pairs, numerators = _cells(frame, votes, plan, smoothed, sign)
    return RawDetection(field, flat, values, pairs, (low, high), numerators, residuals)
