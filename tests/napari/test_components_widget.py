"""The "Label and count" widget: labels from Labels/Image layers, clusters for Points."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("napari")

from ivote.components import cluster_points, label  # noqa: E402

pytestmark = pytest.mark.napari


@pytest.fixture(autouse=True)
def _numpy_backend(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")


@pytest.fixture
def widget(make_napari_viewer):
    from ivote.napari._components_widget import LabelCountWidget

    viewer = make_napari_viewer()
    return viewer, LabelCountWidget(viewer)


def run_and_wait(qtbot, widget):
    with qtbot.waitSignal(widget.finished_result, timeout=20_000) as blocker:
        widget.run_button.click()
    return blocker.args[0]


def test_labels_layer(qtbot, widget, nuclei_2d, monkeypatch):
    from ivote import _backend

    freed = []
    monkeypatch.setattr(_backend, "free_gpu_memory", lambda: freed.append(True))
    viewer, w = widget
    sample, translate = nuclei_2d
    viewer.add_labels(sample.labels, name="truth", scale=sample.spacing, translate=translate)
    w.layer_combo.setCurrentText("truth")
    w.connectivity.setCurrentIndex(1)
    result = run_and_wait(qtbot, w)
    expected = label(sample.labels != 0, connectivity=2)
    assert result.count == expected.count > 1
    out = viewer.layers["truth components"]
    np.testing.assert_array_equal(out.data, expected.labels)
    np.testing.assert_allclose(out.scale, sample.spacing)
    np.testing.assert_allclose(out.translate, translate)
    assert w.status.text().startswith(f"{expected.count:,} components")
    assert w.table.rowCount() == expected.count
    assert int(w.table.item(0, 1).text()) == expected.sizes[0]
    assert freed  # GPU memory released after the run


def test_image_layer_with_threshold(qtbot, widget, nuclei_2d):
    viewer, w = widget
    sample, _ = nuclei_2d
    viewer.add_image(sample.image, name="nuclei", scale=sample.spacing)
    w.layer_combo.setCurrentText("nuclei")
    assert w.threshold.isEnabled() and not w.distance.isEnabled()
    w.threshold.setValue(0.4)
    result = run_and_wait(qtbot, w)
    expected = label(sample.image > 0.4)
    assert result.count == expected.count > 1
    np.testing.assert_array_equal(viewer.layers["nuclei components"].data, expected.labels)


def test_points_clustered_in_physical_units(qtbot, widget, nuclei_2d):
    viewer, w = widget
    sample, _ = nuclei_2d
    points = viewer.add_points(sample.centers, name="centres", scale=sample.spacing)
    w.layer_combo.setCurrentText("centres")
    assert w.distance.isEnabled()
    distance = 2 * sample.radius
    w.distance.setValue(distance)
    result = run_and_wait(qtbot, w)
    expected = cluster_points(sample.centers, distance=distance, spacing=sample.spacing)
    assert result.n_clusters == expected.n_clusters < len(sample.centers)
    np.testing.assert_array_equal(points.features["cluster"], expected.cluster)
    np.testing.assert_array_equal(points.features["cluster_size"], expected.cluster_size)
    # points of one cluster share a colour
    first = np.flatnonzero(expected.cluster_size > 1)[0]
    same = np.flatnonzero(expected.cluster == expected.cluster[first])
    np.testing.assert_array_equal(points.face_color[same], np.repeat(points.face_color[same[:1]], len(same), 0))


def test_error_is_shown(qtbot, widget):
    viewer, w = widget
    viewer.add_image(np.zeros((4, 4, 3), dtype=np.uint8), name="rgb", rgb=True)
    w.layer_combo.setCurrentText("rgb")
    with qtbot.waitSignal(w.finished_result, timeout=5_000):
        w.run_button.click()
    assert w.status.text().startswith("error:")
