""""Run on whole volume": the Detect widget's settings on a lazy layer (Dask, Zarr, multiscale) through the chunked
engine, ``ivote.distributed.detect_chunked``, as a background job with progress and cancel (math in the engine)."""

from __future__ import annotations

import itertools

from magicgui.widgets import Container, PushButton

from . import _detect_layers as layers
from . import _detect_logic as logic
from ._runner import Runner, on_main_thread

_TIP = ("Detect on the whole layer block by block in the background (ivote.distributed): only a few chunks are "
        "in memory at a time; progress in the activity dock, Cancel stops it. Each block's cells appear as grey "
        "rings in 'nuclei (running)' as it finishes; the final points (score threshold over all blocks) replace "
        "them at the end.")


def chunked_engine():
    """``ivote.distributed.detect_chunked``, or None where this installation has no chunked engine."""
    try:
        from ..distributed import detect_chunked
    except ImportError:
        return None
    return detect_chunked


class VolumePanel(Container):
    """One button, shown for lazy 2D/3D grey layers; the run's result goes to 'nuclei: <image>' like a Run's."""

    def __init__(self, detect_widget):
        self.detect_widget = detect_widget
        self.run_button = PushButton(text="Run on whole volume", tooltip=_TIP)
        super().__init__(widgets=[self.run_button], labels=False, visible=False)
        self.runner = None  # attach(): the Detect widget's native widget exists only after its own __init__
        self._streaming = None  # the run whose blocks may still add to 'nuclei (running)'
        self._runs = itertools.count()
        self.run_button.changed.connect(lambda: self.run())

    def attach(self):
        widget = self.detect_widget
        self.runner = Runner(widget.viewer, widget.native, widget.status.show)

    @property
    def busy(self) -> bool:
        return self.runner is not None and self.runner.busy

    def cancel(self):
        if self.runner is not None:
            self.runner.cancel()

    def update_for(self, layer):
        """Shown for lazy layers the engine takes (2D/3D grey, not a time-lapse)."""
        widget = self.detect_widget
        self.visible = bool(logic.is_lazy(layer) and not widget._timelapse)  # RGB: H&E (._slide_reader)
        flat = widget._geometry is not None and widget._geometry.ndim == 2
        self.run_button.text = "Run in blocks (whole image)" if flat else "Run on whole volume"  # a plane is no volume

    def run(self, chunks=None):
        widget = self.detect_widget
        layer, geometry = widget.image_layer(), widget._geometry
        if layer is None or geometry is None:
            return widget.status.show(widget._geometry_error or "Add or select an image layer first.", error=True)
        if widget._timelapse:
            return widget.status.show("Run on whole volume takes 2D or 3D images (not a time-lapse).", error=True)
        if chunked_engine() is None:
            return widget.status.show("This installation has no chunked engine (ivote.distributed.detect_chunked); "
                                      "use Run.", error=True)
        widget.preview_runner.cancel()
        widget.runner.cancel()
        image = layer.data[0] if layer.multiscale else layer.data
        if layer.rgb:  # H&E: the hematoxylin density block by block, glass skipped
            from ._slide_reader import slide_signal

            image = slide_signal(layer)
        settings = widget.settings()
        shown = dict(image=layer, geometry=geometry, timelapse=False, preview=False,
                     radius_estimate=widget.estimate.estimate_for(layer))
        widget._running(True)
        widget.status.show("running on the whole volume, block by block…")
        run = self._streaming = next(self._runs)
        size = 2 * settings["radius"] / min(geometry.scale[-2:])
        self._drop_running(layer)

        @on_main_thread
        def stream(points, scores):  # from the worker: queued to the main thread
            if self._streaming == run and layer in widget.viewer.layers:
                layers.append_running(widget.viewer, layer, points, geometry.ndim, size)

        def end():
            self._streaming = None
            self._drop_running(layer)
            widget._running(False)

        self.runner.start(lambda job: logic.detect_volume_job(image, geometry, settings, job.check, chunks=chunks,
                                                              on_block=stream),
                          lambda result: widget._show(layers.Shown(result=result, **shown)),
                          desc="Detecting nuclei (whole volume, chunked)", inputs=(layer,), on_end=end)

    def _drop_running(self, layer):
        layers.remove_layers(self.detect_widget.viewer.layers, [layers.RUNNING_PREFIX + layer.name])
