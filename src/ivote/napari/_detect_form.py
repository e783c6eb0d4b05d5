"""The form of the "Detect nuclei" dock widget: its magicgui controls, declared (behaviour in _detect_widget)."""

from __future__ import annotations

import numpy as np
from magicgui.widgets import CheckBox, ComboBox, Container, FloatSlider, FloatSpinBox, LogSlider, PushButton
from napari.layers import Image

from ._batch import BatchPanel
from ._detect_volume import VolumePanel
from ._learn_panel import LearnPanel
from ._radius_estimate import EstimatePanel
from ._widgets_common import DockWidget, Status, layer_choices, polarity_for

_RADIUS_TIP = ("Largest nucleus radius, in the image's physical units: about 1.5x the typical one. "
               "Nuclei found twice: increase it; touching nuclei merged: decrease it.")


class DetectForm(DockWidget):
    """The controls, found by name (``form["radius"]``); layer choices follow the viewer's layer list."""

    def __init__(self, napari_viewer):
        self.image = ComboBox(label="image", choices=layer_choices(napari_viewer, Image),
                              tooltip="Image layer to search (2D, 3D, or 2D RGB such as H&E).")
        self.radius = FloatSlider(label="radius (px)", min=1.0, max=100.0, value=8.0, step=0.1, tooltip=_RADIUS_TIP)
        self.estimate = EstimatePanel(self, follows=" slider; the live preview follows")
        self._grey_polarity = "bright"  # the polarity chosen for grey images, back after an RGB one
        self.polarity = ComboBox(label="polarity", choices=["bright", "dark"], value="bright",
                                 tooltip="Nuclei brighter (fluorescence) or darker (brightfield) than the "
                                         "background. RGB images: the haematoxylin stain is used, always.")
        self.blur = FloatSpinBox(label="blur (px)", min=0.0, max=100.0, step=0.5, value=0.0,
                                 tooltip="Gaussian smoothing before voting, in the image's units; 0 = automatic.")
        self.threshold = LogSlider(label="score ≥ (auto)", min=1e-3, max=1.0, backend_kwargs={"readout": False}, tooltip=(
            "Keep maxima whose voting score is at least this (log-scaled slider; the label shows the value). "
            "Fully left keeps every maximum."))
        self.auto_threshold = CheckBox(text="auto", value=True, tooltip=(
            "Pick the score threshold automatically, with the command line's and Python's default rule "
            "('auto': Otsu's split of the log scores, lowered to 0.3 x the typical nucleus's score, and a "
            "contrast floor where the contrasts fall in two classes; docs/detect.md)."))
        self.live = CheckBox(text="live preview", value=True,
                             tooltip="Recompute a preview when a setting changes. It goes to its own layer; "
                                     "only Run writes 'nuclei: <image>'.")
        self.run_button = PushButton(text="Run", tooltip="Detect on the whole image (every frame of a time-lapse).")
        self.cancel_button = PushButton(text="Cancel", enabled=False, tooltip="Stop the running detection.")
        self.export_button = PushButton(text="Export points…", tooltip="Save the Run's points as CSV (pixel and "
                                        "world coordinates, score, scale and unit), QuPath GeoJSON or a Fiji ROI set.")
        self.status = Status()
        self.batch = BatchPanel(self, tooltip="Apply the current settings to every image in a folder: one "
                                              "points CSV per image and a summary table of counts.")
        self.folder_button = PushButton(text="Run on folder…", tooltip="Show the folder panel: the current "
                                        "settings on every image of a folder.")
        self.volume = VolumePanel(self)
        self.learn_panel = LearnPanel(self)
        self.learn_panel.visible = False  # shown by its toggle in the row below
        buttons = Container(widgets=[self.run_button, self.cancel_button], layout="horizontal", labels=False)
        more = Container(widgets=[self.export_button, self.folder_button, self.learn_panel.toggle], layout="horizontal",
                         labels=False)
        self.batch.visible = False
        super().__init__(napari_viewer, [self.image, self.radius, self.estimate, self.polarity, self.blur, self.threshold,
                                         self.auto_threshold, self.live, buttons, self.volume, more, self.learn_panel,
                                         self.status, self.batch], run_button=self.run_button,
                         cancel_button=self.cancel_button)

    def fit_to(self, geometry, *, keep_radius: bool, largest: float | None = None):
        """Radius range, step and unit labels for an image's geometry; polarity fixed to dark on RGB. ``largest``:
        the largest radius the memory bound lets a detection of the image use; the slider stops there too."""
        low, high, default = geometry.radius_range()
        if largest is not None and largest < high:
            high = max(largest, low)
            default = min(default, high)
        value = self.radius.value if keep_radius and low <= self.radius.value <= high else default
        with self.radius.changed.blocked():
            self.radius.min, self.radius.max = low, high
            self.radius.step = float(np.round(low / 4, 6)) or 0.01
            self.radius.value = value
        self.radius.label, self.blur.label = f"radius ({geometry.unit})", f"blur ({geometry.unit})"
        self._grey_polarity = polarity_for(self.polarity, geometry.rgb, self._grey_polarity)
