"""The Detect widget's "Learn from my corrections" panel in a real viewer (pytest-qt, Xvfb)."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")
pytest.importorskip("sklearn")

from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def sample():
    return synthetic_nuclei((128, 128), radius=6.0, overlap=0.1, noise=0.05, seed=21)


def _run(viewer, widget, qtbot, sample):
    widget.radius.value = 9.0
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy and widget.points_layer() is not None, timeout=TIMEOUT_MS)
    return widget.points_layer()


def _correct(layer, sample, tolerance=3.0):
    """Delete the false points and add the missed nuclei, as a user does with the Points tools."""
    points = np.asarray(layer.data)
    match = match_points(points, sample.centers, tolerance=tolerance)
    keep = np.zeros(len(points), bool)
    keep[match.pairs[:, 0]] = True
    missed = np.ones(len(sample.centers), bool)
    missed[match.pairs[:, 1]] = False
    layer.selected_data = set(np.flatnonzero(~keep).tolist())
    layer.remove_selected()
    layer.add(sample.centers[missed])
    return int((~keep).sum()), int(missed.sum())


def test_learn_from_corrections_updates_the_layer(make_napari_viewer, qtbot, detect_widget, sample):
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells")
    widget = detect_widget(viewer)
    layer = _run(viewer, widget, qtbot, sample)
    default = np.asarray(layer.data).copy()
    deleted, added = _correct(layer, sample)
    assert deleted + added > 0
    widget.learn_panel.learn()
    qtbot.waitUntil(lambda: not widget.busy and widget.learn_panel.detector is not None, timeout=TIMEOUT_MS)
    assert "learned from" in widget.status.value and "added" in widget.status.value
    relearned = widget.points_layer()
    assert relearned is not None and len(relearned.data) > 0
    np.testing.assert_array_equal(relearned.data, widget._run.result.detections.points)
    assert np.all(relearned.features["score"] <= 1)  # scores are probabilities now
    before = match_points(default, sample.centers, tolerance=3.0).f1
    after = match_points(np.asarray(relearned.data), sample.centers, tolerance=3.0).f1
    assert after >= before - 0.02
    assert widget.learn_panel.save_button.enabled and "model from 1 image" in widget.learn_panel.description
    # Run with the model gives the re-scored points
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    np.testing.assert_array_equal(widget.points_layer().data, relearned.data)


def test_saved_and_reloaded_model_gives_identical_points(make_napari_viewer, qtbot, detect_widget, sample, tmp_path):
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells")
    widget = detect_widget(viewer)
    layer = _run(viewer, widget, qtbot, sample)
    _correct(layer, sample)
    widget.learn_panel.learn()
    qtbot.waitUntil(lambda: not widget.busy and widget.learn_panel.detector is not None, timeout=TIMEOUT_MS)
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    learned_points = np.asarray(widget.points_layer().data).copy()
    path = tmp_path / "model.json"
    widget.learn_panel.save(str(path))
    assert path.exists() and "model saved" in widget.status.value
    widget.learn_panel.set_detector(None)
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    assert widget.learn_panel.detector is None
    widget.learn_panel.load(str(path))
    assert widget.learn_panel.detector is not None
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    np.testing.assert_array_equal(widget.points_layer().data, learned_points)


def test_learning_on_an_empty_or_all_deleted_layer_says_so(make_napari_viewer, qtbot, detect_widget, sample):
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells")
    widget = detect_widget(viewer)
    widget.learn_panel.learn()  # no Run yet
    assert "Run the detection first" in widget.status.value
    layer = _run(viewer, widget, qtbot, sample)
    layer.selected_data = set(range(len(layer.data)))
    layer.remove_selected()
    widget.learn_panel.learn()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    assert "empty" in widget.status.value
    assert widget.learn_panel.detector is None
    # points far from every candidate: nothing to learn from, said in the status line
    layer.add(np.array([[1.0, 1.0]]))
    widget.learn_panel.learn()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    assert "no corrected point lies on a candidate" in widget.status.value
    assert widget.learn_panel.detector is None


def test_loading_a_bad_model_file_says_so(make_napari_viewer, detect_widget, tmp_path):
    viewer = make_napari_viewer()
    widget = detect_widget(viewer)
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    widget.learn_panel.load(str(bad))
    assert "not a learned detector" in widget.status.value
    assert widget.learn_panel.detector is None


def test_run_on_folder_uses_the_model(tmp_path, sample):
    """The folder run with the panel's model writes the model's points (the settings carry it)."""
    import tifffile

    from ivote import iterative_voting
    from ivote.io import read_points_csv
    from ivote.learn import learn_detector
    from ivote.napari._batch import detect_folder

    other = synthetic_nuclei((128, 128), radius=6.0, overlap=0.1, noise=0.05, seed=22)
    detector = learn_detector(sample.image, sample.centers, radius=9.0, n_trees=25, backend="numpy")
    tifffile.imwrite(tmp_path / "other.tif", other.image)
    settings = {"radius": 9.0, "polarity": "bright", "blur": None, "threshold": "auto", "spacing": None,
                "unit": None, "detector": detector}
    rows = detect_folder([tmp_path / "other.tif"], tmp_path / "out", settings)
    assert rows[0]["error"] == ""
    written = read_points_csv(tmp_path / "out" / "other_nuclei.csv").points
    expected = iterative_voting(other.image, radius=9.0, detector=detector, backend="numpy").points
    np.testing.assert_allclose(np.sort(written, axis=0), np.sort(expected, axis=0))
