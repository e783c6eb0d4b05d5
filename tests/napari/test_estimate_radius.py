"""The Detect dock's "Estimate" button (the core's radius='auto' on the selected image) and the dock's scratch
layers leaving with it, in a real viewer (pytest-qt, Xvfb)."""

from __future__ import annotations

import time

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

import ivote.detect  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.detect._colour import _RUIFROK_HE  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 60_000


def _settled(qtbot, widget):
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    qtbot.wait(20)  # queued main-thread hand-backs


def _estimated(qtbot, widget):
    widget.estimate.button.native.click()
    assert widget.estimate.button.text == "Cancel estimate"  # busy: the button turns into its cancel
    qtbot.waitUntil(lambda: widget.estimate.button.text == "Estimate", timeout=TIMEOUT_MS)
    _settled(qtbot, widget)


def _he(image, seed=0):
    """An H&E-like RGB tile (Beer-Lambert, Ruifrok's vectors): hematoxylin where ``image`` is bright."""
    nuclei = (image - image.min()) / np.ptp(image)
    rng = np.random.default_rng(seed)
    amounts = np.stack([1.2 * nuclei * rng.uniform(0.8, 1.2, nuclei.shape) + 0.02,
                        0.5 * (1 - nuclei) * rng.uniform(0.6, 1.0, nuclei.shape) + 0.02], axis=-1)
    return np.round(255 * np.exp(-amounts @ _RUIFROK_HE)).astype(np.uint8)


def test_estimate_sets_the_slider_to_the_radius_in_physical_units_previews_it_and_stores_it(
        make_napari_viewer, detect_widget, qtbot):
    sample = synthetic_nuclei((160, 160), spacing=(0.4, 0.4), radius=5.0, noise=0.05, seed=11)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, translate=(3.0, -2.0), units=("um", "um"))
    widget = detect_widget(viewer, live=True)
    _settled(qtbot, widget)
    _estimated(qtbot, widget)

    core = ivote.detect.estimate_radius(sample.image, spacing=sample.spacing, backend="numpy")
    assert widget.radius.value == pytest.approx(core)  # the core's estimate, in µm (pixels would be 2.5 x larger)
    assert abs(widget.radius.value / sample.radius - 1) < 0.2  # the largest radius of the nuclei made
    assert widget.estimate.result_label.value == f"estimated {core:.3g} µm"
    # the live preview follows, as after a drag of the slider
    qtbot.waitUntil(lambda: "nuclei (preview): cells" in viewer.layers and viewer.layers[
        "nuclei (preview): cells"].metadata["radius"] == pytest.approx(core), timeout=TIMEOUT_MS)
    _settled(qtbot, widget)

    widget.run()
    _settled(qtbot, widget)
    metadata = viewer.layers["nuclei: cells"].metadata
    assert metadata["radius"] == pytest.approx(core) and metadata["radius_estimate"] == pytest.approx(core)
    assert metadata["radius_estimated"] is True
    widget.radius.value = 0.8 * core  # the user's own radius: the estimate is kept, but it is not the one used
    widget.run()
    _settled(qtbot, widget)
    metadata = viewer.layers["nuclei: cells"].metadata
    assert metadata["radius_estimated"] is False and metadata["radius_estimate"] == pytest.approx(core)


@pytest.mark.parametrize("kind", ["anisotropic 3D", "H&E RGB", "lazy (Dask)"])
def test_estimate_reads_volumes_he_and_lazy_layers_as_detection_does(make_napari_viewer, detect_widget, qtbot, kind):
    if kind == "anisotropic 3D":
        sample = synthetic_nuclei((16, 64, 64), spacing=(2.0, 0.5, 0.5), radius=5.0, noise=0.05, seed=3)
        image = sample.image
    else:
        sample = synthetic_nuclei((160, 160), spacing=(0.4, 0.4), radius=5.0, noise=0.05, seed=11)
        image = _he(sample.image) if kind == "H&E RGB" else sample.image
    viewer = make_napari_viewer()
    data = image
    if kind == "lazy (Dask)":
        da = pytest.importorskip("dask.array")
        data = da.from_array(image, chunks=64)
    viewer.add_image(data, name="cells", scale=sample.spacing, units=("um",) * len(sample.spacing),
                     rgb=image.ndim == 3 and image.shape[-1] == 3)
    widget = detect_widget(viewer)
    _estimated(qtbot, widget)
    core = ivote.detect.estimate_radius(image, spacing=sample.spacing, backend="numpy")
    assert widget.radius.value == pytest.approx(core)
    assert abs(widget.radius.value / sample.radius - 1) < 0.2


def test_a_timelapse_is_estimated_on_the_displayed_frame(make_napari_viewer, detect_widget, qtbot):
    frames = [synthetic_nuclei((128, 128), spacing=(0.5, 0.5), radius=radius, noise=0.05, seed=seed).image
              for radius, seed in ((3.0, 1), (7.0, 2))]  # the magnification changes between the frames
    viewer = make_napari_viewer()
    viewer.add_image(np.stack(frames), name="movie", scale=(60.0, 0.5, 0.5), axis_labels=("t", "y", "x"),
                     units=("s", "um", "um"))
    widget = detect_widget(viewer)
    viewer.dims.set_current_step(0, 1)
    _estimated(qtbot, widget)
    assert widget.radius.value == pytest.approx(ivote.detect.estimate_radius(frames[1], spacing=(0.5, 0.5)))
    assert abs(widget.radius.value / 7.0 - 1) < 0.2


def test_an_estimate_outside_the_slider_extends_its_range(make_napari_viewer, detect_widget, qtbot, monkeypatch):
    sample = synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, noise=0.05, seed=5)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    widget = detect_widget(viewer)
    assert widget.radius.max == pytest.approx(12.0)  # a quarter of the 48 µm tile
    monkeypatch.setattr(ivote.detect, "estimate_radius", lambda image, **kwargs: 15.0)  # the core takes up to 24
    _estimated(qtbot, widget)
    assert widget.radius.max == widget.radius.value == 15.0 and "extended" in widget.status.value


def test_removing_the_layer_during_an_estimate_changes_nothing_and_errors_are_notifications(
        make_napari_viewer, detect_widget, qtbot, monkeypatch):
    from ivote.napari import _runner

    sample = synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, noise=0.05, seed=5)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    widget = detect_widget(viewer)
    real = ivote.detect.estimate_radius
    monkeypatch.setattr(ivote.detect, "estimate_radius", lambda image, **kwargs: (time.sleep(0.5), real(image, **kwargs))[1])
    before = widget.radius.value
    widget.estimate.button.native.click()
    viewer.layers.remove("cells")
    _settled(qtbot, widget)
    assert len(viewer.layers) == 0 and widget.radius.value == before and "removed" in widget.status.value
    assert widget.estimate.button.text == "Estimate" and widget.estimate.result_label.value == ""

    # pressed twice: cancelled, nothing set
    viewer.add_image(sample.image, name="again", scale=sample.spacing, units=("um", "um"))
    widget.estimate.button.native.click()
    widget.estimate.button.native.click()
    _settled(qtbot, widget)
    assert widget.radius.value == pytest.approx(before) and widget.estimate.button.text == "Estimate"

    errors = []
    monkeypatch.setattr(_runner, "show_error", errors.append)
    widget.image.value = viewer.add_image(np.zeros((64, 64)), name="blank", scale=(0.5, 0.5))
    _estimated(qtbot, widget)  # the core refuses a constant image: a notification, the status in red, no crash
    assert errors and "constant" in errors[0] and "constant" in widget.status.value
    viewer.layers["blank"].data = sample.image[:64, :64]
    _estimated(qtbot, widget)  # and the button still works
    assert widget.estimate.result_label.value.startswith("estimated")


def test_closing_the_dock_mid_run_removes_its_preview_layer(make_napari_viewer, detect_widget, qtbot, slow_detector):
    sample = synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, noise=0.05, seed=5)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    widget = detect_widget(viewer, live=True)
    qtbot.waitUntil(lambda: "nuclei (preview): cells" in viewer.layers, timeout=TIMEOUT_MS)
    _settled(qtbot, widget)
    widget.radius.value = 0.9 * widget.radius.value  # a preview scheduled ...
    widget.preview()  # ... one in flight ...
    widget.run()  # ... and the Run
    count = len(slow_detector)
    qtbot.waitUntil(lambda: len(slow_detector) > count, timeout=TIMEOUT_MS)
    viewer.window.remove_dock_widget(widget.native)
    _settled(qtbot, widget)
    qtbot.wait(2 * 300)  # past the preview's debounce
    assert [layer.name for layer in viewer.layers] == ["cells"]


def test_segment_estimates_the_radius_for_seeds_clicked_by_hand(make_napari_viewer, qtbot):
    from ivote.napari._segment_widget import SegmentWidget

    sample = synthetic_nuclei((160, 160), spacing=(0.4, 0.4), radius=5.0, noise=0.05, seed=11)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    viewer.add_points(sample.centers, name="my clicks", scale=sample.spacing)  # no detection: no radius
    widget = SegmentWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Segment nuclei")
    assert widget.radius.value == 8.0  # the box's default, not the nuclei's
    _estimated(qtbot, widget)
    core = ivote.detect.estimate_radius(sample.image, spacing=sample.spacing)
    assert widget.radius.value == pytest.approx(core, abs=0.005)  # the box shows two decimals
    assert abs(widget.radius.value / sample.radius - 1) < 0.2
    assert widget.estimate.result_label.value == f"estimated {core:.3g} µm"
    widget.iterations.value = 2
    widget.run()
    _settled(qtbot, widget)
    metadata = viewer.layers["labels: cells"].metadata  # the radius used and the estimate go with the labels
    assert metadata == {"radius": core, "radius_estimate": core, "radius_estimated": True}  # not the box's rounding
    widget.radius.value = 9.0  # a radius of the user's
    widget.run()
    _settled(qtbot, widget)
    assert viewer.layers["labels: cells"].metadata == {"radius": 9.0, "radius_estimate": core, "radius_estimated": False}


def test_an_estimate_the_box_clamps_runs_with_the_clamped_radius(make_napari_viewer, qtbot, monkeypatch):
    """An estimate just below the smallest radius the core takes is shown as the minimum; Run uses the
    minimum, not the refused estimate (the fix of ea6ddaa)."""
    from ivote._validate import MIN_RADIUS_PIXELS
    from ivote.napari import _runner
    from ivote.napari._segment_widget import SegmentWidget

    sample = synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=3.0, noise=0.05, seed=2)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    viewer.add_points(sample.centers[:3], name="clicks", scale=sample.spacing)
    widget = SegmentWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Segment nuclei")
    low = MIN_RADIUS_PIXELS * sample.spacing[0]
    assert widget.radius.min == pytest.approx(low)
    rounding = 0.5 * 10.0 ** -widget.radius.native.decimals()
    estimate = low - 0.6 * rounding  # shown as the minimum, but below what segment_nuclei takes
    monkeypatch.setattr(ivote.detect, "estimate_radius", lambda image, **kwargs: estimate)
    _estimated(qtbot, widget)
    assert widget.radius.value == pytest.approx(low) and "set to it" in widget.status.value

    errors = []
    monkeypatch.setattr(_runner, "show_error", errors.append)
    widget.iterations.value = 2
    widget.run()
    _settled(qtbot, widget)
    assert not errors, errors
    labels = viewer.layers["labels: cells"]
    assert labels.metadata == {"radius": widget.radius.value, "radius_estimate": estimate, "radius_estimated": False}
    assert np.asarray(labels.data).max() >= 1


def test_typed_iterations_and_radius_stay_in_the_range_the_core_takes(make_napari_viewer):
    from ivote import segment_nuclei
    from ivote.napari._segment_widget import SegmentWidget

    sample = synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=3.0, noise=0.05, seed=2)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    widget = SegmentWidget(viewer)
    for typed in (0, -5):
        widget.iterations.native.setValue(typed)  # what typing does
        assert widget.iterations.value >= 1
    widget.radius.native.setValue(0.01)
    segment_nuclei(sample.image, sample.centers[:2], radius=widget.radius.value, spacing=sample.spacing,
                   iterations=widget.iterations.value)  # the core takes what the box holds


# -- rough edges of the other docks ------------------------------------------------------------------------------------
def test_segment_takes_a_detection_radius_beyond_its_usual_range_and_reads_he_in_the_worker(
        make_napari_viewer, qtbot, monkeypatch):
    import threading

    from ivote.napari._segment_widget import SegmentWidget

    sample = synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, noise=0.05, seed=5)
    viewer = make_napari_viewer()
    viewer.add_image(_he(sample.image), name="cells", rgb=True, scale=sample.spacing, units=("um", "um"))
    seeds = viewer.add_points(sample.centers, name="nuclei: cells", scale=sample.spacing,
                              metadata={"radius": 15.0})  # an estimate past the usual 12 µm (a quarter of 48 µm)
    widget = SegmentWidget(viewer)
    assert widget.seeds.value is seeds and widget.radius.value == 15.0  # raised ValueError (outside 0.75..12) before
    widget.iterations.value = 2
    widget.run()  # and Run takes it
    _settled(qtbot, widget)
    assert "labels: cells" in viewer.layers and "radius must" not in widget.status.value
    seeds.metadata["radius"] = sample.radius
    widget._on_seeds_changed()
    assert widget.radius.value == sample.radius

    real, threads = ivote.detect.hematoxylin_density, []
    monkeypatch.setattr(ivote.detect, "hematoxylin_density",
                        lambda rgb, **kw: (threads.append(threading.current_thread()), real(rgb, **kw))[1])
    widget.iterations.value = 20
    widget.run()
    _settled(qtbot, widget)
    assert threads and threading.main_thread() not in threads  # the GUI does not wait on the colour deconvolution
    labels = viewer.layers["labels: cells"].data
    found = np.unique(labels[tuple(np.round(sample.centers).astype(int).T)])
    assert (found > 0).mean() >= 0.8  # the nuclei's centres are inside labelled regions


def test_label_and_count_measures_with_a_multiscale_intensity_layer(make_napari_viewer, qtbot):
    from ivote.napari._components_widget import LabelCountWidget

    labels = np.zeros((64, 64), np.int32)
    labels[10:20, 10:20], labels[40:50, 30:44] = 1, 2
    intensity = labels.astype(np.float32) * 10 + 1
    viewer = make_napari_viewer()
    viewer.add_image([intensity, intensity[::2, ::2]], name="cells", multiscale=True)
    viewer.add_labels(labels, name="labels: cells")
    widget = LabelCountWidget(viewer)
    widget.layer.value = viewer.layers["labels: cells"]
    assert widget.intensity.value is viewer.layers["cells"]
    widget.run()  # measured no intensity before (the pyramid was not read as its finest level)
    _settled(qtbot, widget)
    features = viewer.layers["labels: cells"].features
    assert list(features["mean_intensity"]) == pytest.approx([11.0, 21.0])  # from the finest level


def test_a_folder_of_mixed_magnifications_gets_a_radius_per_image(make_napari_viewer, detect_widget, qtbot, tmp_path):
    import tifffile

    from ivote.metrics import match_points
    from ivote.napari._io import read_points

    folder = tmp_path / "images"
    folder.mkdir()
    truths = {}
    for name, radius in (("x20", 4.0), ("x40", 8.0)):
        sample = synthetic_nuclei((112, 112), radius=radius, overlap=0.1, noise=0.05, seed=int(radius))
        tifffile.imwrite(folder / f"{name}.tif", sample.image.astype(np.float32))
        truths[name] = (sample.centers, radius)
    viewer = make_napari_viewer()
    viewer.add_image(np.zeros((64, 64)), name="cells")
    widget = detect_widget(viewer)
    widget.batch.auto_radius.value = True
    widget.batch.run(folder, tmp_path / "out")
    _settled(qtbot, widget.batch)
    assert [row["error"] for row in widget.batch.rows] == ["", ""]
    for row in widget.batch.rows:
        centers, radius = truths[row["image"][:-4]]
        assert abs(row["radius"] / radius - 1) < 0.2  # each image its own radius, not the slider's 8 px
        (points, attributes, _), = read_points(str(tmp_path / "out" / row["output"]))  # as napari opens it
        assert attributes["metadata"]["radius"] == pytest.approx(row["radius"], rel=1e-3)  # Segment takes it
        assert match_points(points, centers, tolerance=radius / 2).f1 >= 0.8
    assert widget.batch.table.shape == (2, 3)


def test_a_scale_set_after_the_image_was_chosen_is_used_by_the_next_run(make_napari_viewer, detect_widget, qtbot):
    sample = synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, noise=0.05, seed=5)
    viewer = make_napari_viewer()
    layer = viewer.add_image(sample.image, name="cells")  # opened without pixel sizes: px
    widget = detect_widget(viewer)
    assert widget.radius.label == "radius (px)"
    layer.scale, layer.units = sample.spacing, ("um", "um")  # set afterwards (console, another plugin)
    widget.run()
    assert widget.radius.label == "radius (µm)" and widget.radius.max == pytest.approx(12.0)  # 96 px x 0.5 / 4
    _settled(qtbot, widget)
    points = viewer.layers["nuclei: cells"]
    assert points.metadata["units"] == "µm" and points.size[0] == pytest.approx(2 * widget.radius.value / 0.5)


def test_segment_refuses_a_timelapse_instead_of_reading_time_as_z(make_napari_viewer, qtbot):
    from ivote.napari._segment_widget import SegmentWidget

    frames = [synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=4.0, noise=0.05, seed=s) for s in (1, 2)]
    viewer = make_napari_viewer()
    viewer.add_image(np.stack([f.image for f in frames]), name="movie", scale=(60.0, 0.5, 0.5),
                     axis_labels=("t", "y", "x"), units=("s", "um", "um"))
    viewer.add_points(np.column_stack([np.zeros(len(frames[0].centers)), frames[0].centers]), name="nuclei: movie")
    widget = SegmentWidget(viewer)
    widget.run()  # was read as a (2, 64, 64) volume, z = 60 s apart
    _settled(qtbot, widget)
    assert "time-lapse" in widget.status.value and "labels: movie" not in viewer.layers
    widget.estimate.button.native.click()
    assert "time-lapse" in widget.status.value and not widget.busy


@pytest.mark.parametrize("dock", ["Detect", "Segment"])
def test_a_grey_image_after_an_rgb_one_gets_its_polarity_back(make_napari_viewer, dock):
    """RGB sets the polarity to 'dark' (greyed out); a grey image chosen next kept it, so a fluorescence image
    was searched (and its radius estimated, 2 to 4 times too large) for dark nuclei."""
    from ivote.napari._detect_widget import DetectWidget
    from ivote.napari._segment_widget import SegmentWidget

    sample = synthetic_nuclei((64, 64), radius=4.0, noise=0.05, seed=5)
    viewer = make_napari_viewer()
    grey = viewer.add_image(sample.image, name="fluorescence")
    he = viewer.add_image(_he(sample.image), name="H&E", rgb=True)
    widget = (DetectWidget if dock == "Detect" else SegmentWidget)(viewer)
    widget.image.value = he
    assert widget.polarity.value == "dark" and not widget.polarity.enabled
    widget.image.value = grey
    assert widget.polarity.value == "bright" and widget.polarity.enabled
    widget.polarity.value = "dark"  # the user's choice for a grey image (bright-field) ...
    widget.image.value = he
    widget.image.value = grey
    assert widget.polarity.value == "dark" and widget.polarity.enabled  # ... survives a visit to an RGB image
