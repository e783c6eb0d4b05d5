"""The Qt-free steps of the "Learn from my corrections" panel: what to learn from, and the learning itself
(:mod:`ivote.learn`)."""

from __future__ import annotations

import time

import numpy as np

__all__ = ["learn_and_rescore", "learning_inputs", "model_points_changes"]


def learning_inputs(widget, cache):
    """``(shown, corrected)`` for the Detect widget's current Run (its :class:`Shown` and the edited
    nuclei layer's points, pixel coordinates), or a message saying what is missing."""
    from dataclasses import replace

    shown = widget._run
    layer = widget.points_layer()
    if shown is None or layer is None or shown.image not in widget.viewer.layers:
        return "Run the detection first, then correct the nuclei layer (delete false points, add missed ones)."
    if shown.timelapse:
        return "Learning takes one image: a time-lapse's frames are not supported yet."
    if shown.image.multiscale or not isinstance(shown.image.data, np.ndarray):
        return "Learning needs the image in memory (not a multiscale or lazy layer)."
    corrected = np.asarray(layer.data, dtype=np.float64)[:, -shown.geometry.ndim:]
    if len(corrected) == 0:
        return "The nuclei layer is empty: keep or add the points that are nuclei, then learn."
    settings = widget.settings()
    return replace(shown, result=(shown.result, settings["polarity"], settings["blur"])), corrected


def learn_and_rescore(shown, corrected, base, cache):
    """Learn (adding to ``base``, a model of other images) from ``corrected`` on ``shown``'s image, and score
    its candidates: ``(detector, DetectResult, message)``, or a message when nothing can be learned."""
    from ..detect import iterative_voting
    from ..detect._colour import reads_as_rgb
    from ..errors import IvoteError
    from ..learn import corrections_of, fit_detector
    from ..learn._learn import default_tolerance
    from ._detect_logic import DetectResult

    run, polarity, blur = shown.result
    image = np.asarray(shown.image.data)
    found = run.detections
    key = (id(shown.image), found.radius, tuple(found.spacing), polarity, blur, image.shape)
    start = time.perf_counter()
    if cache.get("key") != key:
        cache["key"], cache["found"] = key, iterative_voting(
            image, radius=found.radius, spacing=found.spacing, polarity=polarity, threshold=None,
            return_votes=True, **({"blur": blur} if blur else {}))
    everything = cache["found"]
    ndim = len(everything.spacing)
    rgb = reads_as_rgb(image.shape)
    tolerance = default_tolerance(everything.radius, ndim)
    try:
        corrections = corrections_of(image, everything, corrected, polarity=polarity, tolerance=tolerance,
                                     floor=None if base is None else base.search_floor)
        detector = fit_detector([corrections], radius=everything.radius, spacing=everything.spacing,
                                polarity=polarity, ndim=ndim, rgb=rgb, tolerance=tolerance, previous=base)
        rescored = detector.rescore(image, everything)
    except IvoteError as exc:
        return str(exc)
    seconds = time.perf_counter() - start
    added, removed = model_points_changes(corrected, rescored.points, tolerance)
    nuclei = int(corrections.labels.sum())
    message = (f"learned from {nuclei} nuclei and {len(corrections.labels) - nuclei} other candidates in "
               f"{seconds:.2f} s; re-scored: {len(rescored.points)} nuclei, {added} added and {removed} removed "
               "against your corrections")
    found = corrections.n_searched - len(corrections.unmatched_points)
    if found:
        message += f"; the search below the default's candidates found {found} of your points"
    if len(corrections.unmatched_points):
        message += f" ({len(corrections.unmatched_points)} of your points have no candidate near them)"
    return detector, DetectResult(rescored, None, 0, False, seconds), message


def model_points_changes(before: np.ndarray, after: np.ndarray, tolerance: float) -> tuple[int, int]:
    """(added, removed): points of ``after`` with no point of ``before`` within ``tolerance``, and the reverse."""
    from ..metrics import match_points

    if len(before) == 0 or len(after) == 0:
        return len(after), len(before)
    match = match_points(after, before, tolerance=tolerance)
    return len(after) - match.true_positives, len(before) - match.true_positives
