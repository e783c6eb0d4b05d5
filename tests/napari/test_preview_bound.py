"""The live preview never costs the user their work: the radius slider stops where the memory bound stops, a
preview or Run the bound refuses is never started (the status says the largest radius that fits), a preview
whose settings changed is abandoned at once, never two detections run at once, and a long preview shows its
progress."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

import ivote.detect  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 60_000


def _core_bound():
    if not hasattr(ivote.detect, "detection_memory"):
        pytest.skip("needs the core's memory bound (ivote.detect.detection_memory, largest_radius)")
    return ivote.detect.detection_memory, ivote.detect.largest_radius


@pytest.fixture(scope="module")
def wide():
    """The issue's 520 x 696 image (the slider reached 130 px on it and napari was killed)."""
    return synthetic_nuclei((520, 696), radius=12.0, noise=0.05, seed=1)


@pytest.fixture(scope="module")
def small():
    return synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=5)


@pytest.fixture
def counted_detector(monkeypatch):
    """The real detector, 0.1 s slower per pass, recording how many calls run at once."""
    real, state, lock = ivote.detect.iterative_voting, {"calls": 0, "running": 0, "most": 0, "passes": 0}, threading.Lock()

    def counted(image, **kwargs):
        callback = kwargs.pop("iter_callback")

        def slowed(index, n_passes):
            state["passes"] += 1
            time.sleep(0.1)
            callback(index, n_passes)

        with lock:
            state["calls"] += 1
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
        try:
            return real(image, iter_callback=slowed, **kwargs)
        finally:
            with lock:
                state["running"] -= 1

    monkeypatch.setattr(ivote.detect, "iterative_voting", counted)
    return state


def test_the_radius_slider_stops_at_the_memory_bound(make_napari_viewer, detect_widget, wide, monkeypatch):
    detection_memory, largest_radius = _core_bound()
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "400M")
    viewer = make_napari_viewer()
    viewer.add_image(wide.image, name="cells")
    widget = detect_widget(viewer, live=True)
    image_bound = widget._geometry.radius_range()[1]  # a quarter of the short side: 130 px
    largest = largest_radius(wide.image.shape)
    assert largest < image_bound
    assert widget.radius.max == pytest.approx(largest)
    assert detection_memory(wide.image.shape, widget.radius.max) <= 400 * 2**20


@pytest.mark.parametrize("action", ["run", "preview"])
def test_a_detection_the_bound_refuses_is_never_started(make_napari_viewer, detect_widget, wide, monkeypatch,
                                                        counted_detector, action):
    detection_memory, largest_radius = _core_bound()
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "400M")
    viewer = make_napari_viewer()
    viewer.add_image(wide.image, name="cells")
    widget = detect_widget(viewer)
    widget.radius.value = widget.radius.max
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "330M")  # e.g. other programs took memory since the image was chosen
    getattr(widget, action)()
    assert not widget.busy and counted_detector["calls"] == 0
    status = widget.status.value
    match = re.search(r"not started: radius ([\d.]+) px on (\d+)x(\d+) pixels .* largest radius that fits is ([\d.]+) px",
                      status)
    assert match, status  # a preview computes on its window (384² on NumPy), a Run on the whole image
    radius, shape, fits = float(match[1]), (int(match[2]), int(match[3])), float(match[4])
    assert shape == (wide.image.shape if action == "run" else (384, 384))
    assert radius == pytest.approx(widget.radius.value, abs=0.05) and fits < radius
    assert fits == pytest.approx(largest_radius(shape), rel=1e-2) and detection_memory(shape, fits) <= 330 * 2**20
    assert widget.run_button.enabled  # nothing runs: the dock is ready for a smaller radius


def test_a_preview_whose_settings_changed_is_abandoned_at_once(make_napari_viewer, detect_widget, small, qtbot,
                                                               counted_detector):
    viewer = make_napari_viewer()
    viewer.add_image(small.image, name="cells", scale=small.spacing)
    widget = detect_widget(viewer, live=True)
    qtbot.wait(400)  # the preview of the image's first settings starts
    qtbot.waitUntil(lambda: counted_detector["passes"] >= 2, timeout=TIMEOUT_MS)
    passes = counted_detector["passes"]
    widget.radius.value = 3.0  # the next slider move
    assert widget.preview_runner.job is None and "settings changed" in widget.status.value
    qtbot.wait(250)  # within the 300 ms debounce: the old preview stopped, no new one yet
    assert counted_detector["passes"] <= passes + 1 and counted_detector["running"] == 0
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS) as shown:
        pass
    assert shown.args[0].detections.radius == pytest.approx(3.0)


def test_slider_drags_never_run_two_detections_at_once(make_napari_viewer, detect_widget, small, qtbot,
                                                       counted_detector):
    viewer = make_napari_viewer()
    viewer.add_image(small.image, name="cells", scale=small.spacing)
    widget = detect_widget(viewer, live=True)
    for radius in (2.5, 3.0, 3.5, 4.0, 4.5):  # each move after the debounce, while the last preview runs
        widget.radius.value = radius
        qtbot.wait(350)
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    assert counted_detector["calls"] >= 3 and counted_detector["most"] == 1


def test_a_long_preview_shows_its_progress(make_napari_viewer, detect_widget, small, qtbot, counted_detector):
    viewer = make_napari_viewer()
    viewer.add_image(small.image, name="cells", scale=small.spacing)
    widget = detect_widget(viewer)
    widget.preview()
    qtbot.waitUntil(lambda: "preview: pass" in widget.status.value, timeout=3000)
    assert widget.preview_runner.job is not None  # shown while it works, not after
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)


def test_the_preview_costs_no_more_than_the_run_on_the_same_pixels(make_napari_viewer, detect_widget, small, qtbot):
    viewer = make_napari_viewer()
    viewer.add_image(small.image, name="cells", scale=small.spacing)
    widget = detect_widget(viewer)
    widget.radius.value = 4.0
    times = {"preview": [], "run": []}
    for order in (("preview", "run"), ("run", "preview"), ("preview", "run")):
        for action in order:
            with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS) as shown:
                getattr(widget, action)()
            qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
            times[action].append(shown.args[0].seconds)
            assert shown.args[0].window_shape in (None, (96, 96))  # the whole plane, as Run
    # the preview took 3-4 times the Run (two detections sharing the CPU); here both are one detection of
    # the same pixels, timed on a shared host: the best of three each
    assert min(times["preview"]) <= 1.5 * min(times["run"]) + 0.05, times
