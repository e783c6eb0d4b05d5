"""Chunked detection on the GPU (CuPy) equals the in-memory GPU detection, under a memory limit."""

import numpy as np
import pytest

from ivote import _backend
from ivote.data import synthetic_nuclei
from ivote.detect import iterative_voting
from ivote.detect._plan import make_plan
from ivote.detect._settings import _DEFAULT_BLUR_PIXELS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _backend.cupy_available(), reason="needs a CUDA GPU with CuPy"),
]

pytest.importorskip("dask")

from ivote.distributed import _detect_chunks, _tasks, detect_chunked, detection_halo  # noqa: E402


def _assert_same(chunked, whole):
    """Bit for bit: every candidate, score, contrast and the threshold."""
    assert len(whole.points) > 20
    for field in ("threshold", "candidates", "candidate_scores", "candidate_contrasts", "points", "scores"):
        np.testing.assert_array_equal(getattr(chunked, field), getattr(whole, field), err_msg=field)


@pytest.mark.parametrize("chunks", [(33, 33), (64, 100), (256, 256)])
def test_chunked_gpu_equals_in_memory_2d(chunks):
    image, *_ = synthetic_nuclei((256, 256), radius=4.0, seed=31)
    image = image.astype(np.float32)
    whole = iterative_voting(image, radius=4.0, backend="cupy")
    chunked = detect_chunked(image, 4.0, chunks=chunks, scheduler="threads", backend="cupy")
    assert chunked.backend == "cupy"
    _assert_same(chunked, whole)


@pytest.mark.parametrize("chunks", [(14, 33, 33), (9, 40, 50)])
def test_chunked_gpu_equals_in_memory_3d(chunks):
    spacing = (2.0, 1.0, 1.0)
    image, *_ = synthetic_nuclei((24, 96, 96), spacing=spacing, radius=4.0, seed=32)
    whole = iterative_voting(image, radius=4.0, spacing=spacing, backend="cupy")
    chunked = detect_chunked(image, 4.0, spacing=spacing, chunks=chunks, scheduler="threads", backend="cupy")
    _assert_same(chunked, whole)


def test_gpu_memory_limit_well_below_the_volume(gpu_pool):
    """A volume whose in-memory detection needs several times the limit completes within it and matches;
    the limit is binding: the in-memory detection fails under it. The need is measured (what the pool
    grew by in the in-memory run, its free blocks taken first), not assumed, so the test holds in any
    order (tests/gpu/conftest.py)."""
    from ivote.errors import ResourceLimitError

    spacing = (2.0, 1.0, 1.0)
    tile, *_ = synthetic_nuclei((24, 96, 96), spacing=spacing, radius=4.0, seed=33)
    image = np.tile(tile, (2, 4, 4)).astype(np.float32)  # 48 x 384 x 384 (placing its nuclei one by one takes minutes)
    before = gpu_pool.pool.total_bytes()
    whole = iterative_voting(image, radius=4.0, spacing=spacing, backend="cupy")
    need = gpu_pool.pool.total_bytes() - before  # about 26 B x 7.1 M voxels = 184 MB (docs/benchmarks.md)
    assert need > 16 * 2**20, need
    limit = need // 6
    with gpu_pool.blocks_grown(_tasks) as grown:
        chunked = detect_chunked(image, 4.0, spacing=spacing, memory_limit=limit, scheduler="threads",
                                 backend="cupy")
    _assert_same(chunked, whole)
    blur = _DEFAULT_BLUR_PIXELS * min(spacing)
    halo = detection_halo(make_plan(4.0, spacing, 3), tuple(blur / s for s in spacing))
    blocks = _detect_chunks._resolve_chunks(None, image.shape, halo, limit,
                                            _detect_chunks._block_cost("cupy", image.dtype))
    assert np.prod(blocks) < image.size / 4  # it did run in small blocks
    assert len(grown) >= 8 and 0 < max(grown) <= limit, (grown, limit)  # two GPU passes per block
    assert gpu_pool.pool.get_limit() == gpu_pool.previous  # every block's cap was lifted

    gpu_pool.empty()
    gpu_pool.cap(limit)
    try:
        with pytest.raises(ResourceLimitError):
            iterative_voting(image, radius=4.0, spacing=spacing, backend="cupy")
    finally:
        gpu_pool.lift()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_cost_covers_the_in_memory_detection_2d(gpu_pool, dtype):
    """The bytes a voxel that blocks are sized by (``_block_cost``) cover what the in-memory GPU detection
    adds to the pool, per voxel, input included: a 2D float64 block (an H&E slide's hematoxylin density)
    keeps its float64 input and blurred image through the passes (a 100,000² slide's 60 Mvoxel blocks ran
    out of a 2 GB limit sized at 32 bytes a voxel); then a chunked run under a limit of a quarter of the
    need completes and matches. (3D: test_gpu_memory_limit_well_below_the_volume; a small volume's fixed
    buffers, its cone tables among them, weigh more per voxel than a block's.)"""
    ndim, shape = 2, (768, 768)
    image, *_ = synthetic_nuclei(shape, radius=4.0, seed=35)
    image = image.astype(dtype)
    gpu_pool.empty()
    before = gpu_pool.pool.total_bytes()
    whole = iterative_voting(image, radius=4.0, backend="cupy")
    need = gpu_pool.pool.total_bytes() - before
    cost = _detect_chunks._block_cost("cupy", image.dtype, ndim)
    assert need / image.size <= cost.per_voxel, (need / image.size, cost.per_voxel)
    limit = int(cost.per_voxel * image.size) // 4
    chunked = detect_chunked(image, 4.0, memory_limit=limit, scheduler="threads", backend="cupy")
    _assert_same(chunked, whole)


def test_local_cluster_one_worker_per_gpu():
    """cluster('local', gpus=1): one worker process seeing one GPU (dask-cuda or CUDA_VISIBLE_DEVICES)."""
    pytest.importorskip("distributed")
    from ivote.distributed import cluster

    image, *_ = synthetic_nuclei((192, 192), radius=4.0, seed=34)
    whole = iterative_voting(image, radius=4.0, backend="cupy")
    with cluster("local", gpus=1):
        chunked = detect_chunked(image, 4.0, chunks=64, backend="cupy")
    _assert_same(chunked, whole)
