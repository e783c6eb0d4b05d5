"""Where the "Detect nuclei" widget's results go in the viewer: the Run's and the preview's Points layers and the
outline of the preview window. Each result is kept with the image and geometry it was computed on, so a result is
only ever drawn on its own image; the preview layers leave with their image."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from napari.layers import Points

from . import _detect_logic as logic
from ._widgets_common import spatial_transform

PREVIEW_PREFIX = "nuclei (preview): "
WINDOW_PREFIX = "preview window: "
RUNNING_PREFIX = "nuclei (running): "
SCRATCH_PREFIXES = (PREVIEW_PREFIX, WINDOW_PREFIX, RUNNING_PREFIX)
"""The layers the dock draws while it works, never results: they go when the dock closes."""


@dataclass(frozen=True)
class Shown:
    """A result and what it belongs to: its image layer, that image's geometry, whether the image is a time-lapse."""

    image: object
    result: object
    geometry: logic.ImageGeometry
    timelapse: bool
    preview: bool
    radius_estimate: float | None = None
    """The Estimate button's radius for the image when it had one at the run's start (stored in the metadata)."""

    @property
    def layer_name(self) -> str:
        return PREVIEW_PREFIX + self.image.name if self.preview else logic.points_layer_name(self.image.name)


def show(viewer, shown: Shown, threshold) -> tuple[int, float]:
    """Put ``shown`` at ``threshold`` into its Points layer (created or updated); (points shown, threshold applied)."""
    state, applied = logic.result_layer_state(shown.result, shown.geometry, threshold, name=shown.layer_name,
                                              image_name=shown.image.name, preview=shown.preview,
                                              timelapse=shown.timelapse, radius_estimate=shown.radius_estimate)
    state.update(spatial_transform(shown.image, state["ndim"]))
    logic.show_points(viewer.layers, state, Points)
    viewer.layers.selection.active = shown.image
    return len(state["data"]), applied


def show_all(viewer, results, threshold) -> tuple[list[str], float]:
    """:func:`show` each of ``results`` (None or :class:`Shown`) whose image is still in the viewer.

    Returns the status texts ("N nuclei (kind, seconds)") and the last threshold applied.
    """
    texts, applied = [], np.nan
    for shown in results:
        if shown is None or shown.image not in viewer.layers:
            continue
        count, applied = show(viewer, shown, threshold)
        texts.append(f"{count} nuclei ({logic.result_kind(shown.result, shown.geometry)}, "
                     f"{shown.result.seconds:.2f} s)")
    return texts, applied


def export_points(layer, path=None, *, parent=None) -> str | None:
    """Write a Points layer as CSV, QuPath GeoJSON or a Fiji ROI set (:mod:`._export`), to ``path`` or where a file
    dialog says."""
    from ._export import export_points_layer

    return export_points_layer(layer, path, parent=parent)


def camera_of(viewer):
    """The viewer's camera (``viewer.scene.camera`` since napari 0.9, ``viewer.camera`` before)."""
    scene = getattr(viewer, "scene", None)
    return scene.camera if scene is not None else viewer.camera


def canvas_size(viewer) -> tuple:
    """The canvas's (height, width) in screen pixels (``viewer.canvas`` since napari 0.9, the Qt viewer's
    canvas before)."""
    canvas = getattr(viewer, "canvas", None)
    if canvas is None:
        canvas = viewer.window._qt_viewer.canvas
    return tuple(canvas.size)


def visible_pixels(viewer, image):
    """The part of ``image`` on the 2D canvas in its full-resolution pixels (None in a 3D view)."""
    if viewer.dims.ndisplay != 2:
        return None
    camera = camera_of(viewer)
    return logic.visible_pixels(image, camera_center=camera.center, zoom=camera.zoom,
                                canvas_size=canvas_size(viewer), world_point=viewer.dims.point,
                                displayed=viewer.dims.displayed)


def outline_window(viewer, image, window, geometry: logic.ImageGeometry):
    """A yellow rectangle around the preview's window, or none when the preview covers the whole plane."""
    name = WINDOW_PREFIX + image.name
    partial = window is not None and any(s.stop - s.start < n for s, n in zip(window[-2:], geometry.shape[-2:]))
    if not partial:
        return remove_layers(viewer.layers, [name])
    (y0, y1), (x0, x1) = [(s.start - 0.5, s.stop - 0.5) for s in window[-2:]]
    rectangle = np.array([[y0, x0], [y0, x1], [y1, x1], [y1, x0]])
    if name in viewer.layers:
        viewer.layers[name].data = [rectangle]
    else:
        viewer.add_shapes([rectangle], shape_type="rectangle", name=name, face_color="transparent",
                          edge_color="yellow", edge_width=2, opacity=0.8, **spatial_transform(image, 2))
        viewer.layers.selection.active = image


def preview_layer_names(image_name: str) -> list[str]:
    return [prefix + image_name for prefix in SCRATCH_PREFIXES]


def append_running(viewer, image, points, ndim: int, size: float):
    """Add a block's provisional cells (pixel coordinates of ``image``) to its 'nuclei (running)' layer, created
    on the image's transform: hollow grey rings, so the final Points layer reads apart from them."""
    name = RUNNING_PREFIX + image.name
    points = np.asarray(points, dtype=float).reshape(-1, ndim)
    if name in viewer.layers:
        layer = viewer.layers[name]
        layer.data = np.concatenate([layer.data, points])  # no features: provisional, replaced at the end
        return layer
    layer = viewer.add_points(points, name=name, size=size,
                              face_color="transparent", border_color="lightgray", border_width=0.1, opacity=0.7,
                              **spatial_transform(image, ndim))
    viewer.layers.selection.active = image
    return layer


def remove_layers(layers, names):
    for name in names:
        if name in layers:
            layers.remove(name)
