"""Label and count on an H&E layer measures its intensities, one column per colour channel, as
``ivote measure`` does (the dock once showed "intensity image: <the H&E layer>" and measured none)."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]


def test_label_and_count_measures_an_rgb_intensity_image_per_channel(make_napari_viewer, qtbot):
    from ivote.napari._components_widget import LabelCountWidget

    labels = np.zeros((40, 60), dtype=np.int32)
    labels[5:15, 5:20], labels[20:35, 30:50] = 1, 2
    rgb = np.zeros((40, 60, 3), dtype=np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 200, 100, 50
    rgb[labels == 2] = (60, 30, 150)
    viewer = make_napari_viewer()
    viewer.add_image(rgb, name="gbm", rgb=True)
    viewer.add_labels(labels, name="labels: gbm")
    widget = LabelCountWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Label and count")
    widget.layer.value = viewer.layers["labels: gbm"]
    assert widget.intensity.value is viewer.layers["gbm"]
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=30_000)
    qtbot.wait(20)
    features = viewer.layers["labels: gbm"].features
    for channel, (first, second) in enumerate(((200, 60), (100, 30), (50, 150))):
        assert features[f"mean_intensity_c{channel}"].tolist() == pytest.approx([first, second])
    assert features["integrated_intensity_c2"].tolist() == pytest.approx([50 * 150, 150 * 300])
