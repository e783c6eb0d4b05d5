"""The docks fit a 1920 x 1080 screen beside the canvas: the measurements in napari's features table below the
canvas (every row and column), short tab titles, status lines of at most three lines, no "Run on whole volume"
for a 2D image, and the event loop not frozen by a Run or a segmentation (napari's first Labels layer aside)."""

from __future__ import annotations

import time

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

from ivote.data import synthetic_nuclei  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 60_000
DOCKS = ("Detect nuclei", "Segment nuclei", "Label and count", "Learn features")


@pytest.fixture(scope="module")
def sample():
    return synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=5)


def test_the_measurements_are_in_naparis_features_table_below_the_canvas(make_napari_viewer, qtbot, sample):
    from qtpy.QtCore import Qt

    from ivote.napari._components_widget import LabelCountWidget

    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    viewer.add_labels(sample.labels, name="labels: cells", scale=sample.spacing, units=("um", "um"))
    widget = LabelCountWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Label and count")
    widget.layer.value = viewer.layers["labels: cells"]
    widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    qtbot.wait(50)
    features = viewer.layers["labels: cells"].features
    table, dock = widget._measurements_table, widget._measurements_dock
    assert viewer.window._qt_window.dockWidgetArea(dock) == Qt.DockWidgetArea.BottomDockWidgetArea
    model = table.table.model()
    assert model.rowCount() == len(features) == len(np.unique(sample.labels)) - 1
    assert model.columnCount() >= len(features.columns) >= 13  # every column, not 2 of 13
    widget.run()  # a second run reuses the dock
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    assert widget._measurements_dock is dock


def test_the_docks_fit_a_full_hd_screen_with_short_tab_titles(make_napari_viewer, qtbot, sample):
    viewer = make_napari_viewer(show=True)
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    window = viewer.window._qt_window
    window.resize(1920, 1080)
    docks = [viewer.window.add_plugin_dock_widget("napari-ivote", name)[0] for name in DOCKS]
    qtbot.wait(200)
    for dock in docks:
        assert dock.widget().minimumSizeHint().height() <= 1000, dock.windowTitle()
        assert dock.width() <= 1920 // 3, (dock.windowTitle(), dock.width())
    assert sorted(d.windowTitle() for d in docks[1:]) == sorted(DOCKS[1:])  # tabbed: no " (IVote nuclei)" suffix
    assert viewer.window._qt_viewer.canvas.native.width() >= 1920 // 2


def test_a_status_line_shows_at_most_three_lines(make_napari_viewer, detect_widget, sample):
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells")
    widget = detect_widget(viewer)
    text = "a long message " * 60
    widget.status.show(text)
    lines = widget.status.native.fontMetrics().lineSpacing()
    assert widget.status.native.maximumHeight() <= 3 * lines + 4
    assert widget.status.tooltip == text


@pytest.mark.parametrize("shape, text", [((256, 256), "Run in blocks (whole image)"),
                                         ((8, 64, 64), "Run on whole volume")])
def test_a_2d_image_is_not_offered_a_run_on_the_whole_volume(make_napari_viewer, detect_widget, shape, text):
    da = pytest.importorskip("dask.array")
    viewer = make_napari_viewer()
    viewer.add_image(da.zeros(shape, chunks=32, dtype=np.float32) + 1, name="lazy")
    widget = detect_widget(viewer)
    assert widget.volume.run_button.text == text


def test_the_event_loop_never_freezes_during_a_run_and_a_segmentation(make_napari_viewer, detect_widget, qtbot,
                                                                     sample):
    from qtpy.QtCore import QTimer

    from ivote.napari._segment_widget import SegmentWidget

    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    detect = detect_widget(viewer)
    gaps, last = [], [time.perf_counter()]

    def beat():
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(beat)
    timer.start()
    detect.radius.value = 4.0
    with qtbot.waitSignal(detect.finished_result, timeout=TIMEOUT_MS):
        detect.run()
    segment = SegmentWidget(viewer)
    viewer.window.add_dock_widget(segment, name="Segment nuclei")
    segment.iterations.value = 50
    last[0] = time.perf_counter()
    segment.run()
    qtbot.waitUntil(lambda: not segment.busy, timeout=TIMEOUT_MS)
    qtbot.wait(50)
    timer.stop()
    assert "labels: cells" in viewer.layers
    # napari compiled its Labels colouring (Numba) on the main thread at the first Labels layer: 1.5 s; what is
    # left is napari drawing its first Labels layer (vispy's line dash atlas, 0.1-0.45 s on a busy 2-core host)
    assert max(gaps) < 0.6, f"the event loop froze {max(gaps):.2f} s"
