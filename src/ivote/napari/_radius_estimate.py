"""The "Estimate" button of the Detect and Segment docks: the core's ``radius='auto'`` estimate of the chosen image,
in a worker thread, put on the dock's radius control (math in ``ivote.detect.estimate_radius``; steps in
``_detect_logic``)."""

from __future__ import annotations

from magicgui.widgets import Container, Label, PushButton

from . import _detect_logic as logic
from ._runner import Runner

_TIP = ("Estimate the radius from the image (what radius='auto' and 'ivote detect --radius auto' use): the largest "
        "typical nucleus radius, from the image's blobs at every scale, in the layer's physical units. Sets the "
        "radius{follows}. Grey images of dark nuclei: set the polarity first. Press again while it runs to cancel.")


class EstimatePanel(Container):
    """The button and the last estimate's label, right under a dock's radius control.

    The dock gives ``viewer``, ``native``, ``status``, ``radius`` (the control set), ``polarity`` and
    ``estimate_source()``: ``(image layer, its ImageGeometry, whether its first axis is time)``, or a message
    (str) saying why there is nothing to estimate.
    """

    def __init__(self, dock, *, follows: str = ""):
        self.dock = dock
        self.button = PushButton(text="Estimate", tooltip=_TIP.format(follows=follows))
        self.result_label = Label(value="")
        super().__init__(widgets=[self.button, self.result_label], layout="horizontal", labels=False)
        self.runner = None  # attach(): the dock's native widget exists only after its own __init__
        self._estimate = None  # (image layer, estimate, its label)
        self.button.changed.connect(lambda: self.run())

    def attach(self):
        dock = self.dock
        self.runner = Runner(dock.viewer, dock.native, dock.status.show, report_cancel=False)

    @property
    def busy(self) -> bool:
        return self.runner is not None and self.runner.busy

    def estimate_for(self, layer) -> float | None:
        """The estimate made for ``layer`` (None when there is none)."""
        return self._estimate[1] if self._estimate is not None and self._estimate[0] is layer else None

    def image_changed(self, layer):
        """Another image is chosen: a running estimate is dropped, the label shows this image's estimate."""
        self.cancel()
        ours = self._estimate is not None and self._estimate[0] is layer
        self.result_label.value = self._estimate[2] if ours else ""

    def forget(self, layer):
        """``layer`` left the viewer: its estimate goes (and the reference that would keep its pixels in memory)."""
        if self._estimate is not None and self._estimate[0] is layer:
            self._estimate = None
            self.result_label.value = ""

    def run(self):
        """Estimate the chosen image's radius in the background; pressed while estimating, cancel."""
        if self.runner.job is not None:
            return self.cancel()
        dock, source = self.dock, self.dock.estimate_source()
        if isinstance(source, str):
            return dock.status.show(source, error=True)
        volume = getattr(dock, "volume", None)
        if volume is not None and volume.busy:  # its blocks hold the GPU under a memory cap
            return dock.status.show("A whole-volume run is going on: press Estimate when it ends (or cancel it).",
                                    error=True)
        layer, geometry, timelapse = source
        point, polarity, lazy = tuple(dock.viewer.dims.point), dock.polarity.value, logic.is_lazy(layer)

        def estimate(job):  # the frame is read here, in the worker: a Zarr frame can be large
            data = logic.estimate_input(layer, timelapse=timelapse, world_point=point)
            return logic.estimate_layer_radius(data, geometry, polarity=polarity, lazy=lazy)

        self._running(True)
        self.runner.start(estimate,
                          lambda value: self._apply(source, value), desc="Estimating the nucleus radius",
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

    def _apply(self, source, estimate: float):
        """On the main thread: the radius control takes the estimate (its change event fires, as after a drag)."""
        dock, (layer, geometry, _) = self.dock, source
        if dock.estimate_source() != source:
            return dock.status.show("The image changed during the estimate; press Estimate again.", error=True)
        value, maximum, note = logic.fit_radius(estimate, geometry)
        if maximum > dock.radius.max:
            dock.radius.max = maximum
        dock.radius.value = value
        self.result_label.value = f"estimated {estimate:.3g} {geometry.unit}"
        self._estimate = (layer, estimate, self.result_label.value)
        dock.status.show(f"radius estimated from '{layer.name}': {estimate:.3g} {geometry.unit}{note}")
