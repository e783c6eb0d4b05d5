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
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._tasks import _is_dask, gpu_limit, parse_bytes
from ._label import _block_slices, _resolve_chunks

__all__ = ["ChunkedSegmentation", "segment_chunked"]

RADIX_BITS = 16  # bits of the float keys decided per pass of the percentile search
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


# ---------------------------------------------------------------- reading blocks

def _piece(image, region):
    """What a task needs to read ``region``: a Dask slice (computed as the task's dependency),
    a NumPy view, or a Zarr (or other lazy) array with the region to read."""
    if _is_dask(image) or isinstance(image, np.ndarray):
        return image[region], None
    return image, region


def _read(piece, region) -> np.ndarray:
    return np.asarray(piece if region is None else piece[region])


# ---------------------------------------------------------------- exact percentiles

def _float_dtype(dtype) -> np.dtype:
    """The float dtype ``segment_nuclei`` computes in (``ivote._validate.as_float_image``)."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float32 else np.dtype(np.float64)


def _keys(values: np.ndarray) -> np.ndarray:
    """Unsigned integers in the order of the floats (IEEE-754 bits, negatives flipped)."""
    unsigned = np.uint32 if values.dtype == np.float32 else np.uint64
    bits = values.dtype.itemsize * 8
    raw = np.ascontiguousarray(values).view(unsigned)
    top = unsigned(1) << unsigned(bits - 1)
    return np.where(raw & top, ~raw, raw | top)


def _from_key(key: int, dtype: np.dtype) -> float:
    unsigned = np.uint32 if dtype == np.float32 else np.uint64
    bits = dtype.itemsize * 8
    key = unsigned(key)
    top = unsigned(1) << unsigned(bits - 1)
    raw = key ^ top if key & top else ~key
    return float(np.array([raw], unsigned).view(dtype)[0])


def _digit_histograms(piece, region, dtype, prefixes, decided: int) -> dict:
    """Per prefix of ``decided`` bits: histogram of the next RADIX_BITS bits of the block's keys."""
    keys = _keys(_read(piece, region).astype(dtype, copy=False).ravel())
    bits = dtype.itemsize * 8
    shift = keys.dtype.type(bits - decided - RADIX_BITS)
    mask = keys.dtype.type((1 << RADIX_BITS) - 1)
    out = {}
    for prefix in prefixes:
        chosen = keys if decided == 0 else keys[(keys >> keys.dtype.type(bits - decided)) == keys.dtype.type(prefix)]
        out[prefix] = np.bincount(((chosen >> shift) & mask).astype(np.int64), minlength=1 << RADIX_BITS)
    return out


def intensity_range_chunked(image, blocks, run) -> tuple[float, float]:
    """The image's ``INTENSITY_PERCENTILES`` from its exact order statistics, found block by block
    (``run(tasks)`` computes Dask tasks); equal to what ``segment_nuclei`` computes in memory."""
    import dask

    from ..segment._segment import INTENSITY_PERCENTILES, percentile_from_ranks, percentile_ranks

    dtype = _float_dtype(image.dtype)
    size = math.prod(image.shape)
    ranks = [percentile_ranks(size, q) for q in INTENSITY_PERCENTILES]
    wanted = sorted({r for below, above, _ in ranks for r in (below, above)})
    state = {rank: [0, rank] for rank in wanted}  # rank -> [key prefix, rank among keys with that prefix]
    task = dask.delayed(_digit_histograms, pure=False)
    for decided in range(0, dtype.itemsize * 8, RADIX_BITS):
        prefixes = sorted({prefix for prefix, _ in state.values()})
        found = run([task(*_piece(image, s), dtype, prefixes, decided) for _, s in blocks])
        for rank, (prefix, rest) in state.items():
            cumulative = np.cumsum(sum(block[prefix] for block in found))
            digit = int(np.searchsorted(cumulative, rest, side="right"))
            state[rank] = [(prefix << RADIX_BITS) | digit, rest - (int(cumulative[digit - 1]) if digit else 0)]
    values = {rank: _from_key(prefix, dtype) for rank, (prefix, _) in state.items()}
    return tuple(percentile_from_ranks(values[below], values[above], w) for below, above, w in ranks)


# ---------------------------------------------------------------- which objects each block evolves

def _overlap_graph(rounded: np.ndarray, half: np.ndarray):
    """CSR adjacency of the seeds whose boxes overlap (every axis within 2 * half)."""
    return _pairs_within(rounded, 2 * half)


def _pairs_within(rounded: np.ndarray, reach: np.ndarray):
    """CSR adjacency of the seeds closer than ``reach`` along every axis (``<=``)."""
    from scipy.sparse import csr_matrix
    from scipy.spatial import cKDTree

    n = len(rounded)
    if n < 2:
        return csr_matrix((n, n), dtype=bool)
    pairs = cKDTree(rounded / reach.astype(float)).query_pairs(r=1.0 + 1e-9, p=np.inf, output_type="ndarray")
    if len(pairs):
        pairs = pairs[np.all(np.abs(rounded[pairs[:, 0]] - rounded[pairs[:, 1]]) <= reach, axis=1)]
    rows = np.concatenate([pairs[:, 0], pairs[:, 1]])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0]])
    return csr_matrix((np.ones(len(rows), bool), (rows, cols)), shape=(n, n))


@dataclass(frozen=True)
class _Plan:
    """One block's work: the seeds it evolves (global indices, sorted), those it owns, the region."""

    block: tuple  # slices of the block
    seeds: np.ndarray
    owned: np.ndarray  # bool per evolved seed
    region: tuple  # slices of the image it reads


def _plans(shape, chunks, rounded, half, hops, graph) -> list[_Plan]:
    block_of = rounded // np.asarray(chunks)
    grid = [math.ceil(n / c) for n, c in zip(shape, chunks)]
    bins: dict = {}
    for i, key in enumerate(map(tuple, block_of)):
        bins.setdefault(key, []).append(i)
    reach = [math.ceil(h / c) for h, c in zip(half, chunks)]
    plans = []
    for index, block in _block_slices(shape, chunks):
        around = [range(max(i - r, 0), min(i + r, g - 1) + 1) for i, r, g in zip(index, reach, grid)]
        candidates = np.asarray(sorted(j for key in itertools.product(*around) for j in bins.get(key, ())),
                                dtype=np.int64)
        if candidates.size:
            lo = np.asarray([s.start for s in block]) - half
            hi = np.asarray([s.stop - 1 for s in block]) + half
            inside = np.all((rounded[candidates] >= lo) & (rounded[candidates] <= hi), axis=1)
            touching = candidates[inside]
        else:
            touching = candidates
        evolved = _expand(touching, graph, hops)
        owned = np.all(block_of[evolved] == np.asarray(index), axis=1) if evolved.size else np.zeros(0, bool)
        if evolved.size:
            first = np.maximum(rounded[evolved].min(axis=0) - half, 0)
            last = np.minimum(rounded[evolved].max(axis=0) + half + 1, shape)
            first = np.minimum(first, [s.start for s in block])
            first -= first % 2  # even: rint(seed - start) == rint(seed) - start, ties to even included
            last = np.maximum(last, [s.stop for s in block])
            region = tuple(slice(int(a), int(b)) for a, b in zip(first, last))
        else:
            region = block
        plans.append(_Plan(block, evolved, owned, region))
    return plans


def _expand(start: np.ndarray, graph, hops) -> np.ndarray:
    """``start`` and the seeds within ``hops`` box overlaps of them (all reachable: None)."""
    reached = np.zeros(graph.shape[0], bool)
    reached[start] = True
    frontier = start
    step = 0
    while frontier.size and (hops is None or step < hops):
        neighbours = np.unique(graph[frontier].indices)
        frontier = neighbours[~reached[neighbours]]
        reached[frontier] = True
        step += 1
    return np.flatnonzero(reached)


def _gpu_bytes(plan: _Plan, box_cells: int) -> int:
    """GPU bytes one block's call needs (:func:`_need` of its objects and region)."""
    return int(_need(len(plan.seeds), math.prod(s.stop - s.start for s in plan.region), box_cells))


def _need(n_objects, region_voxels, box_cells: int):
    """Bytes a call on ``n_objects`` boxes and a region of ``region_voxels`` needs: the boxes
    (``_BYTES_PER_CELL`` a cell, the in-memory estimate) and the region's image, normalised image,
    overlap canvases, labels and the one-region-per-label step's maps (about 64 bytes a voxel).
    Element-wise on arrays."""
    from ..segment._segment import _BYTES_PER_CELL

    return np.asarray(n_objects, np.int64) * (box_cells * _BYTES_PER_CELL) + 64 * np.asarray(region_voxels, np.int64)


@dataclass(frozen=True)
class _Layout:
    """The seeds' boxes and overlaps in an image: what every choice of blocks is planned from."""

    shape: tuple
    rounded: np.ndarray  # seeds rounded to pixels
    half: np.ndarray  # box half-widths
    hops: int | None
    graph: Any  # overlaps of the boxes (_overlap_graph)
    box_cells: int

    def plans(self, chunks) -> list[_Plan]:
        return _plans(self.shape, chunks, self.rounded, self.half, self.hops, self.graph)

    def largest_need(self, plans) -> int:
        return max((_gpu_bytes(p, self.box_cells) for p in plans), default=0)

    def smallest_need(self) -> tuple[int, int]:
        return _smallest_need(self.shape, self.rounded, self.half, self.hops, self.graph, self.box_cells)


def _smallest_need(shape, rounded, half, hops, graph, box_cells) -> tuple[int, int]:
    """(bytes, seed index): a lower bound of the largest block need, whatever the block size.

    The block holding seed ``i``'s pixel, however small, meets the box of every seed within
    ``half`` of it (``i`` included), so it evolves those and every object within ``hops`` box
    overlaps of them (their whole group for ``hops=None``) on a region holding all their boxes:
    no blocks need less than the largest such need (blocks of one pixel need it at that seed)."""
    from scipy.sparse import csgraph, identity

    n = len(rounded)
    if n == 0:
        return 0, -1
    if hops is None:  # whole groups: the members of each, group after group
        _, group = csgraph.connected_components(graph, directed=False)
        members = np.argsort(group, kind="stable")
        first = np.flatnonzero(np.r_[True, np.diff(group[members]) != 0])
        per_seed = group
    else:  # row i of (I + W) (I + A)^hops: the boxes holding seed i's pixel, and hops overlaps on
        reach = identity(n, dtype=np.int8, format="csr") + _pairs_within(rounded, half).astype(np.int8)
        step = graph.astype(np.int8)
        for _ in range(int(hops)):
            reach = ((reach + reach @ step) > 0).astype(np.int8)
        reach.sort_indices()
        members, first, per_seed = reach.indices, reach.indptr[:-1], np.arange(n)
    counts = np.diff(np.r_[first, len(members)])
    coords = rounded[members]
    low = np.maximum(np.minimum.reduceat(coords, first, axis=0) - half, 0)
    high = np.minimum(np.maximum.reduceat(coords, first, axis=0) + half + 1, np.asarray(shape))
    needs = _need(counts, np.prod(high - low, axis=1), box_cells)[per_seed]
    worst = int(np.argmax(needs))
    return int(needs[worst]), worst


# ---------------------------------------------------------------- one block's task

def _segment_block(piece, read_region, plan: _Plan, seeds, intensity_range, options, out, write: bool,
                   memory_limit):
    # seeds: the coordinates of plan.seeds (in the whole image)
    """Segment one block's objects on its region; write the block's voxels (global labels)."""
    from .._backend import to_host
    from ..segment._segment import ChunkHooks, segment_nuclei

    if plan.seeds.size == 0:
        if write:
            out[plan.block] = 0
        return np.zeros(0, np.int64), np.zeros((0, 2), np.int64), []
    image = _read(piece, read_region)
    origin = np.asarray([s.start for s in plan.region])
    hooks = ChunkHooks(intensity_range=intensity_range, counted=plan.owned)
    on_gpu = memory_limit and _runs_on_gpu(options["backend"])
    capped = gpu_limit(memory_limit) if on_gpu else contextlib.nullcontext()
    with capped:
        local = to_host(segment_nuclei(image, seeds - origin, _chunk=hooks, **options))
    table = np.concatenate([[0], plan.seeds + 1]).astype(np.int64)  # local label k + 1 -> global label
    inner = tuple(slice(b.start - r.start, b.stop - r.start) for b, r in zip(plan.block, plan.region))
    block = table[local[inner]]
    if write:
        out[plan.block] = block.astype(out.dtype, copy=False)
    merged = table[hooks.merged] if hooks.merged is not None and len(hooks.merged) else np.zeros((0, 2), np.int64)
    return np.unique(block[block > 0]), merged, hooks.block_counts


def _relabel(out, block, table_ids, table_final) -> None:
    labels = np.asarray(out[block]).astype(np.int64)
    at = np.minimum(np.searchsorted(table_ids, labels), len(table_ids) - 1)
    hit = table_ids[at] == labels
    out[block] = np.where(hit, table_final[at], labels).astype(out.dtype, copy=False)


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


def _runs_on_gpu(backend: str) -> bool:
    from .._backend import select_xp

    return select_xp(backend) is not np


def _default_chunks(image, ndim: int):
    """Blocks of about 256 per axis (2048 in 2D): the halo costs less on large blocks; a
    multiple of the file's own chunks, so reads stay aligned."""
    target = 2048 if ndim == 2 else 256
    own = getattr(image, "chunks", None)
    if own is None or len(own) != ndim:
        return target
    own = [int(c[0]) if isinstance(c, tuple) else int(c) for c in own]
    return tuple(c * max(1, math.ceil(target / c)) for c in own)


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


def _fit_memory(layout: _Layout, chunks, plans, memory_limit: int, *, given: bool):
    """Blocks whose every need fits ``memory_limit``: ``chunks`` when they fit, else (unless
    ``given``) halved along their longest side while the largest need falls. A clear error when
    no block size can fit (the limit is below :func:`_smallest_need`: each block also evolves its
    objects' neighbourhoods, which smaller blocks do not shrink), when the need stops falling (no
    new low after a halving along every axis), or when given chunks do not fit; it names the
    limit and the smallest need."""
    need = layout.largest_need(plans)
    if need <= memory_limit:
        return chunks, plans
    gib = 2**30
    advice = (f"raise memory_limit, or lower hops (now {layout.hops}: each block also evolves the objects within "
              "that many box overlaps of its own; 1 or 0 need less and may differ from the in-memory labels "
              "by a few pixels)")
    if given:
        raise ValueError(f"memory_limit={memory_limit} bytes ({memory_limit / gib:.3g} GiB) is below one block's "
                         f"need ({need} bytes with blocks of {chunks}); give smaller chunks, or {advice}")
    least, seed = layout.smallest_need()
    if least > memory_limit:
        raise ValueError(f"memory_limit={memory_limit} bytes ({memory_limit / gib:.3g} GiB) is below the smallest "
                         f"need any block size can have: {least} bytes ({least / gib:.3g} GiB), the block holding "
                         f"the seed at {tuple(int(v) for v in layout.rounded[seed])} with its neighbours; {advice}")
    smallest, flat = (need, chunks), 0
    while need > memory_limit and flat < len(chunks):  # stop after a halving along every axis brought no fall
        longest = int(np.argmax(chunks))
        if chunks[longest] <= int(layout.half[longest]):
            break  # blocks as small as a box
        chunks = tuple(math.ceil(c / 2) if k == longest else c for k, c in enumerate(chunks))
        plans = layout.plans(chunks)
        need = layout.largest_need(plans)
        if need < smallest[0]:
            smallest, flat = (need, chunks), 0
        else:
            flat += 1  # no new low: the neighbourhoods, not the blocks, dominate
    if need > memory_limit:
        raise ValueError(f"memory_limit={memory_limit} bytes ({memory_limit / gib:.3g} GiB) is below the smallest "
                         f"need of the blocks tried: {smallest[0]} bytes ({smallest[0] / gib:.3g} GiB) with blocks "
                         f"of {smallest[1]}, and smaller blocks no longer need less; {advice}")
    return chunks, plans


def _reconcile(found, blocks, out, run) -> tuple[int, int]:
    """Make the blocks agree on merges: every pair (merged away, kept) any block reported
    becomes an edge; ``ivote.connected_components`` (the union-find) gives each group its
    smallest label; blocks holding a label that changes are rewritten. Returns the number of
    labels left and the number rewritten."""
    import dask

    from ..components import connected_components

    present = np.unique(np.concatenate([ids for ids, _, _ in found])) if found else np.zeros(0, np.int64)
    edges = [merged for _, merged, _ in found if len(merged)]
    if not edges:
        return int(len(present)), 0
    merges = connected_components(np.concatenate(edges).astype(np.int64))
    ids = np.asarray(merges.vertex_ids).astype(np.int64)
    component = np.asarray(merges.component)
    _, first = np.unique(component, return_index=True)  # vertex ids are sorted: first = smallest
    final = ids[first][component]
    changed = final != ids
    ids, final = ids[changed], final[changed]
    stale = [block for block, (block_ids, _, _) in zip(blocks, found) if np.isin(block_ids, ids).any()]
    run([dask.delayed(_relabel, pure=False)(out, block, ids, final) for block in stale])
    if ids.size:
        at = np.minimum(np.searchsorted(ids, present), len(ids) - 1)
        moved = ids[at] == present
        present = np.unique(np.where(moved, final[at], present))
        return int(len(present)), int(moved.sum())
    return int(len(present)), 0


def _global_stop(per_block_counts, tol: float, iterations: int) -> int:
    """The iteration the in-memory loop stops at: the first block after which the cells that
    changed sign, summed over all blocks' own objects, are fewer than ``tol`` times those inside."""
    if tol <= 0:
        return iterations
    totals: dict = {}
    for counts in per_block_counts:
        for done, changed, inside in counts:
            total = totals.setdefault(done, [0, 0])
            total[0] += changed
            total[1] += inside
    for done in sorted(totals):
        changed, inside = totals[done]
        if changed / max(inside, 1) < tol:
            return int(done)
    return iterations
