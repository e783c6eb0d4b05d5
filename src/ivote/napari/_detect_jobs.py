"""The jobs the "Detect nuclei" dock runs and their results (Qt-free): the request a worker runs, the detection
(:func:`ivote.detect.iterative_voting`, frame by frame for a time-lapse, the chunked engine for a whole volume, a
child process for a long CPU Run), and the cached maxima refiltered at a threshold."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ._detect_geometry import ImageGeometry, displayed_frame, is_lazy

__all__ = [
    "DetectRequest", "DetectResult", "DetectionCancelled", "LONG_RUN_WORK", "Refiltered", "TimelapseResult",
    "detect_job", "detect_volume_job", "estimate_input", "estimate_layer_radius", "log_threshold_range",
    "result_kind", "run_detection", "run_frames", "run_guarded", "run_request", "runs_long", "score_range",
    "validate_settings"
]


class DetectionCancelled(Exception):
    """Raised from the progress callback to stop a run (Cancel, or newer settings)."""


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
            # no rule here: refiltered() applies it to the candidates from the original contrast floor, as
            # iterative_voting and detect_frames do ('auto' raises the floor: its rule again from the raised
            # floor kept H&E texture, 108 nuclei where the command line found 99)
            threshold="none",
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
        Otsu rule on all frames' candidates together, or the value given (floor: each frame's own);
        with a learned model, 'auto' is its decision in every frame."""
        from ivote._frames import pooled_rule, pooled_threshold

        learned = any(r.detections.auto_kept is not None for r in self.results)
        if learned and pooled_rule(threshold) == "auto":  # a learned model's decision: one probability threshold
            return threshold, None
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


def detect_volume_job(image, geometry: ImageGeometry, settings: dict, check, *, chunks=None,
                      on_block=None) -> DetectResult:
    """The whole of a (lazy) image through the chunked engine, ``ivote.distributed.detect_chunked``:
    a few blocks in memory at a time; ``check(done, total)`` as blocks finish (raising from it cancels);
    ``on_block(points, scores)`` with each block's provisional cells."""
    import time

    from ..distributed import detect_chunked

    if settings.get("detector") is not None:
        raise ValueError("a learned model is not applied block by block: Forget it, or Run on the image in memory")
    options = {"polarity": settings["polarity"], "threshold": "none"}  # the rule in refiltered(), as run_request
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
