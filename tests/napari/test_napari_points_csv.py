"""Points saved by napari's own CSV writer (File > Save of a Points layer that is not ours:
``index,axis-0,axis-1,<features>``) are read by ``read_points_csv`` (``ivote segment --points``,
``ivote measure --points``), which says which columns it read; layouts it cannot read get an error
naming the expected columns. The files are written by napari's real writer, no viewer needed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

napari = pytest.importorskip("napari")

from ivote.io import read_points_csv  # noqa: E402


def _napari_save(tmp_path, name, layer):
    """``layer`` through napari's builtin writer for its type (``napari.write_points``/``napari.write_shapes``:
    npe2 matches ``plugin`` as a prefix of the writer's command, so plain 'napari' would also pick
    'napari-ivote.write_points' once our writers are first in its index)."""
    from npe2 import PluginManager

    PluginManager.instance().discover()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # napari warns, rather than raises, when no writer ran
        writer = f"napari.write_{type(layer).__name__.lower()}"
        [path] = napari.save_layers(str(tmp_path / name), [layer], plugin=writer)
    return path


@pytest.mark.parametrize("ndim", [2, 3])
def test_napari_points_csv_reads_its_axes_and_score(tmp_path, ndim):
    rng = np.random.default_rng(ndim)
    points = rng.uniform(0, 40, size=(7, ndim)) / 3.0
    scores = rng.uniform(size=7)
    layer = napari.layers.Points(points, scale=(0.5,) * ndim, translate=(3.0,) * ndim,
                                 features={"kind": ["a", "b,c", "d", "e", "f", "g", "h"], "score": scores})
    path = _napari_save(tmp_path, "saved.csv", layer)
    assert open(path).readline().startswith("index,axis-0,axis-1")  # napari's layout, not ours
    with pytest.warns(UserWarning, match=r"napari's points CSV: read columns axis-0, axis-1.* as .*y, x") as caught:
        table = read_points_csv(path)
    assert "score" in str(caught[0].message)
    np.testing.assert_allclose(table.points, points, rtol=1e-15)
    np.testing.assert_allclose(table.scores, scores, rtol=1e-15)
    assert table.columns == tuple(f"axis-{i}" for i in range(ndim))
    assert table.spacing is None and table.translate is None  # napari's CSV keeps neither


def test_napari_points_csv_without_features_and_empty(tmp_path):
    layer = napari.layers.Points(np.array([[1.5, 2.0], [3.0, 4.25]]))
    with pytest.warns(UserWarning, match="napari's points CSV"):
        table = read_points_csv(_napari_save(tmp_path, "plain.csv", layer))
    np.testing.assert_array_equal(table.points, [[1.5, 2.0], [3.0, 4.25]])
    assert table.scores is None
    with pytest.warns(UserWarning, match="napari's points CSV"):
        empty = read_points_csv(_napari_save(tmp_path, "empty.csv", napari.layers.Points(np.zeros((0, 2)))))
    assert empty.points.shape == (0, 2)


def test_napari_csv_that_cannot_be_read_names_the_expected_columns(tmp_path):
    four = napari.layers.Points(np.array([[0.0, 1.0, 2.0, 3.0]]))
    with pytest.raises(ValueError, match=r"4 axes.*'y,x' or 'z,y,x'.*'index,axis-0,axis-1'"):
        read_points_csv(_napari_save(tmp_path, "four.csv", four))
    shapes = napari.layers.Shapes([np.array([[0.0, 0.0], [5.0, 5.0], [0.0, 5.0]])], shape_type="polygon")
    with pytest.raises(ValueError, match="napari's shapes CSV, not points"):
        read_points_csv(_napari_save(tmp_path, "shapes.csv", shapes))


def test_napari_points_csv_with_features_named_like_our_columns(tmp_path):
    """A Points layer made from a table (features 'y', 'x', 't': a centroid, a frame) is still read by its
    axis-* columns, and 't' is a feature, not frames."""
    points = np.array([[1.5, 2.0], [3.0, 4.25]])
    features = {"y": [10.0, 20.0], "x": [30.0, 40.0], "t": [0.5, 7.0], "score": [0.25, 0.75]}
    path = _napari_save(tmp_path, "table.csv", napari.layers.Points(points, features=features))
    with pytest.warns(UserWarning, match="napari's points CSV"):
        table = read_points_csv(path)
    np.testing.assert_array_equal(table.points, points)
    np.testing.assert_array_equal(table.scores, [0.25, 0.75])
    assert table.times is None and table.columns == ("axis-0", "axis-1")
