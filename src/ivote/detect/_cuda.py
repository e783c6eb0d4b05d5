"""CUDA launch code of a detection (kernels in ``ivote/kernels/ivote.cu``).

Mirrors ``_reference.py`` step by step; the kernels do the loops that NumPy
vectorises over offsets, each voter over the offsets listed for its
direction's bin (``_cone_tables.py``).

A detection is one queue of about 20 kernels and one host synchronisation, at
the end: the image's minimum and maximum (and whether it holds NaN/Inf), the
largest gradient and the counts of maxima and close pairs stay in a small
array of statistics on the GPU, read by the kernels that need them through a
pointer and copied to the host with the results. Voters are dense (a weight
per pixel, 0 for pixels that do not vote), so no list of voters is built, and
the two vote buffers of the passes take turns: each turn step zeroes the
buffer the next pass fills.
"""

from __future__ import annotations

import math
import sys
import threading
from collections import OrderedDict

import numpy as np

from .._backend import BackendError, get_array_module, load_module, on_free_gpu_memory, to_host
from ._cone_tables import (ConeTable, check_packable, class_directions, cone_tables, initial_directions, pack_offsets,
                           unpack_offsets)
from ._contrast import BUMP_DEPTH, BUMP_SHARE, bump_ring, noise_positions
from ._plan import VotingPlan, _sum_in_order, make_plan
from ._reach import clear_outside, pass_boxes
from ._result import RawDetection

__all__ = ["detect", "run_passes", "sorted_close_pairs"]

_BLOCK = 256
_OPTIONS = ("--fmad=false",)  # round like NumPy: see the header of ivote.cu
_REDUCE_BLOCKS = 1024  # blocks of the grid-stride reductions (one atomic each)

_TILE = {2: (1, 32, 32), 3: (4, 8, 8)}
"""Pixels per tile (z, y, x) of the tiled kernels; one thread each. A warp is a
row of 32 pixels in 2D (4 rows of 8 in 3D, 24 box cells apart): voters of the
same bin then add to 32 different shared-memory banks. On an H100 at 2048^2,
2D tiles of 32 x 32 gave the fastest passes (3.67 ms; 16 x 16: 3.75, 16 x 32:
3.86, 8 x 32: 4.17, the same votes)."""
_TILED_MAX_BYTES = 96 * 1024  # shared memory per block for the tile's box of votes
_TILED_GAIN = 3.0  # tile a pass when its cones hold this many times the box's cells per pixel

# Slots of the statistics array (uint64, on the GPU; see the header of ivote.cu)
_LOW_KEY, _HIGH_KEY, _NONFINITE, _LARGEST, _N_MAXIMA, _N_PAIRS = range(6)
_RGB = 8  # min/max/NaN slots of an RGB image's channels
_N_SLOTS = 12

_FUSED_BLUR = True
"""The pre-blur sums with fused multiply-adds, as cupyx.scipy.ndimage's correlate kernel compiles."""

_CTYPES = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.uint8): "unsigned char",
    np.dtype(np.uint16): "unsigned short",
}
"""Input dtypes the statistics and blur kernels read directly (others are converted to float64 first)."""

_TRUNCATE = 4.0  # Gaussian taps: radius int(4 sigma + 0.5), as scipy / cupyx


def _module(ndim: int, index: str, xp):
    """The kernels of one variant on the current GPU (memoized: every call looks them up)."""
    key = (ndim, index, xp.cuda.Device().id)
    if key not in _functions:
        _functions[key] = _load_functions(ndim, index)
    return _functions[key]


_functions: dict = {}


def _blur_name(ctype: str, normalise: bool, fused: bool) -> str:
    return f"ivote_blur_axis<{ctype}, {str(normalise).lower()}, {str(fused).lower()}>"


def _load_functions(ndim: int, index: str):
    tile = ", ".join(map(str, _TILE[ndim]))
    per_variant = tuple(
        f"{kernel}<{ndim}, {index}>"
        for kernel in ("ivote_gradient_max", "ivote_voters", "ivote_vote_table", "ivote_turn_table")
    ) + (
        f"ivote_vote_tiled<{ndim}, {tile}>", f"ivote_turn_tiled<{ndim}, {tile}>",
        f"ivote_local_maxima<{ndim}>", f"ivote_close_pairs<{ndim}>",
    )
    contrast = tuple(f"ivote_contrast<{ndim}, {c}>" for c in ("double", "float"))
    common = tuple(f"ivote_min_max<{c}>" for c in _CTYPES.values()) + tuple(
        f"ivote_noise_samples<{c}>" for c in _CTYPES.values()) + tuple(
        _blur_name(c, True, fused) for c in _CTYPES.values() for fused in (True, False)
    ) + tuple(_blur_name("double", False, fused) for fused in (True, False))
    module = load_module("ivote", name_expressions=per_variant + contrast + common, options=_OPTIONS)
    functions = {name.split("<")[0]: module.get_function(name) for name in per_variant}
    functions.update({name: module.get_function(name) for name in common})
    functions.update({f"ivote_contrast<{c}>": module.get_function(name) for c, name in zip(("double", "float"), contrast)})
    return functions


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
_opted_in: set = set()


def _launch_tiled(kernel, shape, ndim: int, halo, args):
    tile = _TILE[ndim]
    box_bytes = 4 * math.prod(t + 2 * h for t, h in zip(tile, halo))
    if box_bytes > 48 * 1024 and (id(kernel), box_bytes) not in _opted_in:
        if kernel.max_dynamic_shared_size_bytes < box_bytes:
            kernel.max_dynamic_shared_size_bytes = box_bytes
        _opted_in.add((id(kernel), box_bytes))
    blocks = math.prod(math.ceil(n / t) for n, t in zip(_dims(shape), tile))
    kernel((blocks,), (math.prod(tile),), args, shared_mem=box_bytes)


def _dims(shape):
    return (1,) * (3 - len(shape)) + tuple(int(n) for n in shape)


def _grid(n: int) -> tuple[int]:
    return (max(1, math.ceil(n / _BLOCK)),)


# ---------------------------------------------------------------------------
# Statistics, normalisation and blur
# ---------------------------------------------------------------------------


def _kernel_input(array, xp):
    """The array as the statistics/blur kernels read it: as is for the dtypes they
    take (C-contiguous), else a float64 copy."""
    if array.dtype in _CTYPES and array.flags.c_contiguous:
        return array
    return xp.ascontiguousarray(array, dtype=np.float64)


def _min_max(array, stats, kernels):
    """Queue the minimum/maximum/NaN statistics of ``array`` into stats[0..3)."""
    grid = (min(_grid(array.size)[0], _REDUCE_BLOCKS),)
    kernels[f"ivote_min_max<{_CTYPES[array.dtype]}>"](grid, (_BLOCK,), (array, np.int64(array.size), stats))


def _blur_steps(sigma, ndim: int, xp) -> list:
    """(axis, taps on the GPU) of each axis the blur runs along; the identity
    tap along the last axis when none (the normalisation still runs)."""
    steps = [(axis, _taps_on_gpu(float(s), xp)) for axis, s in enumerate(sigma or ())]
    steps = [(axis, taps) for axis, taps in steps if taps is not None]
    return steps or [(ndim - 1, _taps_on_gpu(None, xp))]


def _noise_samples(source, stats, residuals, kernels, xp, positions=None):
    """Queue the residuals of the noise grid (``_contrast.noise_positions``; ``positions``:
    that grid on the GPU, when already looked up) into ``residuals``."""
    if residuals.size == 0:
        return
    positions = _noise_positions_on_gpu(tuple(source.shape), xp) if positions is None else positions
    shape = source.shape
    kernels[f"ivote_noise_samples<{_CTYPES[source.dtype]}>"](
        _grid(positions.size), (_BLOCK,),
        (source, np.int32(len(shape)), np.int32(shape[-2]), np.int32(shape[-1]), positions, np.int32(positions.size),
         stats, residuals),
    )


def _noise_positions_on_gpu(shape: tuple, xp):
    key = ("noise", shape, xp.cuda.Device().id)
    return _memoized(key, lambda: xp.asarray(noise_positions(shape)), xp)


def _normalise_and_blur(source, sigma, stats, kernels, xp, fused: bool = _FUSED_BLUR, outputs=None, steps=None,
                        first: int = 0, last: int | None = None):
    """(source - min) / (max - min) with the statistics on the GPU, then the
    separable Gaussian of sigma (per axis, pixels; None: none), as
    ``cupyx.scipy.ndimage.gaussian_filter(..., mode="reflect")`` computes it.
    Normalisation is fused into the first axis.

    ``outputs``: two float64 arrays of the image's shape that the axes write in
    turn (default: new ones); ``steps``: ``_blur_steps(sigma, ...)`` when already
    looked up; ``first``/``last``: run only these steps (with ``outputs``; a
    later step reads the output the step before it wrote).
    """
    shape = outputs[0].shape if source is None else source.shape
    steps = _blur_steps(sigma, len(shape), xp) if steps is None else steps
    size = math.prod(shape)
    current = source if first == 0 else outputs[(first - 1) % 2]
    for step in range(first, len(steps) if last is None else last):
        axis, taps = steps[step]
        ctype, normalise = (_CTYPES[current.dtype], True) if step == 0 else ("double", False)
        out = xp.empty(shape, dtype=np.float64) if outputs is None else outputs[step % 2]
        stride = math.prod(shape[axis + 1:])
        kernels[_blur_name(ctype, normalise, fused)](
            _grid(size), (_BLOCK,),
            (current, np.int32(size), np.int32(shape[axis]), np.int32(stride), taps, np.int32(taps.size), stats, out),
        )
        current = out
    return current


# ---------------------------------------------------------------------------
# Voters and passes
# ---------------------------------------------------------------------------


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


def run_passes(smoothed, plan: VotingPlan, sign: float, iter_callback=None):
    """The vote field V (uint32 CuPy array, image shape) after the last pass,
    from the normalised, blurred image (float64).

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


def _run_passes(holder: list, plan: VotingPlan, sign: float, iter_callback, index: str):
    """The passes; ``holder`` holds the only reference to the image, freed early."""
    xp = get_array_module(holder[0])
    smoothed = xp.ascontiguousarray(holder.pop(), dtype=np.float64)
    kernels = _module(plan.ndim, index, xp)
    stats = xp.zeros(_N_SLOTS, dtype=np.uint64)
    weights, directions = _voters(smoothed, plan, sign, stats[_LARGEST:], kernels, index, xp)
    del smoothed
    return _passes(weights, directions, plan, index, iter_callback, kernels, xp)


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
    if index == "int":
        _check_contrast_kernels(xp, image, plan, xp.asarray(got))
    _checked.add(key)


def _check_contrast_kernels(xp, image, plan: VotingPlan, votes) -> None:
    """The noise-residual and contrast kernels must equal ``_contrast``'s NumPy
    reference on the self-check's image and vote field (dark polarity), else raise."""
    from ._contrast import contrast_numerators, noise_residuals

    kernels = _module(plan.ndim, "int", xp)
    source = xp.asarray(image)
    stats = xp.zeros(_N_SLOTS, dtype=np.uint64)
    _min_max(source, stats, kernels)
    positions = noise_positions(tuple(image.shape))
    residuals = xp.empty(len(positions), dtype=np.float64)
    _noise_samples(source, stats, residuals, kernels, xp)
    cells = _Cells(votes, plan, stats, kernels, xp, smoothed=source, sign=-1.0)
    cells.find_maxima(256)
    cells.find_contrast()
    cells.find_pairs(1024)
    rows, _, numerators = cells.fetch(to_host(stats))
    low, high = image.min(), image.max()
    points = np.stack(np.unravel_index(rows[:, 0].astype(np.int64), image.shape), axis=1)
    expected = contrast_numerators(image.astype(np.float32), points, plan.window, -1.0, bump_ring(plan))
    same_noise = np.array_equal(to_host(residuals), noise_residuals((image - low) / (high - low), positions))
    if not (len(rows) and same_noise and np.array_equal(numerators, expected)):
        raise BackendError(
            f"the contrast CUDA kernels ({plan.ndim}D) disagree with the NumPy reference on this GPU/driver; "
            "use backend='numpy' (IVOTE_BACKEND=numpy) and report the GPU, driver and CuPy versions"
        )


# ---------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# The whole detection
# ---------------------------------------------------------------------------


def _to_key(value: float) -> np.uint64:
    """A double as the kernels' ``ivote_key``: an unsigned integer of the same order."""
    bits = np.array([value], dtype=np.float64).view(np.uint64)[0]
    return ~bits if bits >> np.uint64(63) else bits | np.uint64(1 << 63)


def _write_given(stats, low: float, high: float, largest: float, xp) -> None:
    """The whole image's minimum, maximum (as keys) and largest gradient (its bits)
    into a block's statistics."""
    host = np.zeros(_N_SLOTS, dtype=np.uint64)
    host[_LOW_KEY] = ~_to_key(low)
    host[_HIGH_KEY] = _to_key(high)
    host[_LARGEST] = np.array([float(largest)], dtype=np.float64).view(np.uint64)[0]
    stats[:] = xp.asarray(host)


def smoothed_block(signal, sigma, low: float, high: float):
    """The normalised ((signal - low) / (high - low)), blurred block (float64, on the
    GPU) of an image whose minimum and maximum are ``low`` and ``high``: the
    detection's own kernels, so that its gradients are the detection's."""
    xp = get_array_module(signal)
    kernels = _module(signal.ndim, "int", xp)
    stats = xp.zeros(_N_SLOTS, dtype=np.uint64)
    _write_given(stats, low, high, 0.0, xp)
    return _normalise_and_blur(_kernel_input(signal, xp), sigma, stats, kernels, xp)


def _from_key(key) -> float:
    key = np.uint64(key)
    bits = key & np.uint64(0x7FFF_FFFF_FFFF_FFFF) if key >> np.uint64(63) else ~key
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def detect(signal, plan: VotingPlan, sign: float, sigma=None, iter_callback=None, *, also_finite=None,
           phase_callback=None, reuse: bool = False, given=None) -> RawDetection:
    """Normalise, blur (``sigma`` per axis, pixels; None: no blur), vote and find
    the local maxima and their close pairs, with one synchronisation at the end.

    ``also_finite``: another array (e.g. all channels of an RGB image) whose
    NaN/Inf are reported too. ``phase_callback(name)`` is called after each phase
    is queued (benchmarks record CUDA events there). ``reuse``: the caller does
    not keep ``votes`` (it is then None) and may detect on images of this shape
    and settings again: from the second such call on, the kernels are replayed
    from a CUDA graph (see ``_Graphed``). ``given``: the whole image's
    ``_result.GlobalStatistics`` when ``signal`` is a block of it (its minimum,
    maximum and largest gradient are then written into the statistics instead of
    the block's; the minimum/maximum kernel still runs, for NaN/Inf). The caller
    checks ``extremes`` (NaN/Inf, constant image) before using the rest.
    """
    xp = get_array_module(signal)
    if signal.size >= 2**31:
        raise ValueError(f"image is too large for one GPU pass ({signal.size} pixels >= 2**31); process it in tiles")
    check_packable(plan)  # before any work
    _check_kernels(xp, plan.ndim, "int")
    key = None
    if (reuse and given is None and iter_callback is None and also_finite is None and phase_callback is None
            and signal.size <= _GRAPH_MAX):
        key = (tuple(signal.shape), plan.radius, plan.spacing, plan.ndim, float(sign),
               None if sigma is None else tuple(map(float, sigma)), xp.cuda.Device().id)
        graphed = _graphed(key, plan, xp)
        found = None if graphed is None else graphed.detect(signal)
        if found is not None:
            return found
    kernels = _module(plan.ndim, "int", xp)
    mark = phase_callback or (lambda name: None)

    results, maxima, pairs, numerators, residuals = _results_buffer(signal.shape, plan, xp)
    stats = results[:_N_SLOTS]
    if given is not None:
        _write_given(stats, given.low, given.high, given.largest, xp)
    source = _kernel_input(signal, xp)
    _min_max(source, stats, kernels)
    if also_finite is not None:
        _min_max(_kernel_input(also_finite, xp), stats[_RGB:], kernels)
    _noise_samples(source, stats, residuals, kernels, xp)
    smoothed = _normalise_and_blur(source, sigma, stats, kernels, xp)
    del source
    mark("blur")
    weights, directions = _voters(smoothed, plan, sign, stats[_LARGEST:], kernels, "int", xp,
                                  largest_given=given is not None)
    if plan.ndim == 3:  # the contrasts read it in float32: 4 bytes a voxel kept instead of 8
        smoothed = smoothed.astype(np.float32)
    mark("voters")
    boxes = pass_boxes(plan, signal.shape, getattr(given, "owned", None))
    votes = _passes(weights, directions, plan, "int", iter_callback, kernels, xp, boxes=boxes)
    del weights, directions
    mark("passes")
    cells = _Cells(votes, plan, stats, kernels, xp, smoothed=smoothed, sign=sign)
    del smoothed
    cells.find_maxima(len(maxima), maxima)
    cells.find_contrast(numerators)
    cells.find_pairs(len(pairs), pairs)
    mark("maxima")
    found = _finish(results, cells, signal.shape, plan, xp, mark)
    if key is not None:
        _seen_once(key)
    if reuse:
        found.votes = None
    return found


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


# ---------------------------------------------------------------------------
# Repeated detections: one CUDA graph
# ---------------------------------------------------------------------------

_GRAPH_MAX = 1 << 22
"""Images up to this many pixels (2048^2) are replayed from a CUDA graph on
repeated detections: there, queueing ~20 kernels one by one from Python costs
as much as running them (a 1024^2 detection is about 1.2 ms of GPU work)."""
_GRAPHS_KEPT = 4
_graphs: OrderedDict = OrderedDict()
_graphs_seen: OrderedDict = OrderedDict()
_graphs_lock = threading.Lock()


def _seen_once(key) -> None:
    with _graphs_lock:
        _graphs_seen[key] = True
        while len(_graphs_seen) > 64:
            _graphs_seen.popitem(last=False)


def _graphed(key, plan: VotingPlan, xp):
    """The captured detection for ``key``, captured now if a plain detection with
    this key ran before (so every memoized table is built); else None."""
    with _graphs_lock:
        if key in _graphs:
            _graphs.move_to_end(key)
            return _graphs[key]
        if key not in _graphs_seen:
            return None
    try:
        graphed = _Graphed(key, plan, xp)
    except Exception:  # e.g. a cache evicted by another thread mid-capture: run the plain path
        with _graphs_lock:
            _graphs_seen.pop(key, None)
        return None
    with _graphs_lock:
        _graphs[key] = graphed
        _graphs.move_to_end(key)
        while len(_graphs) > _GRAPHS_KEPT:
            _graphs.popitem(last=False)
    return graphed


@on_free_gpu_memory(tables=True)
def release_tables() -> None:
    """Drop the memoized cone tables, disc offsets, bump rings, noise grids and taps
    (rebuilt at the next detection; a captured graph keeps its own references)."""
    with _cache_lock:
        _cache.clear()
    _taps.clear()


@on_free_gpu_memory
def release_graphs() -> None:
    """Drop the captured detections and the GPU buffers they hold."""
    with _graphs_lock:
        _graphs.clear()
        _graphs_seen.clear()


class _Graphed:
    """Detections of one image shape and setting, replayed from a CUDA graph.

    Every launch argument of a graph is fixed at capture, so the graph owns
    its buffers: two float64 work arrays (the blur's axes write them in turn;
    the blurred image stays in one for the contrasts, the two vote buffers
    live in the other), the voters (their weights hold the maxima flags after
    the passes), and the results (statistics, lists sized from the last
    detection, contrasts, noise residuals). It also holds the memoized tables,
    initial-direction table, disc offsets, bump ring, taps and noise grid it reads, looked up once before the
    capture, which passes them on: a lookup during the capture could return
    another object (evicted and rebuilt by another thread since), which the
    graph would read after a cache frees it, or build one there (an allocation
    and a synchronisation, which the capture forbids). The kernels that read
    the image itself (its statistics, noise grid and the blur's first axis)
    are launched before the graph, so the image needs no copy: five launches
    per detection instead of about 20.
    A detection runs under a lock (napari detects in worker threads). Lists
    that overflow are found again outside the graph, which is then dropped and
    captured anew, with larger lists, on the next detection.
    """

    def __init__(self, key, plan: VotingPlan, xp):
        shape, _, _, _, sign, sigma, _ = key
        self.key, self.shape, self.plan, self.xp, self.stale = key, shape, plan, xp, False
        size = math.prod(shape)
        self.results, maxima, pairs, numerators, self.residuals = _results_buffer(shape, plan, xp)
        self.work = (xp.empty(shape, dtype=np.float64), xp.empty(shape, dtype=np.float64))
        voters = (xp.empty(shape, dtype=np.uint16), xp.empty((size, plan.ndim), dtype=np.int16))
        self.kernels = kernels = _module(plan.ndim, "int", xp)
        # memoized arrays the kernels read: looked up (built if evicted) outside the capture, held, and
        # passed to it (no lookup inside)
        self.steps = _blur_steps(sigma, plan.ndim, xp)
        self.schedule, self.offsets, self.ring = _schedule(plan, "int", xp), _ball(plan, xp), _ring(plan, xp)
        self.initial = _initial_directions(plan, xp)
        self.noise_positions = _noise_positions_on_gpu(tuple(shape), xp)
        self.stats = stats = self.results[:_N_SLOTS]
        stream = xp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            try:
                smoothed = _normalise_and_blur(None, sigma, stats, kernels, xp, outputs=self.work, steps=self.steps,
                                               first=1)
                _voters(smoothed, plan, sign, stats[_LARGEST:], kernels, "int", xp, out=voters, initial=self.initial)
                other = self.work[1] if smoothed is self.work[0] else self.work[0]
                halves = other.view(np.uint32).reshape(-1)
                buffers = (halves[:size].reshape(shape), halves[size:].reshape(shape))
                buffers[0].fill(0)
                votes = _passes(*voters, plan, "int", None, kernels, xp, buffers=buffers, schedule=self.schedule)
                is_maximum = voters[0].view(np.uint8).reshape(-1)[:size]  # the weights are read no more
                is_maximum.fill(0)
                self.cells = _Cells(votes, plan, stats, kernels, xp, is_maximum=is_maximum, smoothed=smoothed,
                                    sign=sign, offsets=self.offsets, ring=self.ring)
                self.cells.find_maxima(len(maxima), maxima)
                self.cells.find_contrast(numerators)
                self.cells.find_pairs(len(pairs), pairs)
            finally:
                self.graph = stream.end_capture()
        stream.synchronize()
        self.voters = voters
        self.lock = threading.Lock()

    def detect(self, signal) -> RawDetection | None:
        """The detection of ``signal``; None if this graph is stale (the caller runs the plain path)."""
        with self.lock:
            if self.stale:
                return None
            source = _kernel_input(signal, self.xp)
            self.stats.fill(0)  # a memset on the current stream
            _min_max(source, self.stats, self.kernels)
            _noise_samples(source, self.stats, self.residuals, self.kernels, self.xp, self.noise_positions)
            _normalise_and_blur(source, None, self.stats, self.kernels, self.xp, outputs=self.work, steps=self.steps,
                                last=1)
            self.graph.launch()
            capacities = (self.cells.capacity, self.cells.pair_capacity)
            found = _finish(self.results, self.cells, self.shape, self.plan, self.xp)
            if (self.cells.capacity, self.cells.pair_capacity) != capacities:  # a list overflowed: found again
                self.stale = True  # the cells now point at other lists; capture anew next time
                with _graphs_lock:
                    if _graphs.get(self.key) is self:
                        del _graphs[self.key]
        found.votes = None
        return found
