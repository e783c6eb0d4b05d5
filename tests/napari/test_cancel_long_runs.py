"""Cancel stops a long CPU Run at once: the Run goes to a child process, which Cancel kills mid-pass."""

from __future__ import annotations

import time

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

import ivote.detect  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.napari._process import active_children  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 120_000


@pytest.fixture
def every_run_is_long(monkeypatch):
    from ivote.napari import _detect_jobs

    monkeypatch.setattr(_detect_jobs, "LONG_RUN_WORK", 0)


def test_a_run_in_a_child_process_gives_the_same_points(make_napari_viewer, detect_widget, qtbot, every_run_is_long):
    sample = synthetic_nuclei((96, 96), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=5)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    widget = detect_widget(viewer)
    widget.radius.value = 4.0
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS):
        widget.run()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    expected = ivote.detect.iterative_voting(sample.image, radius=4.0, spacing=sample.spacing)
    np.testing.assert_array_equal(viewer.layers["nuclei: cells"].data, expected.points)
    np.testing.assert_array_equal(viewer.layers["nuclei: cells"].features["score"], expected.scores)
    assert widget.runner.job is None and not active_children()


def test_cancel_kills_a_long_run_mid_pass_and_adds_nothing(make_napari_viewer, detect_widget, qtbot,
                                                           every_run_is_long):
    sample = synthetic_nuclei((320, 320), spacing=(0.5, 0.5), radius=6.0, overlap=0.1, noise=0.05, seed=2)
    viewer = make_napari_viewer()
    viewer.add_image(sample.image, name="cells", scale=sample.spacing, units=("um", "um"))
    widget = detect_widget(viewer)
    widget.radius.value = widget.radius.max  # 40 µm = 80 px: a pass of the NumPy voting takes many seconds
    widget.run()
    qtbot.waitUntil(lambda: bool(active_children()), timeout=TIMEOUT_MS)
    qtbot.wait(3000)  # the child has started voting (about 2 s to start)
    assert widget.runner.job is not None and widget.runner.job.progress.n == 0  # still in the first pass
    start = time.perf_counter()
    widget.cancel()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    idle = time.perf_counter() - start
    assert idle < 2.0, f"{idle:.1f} s from Cancel to idle"
    assert not active_children()  # the CPU stopped with it
    qtbot.wait(50)
    assert [layer.name for layer in viewer.layers] == ["cells"] and widget.status.value == "cancelled"


def test_a_late_progress_report_does_not_move_the_bar_back(make_napari_viewer):
    """Blocks finish on several threads: their reports can reach the GUI out of order (CI saw the bar end at
    11 of 12); the bar keeps the furthest, and a new total may restart it."""
    from ivote.napari._runner import Job

    make_napari_viewer()
    job = Job("test", total=12)
    try:
        for done in (3, 2, 1, 4, 12, 11):
            job._report(done, 12)
        assert job.progress.n == 12
        job._report(2, 30)  # a new phase with its own total
        assert (job.progress.n, job.progress.total) == (2, 30)
    finally:
        job.close()
