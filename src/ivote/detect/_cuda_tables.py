"""The tables a GPU detection reads, memoized on each GPU: cone tables and their
limits, the initial directions' quantisation, the disc/ball's offsets, the bump
test's ring, the noise grid and the blur's taps (least recently used first out,
within ``_CACHE_BYTES``), and each pass's tiling decision. Part of the GPU
detection (``_cuda.py``)."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np

from .._backend import on_free_gpu_memory, to_host
from ._cone_tables import (ConeTable, check_packable, class_directions, cone_tables, initial_directions, pack_offsets,
                           unpack_offsets)
from ._contrast import bump_ring, noise_positions
from ._cuda_kernels import _TILE, _TILED_GAIN, _TILED_MAX_BYTES
from ._plan import VotingPlan, _sum_in_order


_TRUNCATE = 4.0  # Gaussian taps: radius int(4 sigma + 0.5), as scipy / cupyx


_CACHE_BYTES = 256 * 2**20  # cone tables and disc offsets kept on the GPU, least recently used first out
_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()  # napari runs detections in worker threads


def _memoized(key, build, xp):
    """``build()`` memoized under ``key`` (the GPU's id included), within _CACHE_BYTES."""
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key][0]
    value = build()
    _published(xp)
    size = _nbytes(value)
    with _cache_lock:
        _cache[key] = (value, size)
        _cache.move_to_end(key)
        while len(_cache) > 1 and sum(entry[1] for entry in _cache.values()) > _CACHE_BYTES:
            _cache.popitem(last=False)
    return value


def _published(xp) -> None:
    """Wait for the copies and kernels that built a cached array: another thread
    may read it next on another stream (a worker's own, or per-thread default
    streams), which is not ordered after this one."""
    xp.cuda.get_current_stream().synchronize()


def _nbytes(value) -> int:
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, ConeTable):
        return value.starts.nbytes + value.entries.nbytes
    return value.nbytes


def _cone_tables(plan: VotingPlan, xp):
    """The plan's cone tables on the current GPU (memoized)."""
    key = ("tables", plan.radius, plan.spacing, plan.ndim, xp.cuda.Device().id)
    return _memoized(key, lambda: cone_tables(plan, xp), xp)


def cone_limits(plan: VotingPlan, entries, cos_half) -> np.ndarray:
    """For every (packed) entry of a cone table: cos(phi/2) * |offset|, float32,
    as ``_reference._in_cone`` computes it (the same operations; sqrt is
    correctly rounded on both sides), so the kernels' cone test is a dot product."""
    physical = unpack_offsets(to_host(entries), plan.ndim).astype(np.float32) * plan.spacing32
    length = np.sqrt(_sum_in_order([physical[:, i] * physical[:, i] for i in range(plan.ndim)]))
    return (np.float32(cos_half) * length).astype(np.float32)


def _cone_limits(plan: VotingPlan, xp):
    """cone_limits of every pass's table on the current GPU (memoized)."""
    key = ("limits", plan.radius, plan.spacing, plan.ndim, xp.cuda.Device().id)
    return _memoized(key, lambda: tuple(
        xp.asarray(cone_limits(plan, table.entries, cos_half))
        for table, cos_half in zip(_cone_tables(plan, xp), plan.cos_half32)
    ), xp)


def _initial_directions(plan: VotingPlan, xp) -> tuple:
    """``ivote_voters``' quantisation of the initial directions on the current GPU
    (memoized): (cells, class of each bin (int32), class directions (C x ndim int16,
    ``_cone_tables.class_directions``));
    cells 0 where the plan has no offsets (nothing to quantise to)."""
    key = ("initial", plan.radius, plan.spacing, plan.ndim, xp.cuda.Device().id)

    def build():
        table = initial_directions(plan)
        if len(plan.offsets) == 0:
            return np.int32(0), xp.zeros(1, dtype=np.int32), xp.zeros((1, plan.ndim), dtype=np.int16)
        return (np.int32(table.cells), xp.asarray(np.ascontiguousarray(table.offset_of_bin, dtype=np.int32)),
                xp.asarray(np.ascontiguousarray(class_directions(plan), dtype=np.int16)))

    return _memoized(key, build, xp)


def _ball(plan: VotingPlan, xp):
    """The voting disc/ball's offsets, packed, on the current GPU (memoized)."""
    key = ("ball", plan.radius, plan.spacing, plan.ndim, xp.cuda.Device().id)
    return _memoized(key, lambda: xp.asarray(pack_offsets(plan.offsets)), xp)


def _ring(plan: VotingPlan, xp):
    """The bump test's ring (``_contrast.bump_ring``), packed, on the current GPU (memoized)."""
    key = ("ring", plan.radius, plan.spacing, plan.ndim, xp.cuda.Device().id)
    return _memoized(key, lambda: xp.asarray(pack_offsets(bump_ring(plan))), xp)


def gaussian_taps(sigma: float) -> np.ndarray | None:
    """The 1D Gaussian of cupyx.scipy.ndimage.gaussian_filter (float64, the same
    operations), or None where it skips the axis (sigma ~ 0 or radius 0)."""
    sigma = float(sigma)
    radius = int(_TRUNCATE * sigma + 0.5)
    if sigma <= 1e-15 or radius <= 0:
        return None
    x = np.arange(-radius, radius + 1)
    phi_x = np.exp(-0.5 / (sigma * sigma) * x**2)
    phi_x /= phi_x.sum()
    return phi_x


def _taps_on_gpu(sigma: float | None, xp):
    """gaussian_taps(sigma) on the current GPU, or None (memoized); sigma None: the identity tap."""
    key = (sigma, xp.cuda.Device().id)
    cached = _taps.get(key, _taps)  # one lookup: another thread may clear the dict between two
    if cached is not _taps:
        return cached
    taps = np.ones(1) if sigma is None else gaussian_taps(sigma)
    taps = None if taps is None else xp.asarray(taps)
    _published(xp)
    if len(_taps) >= 64:  # a blur slider asks for many
        _taps.clear()
    _taps[key] = taps
    return taps  # not _taps[key]: another thread may have cleared the dict since


_taps: dict = {}


def _tiled_box(plan: VotingPlan, table, index: str, max_bytes: int = _TILED_MAX_BYTES) -> tuple | None:
    """The half-width (z, y, x) of a tile's box if this pass runs tiled, else None.

    Tiles pay when the cones are wide: a voter then adds to hundreds of cells,
    against (box cells / tile cells) global atomics per pixel for the flush.
    The box must fit in ``max_bytes`` of shared memory.
    """
    if index != "int" or table.n_bins == 0:
        return None
    halo = _reach(plan)
    tile = _TILE[plan.ndim]
    box = math.prod(t + 2 * h for t, h in zip(tile, halo))
    cone = len(table.entries) / table.n_bins  # offsets a voter tests (a small superset of its cone)
    if 4 * box > max_bytes or cone < _TILED_GAIN * box / math.prod(tile):
        return None
    return halo


def _reach(plan: VotingPlan) -> tuple:
    """The largest |offset| (z, y, x) of the disc/ball: a voter this far from every
    border of the image needs no bounds test (not floor(r / s): the disc test is float32)."""
    largest = np.abs(plan.offsets).max(axis=0, initial=0)  # no offsets at all for radius <= 1 pixel
    return (0,) * (3 - plan.ndim) + tuple(int(h) for h in largest)


def _schedule(plan: VotingPlan, index: str, xp) -> tuple:
    """Per pass: (cone table, its cone limits, tile half-width or None), and the
    reach; the tiling decisions are memoized with the packability check."""
    tables = _cone_tables(plan, xp)
    shared = _shared_memory_limit(xp)
    key = (plan.radius, plan.spacing, plan.ndim, index, shared)
    if key not in _halos:
        check_packable(plan)
        _halos[key] = (tuple(_tiled_box(plan, table, index, shared) for table in tables), _reach(plan))
    halos, reach = _halos[key]
    return tuple(zip(tables, _cone_limits(plan, xp), halos)), reach


_halos: dict = {}


def _shared_memory_limit(xp) -> int:
    """Dynamic shared memory a tiled block may use on this GPU (opt-in maximum, capped; memoized)."""
    device = xp.cuda.Device().id
    if device not in _shared_limits:
        attributes = xp.cuda.Device(device).attributes  # queries every attribute: once per GPU
        _shared_limits[device] = min(_TILED_MAX_BYTES, int(attributes.get("MaxSharedMemoryPerBlockOptin", 48 * 1024)))
    return _shared_limits[device]


_shared_limits: dict = {}


def _noise_positions_on_gpu(shape: tuple, xp):
    key = ("noise", shape, xp.cuda.Device().id)
    return _memoized(key, lambda: xp.asarray(noise_positions(shape)), xp)


@on_free_gpu_memory(tables=True)
def release_tables() -> None:
    """Drop the memoized cone tables, disc offsets, bump rings, noise grids and taps
    (rebuilt at the next detection; a captured graph keeps its own references)."""
    with _cache_lock:
        _cache.clear()
    _taps.clear()
