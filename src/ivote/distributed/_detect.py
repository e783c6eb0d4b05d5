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
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from typing import Any, Callable, NamedTuple

import numpy as np

__all__ = ["detect_chunked", "detect_dask", "detection_halo"]

#: device bytes per voxel of a block's detection (input, blur buffers, voters, two vote
#: buffers, maxima flags and lists): the in-memory detection's measured peak is 24-26
#: (docs/benchmarks.md); tests/gpu runs blocks under a limit sized with this
GPU_BYTES_PER_VOXEL = 32
# on the CPU a block's host memory is that of the path that runs it, Numba's or NumPy's
# (``_voting.cpu_detection_memory``), plus the block read: see _block_cost
#: host memory a block may use on the CPU when no limit is given
DEFAULT_CPU_BLOCK_BYTES = 2 * 2**30
#: share of a GPU's memory a block may use when no limit is given
DEFAULT_GPU_FRACTION = 0.75
#: Dask threads of the threads scheduler: one block computes per GPU (or Numba) at a time while
#: the others read theirs; host memory holds this many blocks
THREADS = 4
#: most blocks per axis the default chunking considers
_MOST_SPLITS = 32

_DETECT_OPTIONS = ("polarity", "blur", "threshold", "min_contrast", "backend", "stains", "tissue")
_GPU_LOCK = threading.Lock()  # one block at a time on this process's GPU (threads scheduler)


def detection_halo(plan, blur_pixels) -> tuple:
    """Voxels per axis a block must see beyond the voxels it owns, so that its
    votes, maxima and contrasts equal the whole image's.

    Parameters
    ----------
    plan : VotingPlan
        ``ivote.detect._plan.make_plan(radius, spacing, ndim)``.
    blur_pixels : sequence of float
        The pre-blur's sigma per axis, in pixels (0: none).

    Returns
    -------
    tuple of int
        Per axis: ``max(t + 1 + (2 n - 1) R + h, t + W)``, where ``t`` is the
        Gaussian's reach (``int(4 sigma + 0.5)`` taps, as SciPy and CuPy cut
        it), 1 the central difference of the gradient, ``R`` the largest offset
        of the voting disc/ball along the axis, ``n`` the passes (a vote reads
        voters within ``R``; each turn reads votes within ``R``, so the last
        pass's votes depend on voters ``(2 n - 1) R`` away), ``h`` the half width
        of the local-maximum box and ``W`` the contrast window.

    Notes
    -----
    This bound is exact, not empirical: every quantity that decides a cell is a
    function of the voxels within it. It is large (58 pixels for radius 6 and
    the default blur in 2D), so blocks should be several times larger; the
    measured trade-off of smaller halos is in ``docs/scale.md``.
    """
    from ..detect._cuda import gaussian_taps

    reach = np.abs(plan.offsets).max(axis=0, initial=0) if len(plan.offsets) else np.zeros(plan.ndim, int)
    halo = []
    for axis in range(plan.ndim):
        taps = gaussian_taps(blur_pixels[axis]) if blur_pixels[axis] > 0 else None
        t = 0 if taps is None else len(taps) // 2
        votes = t + 1 + (2 * plan.n_passes - 1) * int(reach[axis]) + plan.maxima_half_width[axis]
        halo.append(max(votes, t + plan.window[axis]))
    return tuple(halo)


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
    from ..detect._voting import _DEFAULT_MIN_CONTRAST, _check_work, check_settings

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
    cost = _block_cost(name, dtype)
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


def _resolve_halo(halo, plan, sigma) -> tuple:
    exact = detection_halo(plan, sigma)
    if halo is None:
        return exact
    if isinstance(halo, (int, np.integer)) and not isinstance(halo, bool):
        halo = (int(halo),) * plan.ndim
    halo = tuple(halo)
    if len(halo) != plan.ndim or any(isinstance(h, bool) or int(h) < 0 for h in halo):
        raise ValueError(f"halo must be a non-negative integer or {plan.ndim} of them; got {halo!r}")
    return tuple(int(h) for h in halo)


def parse_bytes(value) -> int | None:
    """``"8GB"``, ``"512MiB"``, ``2**30`` -> bytes (None stays None)."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        number = int(value)
    else:
        text = str(value).strip().upper().replace(" ", "")
        units = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "KIB": 2**10, "M": 10**6, "MB": 10**6, "MIB": 2**20,
                 "G": 10**9, "GB": 10**9, "GIB": 2**30, "T": 10**12, "TB": 10**12, "TIB": 2**40}
        digits = text.rstrip("KMGTIB")
        try:
            number = int(float(digits) * units[text[len(digits):]])
        except (ValueError, KeyError, OverflowError):
            raise ValueError(f"memory_limit must be a finite number of bytes or a size like '8GB' or '512MiB' "
                             f"(leave it out for the default); got {value!r}") from None
    if number <= 0:
        raise ValueError(f"memory_limit must be positive; got {value!r}")
    return number


def _memory_limit(memory_limit, gpu: bool) -> int:
    limit = parse_bytes(memory_limit)
    if limit is not None:
        return limit
    if gpu:
        from .._backend import _cupy

        total = _cupy().cuda.Device().mem_info[1]
        return int(DEFAULT_GPU_FRACTION * total)
    return DEFAULT_CPU_BLOCK_BYTES


class _BlockCost(NamedTuple):
    """Memory of one block's detection: ``per_voxel * voxels + fixed`` bytes, on ``path``."""

    per_voxel: float
    fixed: float
    path: str  # 'cupy', 'numba' or 'numpy'


def _block_cost(path: str, dtype) -> _BlockCost:
    """The memory of a block's detection on ``path``: on the GPU ``GPU_BYTES_PER_VOXEL``; on the CPU
    the in-memory detection's estimate for that path (``_voting.cpu_detection_memory``: the NumPy
    path needs about 2.5 times Numba's bytes per voxel, and more fixed buffers) plus the block read
    (``dtype``)."""
    if path == "cupy":
        return _BlockCost(GPU_BYTES_PER_VOXEL, 0, path)
    from ..detect._voting import cpu_detection_memory

    fixed = cpu_detection_memory(0, path)
    return _BlockCost(cpu_detection_memory(1, path) - fixed + np.dtype(dtype).itemsize, fixed, path)


def _block_voxels(chunks, shape, halo) -> int:
    return math.prod(min(n, c + 2 * h) for n, c, h in zip(shape, chunks, halo))


def _resolve_chunks(chunks, shape, halo, limit: int, cost: _BlockCost, min_blocks: int = 1) -> tuple:
    """The voxels each block owns: as given, else the blocks that fit ``limit`` (at ``cost``, :func:`_block_cost`)
    with their halo and read the fewest voxels in all (halos read twice cost),
    at least ``min_blocks`` of them (one per worker); the whole image when it fits."""
    ndim = len(shape)
    if chunks is not None:
        if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
            chunks = (int(chunks),) * ndim
        chunks = tuple(chunks)
        if len(chunks) != ndim or any(isinstance(c, bool) or int(c) < 1 for c in chunks):
            raise ValueError(f"chunks must be a positive integer or {ndim} of them; got {chunks!r}")
        return tuple(min(int(c), n) for c, n in zip(chunks, shape))
    voxels = _most_voxels(limit, cost)
    per_axis = []  # per axis, per number of splits: (chunk, blocks, voxels read along it, block length)
    for n, h in zip(shape, halo):
        options = {}
        for k in range(1, min(n, _MOST_SPLITS) + 1):
            c = math.ceil(n / k)
            starts = range(0, n, c)
            options[c] = (c, len(starts), sum(min(n, s + c + h) - max(0, s - h) for s in starts), min(n, c + 2 * h))
        per_axis.append(list(options.values()))
    best = None
    for axes in itertools.product(*per_axis):
        n_blocks = math.prod(a[1] for a in axes)
        if n_blocks < min_blocks or math.prod(a[3] for a in axes) > voxels:
            continue
        key = (math.prod(a[2] for a in axes), n_blocks, tuple(a[1] for a in reversed(axes)))  # slabs: C order
        if best is None or key < best[0]:
            best = (key, tuple(a[0] for a in axes))
    if best is None:
        raise ValueError(f"no blocks of a {'x'.join(map(str, shape))} image fit memory_limit {limit / 2**30:.2f} GiB "
                         f"with the halo of {'x'.join(map(str, halo))} voxels on the {cost.path} backend (about "
                         f"{cost.per_voxel:.0f} bytes per voxel + {cost.fixed / 2**20:.0f} MiB): give a larger "
                         "memory_limit")
    return best[1]


#: voxels of one GPU pass (``_cuda.detect`` indexes them with 32-bit integers)
GPU_MOST_VOXELS = 2**31 - 1


def _most_voxels(limit: int, cost: _BlockCost) -> int:
    """Voxels a block with its halo may hold under ``limit``."""
    voxels = max(0, int((limit - cost.fixed) // cost.per_voxel))
    return min(voxels, GPU_MOST_VOXELS) if cost.path == "cupy" else voxels


def _check_block_memory(chunks, shape, halo, limit: int, cost: _BlockCost) -> None:
    gpu = cost.path == "cupy"
    if gpu and _block_voxels(chunks, shape, halo) > GPU_MOST_VOXELS:
        raise ValueError(f"a block of {'x'.join(map(str, chunks))} voxels with its halo of {'x'.join(map(str, halo))} "
                         f"holds more than 2**31 - 1 voxels, more than one GPU pass takes: use smaller chunks")
    need = _block_voxels(chunks, shape, halo) * cost.per_voxel + cost.fixed
    if need > limit:
        where = "GPU" if gpu else "host"
        raise ValueError(
            f"a block of {'x'.join(map(str, chunks))} voxels with its halo of {'x'.join(map(str, halo))} needs about "
            f"{need / 2**30:.2f} GiB of {where} memory on the {cost.path} backend, above memory_limit "
            f"{limit / 2**30:.2f} GiB: use smaller chunks (or none: the largest that fit) or a larger memory_limit")


TASK_WORK = 1e6
"""Operations a block's task is counted as at least, whatever its size (scheduling, reading the
block, a compiled call's set-up: about a millisecond), so that a run of many tiny blocks
(``--chunks 1``) is refused up front rather than block by block."""


def _check_run_work(blocks, shape, halo, plan, spacing, blur, gpu) -> None:
    """Refuse (ResourceLimitError) a run whose blocks, halos included, and tasks (three passes per
    block) add up to more than the work limit, before any block runs."""
    from .._limits import check_budget
    from ..detect._voting import _cone_votes_per_voter

    per_voxel = _cone_votes_per_voter(plan) + (sum(8 * blur / s + 1 for s in spacing) if blur > 0 else 0)
    voxels = sum(math.prod(g.stop - g.start for g in _grow(owned, halo, shape)) for owned in blocks)
    check_budget(f"detect_chunked: {len(blocks)} block(s) of {'x'.join(map(str, shape))} voxels with halos of "
                 f"{'x'.join(map(str, halo))} (radius {plan.radius:g})",
                 work=voxels * per_voxel + 3 * len(blocks) * TASK_WORK, gpu=gpu,
                 advice="use larger --chunks (chunks=) or none (the largest blocks that fit), or a crop")


def _blocks(shape, chunks) -> list:
    """The slices each block owns, in C order."""
    ranges = [range(0, n, c) for n, c in zip(shape, chunks)]
    return [tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, chunks, shape))
            for start in itertools.product(*ranges)]


def _grow(owned, margin, shape) -> tuple:
    if isinstance(margin, int):
        margin = (margin,) * len(shape)
    return tuple(slice(max(s.start - m, 0), min(s.stop + m, n)) for s, m, n in zip(owned, margin, shape))


def _source(image, region):
    """What a task reads its block from: a slice of a NumPy array (a view) or of a
    Dask array (computed by Dask as the task's input), else the array itself (the
    task slices it: Zarr, HDF5, ...)."""
    if isinstance(image, np.ndarray) or _is_dask(image):
        return image[region]
    return _Lazy(image, region)


def _is_dask(array) -> bool:
    return type(array).__module__.split(".")[0] == "dask" and hasattr(array, "dask")


class _Lazy:
    """A region of an array, read in the task."""

    def __init__(self, array, region):
        self.array, self.region = array, region

    def read(self):
        return self.array[self.region]


def _read(source) -> np.ndarray:
    from .._backend import to_host

    block = source.read() if isinstance(source, _Lazy) else source
    return np.ascontiguousarray(to_host(block))


def _owned_rows(coords, owned) -> np.ndarray:
    inside = np.ones(len(coords), bool)
    for axis, s in enumerate(owned):
        inside &= (coords[:, axis] >= s.start) & (coords[:, axis] < s.stop)
    return coords[inside]


def _local(owned, region) -> tuple:
    """The owned slices relative to the region read."""
    return tuple(slice(o.start - r.start, o.stop - r.start) for o, r in zip(owned, region))


# ---------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------


def _whole_task(source, options, limit):
    """The whole image as one block: ``iterative_voting`` in memory (on a GPU under the limit)."""
    from ..detect._voting import iterative_voting

    block = _read(source)
    _, device = _on_device(options["backend"], limit)
    with device:
        return iterative_voting(block, **options)


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


def _on_device(backend: str, limit: int):
    """(xp, context) of a task: on a GPU, one block at a time under the memory limit."""
    import contextlib

    from .._backend import select_xp

    xp = select_xp(backend)
    if xp is np:
        return xp, contextlib.nullcontext()
    return xp, gpu_limit(limit)


class gpu_limit:
    """Hold the GPU lock and let the block allocate at most ``limit`` new bytes
    through CuPy's memory pool (``_backend.limit_gpu_memory``), restored after.
    Buffers kept between calls (captured detections) are dropped first and the
    pool's free blocks returned; what the pool still holds then (the caller's
    arrays, memoized tables, a freed block the pool cannot return because a
    part of it is in use) is counted on top of the limit, not against it: the
    cap is the pool's size at the start plus ``limit``, so what ran before in
    the process does not shrink the block's share. The block's own buffers are
    freed after. Used by every chunked stage."""

    def __init__(self, limit: int):
        self.limit = limit

    def __enter__(self):
        from .._backend import _cupy, free_gpu_memory, limit_gpu_memory, pin_gpu_tables

        _GPU_LOCK.acquire()
        self.pinned = pin_gpu_tables()  # another thread's free_gpu_memory keeps them meanwhile
        self.pinned.__enter__()
        try:
            free_gpu_memory(keep_tables=True)  # tables are counted outside the block's share
            held = int(_cupy().get_default_memory_pool().total_bytes())
            self.previous = limit_gpu_memory(held + self.limit)
        except BaseException:
            self.pinned.__exit__(None, None, None)
            _GPU_LOCK.release()
            raise

    def __exit__(self, *exc):
        from .._backend import _cupy, limit_gpu_memory

        try:
            _cupy().get_default_memory_pool().free_all_blocks()
            limit_gpu_memory(self.previous)
        finally:
            self.pinned.__exit__(None, None, None)
            _GPU_LOCK.release()


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
    total = None  # ((gz^2 + gy^2) + gx^2): the kernels' order, one component at a time
    for axis, step in enumerate(spacing):
        g = _difference(crop, axis, float(step), xp)
        g *= g
        total = g if total is None else total + g
        del g
    magnitude = xp.sqrt(total)
    mine = tuple(slice(s.start - g.start, s.stop - g.start) for s, g in zip(inner, grown))
    return magnitude[mine]


def _difference(f, axis: int, h: float, xp):
    """One gradient component as ``ivote_diff`` (and ``np.gradient``, edge_order 1):
    central differences divided by 2h inside, one-sided at the ends, 0 on an axis of length 1."""
    n = f.shape[axis]
    out = xp.zeros_like(f)
    if n < 2:
        return out

    def along(start, stop):
        return tuple(slice(start, stop) if k == axis else slice(None) for k in range(f.ndim))

    out[along(1, n - 1)] = (f[along(2, n)] - f[along(0, n - 2)]) / (2.0 * h)
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


def _detect_task(source, owned, region, plan, sign, blur, spacing, given, backend, limit):
    """Pass 3: the block's local maxima with the whole image's statistics; those it
    owns, in whole-image coordinates, with their votes and contrasts."""
    from .._backend import gpu_memory_guard, to_device, use_numba
    from ..detect._voting import _detect_on_cpu, _detect_on_gpu, _detect_on_numba

    import dataclasses

    from ..detect._reach import BlockStatistics

    block = _read(source)
    # the passes run only the voters the owned voxels' votes need (_reach.pass_boxes)
    given = BlockStatistics(**dataclasses.asdict(given), owned=tuple(
        (o.start - r.start, o.stop - r.start) for o, r in zip(owned, region)))
    xp, device = _on_device(backend, limit)
    if xp is not np:
        detect_on = _detect_on_gpu
    else:
        detect_on = _detect_on_numba if use_numba(xp, backend) else _detect_on_cpu

    @gpu_memory_guard("detect_chunked (detection pass)")
    def run():
        signal = to_device(block, xp) if xp is not np else block
        _, coords, values, contrast, _ = detect_on(signal, signal, plan, sign, blur, spacing, False, False, None,
                                                   False, given)
        return coords, values, contrast

    with device:
        coords, values, contrast = run()
    inside = np.ones(len(coords), bool)
    for axis, (o, r) in enumerate(zip(owned, region)):
        inside &= (coords[:, axis] >= o.start - r.start) & (coords[:, axis] < o.stop - r.start)
    origin = np.array([r.start for r in region], dtype=np.int64)
    return coords[inside] + origin, np.asarray(values)[inside], np.asarray(contrast)[inside]


# ---------------------------------------------------------------------------
# Global decisions
# ---------------------------------------------------------------------------


def _suppress(coords, values, contrast, shape, plan):
    """All blocks' maxima best first (ties: lower flat index of the whole image),
    then the greedy scan over maxima closer than the radius, as in memory."""
    from ..detect._reference import close_pairs
    from ..detect._voting import _greedy_keep

    flat = np.ravel_multi_index(tuple(coords.T), shape) if len(coords) else np.zeros(0, np.int64)
    order = np.lexsort((flat, -values.astype(np.int64)))
    coords, values, contrast = coords[order], values[order], contrast[order]
    keep = _greedy_keep(len(coords), close_pairs(coords, plan))
    return coords[keep], values[keep], contrast[keep]


def _detections(candidates, scores, contrast, plan, threshold, min_contrast, n_passes, backend, spacing, estimated):
    from ..detect._voting import Detections, _resolve_rule

    requested = min_contrast
    value, min_contrast = _resolve_rule(threshold, scores, contrast, min_contrast)  # 'auto' may raise the floor
    keep = (scores >= value) & (contrast >= min_contrast)
    return Detections(points=candidates[keep], scores=scores[keep], threshold=value, candidates=candidates,
                      candidate_scores=scores, candidate_contrasts=contrast, min_contrast=min_contrast,
                      vote_field=None, n_passes=n_passes, backend=backend, radius=plan.radius, spacing=spacing,
                      radius_estimated=estimated, requested_min_contrast=requested)


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


# ---------------------------------------------------------------------------
# Running the tasks on Dask
# ---------------------------------------------------------------------------


class _Runner:
    """Runs each pass's block tasks on Dask and reports ``progress(done, total)`` as they finish."""

    def __init__(self, progress, total: int):
        self.progress, self.total, self.done = progress, total, 0
        if progress is not None:
            progress(0, total)

    def _finished(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)

    def skip(self, n: int) -> None:
        self.done += n - 1
        self._finished()

    def run(self, function, arguments, scheduler, each=None) -> list:
        """``[function(*args) for args in arguments]`` as Dask tasks, in order;
        ``each(result)`` in this thread as each task finishes."""
        import dask

        tasks = [dask.delayed(function, pure=False)(*args) for args in arguments]
        results = [None] * len(tasks)
        client = _client(scheduler)
        if client is not None:
            from distributed import as_completed

            futures = client.compute(tasks)
            where = {future.key: i for i, future in enumerate(futures)}
            try:
                for future in as_completed(futures):
                    results[where[future.key]] = future.result()
                    if each is not None:
                        each(results[where[future.key]])
                    self._finished()
            except BaseException:
                client.cancel(futures)
                raise
            return results
        from dask.callbacks import Callback

        where = {task.key: i for i, task in enumerate(tasks)}

        def finished(key, result, dsk, state, worker_id):
            if key in where:
                results[where[key]] = result
                if each is not None:
                    each(result)
                self._finished()

        options = {"num_workers": THREADS} if scheduler in (None, "threads") else {}
        with Callback(posttask=finished):
            dask.compute(*tasks, scheduler=scheduler or "threads", **options)
        return results


def _workers(scheduler) -> int:
    """Workers of the distributed cluster the tasks go to (1 for a local scheduler)."""
    client = _client(scheduler)
    if client is None:
        return 1
    return max(1, len(client.scheduler_info().get("workers", {})))


def _client(scheduler):
    """The ``dask.distributed.Client`` the tasks go to, or None for a local scheduler."""
    if scheduler is not None and not isinstance(scheduler, str):
        return scheduler  # a Client
    if scheduler not in (None, "distributed", "dask.distributed"):
        return None
    import dask

    if dask.config.get("scheduler", None) not in (None, "distributed", "dask.distributed"):
        return None
    try:
        from distributed import Client
    except ImportError:
        return None
    try:
        return Client.current(allow_global=True)
    except ValueError:
        return None
