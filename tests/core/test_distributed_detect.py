"""Chunked detection (ivote.distributed.detect_chunked) equals the in-memory detection."""

import numpy as np
import pytest

pytest.importorskip("dask")

from ivote import iterative_voting  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.detect._plan import make_plan  # noqa: E402
from ivote.distributed import _detect, _detect_chunks, _detect_statistics, _tasks  # noqa: E402
from ivote.distributed import detect_chunked, detection_halo  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

RADIUS = 4


@pytest.fixture(scope="module")
def image_2d():
    image, *_ = synthetic_nuclei((150, 150), radius=RADIUS, seed=1)
    image = image.copy()
    # uneven brightness: a block's own minimum, maximum and largest gradient are not the image's
    image[:, 90:] *= 0.35
    image[4:14, 4:14] = 3 * image.max()
    return image


@pytest.fixture(scope="module")
def whole_2d(image_2d):
    return iterative_voting(image_2d, radius=RADIUS, backend="numpy")


def _assert_same(chunked, whole):
    """The same cells, scores, contrasts, candidates and threshold, in the same order."""
    assert len(whole.points) > 20
    assert chunked.threshold == whole.threshold
    np.testing.assert_array_equal(chunked.candidates, whole.candidates)
    np.testing.assert_array_equal(chunked.candidate_scores, whole.candidate_scores)
    np.testing.assert_array_equal(chunked.candidate_contrasts, whole.candidate_contrasts)
    np.testing.assert_array_equal(chunked.points, whole.points)
    np.testing.assert_array_equal(chunked.scores, whole.scores)
    assert chunked.n_passes == whole.n_passes and chunked.radius == whole.radius


def _halo_2d():
    return detection_halo(make_plan(RADIUS, (1.0, 1.0), 2), (2.0, 2.0))


@pytest.mark.parametrize("chunks", ["halo+1", (37, 61), (150, 150), (149, 1000)])
def test_chunked_equals_in_memory_2d(image_2d, whole_2d, chunks):
    if chunks == "halo+1":
        chunks = tuple(h + 1 for h in _halo_2d())
    chunked = detect_chunked(image_2d, RADIUS, chunks=chunks, scheduler="sync", backend="numpy")
    _assert_same(chunked, whole_2d)


@pytest.mark.slow
def test_chunked_equals_in_memory_3d_anisotropic():
    spacing = (2.0, 1.0, 1.0)
    image, *_ = synthetic_nuclei((16, 56, 56), spacing=spacing, radius=RADIUS, seed=2)
    whole = iterative_voting(image, radius=RADIUS, spacing=spacing, backend="numpy")
    halo = detection_halo(make_plan(RADIUS, spacing, 3), (1.0, 2.0, 2.0))
    assert halo == (13, 32, 32)
    for chunks in [(14, 33, 33), (7, 29, 40)]:  # just above the halo; odd
        chunked = detect_chunked(image, RADIUS, spacing=spacing, chunks=chunks, scheduler="sync", backend="numpy")
        _assert_same(chunked, whole)


def test_chunked_numba_equals_in_memory(image_2d):
    pytest.importorskip("numba")
    whole = iterative_voting(image_2d, radius=RADIUS, backend="numba")
    chunked = detect_chunked(image_2d, RADIUS, chunks=(50, 75), scheduler="threads", backend="numba")
    _assert_same(chunked, whole)


def test_halo_too_small_loses_or_moves_cells(image_2d, whole_2d):
    """The equality tests can fail: with a fraction of the halo the seams differ."""
    chunked = detect_chunked(image_2d, RADIUS, chunks=37, halo=4, scheduler="sync", backend="numpy")
    assert not np.array_equal(chunked.candidates, whole_2d.candidates)


def test_per_block_statistics_would_differ(image_2d, whole_2d, monkeypatch):
    """The equality tests can fail: a block detected with its own minimum, maximum,
    largest gradient and noise (not the image's) gives other cells."""
    original = _detect._detect_task

    def own_statistics(source, owned, region, plan, sign, blur, spacing, given, backend, limit):
        from ivote.detect._contrast import grey_step, noise_positions, noise_residuals, noise_sigma
        from ivote.detect._result import GlobalStatistics

        block = _tasks._read(source)
        low, high = float(block.min()), float(block.max())
        whole = tuple(slice(0, n) for n in block.shape)
        sigma = tuple(blur / s for s in spacing)
        largest = _detect_statistics._gradient_task(block, whole, whole, low, high, sigma, spacing, backend, limit)
        normalised = (block - low) / (high - low)
        noise = noise_sigma(noise_residuals(normalised, noise_positions(block.shape)), block.ndim,
                            grey_step(block.dtype, low, high))
        own = GlobalStatistics(low, high, largest, noise)
        return original(source, owned, region, plan, sign, blur, spacing, own, backend, limit)

    monkeypatch.setattr(_detect, "_detect_task", own_statistics)
    chunked = detect_chunked(image_2d, RADIUS, chunks=(150, 75), scheduler="sync", backend="numpy")
    assert not np.array_equal(chunked.candidate_scores, whole_2d.candidate_scores)


def test_dask_and_zarr_inputs(image_2d, whole_2d, tmp_path):
    da = pytest.importorskip("dask.array")
    lazy = da.from_array(image_2d, chunks=(40, 70))
    _assert_same(detect_chunked(lazy, RADIUS, chunks=75, scheduler="threads", backend="numpy"), whole_2d)
    # iterative_voting routes a Dask array to the chunked path
    _assert_same(iterative_voting(lazy, radius=RADIUS, backend="numpy"), whole_2d)
    zarr = pytest.importorskip("zarr")
    stored = zarr.open_array(str(tmp_path / "image.zarr"), mode="w", shape=image_2d.shape, chunks=(64, 64),
                             dtype=image_2d.dtype)
    stored[:] = image_2d
    _assert_same(detect_chunked(stored, RADIUS, chunks=(64, 64), scheduler="sync", backend="numpy"), whole_2d)


def test_integer_image_and_dark_polarity():
    image, *_ = synthetic_nuclei((96, 120), radius=RADIUS, seed=5, polarity="dark")
    image = np.round(np.clip(image, 0, None) * 1000).astype(np.uint16)  # no wrap of negative noise to 65535
    options = dict(polarity="dark", threshold="reference", blur=1.5, backend="numpy")
    whole = iterative_voting(image, radius=RADIUS, **options)
    chunked = detect_chunked(image, RADIUS, chunks=(40, 50), scheduler="sync", **options)
    _assert_same(chunked, whole)


def test_progress_counts_blocks_and_cancels(image_2d):
    calls = []
    detect_chunked(image_2d, RADIUS, chunks=75, scheduler="sync", backend="numpy",
                   progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, 8) and calls[-1] == (8, 8)  # two passes over 4 blocks
    assert [d for d, _ in calls] == list(range(9))

    class Stop(Exception):
        pass

    seen = []

    def cancel(done, total):
        seen.append(done)
        if done == 5:
            raise Stop

    with pytest.raises(Stop):
        detect_chunked(image_2d, RADIUS, chunks=75, scheduler="threads", backend="numpy", progress=cancel)
    assert seen[-1] == 5


@pytest.mark.slow
def test_on_block_streams_every_final_cell_before_the_end(image_2d, whole_2d):
    """Each block's cells arrive as it finishes; the final points are among them (the
    suppression across seams and the threshold only remove)."""
    streamed = []
    chunked = detect_chunked(image_2d, RADIUS, chunks=75, scheduler="sync", backend="numpy",
                             on_block=lambda points, scores: streamed.append((points, scores)))
    _assert_same(chunked, whole_2d)
    assert len(streamed) == 4  # one call per block
    assert all(len(p) > 0 and p.shape[1] == 2 and len(p) == len(s) for p, s in streamed)
    points = np.concatenate([p for p, _ in streamed])
    scores = np.concatenate([s for _, s in streamed])
    assert len(np.unique(points, axis=0)) == len(points)  # no block streams another's cell
    order = np.lexsort(points.T[::-1])
    final = {tuple(p): s for p, s in zip(points[order], scores[order])}
    assert all(final[tuple(p)] == s for p, s in zip(whole_2d.points, whole_2d.scores))


def test_on_block_with_one_block_gives_the_final_points(image_2d, whole_2d):
    streamed = []
    detect_chunked(image_2d, RADIUS, scheduler="sync", backend="numpy",
                   on_block=lambda points, scores: streamed.append(points))
    assert len(streamed) == 1
    np.testing.assert_array_equal(streamed[0], whole_2d.points)


def test_on_block_raising_stops_the_run(image_2d):
    class Stop(Exception):
        pass

    def stop(points, scores):
        raise Stop

    with pytest.raises(Stop):
        detect_chunked(image_2d, RADIUS, chunks=75, scheduler="threads", backend="numpy", on_block=stop)


def test_local_cluster(image_2d, whole_2d):
    pytest.importorskip("distributed")
    from ivote.distributed import cluster

    calls = []
    with cluster("local", gpus=0, workers=2):
        chunked = detect_chunked(image_2d, RADIUS, chunks=(75, 150), backend="numpy",
                                 progress=lambda done, total: calls.append(done))
    _assert_same(chunked, whole_2d)
    assert calls[-1] == 4  # two passes over 2 blocks


def test_matches_truth_across_seams():
    """Cells on seams are found once: the chunked cells match the true centres as well as in memory."""
    image, labels, centers, *_ = synthetic_nuclei((120, 120), radius=RADIUS, seed=7)
    chunked = detect_chunked(image, RADIUS, chunks=33, scheduler="sync", backend="numpy")
    whole = iterative_voting(image, radius=RADIUS, backend="numpy")
    assert match_points(chunked.points, whole.points, tolerance=1.0).f1 == 1.0
    assert len(np.unique(chunked.points, axis=0)) == len(chunked.points)
    assert match_points(chunked.points, centers, tolerance=RADIUS / 2).f1 > 0.9


def test_auto_radius_is_the_in_memory_estimate_on_a_small_image(image_2d):
    whole = iterative_voting(image_2d, radius="auto", backend="numpy")
    chunked = detect_chunked(image_2d, "auto", chunks=(75, 150), scheduler="sync", backend="numpy")
    assert chunked.radius_estimated and chunked.radius == whole.radius
    _assert_same(chunked, whole)


def test_constant_image_gives_no_cells():
    found = detect_chunked(np.full((60, 60), 7.0), RADIUS, chunks=30, scheduler="sync", backend="numpy")
    assert len(found.points) == 0 and found.n_passes == 0


@pytest.mark.parametrize("call, error, match", [
    (lambda im: detect_chunked(im, RADIUS, stains="auto"), ValueError, "RGB"),
    (lambda im: detect_chunked(np.zeros((40, 40, 3)), RADIUS, tissue="everywhere"), ValueError, "tissue"),
    (lambda im: detect_chunked(im, "big"), ValueError, "radius"),
    (lambda im: detect_chunked(im, RADIUS, features=im), TypeError, "features"),
    (lambda im: detect_chunked(im, RADIUS, chunks=0), ValueError, "chunks"),
    (lambda im: detect_chunked(im, RADIUS, halo=-1), ValueError, "halo"),
    (lambda im: detect_chunked(im, RADIUS, memory_limit="lots"), ValueError, "memory_limit"),
    (lambda im: detect_chunked(im, RADIUS, chunks=150, memory_limit="1MB", backend="numpy"), ValueError,
     "memory_limit"),
    (lambda im: detect_chunked(np.zeros((4, 5, 6, 7)), RADIUS), ValueError, "2D"),
    (lambda im: detect_chunked(np.where(im > 0.5, np.nan, im), RADIUS, chunks=75, scheduler="sync",
                               backend="numpy"), Exception, "NaN"),
])
def test_bad_input_is_refused(image_2d, call, error, match):
    with pytest.raises(error, match=match):
        call(image_2d)


def test_default_chunks_fit_the_memory_limit():
    halo = (32, 32)
    numba = _detect_chunks._block_cost("numba", np.float32)
    # the whole image fits: one block
    assert _detect_chunks._resolve_chunks(None, (150, 150), halo, 10**9, numba) == (150, 150)
    limit = 64 * 2**20
    chunks = _detect_chunks._resolve_chunks(None, (4000, 3000), halo, limit, numba)
    assert _detect_chunks._block_voxels(chunks, (4000, 3000), halo) * numba.per_voxel + numba.fixed <= limit
    blocks = _detect_chunks._blocks((4000, 3000), chunks)
    read = sum(np.prod([min(n, s.stop + h) - max(0, s.start - h) for s, h, n in zip(b, halo, (4000, 3000))])
               for b in blocks)
    assert read < 1.2 * 4000 * 3000  # halos add less than a fifth
    # one block per worker at least
    four = _detect_chunks._resolve_chunks(None, (150, 150), halo, 10**9, numba, 4)
    assert len(_detect_chunks._blocks((150, 150), four)) >= 4
    with pytest.raises(ValueError, match="memory_limit"):
        _detect_chunks._resolve_chunks(None, (150, 150), halo, 1000, numba)
    # a GPU block is one pass: fewer than 2**31 voxels even when the memory would hold more
    big = (2000, 2048, 2048)
    chunks = _detect_chunks._resolve_chunks(None, big, (76,) * 3, 10**12,
                                            _detect_chunks._block_cost("cupy", np.float32))
    assert _detect_chunks._block_voxels(chunks, big, (76,) * 3) < 2**31


@pytest.mark.parametrize("shape", [(5, 7), (2, 9), (4, 5, 6), (1, 6, 3)])
def test_gradient_pass_differences_equal_numpy_gradient(shape):
    """The gradient pass's differences (on NumPy and CuPy alike) are np.gradient's, bit for bit."""
    f = np.random.default_rng(0).random(shape)
    for axis in range(f.ndim):
        expected = np.gradient(f, 0.7, axis=axis) if shape[axis] > 1 else np.zeros_like(f)
        np.testing.assert_array_equal(_detect_statistics._difference(f, axis, 0.7, np), expected)


def test_gpu_workers_without_dask_cuda_see_one_gpu_each():
    """cluster('local', gpus=N) without dask-cuda: one single-thread worker process per GPU, each
    with CUDA_VISIBLE_DEVICES naming its GPU (built here without a GPU: nothing touches one)."""
    pytest.importorskip("distributed")
    import os

    from dask.distributed import Client

    from ivote.distributed._cluster import _gpu_cluster

    with _gpu_cluster(2, "1GB", False) as local, Client(local) as client:
        seen = client.run(lambda: (os.environ.get("CUDA_VISIBLE_DEVICES"),))
        threads = client.nthreads()
    assert sorted(v[0] for v in seen.values()) == ["0", "1"]
    assert sorted(threads.values()) == [1, 1]


class _FakePool:
    """CuPy's memory pool as gpu_limit sees it: its size (what it holds) and its cap."""

    def __init__(self, held):
        self.held, self.limit = held, 0

    def total_bytes(self):
        return self.held

    def get_limit(self):
        return self.limit

    def set_limit(self, size=None):
        self.limit = int(size or 0)

    def free_all_blocks(self):
        pass


def test_gpu_limit_caps_what_a_block_adds_not_what_the_pool_holds(monkeypatch):
    """A pool holding 100 MB the block cannot free (the caller's arrays, memoized tables, a split block)
    leaves a block of memory_limit 28 MiB exactly 28 MiB more, whatever ran before; the cap is restored."""
    from types import SimpleNamespace

    from ivote import _backend

    pool, pinned = _FakePool(held=100 * 10**6), _FakePool(held=0)
    fake = SimpleNamespace(get_default_memory_pool=lambda: pool, get_default_pinned_memory_pool=lambda: pinned)
    monkeypatch.setattr(_backend, "_cupy", lambda: fake)
    pool.limit = 7
    with _tasks.gpu_limit(28 * 2**20):
        assert pool.limit == 100 * 10**6 + 28 * 2**20
    assert pool.limit == 7


@pytest.mark.parametrize("bad", [dict(spacing=(1.0,)), dict(spacing=(1.0, -2.0)), dict(polarity="grey"),
                                 dict(blur=-1.0), dict(blur=1e6), dict(min_contrast=-0.5), dict(threshold="mean"),
                                 dict(threshold=float("nan"))])
def test_settings_are_refused_as_iterative_voting_refuses_them(image_2d, bad):
    """detect_chunked checks its settings with iterative_voting's own check (detect._settings.check_settings):
    the same error, word for word, before any block is read."""
    with pytest.raises(Exception) as whole:
        iterative_voting(image_2d, radius=RADIUS, backend="numpy", **bad)
    with pytest.raises(type(whole.value)) as chunked:
        detect_chunked(image_2d, RADIUS, chunks=75, scheduler="sync", backend="numpy", **bad)
    assert str(chunked.value) == str(whole.value)


def test_thin_axes_are_refused_as_iterative_voting_refuses_them():
    thin = np.zeros((2, 40, 40))
    with pytest.raises(Exception) as whole:
        iterative_voting(thin, radius=RADIUS, backend="numpy")
    with pytest.raises(type(whole.value), match="at least 3 along every axis") as chunked:
        detect_chunked(thin, RADIUS, backend="numpy")
    assert str(chunked.value) == str(whole.value)


def test_auto_radius_is_the_in_memory_estimate_on_an_image_larger_than_the_crop(monkeypatch):
    """Both read the same central crop (``_radius.central_crop``), the chunked engine alone."""
    from ivote.detect import _radius

    monkeypatch.setattr(_radius, "_MAX_PIXELS", 80 * 80)
    image = synthetic_nuclei((120, 180), radius=RADIUS, seed=3).image
    whole = iterative_voting(image, radius="auto", backend="numpy")
    chunked = detect_chunked(image, "auto", chunks=(60, 90), scheduler="sync", backend="numpy")
    assert chunked.radius_estimated and chunked.radius == whole.radius
    assert whole.radius == _radius.estimate_radius(image[_radius.central_crop(image.shape)], backend="numpy")
