"""Nuclei per annotated region: holes, nesting, merging by name and the per-mm² density, against
counts made by hand from the points' positions."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("shapely")

from ivote.export import read_regions_geojson  # noqa: E402
from ivote.measure import count_in_regions, region_of_points  # noqa: E402


def _square(x0, y0, x1, y1):
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]


@pytest.fixture
def annotations(tmp_path):
    """QuPath coordinates: 'Tissue' 0..100 with a hole 40..60, 'Tumor' 10..30 in two pieces merged by name,
    and a detection that is not a region."""
    features = [
        {"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [_square(0, 0, 100, 100),
                                                                          _square(40, 40, 60, 60)]},
         "properties": {"objectType": "annotation", "classification": {"name": "Tissue", "color": [0, 200, 0]}}},
        {"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [_square(10, 10, 30, 30)]},
         "properties": {"objectType": "annotation", "classification": {"name": "Tumor"}}},
        {"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [_square(70, 70, 80, 80)]},
         "properties": {"objectType": "annotation", "name": "Tumor"}},
        {"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [_square(0, 0, 5, 5)]},
         "properties": {"objectType": "detection"}},
    ]
    path = tmp_path / "annotations.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    return path


def test_counts_follow_holes_nesting_and_names(annotations):
    rng = np.random.default_rng(3)
    points = rng.uniform(-10, 110, (2000, 2))  # (y, x) pixel centres; QuPath's position is +0.5
    regions = read_regions_geojson(annotations)
    assert [r.name for r in regions] == ["Tissue", "Tumor"]
    table = count_in_regions(points, regions, spacing=(0.5, 0.5))
    qy, qx = points[:, 0] + 0.5, points[:, 1] + 0.5

    def inside(x0, y0, x1, y1):
        return (qx >= x0) & (qx <= x1) & (qy >= y0) & (qy <= y1)

    tissue = inside(0, 0, 100, 100) & ~((qx > 40) & (qx < 60) & (qy > 40) & (qy < 60))
    tumour = inside(10, 10, 30, 30) | inside(70, 70, 80, 80)
    assert table["nuclei"].tolist() == [int(tissue.sum()), int(tumour.sum())]
    area_mm2 = np.array([100 * 100 - 20 * 20, 20 * 20 + 10 * 10]) * 0.25 / 1e6
    np.testing.assert_allclose(table["area_mm2"], area_mm2)
    np.testing.assert_allclose(table["nuclei_per_mm2"], table["nuclei"] / area_mm2)
    names = region_of_points(points, annotations)
    assert (names[tumour] == "Tumor").all()  # the smaller region wins where they nest
    assert (names[tissue & ~tumour] == "Tissue").all() and (names[~tissue & ~tumour] == "").all()


def test_counts_need_a_pixel_size(annotations):
    with pytest.raises(ValueError, match="pixel size"):
        count_in_regions([[1.0, 1.0]], annotations, spacing=None)
    with pytest.raises(ValueError, match="regions are 2D"):
        count_in_regions([[1.0, 1.0, 1.0]], annotations, spacing=(1.0, 1.0))
