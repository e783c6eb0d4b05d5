"""The napari step of ``ivote demo`` (``tools/demo_screenshot.py``) says why it skips (the full run is exercised
by ``ivote demo``)."""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import pytest

from ivote.data import synthetic_nuclei
from ivote.napari import _demo_tool

_demo_screenshot = _demo_tool.load_tool()  # tools/demo_screenshot.py
if _demo_screenshot is None:
    pytest.skip("tools/demo_screenshot.py is not beside this installation", allow_module_level=True)


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


def test_runs_in_the_background_until_its_result_is_asked(monkeypatch, tmp_path):
    """``ivote demo`` starts napari's process first and runs its stages meanwhile: the start
    returns while the subprocess still runs; ``result()`` waits for its summary and removes
    the sample it was handed."""
    release = tmp_path / "release"
    fake = tmp_path / "fake_python"
    # waits until the test releases it (at most ~20 s, so a start that waited for it fails, not hangs)
    fake.write_text(f"#!/bin/sh\nn=0\nwhile [ ! -e {release} ] && [ $n -lt 1000 ]; do sleep 0.02; n=$((n+1)); done\n"
                    "[ -e " + str(release) + " ] && echo 'SUMMARY: napari widget: ok'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr(_demo_screenshot.sys, "executable", str(fake))
    started = _demo_screenshot.start_screenshot_demo(_sample(), tmp_path / "out")
    assert started._process.poll() is None  # still waiting: the caller goes on meanwhile
    sample_folder = started._folder.name
    release.touch()
    assert started.result() == ["napari widget: ok"]
    assert started.result() == ["napari widget: ok"]  # asked again: the same lines
    assert not os.path.exists(sample_folder)


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _fake_xvfb_run(monkeypatch, tmp_path):
    """A shell script in napari's place that starts a child and waits for it, as xvfb-run
    starts Xvfb (which does not hold the pipes); returns the file its child's pid goes to."""
    child = tmp_path / "child.pid"
    fake = tmp_path / "fake_xvfb_run"
    fake.write_text(f"#!/bin/sh\nsleep 60 >/dev/null 2>&1 &\necho $! > {child}\nwait\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr(_demo_screenshot.sys, "executable", str(fake))
    return child


def _child_pid(child) -> int:
    deadline = time.monotonic() + 20
    while not (child.exists() and child.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return int(child.read_text())


def _ended(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:  # its reaper may take a moment
        time.sleep(0.05)
    return not _running(pid)


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script stands in for xvfb-run")
def test_a_stage_that_raises_stops_the_subprocess_and_what_it_started(monkeypatch, tmp_path):
    """``ivote demo`` leaves no napari, Xvfb or sample behind when a stage raises: the
    screenshot's context stops xvfb-run (here a shell script) and the process it started."""
    child = _fake_xvfb_run(monkeypatch, tmp_path)
    with pytest.raises(RuntimeError, match="a stage failed"):
        with _demo_screenshot.start_screenshot_demo(_sample(), tmp_path / "out") as started:
            sample_folder, process = started._folder.name, started._process
            pid = _child_pid(child)
            raise RuntimeError("a stage failed")
    assert process.poll() is not None
    assert _ended(pid)
    assert not os.path.exists(sample_folder)


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script stands in for xvfb-run")
def test_a_subprocess_past_its_time_is_stopped_with_what_it_started(monkeypatch, tmp_path):
    """Past ``TIMEOUT_S`` the result says so and xvfb-run's children are stopped too (killing
    xvfb-run alone left Xvfb and napari running)."""
    child = _fake_xvfb_run(monkeypatch, tmp_path)
    monkeypatch.setattr(_demo_screenshot, "TIMEOUT_S", 1)
    started = _demo_screenshot.start_screenshot_demo(_sample(), tmp_path / "out")
    pid = _child_pid(child)
    assert started.result() == ["napari screenshot: failed (no result within 1 s)"]
    assert _ended(pid)


def test_the_demo_step_skips_without_the_source_tree(monkeypatch, tmp_path):
    monkeypatch.setattr(_demo_tool, "load_tool", lambda: None)
    with _demo_tool.start_screenshot_demo(_sample(), tmp_path) as step:
        [line] = step.result()
    assert line.startswith("napari screenshot: skipped") and "tools/demo_screenshot.py" in line
