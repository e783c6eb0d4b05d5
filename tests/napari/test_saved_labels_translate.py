"""A Labels layer saved from napari (File > Save Selected Layer) and opened again sits where it was:
its translate (the world position of pixel 0) is kept with its scale."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.data import synthetic_nuclei  # noqa: E402

pytestmark = pytest.mark.napari


@pytest.mark.parametrize("suffix", [".ome.tif", ".ome.zarr"])
def test_saved_labels_reopen_at_their_scale_and_translate(make_napari_viewer, tmp_path, suffix):
    sample = synthetic_nuclei((6, 32, 24), spacing=(2.0, 0.5, 0.5), radius=3.0, seed=4)
    viewer = make_napari_viewer()
    image = viewer.add_image(sample.image, name="cells", scale=(2.0, 0.5, 0.5), translate=(-8.0, 4.25, 100.0),
                             units=("um",) * 3)
    labels = viewer.add_labels(sample.labels.astype(np.int32), name="labels: cells", scale=image.scale,
                               translate=image.translate, units=image.units)
    viewer.layers.selection = {labels}
    [path] = viewer.layers.save(str(tmp_path / f"labels{suffix}"), selected=True, plugin="napari-ivote")

    [reopened] = viewer.open(path, plugin="napari-ivote")
    assert isinstance(reopened, napari.layers.Labels)
    np.testing.assert_allclose(reopened.scale, image.scale)
    np.testing.assert_allclose(reopened.translate, image.translate)
    np.testing.assert_array_equal(np.asarray(reopened.data), labels.data)
    # the same nucleus under the same world point
    centre = np.array(np.nonzero(labels.data == 1)).mean(axis=1)
    world = labels.data_to_world(centre)
    assert reopened.get_value(world, world=True) == 1


def test_an_image_opened_without_its_position_takes_the_files_in_detect(make_napari_viewer, tmp_path):
    """napari's own TIFF reader gives neither pixel sizes nor position; the Detect dock gives the layer both."""
    from ivote import write_image
    from ivote.napari._detect_widget import DetectWidget

    sample = synthetic_nuclei((48, 40), spacing=(0.5, 0.5), radius=3.0, seed=4)
    path = tmp_path / "cells.ome.tif"
    write_image(path, sample.image.astype(np.float32), axes="YX", spacing=(0.5, 0.5), translate=(4.25, 100.0))
    viewer = make_napari_viewer()
    [layer] = viewer.open(str(path), plugin="napari")
    assert tuple(layer.scale) == (1.0, 1.0) and tuple(layer.translate) == (0.0, 0.0)  # napari's reader
    widget = DetectWidget(viewer)
    widget.live.value = False
    assert tuple(layer.scale) == pytest.approx((0.5, 0.5))
    assert tuple(layer.translate) == pytest.approx((4.25, 100.0))
    assert widget.status.value.endswith(": 0.5, 0.5 µm, position 4.25, 100 µm")  # says so, and it stays


@pytest.mark.parametrize(("unit", "um_per_unit"), [("nm", 1e-3), ("mm", 1e3), ("pixel", None)])
def test_labels_in_another_length_unit_are_saved_in_micrometres(tmp_path, unit, um_per_unit):
    """A layer in nm or mm keeps its pixel size and position (OME-TIFF carries micrometres); in pixels, neither."""
    from ivote import open_image
    from ivote.napari._io import write_labels

    labels = np.zeros((16, 12), np.int32)
    labels[4:8, 3:6] = 1
    scale, translate = (500.0, 250.0), (1000.0, -2000.0)
    [path] = write_labels(str(tmp_path / "labels.ome.tif"), labels,
                          {"scale": scale, "translate": translate, "units": (unit, unit)})
    image = open_image(path)
    if um_per_unit is None:
        assert image.spacing == (None, None) and image.origin is None
    else:
        assert image.spacing == pytest.approx(tuple(s * um_per_unit for s in scale))
        assert image.origin == pytest.approx(tuple(t * um_per_unit for t in translate))
    np.testing.assert_array_equal(np.asarray(image.data), labels)
