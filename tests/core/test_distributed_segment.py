"""Chunked segmentation (ivote.distributed.segment_chunked) against the in-memory segment_nuclei."""

import math

import numpy as np
import pytest

pytest.importorskip("dask")

from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.distributed import segment_chunked  # noqa: E402
from ivote.distributed._segment_merge import _reconcile  # noqa: E402
from ivote.distributed._segment_percentiles import intensity_range_chunked  # noqa: E402
from ivote.segment import segment_nuclei  # noqa: E402
from ivote.segment._segment import _intensity_range  # noqa: E402

OPTIONS = dict(iterations=100, backend="numpy")


@pytest.fixture(scope="module")
def sample_2d():
    image, truth, centers, spacing, radius = synthetic_nuclei((80, 224), radius=6, seed=2)
    labels = segment_nuclei(image, centers, radius=radius, spacing=spacing, **OPTIONS)
    return image, centers, spacing, radius, labels


@pytest.fixture(scope="module")
def sample_3d():
    image, truth, centers, spacing, radius = synthetic_nuclei((12, 40, 96), radius=4, seed=5)
    labels = segment_nuclei(image, centers, radius=radius, spacing=spacing, iterations=60, backend="numpy")
    return image, centers, spacing, radius, labels


@pytest.mark.parametrize("chunks", [28, (40, 56), (80, 224)])
def test_chunked_equals_in_memory_2d(sample_2d, chunks):
    image, centers, spacing, radius, expected = sample_2d
    result = segment_chunked(image, centers, radius, spacing=spacing, chunks=chunks, scheduler="sync", **OPTIONS)
    # labels are the in-memory ones themselves (label k + 1 for seed k), not only up to renumbering
    np.testing.assert_array_equal(result.labels, expected)
    assert result.count == len(np.unique(expected)) - 1 >= 40
    assert result.iterations == 100 and result.passes == 1
    if chunks != (80, 224):
        assert math.prod(result.largest_region) < image.size  # each block read only part of the image


@pytest.mark.slow
@pytest.mark.parametrize("chunks", [(12, 40, 24), (6, 40, 48)])
def test_chunked_equals_in_memory_3d(sample_3d, chunks):
    image, centers, spacing, radius, expected = sample_3d
    result = segment_chunked(image, centers, radius, spacing=spacing, chunks=chunks, hops=1, scheduler="sync",
                             iterations=60, backend="numpy")
    np.testing.assert_array_equal(result.labels, expected)
    assert result.count >= 15
    assert math.prod(result.largest_region) < image.size  # each block read only part of the volume


def test_halo_too_small_differs(sample_2d):
    """Without the neighbours of the block's objects (hops=0) an object near a seam comes out
    different; one overlap further (hops=1) it is equal: the halo rule is needed, not decoration."""
    image, centers, spacing, radius, _ = sample_2d
    # lambda2 = 2 (the default until 2026-11-24) grows the objects into their neighbours' boxes far
    # enough for hops=0 to differ on this sample; with the symmetric default it happens not to
    options = dict(OPTIONS, lambda2=2.0)
    expected = segment_nuclei(image, centers, radius=radius, spacing=spacing, **options)
    short = segment_chunked(image, centers, radius, spacing=spacing, chunks=56, hops=0, scheduler="sync", **options)
    assert (np.asarray(short.labels) != expected).any()
    enough = segment_chunked(image, centers, radius, spacing=spacing, chunks=56, hops=1, scheduler="sync", **options)
    np.testing.assert_array_equal(enough.labels, expected)


@pytest.mark.slow
def test_global_convergence_matches(sample_2d):
    """A tolerance that stops the in-memory loop early: the blocks' own-object counts, summed,
    stop at the same iteration (a second pass)."""
    image, centers, spacing, radius, _ = sample_2d
    options = dict(iterations=300, tol=0.05, backend="numpy")
    expected = segment_nuclei(image, centers, radius=radius, spacing=spacing, **options)
    result = segment_chunked(image, centers, radius, spacing=spacing, chunks=56, scheduler="sync", **options)
    assert result.passes == 2 and result.iterations < 300
    np.testing.assert_array_equal(result.labels, expected)
    stopped = segment_nuclei(image, centers, radius=radius, spacing=spacing, iterations=result.iterations,
                             tol=0, backend="numpy")
    np.testing.assert_array_equal(stopped, expected)


def test_seam_merge_of_one_nucleus_seeded_twice():
    """A nucleus with one seed on each side of a block seam is one label, as in memory."""
    image, truth, centers, spacing, radius = synthetic_nuclei((96, 96), radius=6, seed=4)
    sizes = np.bincount(truth.ravel())[1:]
    k = int(np.argmax(sizes))
    centre = centers[k]
    seam = int(np.ceil(centre[1]))  # a block boundary through the nucleus, between the two seeds
    seeds = np.concatenate([centers, [centre + [0, 1.6]]])
    seeds[k] = centre - [0, 1.6]
    expected = segment_nuclei(image, seeds, radius=radius, spacing=spacing, **OPTIONS)
    assert expected[tuple(np.rint(seeds[-1]).astype(int))] == k + 1  # merged in memory: the lower label
    result = segment_chunked(image, seeds, radius, spacing=spacing, chunks=(96, seam), scheduler="sync", **OPTIONS)
    np.testing.assert_array_equal(result.labels, expected)


def test_reconcile_merges_through_the_union_find():
    """Block 0 merged 5 into 3, block 1 did not: the union-find gives 5 the label 3 there too;
    a chain 9 -> 7 (block 1) and 7 -> 2 (block 0) ends at 2 everywhere."""
    out = np.array([[3, 3, 5, 5], [2, 0, 9, 0]], dtype=np.int32)
    blocks = [(slice(0, 2), slice(0, 2)), (slice(0, 2), slice(2, 4))]
    found = [(np.array([2, 3]), np.array([[5, 3], [7, 2]]), []), (np.array([5, 9]), np.array([[9, 7]]), [])]
    count, rewritten = _reconcile(found, blocks, out, lambda tasks: __import__("dask").compute(*tasks,
                                                                                            scheduler="sync"))
    np.testing.assert_array_equal(out, [[3, 3, 3, 3], [2, 0, 2, 0]])
    assert count == 2 and rewritten == 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint16, np.uint8])
def test_percentiles_block_by_block_are_exact(dtype):
    rng = np.random.default_rng(7)
    image = (rng.gamma(2.0, 300.0, size=(37, 53)) - 50).astype(dtype)
    image[3, 4] = image[5, 6]  # ties
    expected = _intensity_range(image.astype(np.float32 if dtype == np.float32 else np.float64), np)
    blocks = [(None, (slice(y, y + 10), slice(x, x + 16))) for y in range(0, 37, 10) for x in range(0, 53, 16)]
    got = intensity_range_chunked(image, blocks, lambda tasks: __import__("dask").compute(*tasks, scheduler="sync"))
    assert got == expected
    # and the in-memory rule is NumPy's percentile (linear), to rounding
    np.testing.assert_allclose(expected, np.percentile(image.astype(np.float64), [1.0, 99.5]), rtol=1e-12)


def test_zarr_out_and_dask_input(sample_2d, tmp_path):
    zarr = pytest.importorskip("zarr")
    import dask.array as da

    image, centers, spacing, radius, expected = sample_2d
    lazy = da.from_array(image, chunks=28)
    result = segment_chunked(lazy, centers, radius, spacing=spacing, chunks=56, out=tmp_path / "labels.zarr",
                             scheduler="threads", **OPTIONS)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "labels.zarr"), mode="r")[:], expected)


def test_default_blocks_are_large_and_aligned_with_the_files_chunks():
    from ivote.distributed._segment_plan import _default_chunks

    class Stored:
        chunks = (100, 64, 64)

    assert _default_chunks(Stored(), 3) == (300, 256, 256)
    assert _default_chunks(np.zeros((4, 4)), 2) == 2048


def test_one_block_when_the_image_fits_else_blocks_that_fit():
    """Default blocks: the whole image when its need fits the memory (the in-memory call itself, as
    detect_chunked does); under a tighter limit, blocks of the default size or smaller, same labels."""
    from ivote.data import synthetic_nuclei

    image, _, centers, spacing, radius = synthetic_nuclei((6, 300, 20), spacing=(2.0, 1.0, 1.0), radius=4, seed=3)
    options = dict(OPTIONS, backend="numpy")
    whole = segment_chunked(image, centers, radius, spacing=spacing, scheduler="sync", **options)
    assert whole.chunks == image.shape  # 300 > the 256 default, but it fits
    expected = segment_nuclei(image, centers, radius=radius, spacing=spacing, **options)
    np.testing.assert_array_equal(whole.labels, expected)
    tight = segment_chunked(image, centers, radius, spacing=spacing, scheduler="sync", memory_limit=40_000_000,
                            **options)
    assert tight.chunks[1] <= 256 and tight.chunks != image.shape
    np.testing.assert_array_equal(tight.labels, expected)


def test_half_pixel_seeds(sample_2d):
    """Seeds on half pixels (rounding ties) take the same boxes in every block as in memory."""
    image, centers, spacing, radius, _ = sample_2d
    seeds = np.floor(centers) + 0.5
    expected = segment_nuclei(image, seeds, radius=radius, spacing=spacing, **OPTIONS)
    result = segment_chunked(image, seeds, radius, spacing=spacing, chunks=(40, 75), scheduler="sync", **OPTIONS)
    np.testing.assert_array_equal(result.labels, expected)


def test_bad_arguments_are_named(sample_2d):
    image, centers, spacing, radius, _ = sample_2d
    with pytest.raises(ValueError, match="hops"):
        segment_chunked(image, centers, radius, hops=-1, scheduler="sync")
    with pytest.raises(ValueError, match="iter_callback"):
        segment_chunked(image, centers, radius, iter_callback=print, scheduler="sync")
    with pytest.raises(ValueError, match="memory_limit"):
        segment_chunked(image, centers, radius, chunks=(80, 224), memory_limit=1000, scheduler="sync")
    with pytest.raises(ValueError, match="2D"):
        segment_chunked(image[0], centers[:, :1], radius, scheduler="sync")


def test_memory_limit_shrinks_the_blocks(sample_2d):
    image, centers, spacing, radius, expected = sample_2d
    result = segment_chunked(image, centers, radius, spacing=spacing, memory_limit=5_000_000,
                             scheduler="sync", **OPTIONS)
    assert result.chunks != (80, 224)
    np.testing.assert_array_equal(result.labels, expected)


def _layout(image, centers, radius, hops):
    from ivote.distributed import _segment_plan
    from ivote.segment._segment import box_half_widths

    half = np.asarray(box_half_widths(radius, (1.0,) * image.ndim, 1.5), np.int64)
    rounded = np.rint(centers).astype(np.int64)
    return _segment_plan._Layout(image.shape, rounded, half, hops, _segment_plan._overlap_graph(rounded, half),
                                 int(np.prod(2 * half + 1)))


@pytest.mark.parametrize("hops", [0, 1, 2, None])
def test_smallest_need_bounds_every_block_size(hops):
    """No blocks need less than _smallest_need (the neighbourhoods of the boxes holding one seed's pixel),
    from the whole image down to blocks of one pixel; the block of one pixel at that seed needs it."""
    image, _, centers, _, radius = synthetic_nuclei((48, 64), radius=4, seed=2)
    layout = _layout(image, centers, radius, hops)
    least, seed = layout.smallest_need()
    needs = {chunks: layout.largest_need(layout.plans(chunks))
             for chunks in [(48, 64), (24, 64), (16, 16), (5, 7), (3, 2), (1, 1)]}
    assert all(need >= least for need in needs.values()), (least, needs)
    at = tuple(int(v) for v in layout.rounded[seed])
    one = next(p for p in layout.plans((1, 1)) if tuple(s.start for s in p.block) == at)
    from ivote.distributed._segment_plan import _gpu_bytes

    assert least <= _gpu_bytes(one, layout.box_cells) <= least + 64 * (48 + 64)  # its region's even start aside


def test_memory_limit_below_every_block_size_fails_at_once(monkeypatch):
    """A memory limit below the smallest need any block size can have (the hops=2 neighbourhoods of a dense
    image) is refused before halving the blocks at all, naming the limit and that need; just above it, the
    halving finds blocks that fit."""
    from ivote.distributed import _segment_plan

    image, _, centers, spacing, radius = synthetic_nuclei((128, 128), radius=6, seed=2)
    least, _ = _layout(image, centers, radius, 2).smallest_need()
    calls = []
    real = _segment_plan._plans
    monkeypatch.setattr(_segment_plan, "_plans", lambda *a: calls.append(a[1]) or real(*a))
    limit = least - 1
    with pytest.raises(ValueError, match=rf"memory_limit={limit} bytes .* below the smallest need any block size "
                                         rf"can have: {least} bytes.*lower hops \(now 2"):
        segment_chunked(image, centers, radius, memory_limit=limit, scheduler="sync", **OPTIONS)
    assert len(calls) <= 2  # the whole image's plan and the first blocks', no halving


def test_halving_stops_when_the_need_stops_falling():
    """The blocks are halved while the largest need falls; when a halving brings none, the error names the limit
    and the smallest need found, with its blocks."""
    from ivote.distributed import _segment_plan

    class Plateau:  # needs of blocks by size: 900, 500, then no lower along either axis (the neighbourhoods dominate)
        hops, half, rounded = 2, np.array([2, 2]), np.zeros((1, 2), np.int64)
        needs = {(64, 64): 900, (32, 64): 500, (32, 32): 500, (16, 32): 520, (16, 16): 100}

        def __init__(self):
            self.tried = []

        def plans(self, chunks):
            self.tried.append(chunks)
            return chunks

        def largest_need(self, chunks):
            return self.needs[chunks]

        def smallest_need(self):
            return 50, 0

    layout = Plateau()
    with pytest.raises(ValueError, match=r"memory_limit=400 bytes .* smallest need of the blocks tried: 500 bytes "
                                         r".*blocks of \(32, 64\), and smaller blocks no longer need less"):
        _segment_plan._fit_memory(layout, (64, 64), (64, 64), 400, given=False)
    assert layout.tried == [(32, 64), (32, 32), (16, 32)]  # stopped after a halving along each axis, no fall
    assert _segment_plan._fit_memory(layout, (64, 64), (64, 64), 600, given=False) == ((32, 64), (32, 64))
    layout.needs[(16, 32)] = 300  # a plateau along one axis, a fall along the other: it goes on, and fits
    assert _segment_plan._fit_memory(layout, (64, 64), (64, 64), 400, given=False) == ((16, 32), (16, 32))
