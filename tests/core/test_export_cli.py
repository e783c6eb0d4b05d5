"""``ivote export``, ``--format geojson`` on ``ivote detect`` and ``ivote segment``, GeoJSON seeds,
and ``ivote measure --regions``: checked against the files' contents read independently."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import tifffile

from ivote.cli import main
from ivote.data import synthetic_nuclei
from ivote.io import read_points_csv, write_points_csv
from ivote.metrics import match_labels

shapely = pytest.importorskip("shapely")
roifile = pytest.importorskip("roifile")


@pytest.fixture
def sample(tmp_path):
    sample = synthetic_nuclei((96, 96), radius=7, spacing=(0.5, 0.5), seed=12)
    tifffile.imwrite(tmp_path / "image.tif", sample.image)
    tifffile.imwrite(tmp_path / "labels.tif", sample.labels.astype(np.int32))
    write_points_csv(tmp_path / "points.csv", sample.centers, np.linspace(0.2, 1.0, len(sample.centers)),
                     spacing=sample.spacing)
    return tmp_path, sample


def _features(path):
    return json.loads(path.read_text())["features"]


def test_export_points_csv_to_geojson_roi_zip_and_back(sample, capsys):
    folder, truth = sample
    assert main(["export", str(folder / "points.csv"), "--out", str(folder / "p.geojson")]) == 0
    assert f"{len(truth.centers)} points" in capsys.readouterr().out
    features = _features(folder / "p.geojson")
    xy = np.array([f["geometry"]["coordinates"] for f in features])
    np.testing.assert_allclose(xy, truth.centers[:, ::-1] + 0.5, atol=1e-12)
    np.testing.assert_array_equal(read_points_csv(folder / "p.geojson").points, truth.centers)
    assert main(["export", str(folder / "points.csv"), "--to", "roi-zip", "--out", str(folder / "p.zip")]) == 0
    assert len(roifile.roiread(folder / "p.zip")) == len(truth.centers)
    # GeoJSON back to napari-ivote's CSV: the same points
    assert main(["export", str(folder / "p.geojson"), "--out", str(folder / "back.csv")]) == 0
    np.testing.assert_array_equal(read_points_csv(folder / "back.csv").points, truth.centers)


def test_export_labels_to_outlines_and_measurements(sample, capsys):
    folder, truth = sample
    n = len(np.unique(truth.labels)) - 1
    assert main(["export", str(folder / "labels.tif"), "--spacing", "0.5", "0.5",
                 "--out", str(folder / "o.geojson")]) == 0
    assert f"{n} nuclei" in capsys.readouterr().out
    features = _features(folder / "o.geojson")
    assert len(features) == n and {f["geometry"]["type"] for f in features} <= {"Polygon", "MultiPolygon"}
    assert all("area_um2" in f["properties"]["measurements"] for f in features)
    assert main(["export", str(folder / "labels.tif"), "--out", str(folder / "o.zip")]) == 0
    assert len(roifile.roiread(folder / "o.zip")) == n
    assert main(["export", str(folder / "labels.tif"), "--out", str(folder / "o.csv")]) == 0
    rows = list(csv.DictReader(open(folder / "o.csv")))
    assert len(rows) == n and "area_px2" in rows[0]


def test_export_bad_input_is_one_line(sample, capsys):
    folder, _ = sample
    assert main(["export", str(folder / "labels.tif"), "--out", str(folder / "o.txt")]) == 2
    assert "cannot tell the export format" in capsys.readouterr().err
    assert main(["export", str(folder / "image.tif"), "--out", str(folder / "o.geojson")]) == 2
    assert "not labels" in capsys.readouterr().err
    assert main(["export", str(folder / "missing.csv"), "--out", str(folder / "o.geojson")]) == 2
    assert "not found" in capsys.readouterr().err


def test_segment_format_geojson_seeded_by_geojson(sample):
    folder, truth = sample
    assert main(["export", str(folder / "points.csv"), "--out", str(folder / "seeds.geojson")]) == 0
    out = folder / "nuclei.geojson"
    assert main(["segment", str(folder / "image.tif"), "--points", str(folder / "seeds.geojson"), "--radius", "10",
                 "--spacing", "0.5", "0.5", "--iterations", "150", "--backend", "numpy", "--out", str(out)]) == 0
    from skimage.draw import polygon2mask

    labels = np.zeros(truth.labels.shape, dtype=np.int32)
    for feature in _features(out):
        geometry = shapely.geometry.shape(feature["geometry"])
        for polygon in getattr(geometry, "geoms", [geometry]):
            ring = np.asarray(polygon.exterior.coords)
            labels[polygon2mask(labels.shape, ring[:, ::-1] - 0.5)] = feature["properties"]["measurements"]["label"]
    assert match_labels(labels, truth.labels).f1 >= 0.85


def test_detect_format_geojson(sample):
    """The same detections as the CSV, as QuPath point detections with their scores."""
    folder, truth = sample
    out, table = folder / "detections.geojson", folder / "detections.csv"
    for path in (out, table):
        assert main(["detect", str(folder / "image.tif"), "--radius", "10", "--spacing", "0.5", "0.5",
                     "--out", str(path), "-q"]) == 0
    features = _features(out)
    assert all(f["geometry"]["type"] == "Point" and f["properties"]["objectType"] == "detection" for f in features)
    found, expected = read_points_csv(out), read_points_csv(table)
    np.testing.assert_array_equal(found.points, expected.points)
    np.testing.assert_array_equal(found.scores, expected.scores)
    distance = np.linalg.norm(found.points[:, None] - truth.centers[None], axis=-1).min(axis=0)
    assert (distance < 7).mean() >= 0.8  # within half a radius (14 px)


def _annotations(path, regions):
    features = [{"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [ring]},
                 "properties": {"objectType": "annotation", "classification": {"name": name}}}
                for name, ring in regions]
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    return path


def test_measure_regions_counts_per_region_and_mm2(sample, capsys):
    folder, truth = sample
    # QuPath coordinates: the left half of the image (columns 0..47) and the right half
    left = [[0, 0], [48, 0], [48, 96], [0, 96], [0, 0]]
    right = [[48, 0], [96, 0], [96, 96], [48, 96], [48, 0]]
    regions = _annotations(folder / "regions.geojson", [("Tumor", left), ("Stroma", right)])
    out = folder / "table.csv"
    assert main(["measure", str(folder / "image.tif"), "--labels", str(folder / "labels.tif"), "--spacing", "0.5",
                 "0.5", "--regions", str(regions), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Tumor:" in printed and "Stroma:" in printed
    rows = list(csv.DictReader(open(folder / "table_regions.csv")))
    from skimage.measure import regionprops

    centroid_x = np.array([r.centroid[1] for r in regionprops(truth.labels)])
    expected = {"Tumor": int((centroid_x + 0.5 <= 48).sum()), "Stroma": int((centroid_x + 0.5 >= 48).sum())}
    area_mm2 = 48 * 96 * 0.25 / 1e6
    for row in rows:
        assert int(row["nuclei"]) == expected[row["region"]]
        assert float(row["area_mm2"]) == pytest.approx(area_mm2)
        assert float(row["nuclei_per_mm2"]) == pytest.approx(expected[row["region"]] / area_mm2)
    per_nucleus = list(csv.DictReader(open(out)))
    assert {r["region"] for r in per_nucleus} <= {"Tumor", "Stroma"}


def test_measure_regions_needs_the_pixel_size(sample, capsys):
    folder, _ = sample
    regions = _annotations(folder / "regions.geojson", [("Tumor", [[0, 0], [10, 0], [10, 10], [0, 0]])])
    code = main(["measure", str(folder / "image.tif"), "--labels", str(folder / "labels.tif"),
                 "--regions", str(regions), "--out", str(folder / "t.csv")])
    assert code == 2 and "pixel size" in capsys.readouterr().err
