"""Shared fixtures of the napari tests.

Widget tests need napari, pytest-qt and a display (a real one, Xvfb through
``xvfb-run -a`` / pytest-xvfb, or ``QT_QPA_PLATFORM=offscreen``); without them
they are skipped, not failed. Reader/writer tests run without a display.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

from ivote.data import synthetic_nuclei


def _display_reason() -> str | None:
    for module in ("napari", "pytestqt", "qtpy"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY")
        or os.environ.get("WAYLAND_DISPLAY")
        or os.environ.get("QT_QPA_PLATFORM") in ("offscreen", "minimal")
    ):
        return "no display: run under xvfb-run -a, with pytest-xvfb, or QT_QPA_PLATFORM=offscreen"
    return None


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``napari`` (or using a viewer) when napari, pytest-qt or a display is missing."""
    # Checked here, not at import: this conftest can be imported before
    # pytest-xvfb's pytest_configure has started Xvfb and set DISPLAY.
    reason = _display_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        # not ``"napari" in item.keywords``: the folder's name is a keyword of every test in it
        needs_viewer = "make_napari_viewer" in getattr(item, "fixturenames", ())
        if item.get_closest_marker("napari") is not None or needs_viewer:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def nuclei_2d():
    """A 256² synthetic tile at 0.5 µm/px with nuclei up to 6 µm, and a world offset."""
    sample = synthetic_nuclei((256, 256), spacing=(0.5, 0.5), radius=6.0, overlap=0.2, noise=0.05, seed=7)
    return sample, (12.5, -30.0)


@pytest.fixture(scope="session")
def nuclei_3d():
    """An anisotropic 16x64x64 volume at (2, 0.5, 0.5) µm with nuclei up to 5 µm, and a world offset.

    Small, because the NumPy voting takes seconds per volume on a 2-core CI machine.
    """
    sample = synthetic_nuclei((16, 64, 64), spacing=(2.0, 0.5, 0.5), radius=5.0, overlap=0.15, noise=0.05, seed=3)
    return sample, (-8.0, 4.0, 100.0)


@pytest.fixture
def to_world():
    """Pixel coordinates to world coordinates: ``points * scale + translate``."""

    def convert(points, scale, translate) -> np.ndarray:
        return np.asarray(points, dtype=float) * np.asarray(scale) + np.asarray(translate)

    return convert


@pytest.fixture
def numpy_backend(monkeypatch):
    """Widget tests run the NumPy reference (no compile time, the same on every machine)."""
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")


@pytest.fixture
def detect_widget():
    """``make(viewer, live=False)``: a docked "Detect nuclei" widget, live preview off unless asked."""

    def make(viewer, live=False):
        from ivote.napari._detect_widget import DetectWidget

        widget = DetectWidget(viewer)
        widget.live.value = live
        viewer.window.add_dock_widget(widget, name="Detect nuclei")
        return widget

    return make


@pytest.fixture
def count_refilters(monkeypatch):
    """Calls of ``Detections.with_threshold`` (the refilter of cached maxima), counted."""
    from ivote.detect._voting import Detections

    calls, real = [], Detections.with_threshold

    def counting(self, *args, **kwargs):
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Detections, "with_threshold", counting)
    return calls


@pytest.fixture
def slow_detector(monkeypatch):
    """The real detector, 0.15 s slower per pass, counting the passes it ran."""
    import time

    import ivote.detect

    real, passes = ivote.detect.iterative_voting, []

    def slow(image, **kwargs):
        callback = kwargs.pop("iter_callback")

        def slowed(index, n_passes):
            passes.append(index)
            time.sleep(0.15)
            callback(index, n_passes)

        return real(image, iter_callback=slowed, **kwargs)

    monkeypatch.setattr(ivote.detect, "iterative_voting", slow)
    return passes
