"""Iterative voting on an image larger than memory, block by block, equal to the in-memory result.

The rules (see ``docs/scale.md``):

1. **Blocks and halo.** The image is cut into blocks (``chunks``); each block
   owns its voxels and is detected on a region grown by a halo on every side
   (clipped to the image). The halo is the detection's reach
   (:func:`detection_halo`): the blur's taps, one voxel of gradient, the votes
   and turns of every pass, the local-maximum box and the contrast window. A
   voxel of a block that far from the block's sides gets the vote of the
   in-memory detection, exactly.
2. **Global statistics, computed globally.** The in-memory detection uses four
   numbers of the whole image: its minimum and maximum (normalisation), the
   largest gradient of the normalised, blurred image (voter weights) and the
   noise's standard deviation (contrast test). One first pass reads each block
   once and reduces them: minimum, maximum, the raw 3^ndim boxes of the noise
   grid (``_contrast.noise_positions`` of the whole image's shape) that a block
   owns, and the owned voxels of the largest gradients of the blurred raw block;
   the largest normalised gradient, on the backend's own blur, is then computed
   exactly at those few voxels (``_largest_gradient``: the normalisation is
   affine, so it is attained within a rounding band of the raw maximum). The
   detection pass then runs every block with them
   (``detect._result.GlobalStatistics``, injected into the NumPy, Numba and
   CUDA paths), instead of the block's own. Where every block's detection
   region fits ``cache_bytes``, the first pass reads it whole and keeps it, so
   each block is read once in all.
5. **Voters a pass needs.** Pass k of a block's detection runs only the voters
   its owned voxels' votes need (``detect._reach``): the first pass those of
   the whole halo, the last those within the maxima box and one voting reach.
3. **Ownership.** A block keeps the local maxima at voxels it owns: none is
   found twice, none is lost at a seam.
4. **Global decisions, globally.** The maxima of every block are sorted best
   first (ties: lower flat index of the whole image, as in memory), maxima
   closer than the radius are suppressed by one greedy scan over the whole
   image, and the threshold rule (default `auto`, or Otsu's, the reference rule) and the contrast test
   are applied to all candidates together.

Host memory holds one block per running task and the candidates (a few numbers
per local maximum), never the image. On a GPU a block runs under a memory
limit (CuPy's pool), one block at a time per GPU.

Where each part lives: this module checks the arguments and runs the passes;
``_detect_chunks`` the halo, the memory a block needs and the chunking;
``_detect_statistics`` the first pass (rule 2); ``_detect_block`` one block's
detection; ``_detect_merge`` the global decisions (rule 4); ``_tasks`` the
block reads, the GPU's memory limit and the Dask runner that every chunked
stage shares.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ._detect_block import _detect_task, _whole_task
from ._detect_chunks import (_block_cost, _blocks, _check_block_memory, _check_run_work, _grow, _owned_rows,
                            _resolve_chunks, _resolve_halo, detection_halo)
from ._detect_merge import _detections, _suppress
from ._detect_statistics import _keeps_blocks, _largest_gradient, _residuals, _statistics_task
from ._tasks import _Runner, _is_dask, _memory_limit, _read, _source, _workers

__all__ = ["detect_chunked", "detect_dask", "detection_halo"]

_DETECT_OPTIONS = ("polarity", "blur", "threshold", "min_contrast", "backend", "stains", "tissue")


def detect_chunked(image, radius, *, spacing=None, chunks=None, scheduler=None,
                   progress: Callable[[int, int], Any] | None = None, halo=None, memory_limit=None,
                   on_block: Callable[[np.ndarray, np.ndarray], Any] | None = None, cache_bytes=None,
                   **detect_kwargs):
    """Detect nuclei block by block, with the result of :func:`ivote.iterative_voting`.

    Parameters
    ----------
    image : 2D or 3D grey, or 2D RGB(A) (Y, X, 3|4), array-like
        NumPy, Dask or Zarr array (anything sliceable that gives array blocks);
        only the blocks of running tasks are in memory. RGB is read as H&E, each
        block as its hematoxylin density with the slide-wide ``stains`` and
        white level, glass skipped with a ``tissue`` mask
        (``ivote.detect._colour_blocks.HematoxylinBlocks``).
    radius : float or 'auto'
        Largest nucleus radius, in the units of ``spacing`` (as in
        :func:`ivote.iterative_voting`). ``'auto'`` estimates it on the image's
        central crop (``ivote.detect._radius.central_crop``, read alone): the
        in-memory estimate of the same image.
    spacing : sequence of float, optional
        Pixel size per axis.
    chunks : int or tuple of int, optional
        The voxels each block owns. Default: the blocks (with their halo) that
        fit ``memory_limit`` and read the fewest voxels in all, at least one per
        worker of a distributed cluster; one block when the whole image fits
        (then one task runs :func:`ivote.iterative_voting` on it).
    scheduler : str or dask.distributed.Client, optional
        Dask scheduler of the tasks (``"threads"``, ``"sync"``, ``"processes"``);
        default: the active ``dask.distributed.Client`` (see
        :func:`ivote.distributed.cluster`), else threads.
    progress : callable, optional
        ``progress(done, total)`` in this thread as block tasks finish (two
        passes over the blocks: ``total`` is their sum; 1 for one block). Raising
        from it stops the run; the exception propagates.
    on_block : callable, optional
        ``on_block(points, scores)`` in this thread as each block's detection
        finishes, for showing cells while the run goes on: the (N, ndim) pixel
        coordinates and scores of the maxima the block owns that pass the
        contrast test (against the whole image's noise). They are provisional:
        the suppression of maxima closer than the radius across seams and the
        score threshold need every block, so the returned ``points`` are a subset
        of all that was streamed. One block: called once with the final points.
        Raising from it stops the run, as from ``progress``.
    halo : int or tuple of int, optional
        Override the exact halo (:func:`detection_halo`); smaller is faster but
        cells near seams may differ from the in-memory result.
    memory_limit : int or str, optional
        Bytes (``"8GB"``) one block's detection may use: GPU memory on a GPU
        (enforced through CuPy's memory pool during the block), host memory on
        the CPU. Default: three quarters of the GPU's memory, or 2 GiB on the CPU.
    cache_bytes : int, optional
        Host memory the blocks read by the first pass may keep for the detection
        pass, so that each block is read once: when every block's detection
        region fits (a lazy array such as Zarr, local scheduler), the first pass
        reads them whole and keeps them; otherwise it reads each block with a
        few voxels of margin and the detection pass reads it again. Default: a
        quarter of the host's physical memory, 0 for an H&E slide (its density
        kept would grow with the slide); 0: never keep.
    **detect_kwargs
        ``polarity``, ``blur``, ``threshold``, ``min_contrast``, ``backend``,
        ``stains`` (RGB), as in :func:`ivote.iterative_voting`; ``tissue`` (RGB:
        None, ``'auto'`` or a ``TissueMask``; glass reads as 0 and its blocks
        are not detected).

    Returns
    -------
    Detections
        As :func:`ivote.iterative_voting` (no ``vote_field``): the same cells,
        scores, candidates and threshold.

    Examples
    --------
    >>> import numpy as np
    >>> from ivote import iterative_voting
    >>> from ivote.data import synthetic_nuclei
    >>> from ivote.distributed import detect_chunked
    >>> image, labels, centers, *_ = synthetic_nuclei((150, 150), radius=4, seed=1)
    >>> chunked = detect_chunked(image, 4, chunks=50, scheduler="sync", backend="numpy")
    >>> whole = iterative_voting(image, radius=4, backend="numpy")
    >>> np.array_equal(chunked.points, whole.points), len(chunked.points)
    (True, 194)
    """
    from .._backend import select_xp, use_numba
    from .._validate import check_finite_range, check_radius
    from ..detect._contrast import grey_step, noise_positions, noise_sigma
    from ..detect._plan import make_plan
    from ..detect._settings import _check_work, check_settings
    from ..detect._thresholds import _DEFAULT_MIN_CONTRAST

    unknown = sorted(set(detect_kwargs) - set(_DETECT_OPTIONS))
    if unknown:
        raise TypeError(f"detect_chunked got unsupported option(s) {', '.join(unknown)}; it takes "
                        f"{', '.join(_DETECT_OPTIONS)} (features are not chunked)")
    from ..detect._colour_blocks import HematoxylinBlocks

    colour = {k: detect_kwargs.pop(k) for k in ("stains", "tissue") if k in detect_kwargs}
    if len(getattr(image, "shape", ())) == 3 and image.shape[-1] in (3, 4):  # H&E: each block's hematoxylin
        image = HematoxylinBlocks(image, **colour)
    elif any(v is not None for v in colour.values()):
        raise ValueError(f"{' and '.join(colour)} are for RGB(A) images (Y, X, 3|4); this image is grey")
    if isinstance(image, HematoxylinBlocks):
        detect_kwargs["polarity"] = "bright"  # hematoxylin density: nuclei bright, as in memory
    shape, dtype = _check_array(image)
    ndim = len(shape)
    polarity = detect_kwargs.get("polarity", "bright")
    threshold = detect_kwargs.get("threshold", "auto")
    spacing, blur, min_contrast = check_settings(shape, spacing, polarity, detect_kwargs.get("blur"),
                                                 detect_kwargs.get("min_contrast", _DEFAULT_MIN_CONTRAST), threshold)
    backend = detect_kwargs.get("backend", "auto")
    xp = select_xp(backend)
    estimated = isinstance(radius, str) and radius.strip().lower() == "auto"
    if estimated:
        radius = _estimate_radius(image, shape, spacing, polarity, backend)
    elif isinstance(radius, str):
        raise ValueError(f"radius must be a positive number or 'auto'; got {radius!r}")
    radius = check_radius(radius, shape, spacing)
    for name, callback in (("progress", progress), ("on_block", on_block)):
        if callback is not None and not callable(callback):
            raise TypeError(f"{name} must be callable; got {callback!r}")
    from ..detect._memory import check_radius_memory  # every block builds the radius' tables

    check_radius_memory("detect_chunked", ndim, radius, spacing,
                        "cupy" if xp is not np else ("numba" if use_numba(xp, backend) else "numpy"))
    plan = make_plan(radius, spacing, ndim)
    sign = 1.0 if polarity == "bright" else -1.0
    sigma = tuple(blur / s for s in spacing) if blur > 0 else (0.0,) * ndim
    halo = _resolve_halo(halo, plan, sigma)
    gpu = xp is not np
    compiled = not gpu and use_numba(xp, backend)
    name = "cupy" if gpu else ("numba" if compiled else "numpy")
    limit = _memory_limit(memory_limit, gpu)
    cost = _block_cost(name, dtype, ndim)
    chunks = _resolve_chunks(chunks, shape, halo, limit, cost, _workers(scheduler))
    _check_block_memory(chunks, shape, halo, limit, cost)
    blocks = _blocks(shape, chunks)
    _check_run_work(blocks, shape, halo, plan, spacing, blur, gpu)
    if len(blocks) == 1:  # the image fits: one task, the in-memory detection itself
        options = dict(radius="auto" if estimated else radius, spacing=spacing, polarity=polarity, blur=blur,
                       threshold=threshold, min_contrast=min_contrast, backend=backend)
        found = _Runner(progress, 1).run(_whole_task, [(_source(image, blocks[0]), options, limit)], scheduler)[0]
        if on_block is not None:
            on_block(found.points, found.scores)
        return found
    runner = _Runner(progress, 2 * len(blocks))

    # pass 1, each block read once: minimum, maximum, the noise grid's boxes and the largest raw gradients
    reach = tuple(int(4 * s + 0.5) + 1 if s > 0 else 1 for s in sigma)
    detect_regions = [_grow(owned, halo, shape) for owned in blocks]
    keep = _keeps_blocks(image, scheduler, detect_regions, dtype, cache_bytes)
    noise_coords = np.stack(np.unravel_index(noise_positions(shape), shape), axis=1)
    found = runner.run(_statistics_task, [
        (_source(image, region if keep else _grow(owned, reach, shape)), owned,
         region if keep else _grow(owned, reach, shape), _owned_rows(noise_coords, owned), reach, sigma, spacing,
         backend, limit, keep) for owned, region in zip(blocks, detect_regions)], scheduler)
    low = min(f.low for f in found)
    high = max(f.high for f in found)
    check_finite_range([low, high], name="image")
    if not high > low:  # constant image: no gradient, no voter, no cell (as in memory)
        runner.skip(len(blocks))
        return _detections(np.zeros((0, ndim)), np.zeros(0), np.zeros(0), plan, threshold, min_contrast, 0, name,
                           spacing, estimated)
    boxes = np.concatenate([f.boxes for f in found]) if found else np.zeros((0, 3**ndim))
    sigma_noise = noise_sigma(_residuals(boxes, low, high, ndim), ndim, grey_step(dtype, low, high))
    largest = _largest_gradient(found, blocks, image, shape, low, high, reach, sigma, spacing, backend, limit,
                                scheduler)

    # pass 2: the detection of every block with the whole image's statistics
    from ..detect._result import GlobalStatistics

    given = GlobalStatistics(float(low), float(high), float(largest), float(sigma_noise))
    _check_work(tuple(min(n, c + 2 * h) for n, c, h in zip(shape, chunks, halo)), plan, spacing, blur, gpu,
                "numba" if compiled else "numpy")

    def stream(block_result):
        coords, values, contrast = block_result
        passing = np.asarray(contrast) >= min_contrast
        on_block(coords[passing].astype(np.float64), values[passing] / float(plan.weight_scale))

    glass = getattr(image, "is_glass", None)  # a block without tissue (halo included) has no vote: skipped
    detected = [k for k, region in enumerate(detect_regions) if glass is None or not glass(region)]
    if len(detected) < len(blocks):
        runner.skip(len(blocks) - len(detected))
    sources = [found[k].block if keep else _source(image, detect_regions[k]) for k in detected]
    del found
    results = runner.run(_detect_task, [
        (source, blocks[k], detect_regions[k], plan, sign, blur, spacing, given, backend, limit)
        for source, k in zip(sources, detected)], scheduler,
        each=None if on_block is None else stream)
    del sources
    coords = np.concatenate([r[0] for r in results]) if results else np.zeros((0, ndim), np.int64)
    values = np.concatenate([r[1] for r in results]) if results else np.zeros(0, np.int64)
    contrast = np.concatenate([r[2] for r in results]) if results else np.zeros(0)
    coords, values, contrast = _suppress(coords, values, contrast, shape, plan)
    return _detections(coords.astype(np.float64), values / float(plan.weight_scale), contrast, plan, threshold,
                       min_contrast, plan.n_passes, name, spacing, estimated)


def detect_dask(image, *, radius, spacing=None, polarity="bright", blur=None, threshold="auto", min_contrast=3.0,
                backend="auto", **unsupported):
    """``ivote.iterative_voting`` of a Dask array: :func:`detect_chunked` with its
    default blocks (those that fit the memory; one when the array fits). RGB,
    features, stains, the vote field and ``iter_callback`` are not chunked."""
    given = sorted(name for name, value in unsupported.items() if value is not None and value is not False)
    if given:
        raise ValueError(f"iterative_voting on a Dask array runs block by block (ivote.distributed.detect_chunked), "
                         f"which does not take {', '.join(given)}; compute the array first (image.compute()) to "
                         "use them")
    return detect_chunked(image, radius, spacing=spacing, polarity=polarity, blur=blur, threshold=threshold,
                          min_contrast=min_contrast, backend=backend)


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------


def _check_array(image) -> tuple:
    shape = getattr(image, "shape", None)
    dtype = getattr(image, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"image must be an array (NumPy, Dask, Zarr); got {type(image).__name__}")
    shape = tuple(int(n) for n in shape)
    dtype = np.dtype(dtype)
    if len(shape) not in (2, 3):
        raise ValueError(f"image must be 2D (Y, X) or 3D (Z, Y, X) grey; got shape {shape}")
    if dtype.kind not in "biuf":
        raise TypeError(f"image must be real-valued (bool, integer or float); got dtype {dtype}")
    if math.prod(shape) == 0:
        raise ValueError(f"image is empty (shape {shape})")
    return shape, dtype


def _estimate_radius(image, shape, spacing, polarity, backend) -> float:
    """``radius='auto'``: ``ivote.detect.estimate_radius`` on the image's central crop,
    read alone (the crop the in-memory estimate measures: ``_radius.central_crop``)."""
    from .._backend import use_numba
    from ..detect._radius import _grey_signal, auto_radius, central_crop

    crop = central_crop(shape)
    data = _read(_source(image, crop)) if not _is_dask(image) else np.asarray(image[crop].compute())
    signal, spacing, sign, xp = _grey_signal(data, spacing, polarity, None, backend)
    path = "cupy" if xp is not np else ("numba" if use_numba(xp, backend) else "numpy")
    # bounded by the whole image and by the radius' tables (the blocks are chosen to fit)
    return auto_radius(signal, spacing, sign, xp, path, shape=shape, tables_only=True)[0]
