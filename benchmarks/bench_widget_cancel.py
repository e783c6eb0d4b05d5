"""Time from Cancel to an idle "Detect nuclei" widget during a long CPU Run: in a thread (the core stops at the next
voting pass) against a child process (killed at once), and what the child process costs a Run that is not cancelled.

Opens a napari viewer (needs a display: ``xvfb-run -a``), docks the widget on a synthetic tile, clicks Run at a
large radius, waits ``--wait`` seconds, clicks Cancel and measures until the widget is idle; then times a whole Run
at a small radius both ways. The CPU backend is the default one (Numba when installed).

    xvfb-run -a python benchmarks/bench_widget_cancel.py [--size 512] [--radius 40] [--wait 4]
"""

from __future__ import annotations

import argparse
import datetime
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--radius", type=float, default=40.0, help="µm, at 0.5 µm/px")
    parser.add_argument("--wait", type=float, default=4.0, help="seconds between Run and Cancel")
    args = parser.parse_args(argv)

    import napari
    from qtpy.QtWidgets import QApplication

    from ivote._backend import backend_name
    from ivote.data import synthetic_nuclei
    from ivote.napari import _detect_jobs
    from ivote.napari._detect_widget import DetectWidget

    sample = synthetic_nuclei((args.size,) * 2, spacing=(0.5, 0.5), radius=6.0, overlap=0.2, noise=0.05, seed=11)
    viewer = napari.Viewer(show=True)
    viewer.add_image(sample.image, name="tile", scale=sample.spacing, units=("um", "um"))
    widget = DetectWidget(viewer)
    widget.live.value = False
    viewer.window.add_dock_widget(widget, name="Detect nuclei")
    app = QApplication.instance()

    def until_idle(limit=3600.0):
        start = time.perf_counter()
        while widget.busy and time.perf_counter() - start < limit:
            app.processEvents()
            time.sleep(0.005)
        return time.perf_counter() - start

    def pause(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.005)

    rows = []
    for path, work in (("thread", float("inf")), ("child process", 0.0)):
        _detect_jobs.LONG_RUN_WORK = work
        widget.radius.value = min(args.radius, widget.radius.max)
        widget.run()
        pause(args.wait)
        passes = widget.runner.job.progress.n if widget.runner.job is not None else None
        widget.cancel()
        cancel_to_idle = until_idle()
        widget.radius.value = 6.0
        start = time.perf_counter()
        widget.run()
        until_idle()
        whole_run = time.perf_counter() - start
        rows.append((path, passes, cancel_to_idle, whole_run, len(viewer.layers["nuclei: tile"].data)))

    print(f"# {datetime.date.today()}  {backend_name()}  {args.size}² at 0.5 µm/px; Cancel {args.wait:g} s into a "
          f"Run at radius {min(args.radius, widget.radius.max):g} µm; whole Run at 6 µm")
    print(f"{'Run in':<14} {'passes done':>11} {'Cancel→idle (s)':>16} {'Run r=6 µm (s)':>15} {'nuclei':>7}")
    for path, passes, cancel_to_idle, whole_run, count in rows:
        print(f"{path:<14} {passes!s:>11} {cancel_to_idle:>16.2f} {whole_run:>15.2f} {count:>7}")
    viewer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
