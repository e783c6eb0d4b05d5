"""The four magicgui dock widgets in a real viewer (pytest-qt, Xvfb): results, bugs of the click-through, reliability.

Each test of a click-through problem fails on the widgets before the magicgui rebuild.
"""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

import ivote.detect  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def small():
    """A 96² tile at 0.5 µm/px, nuclei up to 4 µm: a run takes a fraction of a second on a CPU."""
    return synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=5)


def _viewer_with(make_napari_viewer, sample, **image_kwargs):
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"), **image_kwargs)
    return viewer


def _detect(viewer, live=False):
    from ivote.napari._detect_widget import DetectWidget

    widget = DetectWidget(viewer)
    widget.live.value = live
    viewer.window.add_dock_widget(widget, name="Detect nuclei")
    return widget


def _wait(qtbot, widget):
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    qtbot.wait(20)  # queued main-thread hand-backs


# -- magicgui --------------------------------------------------------------------------------------------------------
def test_widgets_are_magicgui_containers_with_named_tooltipped_controls(make_napari_viewer, small):
    from magicgui.widgets import Container
    from magicgui.widgets.bases import ValueWidget

    from ivote.napari._components_widget import LabelCountWidget
    from ivote.napari._features_widget import FeaturesWidget
    from ivote.napari._segment_widget import SegmentWidget
    from ivote.napari._widgets_common import DockWidget

    viewer = _viewer_with(make_napari_viewer, small)
    for cls, names in ((_detect_cls(), ("image", "radius", "polarity", "blur", "threshold")),
                       (SegmentWidget, ("image", "seeds", "radius", "iterations", "advanced")),
                       (FeaturesWidget, ("image", "filters", "epochs")),
                       (LabelCountWidget, ("layer", "threshold", "distance", "table_button"))):
        widget = cls(viewer)
        assert isinstance(widget, DockWidget) and isinstance(widget, Container)
        assert widget[-1] is widget.backend_label and widget.backend_label.value  # where it runs, last
        for name in names:
            assert widget[name].name == name
        controls = [w for w in _walk(widget) if isinstance(w, ValueWidget) and w.enabled is not None
                    and type(w).__name__ not in ("Label", "Status", "Container", "Table")]
        assert controls and all(w.tooltip for w in controls), [w.name for w in controls if not w.tooltip]


def _detect_cls():
    from ivote.napari._detect_widget import DetectWidget

    return DetectWidget


def _walk(container):
    from magicgui.widgets import Container

    for widget in container:
        yield widget
        if isinstance(widget, Container):
            yield from _walk(widget)


def test_layer_choices_follow_the_layer_list(make_napari_viewer, small):
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    assert widget.image.value is viewer.layers["cells"]
    viewer.add_image(small.image, name="second")
    assert {layer.name for layer in widget.image.choices} == {"second", "cells"}
    viewer.layers.remove("second")
    assert [layer.name for layer in widget.image.choices] == ["cells"]


# -- Detect: results never lost ---------------------------------------------------------------------------------------
def test_radius_starts_at_a_nucleus_not_one_pixel(make_napari_viewer, small):
    widget = _detect(_viewer_with(make_napari_viewer, small))
    assert widget.radius.label == "radius (µm)"
    assert widget.radius.value == pytest.approx(8 * small.spacing[-1])  # 8 px, not the slider's 1-px minimum


def test_run_right_after_a_change_is_not_dropped_and_previews_never_replace_it(make_napari_viewer, small, qtbot):
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer, live=True)
    widget.radius.value = small.radius  # schedules a preview 300 ms later ...
    widget.run()  # ... and Run, at once, must still happen
    _wait(qtbot, widget)
    qtbot.wait(400)
    _wait(qtbot, widget)
    run_layer = viewer.layers["nuclei: cells"]
    found = len(run_layer.data)
    assert match_points(run_layer.data, small.centers, tolerance=0.5 * small.radius / 0.5).f1 >= 0.8
    widget.radius.value = small.radius * 0.6  # a setting changed after Run: a preview, in its own layer
    widget.preview()
    _wait(qtbot, widget)
    assert "nuclei (preview): cells" in viewer.layers
    assert len(viewer.layers["nuclei: cells"].data) == found


def test_preview_window_is_outlined_on_the_canvas(make_napari_viewer, small, qtbot, monkeypatch):
    from ivote.napari import _detect_preview

    monkeypatch.setattr(_detect_preview, "preview_plane_budget", lambda: 48 * 48)
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.preview()
    _wait(qtbot, widget)
    outline = viewer.layers["preview window: cells"]
    corners = np.asarray(outline.data[0])
    assert np.ptp(corners[:, 0]) == pytest.approx(48) and np.ptp(corners[:, 1]) == pytest.approx(48)
    points = viewer.layers["nuclei (preview): cells"].data
    assert len(points) and (points.min(0) >= corners.min(0)).all() and (points.max(0) <= corners.max(0)).all()


def _run_on_small(make_napari_viewer, small, qtbot):
    """A viewer with ``small`` as 'cells', a Detect dock that ran on it: (viewer, widget, its points layer)."""
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.radius.value = small.radius
    widget.run()
    _wait(qtbot, widget)
    return viewer, widget, viewer.layers["nuclei: cells"]


def test_points_are_rings_and_threshold_label_is_the_linear_score(make_napari_viewer, small, qtbot):
    viewer, widget, layer = _run_on_small(make_napari_viewer, small, qtbot)
    assert (layer.features["contrast"] >= 3).all()  # every kept point stands out of the noise (min_contrast)
    assert layer.opacity == 1.0 and np.allclose(layer.face_color[:, 3], 0)  # the nucleus shows inside its ring
    kept = layer.features["score"].min()
    shown = float(widget.threshold.label.split("≥")[1].split()[0])
    assert kept >= shown and shown == pytest.approx(widget.threshold.value, rel=0.1)


def test_rgb_polarity_reads_dark_and_is_disabled(make_napari_viewer):
    viewer = make_napari_viewer()
    viewer.add_image(np.full((64, 64, 3), 200, np.uint8), rgb=True, name="he")
    widget = _detect(viewer)
    assert widget.polarity.value == "dark" and not widget.polarity.enabled


def test_4d_message_is_kept_on_run(make_napari_viewer):
    viewer = make_napari_viewer()
    viewer.add_image(np.zeros((2, 3, 16, 16), np.float32), name="4d")
    widget = _detect(viewer)
    widget.run()
    assert "4 axes" in widget.status.value and "Add or select" not in widget.status.value
    assert "labelled 't'" in widget.status.value and "Split Stack" in widget.status.value  # what to do about it


def test_affine_layer_gets_points_in_the_right_world_position(make_napari_viewer, small, qtbot):
    viewer = _viewer_with(make_napari_viewer, small, rotate=30, translate=(10.0, -5.0), shear=[0.2])
    widget = _detect(viewer)
    widget.radius.value = small.radius
    widget.run()
    _wait(qtbot, widget)
    image, points = viewer.layers["cells"], viewer.layers["nuclei: cells"]
    truth = np.array([image.data_to_world(c) for c in small.centers])
    found = np.array([points.data_to_world(p) for p in points.data])
    assert match_points(found, truth, tolerance=0.5 * small.radius).f1 >= 0.8
    # and Segment seeds from them in the image's pixels
    from ivote.napari._segment_widget import seeds_in_pixels

    assert match_points(seeds_in_pixels(points, image), small.centers, tolerance=4).f1 >= 0.8


# -- running, cancelling, closing ---------------------------------------------------------------------------------------
def test_cancel_from_the_progress_object_stops_the_run_and_leaves_no_layer(make_napari_viewer, small, qtbot,
                                                                           slow_detector):
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.run()
    bar = widget.runner.job.progress
    qtbot.waitUntil(lambda: len(slow_detector) >= 1, timeout=TIMEOUT_MS)
    bar.cancel()  # the activity dock's cancel button
    _wait(qtbot, widget)
    assert "nuclei: cells" not in viewer.layers
    assert len(slow_detector) <= 2  # the CPU stopped at the next pass, it did not run to the end


def test_progress_bar_moves_with_its_counter(make_napari_viewer, qtbot):
    from ivote.napari._runner import Job

    make_napari_viewer()
    job = Job("test", total=300)
    job.check(250, 300)
    qtbot.waitUntil(lambda: job.progress.n == 250)
    values = []
    job.progress.events.value.connect(lambda event: values.append(event.value))
    job.check(280, 300)
    qtbot.waitUntil(lambda: values == [280])
    job.close()


def test_an_exception_in_the_worker_is_a_notification_and_the_widget_stays_usable(make_napari_viewer, small, qtbot,
                                                                                  monkeypatch):
    from napari.utils.notifications import notification_manager

    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    real = ivote.detect.iterative_voting

    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(ivote.detect, "iterative_voting", broken)
    seen = []
    notification_manager.notification_ready.connect(seen.append)
    widget.run()
    _wait(qtbot, widget)
    notification_manager.notification_ready.disconnect(seen.append)
    assert any("kernel exploded" in str(n.message) for n in seen)
    assert "kernel exploded" in widget.status.value and "nuclei: cells" not in viewer.layers
    monkeypatch.setattr(ivote.detect, "iterative_voting", real)
    widget.radius.value = small.radius
    widget.run()
    _wait(qtbot, widget)
    assert len(viewer.layers["nuclei: cells"].data) > 0


def test_a_widget_closed_mid_run_adds_nothing(make_napari_viewer, small, qtbot, slow_detector):
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.run()
    qtbot.waitUntil(lambda: len(slow_detector) >= 1, timeout=TIMEOUT_MS)
    viewer.window.remove_dock_widget(widget.native)
    _wait(qtbot, widget)
    assert [layer.name for layer in viewer.layers] == ["cells"]
    assert len(slow_detector) <= 2


def test_removing_the_input_layer_mid_run_adds_nothing(make_napari_viewer, small, qtbot, slow_detector):
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.run()
    qtbot.waitUntil(lambda: len(slow_detector) >= 1, timeout=TIMEOUT_MS)
    viewer.layers.remove("cells")
    _wait(qtbot, widget)
    assert len(viewer.layers) == 0 and "removed" in widget.status.value


def test_running_twice_quickly_leaves_one_layer_and_no_worker(make_napari_viewer, small, qtbot):
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.radius.value = small.radius
    widget.run()
    widget.run()
    _wait(qtbot, widget)
    assert [layer.name for layer in viewer.layers] == ["cells", "nuclei: cells"]
    assert not widget.busy


def test_removing_all_layers_and_opening_a_new_image_with_live_preview(make_napari_viewer, small, qtbot):
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer, live=True)
    widget.preview()
    _wait(qtbot, widget)
    widget.preview()  # a preview in flight while its layers go
    viewer.layers.select_all()
    viewer.layers.remove_selected()
    viewer.add_image(small.image[::-1].copy(), name="new", scale=small.spacing)
    qtbot.wait(400)
    _wait(qtbot, widget)
    names = [layer.name for layer in viewer.layers]
    assert "nuclei (preview): cells" not in names and names[0] == "new"


# -- Run on folder -------------------------------------------------------------------------------------------------------
def test_a_folder_of_three_images_gives_three_outputs_and_a_summary(make_napari_viewer, small, qtbot, tmp_path):
    import tifffile

    from ivote.io import read_points_csv

    folder = tmp_path / "images"
    folder.mkdir()
    truths = {}
    for seed in range(3):
        sample = synthetic_nuclei((80, 80), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=seed)
        tifffile.imwrite(folder / f"tile{seed}.tif", sample.image.astype(np.float32))
        truths[f"tile{seed}"] = sample.centers
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.radius.value = small.radius
    widget.batch.run(folder, tmp_path / "out")
    _wait(qtbot, widget.batch)
    outputs = sorted((tmp_path / "out").glob("*_nuclei.csv"))
    assert [p.name for p in outputs] == ["tile0_nuclei.csv", "tile1_nuclei.csv", "tile2_nuclei.csv"]
    for path, row in zip(outputs, widget.batch.rows):
        table = read_points_csv(path)
        assert row["nuclei"] == len(table.points)
        assert match_points(table.points, truths[path.stem[:-7]], tolerance=4).f1 >= 0.8
    summary = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("image,nuclei") and len(summary) == 4
    assert not widget.batch.table.native.isHidden() and widget.batch.table.shape[0] == 3


# -- Label and count ----------------------------------------------------------------------------------------------------
def test_features_table_holds_physical_measurements_checked_against_regionprops(make_napari_viewer, qtbot,
                                                                                  tmp_path):
    from skimage.measure import regionprops_table

    from ivote.napari._components_widget import LabelCountWidget

    spacing = (0.5, 0.25)
    labels = np.zeros((80, 120), np.int32)
    yy, xx = np.mgrid[:80, :120]
    radii = {1: 6.0, 2: 8.0, 3: 4.0}  # µm, discs in physical space; 1 and 2 touch
    centres = {1: (10.0, 8.0), 2: (10.0, 21.0), 3: (28.0, 20.0)}
    for k, r in radii.items():
        cy, cx = centres[k]
        labels[((yy * spacing[0] - cy) ** 2 + (xx * spacing[1] - cx) ** 2) <= r**2] = k
    intensity = labels.astype(np.float32) * 10 + 1
    viewer = make_napari_viewer()
    um = ("um", "um")
    viewer.add_image(intensity, name="cells", scale=spacing, translate=(100.0, 0.0), units=um)
    viewer.add_labels(labels, name="labels: cells", scale=spacing, translate=(100.0, 0.0), units=um)
    seeds = np.array([[centres[k][0] / spacing[0], centres[k][1] / spacing[1]] for k in (1, 2, 3)])
    viewer.add_points(seeds, name="nuclei: cells", scale=spacing, translate=(100.0, 0.0), units=um,
                      features={"score": [7.0, 8.0, 9.0]})
    widget = LabelCountWidget(viewer)
    widget.layer.value = viewer.layers["labels: cells"]
    assert widget.intensity.value is viewer.layers["cells"]
    widget.run()
    _wait(qtbot, widget)
    features = viewer.layers["labels: cells"].features
    assert list(features["label"]) == [1, 2, 3]  # touching nuclei 1 and 2 are counted apart
    for k, r in radii.items():
        row = features[features["label"] == k].iloc[0]
        assert row["area_um2"] == pytest.approx(np.pi * r**2, rel=0.05)
        assert row["equivalent_diameter_um"] == pytest.approx(2 * r, rel=0.03)
        assert row["centroid_y_um"] == pytest.approx(100.0 + centres[k][0], abs=0.3)  # world position
        assert row["mean_intensity"] == pytest.approx(10 * k + 1)
        assert row["integrated_intensity"] == pytest.approx((10 * k + 1) * (labels == k).sum())
        assert row["score"] == 6.0 + k  # the detection score of the nucleus' point
    truth = regionprops_table(labels, intensity, properties=("label", "area", "solidity", "axis_major_length"),
                              spacing=spacing)
    np.testing.assert_allclose(features["area_um2"], truth["area"])
    np.testing.assert_allclose(features["solidity"], truth["solidity"])
    np.testing.assert_allclose(features["axis_major_length_um"], truth["axis_major_length"])
    assert "3 nuclei" in widget.status.value
    out = widget.export(str(tmp_path / "table.csv"))
    header = open(out).read().splitlines()[0].split(",")
    assert header[0] == "label" and "area_um2" in header and "score" in header


def test_image_threshold_defaults_to_otsu(make_napari_viewer, small):
    from skimage.filters import threshold_otsu

    from ivote.napari._components_widget import LabelCountWidget

    viewer = _viewer_with(make_napari_viewer, small)
    widget = LabelCountWidget(viewer)
    widget.layer.value = viewer.layers["cells"]
    assert widget.threshold.value == pytest.approx(threshold_otsu(small.image), abs=0.01)


def test_clusters_count_from_one_and_are_highlighted(make_napari_viewer, qtbot):
    from ivote.napari._components_widget import SINGLE_COLOR, LabelCountWidget

    viewer = make_napari_viewer()
    viewer.add_points(np.array([[0, 0], [0, 3], [50, 50], [80, 10]], float), name="nuclei: x")
    widget = LabelCountWidget(viewer)
    widget.layer.value = viewer.layers["nuclei: x"]
    widget.distance.value = 5
    widget.run()
    _wait(qtbot, widget)
    layer = viewer.layers["nuclei: x"]
    assert sorted(set(layer.features["cluster"])) == [1, 2, 3]
    assert np.allclose(layer.face_color[2], SINGLE_COLOR) and not np.allclose(layer.face_color[0], SINGLE_COLOR)


# -- Segment and Features -----------------------------------------------------------------------------------------------
def test_segment_takes_detects_radius_and_refuses_silly_radii(make_napari_viewer, small, qtbot):
    from ivote.napari._segment_widget import SegmentWidget

    viewer = _viewer_with(make_napari_viewer, small)
    detect = _detect(viewer)
    detect.radius.value = small.radius
    detect.preview()
    _wait(qtbot, detect)
    assert SegmentWidget(viewer).seeds.value is None  # a preview is never a seed layer
    detect.run()
    _wait(qtbot, detect)
    widget = SegmentWidget(viewer)
    assert widget.seeds.value is viewer.layers["nuclei: cells"]
    assert widget.radius.value == pytest.approx(small.radius) and widget.radius.label == "radius (µm)"
    for silly in (0.01, 10_000):
        widget.radius.native.setValue(silly)  # what typing it does: the box holds the image's range
        assert widget.radius.min <= widget.radius.value <= widget.radius.max
    viewer.layers["cells"].scale = (4.0, 4.0)  # after the choice: the range is checked again on Run
    widget.radius.value = 5.0  # 1.25 pixels now
    widget.run()
    assert f"radius must be between {1.5 * 4:g}" in widget.status.value and not widget.busy
    assert "MIN_RADIUS_PIXELS = 1.5 pixels" in widget.status.value
    assert "labels: cells" not in viewer.layers


def test_segment_radius_range_is_the_cores(make_napari_viewer, small):
    """The Segment dock's smallest radius is the core's (MIN_RADIUS_PIXELS pixels, 0.75 µm here, not the 0.25 µm it
    took before): segment_nuclei takes it and refuses less."""
    from ivote import segment_nuclei
    from ivote._validate import MIN_RADIUS_PIXELS
    from ivote.errors import IvoteError
    from ivote.napari._segment_widget import SegmentWidget

    viewer = _viewer_with(make_napari_viewer, small)
    widget = SegmentWidget(viewer)
    low = widget.radius.min
    assert low == pytest.approx(MIN_RADIUS_PIXELS * small.spacing[0])
    widget.radius.native.setValue(0.3)  # typed: the box clamps it
    assert widget.radius.value == pytest.approx(low)
    seeds = small.centers[:2]
    assert segment_nuclei(small.image, seeds, radius=low, spacing=small.spacing, iterations=1).max() >= 0
    with pytest.raises(IvoteError, match="radius must satisfy"):
        segment_nuclei(small.image, seeds, radius=0.99 * low, spacing=small.spacing, iterations=1)


def test_feature_stacks_add_no_slider_and_stay_out_of_detect(make_napari_viewer, small, qtbot):
    from ivote.napari._features_widget import FeaturesWidget

    viewer = _viewer_with(make_napari_viewer, small)
    widget = FeaturesWidget(viewer)
    widget.filters.value, widget.epochs.value, widget.size.value = 4, 1, 5
    widget.train()
    _wait(qtbot, widget)
    assert viewer.dims.ndim == 2 and [layer.name for layer in viewer.layers] == ["cells"]
    widget.show_stacks.value = True
    widget.train()
    _wait(qtbot, widget)
    detect = _detect(viewer)
    names = [layer.name for layer in detect.image.choices]
    assert "filters: cells" in viewer.layers and all("filters" not in n and "maps" not in n for n in names)
    assert not viewer.layers["filters: cells"].visible


def test_closing_the_viewer_mid_run_prints_nothing(make_napari_viewer, small, qtbot, slow_detector, capfd):
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.run()
    qtbot.waitUntil(lambda: len(slow_detector) >= 1, timeout=TIMEOUT_MS)
    viewer.close()
    qtbot.waitUntil(lambda: not widget.runner.busy, timeout=TIMEOUT_MS)
    qtbot.wait(50)
    assert len(slow_detector) <= 2
    captured = capfd.readouterr()
    assert "Error" not in captured.err + captured.out and "Traceback" not in captured.err


def test_timelapse_previews_the_current_frame_and_runs_every_frame(make_napari_viewer, qtbot, tmp_path):
    # frames of 2, 19 and 9 nuclei: Otsu's threshold of one frame alone differs from that of all of them
    samples = [synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=s,
                                **({"n_nuclei": n} if n else {}))
               for s, n in ((11, 2), (12, 40), (13, None))]
    viewer = make_napari_viewer()
    viewer.add_image(np.stack([s.image for s in samples]), name="movie", scale=(60.0, 0.5, 0.5),
                     axis_labels=("t", "y", "x"), units=("s", "um", "um"))
    widget = _detect(viewer)
    assert widget.radius.label == "radius (µm)"  # time is not a spatial axis
    widget.radius.value = 4.0
    viewer.dims.set_current_step(0, 1)
    widget.preview()
    _wait(qtbot, widget)
    preview = viewer.layers["nuclei (preview): movie"].data
    assert set(preview[:, 0]) == {1.0}
    assert match_points(preview[:, 1:], samples[1].centers, tolerance=4).f1 >= 0.8
    widget.run()
    _wait(qtbot, widget)
    found = viewer.layers["nuclei: movie"].data
    assert found.shape[1] == 3
    for frame, sample in enumerate(samples):
        assert match_points(found[found[:, 0] == frame, 1:], sample.centers, tolerance=4).f1 >= 0.8
    # one threshold for every frame, as ivote.detect_frames (Otsu of all frames' candidates together)
    from ivote import detect_frames

    expected = detect_frames(np.stack([s.image for s in samples]), radius=4.0, spacing=(0.5, 0.5))
    order = lambda a: a[np.lexsort(a.T[::-1])]  # noqa: E731
    np.testing.assert_allclose(order(found), order(np.asarray(expected.points, float)))
    from ivote.io import read_points_csv

    widget.export(str(tmp_path / "movie.csv"))
    table = read_points_csv(tmp_path / "movie.csv")
    np.testing.assert_array_equal(table.times, found[:, 0])
    np.testing.assert_allclose(table.points, found[:, 1:])


def test_docks_open_as_tabs_so_four_fit_a_1080_pixel_screen(make_napari_viewer, small, qtbot):
    from ivote.napari._components_widget import LabelCountWidget
    from ivote.napari._segment_widget import SegmentWidget

    viewer = _viewer_with(make_napari_viewer, small)
    window = viewer.window._qt_window
    window.show()
    docks = [viewer.window.add_dock_widget(cls(viewer), name=name, area="right")
             for cls, name in ((_detect_cls(), "Detect"), (SegmentWidget, "Segment"), (LabelCountWidget, "Count"))]
    qtbot.wait(50)
    assert set(window.tabifiedDockWidgets(docks[0])) == set(docks[1:])


@pytest.mark.slow
def test_segment_gives_one_connected_region_per_nucleus_in_3d(make_napari_viewer, nuclei_3d, qtbot):
    from scipy import ndimage

    from ivote.napari._segment_widget import SegmentWidget

    sample, translate = nuclei_3d
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="vol", scale=sample.spacing, translate=translate, units=("um",) * 3)
    viewer.add_points(sample.centers, name="nuclei: vol", scale=sample.spacing, translate=translate,
                      units=("um",) * 3, metadata={"radius": sample.radius})
    widget = SegmentWidget(viewer)
    assert widget.radius.value == sample.radius
    widget.iterations.value = 100
    widget.run()
    _wait(qtbot, widget)
    labels = viewer.layers["labels: vol"].data
    ids = np.unique(labels)[1:]
    assert len(ids) >= 0.8 * len(sample.centers)
    pieces = [ndimage.label(labels == k)[1] for k in ids]
    assert pieces == [1] * len(ids)  # one nucleus, one connected region (was 34-187 pieces)


def test_a_layer_opened_without_pixel_sizes_takes_the_files(make_napari_viewer, qtbot, tmp_path):
    """napari's own TIFF reader sets no scale; Detect gives the layer the file's pixel sizes (issue 13),
    so the radius is in micrometres and the points sit on the nuclei in world coordinates."""
    import tifffile

    sample = synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=5)
    path = tmp_path / "cells.tif"
    tifffile.imwrite(path, (np.clip(sample.image, 0, None) * 1000).astype(np.uint16), imagej=True, resolution=(2.0, 2.0),
                     metadata={"unit": "um", "axes": "YX"})
    viewer = make_napari_viewer()
    layer = viewer.open(str(path), plugin="napari")[0]
    assert tuple(layer.scale) == (1.0, 1.0)  # what napari's reader gives
    widget = _detect(viewer)
    assert tuple(layer.scale) == pytest.approx((0.5, 0.5))
    assert widget.radius.label == "radius (µm)"
    widget.radius.value = 4.0
    widget.run()
    _wait(qtbot, widget)
    found = viewer.layers["nuclei: cells"]
    assert tuple(found.scale) == pytest.approx((0.5, 0.5))
    assert match_points(found.data, sample.centers, tolerance=4).f1 >= 0.8
    # a layer that has a scale keeps it
    other = viewer.add_image(sample.image, name="scaled", scale=(0.25, 0.25))
    widget.image.value = other
    assert tuple(other.scale) == (0.25, 0.25)


# -- the crash of the click-through: layers removed under a live preview --------------------------------------------------
def test_preview_layers_go_with_their_image_and_no_stale_preview_reaches_the_next(make_napari_viewer, small, qtbot,
                                                                                   monkeypatch):
    from ivote.napari import _detect_preview

    monkeypatch.setattr(_detect_preview, "preview_plane_budget", lambda: 48 * 48)  # a window outline too
    viewer = _viewer_with(make_napari_viewer, small)
    widget = _detect(viewer)
    widget.preview()
    _wait(qtbot, widget)
    assert {"nuclei (preview): cells", "preview window: cells"} <= {layer.name for layer in viewer.layers}
    viewer.layers.remove("cells")  # only the image: its preview layers must follow it
    qtbot.waitUntil(lambda: [layer.name for layer in viewer.layers] == [], timeout=2000)
    viewer.add_image(small.image[::-1].copy(), name="new", scale=small.spacing, units=("um", "um"))
    assert widget.image.value is viewer.layers["new"]
    widget.auto_threshold.value = False  # refilters the cached results: the old image's preview must not land on the new one
    widget.threshold.value = widget.threshold.max
    qtbot.wait(50)
    assert [layer.name for layer in viewer.layers] == ["new"]


def test_stress_remove_all_layers_and_open_a_new_image_under_a_live_preview(make_napari_viewer, small, qtbot):
    """The sequence that segfaulted napari (6 of 14 runs): live preview on, remove all layers, open a new image."""
    import threading
    import traceback

    viewer = _viewer_with(make_napari_viewer, small)
    viewer.window._qt_window.show()  # the canvas draws, as in the click-through
    widget = _detect(viewer, live=True)
    images = [small.image, small.image[::-1].copy(), small.image[:, ::-1].copy()]
    # layers being or already removed, kept alive (an id() is reused once its object is gone: a new preview
    # layer then looked removed); our changes to them or off the main thread
    leaving, wrong = [], []

    def watch(layer):
        def record(event):
            ours = any("ivote" in frame.filename for frame in traceback.extract_stack()[:-1])
            off_main = threading.current_thread() is not threading.main_thread()
            if off_main or (ours and any(layer is gone for gone in leaving)):
                wrong.append((event.type, layer.name, "worker thread" if off_main else "layer being removed"))

        layer.events.connect(record)

    for layer in viewer.layers:
        watch(layer)
    viewer.layers.events.inserted.connect(lambda event: watch(event.value))
    viewer.layers.events.removing.connect(lambda event: leaving.append(viewer.layers[event.index]))
    for round_ in range(6):
        qtbot.waitUntil(lambda: any(layer.name.startswith("nuclei (preview)") for layer in viewer.layers),
                        timeout=TIMEOUT_MS)
        widget.radius.value = small.radius * (0.8 + 0.05 * round_)  # a preview scheduled ...
        widget.preview()  # ... and one in flight while the layers go
        viewer.layers.select_all()
        viewer.layers.remove_selected()
        assert len(viewer.layers) == 0
        qtbot.wait(5)
        viewer.add_image(images[round_ % 3], name=f"image {round_}", scale=small.spacing, units=("um", "um"))
        qtbot.wait(30)
    _wait(qtbot, widget)
    qtbot.waitUntil(lambda: "nuclei (preview): image 5" in viewer.layers, timeout=TIMEOUT_MS)
    _wait(qtbot, widget)
    assert sorted(layer.name for layer in viewer.layers) == ["image 5", "nuclei (preview): image 5"]
    assert match_points(viewer.layers["nuclei (preview): image 5"].data, small.centers * [1, -1] + [0, 95],
                        tolerance=4).f1 >= 0.8
    assert wrong == []  # the widget never touches a layer napari is removing, nor any layer from a worker


def test_one_threshold_step_refilters_once(make_napari_viewer, small, qtbot, count_refilters):
    """A step of the threshold slider (a key press on its Qt slider) refilters the Run's cached maxima once."""
    from qtpy.QtCore import Qt
    from qtpy.QtWidgets import QSlider

    viewer, widget, layer = _run_on_small(make_napari_viewer, small, qtbot)
    slider = widget.threshold.native.findChildren(QSlider)[0]
    for key in (Qt.Key.Key_End, Qt.Key.Key_Home):  # the highest threshold, then none
        count_refilters.clear()
        before = len(layer.data)
        qtbot.keyClick(slider, key)
        assert len(count_refilters) == 1, key
        assert (len(layer.data) < before) if key == Qt.Key.Key_End else (len(layer.data) > before)


def test_a_dock_job_switches_its_buttons_and_updates_its_result_layer(make_napari_viewer, small, qtbot):
    """DockWidget.start: Run off while the job runs, on after; show_result: a second run updates the same
    'components: <image>' layer, on the image's transform."""
    from ivote.napari._components_widget import LabelCountWidget

    viewer = _viewer_with(make_napari_viewer, small, translate=(3.0, -2.0))
    widget = LabelCountWidget(viewer)
    widget.layer.value = viewer.layers["cells"]
    widget.run()
    assert not widget.run_button.enabled
    _wait(qtbot, widget)
    assert widget.run_button.enabled
    first = viewer.layers["components: cells"]
    np.testing.assert_allclose(first.scale, small.spacing)
    np.testing.assert_allclose(first.translate, (3.0, -2.0))
    widget.threshold.value = widget.threshold.value * 1.5
    widget.run()
    _wait(qtbot, widget)
    assert viewer.layers["components: cells"] is first and len(viewer.layers) == 2
    np.testing.assert_array_equal(first.data > 0, small.image > widget.threshold.value)
