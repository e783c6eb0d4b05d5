"""Segmentation of an image larger than memory, block by block (docs/scale.md).

The rules:

1. **Global statistics first.** The segmentation normalises the image by its 1st and
   99.5th percentiles; a first pass finds those order statistics exactly, block by block
   (a radix select over the floats' bits: a histogram of 16 bits per pass), and injects
   them into every block's call (:class:`ivote.segment._segment.ChunkHooks`).
2. **Seeds are checked and deduplicated once**, for the whole image, so object k keeps
   the label k + 1 that the in-memory call gives it: labels are globally unique by
   construction, with no renumbering.
3. **Who evolves what.** Every object lives in its box (half-width ``box_half_widths``).
   Objects interact only where their boxes overlap (the overlap penalty has compact
   support; Chan-Vese means, contrast test and shape prior are per box), so the objects
   whose boxes overlap form a graph. Block ``b`` evolves every object whose box meets the
   block, plus every object within ``hops`` overlaps of those (its neighbours, their
   neighbours...), on the image region that holds all their boxes, and keeps the labels
   of the block's own voxels. ``hops=None`` takes whole connected groups of the graph:
   exact, but a dense image is one group.
4. **Convergence is global** (the fraction of cells that changed sign, over all objects):
   each block counts only the objects whose seed it owns, the counts are summed, and when
   the whole image would have stopped earlier than the last iteration the blocks are run
   again with that iteration count.
5. **Seams.** Each block reports the merges it made (two seeds of one nucleus); their graph
   goes through the project's union-find (``ivote.connected_components``), each merged
   object keeps its smallest label, and the blocks whose labels change are rewritten.

Where each part lives: this module checks the arguments and runs the passes;
``_segment_percentiles`` rule 1; ``_segment_plan`` rule 3 and the block size that
fits ``memory_limit``; ``_segment_block`` one block's task; ``_segment_merge``
rules 4 and 5; ``_tasks`` the block reads and the GPU's memory limit.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._label import _resolve_chunks
from ._segment_block import _runs_on_gpu, _segment_block
from ._segment_merge import _global_stop, _reconcile
from ._segment_percentiles import intensity_range_chunked
from ._segment_plan import _Layout, _default_chunks, _fit_memory, _overlap_graph
from ._tasks import _is_dask, _piece, parse_bytes

__all__ = ["ChunkedSegmentation", "segment_chunked"]

DEFAULT_HOPS = 2


@dataclass(frozen=True)
class ChunkedSegmentation:
    """Result of :func:`segment_chunked`.

    Attributes
    ----------
    labels : ndarray or zarr.Array
        Label k + 1 for the k-th deduplicated seed, as :func:`ivote.segment_nuclei`.
    count : int
        Objects in the labels.
    chunks : tuple of int
        The block shape.
    hops : int or None
        Overlaps of boxes followed beyond each block (``None``: whole groups).
    iterations : int
        Level-set iterations run (fewer than asked when the fronts stopped moving).
    passes : int
        Segmentation passes over the blocks (2 when convergence came before the last iteration).
    seam_merges : int
        Labels rewritten after the blocks because another block merged them.
    largest_region : tuple of int
        The largest image region one block read.
    """

    labels: Any
    count: int
    chunks: tuple
    hops: int | None
    iterations: int
    passes: int
    seam_merges: int
    largest_region: tuple


# ---------------------------------------------------------------- the driver

def _run(tasks, scheduler, progress):
    import dask

    if not tasks:
        return []
    kwargs = {"scheduler": scheduler} if scheduler else {}
    if progress:
        try:
            from distributed import get_client, progress as distributed_progress

            client = get_client() if not scheduler else None
        except (ImportError, ValueError):
            client = None
        if client is not None:
            futures = client.compute(list(tasks))
            with contextlib.redirect_stdout(sys.stderr):  # its text bar writes to stdout
                distributed_progress(futures)
            return client.gather(futures)
        from dask.diagnostics import ProgressBar

        with ProgressBar(out=sys.stderr):
            return list(dask.compute(*tasks, **kwargs))
    return list(dask.compute(*tasks, **kwargs))


def _distributed_client() -> bool:
    try:
        from distributed import get_client

        get_client()
    except (ImportError, ValueError):
        return False
    return True


def _segment_defaults() -> dict:
    from ..segment._segment import segment_nuclei

    return {name: p.default for name, p in inspect.signature(segment_nuclei).parameters.items()
            if p.default is not inspect.Parameter.empty and not name.startswith("_")}


def _open_out(out, shape, chunks, scheduler):
    if out is None:
        if scheduler not in (None, "threads", "sync", "synchronous", "single-threaded"):
            raise ValueError(f"scheduler={scheduler!r} needs out= a Zarr array or path every worker can write to")
        return np.zeros(shape, np.int32)
    if isinstance(out, (str, bytes)) or hasattr(out, "__fspath__"):
        import zarr

        return zarr.open_array(str(out), mode="w", shape=shape, chunks=chunks, dtype="int32", fill_value=0)
    if tuple(out.shape) != tuple(shape) or np.dtype(out.dtype).kind not in "iu":
        raise ValueError(f"out must be an integer array of shape {tuple(shape)}; got {out.dtype} {tuple(out.shape)}")
    own = getattr(out, "chunks", None)
    if own is not None and not isinstance(out, np.ndarray) and not _is_dask(out):
        if any(c % int(o) for c, o in zip(chunks, own)):
            raise ValueError(f"out's chunks {tuple(own)} must divide the blocks {chunks}: two workers would "
                             "write the same Zarr chunk")
    return out


def segment_chunked(image, points, radius: float, *, spacing=None, chunks=None, hops: int | None = DEFAULT_HOPS,
                    scheduler=None, out=None, progress=None, memory_limit=None,
                    **segment_kwargs) -> ChunkedSegmentation:
    """Segment nuclei block by block, as :func:`ivote.segment_nuclei` does in memory.

    Parameters
    ----------
    image : (Y, X) or (Z, Y, X) array-like
        NumPy, Zarr or Dask array (grey levels); only a few blocks (with their halo) are
        ever in memory.
    points : (N, ndim) array_like
        Seeds in pixel coordinates of the whole image.
    radius, spacing
        As in :func:`ivote.segment_nuclei`.
    chunks : int or tuple of int, optional
        Block shape. Default: the whole image as one block when its estimated need fits
        ``memory_limit`` (or, without one, three quarters of the GPU's memory / 2 GiB on
        the CPU); else about 256 per axis (2048 in 2D), a multiple of the image's own
        chunks (Zarr, Dask), halved along its longest axis until a block fits in
        ``memory_limit`` when one is given.
    hops : int or None
        How far the halo reaches: the block's objects and every object within this many
        box overlaps of them are evolved together (see Notes). ``None``: every object
        connected to them (exact, unbounded). Default 2.
    scheduler : str, optional
        Dask scheduler (``"threads"``, ``"sync"``...); default Dask's current one, which is
        the cluster of an active ``dask.distributed.Client`` (:func:`ivote.distributed.cluster`).
    out : zarr.Array, path or array, optional
        Where the labels go: a Zarr path (an int32 array chunked as the blocks is created),
        a Zarr array whose chunks divide the blocks, or a NumPy array. Default: a new
        int32 NumPy array (threads only).
    progress : bool, optional
        Show Dask's progress bar (stderr) for every pass.
    memory_limit : int or str, optional
        Memory one block's segmentation may use (bytes, or ``"8GB"``): on a GPU, CuPy's
        pool is capped at it during the block (enforced); on either backend the blocks
        are sized so that their estimate fits (an error when they cannot be). Default:
        no limit.
    **segment_kwargs
        Any other keyword of :func:`ivote.segment_nuclei` (iterations, polarity, tol,
        weights, backend...), except ``iter_callback`` and ``return_report``.

    Returns
    -------
    ChunkedSegmentation

    Notes
    -----
    Objects interact only through the overlap penalty, where their boxes overlap; every
    other term is per box. An object's result therefore depends on the whole group of
    objects linked by overlapping boxes, but each link weakens the influence: ``hops=2``
    gave labels identical to the in-memory ones on every synthetic image measured (2D and
    3D; ``hops=1`` differed by a few voxels in 3D, ``hops=0`` lost objects; docs/scale.md). The normalisation's percentiles and the convergence test are
    global and computed as such (see the module's rules).

    Examples
    --------
    >>> from ivote.data import synthetic_nuclei
    >>> from ivote.distributed import segment_chunked
    >>> image, truth, centers, spacing, radius = synthetic_nuclei((64, 64), radius=5, seed=1)
    >>> result = segment_chunked(image, centers, 5, chunks=32, iterations=50, scheduler="sync", backend="numpy")
    >>> result.labels.shape
    (64, 64)
    """
    from .._validate import check_radius, check_spacing
    from ..segment._segment import _check_seeds, box_half_widths

    for name in ("iter_callback", "return_report", "_chunk"):
        if name in segment_kwargs:
            raise ValueError(f"segment_chunked does not take {name} (use progress=)")
    ndim = len(getattr(image, "shape", ()))
    if ndim not in (2, 3):
        raise ValueError(f"image must be 2D (Y, X) or 3D (Z, Y, X); got shape {getattr(image, 'shape', None)}")
    if np.dtype(image.dtype).kind not in "biuf":
        raise TypeError(f"image must hold real numbers; got dtype {image.dtype}")
    if hops is not None and (isinstance(hops, bool) or int(hops) != hops or hops < 0):
        raise ValueError(f"hops must be a non-negative integer or None; got {hops!r}")
    shape = tuple(int(n) for n in image.shape)
    memory_limit = parse_bytes(memory_limit)
    spacing = check_spacing(spacing, ndim)
    radius = check_radius(radius, shape, spacing)
    options = {**_segment_defaults(), **segment_kwargs}
    seeds = _check_seeds(points, shape)
    h_min = min(spacing)
    spacing_n = tuple(s / h_min for s in spacing)
    half = np.asarray(box_half_widths(radius / h_min, spacing_n, float(options["box_factor"])), np.int64)
    rounded = np.rint(seeds).astype(np.int64)
    layout = _Layout(shape, rounded, half, hops, _overlap_graph(rounded, half), int(np.prod(2 * half + 1)))
    user_chunks = chunks is not None
    chunks = _resolve_chunks(image, chunks if user_chunks else _default_chunks(image, ndim), shape)
    if not user_chunks and chunks != shape:
        # the image fits: one block, the in-memory call itself (as detect_chunked does)
        from ._tasks import _memory_limit

        budget = memory_limit or _memory_limit(None, _runs_on_gpu(options["backend"]))
        if layout.largest_need(layout.plans(shape)) <= budget:
            chunks = shape
    plans = layout.plans(chunks)
    if memory_limit:
        chunks, plans = _fit_memory(layout, chunks, plans, memory_limit, given=user_chunks)
    out = _open_out(out, shape, chunks, scheduler)
    if isinstance(out, np.ndarray):
        scheduler = scheduler or "threads"
    if scheduler in (None, "threads") and not _distributed_client() and _runs_on_gpu(options["backend"]):
        scheduler = "sync"  # one GPU in this process: one block at a time, so the memory cap holds

    import dask

    def run(tasks):
        return _run(tasks, scheduler, progress)

    blocks = [(None, p.block) for p in plans]
    intensity_range = intensity_range_chunked(image, blocks, run)
    iterations = int(options["iterations"])
    tol = float(options["tol"])
    block_task = dask.delayed(_segment_block, pure=False)

    def segment_all(n_iterations):
        call = {**options, "radius": radius, "spacing": spacing, "iterations": n_iterations, "tol": 0.0}
        return run([block_task(*_piece(image, p.region), p, seeds[p.seeds], intensity_range, call, out, True,
                               memory_limit) for p in plans])

    found = segment_all(iterations)
    passes = 1
    stop = _global_stop([counts for _, _, counts in found], tol, iterations)
    if stop < iterations:
        found = segment_all(stop)
        passes = 2

    count, rewritten = _reconcile(found, [p.block for p in plans], out, run)
    largest = max((tuple(s.stop - s.start for s in p.region) for p in plans), key=math.prod)
    return ChunkedSegmentation(labels=out, count=count, chunks=chunks, hops=hops, iterations=stop,
                               passes=passes, seam_merges=rewritten, largest_region=largest)
