"""Qt-free logic behind the "Detect nuclei" widget, by concern:

- :mod:`._detect_geometry`: the geometry and units of an image layer (spatial axes, scale, unit, time axis,
  radius range, the visible part of the canvas);
- :mod:`._detect_preview`: the window a live preview computes on (the slab around the displayed plane, a
  window around the view) and the request of a preview or a Run;
- :mod:`._detect_jobs`: the jobs and their results (the detection, frame by frame, in blocks, or in a child
  process; the cached maxima refiltered at a threshold);
- :mod:`._detect_states`: the data and style of the output Points layers.

Everything is plain Python on arrays and small dataclasses, so it can be tested (and benchmarked on a GPU
machine) without napari or Qt. This module gathers their names for the widgets; a setting read at call time
(``LONG_RUN_WORK``, ``preview_plane_budget``) is changed in its own module.
"""

from __future__ import annotations

from ._detect_geometry import (  # noqa: F401
    ImageGeometry,
    TIME_LABELS,
    displayed_frame,
    fit_radius,
    full_resolution_corners,
    grey_rgb_note,
    image_geometry,
    is_lazy,
    layer_geometry,
    time_axis_of,
    visible_pixels,
)
from ._detect_jobs import (  # noqa: F401
    DetectRequest,
    DetectResult,
    DetectionCancelled,
    LONG_RUN_WORK,
    Refiltered,
    TimelapseResult,
    detect_job,
    detect_volume_job,
    estimate_input,
    estimate_layer_radius,
    log_threshold_range,
    result_kind,
    run_detection,
    run_frames,
    run_guarded,
    run_request,
    runs_long,
    score_range,
    validate_settings,
)
from ._detect_preview import (  # noqa: F401
    LAZY_PREVIEW_PIXELS,
    PREVIEW_PLANE_PIXELS_NUMPY,
    build_request,
    preview_plane_budget,
    preview_slab,
    preview_window,
)
from ._detect_states import (  # noqa: F401
    PREVIEW_STYLE,
    SCORE_COLORMAP,
    points_layer_name,
    points_layer_state,
    result_layer_state,
    show_points,
)

__all__ = [
    "DetectRequest",
    "DetectResult",
    "DetectionCancelled",
    "ImageGeometry",
    "LAZY_PREVIEW_PIXELS",
    "LONG_RUN_WORK",
    "PREVIEW_PLANE_PIXELS_NUMPY",
    "PREVIEW_STYLE",
    "Refiltered",
    "SCORE_COLORMAP",
    "TIME_LABELS",
    "TimelapseResult",
    "build_request",
    "detect_job",
    "detect_volume_job",
    "displayed_frame",
    "estimate_input",
    "estimate_layer_radius",
    "fit_radius",
    "full_resolution_corners",
    "grey_rgb_note",
    "image_geometry",
    "is_lazy",
    "layer_geometry",
    "log_threshold_range",
    "points_layer_name",
    "points_layer_state",
    "preview_plane_budget",
    "preview_slab",
    "preview_window",
    "result_kind",
    "result_layer_state",
    "run_detection",
    "run_frames",
    "run_guarded",
    "run_request",
    "runs_long",
    "score_range",
    "show_points",
    "time_axis_of",
    "validate_settings",
    "visible_pixels",
]
