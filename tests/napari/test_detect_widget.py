"""The "Detect nuclei" widget in a real viewer (pytest-qt, Xvfb)."""

from __future__ import annotations

import time

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

import ivote._backend  # noqa: E402
import ivote.detect  # noqa: E402
from ivote.metrics import match_points  # noqa: E402
from ivote.napari._detect_widget import DetectWidget  # noqa: E402
from ivote.napari._io import get_reader  # noqa: E402

pytestmark = pytest.mark.napari

TIMEOUT_MS = 60_000


@pytest.fixture
def make_widget(make_napari_viewer, qtbot):
    """A viewer with the sample image (scale, translate, µm) and the docked widget, live preview off."""

    def make(sample=None, translate=None, name="cells"):
        viewer = make_napari_viewer()
        if sample is not None:
            viewer.add_image(sample.image, name=name, scale=sample.spacing, translate=translate,
                             units=("um",) * sample.image.ndim)
        widget = DetectWidget(viewer)
        widget.live.setChecked(False)
        viewer.window.add_dock_widget(widget, name="Detect nuclei")
        if sample is not None:
            widget.radius.setValue(sample.radius)
        return viewer, widget

    yield make


@pytest.fixture
def count_calls(monkeypatch):
    """Count calls of the detector (the widget reaches it as ``ivote.detect.iterative_voting``)."""
    calls = []
    real = ivote.detect.iterative_voting

    def counted(*args, **kwargs):
        calls.append(kwargs.get("radius"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ivote.detect, "iterative_voting", counted)
    return calls


def run_and_wait(qtbot, widget, preview=False):
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS) as blocker:
        widget.preview() if preview else widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    return blocker.args[0]


def f1_in_world(layer, sample, translate, to_world):
    detected = to_world(layer.data, layer.scale, layer.translate)
    truth = to_world(sample.centers, sample.spacing, translate)
    return match_points(detected, truth, tolerance=0.5 * sample.radius).f1


def test_widget_docks_and_shows_backend(make_widget, nuclei_2d):
    sample, translate = nuclei_2d
    viewer, widget = make_widget(sample, translate)
    assert widget.image_combo.currentText() == "cells"
    assert widget.radius_label.text() == "radius (µm)"
    assert "NumPy" in widget.backend_label.text() or "GPU" in widget.backend_label.text()
    assert "Detect nuclei" in viewer.window.dock_widgets


def test_run_2d_points_sit_on_nuclei_in_world(make_widget, nuclei_2d, qtbot, to_world):
    sample, translate = nuclei_2d
    viewer, widget = make_widget(sample, translate)
    run_and_wait(qtbot, widget)
    layer = viewer.layers["nuclei: cells"]
    assert layer.ndim == 2
    np.testing.assert_allclose(layer.scale, sample.spacing)
    np.testing.assert_allclose(layer.translate, translate)
    np.testing.assert_allclose(layer.size, 2 * sample.radius / sample.spacing[-1])
    assert len(layer.features["score"]) == len(layer.data)
    assert f1_in_world(layer, sample, translate, to_world) >= 0.95


def test_run_3d_anisotropic_points_sit_on_nuclei_in_world(make_widget, nuclei_3d, qtbot, to_world):
    sample, translate = nuclei_3d
    viewer, widget = make_widget(sample, translate)
    run_and_wait(qtbot, widget)
    layer = viewer.layers["nuclei: cells"]
    assert layer.ndim == 3 and layer.data.shape[1] == 3
    np.testing.assert_allclose(layer.scale, sample.spacing)
    assert f1_in_world(layer, sample, translate, to_world) >= 0.95
    viewer.dims.ndisplay = 3  # the points render in the 3D view too
    assert layer.visible and len(layer._view_data) == len(layer.data)


def test_threshold_refilters_without_recomputing(make_widget, nuclei_2d, qtbot, count_calls):
    sample, translate = nuclei_2d
    viewer, widget = make_widget(sample, translate)
    run_and_wait(qtbot, widget)
    layer = viewer.layers["nuclei: cells"]
    n_otsu, scores = len(layer.data), widget._result.detections.candidate_scores
    assert len(count_calls) == 1
    widget.threshold.setValue(np.log10(np.quantile(scores, 0.98)))  # slider in log10(score)
    assert not widget.otsu.isChecked()
    assert 0 < len(layer.data) < n_otsu
    assert np.all(layer.features["score"] >= 10 ** widget.threshold.value() * (1 - 1e-9))
    widget.threshold.setValue(np.log10(scores[scores > 0].min()))
    every = widget._result.detections.with_threshold(None)  # every candidate above the image noise
    assert len(layer.data) == len(every.points) >= n_otsu and np.all(every.contrasts >= 3)
    widget.otsu.setChecked(True)
    assert len(layer.data) == n_otsu
    assert len(count_calls) == 1  # no recomputation
    assert viewer.layers["nuclei: cells"] is layer


def test_second_run_updates_the_same_layer(make_widget, nuclei_2d, qtbot):
    sample, translate = nuclei_2d
    viewer, widget = make_widget(sample, translate)
    run_and_wait(qtbot, widget)
    layer = viewer.layers["nuclei: cells"]
    widget.radius.setValue(0.8 * sample.radius)
    run_and_wait(qtbot, widget)
    assert viewer.layers["nuclei: cells"] is layer
    assert sum(isinstance(lyr, napari.layers.Points) for lyr in viewer.layers) == 1
    np.testing.assert_allclose(layer.size, 2 * 0.8 * sample.radius / sample.spacing[-1])


def test_live_preview_debounces_and_3d_uses_a_slab(make_widget, nuclei_3d, qtbot, count_calls):
    sample, translate = nuclei_3d
    viewer, widget = make_widget(sample, translate)
    widget.live.setChecked(True)
    viewer.dims.set_point(0, translate[0] + 8 * sample.spacing[0])  # plane z = 8
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS) as blocker:
        for radius in (3.0, 3.5, 4.0, sample.radius):  # a drag: one computation after the pause
            widget.radius.setValue(radius)
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    assert count_calls == [sample.radius]
    result = blocker.args[0]
    assert result.preview and result.offset[0] > 0
    layer = viewer.layers["nuclei: cells"]
    half = np.ceil(sample.radius / sample.spacing[0]) + 1
    assert len(layer.data) and np.all(np.abs(layer.data[:, 0] - 8) <= half)


@pytest.fixture
def slow_detector(monkeypatch):
    """Make every voting pass 0.3 s longer (a long run); count GPU-memory releases."""
    real = ivote.detect.iterative_voting
    freed = []

    def slow(*args, iter_callback=None, **kwargs):
        def callback(index, n_passes):
            time.sleep(0.3)
            iter_callback(index, n_passes)

        return real(*args, iter_callback=callback, **kwargs)

    monkeypatch.setattr(ivote.detect, "iterative_voting", slow)
    monkeypatch.setattr(ivote._backend, "free_gpu_memory", lambda: freed.append(1))
    return freed


def test_cancel_leaves_no_layer_and_no_error(make_widget, nuclei_2d, qtbot, slow_detector):
    sample, translate = nuclei_2d
    viewer, widget = make_widget(sample, translate)
    with qtbot.waitSignal(widget.progressed, timeout=TIMEOUT_MS):
        widget.run()
    widget.cancel_button.click()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    qtbot.wait(50)
    assert not any(isinstance(layer, napari.layers.Points) for layer in viewer.layers)
    assert widget.status.text() == "cancelled"
    assert not widget.cancel_button.isEnabled()
    assert slow_detector == [1]  # GPU memory released after the cancelled run too


def test_stale_results_are_dropped(make_widget, nuclei_2d, qtbot, slow_detector):
    sample, translate = nuclei_2d
    viewer, widget = make_widget(sample, translate)
    applied = []
    widget.finished_result.connect(applied.append)
    with qtbot.waitSignal(widget.progressed, timeout=TIMEOUT_MS):
        widget.run()
    widget.radius.setValue(0.8 * sample.radius)  # new settings while the first run is busy
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    qtbot.wait(50)
    assert len(applied) == 1 and applied[0].detections.radius == pytest.approx(0.8 * sample.radius)
    assert viewer.layers["nuclei: cells"].metadata["radius"] == pytest.approx(0.8 * sample.radius)


def test_export_then_read_restores_points_scores_scale(make_widget, nuclei_2d, qtbot, tmp_path):
    sample, translate = nuclei_2d
    viewer, widget = make_widget(sample, translate)
    run_and_wait(qtbot, widget)
    layer = viewer.layers["nuclei: cells"]
    path = tmp_path / "nuclei.csv"
    widget.export(str(path))
    assert "exported" in widget.status.text()
    [(data, attributes, kind)] = get_reader(str(path))(str(path))
    assert kind == "points"
    np.testing.assert_array_equal(data, layer.data)
    np.testing.assert_array_equal(attributes["features"]["score"], layer.features["score"])
    assert tuple(attributes["scale"]) == tuple(layer.scale)
    assert tuple(attributes["translate"]) == tuple(layer.translate)
    [opened] = viewer.open(str(path), plugin="napari-ivote")
    np.testing.assert_array_equal(opened.data, layer.data)
    np.testing.assert_array_equal(opened.scale, layer.scale)


def test_bad_settings_give_a_message_not_a_traceback(make_widget, nuclei_2d, qtbot):
    viewer, widget = make_widget()
    widget.run()
    assert "image layer" in widget.status.text()
    widget.export()
    assert "Nothing to export" in widget.status.text()
    sample, translate = nuclei_2d
    viewer.add_image(sample.image, name="cells", scale=sample.spacing)
    widget.radius.setMinimum(0.0)
    widget.radius.setValue(0.0)
    widget.run()
    assert "radius must be larger than 0" in widget.status.text()
    assert not widget.busy
    viewer.add_image(np.zeros((2, 3, 8, 8)), name="4d")
    widget.image_combo.setCurrentText("4d")
    assert "2D, 3D or 2D RGB" in widget.status.text()
    assert not any(isinstance(layer, napari.layers.Points) for layer in viewer.layers)


def test_preview_of_a_big_plane_is_a_window_around_the_view(make_widget, nuclei_2d, qtbot, monkeypatch, to_world):
    from ivote.napari import _detect_logic

    monkeypatch.setattr(_detect_logic, "preview_plane_budget", lambda: 128 * 128)  # as NumPy on a big image
    sample, translate = nuclei_2d
    viewer, widget = make_widget(sample, translate)
    result = run_and_wait(qtbot, widget, preview=True)
    assert result.window_shape == (128, 128) and "128x128 window" in widget.status.text()
    layer = viewer.layers["nuclei: cells"]
    low, high = np.asarray(result.offset), np.asarray(result.offset) + 128
    assert len(layer.data) and np.all((layer.data >= low) & (layer.data < high))
    run_and_wait(qtbot, widget)  # Run: the whole image
    assert widget._result.window_shape is None and "whole image" in widget.status.text()
    assert f1_in_world(layer, sample, translate, to_world) >= 0.95


def test_rgb_image_gives_2d_points(make_widget, qtbot, to_world):
    from ivote.data import synthetic_nuclei

    sample = synthetic_nuclei((128, 128), spacing=(0.5, 0.5), radius=5.0, polarity="dark", seed=5)
    shade = np.clip(sample.image, 0, 1)[..., None]
    rgb = (255 * (shade * np.array([1.0, 1.0, 1.0]) + (1 - shade) * np.array([0.35, 0.2, 0.55]))).astype(np.uint8)
    viewer, widget = make_widget()
    viewer.add_image(rgb, name="he", rgb=True, scale=sample.spacing)
    widget.radius.setValue(sample.radius)
    run_and_wait(qtbot, widget)
    layer = viewer.layers["nuclei: he"]
    assert layer.data.shape[1] == 2
    detected = to_world(layer.data, layer.scale, layer.translate)
    truth = to_world(sample.centers, sample.spacing, (0, 0))
    assert match_points(detected, truth, tolerance=0.5 * sample.radius).f1 >= 0.9
