"""One block of a chunked segmentation: ``segment_nuclei`` on the block's objects and
region, the block's voxels written with global labels (under the GPU's memory limit)."""

from __future__ import annotations

import contextlib

import numpy as np

from ._segment_plan import _Plan
from ._tasks import _read_piece, gpu_limit


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
    image = _read_piece(piece, read_region)
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


def _runs_on_gpu(backend: str) -> bool:
    from .._backend import select_xp

    return select_xp(backend) is not np
