"""Opening a points CSV from Python. ``viewer.open(path)`` uses napari's builtin reader (its ``plugin='napari'``
default), which reads only its own layout; ``plugin="napari-ivote"``, or a reader preference for ``*.csv``
with ``plugin=None`` (as File > Open's "remember" box sets), opens ours with scale and scores and napari's
layout with all its features."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.io import write_points_csv  # noqa: E402

pytestmark = pytest.mark.napari


@pytest.fixture
def csv_files(tmp_path):
    ours = tmp_path / "points.csv"
    write_points_csv(ours, np.array([[10.0, 20.0], [30.0, 40.0]]), np.array([1.0, 2.0]), spacing=(0.5, 0.5),
                     translate=(3.0, 4.0), units="um")
    theirs = tmp_path / "napari_points.csv"
    theirs.write_text("index,axis-0,axis-1,kind\n0,1.5,2.0,a\n1,3.0,4.25,b\n")  # napari's writer's layout
    return ours, theirs


@pytest.fixture
def csv_preference():
    from napari.settings import get_settings

    plugins = get_settings().plugins
    saved = dict(plugins.extension2reader)
    plugins.extension2reader = {**saved, "*.csv": "napari-ivote"}
    yield
    plugins.extension2reader = saved


def _check_ours(layer):
    np.testing.assert_array_equal(layer.data, [[10.0, 20.0], [30.0, 40.0]])
    np.testing.assert_allclose(layer.scale, (0.5, 0.5))
    np.testing.assert_allclose(layer.translate, (3.0, 4.0))
    np.testing.assert_array_equal(layer.features["score"], [1.0, 2.0])


def test_plugin_napari_ivote_opens_both_layouts(make_napari_viewer, csv_files):
    ours, theirs = csv_files
    viewer = make_napari_viewer()
    [layer] = viewer.open(str(ours), plugin="napari-ivote")
    _check_ours(layer)
    [other] = viewer.open(str(theirs), plugin="napari-ivote")
    np.testing.assert_array_equal(other.data, [[1.5, 2.0], [3.0, 4.25]])
    assert list(other.features["kind"]) == ["a", "b"]


def test_a_csv_reader_preference_opens_both_without_naming_the_plugin(make_napari_viewer, csv_files,
                                                                      csv_preference):
    ours, theirs = csv_files
    viewer = make_napari_viewer()
    [layer] = viewer.open(str(ours), plugin=None)
    _check_ours(layer)
    [other] = viewer.open(str(theirs), plugin=None)  # napari's own CSV still opens, features and all
    assert list(other.features["kind"]) == ["a", "b"]
