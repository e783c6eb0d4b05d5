"""The score thresholds and contrast floors of a detection's candidates.

``threshold="auto"`` (:func:`auto_threshold`, the default), ``"otsu"``
(:func:`otsu_threshold`), ``"reference"`` (:func:`reference_threshold`), none or
a number; ``_resolve_rule`` turns any of them into (score threshold, contrast
floor). Otsu's threshold is computed as scikit-image's (``_threshold_otsu``,
tested equal) without its generic checks.
"""

from __future__ import annotations

import math

import numpy as np

from .._typing import ArrayLike

__all__ = ["auto_threshold", "otsu_threshold", "reference_threshold"]

_DEFAULT_MIN_CONTRAST = 3.0


def otsu_threshold(scores) -> float:
    """Otsu's threshold of the logarithm of ``scores``, as a score.

    Scores of real cells and of background maxima differ by orders of magnitude
    and cells' scores spread with their contrast, so the two classes separate on
    a log scale; ``-inf`` (keep all) when there are fewer than two distinct scores.
    """
    split = _log_otsu(scores)
    return float("-inf") if split is None else float(np.exp(split[0]))


def _log_otsu(scores):
    """(Otsu's threshold of the log of the positive ``scores``, its histogram bin's width), or
    None with fewer than two distinct positive scores."""
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) == 0 or not scores.min() > 0:
        scores = scores[scores > 0]
    if len(scores) == 0:
        return None
    logs = np.log(scores)
    first, last = logs.min(), logs.max()
    if not first < last:  # fewer than two distinct scores
        return None
    return _threshold_otsu(logs, first, last), (last - first) / 256


def _threshold_otsu(values, first=None, last=None) -> float:
    """``skimage.filters.threshold_otsu(values)`` (256 bins) for float64 values with
    min < max, equal to it (tested): the same histogram (``np.histogram``'s
    uniform-bin arithmetic) and the same class statistics, without their generic
    checks, which cost more than the rest of a live detection's host work.
    ``first``/``last``: the values' minimum and maximum, when known."""
    counts, edges = _histogram_256(values, first, last)
    counts = counts.astype(np.float32)
    centers = (edges[:-1] + edges[1:]) / 2.0
    weight1 = np.cumsum(counts)
    weight2 = np.cumsum(counts[::-1])[::-1]
    mean1 = np.cumsum(counts * centers) / weight1
    mean2 = (np.cumsum((counts * centers)[::-1]) / weight2[::-1])[::-1]
    variance12 = weight1[:-1] * weight2[1:] * (mean1[:-1] - mean2[1:]) ** 2
    return centers[np.argmax(variance12)]


_REFERENCE_QUANTILE = 90.0
_REFERENCE_FRACTION = 0.1


def reference_threshold(scores: ArrayLike, contrasts: ArrayLike, min_contrast: float = _DEFAULT_MIN_CONTRAST) -> float:
    """A score threshold from the image's nuclei (``threshold="reference"``):
    a tenth of the 90th percentile of the scores of the maxima that pass the
    contrast test.

    A nucleus collects votes from its whole rim, so the image's well-formed
    nuclei score alike (within a few times; the 90th percentile is one of
    them, robust to a few outliers), while maxima of texture, debris and
    background collect an order of magnitude fewer. Otsu's threshold instead
    always splits the scores in two classes, so it cuts into real nuclei when
    almost every maximum is one (dense fields, a well-chosen radius) and keeps
    texture when they are few. ``-inf`` when no maximum passes the contrast
    test (nothing is kept then anyway).

    Measured on the evaluation data (every 4th image, per-image radius from
    the labels / ``radius="auto"``; ``benchmarks/results/detect_threshold.md``):
    closer to the per-image oracle than Otsu on bbbc039, dsb2018 and
    stardist3d, 0.08-0.10 worse on the H&E set (gbm40), where maxima of
    chromatin texture pass the contrast test; so it is not the default.
    """
    scores = np.asarray(scores, dtype=np.float64)
    passing = scores[np.asarray(contrasts) >= min_contrast]
    if len(passing) == 0:
        return float("-inf")
    return float(_REFERENCE_FRACTION * np.percentile(passing, _REFERENCE_QUANTILE))


_AUTO_TYPICAL_FRACTION = 0.3
_AUTO_TEXTURE_FRACTION = 0.4  # textured images: 0.35-0.45 alike on the evaluation data
_AUTO_TEXTURE_SHARE = 1 / 6  # share of the maxima below the contrast split that makes an image textured
_AUTO_SEPARABILITY = 0.75
_AUTO_MIN_CLASS = 5
_AUTO_MIN_SPLIT_MAXIMA = 50  # fewer maxima: class statistics are not trusted, only gaps (below)
_AUTO_MIN_GAP = 2.0  # ... a contrast split, or a score gap, between classes at least this factor wide
_AUTO_GAP_LOWEST = 0.1  # the score gap's upper side scores at least this fraction of the typical nucleus


def auto_threshold(scores: ArrayLike, contrasts: ArrayLike,
                   min_contrast: float = _DEFAULT_MIN_CONTRAST) -> tuple[float, float]:
    """The default rule (``threshold="auto"``): a score threshold and a contrast floor.

    * Contrast: when the log contrasts of the maxima fall in two clear
      classes, the lower class (maxima of noise, of texture inside tissue) is
      dropped: the floor is raised to Otsu's threshold of the log contrasts
      when their separability (between-class over total variance, Otsu's eta)
      is at least 0.75 (a single Gaussian gives 2/pi = 0.64) and the lower
      class holds at least 5 maxima (with fewer, a dim nucleus among a
      handful of maxima can make it up). Among fewer than 50 maxima (10 at
      least) the classes must also lie apart, the lower class's highest
      contrast at least 2 times below the upper class's lowest: the
      brightness of a few dozen nuclei can fall in two classes that touch
      (17 nuclei of a 64² frame lost 8 to a split by separability alone),
      while a few noise or debris maxima of contrast 3-6 beside nuclei of
      35-60 (dsb2018's images of a few large nuclei) lie apart. Not applied
      when ``min_contrast`` is 0 (no contrast test) or the image is
      noiseless.
    * Score, no contrast split: the lower of Otsu's threshold of the log
      scores of every local maximum (:func:`otsu_threshold`) and 0.3 times
      the median score of the maxima above it that pass the contrast test
      (the image's typical nucleus). Otsu's threshold separates nuclei from
      the maxima of background when both are present, but it always splits
      the scores in two, so when nearly every maximum is a nucleus it cuts
      into them; a maximum scoring within about three times of the typical
      nucleus is kept in any case (the argument of
      :func:`reference_threshold`, taken on Otsu's upper class so that a few
      nuclei among many background maxima still set it). Otsu's classes
      are whole histogram bins, so the threshold is its bin's upper edge
      (at the bin's centre, a maximum inside the bin was kept or not by
      rounding). Fewer than 50 maxima: at most the middle (in log score)
      of the widest gap, if at least a factor 2, between the scores of
      the maxima passing the floor, from a tenth of the typical score up
      to it: from a handful of values Otsu's criterion weighs class sizes
      more than separation, and cuts off the dimmest nucleus with a
      single background maximum (qcanet3d: 8 nuclei scoring 146-1240 and
      one maximum at 32; Otsu's split fell between 32 and 146 or between
      146 and 407 as the radius moved by 2%).
    * Score, in a textured image (stroma and chromatin of H&E: a contrast
      split whose lower class holds at least a sixth of the maxima): 0.4
      times the median score of the maxima above Otsu's threshold that pass
      the raised floor. Texture maxima also reach above the floor, scoring
      between the background's and the nuclei's, so there a maximum must
      score like a nucleus (within 2.5 times of the typical one) rather than
      merely above the background. A split with a small lower class (a few
      dim nuclei or debris among bright nuclei, 5-13% of the maxima on the
      fluorescence images) is not texture, nor is a split among fewer than
      50 maxima: the first score rule applies.

    Returns ``(score_threshold, contrast_floor)``; the floor is at least
    ``min_contrast``. Chosen on every image of the evaluation data against a
    per-image oracle threshold (``benchmarks/detect_threshold_rules.py``,
    ``benchmarks/results/detect_threshold.md``).

    Examples
    --------
    >>> import numpy as np
    >>> scores = np.array([400.0, 300, 200, 120, 90, 8, 6, 5])  # five nuclei, three background maxima
    >>> value, floor = auto_threshold(scores, np.full(8, 40.0))
    >>> int((scores >= value).sum()), floor
    (5, 3.0)
    """
    scores = np.asarray(scores, dtype=np.float64)
    contrasts = np.asarray(contrasts, dtype=np.float64)
    measurable = contrasts[np.isfinite(contrasts) & (contrasts > 0)]
    floor = _auto_contrast_floor(measurable, min_contrast)
    value = _otsu_class_edge(scores)
    textured = (floor > min_contrast and len(measurable) >= _AUTO_MIN_SPLIT_MAXIMA
                and np.mean(measurable < floor) >= _AUTO_TEXTURE_SHARE)
    upper = scores[(contrasts >= (floor if textured else min_contrast)) & (scores >= value)]
    if len(upper) and textured:  # a fraction of the typical nucleus's score
        value = float(_AUTO_TEXTURE_FRACTION * np.median(upper))
    elif len(upper):
        typical = float(np.median(upper))
        value = min(value, _AUTO_TYPICAL_FRACTION * typical)
        if len(scores) < _AUTO_MIN_SPLIT_MAXIMA:
            value = min(value, _widest_score_gap(scores[contrasts >= floor], typical))
    return value, floor


def _otsu_class_edge(scores) -> float:
    """:func:`otsu_threshold` moved to the upper edge of its histogram bin: the score between
    Otsu's two classes (the bin belongs to the lower one)."""
    split = _log_otsu(scores)
    return float("-inf") if split is None else float(np.exp(split[0] + split[1] / 2))


def _widest_score_gap(scores, typical: float) -> float:
    """The geometric middle of the widest gap between consecutive ``scores`` at most ``typical``
    whose upper score is at least ``_AUTO_GAP_LOWEST`` x ``typical``; inf when none is at least
    ``_AUTO_MIN_GAP`` wide."""
    ordered = np.sort(scores[(scores > 0) & (scores <= typical)])
    if len(ordered) < 2:
        return float("inf")
    logs = np.log(ordered)
    widths = np.where(ordered[1:] >= _AUTO_GAP_LOWEST * typical, np.diff(logs), -np.inf)
    k = int(np.argmax(widths))
    if not widths[k] >= math.log(_AUTO_MIN_GAP):
        return float("inf")
    return float(np.exp((logs[k] + logs[k + 1]) / 2))


def _auto_contrast_floor(measurable, min_contrast) -> float:
    """:func:`auto_threshold`'s contrast floor: Otsu's split of the log contrasts when it is clear
    (``measurable``: the finite, positive contrasts)."""
    floor = float(min_contrast)
    if min_contrast > 0 and len(measurable) >= 2 * _AUTO_MIN_CLASS:
        logs = np.log(measurable)
        first, last = logs.min(), logs.max()
        if first < last:
            # Otsu's classes are whole histogram bins: split at the upper edge of its bin
            split = _threshold_otsu(logs, first, last) + (last - first) / 512
            lower = logs < split
            clear = np.sum(lower) >= _AUTO_MIN_CLASS and _separability(logs, split) >= _AUTO_SEPARABILITY
            if clear and len(logs) < _AUTO_MIN_SPLIT_MAXIMA:  # few maxima: the classes must lie apart
                clear = logs[~lower].min() - logs[lower].max() >= math.log(_AUTO_MIN_GAP)
            if clear:
                floor = max(floor, float(np.exp(split)))
    return floor


def _separability(values, split) -> float:
    """Otsu's eta: the between-class variance of ``values`` split at ``split`` over their variance."""
    upper = values >= split
    n_upper = int(upper.sum())
    if n_upper in (0, len(values)):
        return 0.0
    share = n_upper / len(values)
    gap = values[upper].mean() - values[~upper].mean()
    return float(share * (1 - share) * gap**2 / values.var())


def _histogram_256(values, first=None, last=None):
    """``np.histogram(values, bins=256)`` for float64 values with min < max, by its
    own uniform-bin arithmetic (equal to it, tested); ``first``/``last``: the
    values' minimum and maximum, when known."""
    if first is None:
        first, last = values.min(), values.max()
    edges = _STEPS_257 * ((last - first) / 256)  # np.linspace(first, last, 257), its operations
    edges += first
    edges[-1] = last
    bins = ((values - first) / (last - first) * 256).astype(np.intp)
    bins[bins == 256] -= 1
    bins[values < edges[bins]] -= 1  # within an ulp of an edge, as np.histogram corrects
    bins[(values >= edges[bins + 1]) & (bins != 255)] += 1
    return np.bincount(bins, minlength=256), edges


_STEPS_257 = np.arange(257, dtype=np.float64)


_THRESHOLDS = "'auto', 'otsu', 'reference', 'none', None or a number"


def _resolve_rule(threshold, scores, contrasts, min_contrast) -> tuple[float, float]:
    """(score threshold, contrast floor) of ``threshold`` on these candidates."""
    if isinstance(threshold, str) and threshold.strip().lower() == "auto":
        return auto_threshold(scores, contrasts, min_contrast)
    return _resolve_threshold(threshold, scores, contrasts, min_contrast), min_contrast


def _resolve_threshold(threshold, scores, contrasts=None, min_contrast=_DEFAULT_MIN_CONTRAST) -> float:
    if threshold is None or (isinstance(threshold, str) and threshold.lower() == "none"):
        return float("-inf")
    if isinstance(threshold, str):
        if threshold.lower() == "otsu":
            return otsu_threshold(scores)
        if threshold.lower() == "reference":
            contrasts = np.full(len(scores), np.inf) if contrasts is None else contrasts
            return reference_threshold(scores, contrasts, min_contrast)
        try:
            threshold = float(threshold)
        except ValueError:
            raise ValueError(f"threshold must be {_THRESHOLDS}; got {threshold!r}") from None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)):
        raise TypeError(f"threshold must be {_THRESHOLDS}; got {threshold!r}")
    value = float(threshold)
    if math.isnan(value):
        raise ValueError(f"threshold must be {_THRESHOLDS}; got nan")
    return value

