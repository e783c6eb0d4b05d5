"""Many interacting level sets, one per seed, each in its own box (the driver).

The driver is shared by every backend: set-up, the block loop, the convergence
check, faint-object removal and merging are written once with ``xp``. The
evolution itself goes through one stepper per backend with the same entry
points (``fit``, ``prior``, ``run``, ``reinitialise``, ``labels``):
:class:`._reference.ReferenceStepper` (NumPy, the oracle),
:class:`._numba.NumbaStepper` (Numba kernels, the CPU default) and
:class:`._cuda.CudaStepper` (one fused CUDA launch per iteration).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .._backend import get_array_module, gpu_memory_guard, select_xp, to_device, to_host, use_numba
from .._typing import Array, ArrayLike, Callback, Spacing
from .._validate import (as_coordinates, as_float_image, check_count, check_image, check_positive, check_radius,
                         check_spacing, check_span)
from ._connect import Reconnection, one_region_per_label
from ._reference import ReferenceStepper
from ._report import SegmentReport
from ._shape_prior import ShapePrior, train_shape_prior

__all__ = ["segment_nuclei", "DEFAULT_WEIGHTS", "ChunkHooks", "INTENSITY_PERCENTILES", "percentile_ranks",
           "percentile_from_ranks", "box_half_widths"]

DEFAULT_WEIGHTS = {"lambda1": 1.0, "lambda2": 1.0, "mu": 0.2, "beta": 0.3, "omega": 3.0}
EPS = 1.0  # width of the smooth Heaviside, in units of the finest pixel
KAPPA_MAX = 1.0  # curvature clip: no front is sharper than one pixel


@dataclass
class Batch:
    """Every object's box, stacked: arrays of shape (N, *box_shape) unless noted."""

    image_box: object  # normalised intensities in each box (0 outside the image)
    valid: object  # bool: the cell lies inside the image
    frozen: object  # bool: box border or outside the image, never updated
    global_index: object  # flat index of each cell in the image (clamped)
    origins: object  # (N, ndim) int: image coordinates of each box's first cell
    sum_image: object  # (N,) float32: sum of I over valid cells
    n_valid: object  # (N,) float32
    image: object  # normalised image (flat), read by the CUDA kernel
    image_shape: tuple
    image_size: int
    box_shape: tuple
    spacing: tuple  # normalised so the finest axis is 1
    weights: dict
    eps: float
    kappa_max: float
    dt: float
    prior: ShapePrior


@dataclass
class ChunkHooks:
    """What a chunked run (:func:`ivote.distributed.segment_chunked`) injects into the call for
    one chunk, and what it reads back: the parts of the algorithm that are not per object box."""

    intensity_range: tuple | None = None
    """(lo, hi): the whole image's percentiles :data:`INTENSITY_PERCENTILES`, for the normalisation."""
    counted: np.ndarray | None = None
    """(N,) bool: the objects whose cells enter the convergence count (those the chunk owns)."""
    block_counts: list = field(default_factory=list)
    """Filled: (iterations done, cells that changed sign, inside cells) of the counted objects, per block."""
    merged: np.ndarray | None = None
    """Filled: (M, 2) pairs (label merged away, label kept) of the merge step."""


INTENSITY_PERCENTILES = (1.0, 99.5)  # the normalisation maps these percentiles of the image to 0 and 1


def percentile_ranks(n: int, q: float) -> tuple[int, int, float]:
    """Order statistics (0-based ranks below and above) and weight of the ``q``-th percentile of
    ``n`` values, linear interpolation (NumPy's default method)."""
    virtual = q / 100.0 * (n - 1)
    below = int(math.floor(virtual))
    return below, min(below + 1, n - 1), virtual - below


def percentile_from_ranks(below_value: float, above_value: float, weight: float) -> float:
    """The percentile from its two order statistics (float64), as :func:`percentile_ranks` says."""
    return float(below_value) + (float(above_value) - float(below_value)) * weight


def _intensity_range(image, xp) -> tuple[float, float]:
    """The image's :data:`INTENSITY_PERCENTILES`, from its exact order statistics, so that a
    chunked run that finds the same order statistics block by block gets the same numbers."""
    ranks = [percentile_ranks(image.size, q) for q in INTENSITY_PERCENTILES]
    wanted = sorted({r for below, above, _ in ranks for r in (below, above)})
    flat = image.ravel()
    ordered = np.partition(flat, wanted) if xp is np else xp.sort(flat)  # the same order statistics
    values = dict(zip(wanted, to_host(ordered[xp.asarray(wanted)]).tolist()))
    return tuple(percentile_from_ranks(values[below], values[above], w) for below, above, w in ranks)


PROFILE = None
"""Set to a list to collect, per call, {phase: (device ms, host ms)} (benchmarks only)."""
PROFILE_SYNC = False
"""With :data:`PROFILE`: wait for the GPU at every phase's end, so that a phase's host ms is its
own wall time (without it, the host runs ahead and a phase that reads a result to the host
shows, as host time, the wait for the queued work of the phases before it)."""


class _PhaseTimer:
    """Optional breakdown of a call into phases: CUDA events on the GPU (no sync until the
    end of the call), wall time on the host. Inactive (free) unless :data:`PROFILE` is a list."""

    def __init__(self, xp):
        self.active = PROFILE is not None
        if self.active:
            self.xp, self.gpu, self.marks = xp, xp is not np, []
            self.mark("start")

    def mark(self, name):
        if not self.active:
            return
        event = None
        if self.gpu:
            event = self.xp.cuda.Event()
            event.record()
            if PROFILE_SYNC:
                event.synchronize()
        self.marks.append((name, event, time.perf_counter()))

    def finish(self):
        if not self.active:
            return
        if self.gpu:
            self.marks[-1][1].synchronize()
        phases = {}
        for (_, e0, t0), (name, e1, t1) in zip(self.marks, self.marks[1:]):
            device = self.xp.cuda.get_elapsed_time(e0, e1) if self.gpu else 1e3 * (t1 - t0)
            gpu_ms, host_ms = phases.get(name, (0.0, 0.0))
            phases[name] = (gpu_ms + device, host_ms + 1e3 * (t1 - t0))
        PROFILE.append(phases)


def _check_seeds(seeds, shape) -> np.ndarray:
    """(N, ndim) float64 seeds inside the image, duplicates (same pixel) removed."""
    ndim = len(shape)
    seeds = as_coordinates(seeds, "seeds", ndim)
    if seeds.size == 0:
        return np.zeros((0, ndim))
    if seeds.ndim == 1 and seeds.size == ndim:
        seeds = seeds[None]
    if seeds.ndim != 2 or seeds.shape[1] != ndim:
        raise ValueError(
            f"seeds must be an (N, {ndim}) array of pixel coordinates for this {ndim}D image; got shape {seeds.shape}"
        )
    if not np.isfinite(seeds).all():
        raise ValueError("seeds contain NaN or infinite coordinates")
    rounded = np.rint(seeds).astype(np.int64)
    outside = np.any((rounded < 0) | (rounded >= np.asarray(shape)), axis=1)
    if outside.any():
        first_bad = np.flatnonzero(outside)[0]
        bad, pixel = seeds[first_bad], rounded[first_bad]
        raise ValueError(
            f"seeds must lie inside the image: each rounds to its nearest pixel, which must satisfy "
            f"0 <= pixel < {shape} per axis (-0.5 <= coordinate < size - 0.5); {int(outside.sum())} do not, "
            f"e.g. {bad.tolist()}, which rounds to {pixel.tolist()}"
        )
    _, first = np.unique(rounded, axis=0, return_index=True)
    return seeds[np.sort(first)]


def _normalise(image, polarity, xp, intensity_range=None):
    lo, hi = _intensity_range(image, xp) if intensity_range is None else intensity_range
    check_span(lo, hi, name="image")
    if not hi > lo:
        normalised = xp.zeros(image.shape, dtype=xp.float32)
    else:
        normalised = xp.clip((image - lo) / (hi - lo), 0.0, 1.0).astype(xp.float32)
    if polarity == "dark":
        normalised = np.float32(1.0) - normalised
    return normalised


def _time_step(weights, spacing) -> float:
    """Largest stable explicit step: fronts move at most half a pixel per iteration
    (CFL on the bounded forces) and the curvature term stays below the diffusion limit."""
    delta_max = 1.0 / (math.pi * EPS)
    force_max = (abs(weights["mu"]) * KAPPA_MAX + max(abs(weights["lambda1"]), abs(weights["lambda2"]))
                 + abs(weights["beta"]) + abs(weights["omega"]))
    dt_cfl = 0.9 / (delta_max * max(force_max, 1e-6))
    inv_h2 = sum(1.0 / h**2 for h in spacing)
    dt_curv = 0.9 * 0.5 / inv_h2 / (max(abs(weights["mu"]), 1e-6) * delta_max)
    return min(dt_cfl, dt_curv)


def box_half_widths(radius_n: float, spacing_n, box_factor: float) -> list[int]:
    """Half-width (pixels, per axis) of every object's box: ``radius_n`` in units of the finest
    pixel, ``spacing_n`` normalised so the finest axis is 1."""
    return [int(math.ceil(box_factor * radius_n / h)) + 1 for h in spacing_n]


def _build_batch(image, seeds, radius_px_phys, spacing_n, weights, box_factor, xp):
    ndim = image.ndim
    n = len(seeds)
    half = box_half_widths(radius_px_phys, spacing_n, box_factor)
    box_shape = tuple(2 * h + 1 for h in half)
    origins_h = np.rint(seeds).astype(np.int64) - np.asarray(half)
    origins = xp.asarray(origins_h)
    shape = np.asarray(image.shape)
    coords = []
    valid = xp.ones((n,) + box_shape, dtype=bool)
    for axis in range(ndim):
        s = [1] * (ndim + 1)
        s[axis + 1] = box_shape[axis]
        c = origins[:, axis].reshape((n,) + (1,) * ndim) + xp.arange(box_shape[axis]).reshape(s)
        valid &= (c >= 0) & (c < int(shape[axis]))
        coords.append(xp.clip(c, 0, int(shape[axis]) - 1))
    global_index = xp.zeros((n,) + box_shape, dtype=xp.int64)
    for axis in range(ndim):
        global_index = global_index * int(shape[axis]) + coords[axis]
    flat = image.ravel()
    image_box = xp.where(valid, flat[global_index], np.float32(0)).astype(xp.float32)
    border = xp.zeros(box_shape, dtype=bool)
    for axis in range(ndim):
        index = [slice(None)] * ndim
        index[axis] = [0, box_shape[axis] - 1]
        border[tuple(index)] = True
    frozen = ~valid | border[None]
    sum_image = image_box.reshape(n, -1).sum(axis=1).astype(xp.float32)
    n_valid = valid.reshape(n, -1).sum(axis=1).astype(xp.float32)
    return Batch(
        image_box=image_box, valid=valid, frozen=frozen, global_index=global_index, origins=origins,
        sum_image=sum_image, n_valid=n_valid, image=flat, image_shape=tuple(image.shape), image_size=int(image.size),
        box_shape=box_shape, spacing=tuple(spacing_n), weights=dict(weights), eps=EPS, kappa_max=KAPPA_MAX,
        dt=_time_step(weights, spacing_n), prior=train_shape_prior(ndim),
    )


def _initial_level_sets(seeds, batch, init_radius, xp):
    """Signed distance (positive inside) to a sphere of ``init_radius`` around each seed."""
    n = len(seeds)
    ndim = len(batch.box_shape)
    local = xp.asarray(seeds - (batch.origins.get() if hasattr(batch.origins, "get") else batch.origins))
    d2 = xp.zeros((n,) + batch.box_shape, dtype=xp.float32)
    for axis in range(ndim):
        s = [1] * (ndim + 1)
        s[axis + 1] = batch.box_shape[axis]
        offset = (xp.arange(batch.box_shape[axis]).reshape(s) - local[:, axis].reshape((n,) + (1,) * ndim))
        d2 = d2 + (offset * batch.spacing[axis]) ** 2
    return (np.float32(init_radius) - xp.sqrt(d2)).astype(xp.float32)


def _object_membership(labels, batch, xp):
    """(N, *box) bool: the box cell lies in the image and its pixel carries the box's label.

    Object k's pixels all lie in box k, so per-object counts and sums reduce over the boxes
    (no image-wide bincount, whose background bin is one hot atomic on the GPU)."""
    n = batch.valid.shape[0]
    own = labels.ravel()[batch.global_index]
    return (own == xp.arange(1, n + 1, dtype=own.dtype).reshape((n,) + (1,) * (own.ndim - 1))) & batch.valid


def _object_sizes(labels, batch, xp):
    """(N + 1,) host int64: pixels of each label (index 0 unused)."""
    n = batch.valid.shape[0]
    counts = _object_membership(labels, batch, xp).reshape(n, -1).sum(axis=1)
    return np.concatenate([[0], to_host(counts).astype(np.int64)])


def _drop_faint(labels, phi, batch, min_contrast, xp):
    """Remove objects whose mean (normalised) intensity exceeds that of the rest of
    their box by less than ``min_contrast``: seeds on background or debris.

    Returns the labels and the (N + 1,) int64 sizes of the objects kept (0 for removed ones), both
    on ``xp``: nothing waits for the GPU here (the merge reads the sizes with its touching pairs)."""
    n = phi.shape[0]
    mine = _object_membership(labels, batch, xp)
    counts = mine.reshape(n, -1).sum(axis=1).astype(xp.float64)
    sums = xp.where(mine, batch.image_box, np.float32(0)).astype(xp.float64).reshape(n, -1).sum(axis=1)
    mean_in = sums / xp.maximum(counts, 1)
    rest = batch.valid & ~mine
    mean_out = (batch.image_box * rest).reshape(n, -1).sum(axis=1) / xp.maximum(rest.reshape(n, -1).sum(axis=1), 1)
    faint = (counts == 0) | (mean_in - mean_out < min_contrast)
    keep = xp.concatenate([xp.zeros(1, dtype=bool), ~faint])
    sizes = xp.concatenate([xp.zeros(1, dtype=xp.float64), xp.where(faint, 0.0, counts)])
    return xp.where(keep[labels], labels, 0).astype(xp.int32), sizes.astype(np.int64)


_BYTES_PER_CELL = 160  # per box cell: level set, image, masks, flat indices, distances, step temporaries


def _check_work(n_seeds, shape, radius, spacing, box_factor, iterations, gpu) -> None:
    """Refuse (ResourceLimitError) before set-up when the seeds' boxes would exceed the memory
    or the iterations the work limit of ``ivote._limits`` (memory on the host only)."""
    from .._limits import check_budget

    h_min = min(spacing)
    box = [2 * h + 1 for h in box_half_widths(radius / h_min, [s / h_min for s in spacing], box_factor)]
    cells = n_seeds * math.prod(box)
    check_budget(
        f"segment_nuclei with {n_seeds} seeds in boxes of {'x'.join(map(str, box))} pixels (radius {radius:g})",
        memory=None if gpu else cells * _BYTES_PER_CELL, work=cells * max(iterations, 1), gpu=gpu,
        advice="use a smaller radius, fewer seeds or iterations, or segment the image in pieces",
    )


def _stepper(batch, xp, backend: str, *, block_length: int, use_graph: bool):
    """The backend's stepper (the same entry points: fit, prior, run, reinitialise, labels):
    CUDA kernels on CuPy, Numba kernels on NumPy when ``use_numba``, else the NumPy reference."""
    if xp is not np:
        from ._cuda import CudaStepper

        return CudaStepper(batch, block_length=block_length, use_graph=use_graph)
    if use_numba(xp, backend):
        from ._numba import NumbaStepper

        return NumbaStepper(batch, block_length=block_length)
    return ReferenceStepper(batch, block_length=block_length)


@gpu_memory_guard("segment_nuclei")
def segment_nuclei(
    image: ArrayLike | Array,
    seeds: ArrayLike | Array,
    *,
    radius: float,
    spacing: Spacing = None,
    iterations: int = 300,
    polarity: str = "bright",
    lambda1: float = DEFAULT_WEIGHTS["lambda1"],
    lambda2: float = DEFAULT_WEIGHTS["lambda2"],
    mu: float = DEFAULT_WEIGHTS["mu"],
    shape_weight: float = DEFAULT_WEIGHTS["beta"],
    overlap_weight: float = DEFAULT_WEIGHTS["omega"],
    init_radius: float = 0.5,
    box_factor: float = 1.5,
    reinit_every: int = 50,
    tol: float = 1e-3,
    min_contrast: float = 0.1,
    merge_solidity: float = 0.9,
    iter_callback: Callback = None,
    backend: str = "auto",
    use_graph: bool = True,
    return_report: bool = False,
    _chunk: ChunkHooks | None = None,
) -> Array | tuple[Array, SegmentReport]:
    """Segment nuclei by many interacting level sets, one per seed.

    Each seed starts a level set (a sphere of ``init_radius * radius``) in its
    own box of half-width about ``box_factor * radius``, so memory grows with
    the number of nuclei, not with nuclei times image size. All level sets
    evolve together under a Chan-Vese region term, an elliptical shape prior,
    a penalty on overlaps with the other objects and curvature regularisation
    (Ali & Madabhushi 2011, 2012). Derivatives respect ``spacing`` (3D
    anisotropic volumes included).

    Parameters
    ----------
    image : (Y, X) or (Z, Y, X) array
        Grey-level image (NumPy or CuPy).
    seeds : (N, ndim) array_like
        Seed points in pixel coordinates, e.g. from ``ivote.detect``; seeds in
        the same pixel count once.
    radius : float
        Largest expected nucleus radius in the units of ``spacing``.
    spacing : sequence of float, optional
        Pixel size along each axis (default 1).
    iterations : int
        Most iterations; fewer when the fronts stop moving (``tol``).
    polarity : {'bright', 'dark'}
        Nuclei brighter or darker than the background.
    lambda1, lambda2 : float
        Chan-Vese weights of the inside and outside fits. Equal weights put the
        front at half way between the mean intensities inside and outside (the
        half-maximum of a blurred edge); a larger ``lambda2`` grows objects
        into dimmer surroundings. Whatever the weights, the inside mean is held
        at least 0.05 (of the normalised range) above the outside one, so no
        object fits the dark background.
    mu : float
        Curvature (smoothness) weight.
    shape_weight : float
        Weight of the elliptical shape prior.
    overlap_weight : float
        Weight of the overlap penalty between objects.
    init_radius : float
        Initial sphere radius as a fraction of ``radius``.
    box_factor : float
        Box half-width as a multiple of ``radius``.
    reinit_every : int
        Iterations between reinitialisations to a signed distance (also the
        interval of shape-prior fits, convergence checks and callbacks).
    tol : float
        Stop when fewer than ``tol`` times the inside cells changed sign over
        the last ``reinit_every`` iterations; 0 runs all iterations.
    min_contrast : float
        Objects whose mean intensity exceeds the rest of their box by less than
        this (on the image normalised to its 1st-99.5th percentiles) are
        removed: seeds on background or debris. 0 keeps every object that the
        evolution keeps (a level set no brighter than its box shrinks away, see
        ``lambda1, lambda2``; the report counts it as empty).
    merge_solidity : float
        Two touching objects whose union is convex (solidity at least this)
        and no larger than a ball of ``radius`` are merged: one nucleus that
        got two seeds. 0 never merges.
    iter_callback : callable, optional
        ``iter_callback(iteration, changed_fraction)`` after every block of
        ``reinit_every`` iterations; raising from it cancels.
    backend : {'auto', 'numpy', 'numba', 'cupy'}
        'auto' runs on CuPy for CuPy input, else on the default backend
        (``IVOTE_BACKEND``); 'numba' the compiled CPU kernels, 'numpy' the
        NumPy reference. The CPU paths agree to float32 rounding.
    use_graph : bool
        On the GPU, replay each block of iterations as one CUDA graph.
    return_report : bool
        Also return a :class:`SegmentReport`: how many seeds became nuclei and
        why the others were dropped (duplicate, faint, empty, merged).

    Returns
    -------
    labels : int32 array of the image's shape (NumPy or CuPy, as the backend)
        Label k + 1 for the k-th (deduplicated) seed, 0 for background; a
        pixel goes to the object whose level set is largest and positive there.
        Labels of removed (faint) or merged objects are absent, so there is at
        most one label per seed. Each label is one face-connected region (the
        one holding its seed; detached pieces go to the background or to the
        nucleus that surrounds them, see :func:`one_region_per_label`).
    report : SegmentReport
        Only with ``return_report=True``.

    References
    ----------
    .. [1] S. Ali, A. Madabhushi, "Graphical processing unit implementation of an
       integrated shape-based active contour: application to digital pathology",
       J. Pathol. Inform. 2:13 (2011). :DOI:`10.4103/2153-3539.92029`
    .. [2] S. Ali, A. Madabhushi, "An integrated region-, boundary-, shape-based
       active contour for multiple object overlap resolution in histological
       imagery", IEEE Trans. Med. Imaging 31(7):1448-1460 (2012).
       :DOI:`10.1109/TMI.2012.2190089`

    Examples
    --------
    >>> from ivote.data import synthetic_nuclei
    >>> from ivote.segment import segment_nuclei
    >>> image, truth, centers, *_ = synthetic_nuclei((96, 96), radius=8, seed=3)
    >>> labels = segment_nuclei(image, centers, radius=8, iterations=100, backend="numpy")
    >>> labels.shape == image.shape, int(labels.max()) <= len(centers)
    (True, True)
    """
    image = check_image(image)
    ndim = image.ndim
    spacing = check_spacing(spacing, ndim)
    radius = check_radius(radius, image.shape, spacing)
    if polarity not in ("bright", "dark"):
        raise ValueError(f"polarity must be 'bright' or 'dark'; got {polarity!r}")
    iterations = check_count(iterations, "iterations", allow_zero=True)
    reinit_every = check_count(reinit_every, "reinit_every")
    box_factor = check_positive(box_factor, "box_factor")
    init_radius = check_positive(init_radius, "init_radius", upper=box_factor)
    tol = check_positive(tol, "tol", allow_zero=True)
    min_contrast = check_positive(min_contrast, "min_contrast", allow_zero=True)
    merge_solidity = check_positive(merge_solidity, "merge_solidity", upper=1.0, allow_zero=True)
    weights = {"lambda1": lambda1, "lambda2": lambda2, "mu": mu, "beta": shape_weight, "omega": overlap_weight}
    for name, value in zip(("lambda1", "lambda2", "mu", "shape_weight", "overlap_weight"), weights.values()):
        check_positive(value, name, allow_zero=True)
    n_given = _count_seeds(as_coordinates(seeds, "seeds", len(image.shape)))
    seeds = _check_seeds(seeds, image.shape)
    xp = select_xp(backend, image)
    _check_work(len(seeds), image.shape, radius, spacing, box_factor, iterations, xp is not np)
    if len(seeds) == 0:
        labels = xp.zeros(image.shape, dtype=xp.int32)
        return (labels, _report(n_given, seeds, {}, Reconnection(0, 0, 0, 0))) if return_report else labels
    timer = _PhaseTimer(xp)

    image = to_device(as_float_image(image), xp)
    h_min = min(spacing)
    spacing_n = tuple(s / h_min for s in spacing)
    radius_n = radius / h_min  # radius in units of the finest pixel
    normalised = _normalise(image, polarity, xp, None if _chunk is None else _chunk.intensity_range)
    batch = _build_batch(normalised, seeds, radius_n, spacing_n, weights, box_factor, xp)
    phi = _initial_level_sets(seeds, batch, init_radius * radius_n, xp)
    clip = max(3.0, 0.5 * radius_n)

    stepper = _stepper(batch, xp, backend, block_length=reinit_every, use_graph=use_graph)
    timer.mark("set-up")

    # the convergence count needs the host (one small read per block): only when it is used
    check = tol > 0 or iter_callback is not None or _chunk is not None
    counted = None
    if _chunk is not None and _chunk.counted is not None:
        counted = xp.asarray(_chunk.counted).reshape((-1,) + (1,) * ndim) & batch.valid
    done = 0
    previous = (phi > 0) & batch.valid if check else None
    while done < iterations:
        count = min(reinit_every, iterations - done)
        if done > 0:
            phi = stepper.reinitialise(phi, clip)
            timer.mark("reinitialise")
        stepper.prior(stepper.fit(phi))
        timer.mark("fit + prior")
        phi = stepper.run(phi, count)
        done += count
        timer.mark("iterations")
        if check:
            inside = (phi > 0) & batch.valid
            if counted is None:
                counts = to_host(xp.stack([(inside != previous).sum(), inside.sum()]))
            else:
                counts = to_host(xp.stack([((inside != previous) & counted).sum(), (inside & counted).sum()]))
            if _chunk is not None:
                _chunk.block_counts.append((done, int(counts[0]), int(counts[1])))
            fraction = int(counts[0]) / max(int(counts[1]), 1)
            previous = inside
            timer.mark("convergence check")
            if iter_callback is not None:
                iter_callback(done, fraction)
            if fraction < tol:
                break
    labels = stepper.labels(phi)
    timer.mark("labels")
    present = {"evolved": _present(labels, len(seeds))} if return_report else {}
    sizes = None
    if min_contrast > 0:
        labels, sizes = _drop_faint(labels, phi, batch, min_contrast, xp)
        timer.mark("drop faint")
    if return_report:
        present["contrast"] = _present(labels, len(seeds))
    if merge_solidity > 0:
        from ._merge import max_volume_pixels, merge_split_objects

        if sizes is None:
            sizes = _object_sizes(labels, batch, xp)
        origins = to_host(batch.origins)
        before = labels
        labels = merge_split_objects(labels, max_volume=max_volume_pixels(radius, spacing),
                                     min_solidity=merge_solidity, boxes=(origins, batch.box_shape), sizes=sizes,
                                     mark=timer.mark if timer.active else None)
        timer.mark("merge")
        if _chunk is not None:
            moved = before != labels
            _chunk.merged = np.unique(np.stack([to_host(before[moved]), to_host(labels[moved])], axis=1), axis=0)
    labels, reconnection = one_region_per_label(labels, seeds)
    timer.mark("one region per label")
    timer.finish()
    if return_report:
        present["merge"] = _present(labels, len(seeds))
        return labels, _report(n_given, seeds, present, reconnection)
    return labels


def _count_seeds(seeds) -> int:
    shape = np.shape(seeds)
    return 0 if int(np.prod(shape)) == 0 else (1 if len(shape) == 1 else int(shape[0]))


def _present(labels, n) -> np.ndarray:
    """(n + 1,) host bool: which labels 0..n have a pixel."""
    xp = get_array_module(labels)
    return to_host(xp.bincount(labels.ravel(), minlength=n + 1) > 0)


def _report(n_given, seeds, present, reconnection) -> SegmentReport:
    """Count what each stage removed from the ``present`` masks (evolved, contrast, merge)."""
    n = len(seeds)
    if not present:
        return SegmentReport(n_given, n_given - n, 0, 0, 0, 0, reconnection)
    evolved, contrast, merged = present["evolved"][1:], present["contrast"][1:], present["merge"][1:]
    return SegmentReport(seeds=n_given, duplicates=n_given - n, objects=int(merged.sum()),
                         faint=int((evolved & ~contrast).sum()), empty=int((~evolved).sum()),
                         merged=int((contrast & ~merged).sum()), reconnection=reconnection)
