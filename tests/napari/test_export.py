"""Export points / Export outlines from the docks to QuPath GeoJSON and Fiji ROI sets, and QuPath points
opened in napari; the files are read back with plain json and roifile."""

from __future__ import annotations

import json

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")
roifile = pytest.importorskip("roifile")

from ivote.data import synthetic_nuclei  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]


@pytest.fixture
def sample():
    return synthetic_nuclei((80, 96), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, seed=7)


def _points_layer(viewer, sample):
    viewer.add_image(sample.image, name="cells", scale=(0.5, 0.5), units=("um", "um"))
    scores = np.linspace(0.1, 1.0, len(sample.centers))
    return viewer.add_points(sample.centers, name="nuclei: cells", scale=(0.5, 0.5), features={"score": scores},
                             metadata={"ivote_image": "cells"})


def test_export_points_to_geojson_and_roi_zip(make_napari_viewer, tmp_path, sample):
    from ivote.napari._detect_layers import export_points

    viewer = make_napari_viewer()
    layer = _points_layer(viewer, sample)
    written = export_points(layer, str(tmp_path / "nuclei.geojson"))
    features = json.loads(open(written).read())["features"]
    xy = np.array([f["geometry"]["coordinates"] for f in features])
    np.testing.assert_allclose(xy, sample.centers[:, ::-1] + 0.5, atol=1e-12)  # image pixels, QuPath's origin
    np.testing.assert_allclose([f["properties"]["measurements"]["score"] for f in features],
                               layer.features["score"])
    rois = roifile.roiread(export_points(layer, str(tmp_path / "nuclei.zip")))
    np.testing.assert_allclose(np.concatenate([r.coordinates() for r in rois]), sample.centers[:, ::-1] + 0.5,
                               atol=1e-4)


def test_detect_dock_export_offers_the_formats(make_napari_viewer, monkeypatch, tmp_path, sample):
    """The Detect dock's Export points… writes the format whose filter was picked in the dialog."""
    from qtpy.QtWidgets import QFileDialog

    from ivote.napari import _export

    viewer = make_napari_viewer()
    layer = _points_layer(viewer, sample)
    offered = []

    def dialog(parent, title, suggested, filters):
        offered.append(filters)
        return str(tmp_path / "picked"), _export.FILTERS["geojson"]  # a name without suffix: the filter's

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(dialog))
    written = _export.export_points_layer(layer)
    assert written == str(tmp_path / "picked.geojson")
    assert all(_export.FILTERS[f] in offered[0] for f in ("csv", "geojson", "roi-zip"))
    assert len(json.loads(open(written).read())["features"]) == len(sample.centers)


def test_segment_dock_export_outlines(make_napari_viewer, monkeypatch, qtbot, tmp_path, sample):
    from skimage.draw import polygon2mask

    from ivote.napari import _export
    from ivote.napari._segment_widget import SegmentWidget

    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=(0.5, 0.5), units=("um", "um"))
    widget = SegmentWidget(viewer)
    widget.export_button.native.click()  # no labels yet: says so, writes nothing
    assert "Nothing to export" in widget.status.value
    viewer.add_labels(sample.labels, name="labels: cells", scale=(0.5, 0.5), units=("um", "um"))
    out = tmp_path / "outlines.geojson"
    monkeypatch.setattr(_export, "ask_path", lambda *args, **kwargs: str(out))
    widget.export_button.native.click()
    assert str(out) in widget.status.value
    features = json.loads(out.read_text())["features"]
    assert len(features) == len(np.unique(sample.labels)) - 1
    for feature in features:
        measurements = feature["properties"]["measurements"]
        truth = sample.labels == measurements["label"]
        assert measurements["area_um2"] == pytest.approx(truth.sum() * 0.25)  # the layer's scale in um
        assert feature["geometry"]["type"] == "Polygon"
        ring = np.asarray(feature["geometry"]["coordinates"][0])
        mask = polygon2mask(truth.shape, ring[:, ::-1] - 0.5)
        assert (mask & truth).sum() / (mask | truth).sum() >= 0.95
    out = tmp_path / "RoiSet.zip"
    widget.export_button.native.click()
    assert len(roifile.roiread(out)) == len(features)
    monkeypatch.setattr(_export, "ask_path", lambda *args, **kwargs: str(tmp_path / "bad.txt"))
    widget.export_button.native.click()  # an unknown suffix: an error in the status line, no crash
    assert "export failed" in widget.status.value


def test_qupath_points_open_as_a_points_layer(make_napari_viewer, tmp_path):
    path = tmp_path / "qupath.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": [
        {"type": "Feature", "geometry": {"type": "Point", "coordinates": [20.5, 10.5]},
         "properties": {"objectType": "annotation", "measurements": {"score": 0.75}}},
        {"type": "Feature", "geometry": {"type": "Point", "coordinates": [4.5, 3.5]},
         "properties": {"objectType": "annotation"}}]}))
    viewer = make_napari_viewer()
    [layer] = viewer.open(str(path), plugin="napari-ivote")
    assert layer._type_string == "points"
    np.testing.assert_array_equal(layer.data, [[10.0, 20.0], [3.0, 4.0]])
