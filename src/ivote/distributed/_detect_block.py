"""The per-block work of a chunked detection: the whole image as one block, or
pass 2's detection of one block with the whole image's statistics."""

from __future__ import annotations

import numpy as np

from ._tasks import _on_device, _read


def _whole_task(source, options, limit):
    """The whole image as one block: ``iterative_voting`` in memory (on a GPU under the limit)."""
    from ..detect._voting import iterative_voting

    block = _read(source)
    _, device = _on_device(options["backend"], limit)
    with device:
        return iterative_voting(block, **options)


def _detect_task(source, owned, region, plan, sign, blur, spacing, given, backend, limit):
    """Pass 2: the block's local maxima with the whole image's statistics; those it
    owns, in whole-image coordinates, with their votes and contrasts."""
    from .._backend import gpu_memory_guard, to_device, use_numba
    from ..detect._backends import _detect_on_cpu, _detect_on_gpu, _detect_on_numba

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
