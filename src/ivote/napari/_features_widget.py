"""The "Learn features" dock widget (magicgui): a form, a training worker, Image layers (math in ivote.features)."""

from __future__ import annotations

from magicgui.widgets import CheckBox, ComboBox, Container, PushButton, SpinBox
from napari.layers import Image

from ..features import learn_features
from ._names import FEATURES, result_name
from ._widgets_common import DockWidget, Status, layer_choices, spatial_transform


class FeaturesWidget(DockWidget):
    """Train a convolutional RBM on an image layer; its detection input becomes an Image layer."""

    def __init__(self, napari_viewer):
        self.image = ComboBox(label="image", choices=layer_choices(napari_viewer, Image),
                              tooltip="Image layer to learn filters from.")
        self.filters = SpinBox(label="filters", min=1, max=256, value=8,
                               tooltip="Number of learned filters (8: more did not detect better).")
        self.size = SpinBox(label="filter size (px)", min=1, max=31, value=9, tooltip="Filter width in pixels: about half the detection radius (the default "
                                "9 suits a radius of 18 px; docs/features.md).")
        self.stride = ComboBox(label="stride", choices=[1, 2, 4], value=1,
                               tooltip="Pooling stride of the RBM (larger is faster and coarser).")
        self.epochs = SpinBox(label="epochs", min=1, max=1000, value=10, tooltip="Passes of training.")
        self.show_stacks = CheckBox(text="also show filters and maps", value=False,
                                    tooltip="Add the filter and feature-map stacks as hidden layers (they add a "
                                            "slider over the filters).")
        self.train_button = PushButton(text="Train", tooltip="Train on the chosen image.")
        self.cancel_button = PushButton(text="Cancel", enabled=False, tooltip="Stop after the current epoch.")
        self.use_button = PushButton(text="Use as detection input", enabled=False,
                                     tooltip="Add 'features: <image>', a single map to pick in Detect nuclei.")
        self.status = Status()
        buttons = Container(widgets=[self.train_button, self.cancel_button], layout="horizontal", labels=False)
        super().__init__(napari_viewer, [self.image, self.filters, self.size, self.stride, self.epochs,
                                         self.show_stacks, buttons, self.use_button, self.status],
                         run_button=self.train_button, cancel_button=self.cancel_button)
        self.result = None
        self._source = None
        self.train_button.changed.connect(self.train)
        self.cancel_button.changed.connect(self.cancel)
        self.use_button.changed.connect(self.use_as_detection_input)

    def image_layer(self) -> Image | None:
        return self.image.value

    def train(self):
        layer = self.image.value
        if layer is None:
            return self.status.show("Pick an image layer first.", error=True)
        data = layer.data[0] if layer.multiscale else layer.data
        options = dict(n_filters=self.filters.value, filter_size=self.size.value, stride=int(self.stride.value),
                       epochs=self.epochs.value, rgb=layer.rgb)

        def work(job):
            def progress(epoch, n_epochs, error):
                job.check(epoch, n_epochs)

            return learn_features(data, progress=progress, **options)

        self.status.show(f"training on {layer.name}…")
        self.start(work, lambda result: self._show(layer, result), desc="Learning features", total=options["epochs"],
                   inputs=(layer,))

    def _show(self, layer, result):
        self.result, self._source = result, layer
        if self.show_stacks.value:
            transform = spatial_transform(layer, layer.ndim)
            stack = {key: (1.0,) + tuple(value) if key == "scale" else value for key, value in transform.items()
                     if key in ("scale",)}
            for kind, data, cmap in (("filters", result.filters, "PiYG"), ("feature maps", result.feature_maps, "magma")):
                self._add(result_name(kind, layer.name), data, kind, visible=False, colormap=cmap, **stack)
        self.use_button.enabled = True
        errors = result.reconstruction_errors
        self.status.show(f"{result.filters.shape[0]} filters learned; reconstruction error "
                         f"{errors[0]:.3f} → {errors[-1]:.3f}")
        self.viewer.layers.selection.active = layer

    def use_as_detection_input(self):
        """Add the single-channel detection input as an Image layer aligned with the source image."""
        if self.result is None or self._source is None or self._source not in self.viewer.layers:
            return self.status.show("Train first.", error=True)
        layer = self._source
        name = result_name(FEATURES, layer.name)
        self._add(name, self.result.detection_input, "detection input", colormap="gray", blending="additive",
                  **spatial_transform(layer, layer.ndim))
        self.status.show(f"added '{name}': pick it as the image in 'Detect nuclei' (bright nuclei)")
        return self.viewer.layers[name]

    def _add(self, name, data, kind, **kwargs):
        if name in self.viewer.layers:  # a new layer: contrast limits and stack axes of the new result
            self.viewer.layers.remove(name)
        self.viewer.add_image(data, name=name, metadata={"ivote_kind": kind}, **kwargs)
