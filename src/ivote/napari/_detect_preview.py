"""The part of an image a live preview computes on (Qt-free): the slab around the displayed plane of a volume,
a window around the view on big or lazy planes, and the request of a preview or a Run."""

from __future__ import annotations

import math

import numpy as np

from ._detect_geometry import ImageGeometry, displayed_frame, full_resolution_corners, is_lazy
from ._detect_jobs import DetectRequest

__all__ = [
    "LAZY_PREVIEW_PIXELS", "PREVIEW_PLANE_PIXELS_NUMPY", "build_request", "preview_plane_budget", "preview_slab",
    "preview_window"
]


def preview_slab(geometry: ImageGeometry, radius: float, plane: float) -> tuple[slice, int]:
    """The z range a 3D live preview computes on: the displayed plane +- r (about 2r thick).

    ``plane`` is the displayed z in data (pixel) coordinates. One extra pixel on
    each side keeps a nucleus centred on the plane whole. Returns the slice along
    z and its first index (the z offset to add to the points found in the slab).
    """
    depth = geometry.shape[0]
    half = math.ceil(radius / geometry.scale[0]) + 1
    centre = int(round(min(max(float(plane), 0.0), depth - 1)))
    start, stop = max(centre - half, 0), min(centre + half + 1, depth)
    return slice(start, stop), start


PREVIEW_PLANE_PIXELS_NUMPY = 384 * 384
"""Largest y-x area a live preview computes on NumPy (about 5 s); the GPU previews whole planes."""


def preview_plane_budget() -> int | None:
    """Pixels per plane a live preview may compute: None (the whole visible
    plane) on a GPU or with the compiled CPU kernels (Numba), a window on NumPy."""
    from .._backend import default_xp, use_numba

    xp = default_xp()
    return None if xp is not np or use_numba(xp) else PREVIEW_PLANE_PIXELS_NUMPY


def preview_window(geometry: ImageGeometry, radius: float, *, plane=None, view=None, max_plane_pixels=None,
                   crop_to_view: bool = False):
    """The part of the image a live preview computes on, and its pixel offset.

    Along z (3D), the slab of :func:`preview_slab` around ``plane``. Along y and
    x, the whole plane, or, when it has more than ``max_plane_pixels`` pixels,
    a window of that area centred on the visible part of the image (``view``:
    napari's ``corner_pixels`` of the layer, ``[[y0, x0], [y1, x1]]`` in data
    pixels, inclusive; None or all zeros when unknown). With ``crop_to_view``
    (a lazy layer: Dask, Zarr, multiscale), the window is no larger than the
    visible part (and no smaller than four radii), so only what is seen is
    read. Run always computes the whole image.

    Returns
    -------
    window : tuple of slice
        One slice per spatial axis (an RGB axis is left whole).
    offset : tuple of int
        Pixel position of the window's first pixel, added to its points.
    """
    window, offset = [], []
    if geometry.ndim == 3:
        slab, start = preview_slab(geometry, radius, plane if plane is not None else geometry.shape[0] // 2)
        window.append(slab)
        offset.append(start)
    plane_shape = np.asarray(geometry.shape[-2:])
    size = plane_shape.copy()
    if max_plane_pixels is not None and plane_shape.prod() > max_plane_pixels:
        size = np.minimum(plane_shape, math.isqrt(int(max_plane_pixels)))
        short = int(np.argmin(size))  # a thin image: the long axis gets the rest of the budget
        size[1 - short] = min(plane_shape[1 - short], int(max_plane_pixels) // size[short])
    view = None if view is None else np.asarray(view, dtype=float).reshape(2, -1)[:, -2:]
    if view is None or not view.any():
        centre = plane_shape / 2.0
    else:
        low, high = np.clip(view[0], 0, plane_shape - 1), np.clip(view[1], 0, plane_shape - 1)
        centre = (low + high + 1) / 2.0
        if crop_to_view:
            smallest = np.ceil(4 * radius / np.asarray(geometry.scale[-2:])).astype(int)
            size = np.minimum(size, np.maximum(high - low + 1, smallest).astype(int))
    start = np.clip(np.round(centre - size / 2.0).astype(int), 0, plane_shape - size)
    for lo, n in zip(start, size):
        window.append(slice(int(lo), int(lo + n)))
        offset.append(int(lo))
    return tuple(window), tuple(offset)


LAZY_PREVIEW_PIXELS = 1024 * 1024
"""Largest y-x area a live preview reads from a lazy layer (Dask, Zarr, multiscale): about a screen."""


def build_request(layer, geometry: ImageGeometry, *, timelapse: bool, world_point, radius: float, polarity: str,
                  blur: float | None, preview: bool, view=None, detector=None):
    """What a worker runs for ``layer``: ``(request, window, frames)``.

    Run: the whole image (every frame of a time-lapse). Preview: the displayed
    frame; in 3D a slab around the displayed plane (``world_point``, the
    viewer's ``dims.point``); on big planes a window around the visible part.
    ``view`` is the visible part (:func:`visible_pixels`; napari's
    ``corner_pixels`` when None). ``window`` is the preview's slices (None for
    a Run), ``frames`` the frame indices of a time-lapse (None otherwise).
    """
    data = layer.data[0] if layer.multiscale else layer.data
    offset = window = frames = None
    lazy = is_lazy(layer)
    position = layer.world_to_data(world_point)
    if timelapse:
        current = displayed_frame(layer, world_point)
        frames = (current,) if preview else tuple(range(data.shape[0]))
        if preview:
            data = data[current]
    if preview:
        spatial = position[1 if timelapse else 0:]
        plane = spatial[0] if geometry.ndim == 3 else None
        budget = preview_plane_budget()
        if lazy:  # read the visible region only, at full resolution, and not more than a screen of it
            budget = min(budget or LAZY_PREVIEW_PIXELS, LAZY_PREVIEW_PIXELS)
        window, offset = preview_window(geometry, radius, plane=plane, view=full_resolution_corners(layer) if view is None else view,
                                        max_plane_pixels=budget, crop_to_view=lazy)
        data = data[window]
    request = DetectRequest(np.asarray(data), radius, geometry.scale, polarity, blur, offset, 0, preview,
                            detector=detector)
    return request, window, frames
