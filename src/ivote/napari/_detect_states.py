"""The data and style of the "Detect nuclei" dock's Points layers (Qt-free): rings of the nucleus' size coloured
by log score, a preview's thin cyan rings, a time-lapse's frame column."""

from __future__ import annotations

import math

import numpy as np

from ._detect_geometry import ImageGeometry
from ._detect_jobs import score_range
from ._names import NUCLEI, result_name

__all__ = [
    "PREVIEW_STYLE", "SCORE_COLORMAP", "points_layer_name", "points_layer_state", "result_layer_state",
    "show_points"
]


SCORE_COLORMAP = "viridis"


def points_layer_name(image_name: str) -> str:
    """Name of the Points layer holding the nuclei found in ``image_name``."""
    return result_name(NUCLEI, image_name)


def points_layer_state(geometry: ImageGeometry, radius: float, points, scores, *, image_name: str,
                       score_range=None) -> dict:
    """Data and properties of the Points layer for the nuclei of an image.

    Points are in the image's pixel coordinates; the layer inherits its scale
    and translate, so they sit on the nuclei in world coordinates. napari sizes
    points in data pixels along the last axis, so a diameter of ``2 r`` in world
    units is ``2 r / scale[-1]``.
    """
    points = np.asarray(points, dtype=np.float64).reshape(-1, geometry.ndim)
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if score_range is None:
        positive = scores[scores > 0]
        score_range = (float(positive.min()), float(positive.max())) if positive.size else (1.0, 10.0)
    # colour by log10(score), as the threshold slider: scores span orders of magnitude
    low, high = (math.log10(v) for v in score_range)
    log_scores = np.log10(np.maximum(scores, score_range[0]))
    return {
        "data": points,
        "name": points_layer_name(image_name),
        "ndim": geometry.ndim,
        "scale": geometry.scale,
        "translate": geometry.translate,
        "units": geometry.units,
        # a ring the size of the nucleus, coloured by score: the nucleus stays visible inside it
        "size": 2.0 * radius / geometry.scale[-1],
        "features": {"score": scores, "log10_score": log_scores},
        "face_color": "transparent",
        "border_color": "log10_score",
        "border_colormap": SCORE_COLORMAP,
        "border_contrast_limits": (low, high if high > low else low + 1.0),
        "border_width": 0.12,
        "border_width_is_relative": True,
        "opacity": 1.0,
        "metadata": {"ivote_image": image_name, "radius": float(radius),
                     "units": None if geometry.unit in ("px", "world units") else geometry.unit},
    }


def show_points(layers, state: dict, points_type):
    """Put ``state`` (from :func:`points_layer_state`) in the viewer's layer list.

    The Points layer of an image is updated in place when it exists (so re-running
    never duplicates it, and the user's display settings survive); otherwise it
    is created. ``points_type`` is ``napari.layers.Points`` (kept out of the
    imports so this module runs without napari). Returns the layer.
    """
    name = state["name"]
    layer = layers[name] if name in layers else None
    if not isinstance(layer, points_type):
        from ._writer_order import prefer_ivote_writers

        prefer_ivote_writers()  # File > Save on this layer: our CSV (physical units, score), not napari's
        layer = points_type(**state)
        if layer.ndim == 3:
            try:  # napari >= 0.9: with thick slicing, nuclei of nearby planes show as smaller discs
                layer.projection_mode = "rescale_spherical"
            except (ValueError, KeyError):
                pass
        layers.append(layer)
        return layer
    layer.data = state["data"]  # resizes the features table; the new one follows
    for key in ("features", "scale", "translate", "rotate", "shear", "affine", "units", "size", "metadata",
                "border_color", "border_width", "border_contrast_limits"):
        if key in state:
            setattr(layer, key, state[key])
    return layer


PREVIEW_STYLE = {"border_color": "cyan", "border_width": 0.07}
"""Thin cyan rings: a preview told apart from the Run's score-coloured rings at a glance."""


def result_layer_state(result, geometry: ImageGeometry, threshold, *, name: str, image_name: str, preview: bool,
                       timelapse: bool, radius_estimate: float | None = None) -> tuple[dict, float]:
    """The Points layer state of ``result`` at ``threshold`` (see :func:`points_layer_state`), and the
    threshold applied. A preview is marked so it is never offered as seeds or a count's input.
    ``radius_estimate`` (the Estimate button's value for the image) goes into the metadata with the radius, and
    whether the radius used is that estimate (``radius_estimated``, as ``Detections.radius_estimated``)."""
    points, scores, contrasts, applied = result.refiltered(threshold)  # one refilter per threshold change
    state = points_layer_state(geometry, result.detections.radius, points[:, -geometry.ndim:], scores,
                               image_name=image_name, score_range=score_range(result))
    state["name"] = name
    state["features"] = {**state["features"], "contrast": contrasts}
    if radius_estimate is not None:
        used = float(result.detections.radius)
        state["metadata"] = {**state["metadata"], "radius_estimate": float(radius_estimate),
                             "radius_estimated": math.isclose(used, radius_estimate, rel_tol=1e-6)}
    if preview:
        state["metadata"] = {**state["metadata"], "ivote_kind": "preview"}
        state.update(PREVIEW_STYLE)
        state.pop("border_colormap"), state.pop("border_contrast_limits")
    if timelapse:  # the frame first; 'axes' tells the CSV writer it is time
        state["data"], state["ndim"] = points, points.shape[1]
        state["metadata"] = {**state["metadata"], "axes": "t" + "zyx"[-geometry.ndim:]}
    return state, applied
