"""The geometry and units of an image layer, as the "Detect nuclei" dock needs them (Qt-free): its spatial axes,
scale, translate and unit (:class:`ImageGeometry`), a time axis, the radius range, the visible part of the canvas."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._units import unit_label

__all__ = [
    "ImageGeometry", "TIME_LABELS", "displayed_frame", "fit_radius", "full_resolution_corners", "grey_rgb_note",
    "image_geometry", "is_lazy", "layer_geometry", "time_axis_of", "visible_pixels"
]


@dataclass(frozen=True)
class ImageGeometry:
    """Spatial layout of an image layer, as the detector needs it."""

    shape: tuple[int, ...]
    """Spatial shape (``(Y, X)`` or ``(Z, Y, X)``), without the RGB axis."""
    scale: tuple[float, ...]
    translate: tuple[float, ...]
    unit: str
    """Unit of the scale, for labels (``'µm'``, ``'px'``, ...)."""
    rgb: bool = False
    units: tuple[str, ...] | None = None
    """napari's units of the layer (inherited by the Points layer), or None."""

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def radius_range(self) -> tuple[float, float, float]:
        """(minimum, maximum, default) radius in world units for the Detect and Segment docks.

        From the core's smallest radius (``ivote._validate.MIN_RADIUS_PIXELS`` pixels of the finest
        axis, what ``check_radius`` accepts) to a quarter of the smallest in-plane extent; the default
        is 8 in-plane pixels, a typical nucleus at 20x magnification.
        """
        from .._validate import MIN_RADIUS_PIXELS

        pixel = min(self.scale[-2:])
        extent = min(n * s for n, s in zip(self.shape[-2:], self.scale[-2:]))
        high = max(extent / 4.0, 2 * pixel)
        return MIN_RADIUS_PIXELS * min(self.scale), high, min(8.0 * pixel, high)


def image_geometry(shape, *, rgb=False, scale=None, translate=None, units=None, metadata=None) -> ImageGeometry:
    """Geometry of an image layer from its data shape and transform.

    Raises
    ------
    ValueError
        If the image is not 2D, 3D or 2D RGB (the message is shown in the widget).
    """
    shape = tuple(int(n) for n in shape)
    spatial = shape[:-1] if rgb else shape
    if len(spatial) not in (2, 3):
        kind = "RGB " if rgb else ""
        hint = ("; a time-lapse is read frame by frame when its first axis is labelled 't' (the layer's axis "
                "labels), and a channel axis can be split into layers (right-click the layer: Split Stack)") if len(spatial) > 3 else ""
        raise ValueError(
            f"Detect nuclei works on 2D, 3D or 2D RGB images; this {kind}image has "
            f"{len(spatial)} axes (shape {shape}){hint}"
        )
    if rgb and len(spatial) != 2:
        raise ValueError(f"RGB images must be 2D; got shape {shape}")
    ndim = len(spatial)
    scale = tuple(float(s) for s in (scale if scale is not None else (1.0,) * ndim))[-ndim:]
    translate = tuple(float(t) for t in (translate if translate is not None else (0.0,) * ndim))[-ndim:]
    units = tuple(units)[-ndim:] if units is not None else None
    unit = unit_label(units, metadata, scale)
    names = tuple(str(u) for u in units) if units is not None else None
    return ImageGeometry(spatial, scale, translate, unit, bool(rgb), names)


TIME_LABELS = ("t", "time", "frame", "frames")


def time_axis_of(shape, *, rgb=False, axis_labels=None) -> bool:
    """Whether the first axis of an image layer is time: labelled so, and 2D or 3D frames behind it."""
    labels = [str(label).lower() for label in (axis_labels or ())]
    spatial = len(shape) - (1 if rgb else 0) - 1
    return bool(labels) and labels[0] in TIME_LABELS and spatial in (2, 3)


def layer_geometry(layer) -> tuple[ImageGeometry, bool]:
    """Geometry of a napari Image layer and whether its first axis is time (the spatial axes follow it).

    Raises ValueError (shown in the widget) for an image that is not 2D, 3D or 2D RGB (per frame).
    """
    shape = (layer.data[0] if layer.multiscale else layer.data).shape
    timelapse = time_axis_of(shape, rgb=layer.rgb, axis_labels=layer.axis_labels)
    frame = 1 if timelapse else 0
    geometry = image_geometry(shape[frame:], rgb=layer.rgb, scale=layer.scale[frame:],
                              translate=layer.translate[frame:], units=layer.units[frame:], metadata=layer.metadata)
    return geometry, timelapse


_GREY_CHECK_PIXELS = 2**20
"""Pixels of a layer compared to tell a grey image saved as RGB, on selecting it (in the GUI thread)."""


def grey_rgb_note(layer) -> str | None:
    """What to tell the user when an RGB layer holds a grey image (:func:`ivote.detect._colour.is_grey_rgb`;
    a multiscale layer: its smallest level), else None."""
    from ..detect._colour import GREY_RGB_NOTE, is_grey_rgb

    data = layer.data[-1] if layer.multiscale else layer.data
    if not layer.rgb or not is_grey_rgb(data, most_pixels=_GREY_CHECK_PIXELS):
        return None
    return (f"{layer.name!r} {GREY_RGB_NOTE}: to detect on the grey image, split it (right-click the layer > "
            "Split RGB) and pick one of its channels")


def displayed_frame(layer, world_point) -> int:
    """The index of the time-lapse frame the viewer shows (``world_point``: the viewer's ``dims.point``)."""
    data = layer.data[0] if layer.multiscale else layer.data
    return int(np.clip(round(float(layer.world_to_data(world_point)[0])), 0, data.shape[0] - 1))


def fit_radius(radius: float, geometry: ImageGeometry) -> tuple[float, float, str]:
    """Where a radius not chosen on the dock (the Estimate button's, a detection's) goes on its radius control:
    ``(value, control maximum, note)``.

    Inside the control's range (:meth:`ImageGeometry.radius_range`) as is; above it, the range is extended when the
    core takes it (``check_radius``: at most half the image's largest extent), else clamped; below the smallest
    radius the core takes, clamped to it. ``note`` says what was changed ("" when nothing).
    """
    from .._validate import MIN_RADIUS_PIXELS, check_radius

    low, high, _ = geometry.radius_range()
    unit = geometry.unit
    if radius < low:
        return low, high, f"; below the smallest radius ({MIN_RADIUS_PIXELS:g} pixels, {low:.3g} {unit}): set to it"
    if radius <= high:
        return radius, high, ""
    try:
        check_radius(radius, geometry.shape, geometry.scale)
    except ValueError:
        return high, high, f"; larger than the detector takes for this image: set to the largest, {high:.3g} {unit}"
    return radius, radius, f"; above the usual range (up to {high:.3g} {unit}): the range was extended to it"


def is_lazy(layer) -> bool:
    """Whether a layer's pixels are read on demand (multiscale, Dask, Zarr...) rather than held in memory."""
    return bool(layer.multiscale) or not isinstance(layer.data, np.ndarray)


def full_resolution_corners(layer) -> np.ndarray:
    """napari's ``corner_pixels`` (the visible region) in the full-resolution level's pixels.

    For a multiscale layer napari gives them in the displayed level's pixels.
    """
    corners = np.asarray(layer.corner_pixels, dtype=float)
    if layer.multiscale:
        factors = np.asarray(layer.downsample_factors[layer.data_level], dtype=float)
        corners = np.stack([corners[0] * factors, (corners[1] + 1) * factors - 1])
    return corners


def visible_pixels(layer, *, camera_center, zoom: float, canvas_size, world_point, displayed) -> np.ndarray | None:
    """The part of a layer on a 2D canvas, ``[[y0, x0], [y1, x1]]`` in the full-resolution pixels of its last two
    axes (through the layer's own transform), or None when the canvas is unknown.

    napari's ``corner_pixels`` of a multiscale layer is the region it has loaded, which stays the whole image when
    one zooms in; this is what is seen: the canvas (``canvas_size`` screen pixels, height and width) at
    ``zoom`` screen pixels per world unit around ``camera_center``.
    """
    size = np.asarray(canvas_size, dtype=float)[-2:]
    if not (zoom > 0 and np.all(size > 0)):
        return None
    half = size / (2.0 * float(zoom))
    centre = np.asarray(camera_center, dtype=float)[-2:]
    axes = list(displayed)[-2:]
    corners = []
    for corner in ((-1, -1), (-1, 1), (1, -1), (1, 1)):
        world = np.array(world_point, dtype=float)
        world[axes] = centre + half * corner
        corners.append(np.asarray(layer.world_to_data(world), dtype=float)[-2:])
    corners = np.array(corners)
    return np.stack([np.floor(corners.min(axis=0)), np.ceil(corners.max(axis=0))])
