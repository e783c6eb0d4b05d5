"""The "Detect nuclei" dock widget (magicgui): its behaviour (form in _detect_form, steps in _detect_logic, layers
in _detect_layers, the whole-volume job in _detect_volume)."""

from __future__ import annotations

import time

import numpy as np
from napari.layers import Image
from napari.utils.notifications import show_warning
from psygnal import Signal
from qtpy.QtCore import QTimer
from superqt.utils import qdebounced

from .._files import adopt_file_scale
from . import _detect_layers as layers
from . import _detect_logic as logic
from . import _memory_bound as bound
from ._choice import last_detected, preferred_image
from ._detect_form import DetectForm
from ._runner import Runner, watch_gone
from ._widgets_common import connect_while_docked, set_range

DEBOUNCE_MS = 300
PREVIEW_PREFIX, WINDOW_PREFIX = layers.PREVIEW_PREFIX, layers.WINDOW_PREFIX


class DetectWidget(DetectForm):
    """Find nuclei in an image layer by iterative voting; a live preview apart from the Run's result."""

    finished_result = Signal(object)
    """Emitted on the main thread with each result shown (a Run's or a preview's), for scripts and benchmarks."""

    def __init__(self, napari_viewer):
        super().__init__(napari_viewer)
        self._geometry = self._geometry_error = None
        self._timelapse = False  # first axis is time: preview the current frame, Run every frame
        self._radius_touched = False
        self._largest = None  # the largest radius the memory bound lets a detection of the image use
        self._preview_clock = QTimer()  # the status of a preview running longer than half a second
        self._preview_clock.setInterval(250)
        self._preview_clock.timeout.connect(self._preview_progress)
        self._preview_waiting = False  # a preview waits for a superseded one to stop: one computation at a time
        self._run: layers.Shown | None = None
        self._preview: layers.Shown | None = None
        self.preview_runner = Runner(napari_viewer, self.native, self.status.show, report_cancel=False)
        self.batch.attach()
        self.volume.attach()
        self.learn_panel.attach()
        self.estimate.attach()
        self._preview_later = qdebounced(self.preview, timeout=DEBOUNCE_MS)

        self.image.changed.connect(self._on_image_changed)
        self.radius.changed.connect(self._on_radius_moved)
        for widget in (self.polarity, self.blur):
            widget.changed.connect(self._schedule_preview)
        self.threshold.changed.connect(self._on_threshold_moved)
        self.auto_threshold.changed.connect(self._apply_threshold)
        self.live.changed.connect(lambda on: on or self._preview_later.cancel())
        self.run_button.changed.connect(self.run)
        self.cancel_button.changed.connect(self.cancel)
        self.export_button.changed.connect(lambda: self.export())
        self.folder_button.changed.connect(lambda: setattr(self.batch, "visible", not self.batch.visible))
        connect_while_docked(self, napari_viewer.layers.events.removed, self._on_layer_removed)
        connect_while_docked(self, napari_viewer.dims.events.current_step, self._on_plane_changed)
        watch_gone(self.native).callbacks.append(self._on_closed)
        self._picked = None  # the image the user chose in the list, kept over newer layers
        self.image.native.activated.connect(lambda *_: setattr(self, "_picked", self.image.value))
        connect_while_docked(self, napari_viewer.layers.events.inserted, self._offer_image)
        self._offer_image()
        self._on_image_changed()

    def _offer_image(self, *_):
        """The user's image, else the one last detected on, else a nuclear stain's channel (not the newest layer)."""
        choice = preferred_image(list(self.image.choices), picked=self._picked,
                                 detected=last_detected(self.viewer.layers))
        if choice is not None and choice is not self.image.value:
            self.image.value = choice

    # -- inputs --------------------------------------------------------------
    def image_layer(self) -> Image | None:
        layer = self.image.value
        return layer if isinstance(layer, Image) and layer in self.viewer.layers else None

    def _on_image_changed(self, *_):
        self._geometry, self._geometry_error = None, None
        self.preview_runner.cancel()
        layer = self.image_layer()
        self.estimate.image_changed(layer)
        if layer is None:
            return
        adopted = ""
        try:
            if adopt_file_scale(layer) is not None:  # opened by a reader that set no pixel size
                adopted = f"pixel sizes from {layer.source.path}: {', '.join(f'{s:g}' for s in layer.scale)} µm"
                if np.any(layer.translate):
                    adopted += f", position {', '.join(f'{t:g}' for t in layer.translate)} µm"
            self._geometry, self._timelapse = logic.layer_geometry(layer)
        except ValueError as exc:
            self._geometry_error = str(exc)
            return self.status.show(self._geometry_error, error=True)
        self._largest = bound.largest_radius(self._geometry.shape, self._geometry.scale)
        self.fit_to(self._geometry, keep_radius=self._radius_touched, largest=self._largest)
        self.volume.update_for(layer)
        note = logic.grey_rgb_note(layer)
        if note:  # read as H&E, as on the command line, which says so too
            show_warning(f"napari-ivote: {note}")
        self.status.show(note or adopted, error=bool(note))  # what was taken from the file stays in view
        self._schedule_preview()

    def _on_layer_removed(self, event):
        """An image left: its preview goes too (on the next turn of the event loop, not inside napari's removal)."""
        image = event.value
        self.estimate.forget(image)
        if self._preview is not None and self._preview.image is image:
            self._preview = None
        stale = [self.viewer.layers[n] for n in layers.preview_layer_names(image.name) if n in self.viewer.layers]
        if stale:
            QTimer.singleShot(0, lambda: layers.remove_layers(self.viewer.layers,
                                                              [s for s in stale if s in self.viewer.layers]))

    def estimate_source(self):
        """What the Estimate button measures: (image layer, geometry, time-lapse), or why there is none."""
        layer = self.image_layer()
        if layer is None or self._geometry is None:
            return self._geometry_error or "Add or select an image layer first."
        return layer, self._geometry, self._timelapse

    def _stale(self, layer) -> bool:
        try:
            return logic.layer_geometry(layer) != (self._geometry, self._timelapse)
        except ValueError:
            return True

    def _on_radius_moved(self, *_):
        self._radius_touched = True
        self._schedule_preview()

    def _request(self, preview: bool):
        layer = self.image_layer()
        if layer is not None and self._geometry is not None and self._stale(layer):
            self._on_image_changed()  # its scale or units changed since it was chosen: the radius's unit with them
        if self._geometry_error is not None and layer is not None:
            return self.status.show(self._geometry_error, error=True)  # e.g. a 4D image: say why, on Run too
        message = logic.validate_settings(self.radius.value, has_image=layer is not None and self._geometry is not None)
        if message:
            return self.status.show(message, error=True)
        built = logic.build_request(layer, self._geometry, timelapse=self._timelapse, world_point=self.viewer.dims.point,
                                    radius=self.radius.value, polarity=self.polarity.value,
                                    blur=self.blur.value or None, preview=preview,
                                    view=layers.visible_pixels(self.viewer, layer) if preview else None,
                                    detector=self.learn_panel.detector)
        request = built[0]
        message = bound.refusal(request.image.shape[:self._geometry.ndim], request.radius, request.spacing,
                                self._geometry.unit)
        if message:  # never started: the memory it needs is over the bound
            return self.status.show(("preview " if preview else "Run ") + message, error=True)
        return built

    # -- running -------------------------------------------------------------
    def _schedule_preview(self, *_):
        """A setting changed: the running preview is abandoned now (its settings are gone), a new one follows."""
        if self.preview_runner.job is not None:
            self.preview_runner.cancel()
            self.status.show("preview: settings changed…")
        if self.live.value and self.image_layer() is not None and not self.runner.busy:
            self._preview_later()

    def _on_plane_changed(self, event=None):
        if self._geometry is not None and self._geometry.ndim == 3 and self._preview is not None:
            self._schedule_preview()

    @property
    def busy(self) -> bool:
        return (self.runner.busy or self.preview_runner.busy or self.volume.busy or self.estimate.busy
                or self.learn_panel.busy)

    def _on_closed(self):
        """The dock was closed: its preview layers go with it (the runners are closed: no late result re-adds them)."""
        self._preview_later.cancel()
        self._preview = None
        try:
            stale = [layer.name for layer in self.viewer.layers if layer.name.startswith(layers.SCRATCH_PREFIXES)]
            layers.remove_layers(self.viewer.layers, stale)
        except RuntimeError:  # the viewer is closing: its Qt side is gone, and its layers with it
            pass

    def preview(self):
        """Detect on the preview window; the result goes to the preview layer, never to a Run's."""
        if self.runner.busy or self.runner.closed or self.volume.busy:  # a Run is going: it wins
            return
        if self.preview_runner.busy:  # a superseded preview ends its pass: never two computations at once
            if not self._preview_waiting:
                self._preview_waiting = True
                QTimer.singleShot(30, self._preview_when_idle)
            return
        built = self._request(preview=True)
        if built is None:
            return
        request, window, frames = built
        shown = dict(image=self.image_layer(), geometry=self._geometry, timelapse=self._timelapse, preview=True,
                     radius_estimate=self.estimate.estimate_for(self.image_layer()))
        self._preview_started = time.perf_counter()
        self.preview_runner.start(lambda job: logic.detect_job(request, frames, job.check),
                                  lambda result: self._show(layers.Shown(result=result, **shown), window),
                                  desc="Detecting nuclei (preview)", inputs=(shown["image"],),
                                  on_end=self._preview_clock.stop)
        self._preview_clock.start()

    def _preview_when_idle(self):
        self._preview_waiting = False
        self.preview()

    def _preview_progress(self):
        """After half a second, the running preview's passes in the status line."""
        job = self.preview_runner.job
        if job is None:
            return self._preview_clock.stop()
        if time.perf_counter() - self._preview_started >= 0.5:
            bar = job.progress
            self.status.show(f"preview: pass {bar.n} of {bar.total}…" if bar.total else "preview: starting…")

    def run(self):
        """Detect on the whole image; cancels a pending or running preview."""
        self._preview_later.cancel()
        self.preview_runner.cancel()
        built = self._request(preview=False)
        if built is None:
            return
        request, _, frames = built
        shown = dict(image=self.image_layer(), geometry=self._geometry, timelapse=self._timelapse, preview=False,
                     radius_estimate=self.estimate.estimate_for(self.image_layer()))
        self._running(True)
        self.status.show("running on the whole image" + (f" ({len(frames)} frames)…" if frames else "…"))
        self.runner.start(lambda job: logic.run_detection(request, frames, job.check),
                          lambda result: self._show(layers.Shown(result=result, **shown)), desc="Detecting nuclei",
                          inputs=(shown["image"],), on_end=lambda: self._running(False))
    def cancel(self):
        self._preview_later.cancel()
        self.preview_runner.cancel()
        self.runner.cancel()
        self.volume.cancel()
        self.estimate.cancel()
        self._running(False)
        self.status.show("cancelled")

    # -- output (main thread, input layers checked by the runner) ---------------
    def _show(self, shown: layers.Shown, window=None):
        if shown.preview:
            self._preview = shown
            layers.outline_window(self.viewer, shown.image, window, shown.geometry)
        else:
            self._run, self._preview = shown, None
            layers.remove_layers(self.viewer.layers, layers.preview_layer_names(shown.image.name))
        if not shown.preview or self._run is None:
            low, high = logic.score_range(shown.result)
            with self.threshold.changed.blocked():
                set_range(self.threshold, low, high)
        self._apply_threshold()
        self.finished_result.emit(shown.result)

    def _on_threshold_moved(self, *_):
        with self.auto_threshold.changed.blocked():
            self.auto_threshold.value = False
        self._apply_threshold()

    def _threshold(self):
        if self.auto_threshold.value:
            return "auto"
        return None if self.threshold.value <= self.threshold.min * (1 + 1e-9) else self.threshold.value

    def _apply_threshold(self, *_):
        """Refilter the cached maxima of the Run and of the preview, each on its own image (no new detection)."""
        texts, applied = layers.show_all(self.viewer, (self._run, self._preview), self._threshold())
        if self.auto_threshold.value and np.isfinite(applied) and applied > 0:
            with self.threshold.changed.blocked():
                self.threshold.value = min(max(applied, self.threshold.min), self.threshold.max)
        value = f"{applied:.3g}" if texts and np.isfinite(applied) else ("any" if texts else "—")
        self.threshold.label = f"score ≥ {value}" + (" (auto)" if self.auto_threshold.value else "")
        if texts:
            self.status.show("; ".join(texts))

    def points_layer(self):
        name = self._run.layer_name if self._run is not None else None
        return self.viewer.layers[name] if name in self.viewer.layers else None

    def export(self, path: str | None = None):
        """Save the Run's points as CSV (``path``, or asked in a file dialog)."""
        layer = self.points_layer()
        if layer is None:
            return self.status.show("Nothing to export yet: Run the detection first.", error=True)
        written = layers.export_points(layer, path, parent=self.native)
        if written:
            self.status.show(f"exported {len(layer.data)} points to {written}")

    def settings(self) -> dict:
        """The current detection settings (for Run on folder and Run on whole volume)."""
        return {"radius": self.radius.value, "polarity": self.polarity.value, "blur": self.blur.value or None,
                "threshold": self._threshold(), "spacing": None if self._geometry is None else self._geometry.scale,
                "unit": None if self._geometry is None else self._geometry.unit, "detector": self.learn_panel.detector}
