"""Screenshots of the napari docks: the user guide's pictures and the napari step of ``ivote demo``.

A tool of the source tree, not of the package: ``python tools/demo_screenshot.py --guide docs/images``
writes the user guide's screenshots, ``--image path.tif`` a screenshot of any image with its F1 against
``--truth``; ``ivote demo`` run from a source checkout loads it (``ivote.napari._demo_tool``).

:func:`screenshot_demo` never opens a window in the calling process: it starts
this file in a subprocess, under ``xvfb-run`` when there is no display but Xvfb
is installed, and skips (saying why) when napari, Qt or any display is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

__all__ = ["screenshot_demo", "start_screenshot_demo"]

_PREFIX = "SUMMARY: "
TIMEOUT_S = 900


def _display_available() -> bool:
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def screenshot_demo(sample_2d, out_dir) -> list[str]:
    """Open napari on the 2D sample, run the widget, save ``napari_detect_2d.png``.

    Parameters
    ----------
    sample_2d : SyntheticNuclei
        The demo's 2D sample (image, labels, centers, spacing, radius).
    out_dir : path-like
        Folder of the demo's outputs.

    Returns
    -------
    list of str
        Summary lines for the demo's report (or one line saying why it skipped).
    """
    return start_screenshot_demo(sample_2d, out_dir).result()


class _Screenshot:
    """A started screenshot subprocess (or the reason it did not start): :meth:`result` waits for its lines.

    As a context manager it stops the subprocess on leaving when its result was never asked
    (a stage of ``ivote demo`` raised): xvfb-run, Xvfb and napari are killed, the sample removed.
    """

    def __init__(self, lines=None, process=None, folder=None):
        self._lines, self._process, self._folder = lines, process, folder

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self) -> None:
        """Kill the subprocess and every process it started, if still running, and remove the sample."""
        try:
            if self._process is not None and self._process.poll() is None:
                _kill_tree(self._process)
                self._process.communicate()
        finally:
            if self._folder is not None:
                self._folder.cleanup()
                self._folder = None

    def result(self) -> list[str]:
        if self._lines is not None:
            return self._lines
        try:
            stdout, stderr = self._process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._lines = [f"napari screenshot: failed (no result within {TIMEOUT_S} s)"]
        else:
            lines = [line[len(_PREFIX):] for line in stdout.splitlines() if line.startswith(_PREFIX)]
            if self._process.returncode != 0 or not lines:
                last = (stderr.strip().splitlines() or ["no output"])[-1]
                lines = [f"napari screenshot: failed (exit {self._process.returncode}: {last})"]
            self._lines = lines
        finally:
            self.close()
        return self._lines


def _kill_tree(process) -> None:
    """Stop ``process`` and every process of its session (it was started as a session leader).

    Killing xvfb-run alone leaves its Xvfb and napari running. Its children (Linux: from
    /proc) are asked to stop first, so that xvfb-run then stops Xvfb and removes its folder
    in /tmp; whatever is left of the session is then killed (elsewhere: the process only).
    """
    try:
        children = [int(pid) for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]
    except (OSError, ValueError):
        children = []
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if children:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    if hasattr(os, "killpg"):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # every process of the session already ended
            pass
    else:
        process.kill()


def start_screenshot_demo(sample_2d, out_dir) -> _Screenshot:
    """:func:`screenshot_demo` started in the background: ``ivote demo`` runs its other
    stages while napari starts (several seconds of imports in a process of its own), then
    calls ``.result()`` for the summary lines; used as a context manager (``with
    start_screenshot_demo(...) as screenshot``) so that a stage that raises stops it."""
    missing = [m for m in ("napari", "qtpy") if importlib.util.find_spec(m) is None]
    if missing:
        return _Screenshot([f"napari screenshot: skipped ({', '.join(missing)} not installed; "
                            "pip install 'napari-ivote[all]')"])
    command = [sys.executable, str(Path(__file__).resolve())]
    if not _display_available():
        xvfb = shutil.which("xvfb-run")
        if xvfb is None:
            return _Screenshot(["napari screenshot: skipped (no display and no Xvfb; "
                                "install xvfb or run with a display)"])
        command = [xvfb, "-a", "-s", "-screen 0 1600x1000x24"] + command
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    folder = tempfile.TemporaryDirectory()
    sample_path = Path(folder.name) / "sample.npz"
    np.savez(sample_path, image=sample_2d.image, spacing=np.asarray(sample_2d.spacing),
             radius=sample_2d.radius, centers=sample_2d.centers)
    command += ["--sample", str(sample_path), "--out", str(out_dir / "napari_detect_2d.png")]
    try:
        # its own session (POSIX; ignored on Windows), so that _kill_tree reaches Xvfb and napari too
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
    except OSError as error:
        folder.cleanup()
        return _Screenshot([f"napari screenshot: failed ({error})"])
    return _Screenshot(process=process, folder=folder)


# ----------------------------------------------------------------------------
# the subprocess: a viewer, the widget, screenshots
# ----------------------------------------------------------------------------


def _open_viewer(image, spacing, name, *, polarity="bright", size=(1400, 850), units="um"):
    import napari

    from ivote.napari._detect_widget import DetectWidget

    viewer = napari.Viewer(show=True, title="napari-ivote: Detect nuclei")
    viewer.window._qt_window.resize(*size)
    rgb = image.ndim == 3 and image.shape[-1] in (3, 4) and len(spacing) == 2
    limits = None if rgb else tuple(float(v) for v in np.percentile(image, (0.5, 99.8)))
    viewer.add_image(image, name=name, scale=spacing, units=(units,) * len(spacing), colormap="gray", rgb=rgb,
                     contrast_limits=limits)
    widget = DetectWidget(viewer)
    widget.live.value = False
    if widget.polarity.enabled:
        widget.polarity.value = polarity
    viewer.window.add_dock_widget(widget, name="Detect nuclei", area="right")
    viewer.reset_view()
    return viewer, widget


def _wait(widget, timeout=TIMEOUT_S):
    """Process events until the widget's last run has finished; True when it ended in time."""
    from qtpy.QtWidgets import QApplication

    deadline = time.monotonic() + timeout
    QApplication.processEvents()
    while widget.busy and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.005)
    for _ in range(5):  # the main-thread hand-back
        QApplication.processEvents()
    return not widget.busy


def _shoot(viewer, path, *, max_width=None):
    """Screenshot of the whole window; ``max_width`` makes a small palette PNG (for docs)."""
    from qtpy.QtWidgets import QApplication

    from qtpy.QtWidgets import QScrollArea

    for scroll in viewer.window._qt_window.findChildren(QScrollArea):  # docks shown from their first row
        scroll.verticalScrollBar().setValue(0)
    for _ in range(20):  # let the canvas and the dock settle
        QApplication.processEvents()
        time.sleep(0.01)
    viewer.screenshot(str(path), canvas_only=False, flash=False)
    if max_width:
        from PIL import Image

        with Image.open(path) as shot:
            shot = shot.convert("RGB")
            if shot.width > max_width:
                shot = shot.resize((max_width, round(shot.height * max_width / shot.width)), Image.LANCZOS)
            shot.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return str(path)


def _run(widget, radius, *, preview=False):
    widget.radius.value = radius
    widget.preview() if preview else widget.run()
    _wait(widget)
    return widget.points_layer() if not preview else True


def _summary(text):
    print(_PREFIX + text, flush=True)


def _demo(sample_path, out):
    from ivote._backend import backend_name
    from ivote.metrics import match_points

    sample = np.load(sample_path)
    spacing = tuple(float(s) for s in sample["spacing"])
    radius = float(sample["radius"])
    viewer, widget = _open_viewer(sample["image"], spacing, "sample_2d")
    t0 = time.perf_counter()
    result = _run(widget, radius)
    seconds = time.perf_counter() - t0
    if result is None:
        raise SystemExit(f"the widget produced no result: {widget.status.value}")
    layer = widget.points_layer()
    match = match_points(layer.data, sample["centers"], tolerance=0.5 * radius, spacing=spacing)
    viewer.reset_view()
    path = _shoot(viewer, out)
    _summary(f"napari widget: {len(layer.data)} nuclei in {seconds:.1f} s ({backend_name()}), "
             f"F1 {match.f1:.3f} vs truth; screenshot -> {Path(path).name}")
    viewer.close()


def _guide(folder):
    """The user guide's screenshots, on the synthetic samples (never on evaluation data)."""
    from ivote.data import sample_2d, sample_3d

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    s2 = sample_2d()
    shoot = partial(_shoot, max_width=1000)
    viewer, widget = _open_viewer(s2.image, s2.spacing, "synthetic nuclei 2D", size=(1400, 760))
    shots = [shoot(viewer, folder / "01-open.png")]
    _run(widget, 2.5, preview=True)  # dragged too small: nuclei split into several points
    shots.append(shoot(viewer, folder / "02-radius-too-small.png"))
    _run(widget, s2.radius)
    shots.append(shoot(viewer, folder / "03-run.png"))
    widget.threshold.value = widget.threshold.min  # every local maximum, background ones too
    shots.append(shoot(viewer, folder / "04-threshold.png"))
    shots.append(_measure_shot(viewer, widget, "synthetic nuclei 2D", folder / "07-measure.png", shoot))
    viewer.close()
    s3 = sample_3d()
    crop = s3.image[:, :96, :96]  # a quarter of the sample: the NumPy Run takes about 2 minutes
    viewer, widget = _open_viewer(crop, s3.spacing, "synthetic nuclei 3D", size=(1400, 760))
    viewer.dims.set_point(0, 24 * s3.spacing[0])
    _run(widget, s3.radius, preview=True)  # the slab around plane 24
    shots.append(shoot(viewer, folder / "05-3d-preview.png"))
    _run(widget, s3.radius)
    points = widget.points_layer()
    points.size = points.size / 3  # centres, not nucleus-sized balls, in the dense 3D picture
    viewer.dims.ndisplay = 3
    viewer.reset_view()
    camera = viewer.scene.camera if hasattr(viewer, "scene") else viewer.camera
    camera.angles = (5, 35, 60)  # after reset_view, which resets them
    camera.zoom *= 0.65
    shots.append(shoot(viewer, folder / "06-3d-view.png"))
    viewer.close()
    for shot in shots:
        _summary(shot)


def _measure_shot(viewer, detect, name, path, shoot):
    """Segment from the Run's points, then Label and count with the measurements table (docks tabbed)."""
    from ivote.napari._components_widget import LabelCountWidget
    from ivote.napari._segment_widget import SegmentWidget

    detect.auto_threshold.value = True
    viewer.layers.remove(f"nuclei (preview): {name}") if f"nuclei (preview): {name}" in viewer.layers else None
    segment = SegmentWidget(viewer)
    viewer.window.add_dock_widget(segment, name="Segment nuclei", area="right", tabify=True)
    segment.run()
    _wait(segment)
    count = LabelCountWidget(viewer)
    viewer.window.add_dock_widget(count, name="Label and count", area="right", tabify=True)
    count.layer.value = viewer.layers[f"labels: {name}"]
    count.run()
    _wait(count)
    viewer.layers[f"nuclei: {name}"].visible = False
    viewer.layers[f"labels: {name}"].opacity = 0.45
    _summary(f"segment: {segment.status.value}; count: {count.status.value}")
    return shoot(viewer, path)


def _any_image(path, out, radius, polarity, truth=None):
    from ivote.io import read_image

    image, spacing = read_image(path)
    spatial = image.ndim - 1 if image.ndim == 3 and image.shape[-1] in (3, 4) else image.ndim
    units = "um" if spacing else "pixel"
    spacing = spacing or (1.0,) * spatial
    viewer, widget = _open_viewer(image, spacing, Path(path).stem, polarity=polarity, units=units)
    result = _run(widget, radius)
    viewer.reset_view()
    if truth and result:
        from ivote.metrics import match_points

        centres = np.loadtxt(truth, delimiter=",", skiprows=1, ndmin=2).reshape(-1, len(spacing))
        match = match_points(widget.points_layer().data, centres, tolerance=0.5 * radius / min(spacing), spacing=None)
        _summary(f"vs {len(centres)} true centres: precision {match.precision:.3f}, recall {match.recall:.3f}, "
                 f"F1 {match.f1:.3f} (tolerance r/2)")
    _summary(f"{widget.status.value}; screenshot -> {_shoot(viewer, out)}")
    viewer.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="napari screenshots of the Detect nuclei widget")
    parser.add_argument("--sample", help=".npz with image, spacing, radius, centers (from screenshot_demo)")
    parser.add_argument("--guide", help="write the user guide's screenshots into this folder")
    parser.add_argument("--image", help="any TIFF/PNG image")
    parser.add_argument("--radius", type=float, default=6.0, help="radius for --image, in its units")
    parser.add_argument("--polarity", default="bright")
    parser.add_argument("--truth", help="CSV of true centres (pixels) for --image: prints the F1")
    parser.add_argument("--out", default="napari_detect.png")
    args = parser.parse_args(argv)
    if args.sample:
        _demo(args.sample, args.out)
    elif args.guide:
        _guide(args.guide)
    elif args.image:
        _any_image(args.image, args.out, args.radius, args.polarity, args.truth)
    else:
        parser.error("give --sample, --guide or --image")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
