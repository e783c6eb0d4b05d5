"""A long CPU Run from napari started by a script without an ``if __name__ == "__main__":`` guard runs the script
once: the Run's child process does not import the user's ``__main__`` (multiprocessing's spawn did, and the
script opened a second viewer)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

pytestmark = pytest.mark.napari

SCRIPT = textwrap.dedent('''
    import sys
    from pathlib import Path

    import numpy as np
    import napari
    from qtpy.QtCore import QTimer
    from qtpy.QtWidgets import QApplication

    from ivote.data import synthetic_nuclei
    from ivote.napari import _detect_jobs, _process
    from ivote.napari._detect_widget import DetectWidget

    log = Path(sys.argv[1])
    with open(log, "a") as fh:
        fh.write("script started\\n")
    _detect_jobs.LONG_RUN_WORK = 0  # this small Run counts as long: it goes to a child process
    real = _process.run_in_process

    def logged(*args):
        with open(log, "a") as fh:
            fh.write("run in a child process\\n")
        return real(*args)

    _process.run_in_process = logged
    sample = synthetic_nuclei((64, 64), radius=4.0, seed=5)
    viewer = napari.Viewer(show=False)
    viewer.add_image(sample.image, name="cells")
    widget = DetectWidget(viewer)
    widget.live.value = False
    viewer.window.add_dock_widget(widget)

    def done(result):
        with open(log, "a") as fh:
            fh.write(f"result {len(viewer.layers['nuclei: cells'].data)} nuclei\\n")
        QTimer.singleShot(0, QApplication.instance().quit)

    widget.finished_result.connect(done)
    widget.radius.value = 4.0
    widget.run()
    QTimer.singleShot(60_000, QApplication.instance().quit)
    QApplication.instance().exec()
''')


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    if not os.environ.get("DISPLAY") and os.environ.get("QT_QPA_PLATFORM") != "offscreen":
        pytest.skip("needs a display (Xvfb)")
    script, log = tmp_path / "launch.py", tmp_path / "log.txt"
    script.write_text(SCRIPT)  # no main guard, as many users' launch scripts
    env = dict(os.environ, IVOTE_BACKEND="numpy",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")]))
    completed = subprocess.run([sys.executable, str(script), str(log)], env=env, cwd=tmp_path, timeout=170,
                               capture_output=True, text=True)
    lines = log.read_text().splitlines() if log.exists() else []
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert lines.count("script started") == 1, (lines, completed.stderr[-2000:])
    assert "run in a child process" in lines and any(line.startswith("result ") for line in lines), lines
    assert "bootstrapping" not in completed.stderr
