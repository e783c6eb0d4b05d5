"""The chunked engine sizes its blocks by the memory of the backend that runs them: the NumPy
path's per-voxel and fixed memory (``detect._settings.cpu_detection_memory``) are larger than
Numba's, so ``backend='numpy'`` under a memory limit runs smaller blocks, each within the limit."""

import math

import numpy as np
import pytest

from ivote import iterative_voting
from ivote.data import synthetic_nuclei
from ivote.detect._plan import make_plan
from ivote.detect._settings import _DEFAULT_BLUR_PIXELS, cpu_detection_memory
from ivote.distributed import _detect_chunks
from ivote.distributed import detect_chunked, detection_halo

SPACING = (0.5, 0.5)
RADIUS = 3.0


def _need(path, block_voxels, itemsize):
    """A block's host memory as the in-memory detection estimates it, plus the block read."""
    return cpu_detection_memory(block_voxels, path) + itemsize * block_voxels


@pytest.mark.parametrize("path", ["numpy", "numba"])
def test_default_blocks_fit_the_limit_with_the_backends_own_memory(path):
    shape, halo, itemsize = (4000, 3000), (32, 32), np.dtype(np.float32).itemsize
    limit = 256 * 2**20
    chunks = _detect_chunks._resolve_chunks(None, shape, halo, limit, _detect_chunks._block_cost(path, np.float32))
    assert _need(path, _detect_chunks._block_voxels(chunks, shape, halo), itemsize) <= limit
    # and not far below it: the next size up along either axis would not fit (or is the whole axis)
    for axis in range(2):
        k = math.ceil(shape[axis] / chunks[axis])
        if k > 1:
            bigger = list(chunks)
            bigger[axis] = math.ceil(shape[axis] / (k - 1))
            assert _need(path, _detect_chunks._block_voxels(bigger, shape, halo), itemsize) > limit


def test_numpy_blocks_are_smaller_than_numba_blocks_under_one_limit():
    shape, halo, limit = (4000, 3000), (32, 32), 512 * 2**20
    costs = {path: _detect_chunks._block_cost(path, np.float32) for path in ("numpy", "numba")}
    voxels = {path: _detect_chunks._block_voxels(_detect_chunks._resolve_chunks(None, shape, halo, limit, cost),
                                                 shape, halo)
              for path, cost in costs.items()}
    assert voxels["numpy"] < voxels["numba"] / 2


def test_a_numpy_run_under_a_limit_runs_blocks_within_it_and_finds_the_same_cells():
    sample = synthetic_nuclei((160, 160), radius=RADIUS, spacing=SPACING, seed=11)
    image = sample.image.astype(np.float32)
    plan = make_plan(RADIUS, SPACING, 2)
    halo = detection_halo(plan, (_DEFAULT_BLUR_PIXELS,) * 2)
    whole_need = _need("numpy", image.size, image.itemsize)
    # room for the whole image with Numba's memory per voxel, not with the NumPy path's
    limit = int(whole_need - 2**20)
    assert image.size * (cpu_detection_memory(1, "numba") - cpu_detection_memory(0, "numba") + image.itemsize) \
        + cpu_detection_memory(0, "numba") < limit
    totals = []
    found = detect_chunked(image, RADIUS, spacing=SPACING, memory_limit=limit, scheduler="sync", backend="numpy",
                           progress=lambda done, total: totals.append(total))
    n_blocks = totals[-1] // 2  # two passes over the blocks
    assert n_blocks > 1, totals  # not the whole image in one task
    chunks = _detect_chunks._resolve_chunks(None, image.shape, halo, limit,
                                            _detect_chunks._block_cost("numpy", image.dtype))
    assert len(_detect_chunks._blocks(image.shape, chunks)) == n_blocks
    assert _need("numpy", _detect_chunks._block_voxels(chunks, image.shape, halo), image.itemsize) <= limit
    whole = iterative_voting(image, radius=RADIUS, spacing=SPACING, backend="numpy")
    np.testing.assert_array_equal(found.points, whole.points)


def test_a_limit_below_the_numpy_paths_fixed_memory_says_so():
    image = np.zeros((64, 64), np.float32)
    with pytest.raises(ValueError, match=r"memory_limit .*numpy"):
        detect_chunked(image, RADIUS, spacing=SPACING, memory_limit=cpu_detection_memory(0, "numpy") // 2,
                       scheduler="sync", backend="numpy")


@pytest.mark.parametrize("shape", [(640, 480), (24, 96, 80)])
def test_the_statistics_pass_gradient_holds_three_arrays_of_the_block_at_most(shape):
    # blocks are sized by GPU_BYTES_PER_VOXEL (32) for the detection; the first pass's gradient ran the same
    # array code on the GPU with two temporaries per component (40 bytes a voxel: a 100,000² slide's block ran
    # out of its GPU limit). Traced on NumPy, the same code: the blurred copy, the sum and one component.
    import tracemalloc

    from ivote.distributed._detect_statistics import _gradient_magnitude

    block = np.random.default_rng(0).random(shape)
    spacing = (1.0, 0.5, 0.5)[-len(shape):]
    owned = tuple(slice(2, n - 2) for n in shape)
    region = tuple(slice(0, n) for n in shape)
    tracemalloc.start()
    try:
        magnitude = _gradient_magnitude(block, owned, region, 0.0, 1.0, (0.0,) * len(shape), spacing, np, False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 3.1 * block.nbytes, f"{peak / block.size:.1f} bytes per voxel"  # edges: a few rows more
    assert 3 * 8 < _detect_chunks.GPU_BYTES_PER_VOXEL
    # the values: the central differences of np.gradient, in the kernels' order of sums
    parts = np.gradient(block, *spacing)
    expected = parts[0] ** 2
    for part in parts[1:]:
        expected = expected + part**2
    np.testing.assert_array_equal(magnitude, np.sqrt(expected)[owned])


def test_gpu_blocks_of_a_2d_float64_slide_are_sized_for_its_wider_input():
    # an H&E slide's density is float64 and 2D: 40 bytes a voxel on the GPU (tests/gpu measures the need)
    assert _detect_chunks._block_cost("cupy", np.float32, 3).per_voxel == _detect_chunks.GPU_BYTES_PER_VOXEL
    assert _detect_chunks._block_cost("cupy", np.float32, 2).per_voxel == _detect_chunks.GPU_BYTES_PER_VOXEL + 4
    cost = _detect_chunks._block_cost("cupy", np.float64, 2)
    assert cost.per_voxel == _detect_chunks.GPU_BYTES_PER_VOXEL + 8
    shape, halo, limit = (100_000, 100_000), (40, 40), 2 * 10**9
    chunks = _detect_chunks._resolve_chunks(None, shape, halo, limit, cost)
    with_halo = np.prod([c + 2 * h for c, h in zip(chunks, halo)])
    assert with_halo * cost.per_voxel <= limit
    assert with_halo * (cost.per_voxel - 8) > 0.75 * limit  # still the largest blocks that fit
