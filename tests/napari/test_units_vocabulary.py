"""One vocabulary for a layer with a scale but no unit: its world coordinates are 'world' in the points CSV
(``z_world``, ``# units: world``), in the measurements (``centroid_z_world``) and in the dock's labels
('world units'), never 'pixel' (the CSV once named 30 x 1.75 = 52.5 ``z_px``)."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.io import read_points_csv  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
SCALE, TRANSLATE = (1.75, 0.5, 0.5), (3.0, -2.0, 10.0)


def test_world_values_are_called_world_in_csv_features_and_labels(make_napari_viewer, detect_widget, qtbot, tmp_path):
    from ivote.napari._components_widget import LabelCountWidget

    sample = synthetic_nuclei((12, 48, 48), spacing=SCALE, radius=4.0, noise=0.05, seed=3)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=SCALE, translate=TRANSLATE)  # no unit
    viewer.add_labels(sample.labels, name="labels: cells", scale=SCALE, translate=TRANSLATE)
    detect = detect_widget(viewer)
    assert detect.radius.label == "radius (world units)" and detect.blur.label == "blur (world units)"
    detect.radius.value = 4.0
    with qtbot.waitSignal(detect.finished_result, timeout=60_000):
        detect.run()
    qtbot.waitUntil(lambda: not detect.busy, timeout=60_000)
    written = detect.export(str(tmp_path / "points.csv")) or tmp_path / "points.csv"
    lines = (tmp_path / "points.csv").read_text().splitlines()
    header = next(line for line in lines if not line.startswith("#")).split(",")
    assert header == ["z", "y", "x", "score", "z_world", "y_world", "x_world"], header
    assert "# units: world" in lines and not any("pixel" in line or "_px" in line for line in lines)
    table = read_points_csv(written)
    points = np.asarray(viewer.layers["nuclei: cells"].data)
    world = np.array([[float(v) for v in line.split(",")[4:]] for line in lines[lines.index(",".join(header)) + 1:]])
    np.testing.assert_allclose(world, points * SCALE + TRANSLATE)
    np.testing.assert_allclose(table.points, points)

    count = LabelCountWidget(viewer)
    viewer.window.add_dock_widget(count, name="Label and count")
    count.layer.value = viewer.layers["labels: cells"]
    count.run()
    qtbot.waitUntil(lambda: not count.busy, timeout=60_000)
    qtbot.wait(20)
    features = viewer.layers["labels: cells"].features
    assert {"centroid_z_world", "centroid_y_world", "centroid_x_world"} <= set(features.columns)
    assert not any(column.endswith(("_um", "_um2", "_um3")) for column in features.columns)
    first = features.iloc[0]
    centre = np.array([first["centroid_z_px"], first["centroid_y_px"], first["centroid_x_px"]])
    np.testing.assert_allclose([first["centroid_z_world"], first["centroid_y_world"], first["centroid_x_world"]],
                               centre * SCALE + TRANSLATE)
    assert count.distance.label == "join closer than (world units)"
