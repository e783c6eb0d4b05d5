"""Chunked segmentation on the GPU under a GPU memory limit below the whole volume's need."""

import numpy as np
import pytest

import ivote._backend
from ivote._backend import to_host
from ivote.data import synthetic_nuclei
from ivote.segment import segment_nuclei

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not ivote._backend.cupy_available(), reason="needs CuPy and a GPU"),
]


def test_chunked_on_gpu_under_a_memory_limit_matches_in_memory(gpu_pool):
    pytest.importorskip("dask")
    from ivote.distributed import segment_chunked
    from ivote.distributed._segment_plan import _gpu_bytes, _Plan

    image, truth, centers, spacing, radius = synthetic_nuclei((24, 256, 256), spacing=(2.0, 1.0, 1.0), radius=6,
                                                              seed=8)
    options = dict(iterations=120, backend="cupy")
    expected = to_host(segment_nuclei(image, centers, radius=radius, spacing=spacing, **options))
    # what the whole volume would need on the GPU in one call (the rule that sizes the blocks)
    from ivote.segment._segment import box_half_widths

    half = np.asarray(box_half_widths(radius / 1.0, (2.0, 1.0, 1.0), 1.5))
    whole = _gpu_bytes(_Plan((), np.arange(len(centers)), np.ones(len(centers), bool),
                             tuple(slice(0, n) for n in image.shape)), int(np.prod(2 * half + 1)))
    # a third: with the default 2 hops each block also evolves its neighbours' neighbours, so on this small,
    # dense volume the smallest useful block needs about 0.3 of the whole (a 512^3 one: 0.3 with 256^3 blocks)
    limit = whole // 3
    from ivote.distributed import _segment_block

    with gpu_pool.blocks_grown(_segment_block) as grown:
        result = segment_chunked(image, centers, radius, spacing=spacing, memory_limit=limit, scheduler="sync",
                                 **options)
    assert gpu_pool.pool.get_limit() == gpu_pool.previous  # the cap is lifted after each block
    assert len(grown) > 1 and 0 < max(grown) <= limit  # no block grew the pool past its cap (its freed blocks kept)
    assert result.chunks != image.shape
    labels = np.asarray(result.labels)
    assert result.count == len(np.unique(expected)) - 1
    # float atomics make GPU sums order-dependent: compare per object, as the GPU tests do
    worst = 1.0
    for k in np.unique(expected)[1:]:
        a, b = expected == k, labels == k
        worst = min(worst, (a & b).sum() / (a | b).sum())
    assert worst >= 0.99, worst
