"""The learned detector: a forest over candidate features, its settings and its training samples,
saved as one JSON file."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._typing import Array, ArrayLike, Spacing
from ..errors import InputFileError, IvoteError
from ._forest import Forest

__all__ = ["LearnedDetector", "load_detector"]

FORMAT = "ivote-learned-detector"
VERSION = 1
_RELATIVE_TOLERANCE = 0.01  # radius and spacing must match the training's within 1%


@dataclass(frozen=True)
class LearnedDetector:
    """A detector that scores every candidate of the vote field by its learned probability of being a nucleus.

    Made by :func:`ivote.learn_detector`; applied by ``iterative_voting(image, detector=...)``
    (or :meth:`rescore` on detections that kept their vote field); saved as plain JSON by
    :meth:`save` and read back by :meth:`load`.
    """

    forest: Forest = field(repr=False)
    threshold: float
    """Probability at or above which a candidate is a nucleus, chosen on the training images."""
    min_distance: float
    """Of points closer than this (units of ``spacing``), the most probable is kept; chosen on the
    training images."""
    radius: float
    spacing: tuple
    polarity: str
    ndim: int
    rgb: bool
    feature_names: tuple = field(repr=False)
    tolerance: float = field(repr=False)
    """Distance within which a candidate matched a corrected point (units of ``spacing``)."""
    samples: np.ndarray = field(repr=False)
    """(N, F) float32 features of every training candidate (kept so that new corrections add to them)."""
    labels: np.ndarray = field(repr=False)
    """(N,) bool: the training candidate was matched to a corrected point."""
    positions: np.ndarray = field(repr=False)
    """(N, ndim) physical positions of the training candidates."""
    groups: np.ndarray = field(repr=False)
    """(N,) index of the training image of each sample."""
    decision: str = "learned"
    """'learned' (probability at least ``threshold``) or 'default': the default threshold's points,
    kept when the learned decision did not beat it on the training images (``_learn.GATE_SIGMAS``)."""
    training_f1: tuple = (float("nan"), float("nan"))
    """(learned out-of-bag, default) F1 on the training images."""
    n_images: int = 0
    n_unmatched_points: int = 0
    """Corrected points that no candidate lay within ``tolerance`` of, even after the widened
    search (the detector cannot add those)."""
    search_floor: float | None = None
    """The widened search's floor (``_candidates.search_floor``: a log score relative to the
    default threshold), set by corrected points the candidates missed: the vote field's 3x3
    maxima at or above it are candidates too. None: no widened search."""

    @property
    def n_samples(self) -> int:
        return len(self.labels)

    def check_compatible(self, *, ndim: int, rgb: bool, radius: float | str | None = None, spacing: Spacing = None,
                         polarity: str | None = None) -> None:
        """Raise :class:`IvoteError` when an image or settings differ from the training's."""
        kind = {True: "an RGB (H&E) image", False: "a grey image"}
        if ndim != self.ndim:
            raise IvoteError(f"detector was trained on {self.ndim}D images; got a {ndim}D image")
        if rgb != self.rgb:
            raise IvoteError(f"detector was trained on {kind[self.rgb]}; got {kind[rgb]}")
        if radius is not None and not isinstance(radius, str) and not _close(float(radius), self.radius):
            raise IvoteError(f"detector was trained with radius {self.radius:g}; got radius {float(radius):g} "
                             "(pass the same radius, or learn again at this one)")
        if spacing is not None:
            given = tuple(float(s) for s in (spacing if np.ndim(spacing) else (spacing,) * ndim))
            if len(given) != self.ndim or not all(_close(a, b) for a, b in zip(given, self.spacing)):
                raise IvoteError(f"detector was trained with spacing {self.spacing}; got spacing {given}")
        if polarity is not None and not self.rgb and polarity != self.polarity:
            raise IvoteError(f"detector was trained with polarity {self.polarity!r}; got {polarity!r}")

    def probability(self, features: Any) -> np.ndarray:
        """(M,) probability of a nucleus for (M, F) candidate features (:func:`candidate_features`)."""
        values = features.values if hasattr(features, "values") else np.asarray(features)
        names = getattr(features, "names", None)
        if names is not None and tuple(names) != self.feature_names:
            raise IvoteError(f"the features given ({len(names)}: {', '.join(names[:3])}, ...) are not the "
                             f"detector's ({len(self.feature_names)}: {', '.join(self.feature_names[:3])}, ...)")
        if values.ndim != 2 or values.shape[1] != len(self.feature_names):
            raise IvoteError(f"features must be (M, {len(self.feature_names)}); got shape {values.shape}")
        if len(values) == 0:
            return np.zeros(0)
        return self.forest.probability(values)

    def eligible(self, candidates: ArrayLike, probability: np.ndarray, spacing: Spacing, features: Any) -> np.ndarray:
        """(M,) bool: the candidates that stand out from the image noise (:func:`passes_noise_test`)
        and lie not within ``min_distance`` of a more probable one (a greedy scan in order of
        probability): the ones a threshold on the probability chooses from."""
        from ._candidates import suppress

        values = features.values if hasattr(features, "values") else np.asarray(features)
        standing = passes_noise_test(values, self.feature_names)
        keep = np.zeros(len(probability), dtype=bool)
        rows = np.flatnonzero(standing)
        keep[rows[suppress(np.asarray(candidates)[rows], probability[rows], spacing, self.min_distance)]] = True
        return keep

    def select(self, candidates: ArrayLike, probability: np.ndarray, spacing: Spacing, threshold: float | None = None,
               features: Any = None) -> np.ndarray:
        """Which candidates are nuclei: probability at least ``threshold`` (default the detector's)
        and :meth:`eligible`; with ``decision='default'`` (and no ``threshold`` given), the default
        threshold's points (from ``features``). (M,) bool."""
        if self.decision == "default" and threshold is None:
            if features is None:
                raise IvoteError("this detector keeps the default threshold's points: give the features")
            return default_keep(features.values if hasattr(features, "values") else features, self.feature_names)
        if features is None:
            raise IvoteError("select needs the candidates' features (the noise test is one of them)")
        value = self.threshold if threshold is None else float(threshold)
        return self.eligible(candidates, probability, spacing, features) & (probability >= value)

    def rescore(self, image: ArrayLike | Array, detections: Any, *, threshold: float | None = None,
                channel: int | None = None, stains: str | ArrayLike | None = None, backend: str = "auto") -> Any:
        """``detections`` (with their vote field) scored by the detector: the candidates are the
        detector's and the vote field's closer maxima (``_candidates.widen``; down to
        ``search_floor`` where the training widened its search), every one scored by
        its probability of being a nucleus; the points are those at or above ``threshold``
        (default: the detector's), the most probable of points closer than ``min_distance``. The
        contrast floor is lifted (the contrast is one of the features). ``with_threshold('auto')``
        of the result gives the detector's decision again, a number the eligible candidates at or
        above that probability."""
        from ..detect._colour import reads_as_rgb
        from ._candidates import widen
        from ._features import candidate_features

        ndim = len(detections.spacing)
        self.check_compatible(ndim=ndim, rgb=reads_as_rgb(np.shape(image)) and channel is None)
        detections, original = widen(detections, self.search_floor)
        features = candidate_features(image, detections, polarity=self.polarity, channel=channel, stains=stains,
                                      original=original, backend=backend)
        probability = self.probability(features)
        order = np.lexsort((np.arange(len(probability)), -probability))  # best first, ties in the old order
        candidates = np.asarray(detections.candidates)[order]
        probability = probability[order]
        eligible = self.eligible(candidates, probability, detections.spacing, features.values[order])
        auto = self.select(candidates, probability, detections.spacing, None, features.values[order])
        keep = auto if threshold is None else eligible & (probability >= float(threshold))
        value = float(threshold) if threshold is not None else (
            self.threshold if self.decision == "learned" else (float(probability[auto].min()) if auto.any()
                                                               else float("inf")))
        return replace(detections, points=candidates[keep], scores=probability[keep], threshold=value,
                       candidates=candidates, candidate_scores=probability,
                       candidate_contrasts=np.asarray(detections.candidate_contrasts)[order], min_contrast=0.0,
                       eligible=eligible, auto_kept=auto)

    # ---- file -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT, "version": VERSION,
            "radius": self.radius, "spacing": list(self.spacing), "polarity": self.polarity,
            "ndim": self.ndim, "rgb": self.rgb, "threshold": self.threshold, "min_distance": self.min_distance,
            "tolerance": self.tolerance,
            "feature_names": list(self.feature_names), "n_images": self.n_images,
            "n_unmatched_points": self.n_unmatched_points, "decision": self.decision,
            "search_floor": self.search_floor,
            "training_f1": list(self.training_f1),
            "forest": self.forest.to_dict(),
            "samples": {"features": self.samples.astype(np.float64).tolist(), "labels": self.labels.astype(int).tolist(),
                        "positions": self.positions.tolist(), "groups": self.groups.tolist()},
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the detector to ``path`` (JSON), atomically."""
        from .._atomic import write_atomic

        text = json.dumps(self.to_dict(), separators=(",", ":"))

        def write(tmp: Path) -> None:
            tmp.write_text(text)

        return write_atomic(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "LearnedDetector":
        """Read a detector written by :meth:`save`."""
        return load_detector(path)


def load_detector(path) -> LearnedDetector:
    """Read a detector written by :meth:`LearnedDetector.save` (clear errors for other files)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputFileError(f"detector file not found: {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFileError(f"{path} is not a learned detector (not JSON: {exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputFileError(f"{path} is not a learned detector (no 'format': '{FORMAT}')")
    if data.get("version") != VERSION:
        raise InputFileError(f"{path} is a version {data.get('version')} detector; this napari-ivote reads "
                             f"version {VERSION}: learn it again")
    try:
        samples = np.asarray(data["samples"]["features"], dtype=np.float32).reshape(-1, len(data["feature_names"]))
        detector = LearnedDetector(
            forest=Forest.from_dict(data["forest"]), threshold=float(data["threshold"]),
            min_distance=float(data["min_distance"]),
            radius=float(data["radius"]), spacing=tuple(float(s) for s in data["spacing"]),
            polarity=str(data["polarity"]), ndim=int(data["ndim"]), rgb=bool(data["rgb"]),
            feature_names=tuple(data["feature_names"]), tolerance=float(data["tolerance"]),
            samples=samples, labels=np.asarray(data["samples"]["labels"], dtype=bool),
            positions=np.asarray(data["samples"]["positions"], dtype=np.float64).reshape(-1, int(data["ndim"])),
            groups=np.asarray(data["samples"]["groups"], dtype=np.int64),
            n_images=int(data.get("n_images", 0)), n_unmatched_points=int(data.get("n_unmatched_points", 0)),
            decision=str(data.get("decision", "learned")),
            search_floor=None if data.get("search_floor") is None else float(data["search_floor"]),
            training_f1=tuple(float(v) for v in data.get("training_f1", (float("nan"),) * 2)))
        if detector.decision not in ("learned", "default"):
            raise ValueError(f"decision must be 'learned' or 'default'; got {detector.decision!r}")
        return detector
    except (KeyError, TypeError, ValueError) as exc:
        raise InputFileError(f"{path} is a damaged learned detector ({type(exc).__name__}: {exc})") from None


def passes_noise_test(features, names) -> np.ndarray:
    """(M,) bool: the candidate's contrast to the image noise is at least the default
    ``min_contrast`` (3). A rule, not learned: corrected images hold nuclei, so no training image
    shows what an image of noise alone looks like, where every feature but the contrast is
    relative to the image."""
    from ..detect._thresholds import _DEFAULT_MIN_CONTRAST

    column = list(names).index("log_contrast")
    return np.asarray(features)[:, column] >= np.float32(np.log1p(_DEFAULT_MIN_CONTRAST))


def default_keep(features, names) -> np.ndarray:
    """The default threshold's decision on widened candidates, from their features: the
    detector's own maxima scoring at least ``auto_threshold``'s score and contrast floor."""
    values = np.asarray(features)
    column = {name: k for k, name in enumerate(names)}
    return ((values[:, column["original"]] > 0.5) & (values[:, column["log_score_over_default"]] >= 0)
            & (values[:, column["log_contrast_over_default"]] >= 0))


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_RELATIVE_TOLERANCE)
