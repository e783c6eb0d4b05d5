"""CUDA launch code of the voting passes (kernels in ``ivote/kernels/ivote.cu``).

Mirrors ``_reference.py`` step by step; the kernels do the loops that NumPy
vectorises over offsets, each voter over the offsets listed for its
direction's bin (``_cone_tables.py``). Voters are compacted once (one host synchronisation,
before the passes); the pass loop then only queues kernels.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np

from .._backend import BackendError, get_array_module, load_module, to_host
from ._cone_tables import check_packable, cone_tables, pack_offsets
from ._plan import VotingPlan, make_plan

__all__ = ["run_passes", "sorted_close_pairs"]

_BLOCK = 256
_OPTIONS = ("--fmad=false",)  # round like NumPy: see the header of ivote.cu


_TILE = {2: (1, 16, 16), 3: (4, 8, 8)}
"""Pixels per tile (z, y, x) of the tiled kernels; one thread each."""
_TILED_MAX_BYTES = 96 * 1024  # shared memory per block for the tile's box of votes
_TILED_GAIN = 3.0  # tile a pass when its cones hold this many times the box's cells per pixel


def _module(ndim: int, index: str, xp):
    """The kernels of one variant on the current GPU (memoized: the pass loop and
    the maxima look them up on every call)."""
    key = (ndim, index, xp.cuda.Device().id)
    if key not in _functions:
        _functions[key] = _load_functions(ndim, index)
    return _functions[key]


_functions: dict = {}


def _load_functions(ndim: int, index: str):
    tile = ", ".join(map(str, _TILE[ndim]))
    names = tuple(
        f"{kernel}<{ndim}, {index}>"
        for kernel in (
            "ivote_gradient_max", "ivote_quantise_weights", "ivote_initial_directions", "ivote_vote_table",
            "ivote_turn_table",
        )
    ) + (f"ivote_close_pairs<{ndim}>", f"ivote_vote_tiled<{ndim}, {tile}>", f"ivote_turn_tiled<{ndim}, {tile}>")
    module = load_module("ivote", name_expressions=names, options=_OPTIONS)
    return {name.split("<")[0]: module.get_function(name) for name in names}


_CACHE_BYTES = 256 * 2**20  # cone tables and disc offsets kept on the GPU, least recently used first out
_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()  # napari runs detections in worker threads


def _memoized(key, build):
    """``build()`` memoized under ``key`` (the GPU's id included), within _CACHE_BYTES."""
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key][0]
    value = build()
    size = sum(t.starts.nbytes + t.entries.nbytes for t in value) if isinstance(value, tuple) else value.nbytes
    with _cache_lock:
        _cache[key] = (value, size)
        _cache.move_to_end(key)
        while len(_cache) > 1 and sum(entry[1] for entry in _cache.values()) > _CACHE_BYTES:
            _cache.popitem(last=False)
    return value


def _cone_tables(plan: VotingPlan, xp):
    """The plan's cone tables on the current GPU (memoized)."""
    key = ("tables", plan.radius, plan.spacing, plan.ndim, xp.cuda.Device().id)
    return _memoized(key, lambda: cone_tables(plan, xp))


def _ball(plan: VotingPlan, xp):
    """The voting disc/ball's offsets, packed, on the current GPU (memoized)."""
    key = ("ball", plan.radius, plan.spacing, plan.ndim, xp.cuda.Device().id)
    return _memoized(key, lambda: xp.asarray(pack_offsets(plan.offsets)))


def _tiled_box(plan: VotingPlan, table, index: str, max_bytes: int = _TILED_MAX_BYTES) -> tuple | None:
    """The half-width (z, y, x) of a tile's box if this pass runs tiled, else None.

    Tiles pay when the cones are wide: a voter then adds to hundreds of cells,
    against (box cells / tile cells) global atomics per pixel for the flush.
    The box must fit in ``max_bytes`` of shared memory.
    """
    if index != "int" or table.n_bins == 0:
        return None
    # the largest offset per axis: not floor(r / s), since the disc test is float32
    halo = (0,) * (3 - plan.ndim) + tuple(int(h) for h in np.abs(plan.offsets).max(axis=0))
    tile = _TILE[plan.ndim]
    box = math.prod(t + 2 * h for t, h in zip(tile, halo))
    cone = len(table.entries) / table.n_bins  # offsets a voter tests (a small superset of its cone)
    if 4 * box > max_bytes or cone < _TILED_GAIN * box / math.prod(tile):
        return None
    return halo


def _shared_memory_limit(xp) -> int:
    """Dynamic shared memory a tiled block may use on this GPU (opt-in maximum, capped; memoized)."""
    device = xp.cuda.Device().id
    if device not in _shared_limits:
        attributes = xp.cuda.Device(device).attributes  # queries every attribute: once per GPU
        _shared_limits[device] = min(_TILED_MAX_BYTES, int(attributes.get("MaxSharedMemoryPerBlockOptin", 48 * 1024)))
    return _shared_limits[device]


_shared_limits: dict = {}


def _launch_tiled(kernel, shape, ndim: int, halo, args):
    tile = _TILE[ndim]
    box_bytes = 4 * math.prod(t + 2 * h for t, h in zip(tile, halo))
    if box_bytes > 48 * 1024 and kernel.max_dynamic_shared_size_bytes < box_bytes:
        kernel.max_dynamic_shared_size_bytes = box_bytes
    blocks = math.prod(math.ceil(n / t) for n, t in zip(_dims(shape), tile))
    kernel((blocks,), (math.prod(tile),), args, shared_mem=box_bytes)


def _dims(shape):
    return (1,) * (3 - len(shape)) + tuple(int(n) for n in shape)


def _grid(n: int) -> tuple[int]:
    return (max(1, math.ceil(n / _BLOCK)),)


def run_passes(smoothed, plan: VotingPlan, sign: float, iter_callback=None):
    """The vote field V (uint32 CuPy array, image shape) after the last pass.

    ``smoothed`` may be a one-element list holding the image: it is then taken
    out, so that its memory is freed as soon as the voters are set up.
    """
    holder = smoothed if isinstance(smoothed, list) else [smoothed]
    del smoothed
    xp = get_array_module(holder[0])
    index = "int" if holder[0].size < 2**31 else "long long"
    check_packable(plan)  # before any work
    _check_kernels(xp, plan.ndim, index)
    return _run_passes(holder, plan, sign, iter_callback, index)


_checked: set = set()


def _check_kernels(xp, ndim: int, index: str) -> None:
    """Once per process, GPU and kernel variant: the kernels must reproduce the
    NumPy reference exactly on a small image, else raise (never wrong cells)."""
    key = (ndim, index, xp.cuda.Device().id)
    if key in _checked:
        return
    from ._reference import run_passes as reference_passes

    shape = (32, 32) if ndim == 2 else (8, 24, 24)
    coords = np.indices(shape, dtype=np.float64)
    centre_a = np.array(shape) * 0.35
    centre_b = np.array(shape) * 0.65
    image = sum(
        np.exp(-sum((c - m) ** 2 for c, m in zip(coords, centre)) / 18.0) for centre in (centre_a, centre_b)
    )
    image /= image.max()
    # radius / spacing just under 7 (float64) while offsets of 7 pass the float32 disc test
    spacing = (1.3,) * ndim if ndim == 2 else (2.6, 1.3, 1.3)
    plan = make_plan(9.1, spacing, ndim)
    expected = reference_passes(image, plan, 1.0)
    got = to_host(_run_passes([xp.asarray(image)], plan, 1.0, None, index))
    if not np.array_equal(got, expected):
        raise BackendError(
            f"the iterative-voting CUDA kernels ({ndim}D, {index} indices) disagree with the NumPy reference on "
            f"this GPU/driver ({int(got.sum())} vs {int(expected.sum())} votes); use backend='numpy' "
            "(IVOTE_BACKEND=numpy) and report the GPU, driver and CuPy versions"
        )
    _checked.add(key)


def _run_passes(holder: list, plan: VotingPlan, sign: float, iter_callback, index: str):
    """The passes; ``holder`` holds the only reference to the image, freed early."""
    xp = get_array_module(holder[0])
    smoothed = xp.ascontiguousarray(holder.pop(), dtype=np.float64)
    ndim = plan.ndim
    index_dtype = np.int32 if index == "int" else np.int64
    kernels = _module(ndim, index, xp)
    Z, Y, X = _dims(smoothed.shape)
    spacing64 = (1.0,) * (3 - ndim) + plan.spacing
    spacing32 = tuple(np.float32(s) for s in (1.0,) * (3 - ndim) + tuple(plan.spacing32))
    size = smoothed.size

    # weights: the gradient magnitude quantised exactly as in _reference.prepare_voters
    image_geometry = (np.int32(Z), np.int32(Y), np.int32(X), *map(np.float64, spacing64))
    size_arg = np.int32(size) if index == "int" else np.int64(size)
    grid = (min(_grid(size)[0], 2048),)
    largest_bits = xp.zeros(1, dtype=np.uint64)
    kernels["ivote_gradient_max"](grid, (_BLOCK,), (smoothed, size_arg, *image_geometry, largest_bits))
    votes = xp.zeros(smoothed.shape, dtype=np.uint32)
    if int(largest_bits[0]) == 0:  # host sync (before the passes): a flat image has no voter
        return votes
    weights = xp.empty(smoothed.shape, dtype=np.uint16)
    kernels["ivote_quantise_weights"](
        grid, (_BLOCK,),
        (smoothed, size_arg, *image_geometry, largest_bits, np.float64(plan.weight_scale), weights),
    )
    voters = xp.flatnonzero(weights >= plan.min_weight).astype(index_dtype)  # host sync
    weights = weights.ravel()[voters].astype(np.uint32)
    n_voters = int(voters.size)
    directions = xp.empty((n_voters, ndim), dtype=np.int16)
    if n_voters:
        kernels["ivote_initial_directions"](
            _grid(n_voters), (_BLOCK,),
            (smoothed, voters, np.int64(n_voters), np.int32(Z), np.int32(Y), np.int32(X),
             *map(np.float64, spacing64), np.float64(sign), directions),
        )
    del smoothed

    tables = _cone_tables(plan, xp)
    limit = _shared_memory_limit(xp)
    tiled = [_tiled_box(plan, table, index, limit) for table in tables]
    if n_voters and any(h is not None for h in tiled):  # pixel -> voter, for the tiled kernels
        voter_of = xp.full(size, -1, dtype=np.int32)
        voter_of[voters] = xp.arange(n_voters, dtype=np.int32)
    for pass_index, (table, cos_half, halo) in enumerate(zip(tables, plan.cos_half32, tiled)):
        last = pass_index == plan.n_passes - 1
        votes.fill(0)
        if n_voters and halo is not None:
            geometry = (
                np.int32(Z), np.int32(Y), np.int32(X), *spacing32, np.float32(cos_half), np.int32(table.cells),
                table.starts, table.entries, *map(np.int32, halo),
            )
            _launch_tiled(kernels["ivote_vote_tiled"], votes.shape, ndim, halo,
                          (voter_of, weights, directions, *geometry, votes))
            if not last:
                _launch_tiled(kernels["ivote_turn_tiled"], votes.shape, ndim, halo,
                              (voter_of, directions, *geometry, votes))
        elif n_voters:
            geometry = (
                np.int64(n_voters), np.int32(Z), np.int32(Y), np.int32(X), *spacing32, np.float32(cos_half),
                np.int32(table.cells), table.starts, table.entries,
            )
            kernels["ivote_vote_table"](_grid(n_voters), (_BLOCK,), (voters, weights, directions, *geometry, votes))
            if not last:
                kernels["ivote_turn_table"](_grid(n_voters), (_BLOCK,), (voters, directions, *geometry, votes))
        if iter_callback is not None:
            iter_callback(pass_index, plan.n_passes)
    return votes


def sorted_close_pairs(votes, flat, plan: VotingPlan):
    """As ``_reference.sorted_close_pairs``, on the GPU (``ivote_close_pairs``),
    with one transfer of the results to the host."""
    xp = get_array_module(votes)
    n = int(flat.size)
    values = votes.ravel()[flat]
    key = ((np.uint64(0xFFFFFFFF) - values.astype(np.uint64)) << np.uint64(32)) | flat.astype(np.uint64)
    order = xp.argsort(key)
    flat, values = flat[order].astype(np.int32), values[order].astype(np.int64)
    rank = xp.full(votes.shape, -1, dtype=np.int32)
    rank.ravel()[flat] = xp.arange(n, dtype=np.int32)
    offsets = _ball(plan, xp)
    Z, Y, X = _dims(votes.shape)
    kernel = _module(plan.ndim, "int", xp)["ivote_close_pairs"]
    capacity = max(64, 4 * n)
    while True:
        n_pairs = xp.zeros(1, dtype=np.int32)
        pairs = xp.empty((capacity, 2), dtype=np.int32)
        if n:
            kernel(_grid(n), (_BLOCK,), (flat, np.int32(n), rank, np.int32(Z), np.int32(Y), np.int32(X), offsets,
                                         np.int32(len(plan.offsets)), n_pairs, pairs, np.int32(capacity)))
        found = to_host(xp.concatenate([flat.astype(np.int64), values, n_pairs.astype(np.int64),
                                        pairs.ravel().astype(np.int64)]))  # one transfer
        count = int(found[2 * n])
        if count <= capacity:
            break
        capacity = count
    pairs = found[2 * n + 1:].reshape(-1, 2)[:count]
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]  # atomics wrote them in any order
    return found[:n], found[n:2 * n], pairs
