"""Time-lapse: detection and segmentation frame by frame, with one radius and one threshold.

A T axis is never a spatial axis: each frame is detected on its own (frames in
parallel on the CPU where the backend allows), then one threshold is applied to
every frame, so a cell's score means the same in frame 0 and frame 99.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from typing import Any

import numpy as np

from ._typing import Array, ArrayLike, Callback

__all__ = ["FrameDetections", "detect_frames", "segment_frames"]


@dataclass(frozen=True)
class FrameDetections:
    """Nucleus centres of every frame of a time-lapse (:func:`detect_frames`)."""

    points: np.ndarray
    """(N, 1 + ndim) float64: frame, then pixel coordinates (``t, z, y, x`` or ``t, y, x``),
    as a napari Points layer over a (T, ...) image takes them."""
    scores: np.ndarray
    """(N,) float64 scores."""
    threshold: float
    """The one score threshold applied to every frame."""
    frames: tuple
    """One :class:`ivote.Detections` per frame, thresholded alike."""

    @property
    def times(self) -> np.ndarray:
        """(N,) int64 frame of each point."""
        return self.points[:, 0].astype(np.int64)

    def __len__(self) -> int:
        return len(self.points)


def _workers(workers, n_frames: int, backend: str) -> int:
    """Threads over frames: NumPy releases the GIL in its big operations; Numba and the GPU
    already use the whole device for one frame (and Numba's default threading layer must not
    be entered from two threads at once)."""
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1; got {workers!r}")
        return min(int(workers), max(n_frames, 1))
    from ._backend import default_xp, use_numba

    if backend == "cupy" or (backend == "auto" and default_xp() is not np) or use_numba(np):
        return 1
    return max(1, min(n_frames, os.cpu_count() or 1))


def _frame(frames, t):
    frame = frames[t]
    return np.asarray(frame.compute()) if hasattr(frame, "compute") else frame


def _map_frames(function, frames, n_frames, workers, progress):
    results = [None] * n_frames
    done = 0

    def run(t):
        results[t] = function(t, _frame(frames, t))
        return t

    if workers == 1:
        for t in range(n_frames):
            run(t)
            done += 1
            if progress is not None:
                progress(done, n_frames)
        return results
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run, t) for t in range(n_frames)]
        try:
            for future in futures:
                future.result()
                done += 1
                if progress is not None:
                    progress(done, n_frames)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return results


def detect_frames(frames: ArrayLike | Array, *, radius: float, threshold: str | float | None = "auto",
                  workers: int | None = None, progress: Callback = None, backend: str = "auto",
                  **options: Any) -> FrameDetections:
    """Detect nuclei in every frame of a time-lapse, with one radius and one threshold.

    Parameters
    ----------
    frames : (T, Y, X), (T, Z, Y, X) or (T, Y, X, 3|4) array
        NumPy, CuPy or Dask array (a Dask array is read one frame at a time),
        or a sequence of frames.
    radius : float or 'auto'
        As :func:`ivote.iterative_voting`, the same for every frame; ``'auto'``
        is estimated once, from the first frame, and used for every frame.
    threshold : 'auto', 'otsu', 'none', None or float
        A number or none applies as given to every frame; ``'auto'`` (default,
        :func:`ivote.detect.auto_threshold`) and ``'otsu'`` are computed from
        every frame's candidates together, then applied to every frame. With a
        learned ``detector`` (in ``options``), ``'auto'`` is its decision, a
        probability threshold that is already the same in every frame.
    workers : int, optional
        Frames detected at once (threads). Default: the CPU count on the
        NumPy backend, 1 with Numba or a GPU (they use the whole device for one
        frame).
    progress : callable, optional
        ``progress(frames_done, n_frames)`` after each frame; raising from it cancels.
    backend : {'auto', 'numpy', 'cupy'}
    **options
        The other keywords of :func:`ivote.iterative_voting` (``spacing``,
        ``polarity``, ``blur``, ``min_contrast``, ``channel``, ``features``,
        ``detector``).

    Returns
    -------
    FrameDetections

    Examples
    --------
    >>> import numpy as np
    >>> from ivote.data import synthetic_nuclei
    >>> a, *_ = synthetic_nuclei((64, 64), radius=5, seed=1)
    >>> b, *_ = synthetic_nuclei((64, 64), radius=5, seed=2)
    >>> found = detect_frames(np.stack([a, b]), radius=5, backend="numpy")
    >>> sorted(set(found.times.tolist())), found.points.shape[1]
    ([0, 1], 3)
    """
    from .detect import iterative_voting

    n_frames = len(frames)
    if n_frames == 0:
        raise ValueError("frames is empty: a time-lapse needs at least one frame")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable; got {progress!r}")
    if options.get("detector") is not None:  # read once; its decision is one probability threshold for every frame
        from .learn._hook import as_detector

        options["detector"] = as_detector(options["detector"])
    pooled = pooled_rule(threshold) is not None and options.get("detector") is None
    per_frame_threshold = "none" if pooled else threshold
    workers = _workers(workers, n_frames, backend)

    estimated = isinstance(radius, str) and radius.strip().lower() == "auto"
    first = None
    if estimated:  # one radius for the whole series, as one threshold: the first frame's, kept
        first = iterative_voting(_frame(frames, 0), radius="auto", threshold=per_frame_threshold, backend=backend,
                                 **options)
        radius = first.radius

    def detect(t, frame):
        if t == 0 and first is not None:
            return first
        return iterative_voting(frame, radius=radius, threshold=per_frame_threshold, backend=backend, **options)

    found = _map_frames(detect, frames, n_frames, workers, progress)
    if estimated:
        found = [replace(f, radius_estimated=True) for f in found]
    if pooled:
        value, floor = pooled_threshold(threshold, found)
        found = [f.with_threshold(value, floor) for f in found]
    value = found[0].threshold
    ndim = found[0].points.shape[1] if found[0].points.ndim == 2 else found[0].candidates.shape[1]
    points = [np.column_stack([np.full(len(f.points), t, np.float64), f.points.reshape(-1, ndim)])
              for t, f in enumerate(found)]
    return FrameDetections(points=np.concatenate(points).reshape(-1, 1 + ndim),
                           scores=np.concatenate([f.scores for f in found]),
                           threshold=float(value), frames=tuple(found))


def pooled_rule(threshold) -> str | None:
    """'otsu' or 'auto' when ``threshold`` names a rule computed from the candidates (pooled over
    a time-lapse's frames), else None."""
    rule = threshold.strip().lower() if isinstance(threshold, str) else None
    return rule if rule in ("otsu", "auto") else None


def pooled_threshold(threshold, frames) -> tuple[float, float | None]:
    """(score threshold, contrast floor or None: each frame's own) of the ``'otsu'`` or
    ``'auto'`` rule over every frame's candidates together (``Detections`` of each frame)."""
    from .detect._thresholds import auto_threshold, otsu_threshold

    scores = np.concatenate([np.asarray(f.candidate_scores, float) for f in frames])
    if pooled_rule(threshold) == "otsu":
        return otsu_threshold(scores), None
    contrasts = np.concatenate([np.asarray(f.candidate_contrasts, float) for f in frames])
    return auto_threshold(scores, contrasts, frames[0].min_contrast)


def segment_frames(frames: ArrayLike | Array, points: ArrayLike, *, radius: float, workers: int | None = None,
                   progress: Callback = None, backend: str = "auto", **options: Any) -> np.ndarray:
    """Segment every frame of a time-lapse from its own seeds; labels keep the T axis.

    Parameters
    ----------
    frames : (T, ...) array
        As :func:`detect_frames` (grey: pick RGB's hematoxylin density first).
    points : (N, 1 + ndim) array_like
        Seeds with their frame first (``t, z, y, x`` or ``t, y, x``), e.g.
        :attr:`FrameDetections.points`.
    **options
        The other keywords of :func:`ivote.segment_nuclei`.

    Returns
    -------
    (T, ...) int32 labels, numbered from 1 in each frame.
    """
    from ._backend import to_host
    from .segment import segment_nuclei

    n_frames = len(frames)
    points = np.asarray(points, dtype=np.float64)
    spatial = np.ndim(frames) - 1
    points = points.reshape(-1, 1 + spatial) if points.size else np.zeros((0, 1 + spatial))
    if points.ndim != 2 or points.shape[1] != 1 + spatial:
        raise ValueError(f"points must be (N, {1 + spatial}) with the frame first; got shape {points.shape}")
    times = points[:, 0]
    if len(times) and (times.min() < 0 or times.max() >= n_frames or (times != np.round(times)).any()):
        raise ValueError(f"the frame of every point must be an integer 0..{n_frames - 1}")
    workers = _workers(workers, n_frames, backend)

    def segment(t, frame):
        seeds = points[times == t, 1:]
        if len(seeds) == 0:
            return np.zeros(np.shape(frame), np.int32)
        return to_host(segment_nuclei(frame, seeds, radius=radius, backend=backend, **options)).astype(np.int32)

    return np.stack(_map_frames(segment, frames, n_frames, workers, progress))
