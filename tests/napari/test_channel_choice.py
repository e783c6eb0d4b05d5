"""The right channel by default: a 2-channel file opens as 'Hoechst' and 'noise'; Detect and Segment offer the
nuclear stain (not the newest layer), keep the user's pick, prefer the image last detected on, and Segment warns
when its seeds were found on another image than the one it segments."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.data import synthetic_nuclei  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def channels():
    sample = synthetic_nuclei((96, 96), radius=6.0, noise=0.05, seed=5)
    noise = np.random.default_rng(0).random((96, 96)).astype(np.float32)
    return sample, noise


def _two_channels(viewer, channels):
    sample, noise = channels
    viewer.add_image(sample.image, name="Hoechst")
    viewer.add_image(noise, name="noise")  # the newest layer, as a 2-channel OME-TIFF opens


def _segment(viewer):
    from ivote.napari._segment_widget import SegmentWidget

    widget = SegmentWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Segment nuclei")
    return widget


@pytest.mark.parametrize("dock_first", [False, True])
def test_detect_and_segment_offer_the_nuclear_stain(make_napari_viewer, detect_widget, channels, dock_first):
    viewer = make_napari_viewer()
    if not dock_first:
        _two_channels(viewer, channels)
    detect, segment = detect_widget(viewer), _segment(viewer)
    if dock_first:
        _two_channels(viewer, channels)
    assert detect.image.value.name == "Hoechst" and segment.image.value.name == "Hoechst"


def test_the_users_pick_and_the_last_detection_win(make_napari_viewer, detect_widget, channels, qtbot):
    viewer = make_napari_viewer()
    _two_channels(viewer, channels)
    detect = detect_widget(viewer)
    combo = detect.image.native
    combo.setCurrentIndex(combo.findText("noise"))
    combo.activated.emit(combo.currentIndex())  # as a click in the list
    viewer.add_image(channels[1], name="DAPI copy")
    assert detect.image.value.name == "noise"  # the user's pick stays over a newer nuclear-named layer
    with qtbot.waitSignal(detect.finished_result, timeout=TIMEOUT_MS):
        detect.run()
    segment = _segment(viewer)
    assert segment.image.value.name == "noise" and segment.seeds.value.name == "nuclei: noise"


def test_segment_warns_when_the_seeds_come_from_another_image(make_napari_viewer, detect_widget, channels, qtbot):
    viewer = make_napari_viewer()
    _two_channels(viewer, channels)
    detect = detect_widget(viewer)
    detect.radius.value = 6.0
    with qtbot.waitSignal(detect.finished_result, timeout=TIMEOUT_MS):
        detect.run()
    segment = _segment(viewer)
    assert segment.image.value.name == "Hoechst" and segment.seeds.value.name == "nuclei: Hoechst"
    segment.image.value = viewer.layers["noise"]
    segment.seeds.value = viewer.layers["nuclei: Hoechst"]
    segment.iterations.value = 5
    segment.run()
    assert "found on 'Hoechst', not on 'noise'" in segment.status.value
    qtbot.waitUntil(lambda: not segment.busy, timeout=TIMEOUT_MS)
    qtbot.wait(20)
    assert "labels: noise" in viewer.layers and "warning: seeds 'nuclei: Hoechst'" in segment.status.value
