"""The docks on inputs a new user meets: a constant image (nothing to find) must say so, not abort napari."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]


def test_a_constant_image_gives_zero_nuclei_not_a_crash(make_napari_viewer, qtbot):
    """Its score range is the (1, 10) of no candidates; the threshold slider started at (1e-3, 1): setting
    min = 1 first made magicgui's LogSlider divide by log(1 / 1) = 0 in the result's callback (napari aborted)."""
    from ivote.napari._detect_widget import DetectWidget

    viewer = make_napari_viewer()
    viewer.add_image(np.full((64, 64), 3.0, np.float32), name="blank")
    widget = DetectWidget(viewer)
    widget.live.value = False
    viewer.window.add_dock_widget(widget)
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    qtbot.wait(20)
    assert widget.status.value.startswith("0 nuclei")
    assert len(viewer.layers["nuclei: blank"].data) == 0
    assert (widget.threshold.min, widget.threshold.max) == (1.0, 10.0)


def test_clustering_an_empty_points_layer_says_zero_and_warns_nothing(make_napari_viewer, qtbot):
    import warnings

    from ivote.napari._components_widget import LabelCountWidget

    viewer = make_napari_viewer()
    viewer.add_points(np.zeros((0, 2)), name="nuclei: none")
    widget = LabelCountWidget(viewer)
    widget.layer.value = viewer.layers["nuclei: none"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        widget.run()
        qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
        qtbot.wait(20)
    assert widget.status.value.startswith("0 clusters")
    assert not [w for w in caught if "illegal values" in str(w.message)]
