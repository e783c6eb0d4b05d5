"""File > Save Selected Layer on our layers writes our formats (physical units, score), not napari's builtin CSV/TIFF."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.io import read_points_csv  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]


def _save_dialog_default_writer(layers):
    """The writer of the save dialog's first (preselected) filter, as napari's QtViewer builds it."""
    from napari.plugins import _npe2

    _, writers = _npe2.file_extensions_string_for_layers(layers)
    return writers[0].command


def test_saving_detected_points_and_labels_from_napari_keeps_units_and_scores(make_napari_viewer, qtbot, tmp_path):
    from ivote.napari._detect_widget import DetectWidget
    from ivote.napari._image_io import read_image_layers

    sample = synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=5)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=(0.5, 0.5), translate=(10.0, -4.0), units=("um", "um"))
    widget = DetectWidget(viewer)
    widget.live.value = False
    widget.radius.value = 4.0
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    qtbot.wait(20)
    points = viewer.layers["nuclei: cells"]
    assert len(points.data) > 5

    viewer.layers.selection = {points}
    assert _save_dialog_default_writer([points]) == "napari-ivote.write_points"
    [path] = viewer.layers.save(str(tmp_path / "saved.csv"), selected=True)
    table = read_points_csv(path)  # napari's own CSV ('index,axis-0,axis-1') would have no scale or translate
    np.testing.assert_allclose(table.points, points.data)
    np.testing.assert_allclose(table.scores, points.features["score"])
    assert table.spacing == (0.5, 0.5) and table.translate == (10.0, -4.0) and table.units == "um"
    rows = [line.strip().split(",") for line in open(path) if not line.startswith("#")]
    assert rows[0] == ["y", "x", "score", "y_um", "x_um"]
    world = np.array(rows[1:], dtype=float)[:, 3:]
    np.testing.assert_allclose(world, points.data * 0.5 + (10.0, -4.0))

    labels = viewer.add_labels(sample.labels, name="labels: cells", scale=(0.5, 0.5), units=("um", "um"))
    viewer.layers.selection = {labels}
    assert _save_dialog_default_writer([labels]) == "napari-ivote.write_labels"
    [path] = viewer.layers.save(str(tmp_path / "labels.tif"), selected=True)
    [(data, attributes, kind)] = read_image_layers(path)
    assert kind == "labels" and tuple(attributes["scale"]) == (0.5, 0.5)  # napari's TIFF has no pixel size
    np.testing.assert_array_equal(np.asarray(data), sample.labels)


def test_other_points_layers_still_get_napari_csv_with_all_their_features(make_napari_viewer, tmp_path):
    from ivote.napari._writer_order import prefer_ivote_writers

    viewer = make_napari_viewer()
    assert prefer_ivote_writers()
    layer = viewer.add_points(np.array([[1.0, 2.0], [3.0, 4.0]]), name="mine", features={"kind": [7, 8]})
    viewer.layers.selection = {layer}
    [path] = viewer.layers.save(str(tmp_path / "mine.csv"), selected=True)
    lines = open(path).read().splitlines()
    assert lines[0].replace('"', "") == "index,axis-0,axis-1,kind"
    assert [float(v) for v in lines[2].split(",")] == [1, 3, 4, 8]
