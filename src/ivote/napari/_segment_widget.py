"""The "Segment nuclei" dock widget (magicgui): image + seed points in, a Labels layer out (math in ivote.segment)."""

from __future__ import annotations

import math

import numpy as np
from magicgui.widgets import CheckBox, ComboBox, Container, FloatSpinBox, PushButton, SpinBox
from napari.layers import Image, Points
from napari.utils.notifications import show_warning

from .. import _backend
from .._files import adopt_file_scale
from .._validate import MIN_RADIUS_PIXELS
from ..segment import DEFAULT_WEIGHTS, segment_nuclei
from ._choice import last_detected, preferred_image
from ._detect_logic import fit_radius, layer_geometry
from ._export import add_outlines_button
from ._names import LABELS, NUCLEI, result_name
from ._radius_estimate import EstimatePanel
from ._widgets_common import (DockWidget, Status, connect_while_docked, layer_choices, polarity_for, show_result,
                              spatial_transform, warm_labels_display, world_to_pixels)

WEIGHTS = (("lambda1", "λ₁ (inside fit)", "lambda1", "Weight of the fit of the intensity inside each nucleus."),
           ("lambda2", "λ₂ (outside fit)", "lambda2", "Weight of the fit of the background intensity."),
           ("mu", "μ (smoothness)", "mu", "Curvature weight: larger gives smoother outlines."),
           ("shape_weight", "shape prior", "beta", "Pull towards an ellipse (ellipsoid in 3D)."),
           ("overlap_weight", "overlap penalty", "omega", "Push touching nuclei apart."))


def seeds_in_pixels(points: Points, image: Image) -> np.ndarray:
    """Points layer coordinates to the image layer's pixel coordinates, through both layers' transforms."""
    return world_to_pixels(points, image)


class SegmentWidget(DockWidget):
    """Outline nuclei by interacting level sets seeded at a Points layer."""

    def __init__(self, napari_viewer):
        self.image = ComboBox(label="image", choices=layer_choices(napari_viewer, Image),
                              tooltip="Image layer whose nuclei are outlined.")
        self.seeds = ComboBox(label="seeds", choices=layer_choices(napari_viewer, Points),
                              tooltip="Points layer with one point per nucleus ('nuclei: <image>' from Detect).")
        self.radius = FloatSpinBox(label="radius (px)", min=MIN_RADIUS_PIXELS, max=1e4, value=8.0, step=0.5,
                                   tooltip="Largest nucleus radius in the image's units; taken from the seeds' "
                                           "detection when it has one.")
        self.estimate = EstimatePanel(self)
        self._grey_polarity = "bright"  # the polarity chosen for grey images, back after an RGB one
        self.polarity = ComboBox(label="polarity", choices=["bright", "dark"], value="bright",
                                 tooltip="Nuclei brighter or darker than the background (RGB: haematoxylin).")
        self.iterations = SpinBox(label="iterations", min=1, max=10_000, value=300, step=50,
                                  tooltip="Most level-set iterations; fewer when the outlines stop moving.")
        self.weights = {keyword: FloatSpinBox(label=label, name=keyword, min=0.0, max=100.0, value=DEFAULT_WEIGHTS[key], step=0.1,
                                              tooltip=tip)
                        for keyword, label, key, tip in WEIGHTS}
        self.run_button = PushButton(text="Run", tooltip="Segment every seed.")
        self.cancel_button = PushButton(text="Cancel", enabled=False, tooltip="Stop the segmentation.")
        self.status = Status()
        self.advanced = CheckBox(text="advanced weights", value=False,
                                 tooltip="Show the level-set weights (the defaults suit most images).")
        self.weights_panel = Container(widgets=list(self.weights.values()), visible=False)
        self.advanced.changed.connect(lambda on: setattr(self.weights_panel, "visible", on))
        buttons = Container(widgets=[self.run_button, self.cancel_button], layout="horizontal", labels=False)
        super().__init__(napari_viewer, [self.image, self.seeds, self.radius, self.estimate, self.polarity,
                                         self.iterations, self.advanced, self.weights_panel, buttons, self.status],
                         run_button=self.run_button, cancel_button=self.cancel_button)
        self.estimate.attach()
        self.export_button = add_outlines_button(self)  # GeoJSON, Fiji ROI set or CSV (._export)
        connect_while_docked(self, napari_viewer.layers.events.removed, lambda event: self.estimate.forget(event.value))
        self.run_button.changed.connect(self.run)
        self.cancel_button.changed.connect(self.cancel)
        self.image.changed.connect(self._on_image_changed)
        self.seeds.changed.connect(self._on_seeds_changed)
        self._picked = None  # the image the user chose in the list, kept over newer layers
        self.image.native.activated.connect(lambda *_: setattr(self, "_picked", self.image.value))
        connect_while_docked(self, napari_viewer.layers.events.inserted, self._offer_image)
        self._offer_image()
        self._on_image_changed()

    def _offer_image(self, *_):
        """The user's image, else the one the seeds (or the last Run) were found on, else a nuclear stain's channel."""
        seeds = self.seeds.value
        source = seeds.metadata.get("ivote_image") if seeds is not None else None
        detected = self.viewer.layers[source] if source in self.viewer.layers else last_detected(self.viewer.layers)
        choice = preferred_image(list(self.image.choices), picked=self._picked, detected=detected)
        if choice is not None and choice is not self.image.value:
            self.image.value = choice

    def _geometry(self):
        """The chosen image's geometry; None for none, or one Segment does not take (4D, a time-lapse)."""
        layer = self.image.value
        if layer is None:
            return None
        try:
            geometry, timelapse = layer_geometry(layer)
        except ValueError:
            return None
        return None if timelapse else geometry  # its time axis is not a z axis

    @property
    def busy(self) -> bool:
        return self.runner.busy or self.estimate.busy

    def cancel(self):
        self.estimate.cancel()
        super().cancel()

    def estimate_source(self):
        """What the Estimate button measures: (image layer, geometry, False), or why there is none."""
        layer, geometry = self.image.value, self._geometry()
        if layer is None or geometry is None:
            return "Choose a 2D, 3D or 2D RGB image layer first (not a time-lapse)."
        return layer, geometry, False

    def _on_image_changed(self, *_):
        self.estimate.image_changed(self.image.value)
        if self.image.value is not None:
            adopt_file_scale(self.image.value)  # a layer opened by a reader that set no pixel size
        layer, geometry = self.image.value, self._geometry()
        if layer is not None:
            preferred = result_name(NUCLEI, layer.name)
            if preferred in self.viewer.layers and isinstance(self.viewer.layers[preferred], Points):
                self.seeds.value = self.viewer.layers[preferred]
            self._grey_polarity = polarity_for(self.polarity, layer.rgb, self._grey_polarity)
        if geometry is not None:
            self.radius.label = f"radius ({geometry.unit})"
            self.radius.min, self.radius.max, _ = geometry.radius_range()
        self._on_seeds_changed()

    def _on_seeds_changed(self, *_):
        seeds, geometry = self.seeds.value, self._geometry()
        radius = seeds.metadata.get("radius") if seeds is not None else None
        if radius and geometry is not None:  # the radius the seeds were detected with, beyond the usual range too
            value, maximum, note = fit_radius(float(radius), geometry)
            self.radius.max = max(self.radius.max, maximum)
            self.radius.value = value
            if note:
                self.status.show(f"radius {float(radius):.3g} {geometry.unit} from '{seeds.name}'{note}")

    def run(self):
        image, points = self.image.value, self.seeds.value
        if image is None or points is None:
            return self.status.show("Choose an image layer and a points layer with the seeds.", error=True)
        geometry = self._geometry()
        if geometry is None:
            return self.status.show("Segment works on 2D, 3D or 2D RGB images, not a time-lapse (from Python, "
                                    "ivote.segment_frames segments one frame at a time).", error=True)
        radius, (low, high, _) = self.radius.value, geometry.radius_range()
        # fit_radius keeps a radius the core takes (above the usual range too: a detection's or an estimate's)
        if not (math.isfinite(radius) and fit_radius(radius, geometry)[0] == radius):  # e.g. the scale changed since
            return self.status.show(f"radius must be between {low:g} and {high:g} {geometry.unit} for this image "
                                    f"(at least MIN_RADIUS_PIXELS = {MIN_RADIUS_PIXELS:g} pixels); got {radius:g}.",
                                    error=True)
        data, rgb = image.data[0] if image.multiscale else image.data, image.rgb
        seeds = seeds_in_pixels(points, image)
        kwargs = dict(radius=radius, spacing=geometry.scale, polarity="bright" if rgb else self.polarity.value,
                      iterations=self.iterations.value, **{k: w.value for k, w in self.weights.items()})
        total = kwargs["iterations"]

        def work(job):  # reading a lazy layer and the haematoxylin density too: the GUI never waits on them
            from ..detect import hematoxylin_density

            grey = hematoxylin_density(np.asarray(data)) if rgb else np.asarray(data)
            labels = _backend.to_host(segment_nuclei(grey, seeds, iter_callback=lambda i, _c: job.check(i, total),
                                                     **kwargs))
            warm_labels_display(labels)
            return labels

        estimate = self.estimate.estimate_for(image)
        if (estimate is not None and abs(radius - estimate) <= 0.5 * 10.0 ** -self.radius.native.decimals()
                and fit_radius(estimate, geometry)[0] == estimate):  # not one the box had to clamp
            radius = kwargs["radius"] = float(estimate)  # the box shows the estimate rounded: run with the estimate
        metadata = {"radius": float(radius)}  # with the Estimate button's value, as the Detect dock stores it
        if estimate is not None:
            metadata.update(radius_estimate=float(estimate), radius_estimated=radius == float(estimate))
        source = points.metadata.get("ivote_image")
        mismatch = ""
        if source is not None and source != image.name:  # e.g. another image's seeds replacing good labels
            mismatch = f"seeds '{points.name}' were found on '{source}', not on '{image.name}'"
            show_warning(f"napari-ivote: {mismatch}")
        self.status.show(f"segmenting {len(seeds)} seeds…" + (f" ({mismatch})" if mismatch else ""), error=bool(mismatch))
        self.start(work, lambda labels: self._show(image, labels, len(seeds), metadata, mismatch),
                   desc="Segmenting nuclei", total=total, inputs=(image, points))

    def _show(self, image, labels, n_seeds, metadata, mismatch=""):
        show_result(self.viewer, result_name(LABELS, image.name), labels, metadata=metadata,
                    **spatial_transform(image, labels.ndim))
        count = len(np.unique(labels)) - 1
        self.status.show(f"{count} nuclei from {n_seeds} seeds" +
                         (f" ({n_seeds - count} dropped: faint, merged or duplicate)" if count < n_seeds else "") +
                         (f"; warning: {mismatch}" if mismatch else ""), error=bool(mismatch))
