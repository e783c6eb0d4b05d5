"""The Numba detection backend (detect/_numba.py) against the NumPy path and the reference."""

import numpy as np
import pytest
from scipy import ndimage

pytest.importorskip("numba")

from ivote import _backend, _parallel  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.detect import _cpu, _numba, _numba_passes, _numba_voters, _reference, iterative_voting  # noqa: E402
from ivote.detect._plan import make_plan  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

PASS_CASES = [
    dict(shape=(80, 72), spacing=(1.0, 1.0), radius=6.0, sign=1.0),
    dict(shape=(64, 70), spacing=(0.4, 0.4), radius=3.2, sign=-1.0),
    dict(shape=(48, 44), spacing=(1.3, 1.3), radius=9.1, sign=1.0),
    dict(shape=(12, 40, 36), spacing=(2.0, 0.5, 0.5), radius=4.0, sign=1.0),
    dict(shape=(20, 24, 28), spacing=(1.0, 1.0, 1.0), radius=5.0, sign=-1.0),
    dict(shape=(72, 64), spacing=(0.5, 0.5), radius=10.0, sign=1.0),  # runs of up to 39 pixels, cut in pieces
]


def _smoothed(case, seed):
    sample = synthetic_nuclei(case["shape"], spacing=case["spacing"], radius=case["radius"], seed=seed,
                              polarity="bright" if case["sign"] > 0 else "dark")
    image = sample.image.astype(np.float64)
    image = (image - image.min()) / np.ptp(image)
    return ndimage.gaussian_filter(image, [2.0 * min(case["spacing"]) / s for s in case["spacing"]])


@pytest.mark.parametrize("index", range(len(PASS_CASES)))
def test_numba_passes_equal_the_numpy_passes(index):
    case = PASS_CASES[index]
    image = _smoothed(case, seed=60 + index)
    plan = make_plan(case["radius"], case["spacing"], len(case["shape"]))
    expected = _cpu.run_passes(image.copy(), plan, case["sign"])
    calls = []
    got = _numba.run_passes([image.copy()], plan, case["sign"], lambda i, n: calls.append((i, n)))
    assert expected.sum() > 0 and got.dtype == np.uint32 and got.shape == image.shape
    np.testing.assert_array_equal(got, expected)
    assert calls == [(i, plan.n_passes) for i in range(plan.n_passes)]
    if index == 0:  # and the readable reference, once
        np.testing.assert_array_equal(got, _reference.run_passes(image.copy(), plan, case["sign"]))


@pytest.mark.parametrize("radius, spacing", [(6.0, (1.0, 1.0)), (9.1, (1.3, 1.3)), (4.0, (2.0, 0.5, 0.5)),
                                             (2.0, (1.0, 1.0)), (2.5, (2.0, 1.0, 1.0))])
def test_run_tables_hold_exactly_the_cones(radius, spacing):
    """Every pass, the first included: the runs of class c are exactly the offsets passing
    the float32 cone test of class direction c (offset direction c, or at small radii a
    larger ball's; all offsets tested, not only its bin's), in lexicographic order, each run
    consecutive offsets along one row."""
    from ivote.detect import _run_tables
    from ivote.detect._cone_tables import class_directions

    ndim = len(spacing)
    plan = make_plan(radius, spacing, ndim)
    directions = class_directions(plan)
    everything = np.arange(len(plan.offsets))
    checked = sorted(set(range(0, len(directions), 7)) | set(range(len(plan.offsets), len(directions), 3)))
    for p in range(plan.n_passes):
        starts, first, length = _run_tables.discrete_runs(radius, spacing, ndim, p)
        assert len(starts) == len(directions) + 1 and np.all(length > 0)
        hits = _run_tables._float32_hits(plan, directions, everything, plan.cos_half32[p])
        for k in checked:
            items = slice(starts[k], starts[k + 1])
            ks = np.concatenate([np.arange(f, f + n) for f, n in zip(first[items], length[items])] + [everything[:0]])
            np.testing.assert_array_equal(ks, np.flatnonzero(hits[k]))
            for f, n in zip(first[items], length[items]):  # a run: one row, consecutive pixels
                run = plan.offsets[f:f + n]
                assert np.all(run[:, :-1] == run[0, :-1]) and np.all(np.diff(run[:, -1]) == 1)


@pytest.mark.parametrize("dtype, map_dtype", [(np.uint32, np.uint16), (np.uint64, np.uint32)])
def test_regroup_sorts_each_slab_by_class_keeping_flat_order(dtype, map_dtype):
    """``_numba._regroup``: within each slab, the voters (records in flat order) by class, in
    flat order within a class (a stable counting sort), each a record of its frame index, weight
    and class, and each slab's largest group (the vote's and turn's scratch size). The first
    pass takes the classes from the records and writes them into the map by frame index; a
    later pass takes them from the map (where a turn changed some)."""
    rng = np.random.default_rng(4)
    n_classes = 7
    slab_starts = np.array([0, 40, 41, 41, 100])  # an empty slab and one of a single voter
    n = slab_starts[-1]
    cls = rng.integers(0, n_classes, n).astype(np.int64)
    frame_flat = np.sort(rng.choice(10_000, n, replace=False)).astype(np.int64)
    weights = rng.integers(1, 65535, n).astype(np.uint32)
    shift = 4 * np.dtype(dtype).itemsize  # the packed column: weight << shift | class
    records = np.stack([frame_flat.astype(dtype), (weights.astype(dtype) << dtype(shift)) | cls.astype(dtype)], axis=1)
    class_map = np.full(10_000, 99, dtype=map_dtype)

    def regroup(initial, expected_classes):
        grouped = np.empty((n, 2), dtype)
        widths = np.full(len(slab_starts) - 1, -1, dtype=np.int64)
        _numba._regroup(0, len(slab_starts) - 1, slab_starts, n_classes, records, class_map, initial, grouped, widths)
        frames, got_weights, classes = _numba._record_fields(grouped)
        perm = np.searchsorted(frame_flat, frames)  # frame indices are unique: which voter each record holds
        for slab, (a, b) in enumerate(zip(slab_starts[:-1], slab_starts[1:])):
            np.testing.assert_array_equal(perm[a:b], a + np.argsort(expected_classes[a:b], kind="stable"))
            assert b == a or widths[slab] == np.bincount(expected_classes[a:b], minlength=n_classes).max()
        np.testing.assert_array_equal(classes, expected_classes[perm])
        np.testing.assert_array_equal(got_weights, weights[perm])

    regroup(True, cls)
    np.testing.assert_array_equal(class_map[frame_flat], cls)  # the first pass wrote the map
    assert np.all(np.delete(class_map, frame_flat) == 99)  # and nothing else
    changed = rng.random(n) < 0.3  # as a turn changes classes: in the map
    new_class = np.where(changed, rng.integers(0, n_classes, n), cls)
    class_map[frame_flat] = new_class
    regroup(False, new_class)  # the records' own classes are the first pass's: the map's are read


@pytest.mark.parametrize("index", [0, 3])
def test_wide_records_give_the_same_votes(monkeypatch, index):
    """Records too large for uint32 (frames of 2**32 pixels or more, over 2**16 classes) are
    uint64: the same vote field."""
    case = PASS_CASES[index]
    image = _smoothed(case, seed=60 + index)
    plan = make_plan(case["radius"], case["spacing"], len(case["shape"]))
    packed = _numba.run_passes(image.copy(), plan, case["sign"])
    layouts = []
    monkeypatch.setattr(_numba_voters, "_record_layout", lambda *args: layouts.append(args) or np.uint64)
    np.testing.assert_array_equal(_numba.run_passes(image.copy(), plan, case["sign"]), packed)
    assert len(layouts) == 1 and packed.sum() > 0


def test_block_weights_above_the_weight_scale_give_the_numpy_votes():
    """A block's gradient can exceed the whole image's largest (``largest`` given, its edges'
    one-sided differences): weights above ``weight_scale`` (65535 here), which uint32 records
    (16 bits a weight) cannot hold; the field still equals the NumPy path's."""
    case = PASS_CASES[0]
    image = _smoothed(case, seed=60)
    plan = make_plan(case["radius"], case["spacing"], len(case["shape"]))
    assert plan.weight_scale == 2**16 - 1
    top = np.sqrt(sum(g * g for g in np.gradient(image))).max()
    largest = top / 3  # weights up to ~3 * weight_scale
    frame, votes = _numba._vote_field(image.copy(), plan, case["sign"], None, largest)
    got = votes.reshape(frame.padded_shape)[frame.inside]
    expected = _cpu.run_passes(image.copy(), plan, case["sign"], None, largest)
    assert expected.sum() > 0
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("shape, half_width", [
    ((61, 40), (3, 3)), ((40, 22, 23), (2, 4, 4)), ((50, 37), (0, 5)), ((33, 9, 25), (1, 0, 3)), ((20, 30), (2, 0)),
])
def test_local_maxima_equal_one_maximum_filter(monkeypatch, shape, half_width):
    """``_numba._local_maxima`` (the box's largest along all axes but the first over ranges
    of slices, as the threads cut them, then along the first at candidates) gives the local
    maxima of one ``maximum_filter`` over the whole field, ties included (the field's
    border, wider than the half-widths, holds 0 as the frame's padding)."""
    rng = np.random.default_rng(8)
    field = np.zeros(shape, dtype=np.uint32)
    inside = tuple(slice(h + 1, n - h - 1) for n, h in zip(shape, half_width))
    field[inside] = rng.integers(0, 6, field[inside].shape)  # many ties and zeros
    size = tuple(2 * h + 1 for h in half_width)
    expected = (field == ndimage.maximum_filter(field, size=size, mode="constant", cval=0)) & (field > 0)
    monkeypatch.setattr(_parallel, "cpu_threads", lambda: 3)  # several ranges, also on one core
    got = _numba._local_maxima(field, half_width)
    np.testing.assert_array_equal(got, np.flatnonzero(expected))
    assert 0 < expected.sum() < field.size


def test_numba_passes_on_noise_and_flat_images():
    plan = make_plan(4.0, (1.0, 1.0), 2)
    noise = ndimage.gaussian_filter(np.random.default_rng(5).random((40, 40)), 1.0)
    np.testing.assert_array_equal(_numba.run_passes(noise.copy(), plan, 1.0), _cpu.run_passes(noise, plan, 1.0))
    assert not _numba.run_passes(np.zeros((16, 16)), plan, 1.0).any()


@pytest.mark.parametrize("shape, sigma", [
    ((50, 47), (2.0, 2.0)), ((7, 5), (3.0, 0.5)), ((3, 40), (2.0, 2.0)), ((9, 20, 17), (0.0, 1.5, 2.5)),
    ((1, 12), (1.0, 1.0)), ((9, 3), (1.0, 4.0)),  # a row shorter than the Gaussian: reflected several times
])
def test_blur_equals_scipy_bit_for_bit(shape, sigma):
    image = np.random.default_rng(2).random(shape)
    expected = ndimage.gaussian_filter(image, sigma, mode="reflect")
    np.testing.assert_array_equal(_numba.gaussian_blur(image.copy(), sigma), expected)


def test_blur_in_small_pieces_and_ranges_equals_scipy(monkeypatch):
    """The blur across rows cut in pieces of ``_BLUR_COLUMNS`` (rows longer than one piece, the
    last piece shorter) and ranges of lines, reflected borders included (a Gaussian wider than
    the axis too), is still scipy's bit for bit."""
    monkeypatch.setattr(_parallel, "cpu_threads", lambda: 3)
    rng = np.random.default_rng(6)
    wide = 2 * _numba._BLUR_COLUMNS + 77
    for shape, sigma in (((37, 45), (2.5, 1.0)), ((11, 13, 70), (1.2, 2.0, 0.0)), ((70, 5), (4.0, 1.0)),
                         ((9, wide), (3.0, 1.0)), ((5, 2, wide), (1.5, 0.7, 0.0))):
        image = rng.random(shape)
        expected = ndimage.gaussian_filter(image, sigma, mode="reflect")
        np.testing.assert_array_equal(_numba.gaussian_blur(image.copy(), sigma), expected)


def _same_detections(numpy_found, numba_found):
    assert numba_found.backend == "numba" and numpy_found.backend == "numpy"
    assert len(numba_found.points) == len(numpy_found.points) > 0
    np.testing.assert_array_equal(numba_found.candidates, numpy_found.candidates)
    np.testing.assert_array_equal(numba_found.points, numpy_found.points)
    np.testing.assert_allclose(numba_found.scores, numpy_found.scores, rtol=1e-12)
    np.testing.assert_allclose(numba_found.candidate_contrasts, numpy_found.candidate_contrasts, rtol=1e-9)
    assert numba_found.threshold == pytest.approx(numpy_found.threshold)


DETECT_CASES = {
    "2d-float32": dict(shape=(96, 90), spacing=(1.0, 1.0), radius=6.0, dtype=np.float32),
    "2d-uint8-aniso-pixels": dict(shape=(80, 96), spacing=(0.5, 0.5), radius=3.0, dtype=np.uint8),
    "2d-uint16-dark": dict(shape=(90, 80), spacing=(1.0, 1.0), radius=6.0, dtype=np.uint16, polarity="dark"),
    "3d-anisotropic": dict(shape=(14, 48, 44), spacing=(2.0, 0.5, 0.5), radius=3.0, dtype=np.float32),
    "3d-uint16": dict(shape=(20, 26, 30), spacing=(1.0, 1.0, 1.0), radius=5.0, dtype=np.uint16),
}


def _cast(image, dtype):
    if np.dtype(dtype).kind == "f":
        return image.astype(dtype)
    top = np.iinfo(dtype).max * 0.8
    return np.round((image - image.min()) / np.ptp(image) * top).astype(dtype)


@pytest.mark.parametrize("name", sorted(DETECT_CASES))
def test_numba_detection_equals_numpy(name):
    case = DETECT_CASES[name]
    polarity = case.get("polarity", "bright")
    sample = synthetic_nuclei(case["shape"], spacing=case["spacing"], radius=case["radius"], seed=7, polarity=polarity)
    image = _cast(sample.image, case["dtype"])
    kwargs = dict(radius=case["radius"], spacing=case["spacing"], polarity=polarity, return_votes=True)
    expected = iterative_voting(image, backend="numpy", **kwargs)
    got = iterative_voting(image, backend="numba", **kwargs)
    _same_detections(expected, got)
    np.testing.assert_array_equal(got.vote_field, expected.vote_field)
    assert match_points(got.points, sample.centers, tolerance=case["radius"] / 2, spacing=case["spacing"]).f1 > 0.8


def test_numba_rgb_and_channel_equal_numpy():
    sample = synthetic_nuclei((72, 80), radius=6.0, seed=3, polarity="dark")
    grey = (sample.image - sample.image.min()) / np.ptp(sample.image)
    rgb = np.stack([0.55 + 0.45 * grey, 0.3 + 0.7 * grey, 0.8 + 0.2 * grey], axis=-1)  # H&E-like: dark purple nuclei
    rgb8 = np.round(rgb * 255).astype(np.uint8)
    for image, extra in ((rgb8, {}), (rgb.astype(np.float32), {}), (rgb8, dict(channel=1, polarity="dark"))):
        expected = iterative_voting(image, radius=6.0, backend="numpy", **extra)
        _same_detections(expected, iterative_voting(image, radius=6.0, backend="numba", **extra))


def test_numba_contrast_test_equals_numpy():
    """Pure noise: the contrast test removes every maximum on both; without it both keep the same."""
    noise = np.random.default_rng(9).normal(100, 5, (96, 96)).astype(np.float32)
    for min_contrast in (3.0, 0.0):
        expected = iterative_voting(noise, radius=6.0, min_contrast=min_contrast, threshold="none", backend="numpy")
        got = iterative_voting(noise, radius=6.0, min_contrast=min_contrast, threshold="none", backend="numba")
        np.testing.assert_allclose(got.candidate_contrasts, expected.candidate_contrasts, rtol=1e-9)
        np.testing.assert_array_equal(got.points, expected.points)
        assert (len(got.points) == 0) == (min_contrast > 0)
    blurless = iterative_voting(noise, radius=6.0, blur=0, backend="numba")
    np.testing.assert_array_equal(blurless.candidates, iterative_voting(noise, radius=6.0, blur=0, backend="numpy").candidates)


def test_numba_contrast_numerators_equal_numpy_at_borders_and_inside():
    """The compiled numerators against ``_contrast.contrast_numerators`` (float64 image in,
    float32 comparisons), at corners, borders, bumps and random cells, both polarities, 2D and 3D."""
    from ivote.detect._contrast import bump_ring, contrast_numerators

    rng = np.random.default_rng(11)
    for shape, radius, spacing in (((40, 46), 6.2, (1.0, 1.0)), ((10, 24, 25), 4.5, (2.0, 1.0, 1.0))):
        plan = make_plan(radius, spacing, len(shape))
        s = ndimage.gaussian_filter(rng.random(shape), 1.5) + np.linspace(0, 0.02, shape[-1])
        coords = np.stack([rng.integers(0, n, 40) for n in shape], axis=1)
        coords[0] = 0
        coords[1, 0] = shape[0] - 1
        for sign in (1.0, -1.0):
            peaks = np.argwhere(ndimage.maximum_filter(sign * s, size=5) == sign * s)[:10]
            points = np.concatenate([coords, peaks])
            expected = contrast_numerators(s.astype(np.float32), points, plan.window, sign, bump_ring(plan))
            got = _numba.contrast_numerators(s, points, plan.window, sign, bump_ring(plan))
            np.testing.assert_array_equal(got, expected)
            assert got[0] == 0.0 and np.count_nonzero(got) > 3


def test_numba_flat_and_non_finite_images():
    flat = iterative_voting(np.full((32, 32), 7.0), radius=4.0, backend="numba", return_votes=True)
    assert len(flat.points) == 0 and flat.n_passes == 0 and not flat.vote_field.any()
    bad = np.ones((32, 32))
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="image") as numba_error:
        iterative_voting(bad, radius=4.0, backend="numba")
    with pytest.raises(ValueError, match="image") as numpy_error:
        iterative_voting(bad, radius=4.0, backend="numpy")
    assert str(numba_error.value) == str(numpy_error.value)


@pytest.mark.parametrize("env, expected", [("numba", "numba"), ("numpy", "numpy"), ("auto", "numba")])
def test_ivote_backend_variable_picks_the_cpu_path(monkeypatch, env, expected):
    if _backend.cupy_available() and env == "auto":
        pytest.skip("auto picks the GPU here")
    monkeypatch.setenv("IVOTE_BACKEND", env)
    sample = synthetic_nuclei((64, 64), radius=5.0, seed=2)
    found = iterative_voting(sample.image, radius=5.0)
    assert found.backend == expected
    other = iterative_voting(sample.image, radius=5.0, backend="numpy" if expected == "numba" else "numba")
    np.testing.assert_array_equal(found.points, other.points)


def test_backend_argument_and_use_numba(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "numba")
    assert _backend.select_xp("numba", np.zeros(2)) is np
    assert _backend.use_numba(np, "numba") and not _backend.use_numba(np, "numpy")
    assert _backend.use_numba(np, "auto")
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")
    assert not _backend.use_numba(np, "auto") and _backend.use_numba(np, "numba")
    with pytest.raises(ValueError, match="'auto', 'numpy', 'numba' or 'cupy'"):
        _backend.select_xp("fortran")
    monkeypatch.setattr(_backend, "_numba", lambda: None)
    with pytest.raises(_backend.BackendError, match="backend='numba' was requested but Numba does not import"):
        _backend.select_xp("numba")


@pytest.mark.skipif(_backend.cupy_available(), reason="a GPU machine previews the whole plane anyway")
def test_preview_budget_is_the_whole_plane_with_numba(monkeypatch):
    from ivote.napari import _detect_logic

    monkeypatch.setenv("IVOTE_BACKEND", "numba")
    assert _detect_logic.preview_plane_budget() is None
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")
    assert _detect_logic.preview_plane_budget() == _detect_logic.PREVIEW_PLANE_PIXELS_NUMPY


@pytest.mark.skipif(_backend.cupy_available(), reason="info reports the GPU here")
def test_cli_info_threads_and_detect_backend_numba(monkeypatch, capsys, tmp_path):
    import tifffile

    from ivote.cli import main

    monkeypatch.setenv("IVOTE_BACKEND", "numba")
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "backend: CPU: Numba" in out and f"CPU threads: {_backend.cpu_threads()}" in out
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")
    sample = synthetic_nuclei((64, 64), radius=5.0, seed=4)
    tifffile.imwrite(tmp_path / "tile.tif", sample.image)
    rows = {}
    for backend in ("numba", "numpy"):
        out_csv = tmp_path / f"{backend}.csv"
        assert main(["detect", str(tmp_path / "tile.tif"), "--radius", "5", "--backend", backend, "--out", str(out_csv)]) == 0
        assert f"on {backend}" in capsys.readouterr().out
        rows[backend] = out_csv.read_text()
    assert rows["numba"] == rows["numpy"] and rows["numpy"].count("\n") > 5


def test_numba_detections_from_two_threads_at_once():
    """A widget's preview and Run workers may detect at the same time: both get the NumPy path's cells."""
    from concurrent.futures import ThreadPoolExecutor

    images = [synthetic_nuclei((80, 80), radius=5.0, seed=s).image for s in (1, 2)]
    with ThreadPoolExecutor(2) as pool:
        found = list(pool.map(lambda image: iterative_voting(image, radius=5.0, backend="numba"), images))
    for image, got in zip(images, found):
        np.testing.assert_array_equal(got.points, iterative_voting(image, radius=5.0, backend="numpy").points)


@pytest.mark.parametrize("ndim", [2, 3])
def test_direction_bin_equals_the_cone_tables_bins(ndim):
    """``_numba._direction_bin`` (the bin that quantises a voter's initial direction, given as
    integers) against the NumPy ``direction_bins`` of the float32 directions, ties between
    components included (the first axis wins)."""
    from ivote.detect._cone_tables import direction_bins

    rng = np.random.default_rng(12)
    directions = rng.integers(-32767, 32768, (600, ndim)).astype(np.int16)
    directions[:200] = rng.integers(-2, 3, (200, ndim))  # many equal components
    directions[200:300, -1] = -directions[200:300, 0]
    directions = directions[np.abs(directions).max(axis=1) > 0]
    for cells in (1, 3, 16):
        got = [_numba._direction_bin(int(d[0]) if ndim == 3 else 0, int(d[-2]), int(d[-1]), cells, ndim)
               for d in directions]
        np.testing.assert_array_equal(got, direction_bins(directions, cells, ndim))


@pytest.mark.parametrize("radius, spacing, pass_index", [(12.0, (1.0, 1.0), 5), (6.0, (1.0, 1.0), 2),
                                                         (4.0, (2.0, 0.5, 0.5), 4)])
def test_pixel_pairs_list_each_cone_pixel_once_in_order(radius, spacing, pass_index):
    """``_run_tables.pixel_pairs``: class c's pairs, then its odd pixel, are its runs' pixels in order."""
    from ivote.detect import _run_tables

    starts, first, length = _run_tables.discrete_runs(radius, spacing, len(spacing), pass_index)
    bounds, a, b = _run_tables.pixel_pairs(starts, first, length)
    n_classes = len(starts) - 1
    assert len(bounds) == 2 * n_classes + 1 and bounds[0] == 0 and np.all(np.diff(bounds) >= 0)
    for c in range(n_classes):
        items = slice(starts[c], starts[c + 1])
        pixels = np.concatenate([np.arange(f, f + n) for f, n in zip(first[items], length[items])] + [first[:0]])
        pairs = slice(bounds[2 * c], bounds[2 * c + 1])
        odd = slice(bounds[2 * c + 1], bounds[2 * c + 2])
        assert bounds[2 * c + 2] - bounds[2 * c + 1] == len(pixels) % 2
        np.testing.assert_array_equal(np.stack([a[pairs], b[pairs]], axis=1).reshape(-1), pixels[:len(pixels) // 2 * 2])
        np.testing.assert_array_equal(a[odd], pixels[len(pixels) // 2 * 2:])


@pytest.fixture
def fresh_entries():
    _numba._entries.cache_clear()
    yield
    _numba._entries.cache_clear()  # no tables of a patched _DIRECT_BELOW left behind


@pytest.mark.parametrize("direct_below", [0.0, float("inf")])
@pytest.mark.parametrize("index", [0, 1, 3])
def test_numba_passes_as_runs_or_pixel_pairs_equal_numpy(monkeypatch, fresh_entries, direct_below, index):
    """Every pass voted as marks of runs (``_DIRECT_BELOW`` 0) or as pixels added in pairs
    (infinite): the same field as the NumPy path."""
    monkeypatch.setattr(_numba_passes, "_DIRECT_BELOW", direct_below)
    case = PASS_CASES[index]
    image = _smoothed(case, seed=80 + index)
    plan = make_plan(case["radius"], case["spacing"], len(case["shape"]))
    frame = _numba._Frame(image.shape, plan)
    passes = _numba._entries(plan.radius, plan.spacing, plan.ndim, frame.padded_shape)
    assert {vote[3] for _, _, vote, _, _, _ in passes} == {direct_below > 1}  # vote[3]: direct
    got = _numba.run_passes(image.copy(), plan, case["sign"])
    np.testing.assert_array_equal(got, _cpu.run_passes(image.copy(), plan, case["sign"]))


def test_first_equal16_is_the_first_match_of_sixteen_elements():
    from numba import njit

    from ivote._numba_intrinsics import _first_equal16

    @njit
    def first(array, index, value):
        return _first_equal16(array, index, value)

    values = np.random.default_rng(3).integers(0, 4, 300).astype(np.uint32)  # many ties and misses
    for index in range(len(values) - 15):
        for value in range(5):
            hits = np.flatnonzero(values[index:index + 16] == value)
            expected = hits[0] if len(hits) else 16
            assert first(values, np.uint64(index), np.uint32(value)) == expected
            assert first(values, index, np.uint32(value)) == expected  # a signed index


def test_prefetch_changes_nothing_and_takes_any_index():
    from numba import njit

    from ivote._numba_intrinsics import _prefetch

    @njit
    def total(array, offset):
        s = 0
        for i in range(len(array)):
            _prefetch(array, i + offset)  # past the end too: a prefetch never faults
            s += array[i]
        return s

    values = np.arange(100, dtype=np.uint32)
    assert total(values, 7) == total(values, 10**9) == values.sum()


@pytest.mark.parametrize("n_tasks, threads, grain", [(40, 2, 1), (1050, 2, 8), (1050, 16, 8), (10, 2, 4), (3, 8, 1)])
def test_guided_ranges_cover_the_tasks_once_and_shrink(n_tasks, threads, grain):
    bounds = _parallel.guided_bounds(n_tasks, threads, grain)
    sizes = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == n_tasks and np.all(sizes > 0)
    assert np.all(np.diff(sizes) <= 0)  # shrinking: a late thread holds the others up for a short range only
    assert sizes[0] == max(grain, -(-n_tasks // (2 * threads))) or sizes[0] == n_tasks
    assert np.all(sizes[:-1] >= grain)


def test_for_ranges_runs_every_task_once_from_several_threads(monkeypatch):
    monkeypatch.setattr(_parallel, "cpu_threads", lambda: 3)
    seen = np.zeros(1000, dtype=np.int64)
    ranges = []

    def kernel(first, last, out):
        ranges.append((first, last))
        out[first:last] += 1

    _parallel.for_ranges(kernel, len(seen), seen, grain=7)
    assert np.all(seen == 1)
    assert sorted(ranges) == list(zip(_parallel.guided_bounds(1000, 3, 7)[:-1], _parallel.guided_bounds(1000, 3, 7)[1:]))


def test_threads_for_a_call_grow_with_its_work():
    cost = _parallel._WAKE_COST
    assert _parallel.threads_for(None, 16) == 16  # not measured yet: every thread
    assert _parallel.threads_for(0.0, 16) == _parallel.threads_for(cost, 16) == 1
    assert _parallel.threads_for(4.5 * cost, 16) == 2 and _parallel.threads_for(9.5 * cost, 16) == 3
    assert _parallel.threads_for(1.0, 16) == 16 and _parallel.threads_for(1.0, 2) == 2
    counts = [_parallel.threads_for(w * cost, 64) for w in range(0, 5000, 7)]
    assert counts == sorted(counts)


def test_for_ranges_runs_a_small_call_on_the_calling_thread(monkeypatch):
    import threading

    monkeypatch.setattr(_parallel, "cpu_threads", lambda: 4)
    caller, seen = threading.get_ident(), set()

    def small(first, last):
        seen.add(threading.get_ident())

    monkeypatch.setitem(_parallel._WORK, _parallel._work_key(small, 100, ()), 0.0)  # measured: no work to share
    _parallel.for_ranges(small, 100)
    assert seen == {caller}


def test_an_empty_call_or_other_shapes_keep_a_kernels_measure(monkeypatch):
    """The work a kernel's call is judged by comes from its last call on the same task count and
    shapes: an empty call (a colour without slabs) or a call on other arrays (the blur across
    planes, then across rows) leaves it alone (found by the review: both ran on one thread)."""
    import time

    monkeypatch.setattr(_parallel, "cpu_threads", lambda: 4)

    def kernel(first, last, out):
        time.sleep(0.0005 * (last - first))

    big, small = np.zeros((40, 8)), np.zeros((40, 2))
    _parallel.for_ranges(kernel, 40, big)
    key = _parallel._work_key(kernel, 40, (big,))
    assert _parallel.threads_for(_parallel._WORK[key], 4) > 1  # 20 ms of work: worth several threads
    _parallel.for_ranges(kernel, 0, big)
    _parallel.for_ranges(kernel, 40, small)  # another shape: measured on its own
    assert _parallel._work_key(kernel, 40, (small,)) != key
    assert _parallel.threads_for(_parallel._WORK[key], 4) > 1


def test_a_kernels_exception_is_raised_after_every_range_ended(monkeypatch):
    import threading
    import time

    monkeypatch.setattr(_parallel, "cpu_threads", lambda: 3)
    caller, running, ended = threading.get_ident(), [], []

    def kernel(first, last, out):
        running.append(first)
        if threading.get_ident() == caller:
            raise RuntimeError("kernel failed")
        time.sleep(0.05)
        ended.append(first)

    with pytest.raises(RuntimeError, match="kernel failed"):
        _parallel.for_ranges(kernel, 60, np.zeros(60))
    assert len(ended) == len(running) - 1  # every range the pool started had ended: none ran on after the raise
