"""The napari step of ``ivote demo`` says why it skips (the full run is exercised by ``ivote demo``)."""

from __future__ import annotations

import importlib.util

from ivote.data import synthetic_nuclei
from ivote.napari import _demo_screenshot


def _sample():
    return synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=4.0, seed=0)


def test_skips_without_display_or_xvfb(monkeypatch, tmp_path):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(_demo_screenshot.sys, "platform", "linux")
    monkeypatch.setattr(_demo_screenshot.shutil, "which", lambda name: None)
    [line] = _demo_screenshot.screenshot_demo(_sample(), tmp_path)
    assert line.startswith("napari screenshot: skipped") and "no display and no Xvfb" in line
    assert not any(tmp_path.iterdir())


def test_skips_without_napari(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(_demo_screenshot.importlib.util, "find_spec",
                        lambda name, *a: None if name == "napari" else real(name, *a))
    [line] = _demo_screenshot.screenshot_demo(_sample(), tmp_path)
    assert "skipped" in line and "napari" in line


def test_reports_a_failing_subprocess(monkeypatch, tmp_path):
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr(_demo_screenshot.sys, "executable", "false")  # exits 1 at once, prints nothing
    [line] = _demo_screenshot.screenshot_demo(_sample(), tmp_path)
    assert line.startswith("napari screenshot: failed (exit 1")
