"""The Detect dock says, as ``ivote detect`` does, when an RGB layer holds a grey image (red = green = blue:
fluorescence exported as 'RGB Color'): the dock reads RGB as H&E, whose nuclei are then the wrong ones."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.data import synthetic_nuclei  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]


@pytest.fixture(scope="module")
def grey():
    sample = synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=4.0, seed=5)
    return np.round(255 * np.clip(sample.image / sample.image.max(), 0, 1)).astype(np.uint8)


def _notifications_while(action):
    from napari.utils.notifications import notification_manager

    seen = []
    notification_manager.notification_ready.connect(seen.append)
    try:
        action()
    finally:
        notification_manager.notification_ready.disconnect(seen.append)
    return [str(n.message) for n in seen]


def test_a_grey_image_saved_as_rgb_is_flagged_in_the_dock(make_napari_viewer, grey):
    from ivote.napari._detect_widget import DetectWidget

    viewer = make_napari_viewer()
    viewer.add_image(grey, name="grey")
    colour = viewer.add_image(np.dstack([grey, 255 - grey, grey // 2]), name="colour", rgb=True)
    widget = DetectWidget(viewer)
    widget.live.value = False
    viewer.window.add_dock_widget(widget, name="Detect nuclei")

    as_rgb = viewer.add_image(np.dstack([grey] * 3), name="as_rgb", rgb=True)
    messages = _notifications_while(lambda: setattr(widget.image, "value", as_rgb))
    flagged = [m for m in messages if "red = green = blue" in m]
    assert len(flagged) == 1 and "H&E" in flagged[0] and "as_rgb" in flagged[0], messages
    assert "red = green = blue" in widget.status.value

    for layer in (colour, viewer.layers["grey"]):  # a real colour image, a grey one: nothing to say
        messages = _notifications_while(lambda layer=layer: setattr(widget.image, "value", layer))
        assert not [m for m in messages if "red = green = blue" in m]
        assert "red = green = blue" not in widget.status.value


class _CountingRGB:
    """A lazy RGB slide that counts the pixels it decodes: a tile with all its colours, as a TIFF reader does,
    whichever colour is asked for."""

    def __init__(self, shape):
        self.shape, self.dtype, self.ndim, self.decoded = shape, np.dtype(np.uint8), len(shape), 0

    def __getitem__(self, index):
        tile = np.broadcast_to(np.uint8(7), self.shape)[index[:2]]
        self.decoded += tile.size
        return np.array(tile[:, :, index[2]])


def test_a_large_lazy_rgb_layer_is_read_once_to_flag_it():
    """Selecting a lazy slide in the dock reads it once (a grid of ~2**20 pixels of it in memory), not once per
    colour: napari reads its plane once to draw it already."""
    import dask.array as da

    from ivote.napari._detect_logic import grey_rgb_note

    source = _CountingRGB((8192, 8192, 3))
    layer = napari.layers.Image(da.from_array(source, chunks=(1024, 1024, 3)), rgb=True, name="slide")
    before = source.decoded
    note = grey_rgb_note(layer)
    assert note is not None and "red = green = blue" in note and "'slide'" in note
    assert source.decoded - before <= source.shape[0] * source.shape[1] * 3, source.decoded - before
