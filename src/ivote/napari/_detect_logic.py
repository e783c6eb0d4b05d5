"""Qt-free logic behind the "Detect nuclei" widget.

Everything here is plain Python on arrays and small dataclasses, so it can be
tested (and benchmarked on a GPU machine) without napari or Qt: the geometry of
an image layer (spatial axes, scale, unit), the request a worker runs, the 3D
preview slab around the displayed plane, and the data of the output Points layer.
The detection itself is :func:`ivote.detect.iterative_voting`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ._names import NUCLEI, result_name
from ._units import unit_label

__all__ = [
    "DetectRequest",
    "DetectResult",
    "DetectionCancelled",
    "ImageGeometry",
    "build_request",
    "detect_job",
    "displayed_frame",
    "estimate_input",
    "estimate_layer_radius",
    "fit_radius",
    "grey_rgb_note",
    "image_geometry",
    "layer_geometry",
    "points_layer_name",
    "points_layer_state",
    "preview_slab",
    "result_layer_state",
    "run_request",
    "log_threshold_range",
    "score_range",
]

SCORE_COLORMAP = "viridis"


class DetectionCancelled(Exception):
    """Raised from the progress callback to stop a run (Cancel, or newer settings)."""


def points_layer_name(image_name: str) -> str:
    """Name of the Points layer holding the nuclei found in ``image_name``."""
    return result_name(NUCLEI, image_name)


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


@dataclass(frozen=True)
class DetectRequest:
    """Everything a worker needs: the pixels (whole image or slab) and the settings."""

    image: np.ndarray = field(repr=False)
    radius: float
    """Radius in world units (the image's scale units)."""
    spacing: tuple[float, ...]
    polarity: str = "bright"
    blur: float | None = None
    """Pre-smoothing for the detector; None keeps its default."""
    offset: tuple[int, ...] | None = None
    """Pixel offset of ``image`` in the full image (3D preview slab), or None."""
    generation: int = 0
    """Which request of the widget this is; results of older ones are dropped."""
    preview: bool = False
    backend: str = "auto"
    """Detector backend: 'auto' (GPU when there is one), 'numpy' or 'cupy'."""
    detector: object = None
    """A learned detector (``ivote.learn.LearnedDetector``) that scores the candidates, or None."""

    def settings(self) -> tuple:
        """The settings that make a cached result reusable (the threshold is not one)."""
        return (self.radius, self.spacing, self.polarity, self.blur, self.offset, self.image.shape)


class Refiltered(NamedTuple):
    """A result's maxima kept at a threshold: points (full-image pixels; a time-lapse's with the frame
    first), their scores and contrasts to the noise, and the threshold applied."""

    points: np.ndarray
    scores: np.ndarray
    contrasts: np.ndarray
    threshold: float


@dataclass(frozen=True)
class DetectResult:
    """A detector run and where its points belong in the full image."""

    detections: object  # ivote.detect.Detections
    offset: tuple[int, ...] | None
    generation: int
    preview: bool
    seconds: float
    window_shape: tuple[int, ...] | None = None
    """Spatial shape of the part of the image computed (a preview window), or None."""

    def refiltered(self, threshold="auto", min_contrast=None) -> Refiltered:
        """The kept maxima at ``threshold`` (and a contrast floor), points in full-image pixels.

        Only refilters the cached maxima, once (``Detections.with_threshold``).
        """
        if min_contrast is None:
            detections = self.detections.with_threshold(threshold)
        else:
            detections = self.detections.with_threshold(threshold, min_contrast)
        points = np.asarray(detections.points, dtype=np.float64)
        if self.offset is not None and len(points):
            points = points + np.asarray(self.offset, dtype=np.float64)
        return Refiltered(points, np.asarray(detections.scores, dtype=np.float64),
                          np.asarray(detections.contrasts, dtype=np.float64), float(detections.threshold))

    def points(self, threshold="auto", min_contrast=None) -> tuple[np.ndarray, np.ndarray, float]:
        """(points in full-image pixels, scores, applied threshold): :meth:`refiltered` without the contrasts."""
        kept = self.refiltered(threshold, min_contrast)
        return kept.points, kept.scores, kept.threshold


def result_kind(result: DetectResult, geometry: ImageGeometry) -> str:
    """What a result covers, for the status line."""
    if not result.preview:
        return "whole image"
    parts = []
    if geometry.ndim == 3:
        parts.append("the slab around the displayed plane")
    if result.window_shape is not None and tuple(result.window_shape[-2:]) != geometry.shape[-2:]:
        parts.append("a {}x{} window around the view".format(*result.window_shape[-2:]))
    return "preview" + (" of " + ", ".join(parts) if parts else "")


def validate_settings(radius, *, has_image: bool) -> str | None:
    """A message for settings that cannot run, or None when they can."""
    if not has_image:
        return "Add or select an image layer first (File > Open, or File > Open Sample)."
    if not (isinstance(radius, (int, float)) and math.isfinite(radius) and radius > 0):
        return f"The radius must be larger than 0; got {radius:g}."
    return None


def run_request(request: DetectRequest, iter_callback=None) -> DetectResult:
    """Run the detector on ``request`` (what the widget's worker calls).

    ``iter_callback(pass_index, n_passes)`` is passed through; raising from it
    (e.g. :class:`DetectionCancelled`) stops the run within a pass. GPU memory
    pools are emptied afterwards, whatever happened.
    """
    import time

    from .. import detect
    from .._backend import free_gpu_memory

    kwargs = {}
    if request.blur is not None:
        kwargs["blur"] = request.blur
    start = time.perf_counter()
    try:
        detections = detect.iterative_voting(
            request.image,
            radius=request.radius,
            spacing=request.spacing,
            polarity=request.polarity,
            threshold="auto",
            iter_callback=iter_callback,
            backend=request.backend,
            detector=request.detector,
            **kwargs,
        )
    finally:
        free_gpu_memory()
    window = tuple(request.image.shape[: len(request.spacing)])  # without an RGB axis
    return DetectResult(detections, request.offset, request.generation, request.preview,
                        time.perf_counter() - start, window if request.offset is not None else None)


def score_range(result: DetectResult) -> tuple[float, float]:
    """Smallest and largest positive score of all candidate maxima ((1, 10) when none)."""
    scores = np.asarray(result.detections.candidate_scores, dtype=np.float64)
    scores = scores[scores > 0]
    if scores.size == 0:
        return 1.0, 10.0
    low, high = float(scores.min()), float(scores.max())
    return (low, high) if high > low else (low, 10.0 * low)


def log_threshold_range(result: DetectResult) -> tuple[float, float]:
    """Range of the threshold slider, in log10(score).

    Scores of nuclei and of background maxima differ by orders of magnitude (the
    core's Otsu threshold works on their logarithm too), so a linear slider would
    crowd every background maximum into its first pixel.
    """
    low, high = score_range(result)
    return math.log10(low), math.log10(high)


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


def run_guarded(request: DetectRequest, is_current, report=None):
    """:func:`run_request` for a worker thread: never raises.

    Before each pass reports ``report(passes_done, n_passes)``, and cancels as soon
    as ``is_current()`` turns false (Cancel pressed, or newer settings). Returns
    the :class:`DetectResult`, None when cancelled, or the exception when the
    run failed (the widget shows its message, not a traceback).
    """

    def iter_callback(index, n_passes):
        if not is_current():
            raise DetectionCancelled
        if report is not None:
            report(index + 1, n_passes)

    try:
        return run_request(request, iter_callback)
    except DetectionCancelled:
        return None
    except Exception as exc:
        return exc


TIME_LABELS = ("t", "time", "frame", "frames")


def time_axis_of(shape, *, rgb=False, axis_labels=None) -> bool:
    """Whether the first axis of an image layer is time: labelled so, and 2D or 3D frames behind it."""
    labels = [str(label).lower() for label in (axis_labels or ())]
    spatial = len(shape) - (1 if rgb else 0) - 1
    return bool(labels) and labels[0] in TIME_LABELS and spatial in (2, 3)


@dataclass(frozen=True)
class TimelapseResult:
    """Per-frame :class:`DetectResult` objects of a time-lapse, seen as one result with a leading t column."""

    frames: tuple[int, ...]
    results: tuple[DetectResult, ...]

    @property
    def detections(self):
        return _PooledDetections(self.results)

    @property
    def preview(self) -> bool:
        return self.results[0].preview if self.results else False

    @property
    def window_shape(self):
        return self.results[0].window_shape if self.results else None

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.results)

    def _one_threshold(self, threshold):
        """(threshold, contrast floor) for every frame, as ``ivote.detect_frames``: the 'auto' or
        Otsu rule on all frames' candidates together, or the value given (floor: each frame's own)."""
        from ivote._frames import pooled_rule, pooled_threshold

        if pooled_rule(threshold) is not None and self.results:
            return pooled_threshold(threshold, [r.detections for r in self.results])
        return threshold, None

    def refiltered(self, threshold="auto") -> Refiltered:
        """Every frame's kept maxima (points with a leading frame index); one threshold for every frame
        (the rule over all frames' candidates together, as ``ivote.detect_frames``), computed once."""
        threshold, floor = self._one_threshold(threshold)
        kept = [result.refiltered(threshold, floor) for result in self.results]
        rows = [np.column_stack([np.full(len(k.points), float(frame)), k.points.reshape(len(k.points), -1)])
                for frame, k in zip(self.frames, kept)]
        ndim = 1 + (self.results[0].detections.points.shape[1] if self.results else 2)
        points = np.concatenate(rows) if rows else np.zeros((0, ndim))
        return Refiltered(points.reshape(-1, ndim), np.concatenate([k.scores for k in kept]) if kept else np.zeros(0),
                          np.concatenate([k.contrasts for k in kept]) if kept else np.zeros(0),
                          next((k.threshold for k in kept if not math.isnan(k.threshold)), math.nan))

    def points(self, threshold="auto") -> tuple[np.ndarray, np.ndarray, float]:
        """(points with a leading frame index, scores, the threshold): :meth:`refiltered` without the contrasts."""
        kept = self.refiltered(threshold)
        return kept.points, kept.scores, kept.threshold


@dataclass(frozen=True)
class _PooledDetections:
    results: tuple

    @property
    def radius(self) -> float:
        return self.results[0].detections.radius

    @property
    def candidate_scores(self) -> np.ndarray:
        return np.concatenate([np.asarray(r.detections.candidate_scores, float) for r in self.results])



def run_frames(request: DetectRequest, frames, iter_callback=None) -> TimelapseResult:
    """:func:`run_request` on each listed frame of ``request.image`` (time first); a plain loop."""
    from dataclasses import replace

    results = []
    for k, frame in enumerate(frames):
        def callback(index, n_passes, k=k):
            if iter_callback is not None:
                iter_callback(k * n_passes + index, len(frames) * n_passes)

        results.append(run_request(replace(request, image=request.image[frame]), callback))
    return TimelapseResult(tuple(int(f) for f in frames), tuple(results))


# -- the widget's steps, on napari layers read through their public attributes (no Qt) -------------------------------
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


def displayed_frame(layer, world_point) -> int:
    """The index of the time-lapse frame the viewer shows (``world_point``: the viewer's ``dims.point``)."""
    data = layer.data[0] if layer.multiscale else layer.data
    return int(np.clip(round(float(layer.world_to_data(world_point)[0])), 0, data.shape[0] - 1))


# -- the radius estimate (the "Estimate" button): the core's radius='auto' on a layer's pixels -----------------------
def estimate_input(layer, *, timelapse: bool, world_point):
    """The pixels a layer's radius is estimated on: the full-resolution image (RGB axis kept), or the displayed frame
    of a time-lapse; a lazy array stays lazy (:func:`estimate_layer_radius` reads a central crop of it)."""
    data = layer.data[0] if layer.multiscale else layer.data
    if not timelapse:
        return data
    if is_lazy(layer) and not hasattr(data, "dask"):  # e.g. Zarr: indexing it would read the whole frame
        try:
            import dask.array as da

            data = da.from_array(data, chunks=getattr(data, "chunks", "auto"))
        except ImportError:
            pass
    return data[displayed_frame(layer, world_point)]


def estimate_layer_radius(data, geometry: ImageGeometry, *, polarity: str, lazy: bool, backend: str = "auto") -> float:
    """The voting radius of ``data`` in the units of its layer's scale, as ``radius='auto'`` resolves it.

    In memory: :func:`ivote.detect.estimate_radius` (RGB read as H&E, as detection reads it; anisotropic spacing
    respected). Lazy (Dask, Zarr, a pyramid's finest level): the chunked engine's estimate, on a central crop read
    from the array (``detect_chunked(radius='auto')``, what "Run on whole volume" would use), never the whole array.
    """
    if lazy:
        try:
            from ..distributed._detect import _estimate_radius
        except ImportError:  # no chunked engine in this installation: read it (estimate_radius crops it)
            _estimate_radius = None
        if _estimate_radius is not None:
            return float(_estimate_radius(data, geometry.shape, geometry.scale, polarity, backend))
    from ..detect import estimate_radius

    return float(estimate_radius(np.asarray(data), spacing=geometry.scale, polarity=polarity, backend=backend))


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


LAZY_PREVIEW_PIXELS = 1024 * 1024
"""Largest y-x area a live preview reads from a lazy layer (Dask, Zarr, multiscale): about a screen."""


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


def detect_volume_job(image, geometry: ImageGeometry, settings: dict, check, *, chunks=None,
                      on_block=None) -> DetectResult:
    """The whole of a (lazy) image through the chunked engine, ``ivote.distributed.detect_chunked``:
    a few blocks in memory at a time; ``check(done, total)`` as blocks finish (raising from it cancels);
    ``on_block(points, scores)`` with each block's provisional cells."""
    import time

    from ..distributed import detect_chunked

    if settings.get("detector") is not None:
        raise ValueError("a learned model is not applied block by block: Forget it, or Run on the image in memory")
    options = {"polarity": settings["polarity"], "threshold": "auto"}
    if settings.get("blur"):
        options["blur"] = settings["blur"]
    start = time.perf_counter()
    found = detect_chunked(image, settings["radius"], spacing=geometry.scale, chunks=chunks, progress=check,
                           on_block=on_block, **options)
    return DetectResult(found, None, 0, False, time.perf_counter() - start)


def detect_job(request: DetectRequest, frames, check):
    """The worker's call: one image, or the listed frames of a time-lapse; ``check(done, total)`` is the
    progress callback (raising from it cancels)."""
    def report(index, n_passes):
        check(index + 1, n_passes)

    if frames is None:
        return run_request(request, report)
    if len(frames) == 1 and request.preview:
        return TimelapseResult(frames, (run_request(request, report),))
    return run_frames(request, frames, report)


LONG_RUN_WORK = 5e8
"""Votes per pass (pixels x radius in pixels ** ndim) above which a CPU Run goes to a child process: about 10 s a
pass with Numba on 2 threads (1.7e9 took 30 s; benchmarks/bench_widget_cancel.py), where the child's start
(2-4 s) is worth a Cancel that stops the CPU at once."""


def runs_long(request: DetectRequest, n_frames: int = 1) -> bool:
    """Whether a Run is long enough on the CPU to run in a child process that Cancel can stop at once
    (about 2 s to start; a GPU's passes are short, so it stays in a thread)."""
    from .._backend import default_xp

    if default_xp() is not np:
        return False
    ndim = len(request.spacing)
    pixels = math.prod(request.image.shape[:ndim]) * n_frames
    return pixels * (request.radius / min(request.spacing)) ** ndim > LONG_RUN_WORK


def run_detection(request: DetectRequest, frames, check):
    """:func:`detect_job` in this thread, or, for a long CPU Run, in a child process that Cancel kills."""
    if not request.preview and runs_long(request, len(frames) if frames else 1):
        from ._process import run_in_process

        return run_in_process(detect_job, (request, frames), check)
    return detect_job(request, frames, check)


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
