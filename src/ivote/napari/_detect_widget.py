"""The "Detect nuclei" dock widget: a form, a worker, a Points layer (logic in _detect_logic)."""

from __future__ import annotations

from functools import partial

import numpy as np
from napari.layers import Image, Points
from napari.qt.threading import create_worker
from napari.utils import progress
from qtpy.QtCore import QSignalBlocker, QTimer, Signal
from qtpy.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QHBoxLayout,
                            QLabel, QPushButton, QWidget)
from superqt import QLabeledDoubleSlider

from .. import _backend
from . import _detect_logic as logic
from ._io import write_points

DEBOUNCE_MS = 300


class DetectWidget(QWidget):
    """Find nuclei in an image layer by iterative voting; live preview while the radius moves."""

    progressed = Signal(int, int, int)  # generation, pass, n_passes (emitted from the worker)
    finished_result = Signal(object)  # DetectResult or None (after every run; for tests and the demo)

    def __init__(self, napari_viewer):
        super().__init__()
        self.viewer = napari_viewer
        self._generation = 0
        self._result = None  # cached DetectResult of the current settings
        self._geometry = None
        self._workers = set()  # running workers, also superseded ones finishing their pass
        self._progress = None
        self._debounce = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._debounce.timeout.connect(self.preview)

        self.image_combo, self.polarity = QComboBox(), QComboBox()
        self.polarity.addItems(["bright", "dark"])
        self.radius, self.radius_label = QLabeledDoubleSlider(), QLabel("radius")
        self.radius.setToolTip("Largest nucleus radius: about 1.5x the typical one. Nuclei found twice: "
                               "increase it; touching nuclei merged: decrease it.")
        self.blur = QDoubleSpinBox(minimum=0.0, maximum=100.0, singleStep=0.5, specialValueText="auto")
        self.threshold, self.otsu = QLabeledDoubleSlider(), QCheckBox("Otsu", checked=True)
        self.live = QCheckBox("live preview", checked=True)
        self.run_button, self.cancel_button = QPushButton("Run"), QPushButton("Cancel", enabled=False)
        self.export_button = QPushButton("Export points…")
        self.status, self.backend_label = QLabel("", wordWrap=True), QLabel(_backend.backend_name())
        form = QFormLayout(self)
        for row in (("image", self.image_combo), (self.radius_label, self.radius), ("polarity", self.polarity),
                    ("blur", self.blur), ("log₁₀ score ≥", _row(self.threshold, self.otsu)), (self.live,),
                    (_row(self.run_button, self.cancel_button, self.export_button),), (self.status,),
                    ("backend", self.backend_label)):
            form.addRow(*row)

        self.image_combo.currentTextChanged.connect(self._on_image_changed)
        self.radius.valueChanged.connect(self._schedule_preview)
        self.radius.sliderReleased.connect(self._preview_now)
        self.polarity.currentTextChanged.connect(self._schedule_preview)
        self.blur.valueChanged.connect(self._schedule_preview)
        self.threshold.valueChanged.connect(self._on_threshold_moved)
        self.otsu.toggled.connect(self._apply_threshold)
        self.live.toggled.connect(lambda on: on or self._debounce.stop())
        self.run_button.clicked.connect(self.run)
        self.cancel_button.clicked.connect(self.cancel)
        self.export_button.clicked.connect(self.export)
        self.progressed.connect(self._on_progress)
        for event in (self.viewer.layers.events.inserted, self.viewer.layers.events.removed):
            event.connect(self._refresh_images)
        self.viewer.dims.events.current_step.connect(self._on_plane_changed)
        self._refresh_images()

    # -- inputs --------------------------------------------------------------
    def image_layer(self) -> Image | None:
        name = self.image_combo.currentText()
        layer = self.viewer.layers[name] if name in self.viewer.layers else None
        return layer if isinstance(layer, Image) else None

    def _refresh_images(self, *_):
        names = [layer.name for layer in self.viewer.layers if isinstance(layer, Image)]
        current = self.image_combo.currentText()
        with QSignalBlocker(self.image_combo):  # adding our own Points layer must not reset the cache
            self.image_combo.clear()
            self.image_combo.addItems(names)
            self.image_combo.setCurrentText(current if current in names else (names[-1] if names else ""))
        if self.image_combo.currentText() != current:
            self._on_image_changed()

    def _on_image_changed(self, *_):
        self._generation += 1  # results for the previous image are stale
        self._result, self._geometry = None, None
        layer = self.image_layer()
        if layer is None:
            return
        try:
            self._geometry = logic.image_geometry(layer.data.shape if not layer.multiscale else layer.data[0].shape,
                                                  rgb=layer.rgb, scale=layer.scale, translate=layer.translate,
                                                  units=layer.units, metadata=layer.metadata)
        except ValueError as exc:
            return self._message(str(exc), error=True)
        low, high, default = self._geometry.radius_range()
        with QSignalBlocker(self.radius):
            self.radius.setRange(low, high)
            self.radius.setValue(default if not low <= self.radius.value() <= high else self.radius.value())
        self.radius_label.setText(f"radius ({self._geometry.unit})")
        self.blur.setSuffix(f" {self._geometry.unit}")
        self._message("")
        self._schedule_preview()

    def _request(self, preview: bool) -> logic.DetectRequest | None:
        layer, radius = self.image_layer(), self.radius.value()
        message = logic.validate_settings(radius, has_image=layer is not None and self._geometry is not None)
        if message:
            return self._message(message, error=True)
        data = layer.data[0] if layer.multiscale else layer.data
        offset = None
        if preview:  # 3D: a slab around the displayed plane; big planes: a window around the view
            plane = layer.world_to_data(self.viewer.dims.point)[0] if self._geometry.ndim == 3 else None
            window, offset = logic.preview_window(self._geometry, radius, plane=plane, view=layer.corner_pixels,
                                                  max_plane_pixels=logic.preview_plane_budget())
            data = data[window]
        self._generation += 1
        return logic.DetectRequest(np.asarray(data), radius, self._geometry.scale, self.polarity.currentText(),
                                   self.blur.value() or None, offset, self._generation, preview)

    # -- running -------------------------------------------------------------
    def _schedule_preview(self, *_):
        if self.live.isChecked() and self.image_layer() is not None:
            self._debounce.start()

    def _preview_now(self):
        if self.live.isChecked():
            self._debounce.stop()
            self.preview()

    def _on_plane_changed(self, event=None):
        if self._geometry is not None and self._geometry.ndim == 3 and self._result and self._result.preview:
            self._schedule_preview()

    def preview(self):
        self._start(preview=True)

    def run(self):
        self._start(preview=False)

    def _start(self, preview: bool):
        request = self._request(preview)
        if request is None:
            return
        generation = request.generation
        work = partial(logic.run_guarded, request, lambda: generation == self._generation,
                       lambda done, total: self.progressed.emit(generation, done, total))
        self._close_progress()
        self._progress = progress(total=0, desc="Detecting nuclei" + (" (preview)" if preview else ""))
        self.cancel_button.setEnabled(True)
        self._message("previewing…" if preview else "running on the whole image…")
        worker = create_worker(work, _start_thread=False)
        worker.returned.connect(lambda result: self._on_returned(generation, result))
        worker.finished.connect(lambda: self._workers.discard(worker))
        self._workers.add(worker)
        worker.start()

    @property
    def busy(self) -> bool:
        """True while any worker (current or superseded) is still running."""
        return bool(self._workers)

    def cancel(self):
        self._generation += 1
        self._close_progress()
        self.cancel_button.setEnabled(False)
        self._message("cancelled")

    def _on_progress(self, generation, done, total):
        if generation == self._generation and self._progress is not None:
            self._progress.total, self._progress.n = total, done
            self._progress.refresh()

    def _close_progress(self):
        if self._progress is not None:
            self._progress.close()
            self._progress = None

    def _on_returned(self, generation, result):
        if generation != self._generation:  # stale: settings, layer or Cancel moved on
            return
        self._close_progress()
        self.cancel_button.setEnabled(False)
        if isinstance(result, Exception):
            self._message(f"Detection failed: {result}", error=True)
            return self.finished_result.emit(None)
        if result is None:
            self._message("cancelled")
            return self.finished_result.emit(None)
        self._result = result
        low, high = logic.log_threshold_range(result)
        with QSignalBlocker(self.threshold):
            self.threshold.setRange(low, high)
        self._apply_threshold()
        self.finished_result.emit(result)

    # -- output --------------------------------------------------------------
    def _on_threshold_moved(self, *_):
        with QSignalBlocker(self.otsu):
            self.otsu.setChecked(False)
        self._apply_threshold()

    def _apply_threshold(self, *_):
        if self._result is None:
            return
        value = self.threshold.value()
        manual = None if value <= self.threshold.minimum() else 10**value  # fully left keeps every maximum
        points, scores, applied = self._result.points("otsu" if self.otsu.isChecked() else manual)
        if self.otsu.isChecked() and applied > 0 and np.isfinite(applied):
            with QSignalBlocker(self.threshold):
                self.threshold.setValue(np.log10(applied))
        image = self.image_layer()
        state = logic.points_layer_state(self._geometry, self._result.detections.radius, points, scores,
                                         image_name=image.name, score_range=logic.score_range(self._result))
        logic.show_points(self.viewer.layers, state, Points)
        self.viewer.layers.selection.active = image
        kind = logic.result_kind(self._result, self._geometry)
        self._message(f"{len(points)} nuclei ({kind}, {self._result.seconds:.2f} s); score ≥ {applied:.3g}")

    def points_layer(self) -> Points | None:
        image = self.image_layer()
        name = logic.points_layer_name(image.name) if image is not None else None
        layer = self.viewer.layers[name] if name in self.viewer.layers else None
        return layer if isinstance(layer, Points) else None

    def export(self, path: str | None = None):
        layer = self.points_layer()
        if layer is None:
            return self._message("Nothing to export yet: run the detection first.", error=True)
        if not path:
            suggested = f"{layer.metadata.get('ivote_image', 'nuclei')}_nuclei.csv"
            path, _ = QFileDialog.getSaveFileName(self, "Export points", suggested, "CSV (*.csv)")
        if path:
            data, attributes, _ = layer.as_layer_data_tuple()
            self._message(f"exported {len(data)} points to {write_points(path, data, attributes)[0]}")

    def _message(self, text: str, error: bool = False):
        self.status.setText(text)
        self.status.setStyleSheet("color: #e0533e;" if error else "")


def _row(*widgets) -> QHBoxLayout:
    row = QHBoxLayout()
    for widget in widgets:
        row.addWidget(widget)
    return row
