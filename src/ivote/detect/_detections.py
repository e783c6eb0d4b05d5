"""The result of a detection: :class:`Detections`, re-thresholded without voting again."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .._validate import check_positive
from ._thresholds import _resolve_rule

__all__ = ["Detections"]


@dataclass(frozen=True)
class Detections:
    """Nucleus centres found by :func:`iterative_voting`.

    Coordinates are pixel coordinates (``z, y, x`` or ``y, x``) on the host.
    """

    points: np.ndarray
    """(N, ndim) float64 centres scoring at least ``threshold`` and standing out
    from the noise by at least ``min_contrast``, best first."""
    scores: np.ndarray
    """(N,) float64 vote at each centre, in units of the strongest voter's weight."""
    threshold: float
    """Score threshold applied; ``-inf`` when none was."""
    candidates: np.ndarray = field(repr=False)
    """(M, ndim) every local maximum of the vote field (at least ``radius`` apart), best first."""
    candidate_scores: np.ndarray = field(repr=False)
    """(M,) their scores."""
    candidate_contrasts: np.ndarray = field(repr=False)
    """(M,) their contrast to the image noise (``_contrast``; inf for a noiseless image)."""
    min_contrast: float
    """Contrast floor applied: ``min_contrast``, raised by ``threshold="auto"`` when the
    contrasts split in two classes (:func:`auto_threshold`)."""
    vote_field: object | None = field(repr=False)
    """Final vote field (array of the backend's module, image shape, float32, score units) or None."""
    n_passes: int
    backend: str
    radius: float
    """Voting radius used, in the units of ``spacing`` (the estimate when ``radius="auto"``)."""
    spacing: tuple
    radius_estimated: bool = False
    """True when ``radius`` was estimated from the image (``radius="auto"``)."""
    radius_note: str = ""
    """``radius="auto"``: what bounded the estimate (the image, the memory limit) or why it is
    unsure; "" when nothing did (``ivote.detect._radius.auto_radius``)."""
    requested_min_contrast: float | None = None
    """The contrast floor asked for, before ``threshold="auto"`` raised it: where
    :meth:`with_threshold` starts a rule again, so the same rule gives the same points (None: the
    applied ``min_contrast``)."""
    eligible: np.ndarray | None = field(default=None, repr=False)
    """(M,) bool: the candidates that can be points at any threshold (a learned detector's: not
    beside a more probable one); None: all."""
    auto_kept: np.ndarray | None = field(default=None, repr=False)
    """(M,) bool: the candidates ``threshold="auto"`` keeps, when a learned detector decided them;
    None: the rule of :func:`auto_threshold`."""

    def __len__(self) -> int:
        return len(self.points)

    @property
    def contrasts(self) -> np.ndarray:
        """(N,) contrast to the image noise of each point."""
        if self.auto_kept is not None and np.array_equal(self.points, self.candidates[self.auto_kept]):
            return self.candidate_contrasts[self.auto_kept]  # the learned detector's decision
        return self.candidate_contrasts[self._kept(self.threshold, self.min_contrast)]

    def _kept(self, threshold: float, min_contrast: float) -> np.ndarray:
        kept = (self.candidate_scores >= threshold) & (self.candidate_contrasts >= min_contrast)
        return kept if self.eligible is None else kept & self.eligible

    def with_threshold(self, threshold: str | float | None, min_contrast: float | None = None) -> "Detections":
        """The same detections with another threshold (no voting again).

        ``threshold`` is ``"auto"`` (:func:`auto_threshold`), ``"otsu"`` (Otsu's on every candidate's
        score), ``"reference"`` (:func:`reference_threshold`), ``None``/``"none"`` or a number;
        ``min_contrast`` a number >= 0 (default: the floor the detection was asked for,
        ``requested_min_contrast``, so ``with_threshold("auto")`` of an ``"auto"`` result is that result).
        """
        if min_contrast is None:
            low = self.min_contrast if self.requested_min_contrast is None else self.requested_min_contrast
        else:
            low = check_positive(min_contrast, "min_contrast", allow_zero=True)
        if self.auto_kept is not None and isinstance(threshold, str) and threshold.strip().lower() == "auto":
            keep = self.auto_kept  # a learned detector's decision
            return replace(self, points=self.candidates[keep], scores=self.candidate_scores[keep],
                           threshold=float(self.candidate_scores[keep].min()) if keep.any() else float("inf"))
        value, low = _resolve_rule(threshold, self.candidate_scores, self.candidate_contrasts, low)
        keep = self._kept(value, low)
        return replace(self, points=self.candidates[keep], scores=self.candidate_scores[keep], threshold=value,
                       min_contrast=low)
