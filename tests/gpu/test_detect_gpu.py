"""Iterative voting on the GPU: same cells as the NumPy reference, repeatable."""

import numpy as np
import pytest

from ivote import _backend
from ivote.data import synthetic_nuclei
from ivote.detect import iterative_voting
from ivote.metrics import match_points

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _backend.cupy_available(), reason="needs a CUDA GPU with CuPy"),
]

CASES = {
    "2d": dict(shape=(256, 256), spacing=None, radius=8.0, seed=21),
    "2d_dark": dict(shape=(192, 160), spacing=(0.4, 0.4), radius=3.2, seed=22, polarity="dark"),
    "3d": dict(shape=(24, 64, 64), spacing=(2.0, 0.5, 0.5), radius=5.0, seed=23),
    "3d_iso": dict(shape=(40, 48, 56), spacing=None, radius=6.0, seed=24),
    # radius / spacing just under 7 in float64 while offsets of 7 pass the float32 disc test
    "2d_edge": dict(shape=(112, 96), spacing=(1.3, 1.3), radius=9.1, seed=25),
    "3d_edge": dict(shape=(20, 56, 64), spacing=(2.6, 1.3, 1.3), radius=9.1, seed=26),
}


def _sample(case):
    c = dict(CASES[case])
    polarity = c.pop("polarity", "bright")
    sample = synthetic_nuclei(c["shape"], spacing=c["spacing"], radius=c["radius"], seed=c["seed"], polarity=polarity)
    return sample, polarity


def assert_same_cells(reference, gpu, spacing):
    """>= 99% of cells matched within one pixel, their scores within 1e-4 relative."""
    assert len(reference.candidates) > 0
    match = match_points(gpu.candidates, reference.candidates, tolerance=1.0)
    assert match.true_positives >= 0.99 * max(len(reference.candidates), len(gpu.candidates))
    i, j = match.pairs.T
    np.testing.assert_allclose(gpu.candidate_scores[i], reference.candidate_scores[j], rtol=1e-4)
    assert abs(len(gpu.points) - len(reference.points)) <= max(1, 0.01 * len(reference.points))


def assert_same_contrasts(reference, gpu):
    """Cells at the same place have the same contrast to the noise, bit for bit
    (the same residuals, sigma and float32 comparisons on both backends)."""
    ref = {tuple(p): c for p, c in zip(reference.candidates.astype(int).tolist(), reference.candidate_contrasts)}
    common = [(ref[tuple(p)], c) for p, c in zip(gpu.candidates.astype(int).tolist(), gpu.candidate_contrasts)
              if tuple(p) in ref]
    assert len(common) >= 0.99 * len(reference.candidates)
    expected, got = np.array(common).T
    np.testing.assert_array_equal(got, expected)
    assert np.isfinite(expected).all() or np.isinf(expected).all()


@pytest.mark.parametrize("case", sorted(CASES))
def test_numpy_and_cupy_agree(case):
    sample, polarity = _sample(case)
    kwargs = dict(radius=sample.radius, spacing=sample.spacing, polarity=polarity, threshold=None, return_votes=True)
    reference = iterative_voting(sample.image, backend="numpy", **kwargs)
    gpu = iterative_voting(sample.image, backend="cupy", **kwargs)
    assert gpu.backend == "cupy" and reference.n_passes == gpu.n_passes
    assert_same_cells(reference, gpu, sample.spacing)
    assert_same_contrasts(reference, gpu)
    # the whole vote field: identical but for rare ties in blur rounding
    same = np.mean(_backend.to_host(gpu.vote_field) == reference.vote_field)
    assert same > 0.999


@pytest.mark.parametrize("case", ["2d", "3d"])
def test_repeated_gpu_runs_are_identical(case):
    sample, polarity = _sample(case)
    kwargs = dict(radius=sample.radius, spacing=sample.spacing, polarity=polarity, backend="cupy", return_votes=True)
    first = iterative_voting(sample.image, **kwargs)
    for _ in range(3):
        again = iterative_voting(sample.image, **kwargs)
        np.testing.assert_array_equal(again.candidates, first.candidates)
        np.testing.assert_array_equal(again.candidate_scores, first.candidate_scores)
        assert bool((again.vote_field == first.vote_field).all())


def test_cupy_input_runs_on_gpu_and_accuracy_holds():
    xp = _backend.default_xp()
    sample, _ = _sample("2d")
    found = iterative_voting(xp.asarray(sample.image), radius=sample.radius, return_votes=True)
    assert found.backend == "cupy"
    assert isinstance(found.points, np.ndarray)
    assert _backend.is_device_array(found.vote_field)
    match = match_points(found.points, sample.centers, tolerance=sample.radius / 2)
    assert match.f1 >= 0.95


def test_gpu_rgb_matches_numpy():
    sample, _ = _sample("2d")
    absorb = np.clip(sample.image, 0, 1)[..., None] * np.array([0.75, 0.8, 0.35])
    rgb = np.round(255 * (1 - absorb)).astype(np.uint8)
    reference = iterative_voting(rgb, radius=sample.radius, backend="numpy", threshold=None)
    gpu = iterative_voting(_backend.to_device(rgb), radius=sample.radius, threshold=None)
    assert_same_cells(reference, gpu, None)


def test_gpu_callback_cancels():
    sample, _ = _sample("2d")
    calls = []

    class Cancelled(Exception):
        pass

    def cancel(i, n):
        calls.append(i)
        if i == 1:
            raise Cancelled

    with pytest.raises(Cancelled):
        iterative_voting(sample.image, radius=sample.radius, backend="cupy", iter_callback=cancel)
    assert calls == [0, 1]


def test_gpu_constant_and_tiny_images():
    xp = _backend.default_xp()
    assert len(iterative_voting(xp.full((16, 16), 3.0), radius=3).points) == 0
    # a (1, Y, X) volume is refused on both backends alike (the noise needs 3 pixels per axis)
    one_slice = synthetic_nuclei((64, 64), radius=6, seed=3).image[None]
    for backend in ("numpy", "cupy"):
        with pytest.raises(ValueError, match=r"1 pixel\(s\) along axis 0 .* pass a 2D \(Y, X\) array"):
            iterative_voting(one_slice, radius=6, backend=backend, threshold=None)
    three = np.repeat(one_slice, 3, axis=0)  # three planes: the thinnest volume detection takes
    reference = iterative_voting(three, radius=6, spacing=(4.0, 1.0, 1.0), backend="numpy", threshold=None)
    gpu = iterative_voting(three, radius=6, spacing=(4.0, 1.0, 1.0), backend="cupy", threshold=None)
    assert len(reference.candidates)
    np.testing.assert_array_equal(gpu.candidates, reference.candidates)


@pytest.mark.parametrize("ndim", [2, 3])
def test_gpu_close_pairs_match_numpy(ndim):
    """Maxima and the pairs closer than the radius: GPU kernel == NumPy/KD-tree (ties, crowds)."""
    from ivote.detect import _cuda, _reference
    from ivote.detect._plan import make_plan

    xp = _backend.default_xp()
    rng = np.random.default_rng(ndim)
    votes = np.zeros((48,) * ndim, dtype=np.uint32)
    n = 300 * ndim
    votes[tuple(rng.integers(0, 48, size=(ndim, n)))] = rng.integers(1, 4, size=n)
    plan = make_plan(6.5, (1.0, 1.0) if ndim == 2 else (2.0, 1.0, 1.0), ndim)
    flat = np.flatnonzero(votes)
    expected = _reference.sorted_close_pairs(votes, flat, plan)
    got = _cuda.sorted_close_pairs(xp.asarray(votes), xp.asarray(flat), plan)
    assert len(expected[2]) > 50
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def _blur_on_gpu(image, sigma, fused):
    from ivote.detect import _cuda

    xp = _backend.default_xp()
    kernels = _cuda._module(image.ndim, "int", xp)
    stats = xp.zeros(_cuda._N_SLOTS, dtype=np.uint64)
    source = _cuda._kernel_input(image, xp)
    _cuda._min_max(source, stats, kernels)
    return _cuda._normalise_and_blur(source, sigma, stats, kernels, xp, fused=fused)


@pytest.mark.parametrize(
    "shape, dtype, sigma",
    [((96, 80), np.float32, (2.0, 2.0)), ((70, 66), np.uint16, (3.1, 0.05)), ((12, 40, 36), np.float64, (0.5, 2.0, 2.0)),
     ((50, 40), np.uint8, None)],
)
def test_gpu_blur_equals_cupyx_gaussian_filter(shape, dtype, sigma):
    """The fused statistics/normalisation/blur kernels give cupyx's gaussian_filter bit for bit
    (so the cells are those of the earlier GPU path)."""
    xp = _backend.default_xp()
    rng = np.random.default_rng(3)
    image = xp.asarray((rng.random(shape) * 200 + 10).astype(dtype))
    normalised = image.astype(np.float64)
    low, high = float(normalised.min()), float(normalised.max())
    normalised -= low
    normalised /= high - low
    expected = normalised
    if sigma is not None:
        expected = _backend.ndimage_module(xp).gaussian_filter(normalised, sigma=sigma, mode="reflect")
    got = {fused: _backend.to_host(_blur_on_gpu(image, sigma, fused)) for fused in (True, False)}
    expected = _backend.to_host(expected)
    from ivote.detect._cuda import _FUSED_BLUR

    same = {fused: bool(np.array_equal(g, expected)) for fused, g in got.items()}
    assert same[_FUSED_BLUR], f"bit-equal to cupyx with fused multiply-adds / without: {same}"


def test_gpu_maxima_equal_maximum_filter():
    """ivote_local_maxima: the positive votes equal to the box maximum (scipy's maximum_filter, cval 0)."""
    from ivote.detect import _cuda
    from ivote.detect._plan import make_plan

    xp = _backend.default_xp()
    rng = np.random.default_rng(5)
    for ndim, spacing in ((2, (1.0, 1.0)), (3, (2.0, 1.0, 1.0))):
        votes = rng.integers(0, 6, size=(40,) * ndim).astype(np.uint32)
        votes[votes < 3] = 0
        plan = make_plan(5.0, spacing, ndim)
        size = tuple(2 * h + 1 for h in plan.maxima_half_width)
        expected = np.flatnonzero((votes == _backend.ndimage_module(np).maximum_filter(votes, size=size, mode="constant"))
                                  & (votes > 0))
        stats = xp.zeros(_cuda._N_SLOTS, dtype=np.uint64)
        cells = _cuda._Cells(xp.asarray(votes), plan, stats, _cuda._module(ndim, "int", xp), xp)
        cells.find_maxima(16)  # too small: fetch must retry with room for all
        cells.find_pairs(16)
        rows, _, _ = cells.fetch(_backend.to_host(stats))
        flat, values = rows[:, 0].astype(np.int64), rows[:, 1]
        np.testing.assert_array_equal(np.sort(flat), expected)
        np.testing.assert_array_equal(values, votes.ravel()[flat])
        assert len(expected) > 16


def test_gpu_lists_sized_from_the_last_call_grow_when_needed(monkeypatch):
    """A detection sizes its lists of maxima and pairs from the last one of the same
    shape; a busier image overflows them and is re-run. Either way, and with the
    statistics copied first (large lists), the cells are those of a fresh call."""
    from ivote.detect import _cuda_cells, _cuda_graph

    yy, xx = np.mgrid[:256, :256]
    quiet = np.exp(-((yy - 128.0) ** 2 + (xx - 100.0) ** 2) / 50.0)  # one cell
    busy = np.random.default_rng(2).random((256, 256))
    kwargs = dict(radius=8, backend="cupy", threshold=None)
    monkeypatch.setattr(_cuda_cells, "_MIN_LIST", 16)
    _cuda_cells._last_counts.clear()
    assert len(iterative_voting(quiet, **kwargs).candidates) < 10
    after_quiet = iterative_voting(busy, **kwargs)  # lists of 16: too small
    _cuda_cells._last_counts.clear()
    fresh = iterative_voting(busy, **kwargs)
    n_maxima, n_pairs = _cuda_cells._last_counts[((256, 256), 8.0, (1.0, 1.0))]
    monkeypatch.setattr(_cuda_cells, "_ONE_TRANSFER_BYTES", 0)
    _cuda_cells._last_counts.clear()
    statistics_first = iterative_voting(busy, **kwargs)
    assert n_maxima > 16 and n_pairs > 16  # both lists overflowed after the quiet image
    for found in (after_quiet, statistics_first):
        np.testing.assert_array_equal(found.candidates, fresh.candidates)
        np.testing.assert_array_equal(found.candidate_scores, fresh.candidate_scores)
    # the same with the plain path (return_votes: no CUDA graph) overflowing
    _backend.free_gpu_memory()
    monkeypatch.setattr(_cuda_cells, "_ONE_TRANSFER_BYTES", 1 << 20)
    _cuda_cells._last_counts.clear()
    iterative_voting(quiet, return_votes=True, **kwargs)
    plain = iterative_voting(busy, return_votes=True, **kwargs)
    assert not _cuda_graph._graphs
    np.testing.assert_array_equal(plain.candidates, fresh.candidates)
    np.testing.assert_array_equal(plain.candidate_scores, fresh.candidate_scores)


def _same_detections(a, b):
    np.testing.assert_array_equal(a.candidates, b.candidates)
    np.testing.assert_array_equal(a.candidate_scores, b.candidate_scores)
    np.testing.assert_array_equal(a.candidate_contrasts, b.candidate_contrasts)
    np.testing.assert_array_equal(a.points, b.points)
    assert a.threshold == b.threshold


@pytest.mark.parametrize("case, dtype", [("2d", np.float64), ("2d", np.uint8), ("2d_dark", np.float32), ("3d", np.uint16)])
def test_gpu_repeated_detections_replay_a_graph(case, dtype):
    """From the second detection of a shape and setting on, the kernels replay
    from a CUDA graph with its own buffers: other images of that shape (also
    non-contiguous views and dtypes the kernels read only after a cast) get the
    cells of the plain path (return_votes), and free_gpu_memory drops the graph."""
    import cupy as cp

    from ivote.detect import _cuda_graph, _cuda_tables

    sample, polarity = _sample(case)
    kwargs = dict(radius=sample.radius, spacing=sample.spacing, polarity=polarity, backend="cupy")
    rng = np.random.default_rng(5)
    scale = 1 if dtype in (np.float32, np.float64) else np.iinfo(dtype).max
    images = [(sample.image * scale).astype(dtype)]
    images.append(np.ascontiguousarray(images[0][::-1]))  # other cells, same shape
    images.append((np.clip(sample.image + 0.2 * rng.random(sample.image.shape), 0, 1) * scale).astype(dtype))
    wide = cp.asarray(np.concatenate([images[1], images[1]], axis=-1))
    views = [cp.asarray(im) for im in images] + [wide[..., : images[1].shape[-1]]]  # the last: not contiguous
    _backend.free_gpu_memory()
    expected = [iterative_voting(v, return_votes=True, **kwargs) for v in views]
    for round_ in range(3):
        for view, plain in zip(views, expected):
            _same_detections(iterative_voting(view, **kwargs), plain)
    assert len(_cuda_graph._graphs) >= 1 and _cuda_tables._cache and _cuda_tables._taps
    _backend.free_gpu_memory()
    assert not _cuda_graph._graphs and not _cuda_tables._cache and not _cuda_tables._taps  # memoized tables dropped too
    _same_detections(iterative_voting(views[0], **kwargs), expected[0])  # rebuilt on demand


def test_gpu_graph_detections_from_threads():
    """Worker threads detecting on images of one shape share the captured graph
    (its buffers under a lock): every thread gets its own image's cells."""
    import threading

    import cupy as cp

    sample, _ = _sample("2d")
    images = [cp.asarray(np.roll(sample.image, 17 * k, axis=1)) for k in range(4)]
    kwargs = dict(radius=sample.radius, backend="cupy")
    expected = [iterative_voting(im, return_votes=True, **kwargs) for im in images]
    iterative_voting(images[0], **kwargs)  # seen once: the next detection captures
    errors = []

    def work(k):
        try:
            for _ in range(6):
                _same_detections(iterative_voting(images[k], **kwargs), expected[k])
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]


def test_gpu_first_detection_with_an_odd_maxima_capacity():
    """600 x 600 sizes a first detection's list of maxima at size // 64 = 5625
    (odd) entries of 8 bytes; the list of pairs after it is written as uint4 and
    must still start 16-byte aligned (else: CUDA 'misaligned address')."""
    from ivote.detect import _cuda_cells

    sample = synthetic_nuclei((600, 600), radius=8.0, seed=27)
    _cuda_cells._last_counts.clear()
    kwargs = dict(radius=8.0, threshold=None)
    gpu = iterative_voting(sample.image, backend="cupy", **kwargs)
    n_maxima, n_pairs = _cuda_cells._last_counts[((600, 600), 8.0, (1.0, 1.0))]
    assert n_pairs > 0 and (600 * 600) // 64 % 2 == 1
    reference = iterative_voting(sample.image, backend="numpy", **kwargs)
    assert_same_cells(reference, gpu, None)


@pytest.mark.parametrize("radius", [0.5, 1.0])
def test_gpu_radius_of_one_pixel_is_refused_as_numpy(radius):
    """A disc of radius <= 1 pixel holds no offset: both backends refuse it, naming the radius."""
    sample = synthetic_nuclei((64, 64), radius=6, seed=1)
    for backend in ("numpy", "cupy"):
        with pytest.raises(ValueError, match=r"radius must satisfy 1\.5 <= radius"):
            iterative_voting(sample.image, radius=radius, backend=backend, threshold=None)


def _voters_and_votes(holder, corner, plan):
    """The GPU's voters and passes on the float64 image in ``holder`` (taken out):
    weights, first and last directions and votes in ``corner`` (host), the largest
    gradient, and the sums of all weights and votes."""
    from ivote.detect import _cuda

    xp = _backend.default_xp()
    smoothed = holder.pop()
    kernels = _cuda._module(plan.ndim, "int", xp)
    stats = xp.zeros(_cuda._N_SLOTS, dtype=np.uint64)
    weights, directions = _cuda._voters(smoothed, plan, 1.0, stats[_cuda._LARGEST:], kernels, "int", xp)
    shape = smoothed.shape
    del smoothed
    per_pixel = directions.reshape(shape + (plan.ndim,))
    first = _backend.to_host(per_pixel[corner])
    votes = _cuda._passes(weights, directions, plan, "int", None, kernels, xp)
    voting = _backend.to_host(weights[corner])
    return dict(
        weights=voting, first=first[voting > 0], last=_backend.to_host(per_pixel[corner])[voting > 0],
        votes=_backend.to_host(votes[corner]), largest=int(stats[_cuda._LARGEST]),
        weight_sum=int(weights.sum(dtype=np.uint64)), vote_sum=int(votes.sum(dtype=np.uint64)),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape, block_shape, gib",
    [
        # pixels past 2**31 / 3: int32 indices of the 3 direction components wrapped
        ((11040, 256, 256), (32, 256, 256), 24),
        # 2**31 - 16 pixels: int32 grid-stride loops (voters, largest gradient) wrapped
        ((112, 73, 262657), (24, 73, 256), 44),
    ],
)
def test_gpu_volumes_with_indices_near_int32_limits(shape, block_shape, gib):
    """The GPU path takes volumes of up to 2**31 pixels with 32-bit pixel indices:
    nuclei in the last corner of such a volume get the weights, directions and
    votes they get in a small volume holding the same corner (the same zeros
    before it, the same borders after it), and nothing lands elsewhere. Checked
    where the values are stored (a wrapped index reads back what it wrote)."""
    from ivote.detect._plan import make_plan

    xp = _backend.default_xp()
    _backend.free_gpu_memory()
    if xp.cuda.runtime.memGetInfo()[0] < gib * 2**30:
        pytest.skip(f"needs {gib} GiB of free GPU memory")
    small_shape = (2 * block_shape[0],) + tuple(b if b == n else 2 * b for b, n in zip(block_shape[1:], shape[1:]))
    corner_of = lambda s: tuple(slice(n - m, n) for n, m in zip(s, small_shape))  # noqa: E731
    block = synthetic_nuclei(block_shape, radius=5.0, seed=28).image
    small = np.zeros(small_shape)
    small[tuple(slice(n - b, n) for n, b in zip(small_shape, block_shape))] = (block - block.min()) / np.ptp(block)
    small = _backend.ndimage_module(np).gaussian_filter(small, sigma=2.0, mode="reflect")
    plan = make_plan(5.0, (1.0, 1.0, 1.0), 3)
    expected = _voters_and_votes([xp.asarray(small)], corner_of(small_shape), plan)
    volume = xp.zeros(shape, dtype=np.float64)
    volume[corner_of(shape)] = xp.asarray(small)
    holder = [volume]
    del volume
    got = _voters_and_votes(holder, corner_of(shape), plan)
    _backend.free_gpu_memory()
    assert expected["weights"].any() and expected["votes"].any()
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("shape", [(192, 160), (24, 48, 56)])
def test_gpu_noise_image_has_no_cells_as_numpy(shape):
    """A field of pure noise: maxima, but none with a contrast of 3 sigma, on both
    backends, with the same contrasts; nuclei in the same noise are kept."""
    rng = np.random.default_rng(8)
    noise = 0.3 + rng.normal(0.0, 0.05, shape)
    kwargs = dict(radius=6.0, threshold=None)
    reference = iterative_voting(noise, backend="numpy", **kwargs)
    gpu = iterative_voting(noise, backend="cupy", **kwargs)
    assert len(gpu.candidates) > 20 and len(gpu.points) == len(reference.points) == 0
    assert_same_contrasts(reference, gpu)
    sample = synthetic_nuclei(shape, radius=6.0, seed=9)
    image = sample.image + rng.normal(0.0, 0.05, shape)
    reference = iterative_voting(image, backend="numpy", radius=6.0)
    gpu = iterative_voting(image, backend="cupy", radius=6.0)
    assert_same_contrasts(reference, gpu)
    np.testing.assert_array_equal(gpu.points, reference.points)
    assert match_points(gpu.points, sample.centers, tolerance=3.0).f1 >= 0.9


def test_gpu_graph_survives_emptied_caches():
    """A captured graph reads only arrays it holds: emptying the caches of cone
    tables, disc offsets, taps and noise grids, and handing their memory to new
    arrays, changes no cell of the next replays."""
    import cupy as cp

    from ivote.detect import _cuda_graph, _cuda_tables

    sample, _ = _sample("2d")
    image = cp.asarray(sample.image)
    kwargs = dict(radius=sample.radius, spacing=sample.spacing, backend="cupy")
    _backend.free_gpu_memory()
    expected = iterative_voting(image, return_votes=True, **kwargs)
    iterative_voting(image, **kwargs)  # seen once
    _same_detections(iterative_voting(image, **kwargs), expected)  # captured and replayed
    assert len(_cuda_graph._graphs) == 1
    with _cuda_tables._cache_lock:
        _cuda_tables._cache.clear()
    _cuda_tables._taps.clear()
    cp.get_default_memory_pool().free_all_blocks()
    junk = cp.full(2**24, cp.nan)  # takes freed device memory
    for _ in range(2):
        _same_detections(iterative_voting(image, **kwargs), expected)
    assert len(_cuda_graph._graphs) == 1
    del junk
    _backend.free_gpu_memory()


@pytest.mark.parametrize("shape, spacing, radius, sign", [
    ((96, 88), (1.0, 1.0), 12.0, 1.0), ((72, 64), (0.4, 0.4), 3.2, -1.0),
    ((20, 40, 44), (1.0, 1.0, 1.0), 8.0, 1.0), ((16, 40, 36), (2.0, 0.5, 0.5), 4.0, -1.0),
    ((64, 60), (1.0, 1.0), 2.0, 1.0), ((12, 40, 36), (2.0, 1.0, 1.0), 2.5, -1.0),  # a larger ball's classes too
])
def test_gpu_voters_equal_the_reference_voters(shape, spacing, radius, sign):
    """``ivote_voters`` against ``_reference.prepare_voters`` on the same float64 image: the
    same voters and weights, and the same initial directions bit for bit, quantised to the
    class directions by the same table (``_cone_tables.initial_directions``); then
    the same vote field after every pass."""
    from scipy import ndimage

    from ivote.detect import _cuda, _reference
    from ivote.detect._plan import make_plan

    xp = _backend.default_xp()
    image = synthetic_nuclei(shape, spacing=spacing, radius=radius, seed=31).image.astype(np.float64)
    image = (image - image.min()) / np.ptp(image)
    smoothed = ndimage.gaussian_filter(image, [2.0 * min(spacing) / s for s in spacing])
    plan = make_plan(radius, spacing, len(shape))
    voters, weights, directions = _reference.prepare_voters(smoothed, plan, sign)
    kernels = _cuda._module(plan.ndim, "int", xp)
    stats = xp.zeros(_cuda._N_SLOTS, dtype=np.uint64)
    gpu_weights, gpu_directions = _cuda._voters(xp.asarray(smoothed), plan, sign, stats[_cuda._LARGEST:], kernels,
                                                "int", xp)
    gpu_weights = _backend.to_host(gpu_weights).ravel()
    np.testing.assert_array_equal(np.flatnonzero(gpu_weights), voters)
    np.testing.assert_array_equal(gpu_weights[voters].astype(np.int64), weights)
    np.testing.assert_array_equal(_backend.to_host(gpu_directions)[voters], directions)
    from ivote.detect._cone_tables import class_directions

    known = {tuple(d) for d in class_directions(plan)}
    assert len(voters) > 200 and all(tuple(d) in known for d in directions)
    votes = _cuda._passes(xp.asarray(gpu_weights.reshape(shape)), gpu_directions, plan, "int", None, kernels, xp)
    np.testing.assert_array_equal(_backend.to_host(votes), _reference.run_passes(smoothed.copy(), plan, sign))
