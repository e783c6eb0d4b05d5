""""Run on folder…": the Detect widget's current settings on every image of a folder (a plain loop).

One points CSV per image (``<stem>_nuclei.csv``, written atomically) and a
summary table of counts (``summary.csv`` beside them, and a table in the widget).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from magicgui.widgets import CheckBox, Container, FileEdit, PushButton, Table

from ..io import read_image, write_atomic, write_points_csv
from ._runner import Runner
from ._units import unit_name
from ._widgets_common import Status

IMAGE_SUFFIXES = (".tif", ".tiff", ".png", ".jpg", ".jpeg", ".bmp")


def folder_images(folder) -> list[Path]:
    """The images of a folder (not its sub-folders), sorted by name."""
    return sorted(p for p in Path(folder).iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def detect_folder(images, out_dir, settings: dict, check=None) -> list[dict]:
    """Detect nuclei in every image with ``settings``; write one CSV each; return the summary rows.

    ``settings["radius"]`` is a radius in the images' units, or ``'auto'``: each image's own estimate
    (``iterative_voting(radius='auto')``), reported in its row and its CSV's ``# radius`` line.

    ``check(done, total)`` is called before each image and forwarded to the
    detector (raising from it stops the loop). An image that fails gets its
    error in the summary; the others still run.
    """
    from .. import detect

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for index, path in enumerate(images):
        if check is not None:
            check(index, len(images))
        start = time.perf_counter()
        row = {"image": path.name, "nuclei": "", "radius": "", "seconds": "", "output": "", "error": ""}
        try:
            image, spacing = read_image(path)
            rgb = image.ndim == 3 and image.shape[-1] in (3, 4) and image.shape[0] > 4
            spatial = image.ndim - (1 if rgb else 0)
            spacing = spacing or (settings["spacing"] if settings.get("spacing") and
                                  len(settings["spacing"]) == spatial else None)
            found = detect.iterative_voting(
                image, radius=settings["radius"], spacing=spacing, polarity=settings["polarity"],
                threshold=settings["threshold"] if settings["threshold"] is not None else "none",
                iter_callback=(lambda i, n: check(index, len(images))) if check is not None else None,
                detector=settings.get("detector"),
                **({"blur": settings["blur"]} if settings.get("blur") else {}))
            output = write_points_csv(out_dir / f"{path.stem}_nuclei.csv", found.points, found.scores,
                                      spacing=spacing, units=unit_name(settings.get("unit")) if spacing else None,
                                      radius=found.radius, radius_estimated=found.radius_estimated)
            row.update(nuclei=len(found.points), radius=round(float(found.radius), 4), output=output.name)
        except (ValueError, OSError, MemoryError) as exc:
            row["error"] = str(exc)
        row["seconds"] = round(time.perf_counter() - start, 2)
        rows.append(row)
    if check is not None:
        check(len(images), len(images))
    return rows


def write_summary(path, rows) -> Path:
    """The summary table as CSV (atomically)."""

    def write(tmp):
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=["image", "nuclei", "radius", "seconds", "output", "error"],
                                    lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)

    return write_atomic(path, write)


class BatchPanel(Container):
    """Folder in, folder out, a Run button and the summary table; settings come from the Detect widget."""

    def __init__(self, detect_widget, tooltip: str):
        self.detect_widget = detect_widget
        self.folder = FileEdit(mode="d", label="folder", tooltip="Folder of images (TIFF, PNG, JPEG).")
        self.out = FileEdit(mode="d", label="output", tooltip="Where the CSVs and summary.csv go "
                                                              "(default: <folder>/ivote).")
        self.auto_radius = CheckBox(text="estimate the radius per image", value=False, tooltip=(
            "Each image gets its own radius, estimated from it as the Estimate button does (radius='auto'), "
            "instead of the slider's; for folders of mixed magnifications. The summary lists each radius."))
        self.run_button = PushButton(text="Run on this folder", tooltip=tooltip)
        self.cancel_button = PushButton(text="Cancel folder", enabled=False, tooltip="Stop after the current pass.")
        self.status = Status()
        self.table = Table(value={"image": [], "nuclei": [], "radius": []}, label="summary", visible=False)
        buttons = Container(widgets=[self.run_button, self.cancel_button], layout="horizontal", labels=False)
        super().__init__(widgets=[self.folder, self.out, self.auto_radius, buttons, self.status, self.table],
                         labels=True)
        self.runner = None  # attach(): the Detect widget's native widget exists only after its own __init__
        self.rows = None
        self.run_button.changed.connect(lambda: self.run())
        self.cancel_button.changed.connect(lambda: self.runner.cancel())

    def attach(self):
        self.runner = Runner(self.detect_widget.viewer, self.detect_widget.native, self.status.show)

    @property
    def busy(self) -> bool:
        return self.runner.busy

    def run(self, folder=None, out=None):
        folder = Path(folder or self.folder.value)
        if not folder.is_dir() or str(folder) in ("", "."):
            return self.status.show("Choose a folder of images first.", error=True)
        images = folder_images(folder)
        if not images:
            return self.status.show(f"No images (TIFF, PNG, JPEG) in {folder}.", error=True)
        settings = self.detect_widget.settings()
        if self.auto_radius.value:
            settings["radius"] = "auto"
        elif not settings["radius"] or settings["radius"] <= 0:
            return self.status.show("Set the radius in Detect first.", error=True)
        out = Path(out or (self.out.value if str(self.out.value) not in ("", ".") else folder / "ivote"))
        self.cancel_button.enabled = True
        self.status.show(f"{len(images)} images…")
        self.runner.start(lambda job: detect_folder(images, out, settings, job.check),
                          lambda rows: self._show(rows, out), desc=f"Detecting nuclei in {folder.name}",
                          total=len(images), on_end=lambda: setattr(self.cancel_button, "enabled", False))

    def _show(self, rows, out):
        self.rows = rows
        summary = write_summary(Path(out) / "summary.csv", rows)
        self.table.value = {key: [r[key] for r in rows] for key in ("image", "nuclei", "radius")}
        self.table.visible = True
        failed = sum(bool(r["error"]) for r in rows)
        total = sum(r["nuclei"] for r in rows if r["nuclei"] != "")
        self.status.show(f"{len(rows)} images, {total} nuclei" + (f", {failed} failed" if failed else "")
                         + f"; summary in {summary}", error=bool(failed))
