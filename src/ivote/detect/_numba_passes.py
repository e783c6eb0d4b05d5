"""The voting passes of the CPU's detection over the run tables (``ivote_vote_table``,
``ivote_turn_table``): each pass's regrouping of the voters by class, their votes, the
running sums and sparse table of row maxima, and the turn. Part of the Numba
detection (``_numba.py``); the voters come from ``_numba_voters.py``.

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
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from .._numba_intrinsics import _empty, _first_equal16, _max, _min, _prefetch
from ._numba_voters import _FRAME, _PACKED, _Frame
from ._plan import make_plan
from ._run_tables import discrete_runs, pixel_pairs, split_runs

_TOP_LEVELS = {2: 3, 3: 2}
"""Sparse-table levels above the vote field: a run of up to 2**(levels + 1) pixels is two
reads (2D: 16, longer runs are cut; 3D, shorter runs and larger fields: 8)."""


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
