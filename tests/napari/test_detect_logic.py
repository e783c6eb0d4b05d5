"""Qt-free logic of the Detect nuclei widget: geometry, units, 3D preview slab, layer state."""

from __future__ import annotations

import numpy as np
import pytest

from ivote.napari import _detect_logic as logic


def test_geometry_units_from_napari_then_metadata_then_pixels():
    assert logic.image_geometry((10, 20), scale=(0.5, 0.5), units=("micrometer",) * 2).unit == "µm"
    assert logic.image_geometry((10, 20), scale=(0.5, 0.5), units=("pixel",) * 2, metadata={"units": "um"}).unit == "µm"
    assert logic.image_geometry((10, 20), units=("pixel",) * 2).unit == "px"
    assert logic.image_geometry((10, 20), scale=(2.0, 2.0)).unit == "world units"


def test_geometry_of_rgb_and_volumes_and_the_message_for_others():
    rgb = logic.image_geometry((30, 40, 3), rgb=True, scale=(0.25, 0.25))
    assert rgb.shape == (30, 40) and rgb.ndim == 2 and rgb.scale == (0.25, 0.25)
    volume = logic.image_geometry((8, 30, 40), scale=(2.0, 0.5, 0.5), translate=(1, 2, 3))
    assert volume.ndim == 3 and volume.translate == (1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="2D, 3D or 2D RGB"):
        logic.image_geometry((2, 8, 30, 40))


def test_radius_range_in_world_units():
    low, high, default = logic.image_geometry((200, 400), scale=(0.5, 0.5)).radius_range()
    assert (low, high, default) == (0.75, 25.0, 4.0)  # from 1.5 pixels, the core's MIN_RADIUS_PIXELS


@pytest.mark.parametrize("plane, expected", [(10, (6, 15)), (0, (0, 5)), (19, (15, 20)), (-3.0, (0, 5)), (10.4, (6, 15))])
def test_preview_slab_is_about_2r_thick_around_the_plane(plane, expected):
    geometry = logic.image_geometry((20, 64, 64), scale=(2.0, 0.5, 0.5))
    slab, start = logic.preview_slab(geometry, radius=5.0, plane=plane)  # r = 2.5 planes -> +-4
    assert (slab.start, slab.stop) == expected and start == slab.start


def test_validate_settings_messages():
    assert "image layer" in logic.validate_settings(5.0, has_image=False)
    assert "larger than 0" in logic.validate_settings(0.0, has_image=True)
    assert logic.validate_settings(5.0, has_image=True) is None


class _FakeDetections:
    """Stands in for ivote.detect.Detections in the offset test (no detector run)."""

    radius = 5.0
    candidates = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    candidate_scores = np.array([10.0, 0.5])
    candidate_contrasts = np.array([8.0, 3.5])

    def with_threshold(self, threshold):
        keep = self.candidate_scores >= (1.0 if threshold == "auto" else -np.inf if threshold is None else threshold)
        result = _FakeDetections()
        result.points, result.scores, result.threshold = self.candidates[keep], self.candidate_scores[keep], 1.0
        result.contrasts = self.candidate_contrasts[keep]
        return result


def test_slab_points_are_shifted_back_to_the_volume_and_state_is_complete():
    result = logic.DetectResult(_FakeDetections(), offset=(7, 0, 0), generation=1, preview=True, seconds=0.1)
    points, scores, _ = result.points("auto")
    np.testing.assert_array_equal(points, [[8.0, 2.0, 3.0]])
    assert logic.log_threshold_range(result) == (np.log10(0.5), 1.0)
    geometry = logic.image_geometry((20, 64, 64), scale=(2.0, 0.5, 0.5), translate=(0, 5, 5), units=("micrometer",) * 3)
    state = logic.points_layer_state(geometry, 5.0, points, scores, image_name="cells",
                                     score_range=logic.score_range(result))
    assert state["name"] == "nuclei: cells" and state["ndim"] == 3
    assert state["size"] == 20.0  # diameter 10 µm over 0.5 µm pixels
    assert state["scale"] == (2.0, 0.5, 0.5) and state["translate"] == (0.0, 5.0, 5.0)
    np.testing.assert_array_equal(state["features"]["score"], [10.0])
    assert logic.result_kind(result, geometry).startswith("preview of the slab")


def test_preview_window_whole_plane_within_budget_and_slab_in_3d():
    volume = logic.image_geometry((20, 64, 64), scale=(2.0, 0.5, 0.5))
    window, offset = logic.preview_window(volume, 5.0, plane=10, view=None, max_plane_pixels=None)
    assert window == (slice(6, 15), slice(0, 64), slice(0, 64)) and offset == (6, 0, 0)
    tile = logic.image_geometry((64, 64))
    assert logic.preview_window(tile, 5.0, max_plane_pixels=64 * 64) == ((slice(0, 64), slice(0, 64)), (0, 0))


def test_preview_window_of_a_big_plane_follows_the_view():
    tile = logic.image_geometry((1000, 2000))
    window, offset = logic.preview_window(tile, 5.0, view=[[0, 1800], [199, 1999]], max_plane_pixels=300 * 300)
    assert window == (slice(0, 300), slice(1700, 2000)) and offset == (0, 1700)  # clipped at the corner
    window, _ = logic.preview_window(tile, 5.0, view=np.zeros((2, 2)), max_plane_pixels=300 * 300)
    assert window == (slice(350, 650), slice(850, 1150))  # unknown view: the centre
    thin = logic.image_geometry((100, 5000))
    window, _ = logic.preview_window(thin, 5.0, view=None, max_plane_pixels=300 * 300)
    assert window[0] == slice(0, 100) and window[1].stop - window[1].start == 900


def test_a_threshold_change_refilters_each_result_once(count_refilters, monkeypatch):
    """The Points layer's state at a new threshold (points, scores and contrasts) comes from one refilter of the
    cached maxima; a time-lapse's pooled 'auto' rule is computed once, then each frame refiltered once."""
    import ivote._frames
    from ivote.data import synthetic_nuclei
    from ivote.detect import iterative_voting

    frames = [synthetic_nuclei((64, 64), radius=4.0, seed=seed).image for seed in (1, 2)]
    found = [iterative_voting(frame, radius=4.0, backend="numpy") for frame in frames]
    geometry = logic.image_geometry((64, 64))
    one = logic.DetectResult(found[0], offset=None, generation=1, preview=False, seconds=0.1)
    count_refilters.clear()
    state, applied = logic.result_layer_state(one, geometry, 0.5, name="n", image_name="i", preview=False,
                                              timelapse=False)
    assert len(count_refilters) == 1
    kept = found[0].with_threshold(0.5)
    np.testing.assert_array_equal(state["data"], kept.points)
    np.testing.assert_array_equal(state["features"]["contrast"], kept.contrasts)
    assert applied == 0.5

    pooled = []
    real = ivote._frames.pooled_threshold
    monkeypatch.setattr(ivote._frames, "pooled_threshold", lambda *a: pooled.append(a) or real(*a))
    lapse = logic.TimelapseResult(frames=(0, 1), results=tuple(
        logic.DetectResult(f, offset=None, generation=1, preview=False, seconds=0.1) for f in found))
    count_refilters.clear()
    state, applied = logic.result_layer_state(lapse, geometry, "auto", name="n", image_name="i", preview=False,
                                              timelapse=True)
    assert len(pooled) == 1 and len(count_refilters) == 2
    threshold, floor = real("auto", found)
    expected = [f.with_threshold(threshold, floor) for f in found]
    assert applied == threshold and len(state["data"]) == sum(len(e.points) for e in expected)
    np.testing.assert_array_equal(state["data"][:, 0], np.repeat([0.0, 1.0], [len(e.points) for e in expected]))
    np.testing.assert_array_equal(state["features"]["contrast"], np.concatenate([e.contrasts for e in expected]))


def test_an_estimate_outside_the_slider_is_clamped_or_extends_it_as_the_detector_allows():
    from ivote._validate import check_radius

    geometry = logic.image_geometry((200, 400), scale=(0.5, 0.5), units=("um", "um"))  # slider 0.75 to 25 µm
    assert logic.fit_radius(6.0, geometry) == (6.0, 25.0, "")
    value, maximum, note = logic.fit_radius(0.5, geometry)
    assert (value, maximum) == (0.75, 25.0) and "smallest" in note
    value, maximum, note = logic.fit_radius(60.0, geometry)
    assert (value, maximum) == (60.0, 60.0) and "extended" in note
    assert check_radius(60.0, geometry.shape, geometry.scale) == 60.0  # the detector takes it ...
    with pytest.raises(ValueError):
        check_radius(150.0, geometry.shape, geometry.scale)  # ... not this: clamped
    value, maximum, note = logic.fit_radius(150.0, geometry)
    assert (value, maximum) == (25.0, 25.0) and "largest" in note


class _ReadRecorder:
    """An on-disk-like array (Zarr, HDF5): records the regions read."""

    def __init__(self, array):
        self.array, self.shape, self.dtype, self.ndim, self.reads = array, array.shape, array.dtype, array.ndim, []

    def __getitem__(self, key):
        self.reads.append(key)
        return self.array[key]


def test_a_lazy_layer_is_estimated_on_a_central_crop_as_the_chunked_engine_does(monkeypatch):
    from ivote.data import synthetic_nuclei
    from ivote.detect import _radius, estimate_radius

    monkeypatch.setattr(_radius, "_MAX_PIXELS", 64 * 1200)  # the crop: 1200 of the 2400 rows
    sample = synthetic_nuclei((2400, 64), spacing=(0.5, 0.5), radius=4.0, noise=0.05, seed=2)
    geometry = logic.image_geometry(sample.image.shape, scale=sample.spacing)
    lazy = _ReadRecorder(sample.image)
    estimate = logic.estimate_layer_radius(lazy, geometry, polarity="bright", lazy=True, backend="numpy")
    read = sum(np.prod([s.stop - s.start for s in key]) for key in lazy.reads)
    assert 0 < read <= 64 * 1200  # the crop, not the whole array
    assert abs(estimate / sample.radius - 1) < 0.2
    in_memory = logic.estimate_layer_radius(sample.image, geometry, polarity="bright", lazy=False, backend="numpy")
    assert in_memory == estimate_radius(sample.image, spacing=sample.spacing, backend="numpy") == estimate


@pytest.mark.parametrize("backend", ["numba", pytest.param("cupy", marks=pytest.mark.gpu)])
def test_the_estimate_runs_on_the_runs_backend_with_the_numpy_value(backend):
    """The button's call on a host layer (what the widget hands it) on the other backends: the NumPy estimate."""
    from ivote import _backend
    from ivote.data import synthetic_nuclei

    if backend == "cupy" and not _backend.cupy_available():
        pytest.skip("needs a CUDA GPU with CuPy")
    sample = synthetic_nuclei((24, 80, 80), spacing=(2.0, 0.5, 0.5), radius=5.0, noise=0.05, seed=3)
    geometry = logic.image_geometry(sample.image.shape, scale=sample.spacing)
    reference = logic.estimate_layer_radius(sample.image, geometry, polarity="bright", lazy=False, backend="numpy")
    other = logic.estimate_layer_radius(sample.image, geometry, polarity="bright", lazy=False, backend=backend)
    assert other == pytest.approx(reference, rel=0.02) and abs(other / sample.radius - 1) < 0.2


def test_estimate_input_of_a_zarr_time_lapse_stays_lazy():
    """The Estimate button's frame of a Zarr time-lapse is a lazy view (its central crop is read
    later, in the worker), not the whole frame read at once; it holds the displayed frame."""
    import types

    zarr = pytest.importorskip("zarr")
    pytest.importorskip("dask")
    frames = zarr.zeros((3, 64, 64), chunks=(1, 32, 32), dtype="f4")
    frames[1] = np.arange(64 * 64, dtype="f4").reshape(64, 64)
    layer = types.SimpleNamespace(multiscale=False, data=frames, world_to_data=np.asarray)
    frame = logic.estimate_input(layer, timelapse=True, world_point=(1, 0, 0))
    assert not isinstance(frame, np.ndarray) and hasattr(frame, "dask")
    np.testing.assert_array_equal(np.asarray(frame), frames[1])
