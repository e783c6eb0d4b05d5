"""The "Learn features" dock widget: a form, a training worker, Image layers (math in ivote.features)."""

from __future__ import annotations

from napari.layers import Image
from napari.qt.threading import create_worker
from qtpy.QtCore import QSignalBlocker, Signal
from qtpy.QtWidgets import QComboBox, QFormLayout, QHBoxLayout, QLabel, QProgressBar, QPushButton, QSpinBox, QWidget

from .. import _backend
from ..features import learn_features


class _Cancelled(Exception):
    """Raised from the progress callback to stop training."""


class FeaturesWidget(QWidget):
    """Train a convolutional RBM on an image layer; show its filters and feature maps."""

    progressed = Signal(int, int, float)  # epoch, n_epochs, reconstruction error (from the worker)
    finished_result = Signal(object)  # LearnedFeatures, or None when cancelled or failed

    def __init__(self, napari_viewer):
        super().__init__()
        self.viewer = napari_viewer
        self.result = None
        self._source = None  # the image layer the result was learned on
        self._worker = None
        self._cancel_requested = False

        self.image_combo = QComboBox()
        self.filters = QSpinBox(minimum=1, maximum=256, value=16)
        self.size = QSpinBox(minimum=1, maximum=31, value=9, suffix=" px")
        self.stride = QComboBox()
        self.stride.addItems(["1", "2", "4"])
        self.epochs = QSpinBox(minimum=1, maximum=1000, value=10)
        self.train_button, self.cancel_button = QPushButton("Train"), QPushButton("Cancel")
        self.use_button = QPushButton("Use as detection input")
        self.cancel_button.setEnabled(False)
        self.use_button.setEnabled(False)
        self.progress_bar = QProgressBar()
        self.status = QLabel("")
        self.status.setWordWrap(True)

        form = QFormLayout(self)
        form.addRow("image", self.image_combo)
        form.addRow("filters", self.filters)
        form.addRow("filter size", self.size)
        form.addRow("stride", self.stride)
        form.addRow("epochs", self.epochs)
        row = QHBoxLayout()
        row.addWidget(self.train_button)
        row.addWidget(self.cancel_button)
        form.addRow(row)
        form.addRow(self.progress_bar)
        form.addRow(self.use_button)
        form.addRow(self.status)
        form.addRow("backend", QLabel(_backend.backend_name()))

        self.train_button.clicked.connect(self.train)
        self.cancel_button.clicked.connect(self.cancel)
        self.use_button.clicked.connect(self.use_as_detection_input)
        self.progressed.connect(self._on_progress)
        for event in (self.viewer.layers.events.inserted, self.viewer.layers.events.removed):
            event.connect(self._refresh_images)
        self._refresh_images()

    def image_layer(self) -> Image | None:
        name = self.image_combo.currentText()
        layer = self.viewer.layers[name] if name in self.viewer.layers else None
        return layer if isinstance(layer, Image) else None

    def _refresh_images(self, event=None):
        names = [layer.name for layer in self.viewer.layers
                 if isinstance(layer, Image) and not layer.name.startswith(("features: ", "filters: "))]
        current = self.image_combo.currentText()
        with QSignalBlocker(self.image_combo):
            self.image_combo.clear()
            self.image_combo.addItems(names)
            self.image_combo.setCurrentText(current if current in names else (names[-1] if names else ""))

    @property
    def busy(self) -> bool:
        return self._worker is not None

    def train(self):
        layer = self.image_layer()
        if layer is None:
            return self._message("Pick an image layer first.", error=True)
        if self.busy:
            return
        data = layer.data[0] if layer.multiscale else layer.data
        options = dict(n_filters=self.filters.value(), filter_size=self.size.value(),
                       stride=int(self.stride.currentText()), epochs=self.epochs.value(), rgb=layer.rgb)
        self._cancel_requested = False
        self._source = layer
        self.progress_bar.setRange(0, options["epochs"])
        self.progress_bar.setValue(0)
        self.train_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self._message(f"training on {layer.name}…")

        def progress(epoch, n_epochs, error):
            if self._cancel_requested:
                raise _Cancelled
            self.progressed.emit(epoch, n_epochs, error)

        def work():  # errors come back as values: the Qt event loop must not see them raised
            result = None
            try:
                result = learn_features(data, progress=progress, **options)
            except _Cancelled:
                pass
            except Exception as exc:
                result = exc
            finally:  # the training's spectra go back to the GPU
                _backend.free_gpu_memory()
            return result

        self._worker = create_worker(work, _start_thread=False)
        self._worker.returned.connect(self._on_returned)
        self._worker.start()

    def cancel(self):
        self._cancel_requested = True
        self.cancel_button.setEnabled(False)
        self._message("cancelling after this epoch…")

    def _on_progress(self, epoch, n_epochs, error):
        self.progress_bar.setValue(epoch)
        self._message(f"epoch {epoch}/{n_epochs}: reconstruction error {error:.4f}")

    def _done(self):
        self._worker = None
        self.train_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _on_returned(self, result):
        self._done()
        if result is None or isinstance(result, Exception):
            self._message("cancelled" if result is None else f"Training failed: {result}", error=result is not None)
            return self.finished_result.emit(None)
        self.result = result
        layer = self._source
        spatial = layer.data.ndim - (1 if layer.rgb else 0)
        scale, translate = tuple(layer.scale[-spatial:]), tuple(layer.translate[-spatial:])
        self._show(f"filters: {layer.name}", result.filters, (1.0,) + scale, None, colormap="PiYG")
        self._show(f"features: {layer.name} maps", result.feature_maps, (1.0,) + scale, (0.0,) + translate,
                   colormap="magma")
        self.use_button.setEnabled(True)
        errors = result.reconstruction_errors
        self._message(f"{result.filters.shape[0]} filters learned; reconstruction error "
                      f"{errors[0]:.3f} → {errors[-1]:.3f}")
        self.viewer.layers.selection.active = layer
        self.finished_result.emit(result)

    def use_as_detection_input(self):
        """Add the single-channel detection input as an Image layer aligned with the source image."""
        if self.result is None or self._source is None:
            return self._message("Train first.", error=True)
        layer = self._source
        spatial = layer.data.ndim - (1 if layer.rgb else 0)
        name = f"features: {layer.name}"
        self._show(name, self.result.detection_input, tuple(layer.scale[-spatial:]),
                   tuple(layer.translate[-spatial:]), colormap="gray")
        self._message(f"added '{name}': pick it as the image in 'Detect nuclei' (bright nuclei)")
        return self.viewer.layers[name]

    def _show(self, name, data, scale, translate, **kwargs):
        if name in self.viewer.layers:
            self.viewer.layers.remove(name)
        self.viewer.add_image(data, name=name, scale=scale,
                              translate=translate if translate is not None else (0.0,) * len(scale), **kwargs)

    def _message(self, text: str, error: bool = False):
        self.status.setText(text)
        self.status.setStyleSheet("color: #e0533e;" if error else "")
