"""Pass 1 of a chunked detection: the whole image's statistics, block by block.

The in-memory detection uses four numbers of the whole image: its minimum and
maximum, the largest gradient of the normalised, blurred image and the noise's
standard deviation. ``_statistics_task`` reads each block once and reports its
minimum, maximum, the raw boxes of the noise grid it owns and the owned voxels
of its largest raw gradients; ``_largest_gradient`` then evaluates the largest
normalised gradient exactly at those few voxels, on the backend's own blur
(``_gradient_task``), and ``_residuals`` gives the noise residuals of the
whole image from the raw boxes.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import NamedTuple

import numpy as np

from ._detect_chunks import _grow, _local
from ._tasks import _Runner, _client, _on_device, _read, _source


class _BlockStatistics(NamedTuple):
    """What the first pass finds in a block (``_statistics_task``)."""

    low: float
    high: float
    boxes: np.ndarray
    points: np.ndarray
    """(N, ndim) whole-image coordinates of the owned voxels of the largest raw gradients."""
    values: np.ndarray
    """Their raw gradient magnitudes, largest first."""
    floor: float
    """No owned voxel left out of ``points`` has a raw gradient above this."""
    block: np.ndarray | None
    """The region read, kept for the detection pass (or None)."""


#: owned voxels of the largest raw gradients a block reports at most
_GRADIENT_CANDIDATES = 64
#: relative band below a block's largest raw gradient that it reports
_GRADIENT_BAND = 1e-4
#: relative band below the largest raw gradient whose voxels are evaluated exactly
_GRADIENT_TOLERANCE = 1e-6


def _statistics_task(source, owned, region, noise_coords, reach, sigma, spacing, backend, limit, keep):
    """Pass 1: the owned voxels' minimum and maximum (NaN/Inf propagate), the raw
    3^ndim box (C order) of every noise-grid voxel the block owns, and the owned
    voxels whose gradient magnitude of the blurred, not normalised block lies
    within ``_GRADIENT_BAND`` of the block's largest (at most
    ``_GRADIENT_CANDIDATES``, with the floor under those left out): the largest
    gradient of the normalised image is at one of them (``_largest_gradient``)."""
    from .._backend import gpu_memory_guard, to_host, use_numba

    block = _read(source)
    mine = block[_local(owned, region)]
    low, high = mine.min(), mine.max()  # NaN propagates; the caller refuses NaN and Inf
    ndim = block.ndim
    boxes = np.empty((len(noise_coords), 3**ndim), dtype=np.float64)
    centre = [noise_coords[:, a] - region[a].start for a in range(ndim)]
    for k, offset in enumerate(itertools.product((-1, 0, 1), repeat=ndim)):
        boxes[:, k] = block[tuple(c + o for c, o in zip(centre, offset))]
    grown = _grow(owned, reach, tuple(r.stop for r in region))
    crop = block[_local(grown, region)]
    xp, device = _on_device(backend, limit)

    @gpu_memory_guard("detect_chunked (statistics pass)")
    def run():
        magnitude = _gradient_magnitude(crop, owned, grown, 0.0, 1.0, sigma, spacing, xp,
                                        xp is np and use_numba(xp, backend))
        flat = magnitude.ravel()
        top = float(flat.max())
        if not top > 0:  # NaN (refused by the caller) or no gradient: nothing to report
            return np.zeros(0, np.int64), np.zeros(0), 0.0
        near = xp.flatnonzero(flat >= top * (1.0 - _GRADIENT_BAND))
        values = flat[near]
        order = xp.argsort(-values)  # ties: any order (a tie at the cut makes the floor reach them)
        floor = top * (1.0 - _GRADIENT_BAND)
        if len(order) > _GRADIENT_CANDIDATES:
            floor = float(values[order[_GRADIENT_CANDIDATES]])
            order = order[:_GRADIENT_CANDIDATES]
        return to_host(near[order]), to_host(values[order]), floor

    with device:
        flat, values, floor = run()
    points = np.stack(np.unravel_index(flat, tuple(o.stop - o.start for o in owned)), axis=1)
    points += np.array([o.start for o in owned], dtype=np.int64)
    return _BlockStatistics(float(low), float(high), boxes, points, np.asarray(values, np.float64), float(floor),
                            block if keep else None)


def _largest_gradient(found, blocks, image, shape, low, high, reach, sigma, spacing, backend, limit,
                      scheduler) -> float:
    """The largest gradient magnitude of the normalised, blurred image, exactly as
    the in-memory detection computes it (``_gradient_task``), from the first pass's
    raw candidates.

    The normalisation is affine, so the normalised magnitude is the raw one over
    ``high - low`` up to float64 rounding (the blur's sums of a few dozen taps:
    below 1e-14 of the largest |value| per pixel, on either side); every voxel
    within ``tolerance`` (1e-6 of the largest raw magnitude, plus 1e-12 of the
    largest |value| per pixel) of the largest raw magnitude is
    evaluated exactly, on its own blur reach. A block whose left-out floor
    reaches that band (many near-equal gradients) is evaluated whole, as before."""
    top = max((float(f.values[0]) for f in found if len(f.values)), default=0.0)
    tolerance = _GRADIENT_TOLERANCE * top + 1e-12 * max(abs(low), abs(high)) / min(spacing)
    band = top - tolerance
    tasks = []
    for f, owned in zip(found, blocks):
        if f.floor >= band and len(f.values):  # not every voxel of the band was reported: the whole block
            region = _grow(owned, reach, shape)
            tasks.append((_source(image, region), owned, region))
            continue
        for point in f.points[f.values >= band]:
            voxel = tuple(slice(int(c), int(c) + 1) for c in point)
            region = _grow(voxel, reach, shape)
            tasks.append((_source(image, region), voxel, region))
    if not tasks:
        return 0.0
    return max(_Runner(None, len(tasks)).run(_gradient_task, [
        (source, owned, region, low, high, sigma, spacing, backend, limit) for source, owned, region in tasks],
        scheduler))


def _keeps_blocks(image, scheduler, regions, dtype, cache_bytes) -> bool:
    """Whether the first pass reads each block's whole detection region and keeps it
    for the detection pass (each block read once): a lazy array (Zarr, Dask, ...),
    local tasks, and every region together within ``cache_bytes`` of host memory
    (default: a quarter of the host's physical memory; for an H&E slide, 0).

    A slide's blocks are not kept by default: kept, its hematoxylin density (8 bytes
    per pixel, glass included) would make host memory grow with the slide up to the
    cache's size, where reading a slide block by block is meant to hold a few blocks;
    read again, a block costs the decoding of its tiles and the colour transform
    (about 14 Mpixel/s per thread on the 2-core VM, docs/qupath-fiji.md), little
    beside its detection on the CPU."""
    from ..detect._colour_blocks import HematoxylinBlocks

    if isinstance(image, np.ndarray) or _client(scheduler) is not None:
        return False
    if cache_bytes is None and isinstance(image, HematoxylinBlocks):
        return False
    if cache_bytes is None:
        try:
            cache_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
        except (ValueError, OSError, AttributeError):
            cache_bytes = 0
    total = sum(math.prod(s.stop - s.start for s in region) for region in regions) * np.dtype(dtype).itemsize
    return total <= cache_bytes


def _residuals(boxes, low: float, high: float, ndim: int) -> np.ndarray:
    """``_contrast.noise_residuals`` of the whole image from the raw boxes: the same
    normalisation and the same order of sums."""
    normalised = boxes.copy()
    normalised -= low
    normalised /= high - low
    total = np.zeros(len(boxes), dtype=np.float64)
    for k in range(3**ndim):
        total = total + normalised[:, k]
    return normalised[:, (3**ndim) // 2] - total / float(3**ndim)


def _gradient_task(source, owned, region, low, high, sigma, spacing, backend, limit):
    """The largest gradient magnitude over the voxels ``owned``, on the backend's
    own normalisation and blur (read with the blur's reach + 1): a block whose
    raw candidates are ambiguous, or one voxel of the band (``_largest_gradient``)."""
    from .._backend import gpu_memory_guard, use_numba

    block = _read(source)
    xp, device = _on_device(backend, limit)

    @gpu_memory_guard("detect_chunked (gradient pass)")
    def run():
        return float(_gradient_magnitude(block, owned, region, low, high, sigma, spacing, xp,
                                         xp is np and use_numba(xp, backend)).max())

    with device:
        return run()


def _gradient_magnitude(block, owned, region, low, high, sigma, spacing, xp, compiled: bool):
    """|grad| of the normalised (``low``, ``high``), blurred ``block`` (read at ``region``)
    at the voxels ``owned``, in the kernels' order of sums."""
    smoothed = _smoothed(block, sigma, low, high, xp, compiled)
    inner = _local(owned, region)
    grown = tuple(slice(max(s.start - 1, 0), min(s.stop + 1, n)) for s, n in zip(inner, smoothed.shape))
    crop = smoothed[grown]
    del smoothed
    # ((gz^2 + gy^2) + gx^2): the kernels' order, one component at a time, in place: at most three arrays
    # of the block at once (the blurred block, the sum, a component), as the blur's (GPU_BYTES_PER_VOXEL)
    total = None
    for axis, step in enumerate(spacing):
        g = _difference(crop, axis, float(step), xp)
        g *= g
        if total is None:
            total = g
        else:
            total += g
        del g
    magnitude = xp.sqrt(total, out=total)
    mine = tuple(slice(s.start - g.start, s.stop - g.start) for s, g in zip(inner, grown))
    return magnitude[mine]


def _difference(f, axis: int, h: float, xp):
    """One gradient component as ``ivote_diff`` (and ``np.gradient``, edge_order 1):
    central differences divided by 2h inside, one-sided at the ends, 0 on an axis of length 1.
    Written into one new array, without temporaries of the block's size (the same roundings)."""
    n = f.shape[axis]
    out = xp.zeros_like(f)
    if n < 2:
        return out

    def along(start, stop):
        return tuple(slice(start, stop) if k == axis else slice(None) for k in range(f.ndim))

    inside = out[along(1, n - 1)]
    xp.subtract(f[along(2, n)], f[along(0, n - 2)], out=inside)
    inside /= 2.0 * h
    out[along(0, 1)] = (f[along(1, 2)] - f[along(0, 1)]) / h
    out[along(n - 1, n)] = (f[along(n - 1, n)] - f[along(n - 2, n - 1)]) / h
    return out


def _smoothed(block, sigma, low, high, xp, compiled: bool):
    """The normalised, blurred block as the backend's detection computes it."""
    if xp is not np:
        from .._backend import to_device
        from ..detect._cuda import smoothed_block

        taps = tuple(sigma) if any(s > 0 for s in sigma) else None
        return smoothed_block(to_device(block, xp), taps, low, high)
    smoothed = block.astype(np.float64, order="C", copy=True)
    smoothed -= low
    smoothed /= high - low
    if any(s > 0 for s in sigma):
        if compiled:
            from ..detect._numba import _LOCK, gaussian_blur

            with _LOCK:
                smoothed = gaussian_blur(smoothed, sigma)
        else:
            from scipy import ndimage

            smoothed = ndimage.gaussian_filter(smoothed, sigma=sigma, mode="reflect")
    return smoothed
