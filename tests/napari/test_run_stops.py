"""A Run stops when its image leaves the viewer, as at Cancel, and the Run button is off while it runs."""

from __future__ import annotations

import time

import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.data import synthetic_nuclei  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def sample():
    return synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=5)


def test_the_run_button_is_off_while_a_run_goes(make_napari_viewer, detect_widget, qtbot, sample, slow_detector):
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing)
    widget = detect_widget(viewer)
    widget.run()
    assert not widget.run_button.enabled and widget.cancel_button.enabled
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    qtbot.wait(20)
    assert widget.run_button.enabled and not widget.cancel_button.enabled
    assert "nuclei: cells" in viewer.layers


def test_removing_the_image_stops_the_run_at_once(make_napari_viewer, detect_widget, qtbot, sample, slow_detector):
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing)
    widget = detect_widget(viewer)
    widget.run()
    qtbot.waitUntil(lambda: len(slow_detector) >= 2, timeout=TIMEOUT_MS)  # voting, pass 2 of about 10
    start, passes = time.perf_counter(), len(slow_detector)
    viewer.layers.remove("cells")
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    stopped = time.perf_counter() - start
    assert len(slow_detector) <= passes + 1  # the pass under way ends, no other starts (a Run has about 10)
    assert stopped < 2.0, f"{stopped:.2f} s from removing the image to idle"
    qtbot.wait(20)
    assert len(viewer.layers) == 0 and "removed" in widget.status.value
    assert widget.run_button.enabled
