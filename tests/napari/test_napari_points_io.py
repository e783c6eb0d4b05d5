"""Points CSV reader and writer contributions (no viewer needed)."""

from __future__ import annotations

import numpy as np
import pytest

from ivote.napari._io import get_reader, write_points


@pytest.fixture
def points_3d():
    rng = np.random.default_rng(0)
    points = rng.uniform(0, 50, size=(25, 3)) / 3.0  # floats whose decimals do not end
    scores = rng.lognormal(size=25)
    attributes = {"scale": (2.0, 0.325, 0.325), "translate": (-4.0, 10.1, 0.7),
                  "features": {"score": scores}, "units": ("micrometer",) * 3, "ndim": 3}
    return points, scores, attributes


def test_round_trip_restores_points_scores_scale_translate_exactly(points_3d, tmp_path):
    points, scores, attributes = points_3d
    [path] = write_points(str(tmp_path / "nuclei.csv"), points, attributes)
    text = open(path).read()
    assert "# scale: 2.0,0.325,0.325" in text and "# units: um" in text
    assert "z,y,x,score,z_um,y_um,x_um" in text
    reader = get_reader(path)
    assert reader is not None
    [(data, read_attributes, kind)] = reader(path)
    assert kind == "points"
    np.testing.assert_array_equal(data, points)
    np.testing.assert_array_equal(read_attributes["features"]["score"], scores)
    assert read_attributes["scale"] == attributes["scale"]
    assert read_attributes["translate"] == attributes["translate"]
    assert read_attributes["units"] == ("um",) * 3


def test_world_columns_are_points_times_scale_plus_translate(points_3d, tmp_path):
    points, _, attributes = points_3d
    [path] = write_points(str(tmp_path / "nuclei"), points, attributes)
    assert path.endswith("nuclei.csv")
    table = np.loadtxt(path, delimiter=",", comments="#", skiprows=4)
    expected = points * np.asarray(attributes["scale"]) + np.asarray(attributes["translate"])
    np.testing.assert_allclose(table[:, 4:], expected, rtol=1e-15)


def test_2d_without_scores_or_scale(tmp_path):
    points = np.array([[1.5, 2.25], [3.0, 4.0]])
    [path] = write_points(str(tmp_path / "p.csv"), points, {"ndim": 2, "features": {}, "metadata": {"ivote_image": "c"}})
    [(data, attributes, _)] = get_reader(path)(path)
    np.testing.assert_array_equal(data, points)
    assert "features" not in attributes and "scale" not in attributes


def test_empty_layer_round_trips(tmp_path):
    [path] = write_points(str(tmp_path / "empty.csv"), np.zeros((0, 3)), {"ndim": 3, "scale": (1, 1, 1),
                                                                       "features": {"score": np.zeros(0)}})
    [(data, _, _)] = get_reader(path)(path)
    assert data.shape == (0, 3)


def test_reader_claims_only_point_tables(tmp_path):
    other = tmp_path / "measurements.csv"
    other.write_text("label,area\n1,20\n")
    assert get_reader(str(other)) is None
    assert get_reader(str(tmp_path / "missing.csv")) is None
    image = tmp_path / "cells.tif"
    image.write_bytes(b"II*\x00")
    assert get_reader(str(image)) is None
    centres = tmp_path / "centres.csv"
    centres.write_text("y,x\n1.0,2.0\n")  # the demo's and the evaluation data's truth files
    assert get_reader(str(centres)) is not None
    assert get_reader([str(centres), str(centres)]) is None


def test_writer_rejects_5d_points_and_writes_4d_as_time_lapse(tmp_path):
    with pytest.raises(ValueError, match="2D or 3D"):
        write_points(str(tmp_path / "p.csv"), np.zeros((2, 5)), {"ndim": 5, "metadata": {"ivote_image": "c"}})
    [path] = write_points(str(tmp_path / "t.csv"), np.array([[3.0, 1.0, 2.0, 3.0]]), {"ndim": 4, "metadata": {"ivote_image": "c"}})
    header = [line for line in open(path).read().splitlines() if not line.startswith("#")][0]
    assert header.startswith("t,z,y,x,score,")


def test_scale_without_unit_reopens_in_napari(tmp_path):
    napari_layers = pytest.importorskip("napari.layers")
    attributes = {"scale": (0.5, 0.5), "units": ("pixel", "pixel"), "ndim": 2,
                  "metadata": {"units": "world units", "radius": 3.0}}
    [path] = write_points(str(tmp_path / "p.csv"), np.array([[1.0, 2.0]]), attributes)
    assert "world units" not in open(path).read()
    [(data, read_attributes, _)] = get_reader(path)(path)
    layer = napari_layers.Points(data, **read_attributes)  # raised "Could not find unit world units"
    np.testing.assert_allclose(layer.scale, (0.5, 0.5))


def test_reopened_points_keep_the_nucleus_size(tmp_path):
    attributes = {"scale": (0.5, 0.5), "units": ("micrometer",) * 2, "ndim": 2, "metadata": {"radius": 4.0},
                  "features": {"score": np.array([1.0, 2.0])}}
    [path] = write_points(str(tmp_path / "p.csv"), np.array([[1.0, 2.0], [5.0, 6.0]]), attributes)
    [(_, read_attributes, _)] = get_reader(path)(path)
    assert read_attributes["size"] == pytest.approx(2 * 4.0 / 0.5)  # diameter in data pixels, not napari's 10
    assert read_attributes["metadata"]["radius_estimated"] is False
    attributes["metadata"].update(radius_estimate=4.0, radius_estimated=True)  # the Estimate button's value, used
    [path] = write_points(str(tmp_path / "q.csv"), np.array([[1.0, 2.0], [5.0, 6.0]]), attributes)
    assert "# radius_estimated: true" in open(path).read().splitlines()
    [(_, read_attributes, _)] = get_reader(path)(path)
    assert read_attributes["metadata"]["radius"] == 4.0 and read_attributes["metadata"]["radius_estimated"] is True


def test_file_open_preselects_our_reader_for_our_csv(tmp_path):
    """napari's reader dialog pre-selects the alphabetically first plugin display name."""
    pytest.importorskip("napari")
    from napari.plugins import _initialize_plugins, _npe2

    _initialize_plugins()
    [path] = write_points(str(tmp_path / "p.csv"), np.array([[1.0, 2.0]]), {"ndim": 2})
    readers = _npe2.get_readers(path)
    if len(readers) < 2:
        pytest.skip("napari-ivote is not installed as a plugin in this environment")
    assert readers["napari-ivote"] == sorted(readers.values())[0]
