"""The "Label and count" dock widget: a form, a worker, a layer (math in ivote.components)."""

from __future__ import annotations

import numpy as np
from napari.layers import Image, Labels, Points
from napari.qt.threading import create_worker
from qtpy.QtCore import Signal
from qtpy.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QLabel, QPushButton, QTableWidget,
                            QTableWidgetItem, QWidget)

from .. import _backend
from ..components import cluster_points, label

MAX_TABLE_ROWS = 10_000  # a Qt table of millions of rows would freeze the viewer


class LabelCountWidget(QWidget):
    """Label the components of a Labels layer (nonzero) or a thresholded image, or cluster points."""

    finished_result = Signal(object)  # Labelling, PointClusters, or None after an error (for tests)

    def __init__(self, napari_viewer):
        super().__init__()
        self.viewer = napari_viewer
        self._worker = None
        self.layer_combo = QComboBox()
        self.threshold = QDoubleSpinBox(minimum=-1e12, maximum=1e12, decimals=4)
        self.connectivity = QComboBox()
        self.connectivity.addItems(["faces", "faces, edges and corners"])
        self.distance = QDoubleSpinBox(minimum=1e-6, maximum=1e9, decimals=3, value=10.0)
        self.run_button = QPushButton("Label and count")
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["label", "size"])

        form = QFormLayout(self)
        form.addRow("layer", self.layer_combo)
        form.addRow("image threshold (>)", self.threshold)
        form.addRow("connectivity", self.connectivity)
        form.addRow("points: join closer than", self.distance)
        form.addRow(self.run_button)
        form.addRow(self.status)
        form.addRow(self.table)
        form.addRow("backend", QLabel(_backend.backend_name()))

        self.run_button.clicked.connect(self.run)
        self.layer_combo.currentTextChanged.connect(self._on_layer_changed)
        for event in (self.viewer.layers.events.inserted, self.viewer.layers.events.removed):
            event.connect(self._refresh_layers)
        self._refresh_layers()

    # -- inputs --------------------------------------------------------------
    def layer(self):
        name = self.layer_combo.currentText()
        return self.viewer.layers[name] if name in self.viewer.layers else None

    def _refresh_layers(self, event=None):
        names = [lay.name for lay in self.viewer.layers if isinstance(lay, (Image, Labels, Points))]
        current = self.layer_combo.currentText()
        self.layer_combo.blockSignals(True)
        self.layer_combo.clear()
        self.layer_combo.addItems(names)
        self.layer_combo.blockSignals(False)
        self.layer_combo.setCurrentText(current if current in names else (names[0] if names else ""))
        self._on_layer_changed()

    def _on_layer_changed(self, *_):
        layer = self.layer()
        self.threshold.setEnabled(isinstance(layer, Image))
        self.distance.setEnabled(isinstance(layer, Points))
        if isinstance(layer, Image):
            low, high = layer.contrast_limits
            self.threshold.setValue((low + high) / 2)
        units = getattr(layer, "units", None) if layer is not None else None
        unit = str(units[0]) if units else "px"
        self.distance.setSuffix("" if unit == "pixel" else f" {unit}")

    # -- running -------------------------------------------------------------
    def run(self):
        layer = self.layer()
        if layer is None or (isinstance(layer, Image) and layer.rgb):
            return self._show_error("choose a Labels, a (grey-level) Image or a Points layer")
        if isinstance(layer, Points):
            job = (cluster_points, np.asarray(layer.data), dict(distance=self.distance.value(), spacing=layer.scale))
        else:
            data = np.asarray(layer.data[0] if layer.multiscale else layer.data)
            mask = data > self.threshold.value() if isinstance(layer, Image) else data != 0
            connectivity = 1 if self.connectivity.currentIndex() == 0 else mask.ndim
            job = (label, mask, dict(connectivity=connectivity))
        function, array, options = job
        self.run_button.setEnabled(False)
        self.status.setText("working…")
        def work():
            try:
                return function(array, **options)
            finally:  # the labelling's buffers go back to the GPU
                _backend.free_gpu_memory()

        self._worker = create_worker(work, _start_thread=False)
        self._worker.returned.connect(lambda result: self._show(layer, result))
        self._worker.errored.connect(lambda exc: self._show_error(str(exc)))
        self._worker.start()

    def _show(self, layer, result):
        self.run_button.setEnabled(True)
        if isinstance(layer, Points):
            layer.features = layer.features.assign(cluster=result.cluster, cluster_size=result.cluster_size)
            layer.face_color = "cluster"
            layer.face_color_mode = "cycle"
            layer.refresh()
            count, sizes, first = result.n_clusters, result.sizes, 0
            noun = f"clusters ({int((result.sizes > 1).sum())} of more than one point)"
        else:
            name = f"{layer.name} components"
            if name in self.viewer.layers:
                self.viewer.layers[name].data = result.labels
            else:
                self.viewer.add_labels(result.labels, name=name, scale=layer.scale, translate=layer.translate)
            count, sizes, first, noun = result.count, result.sizes, 1, "components"
        self.status.setText(f"{count:,} {noun}")
        self._fill_table(sizes, first)
        self.finished_result.emit(result)

    def _fill_table(self, sizes, first):
        shown = min(len(sizes), MAX_TABLE_ROWS)
        self.table.setRowCount(shown)
        for row in range(shown):
            self.table.setItem(row, 0, QTableWidgetItem(str(row + first)))
            self.table.setItem(row, 1, QTableWidgetItem(str(int(sizes[row]))))
        if shown < len(sizes):
            self.status.setText(self.status.text() + f"; table shows the first {shown:,}")

    def _show_error(self, message):
        self.run_button.setEnabled(True)
        self.status.setText(f"error: {message}")
        self.finished_result.emit(None)
