"""The "Segment nuclei" dock widget: image + seed points in, a Labels layer out (math in ivote.segment)."""

from __future__ import annotations

import numpy as np
from napari.layers import Image, Points
from napari.qt.threading import create_worker
from napari.utils import progress
from qtpy.QtCore import Signal
from qtpy.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QPushButton, QSpinBox,
                            QWidget)

from .. import _backend
from ..segment import DEFAULT_WEIGHTS, segment_nuclei

POINTS_PREFIX = "nuclei: "  # the detection widget's output layer
LABELS_PREFIX = "labels: "
WEIGHTS = (("lambda1", "λ₁ (inside fit)", "lambda1"), ("lambda2", "λ₂ (outside fit)", "lambda2"),
           ("mu", "μ (smoothness)", "mu"), ("shape_weight", "shape prior", "beta"),
           ("overlap_weight", "overlap penalty", "omega"))


class _Cancelled(Exception):
    pass


def seeds_in_pixels(points: Points, image: Image) -> np.ndarray:
    """Points layer coordinates to the image layer's pixel coordinates (scale and translate)."""
    world = np.asarray(points.data, float) * np.asarray(points.scale) + np.asarray(points.translate)
    return (world - np.asarray(image.translate)) / np.asarray(image.scale)


class SegmentWidget(QWidget):
    """Outline nuclei by interacting level sets seeded at a Points layer."""

    progressed = Signal(int, int)  # iteration, total (from the worker)
    finished_result = Signal(object)  # the labels array, or None when cancelled / failed

    def __init__(self, napari_viewer):
        super().__init__()
        self.viewer = napari_viewer
        self._cancel_requested = False
        self._worker = None
        self._progress = None
        self.image_combo, self.points_combo = QComboBox(), QComboBox()
        self.radius = QDoubleSpinBox(minimum=0.01, maximum=10_000.0, value=8.0, singleStep=0.5)
        self.polarity = QComboBox()
        self.polarity.addItems(["bright", "dark"])
        self.iterations = QSpinBox(minimum=1, maximum=10_000, value=300, singleStep=50)
        self.weights = {}
        form = QFormLayout(self)
        form.addRow("image", self.image_combo)
        form.addRow("seeds", self.points_combo)
        form.addRow("radius", self.radius)
        form.addRow("polarity", self.polarity)
        form.addRow("iterations", self.iterations)
        for keyword, label, key in WEIGHTS:
            spin = QDoubleSpinBox(minimum=0.0, maximum=100.0, value=DEFAULT_WEIGHTS[key], singleStep=0.1, decimals=2)
            self.weights[keyword] = spin
            form.addRow(label, spin)
        self.run_button, self.cancel_button = QPushButton("Run"), QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        form.addRow(buttons)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        form.addRow(self.status)
        form.addRow("backend", QLabel(_backend.backend_name()))
        self.run_button.clicked.connect(self.run)
        self.cancel_button.clicked.connect(self.cancel)
        self.progressed.connect(self._on_progress)
        self.image_combo.currentTextChanged.connect(self._default_points)
        for event in (self.viewer.layers.events.inserted, self.viewer.layers.events.removed):
            event.connect(self._refresh)
        self._refresh()

    def _layer(self, name, kind):
        layer = self.viewer.layers[name] if name in self.viewer.layers else None
        return layer if isinstance(layer, kind) else None

    def _refresh(self, event=None):
        for combo, kind in ((self.image_combo, Image), (self.points_combo, Points)):
            current = combo.currentText()
            names = [layer.name for layer in self.viewer.layers if isinstance(layer, kind)]
            combo.blockSignals(True)
            combo.clear()
            combo.addItems(names)
            combo.setCurrentText(current if current in names else (names[-1] if names else ""))
            combo.blockSignals(False)
        self._default_points()

    def _default_points(self, *_):
        """Prefer the detection output of the chosen image, ``nuclei: <image>``."""
        preferred = POINTS_PREFIX + self.image_combo.currentText()
        if self._layer(preferred, Points) is not None:
            self.points_combo.setCurrentText(preferred)

    def run(self):
        image, points = self._layer(self.image_combo.currentText(), Image), self._layer(self.points_combo.currentText(), Points)
        if image is None or points is None:
            self.status.setText("choose an image layer and a points layer with the seeds")
            return
        data = np.asarray(image.data[0] if image.multiscale else image.data)
        polarity = self.polarity.currentText()
        if image.rgb:
            from ..detect import hematoxylin_density

            data, polarity = hematoxylin_density(data), "bright"
        seeds = seeds_in_pixels(points, image)
        kwargs = dict(radius=self.radius.value(), spacing=tuple(image.scale[-data.ndim:]), polarity=polarity,
                      iterations=self.iterations.value(), **{k: s.value() for k, s in self.weights.items()})
        total = kwargs["iterations"]
        self._cancel_requested = False

        def callback(iteration, changed):
            if self._cancel_requested:
                raise _Cancelled
            self.progressed.emit(iteration, total)

        def work():
            labels = None
            try:
                labels = _backend.to_host(segment_nuclei(data, seeds, iter_callback=callback, **kwargs))
            except _Cancelled:
                pass
            finally:  # after a cancel too: the run's buffers go back to the GPU
                _backend.free_gpu_memory()
            return labels

        self._progress = progress(total=total, desc="Segmenting nuclei")
        self.cancel_button.setEnabled(True)
        self.run_button.setEnabled(False)
        self.status.setText(f"segmenting {len(seeds)} seeds…")
        self._worker = create_worker(work, _start_thread=False)
        self._worker.returned.connect(lambda labels: self._on_returned(image, labels))
        self._worker.errored.connect(self._on_error)
        self._worker.start()

    def cancel(self):
        self._cancel_requested = True
        self.status.setText("cancelling…")

    def _on_progress(self, iteration, total):
        if self._progress is not None:
            self._progress.n = iteration
            self._progress.refresh()

    def _done(self):
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        self.cancel_button.setEnabled(False)
        self.run_button.setEnabled(True)
        self._worker = None

    def _on_error(self, exc):
        self._done()
        self.status.setText(f"error: {exc}")
        self.finished_result.emit(None)

    def _on_returned(self, image, labels):
        self._done()
        if labels is None:
            self.status.setText("cancelled")
        else:
            name = LABELS_PREFIX + image.name
            if name in self.viewer.layers:
                layer = self.viewer.layers[name]
                layer.data, layer.scale, layer.translate = labels, image.scale[-labels.ndim:], image.translate[-labels.ndim:]
            else:
                self.viewer.add_labels(labels, name=name, scale=image.scale[-labels.ndim:],
                                       translate=image.translate[-labels.ndim:])
            self.status.setText(f"{len(np.unique(labels)) - 1} nuclei")
        self.finished_result.emit(labels)
