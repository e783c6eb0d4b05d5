"""The "Segment nuclei" widget: image + seeds in, a Labels layer with the image's scale and translate out."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("napari")

from ivote.metrics import match_labels  # noqa: E402

pytestmark = pytest.mark.napari


@pytest.fixture(autouse=True)
def _numpy_backend(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")


@pytest.fixture
def widget(make_napari_viewer):
    from ivote.napari._segment_widget import SegmentWidget

    viewer = make_napari_viewer()
    return viewer, SegmentWidget(viewer)


def test_segments_into_a_labels_layer(qtbot, widget, nuclei_2d, to_world):
    viewer, w = widget
    sample, translate = nuclei_2d
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, translate=translate)
    viewer.add_points(np.zeros((1, 2)), name="other points")
    # the detection output, in world coordinates
    viewer.add_points(to_world(sample.centers, sample.spacing, translate), name="nuclei: cells")
    w._refresh()
    w.image_combo.setCurrentText("cells")
    assert w.points_combo.currentText() == "nuclei: cells"  # detection output chosen by default
    assert w.weights["lambda1"].value() == 1.0 and w.weights["lambda2"].value() == 2.0
    w.radius.setValue(sample.radius)
    w.iterations.setValue(200)
    with qtbot.waitSignal(w.finished_result, timeout=60_000) as blocker:
        w.run_button.click()
    labels = blocker.args[0]
    layer = viewer.layers["labels: cells"]
    np.testing.assert_allclose(layer.scale, sample.spacing)
    np.testing.assert_allclose(layer.translate, translate)
    assert match_labels(layer.data, sample.labels).f1 >= 0.85
    assert labels is not None and "nuclei" in w.status.text()


def test_cancel(qtbot, widget, nuclei_2d, monkeypatch):
    from ivote import _backend

    freed = []
    monkeypatch.setattr(_backend, "free_gpu_memory", lambda: freed.append(True))
    viewer, w = widget
    sample, _ = nuclei_2d
    viewer.add_image(sample.image, name="cells", scale=sample.spacing)
    viewer.add_points(sample.centers * np.asarray(sample.spacing), name="seeds")
    w.radius.setValue(sample.radius)
    w.iterations.setValue(5000)
    with qtbot.waitSignal(w.finished_result, timeout=60_000) as blocker:
        w.run_button.click()
        w.cancel_button.click()
    assert blocker.args[0] is None
    assert w.status.text() == "cancelled"
    assert "labels: cells" not in viewer.layers
    assert w.run_button.isEnabled()
    assert freed  # GPU memory released after a cancelled run too


def test_needs_layers(widget):
    viewer, w = widget
    w.run()
    assert "choose" in w.status.text()
