"""The global decisions of a chunked segmentation, after every block has run: the
iteration the whole image would have stopped at, and the merges of seeds reported
across seams, made one through the project's union-find."""

from __future__ import annotations

import numpy as np

from ._segment_block import _relabel


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
