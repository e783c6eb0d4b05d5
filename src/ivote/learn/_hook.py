"""``iterative_voting(..., detector=...)``: vote, then score every candidate by the learned detector."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from ..errors import IvoteError, ParameterTypeError

__all__ = ["as_detector", "detect_with"]


def as_detector(detector):
    """A :class:`LearnedDetector`, or one read from a path."""
    from ._detector import LearnedDetector, load_detector

    if isinstance(detector, LearnedDetector):
        return detector
    if isinstance(detector, (str, os.PathLike)):
        return load_detector(detector)
    raise ParameterTypeError(f"detector must be a LearnedDetector or the path of a saved one; got {detector!r}")


def _probability_threshold(threshold):
    if threshold is None or (isinstance(threshold, str) and threshold.strip().lower() == "none"):
        return float("-inf")
    if isinstance(threshold, str) and threshold.strip().lower() == "auto":
        return None  # the detector's
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        raise IvoteError(f"with a detector, threshold must be 'auto' (the detector's), 'none' or a probability "
                         f"in [0, 1]; got {threshold!r}") from None
    if not 0.0 <= value <= 1.0:
        raise IvoteError(f"with a detector, threshold is a probability in [0, 1]; got {value!r}")
    return value


def detect_with(iterative_voting, detector, image, *, radius=None, spacing=None, polarity="bright",
                threshold="auto", channel=None, stains=None, return_votes=False, backend="auto", **options):
    """The detections of ``image`` (every candidate) re-scored by ``detector`` (see ``iterative_voting``)."""
    from ..detect._colour import reads_as_rgb

    detector = as_detector(detector)
    value = _probability_threshold(threshold)
    shape = np.shape(image)
    rgb = reads_as_rgb(shape) and channel is None
    ndim = len(shape) - (1 if reads_as_rgb(shape) else 0)
    radius = detector.radius if radius is None else radius
    spacing = detector.spacing if spacing is None else spacing
    detector.check_compatible(ndim=ndim, rgb=rgb, polarity=polarity)  # features are in radii: any radius
    found = iterative_voting(image, radius=radius, spacing=spacing, polarity=polarity, threshold=None,
                             channel=channel, stains=stains, return_votes=True, backend=backend, **options)
    rescored = detector.rescore(image, found, threshold=value, channel=channel, stains=stains, backend=backend)
    return rescored if return_votes else replace(rescored, vote_field=None)
