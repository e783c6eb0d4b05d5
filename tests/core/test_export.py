"""QuPath GeoJSON and Fiji ROI exports, checked with independent readers: plain ``json``,
shapely, ``roifile``, and rasterisation back to the labels (scikit-image's polygon2mask)."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from ivote.data import synthetic_nuclei
from ivote.export import (export_labels, export_points, label_outlines, read_points_geojson, write_outlines_geojson,
                          write_outlines_roi_zip, write_points_geojson, write_points_roi_zip)
from ivote.io import read_points_csv, write_points_csv

shapely = pytest.importorskip("shapely")
roifile = pytest.importorskip("roifile")
from shapely.geometry import shape  # noqa: E402


@pytest.fixture(scope="module")
def sample_2d():
    return synthetic_nuclei((160, 192), radius=8.0, spacing=(0.5, 0.5), seed=4)


def _qupath_features(path):
    data = json.loads(open(path, encoding="utf-8").read())  # plain floats: what QuPath's reader sees
    assert data["type"] == "FeatureCollection"
    for feature in data["features"]:
        assert feature["type"] == "Feature"
        assert feature["properties"]["objectType"] == "detection"
        assert isinstance(feature["properties"].get("measurements", {}), dict)
        assert all(isinstance(v, (int, float)) for v in feature["properties"].get("measurements", {}).values())
    return data["features"]


def _rasterise_xy(rings_xy, shape_yx):
    """Even-odd fill of rings in QuPath/ImageJ coordinates (pixel corners on integers) at pixel centres."""
    from skimage.draw import polygon2mask

    mask = np.zeros(shape_yx, dtype=bool)
    for ring in rings_xy:
        ring = np.asarray(ring, dtype=np.float64)
        mask ^= polygon2mask(shape_yx, np.column_stack([ring[:, 1] - 0.5, ring[:, 0] - 0.5]))
    return mask


def _iou(a, b):
    return np.logical_and(a, b).sum() / np.logical_or(a, b).sum()


def _rings(geometry):
    polygons = geometry.geoms if geometry.geom_type == "MultiPolygon" else [geometry]
    return [np.asarray(r.coords) for p in polygons for r in (p.exterior, *p.interiors)]


# ---------- points ----------

def test_points_geojson_follows_qupath_conventions(tmp_path, sample_2d):
    points = sample_2d.centers + np.random.default_rng(0).uniform(-0.4, 0.4, sample_2d.centers.shape)
    scores = np.linspace(0.1, 1.0, len(points))
    scores[3] = np.nan  # unknown: no measurement
    path = write_points_geojson(tmp_path / "nuclei.geojson", points, scores)
    features = _qupath_features(path)
    assert len(features) == len(points)
    for feature, point, score in zip(features, points, scores):
        geometry = shape(feature["geometry"])
        assert geometry.geom_type == "Point"
        # x = column, y = row, the pixel's centre half a pixel from its top-left corner
        assert geometry.x == pytest.approx(point[1] + 0.5, abs=1e-12)
        assert geometry.y == pytest.approx(point[0] + 0.5, abs=1e-12)
        measurements = feature["properties"].get("measurements", {})
        assert measurements.get("score", np.nan) == pytest.approx(score, nan_ok=True)


def test_points_geojson_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(1)
    points = np.concatenate([rng.uniform(0, 5000, (300, 2)), [[1.9999999999999998, 0.49999999999999994],
                                                               [1e-20, 123456.78901234567], [-3.25, 0.0]]])
    scores = rng.random(len(points))
    table = read_points_geojson(write_points_geojson(tmp_path / "p.geojson", points, scores))
    np.testing.assert_array_equal(table.points, points)
    np.testing.assert_array_equal(table.scores, scores)
    # the same through the points reader that 'ivote segment --points' and 'ivote measure --points' use
    np.testing.assert_array_equal(read_points_csv(tmp_path / "p.geojson").points, points)


def test_points_geojson_3d_and_frames(tmp_path):
    points = np.array([[0.0, 4.25, 5.5], [2.6, 10.0, 3.0], [7.0, 1.0, 1.0]])
    path = write_points_geojson(tmp_path / "p.geojson", points, times=[0, 1, 1])
    planes = [f["geometry"]["plane"] for f in _qupath_features(path)]
    assert [p["z"] for p in planes] == [0, 3, 7] and [p["t"] for p in planes] == [0, 1, 1]
    assert all(p["c"] == -1 for p in planes)
    table = read_points_geojson(path)
    np.testing.assert_array_equal(table.points, points)
    np.testing.assert_array_equal(table.times, [0, 1, 1])


def test_qupath_written_points_are_read(tmp_path):
    """QuPath's own export: 2-decimal coordinates, a list of Point/MultiPoint features, measurements as a list (0.3)."""
    text = json.dumps([
        {"type": "Feature", "geometry": {"type": "Point", "coordinates": [20.5, 10.5]},
         "properties": {"objectType": "annotation", "measurements": [{"name": "score", "value": 0.5}]}},
        {"type": "Feature", "geometry": {"type": "MultiPoint", "coordinates": [[1.5, 2.5], [3.0, 4.0]]},
         "properties": {"objectType": "annotation"}},
        {"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]},
         "properties": {"objectType": "annotation"}},
    ])
    (tmp_path / "qupath.geojson").write_text(text)
    table = read_points_geojson(tmp_path / "qupath.geojson")
    np.testing.assert_array_equal(table.points, [[10.0, 20.0], [2.0, 1.0], [3.5, 2.5]])
    np.testing.assert_array_equal(table.scores, [0.5, np.nan, np.nan])


def test_points_geojson_errors_name_the_file(tmp_path):
    (tmp_path / "bad.geojson").write_text("{not json")
    with pytest.raises(OSError, match="bad.geojson, line 1"):
        read_points_geojson(tmp_path / "bad.geojson")
    (tmp_path / "none.geojson").write_text('{"type": "FeatureCollection", "features": []}')
    with pytest.raises(ValueError, match="no Point features"):
        read_points_geojson(tmp_path / "none.geojson")


def test_points_roi_zip_read_by_roifile(tmp_path):
    points = np.array([[10.25, 20.75], [3.0, 4.0], [100.5, 0.0]])
    path = write_points_roi_zip(tmp_path / "p.zip", points, [0.5, np.nan, 2.0])
    rois = roifile.roiread(path)
    assert [r.roitype for r in rois] == [roifile.ROI_TYPE.POINT] * 3
    xy = np.concatenate([r.coordinates() for r in rois])
    np.testing.assert_allclose(xy, points[:, ::-1] + 0.5, atol=1e-5)  # float32, ImageJ's precision
    assert rois[0].name.endswith("score 0.5")


# ---------- outlines ----------

def test_outlines_geojson_rasterise_back_to_the_labels(tmp_path, sample_2d):
    labels = sample_2d.labels
    path = write_outlines_geojson(tmp_path / "nuclei.geojson", labels, spacing=sample_2d.spacing)
    features = _qupath_features(path)
    ids = [int(l) for l in np.unique(labels) if l]
    assert sorted(f["properties"]["measurements"]["label"] for f in features) == ids
    for feature in features:
        geometry = shape(feature["geometry"])
        assert geometry.geom_type in ("Polygon", "MultiPolygon") and geometry.is_valid
        for polygon in getattr(geometry, "geoms", [geometry]):
            assert polygon.exterior.is_ccw and not any(r.is_ccw for r in polygon.interiors)  # RFC 7946
        measurements = feature["properties"]["measurements"]
        label = measurements["label"]
        truth = labels == label
        assert measurements["pixels"] == truth.sum()
        assert measurements["area_um2"] == pytest.approx(truth.sum() * 0.25)
        assert _iou(_rasterise_xy(_rings(geometry), labels.shape), truth) >= 0.95


def test_outlines_keep_holes_and_pieces(tmp_path):
    labels = np.zeros((24, 24), dtype=np.int32)
    labels[2:20, 2:20] = 1
    labels[6:16, 6:16] = 0  # a hole ...
    labels[10:12, 10:12] = 1  # ... with an island of the same label in it
    labels[20:23, 20:23] = 2
    features = _qupath_features(write_outlines_geojson(tmp_path / "o.geojson", labels, measurements=False))
    first = shape(next(f for f in features if f["properties"]["measurements"]["label"] == 1)["geometry"])
    assert first.geom_type == "MultiPolygon" and len(first.geoms) == 2
    assert sorted(len(p.interiors) for p in first.geoms) == [0, 1]
    np.testing.assert_array_equal(_rasterise_xy(_rings(first), labels.shape), labels == 1)
    rois = {r.name: r for r in roifile.roiread(write_outlines_roi_zip(tmp_path / "o.zip", labels))}
    assert rois["1"].composite and not rois["2"].composite
    np.testing.assert_array_equal(_rasterise_xy(rois["1"].coordinates(multi=True), labels.shape), labels == 1)


def test_outlines_roi_zip_rasterise_back_to_the_labels(tmp_path, sample_2d):
    labels = sample_2d.labels
    path = write_outlines_roi_zip(tmp_path / "RoiSet.zip", labels)
    assert all(name.endswith(".roi") for name in zipfile.ZipFile(path).namelist())
    rois = roifile.roiread(path)
    assert sorted(int(r.name) for r in rois) == [int(l) for l in np.unique(labels) if l]
    for roi in rois:
        assert roi.roitype == roifile.ROI_TYPE.POLYGON or roi.composite
        rings = roi.coordinates(multi=True) if roi.composite else [roi.coordinates()]
        assert _iou(_rasterise_xy(rings, labels.shape), labels == int(roi.name)) >= 0.95


def test_3d_labels_give_one_outline_per_plane(tmp_path):
    sample = synthetic_nuclei((10, 64, 64), radius=6.0, spacing=(2.0, 0.5, 0.5), seed=2)
    labels = sample.labels
    outlines = label_outlines(labels)
    expected = {(z, int(l)) for z in range(labels.shape[0]) for l in np.unique(labels[z]) if l}
    assert {(o.plane, o.label) for o in outlines} == expected
    features = _qupath_features(write_outlines_geojson(tmp_path / "o.geojson", labels, spacing=sample.spacing))
    for feature in features:
        z, label = feature["geometry"]["plane"]["z"], feature["properties"]["measurements"]["label"]
        assert _iou(_rasterise_xy(_rings(shape(feature["geometry"])), labels.shape[1:]), labels[z] == label) >= 0.95
    rois = roifile.roiread(write_outlines_roi_zip(tmp_path / "o.zip", labels))
    for roi in rois:
        label, z = (int(v) for v in roi.name.split("-z"))
        assert roi.position == z + 1  # ImageJ's stack position, 1-based
        rings = roi.coordinates(multi=True) if roi.composite else [roi.coordinates()]
        assert _iou(_rasterise_xy(rings, labels.shape[1:]), labels[z] == label) >= 0.95


def test_labels_csv_is_the_measurement_table(tmp_path, sample_2d):
    import csv

    path = export_labels(tmp_path / "nuclei.csv", sample_2d.labels, spacing=sample_2d.spacing)
    rows = list(csv.DictReader(open(path)))
    assert [int(r["label"]) for r in rows] == [int(l) for l in np.unique(sample_2d.labels) if l]
    for row in rows:
        assert int(row["pixels"]) == (sample_2d.labels == int(row["label"])).sum()


def test_export_points_picks_the_format_by_suffix(tmp_path, sample_2d):
    points = sample_2d.centers
    export_points(tmp_path / "p.csv", points, spacing=(0.5, 0.5))
    export_points(tmp_path / "p.geojson", points)
    np.testing.assert_array_equal(read_points_csv(tmp_path / "p.csv").points, points)
    np.testing.assert_array_equal(read_points_csv(tmp_path / "p.geojson").points, points)
    with pytest.raises(ValueError, match="cannot tell the export format"):
        export_points(tmp_path / "p.txt", points)
    with pytest.raises(ValueError, match="must end in .zip"):
        export_points(tmp_path / "p.csv", points, to="roi-zip")


def test_failed_export_leaves_the_old_file(tmp_path):
    path = tmp_path / "o.zip"
    path.write_bytes(b"old")
    with pytest.raises(ValueError, match="no nuclei"):
        write_outlines_roi_zip(path, np.zeros((8, 8), dtype=np.int32))
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["o.zip"]


def test_outlines_at_the_border_and_large_ids(tmp_path):
    labels = np.zeros((12, 10), dtype=np.int64)
    labels[:3, :3] = 2**40  # touches two image edges; an id far above the pixel count
    labels[5:, 4:] = 7  # touches two others
    labels[11, 0] = 3  # one pixel in a corner
    outlines = {o.label: o for o in label_outlines(labels)}
    assert sorted(outlines) == [3, 7, 2**40]
    features = _qupath_features(write_outlines_geojson(tmp_path / "o.geojson", labels, measurements=False))
    for feature in features:
        label = feature["properties"]["measurements"]["label"]
        mask = _rasterise_xy(_rings(shape(feature["geometry"])), labels.shape)
        np.testing.assert_array_equal(mask, labels == label)


def test_bad_labels_are_refused():
    with pytest.raises(ValueError, match="integer label image"):
        label_outlines(np.zeros((4, 4), dtype=float))
    with pytest.raises(ValueError, match="2D or 3D"):
        label_outlines(np.zeros((2, 2, 2, 2), dtype=int))


def test_napari_points_csv_exports(tmp_path):
    (tmp_path / "napari.csv").write_text("index,axis-0,axis-1,score\n0,10.0,20.0,0.5\n1,3.0,4.0,0.25\n")
    with pytest.warns(UserWarning, match="napari's points CSV"):
        table = read_points_csv(tmp_path / "napari.csv")
    write_points_geojson(tmp_path / "n.geojson", table.points, table.scores)
    np.testing.assert_array_equal(read_points_geojson(tmp_path / "n.geojson").points, [[10.0, 20.0], [3.0, 4.0]])
    # the same table written by napari-ivote reads back to the same points
    write_points_csv(tmp_path / "ours.csv", table.points, table.scores)
    np.testing.assert_array_equal(read_points_csv(tmp_path / "ours.csv").points, table.points)


def test_banded_export_equals_the_in_memory_one(tmp_path, sample_2d):
    """A lazy 2D label image (Dask) outlined and measured band by band of rows gives the same file."""
    import dask.array as da

    from ivote.export._bands import label_batches

    labels = sample_2d.labels.astype(np.int32)
    whole = write_outlines_geojson(tmp_path / "whole.geojson", labels, spacing=(0.5, 0.5), translate=(3.0, -1.0))
    batches = list(label_batches(da.from_array(labels, chunks=(32, 64)), spacing=(0.5, 0.5), translate=(3.0, -1.0),
                                 band_rows=24, margin=40))
    assert len(batches) > 3  # several bands did hold nuclei

    def by_label(path):
        return {f["properties"]["measurements"]["label"]: f for f in json.loads(open(path).read())["features"]}

    from ivote.export._geojson import write_outline_batches_geojson

    banded = write_outline_batches_geojson(tmp_path / "banded.geojson", batches)
    expected, found = by_label(whole), by_label(banded)
    assert found.keys() == expected.keys()
    for label, feature in expected.items():
        assert found[label]["geometry"] == feature["geometry"]
        for name, value in feature["properties"]["measurements"].items():
            assert found[label]["properties"]["measurements"][name] == pytest.approx(value, rel=1e-12), name
    lazy = export_labels(tmp_path / "lazy.zip", da.from_array(labels, chunks=64))
    assert len(roifile.roiread(lazy)) == len(expected)
    with pytest.raises(ValueError, match="taller than the margin"):
        list(label_batches(da.from_array(labels), band_rows=8, margin=4))
