"""The blocks of a chunked segmentation: which objects each block evolves, on which region,
and the block size that fits a memory limit.

Objects interact only where their boxes overlap (``_overlap_graph``); a block
evolves the objects whose boxes meet it and those within ``hops`` overlaps of
them (``_plans``), on the region that holds all their boxes. ``_need`` is a
block's memory, ``_smallest_need`` the least any block size can have, and
``_fit_memory`` halves the blocks until they fit.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._label import _block_slices


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


def _default_chunks(image, ndim: int):
    """Blocks of about 256 per axis (2048 in 2D): the halo costs less on large blocks; a
    multiple of the file's own chunks, so reads stay aligned."""
    target = 2048 if ndim == 2 else 256
    own = getattr(image, "chunks", None)
    if own is None or len(own) != ndim:
        return target
    own = [int(c[0]) if isinstance(c, tuple) else int(c) for c in own]
    return tuple(c * max(1, math.ceil(target / c)) for c in own)
