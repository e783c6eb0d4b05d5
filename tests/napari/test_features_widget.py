"""The "Learn features" widget in a real viewer (pytest-qt, Xvfb)."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.napari._features_widget import FeaturesWidget  # noqa: E402

pytestmark = pytest.mark.napari

TIMEOUT_MS = 60_000


@pytest.fixture
def widget_with_image(make_napari_viewer, nuclei_2d):
    sample, translate = nuclei_2d
    viewer = make_napari_viewer()
    viewer.add_image(sample.image[:96, :80], name="cells", scale=sample.spacing, translate=translate)
    widget = FeaturesWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Learn features")
    widget.filters.setValue(4)
    widget.size.setValue(5)
    return viewer, widget, sample, translate


def test_train_shows_filters_maps_and_detection_input(qtbot, widget_with_image):
    viewer, widget, sample, translate = widget_with_image
    widget.stride.setCurrentText("2")
    widget.epochs.setValue(3)
    assert widget.image_combo.currentText() == "cells"
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS) as blocker:
        widget.train()
    result = blocker.args[0]
    assert result is not None and len(result.reconstruction_errors) == 3
    assert widget.progress_bar.value() == 3
    maps = viewer.layers["features: cells maps"]
    assert maps.data.shape == (4, 96, 80)
    np.testing.assert_allclose(maps.scale[1:], sample.spacing)
    np.testing.assert_allclose(maps.translate[1:], translate)
    filters = viewer.layers["filters: cells"]
    assert filters.data.shape == (4, 5, 5)
    np.testing.assert_allclose(filters.scale[1:], sample.spacing)

    layer = widget.use_as_detection_input()
    assert layer.name == "features: cells"
    assert layer.data.shape == (96, 80)
    np.testing.assert_allclose(layer.scale, sample.spacing)
    np.testing.assert_allclose(layer.translate, translate)
    np.testing.assert_allclose(layer.data, result.detection_input)
    # our own layers are not offered as training images
    assert [widget.image_combo.itemText(i) for i in range(widget.image_combo.count())] == ["cells"]


def test_cancel_stops_training(qtbot, widget_with_image, monkeypatch):
    from ivote import _backend

    freed = []
    monkeypatch.setattr(_backend, "free_gpu_memory", lambda: freed.append(True))
    viewer, widget, *_ = widget_with_image
    widget.epochs.setValue(1000)
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS) as blocker:
        widget.train()
        qtbot.waitUntil(lambda: widget.progress_bar.value() >= 1, timeout=TIMEOUT_MS)
        widget.cancel()
    assert blocker.args[0] is None
    assert widget.status.text() == "cancelled"
    assert not widget.busy
    assert "features: cells maps" not in viewer.layers
    assert freed  # GPU memory released after a cancelled training too


def test_train_without_image_reports(make_napari_viewer):
    viewer = make_napari_viewer()
    widget = FeaturesWidget(viewer)
    widget.train()
    assert "image" in widget.status.text()
