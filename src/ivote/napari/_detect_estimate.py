"""The Detect dock's "Estimate" button: the core's ``radius='auto'`` estimate of the selected image, in a worker
thread, put on the radius slider (math in ``ivote.detect.estimate_radius``; steps in ``_detect_logic``)."""

from __future__ import annotations

from magicgui.widgets import Container, Label, PushButton

from . import _detect_logic as logic
from ._runner import Runner

_TIP = ("Estimate the radius from the image (what radius='auto' and 'ivote detect --radius auto' use): the largest "
        "typical nucleus radius, from the image's blobs at every scale, in the layer's physical units. Sets the "
        "slider; the live preview follows. Grey images of dark nuclei: set the polarity first. Press again "
        "while it runs to cancel.")


class EstimatePanel(Container):
    """The button and the last estimate's label, right under the radius slider."""

    def __init__(self, detect_widget):
        self.detect_widget = detect_widget
        self.button = PushButton(text="Estimate", tooltip=_TIP)
        self.result_label = Label(value="")
        super().__init__(widgets=[self.button, self.result_label], layout="horizontal", labels=False)
        self.runner = None  # attach(): the Detect widget's native widget exists only after its own __init__
        self._estimate = None  # (image layer, estimate, its label)
        self.button.changed.connect(lambda: self.run())

    def attach(self):
        widget = self.detect_widget
        self.runner = Runner(widget.viewer, widget.native, widget.status.show, report_cancel=False)

    @property
    def busy(self) -> bool:
        return self.runner is not None and self.runner.busy

    def estimate_for(self, layer) -> float | None:
        """The estimate made for ``layer`` (None when there is none)."""
        return self._estimate[1] if self._estimate is not None and self._estimate[0] is layer else None

    def image_changed(self, layer):
        """Another image is selected: a running estimate is dropped, the label shows this image's estimate."""
        self.cancel()
        ours = self._estimate is not None and self._estimate[0] is layer
        self.result_label.value = self._estimate[2] if ours else ""

    def forget(self, layer):
        """``layer`` left the viewer: its estimate goes (and the reference that would keep its pixels in memory)."""
        if self._estimate is not None and self._estimate[0] is layer:
            self._estimate = None
            self.result_label.value = ""

    def run(self):
        """Estimate the selected image's radius in the background; pressed while estimating, cancel."""
        if self.runner.job is not None:
            return self.cancel()
        widget = self.detect_widget
        layer, geometry = widget.image_layer(), widget._geometry
        if layer is None or geometry is None:
            return widget.status.show(widget._geometry_error or "Add or select an image layer first.", error=True)
        data = logic.estimate_input(layer, timelapse=widget._timelapse, world_point=widget.viewer.dims.point)
        polarity, lazy = widget.polarity.value, logic.is_lazy(layer)
        self._running(True)
        self.runner.start(lambda job: logic.estimate_layer_radius(data, geometry, polarity=polarity, lazy=lazy),
                          lambda value: self._apply(layer, geometry, value), desc="Estimating the nucleus radius",
                          inputs=(layer,), on_end=lambda: self._running(False))

    def cancel(self):
        if self.runner is not None and self.runner.job is not None:
            self.runner.cancel()  # the core call cannot stop mid-way: its result is dropped
            self._running(False)

    def _running(self, running: bool):
        self.button.text = "Cancel estimate" if running else "Estimate"
        if running:
            self.result_label.value = "estimating…"
        elif self.result_label.value == "estimating…":
            self.result_label.value = ""

    def _apply(self, layer, geometry, estimate: float):
        """On the main thread: the slider takes the estimate (its change schedules the preview, as a drag does)."""
        widget = self.detect_widget
        if layer is not widget.image_layer() or geometry != widget._geometry:
            return widget.status.show("The image changed during the estimate; press Estimate again.", error=True)
        value, maximum, note = logic.fit_radius(estimate, geometry)
        if maximum > widget.radius.max:
            widget.radius.max = maximum
        widget.radius.value = value
        self.result_label.value = f"estimated {estimate:.3g} {geometry.unit}"
        self._estimate = (layer, estimate, self.result_label.value)
        widget.status.show(f"radius estimated from '{layer.name}': {estimate:.3g} {geometry.unit}{note}")
