"""The cells of a GPU detection: the local maxima, their contrasts and close pairs
(``_Cells``), the one buffer of results their lists live in (sized from the last
detection of a shape), its one copy to the host, and the cells' order
(``_order_cells``). Part of the GPU detection (``_cuda.py``)."""

from __future__ import annotations

import math
import sys

import numpy as np

from .._backend import get_array_module, to_host
from ._contrast import BUMP_DEPTH, BUMP_SHARE, noise_positions
from ._cuda_blur import _from_key
from ._cuda_kernels import (_BLOCK, _CTYPES, _HIGH_KEY, _LOW_KEY, _N_MAXIMA, _N_PAIRS, _N_SLOTS, _NONFINITE, _RGB,
                            _dims, _grid, _module)
from ._cuda_tables import _ball, _ring
from ._plan import VotingPlan
from ._result import RawDetection

__all__ = ["sorted_close_pairs"]


class _Cells:
    """The maxima and close-pair kernels of one vote field, their buffers and capacities."""

    def __init__(self, votes, plan: VotingPlan, stats, kernels, xp, is_maximum=None, smoothed=None, sign=1.0,
                 offsets=None, ring=None):
        self.votes, self.plan, self.stats, self.kernels, self.xp = votes, plan, stats, kernels, xp
        self.offsets = offsets  # the disc/ball (``_ball``), when already looked up
        self.ring = ring  # the bump test's ring (``_ring``), when already looked up
        self.dims = tuple(np.int32(n) for n in _dims(votes.shape))
        self.is_maximum = is_maximum
        self.smoothed, self.sign = smoothed, sign  # the blurred image (float64 or float32): contrasts
        self.numerators = None

    def find_maxima(self, capacity: int, maxima=None):
        """Queue ivote_local_maxima into ``maxima`` ((capacity, 2) uint32; default: new)."""
        xp = self.xp
        self.capacity = capacity
        if self.is_maximum is None:
            self.is_maximum = xp.zeros(self.votes.size, dtype=np.uint8)
        self.maxima = xp.empty((capacity, 2), dtype=np.uint32) if maxima is None else maxima
        half = (0,) * (3 - self.plan.ndim) + self.plan.maxima_half_width
        self.kernels["ivote_local_maxima"](
            _grid(self.votes.size), (_BLOCK,),
            (self.votes, *self.dims, *map(np.int32, half), self.is_maximum, self.stats[_N_MAXIMA:], self.maxima,
             np.int32(capacity)),
        )

    def find_contrast(self, numerators=None):
        """Queue ivote_contrast into ``numerators`` ((capacity,) float64; default: new)."""
        xp = self.xp
        self.numerators = xp.empty(self.capacity, dtype=np.float64) if numerators is None else numerators
        window = (0,) * (3 - self.plan.ndim) + tuple(self.plan.window)
        kernel = self.kernels[f"ivote_contrast<{_CTYPES[self.smoothed.dtype]}>"]
        ring = _ring(self.plan, xp) if self.ring is None else self.ring
        kernel(
            (max(1, math.ceil(self.capacity * 32 / _BLOCK)),), (_BLOCK,),
            (self.smoothed, *self.dims, *map(np.int32, window), np.float32(self.sign), ring, np.int32(ring.size),
             *map(np.int32, BUMP_SHARE), np.float32(BUMP_DEPTH), self.maxima, self.stats[_N_MAXIMA:], np.int32(self.capacity),
             self.numerators),
        )

    def find_pairs(self, pair_capacity: int, pairs=None):
        """Queue ivote_close_pairs into ``pairs`` ((pair_capacity, 4) uint32; default: new)."""
        self.pair_capacity = pair_capacity
        self.pairs = self.xp.empty((pair_capacity, 4), dtype=np.uint32) if pairs is None else pairs
        offsets = _ball(self.plan, self.xp) if self.offsets is None else self.offsets
        self.kernels["ivote_close_pairs"](
            (max(1, math.ceil(self.capacity * 32 / _BLOCK)),), (_BLOCK,),  # one warp per maximum
            (self.maxima, self.stats[_N_MAXIMA:], np.int32(self.capacity), self.is_maximum, self.votes, *self.dims,
             offsets, np.int32(offsets.size), self.stats[_N_PAIRS:], self.pairs, np.int32(pair_capacity)),
        )

    def fits(self, header) -> bool:
        return int(header[_N_MAXIMA]) <= self.capacity and int(header[_N_PAIRS]) <= self.pair_capacity

    def fetch(self, header):
        """The maxima ((n, 2) uint32 rows: flat, vote), the pairs ((m, 4) uint32
        rows: flat, vote of the better; flat, vote of the worse) and the maxima's
        contrast numerators (None without ``smoothed``), on the host; ``header``
        is the statistics on the host (the kernels are re-run with more room if
        a list overflowed)."""
        n_maxima, n_pairs = int(header[_N_MAXIMA]), int(header[_N_PAIRS])
        if n_maxima > self.capacity:
            self.stats[_N_MAXIMA:_N_PAIRS + 1] = 0
            self.find_maxima(n_maxima)
            if self.smoothed is not None:
                self.find_contrast()
            self.find_pairs(max(self.pair_capacity, 4 * n_maxima))
            n_pairs = int(to_host(self.stats[_N_PAIRS]))
        if n_pairs > self.pair_capacity:
            self.stats[_N_PAIRS] = 0
            self.find_pairs(n_pairs)
        maxima = to_host(self.maxima[:n_maxima])
        pairs = to_host(self.pairs[:n_pairs]) if n_pairs else np.zeros((0, 4), np.uint32)
        numerators = None if self.smoothed is None else to_host(self.numerators[:n_maxima])
        return maxima, pairs, numerators


_HIGH32 = np.uint64(0xFFFFFFFF_00000000)
_LOW32 = np.uint64(0xFFFFFFFF)


def _order_keys(rows) -> np.ndarray:
    """One uint64 per (flat, vote) row of a uint32 list (as the kernels write
    them), ascending best first: (0xFFFFFFFF - vote) << 32 | flat. On a
    little-endian host a row read as uint64 is vote << 32 | flat, so this is one
    XOR, without conversions."""
    rows = np.ascontiguousarray(rows, dtype=np.uint32)
    if sys.byteorder == "little":
        return rows.view(np.uint64).reshape(rows.shape[:-1] + (rows.shape[-1] // 2,))[..., 0] ^ _HIGH32
    wide = rows.astype(np.uint64)
    return ((_LOW32 - wide[..., 1]) << np.uint64(32)) | wide[..., 0]


def _order_cells(maxima, pairs, numerators=None):
    """The maxima ((n, 2) uint32 rows: flat, vote, in any order) sorted best first
    (ties: lower flat index first) as int64 flat indices and votes; the pairs
    ((m, 4) uint32 rows: flat and vote of the better, flat and vote of the
    worse, in any order) as (better, worse) places in that order, sorted, as
    ``_reference.sorted_close_pairs`` returns them; and the maxima's contrast
    numerators in that order (None if None). One sort of integer keys."""
    keys = _order_keys(maxima)
    if numerators is not None:
        order = np.argsort(keys)
        keys, numerators = keys[order], numerators[order]
    else:
        keys = np.sort(keys)
    flat = (keys & _LOW32).view(np.int64)
    values = (_LOW32 - (keys >> np.uint64(32))).view(np.int64)
    if len(pairs) == 0:
        return flat, values, np.zeros((0, 2), dtype=np.int64), numerators
    pairs = np.ascontiguousarray(pairs, dtype=np.uint32).reshape(-1, 2, 2)  # (better, worse) x (flat, vote)
    places = np.searchsorted(keys, _order_keys(pairs))
    order = np.argsort(places[:, 0] * len(keys) + places[:, 1])
    return flat, values, places[order], numerators


def _capacity(size: int) -> int:
    return max(4096, size // 64)


_ONE_TRANSFER_BYTES = 1 << 20
_MIN_LIST = 1024
_last_counts: dict = {}
"""(shape, radius, spacing) -> (maxima, close pairs) of the last detection: the
next one (a slider, a time series) sizes its lists from them, small enough
that the statistics and both lists come back in one copy."""


def _results_buffer(shape, plan: VotingPlan, xp):
    """One uint64 buffer: the statistics (zeroed), the maxima list, the pairs
    list (sized from the last detection of this shape and plan when there was
    one), the maxima's contrast numerators and the noise residuals (float64);
    returns it and those five views."""
    size = math.prod(shape)
    last = _last_counts.get((tuple(shape), plan.radius, plan.spacing))
    capacity, pair_capacity = (
        (max(_MIN_LIST, 2 * last[0]), max(_MIN_LIST, 2 * last[1])) if last else (_capacity(size), 4 * _capacity(size))
    )
    capacity += capacity % 2  # the pairs are read and written as uint4: 16-byte aligned
    n_samples = len(noise_positions(tuple(shape)))
    results = xp.empty(_N_SLOTS + 2 * capacity + 2 * pair_capacity + n_samples, dtype=np.uint64)
    results[:_N_SLOTS].fill(0)
    maxima = results[_N_SLOTS:_N_SLOTS + capacity].view(np.uint32).reshape(capacity, 2)
    start = _N_SLOTS + capacity
    pairs = results[start:start + 2 * pair_capacity].view(np.uint32).reshape(pair_capacity, 4)
    start += 2 * pair_capacity
    numerators = results[start:start + capacity].view(np.float64)
    residuals = results[start + capacity:].view(np.float64)
    return results, maxima, pairs, numerators, residuals


def _pinned_bytes(nbytes: int) -> int:
    """Pinned allocations in powers of two (at least 4 KiB): CuPy's pinned pool keeps
    freed blocks per exact size, so sizes that follow the counts of every
    detection would pile up in it."""
    return max(4096, 1 << (int(nbytes) - 1).bit_length())


def _to_pinned_host(array, xp) -> np.ndarray:
    """``array`` copied to page-locked host memory (one copy, synchronised)."""
    memory = xp.cuda.alloc_pinned_memory(_pinned_bytes(array.nbytes))
    host = np.frombuffer(memory, dtype=array.dtype, count=array.size).reshape(array.shape)
    array.get(out=host)
    return host


def sorted_close_pairs(votes, flat, plan: VotingPlan):
    """As ``_reference.sorted_close_pairs``, on the GPU (``ivote_close_pairs``)
    for any list of maxima (flat indices)."""
    xp = get_array_module(votes)
    n = int(flat.size)
    kernels = _module(plan.ndim, "int", xp)
    is_maximum = xp.zeros(votes.size, dtype=np.uint8)
    is_maximum[flat] = 1
    stats = xp.zeros(_N_SLOTS, dtype=np.uint64)
    stats[_N_MAXIMA] = n
    cells = _Cells(votes, plan, stats, kernels, xp, is_maximum=is_maximum)
    cells.capacity = max(n, 1)
    cells.maxima = xp.ascontiguousarray(xp.stack([flat, votes.ravel()[flat]], axis=1).astype(np.uint32))
    cells.find_pairs(max(64, 4 * n))
    return _order_cells(*cells.fetch(to_host(stats)))[:3]


def _finish(results, cells, shape, plan: VotingPlan, xp, mark=lambda name: None) -> RawDetection:
    """The one synchronisation: the statistics, the lists, the contrasts and the
    noise residuals in one copy when small (else the statistics first; lists
    that overflowed are found again)."""
    stats = results[:_N_SLOTS]
    n_samples = len(noise_positions(tuple(shape)))
    whole = results.nbytes <= _ONE_TRANSFER_BYTES
    host = _to_pinned_host(results if whole else stats, xp)
    header = host[:_N_SLOTS].copy()
    mark("synchronised")
    if header[_NONFINITE] or header[_RGB + _NONFINITE]:
        empty = np.zeros(0, dtype=np.int64)
        return RawDetection(cells.votes, empty, empty, np.zeros((0, 2), np.int64), (float("nan"),))
    extremes = (_from_key(~np.uint64(header[_LOW_KEY])), _from_key(header[_HIGH_KEY]))
    tail = results.size - n_samples  # where the residuals start
    if whole and cells.fits(header):
        n_maxima, n_pairs = int(header[_N_MAXIMA]), int(header[_N_PAIRS])
        capacity, pair_capacity = cells.capacity, cells.pair_capacity
        start = _N_SLOTS + capacity + 2 * pair_capacity
        found = (  # views of the pinned copy: every use below makes new arrays of them
            host[_N_SLOTS:_N_SLOTS + n_maxima].view(np.uint32).reshape(-1, 2),
            host[_N_SLOTS + capacity:_N_SLOTS + capacity + 2 * n_pairs].view(np.uint32).reshape(-1, 4),
            host[start:start + n_maxima].view(np.float64),
        )
        residuals = host[tail:].view(np.float64)
    else:
        found = cells.fetch(header)
        residuals = to_host(results[tail:].view(np.float64))
    if len(_last_counts) >= 64:
        _last_counts.clear()
    _last_counts[(tuple(shape), plan.radius, plan.spacing)] = (len(found[0]), len(found[1]))
    flat, values, pair_rows, numerators = _order_cells(*found)
    mark("fetched")
    return RawDetection(cells.votes, flat, values, pair_rows, extremes, numerators, residuals)
