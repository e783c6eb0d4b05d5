"""Iterative voting for nucleus detection: the public function and its result."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._backend import get_array_module, gpu_memory_guard, ndimage_module, select_xp, to_device, use_numba
from .._typing import Array, ArrayLike, Callback, Spacing
from .._validate import check_finite_range, check_image, check_positive, check_radius, check_spacing
from ..errors import IvoteError, ParameterTypeError
from ._colour import spatial_signal as _spatial_image
from ._contrast import bump_ring, contrast_numerators, contrasts, grey_step, noise_positions, noise_residuals, noise_sigma
from ._plan import VotingPlan, make_plan

__all__ = ["Detections", "auto_threshold", "iterative_voting", "otsu_threshold", "reference_threshold"]

_DEFAULT_BLUR_PIXELS = 2.0
_DEFAULT_MIN_CONTRAST = 3.0


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
        ``min_contrast`` a number >= 0 (default: the current one).
        """
        low = self.min_contrast if min_contrast is None else check_positive(min_contrast, "min_contrast", allow_zero=True)
        if self.auto_kept is not None and isinstance(threshold, str) and threshold.strip().lower() == "auto":
            keep = self.auto_kept  # a learned detector's decision
            return replace(self, points=self.candidates[keep], scores=self.candidate_scores[keep],
                           threshold=float(self.candidate_scores[keep].min()) if keep.any() else float("inf"))
        value, low = _resolve_rule(threshold, self.candidate_scores, self.candidate_contrasts, low)
        keep = self._kept(value, low)
        return replace(self, points=self.candidates[keep], scores=self.candidate_scores[keep], threshold=value,
                       min_contrast=low)


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


def _candidates(votes, plan: VotingPlan, suppress: bool = True):
    """Local maxima of the vote field at least ``radius`` apart, best first (NumPy;
    the GPU finds them inside ``_cuda.detect``).

    A local maximum holds the largest vote of the box inscribed in the radius
    (and a positive one). Of maxima closer than the radius, the greedy scan in
    order of score (ties: lower flat index first) keeps the best: a maximum is
    kept unless a better one within the radius was (not with ``suppress=False``:
    every maximum). Returns (M, ndim) int64 coordinates and (M,) int64 votes.
    """
    from ._reference import sorted_close_pairs

    size = tuple(2 * h + 1 for h in plan.maxima_half_width)
    largest = ndimage_module(np).maximum_filter(votes, size=size, mode="constant", cval=0)
    flat = np.flatnonzero((votes == largest) & (votes > 0))
    del largest
    if not suppress:
        values = votes.ravel()[flat]
        order = np.lexsort((flat, -values.astype(np.int64)))
        return _cells_at(flat[order], values[order], slice(None), votes.shape)
    return _kept_cells(*sorted_close_pairs(votes, flat, plan), votes.shape)


def _kept_cells(flat, values, pairs, shape):
    """(M, ndim) int64 coordinates and (M,) int64 votes of the maxima (best
    first, as ``sorted_close_pairs`` returns them) that the greedy scan keeps."""
    return _cells_at(flat, values, _greedy_keep(len(flat), pairs), shape)


def _cells_at(flat, values, keep, shape):
    """(M, ndim) int64 coordinates and (M,) int64 votes of the maxima ``keep`` selects."""
    kept = flat[keep]
    coords = np.empty((len(kept), len(shape)), dtype=np.int64)
    for axis in range(len(shape) - 1, 0, -1):  # np.unravel_index, without its tuple and copies
        kept, coords[:, axis] = np.divmod(kept, shape[axis])
    coords[:, 0] = kept
    return coords, values[keep].astype(np.int64)


_FEW_PAIRS = 256  # below this, the scan over the pairs beats the vectorised rounds


def _greedy_keep(n: int, pairs) -> np.ndarray:
    """Which of n maxima (best first) the greedy scan keeps, given the (better,
    worse) index pairs closer than the radius.

    The scan is sequential, but a maximum can be decided as soon as all its
    better neighbours are: it is kept unless one of them was. Deciding all such
    maxima at once, round after round, gives the scan's answer in a few
    vectorised rounds.
    """
    kept = np.zeros(n, dtype=bool)
    if len(pairs) == 0:
        kept[:] = True
        return kept
    better, worse = pairs[:, 0], pairs[:, 1]
    if len(pairs) <= _FEW_PAIRS:  # in order of the worse maximum, its better ones are all decided
        kept[:] = True
        order = np.argsort(worse, kind="stable")
        for b, w in zip(better[order].tolist(), worse[order].tolist()):
            if kept[b]:
                kept[w] = False
        return kept
    decided = np.zeros(n, dtype=bool)
    while not decided.all():
        waiting = np.bincount(worse[~decided[better]], minlength=n) > 0  # a better neighbour is undecided
        beaten = np.bincount(worse[kept[better]], minlength=n) > 0  # a better neighbour is kept
        ready = ~decided & ~waiting
        kept[ready & ~beaten] = True
        decided |= ready
    return kept


@gpu_memory_guard("iterative_voting")
def iterative_voting(
    image: ArrayLike | Array,
    *,
    radius: float | str,
    spacing: Spacing = None,
    polarity: str = "bright",
    blur: float | None = None,
    threshold: str | float | None = "auto",
    min_contrast: float = _DEFAULT_MIN_CONTRAST,
    channel: int | None = None,
    stains: str | ArrayLike | None = None,
    features: Any = None,
    return_votes: bool = False,
    iter_callback: Callback = None,
    backend: str = "auto",
    detector: Any = None,
) -> Detections:
    """Detect nuclei by iterative voting (Parvin 2007, Saadatifard 2018).

    Every pixel votes, with the weight of its gradient magnitude, for the pixels
    of a cone that starts along its gradient (into a bright nucleus; the nearest
    direction of an offset of the voting disc/ball, docs/detect.md). After each
    pass every voter turns towards the largest vote inside its cone and the cone
    angle halves, from pi/2 until it is under one pixel wide; the votes then
    pile up at the nucleus centres. Cells are the local maxima of the final vote
    field at least ``radius`` apart, scoring at least ``threshold`` and standing
    out from the image noise by at least ``min_contrast``.

    Parameters
    ----------
    image : (Y, X), (Z, Y, X) or RGB (Y, X, 3|4) array
        NumPy or CuPy array, any real dtype. RGB is read as H&E: detection runs
        on the hematoxylin density (colour deconvolution), where nuclei are
        bright whatever ``polarity`` says, unless ``channel`` is given. A grey
        Dask array is detected block by block with the same result
        (:func:`ivote.distributed.detect_chunked`; ``ivote.iterative_voting``
        routes it, see ``detect/_dispatch.py``).
    radius : float or 'auto'
        Nucleus radius (largest expected), in the units of ``spacing``
        (micrometres when known, else pixels). Votes reach this far; detected
        cells are at least this far apart. ``'auto'`` estimates it from the
        image (:func:`ivote.detect.estimate_radius`, on the same signal and
        backend); the result's ``radius`` holds the value used.
    spacing : sequence of float, optional
        Pixel size per spatial axis; default 1. Anisotropic volumes (z coarser
        than x) are handled without resampling: all distances are physical.
    polarity : {'bright', 'dark'}
        Bright nuclei on a dark background (fluorescence) or dark on bright.
    blur : float, optional
        Gaussian sigma of the pre-blur, in the units of ``spacing``. Default:
        2 pixels of the finest axis. 0 turns it off.
    threshold : 'auto', 'otsu', 'reference', 'none', None or float
        Score threshold: ``'auto'`` (default, :func:`auto_threshold`: the
        lower of Otsu's threshold of the log scores and 0.3 times the typical
        nucleus's score, a contrast floor between the contrasts' two classes
        where they fall in two, and on textured images 0.4 times the
        typical nucleus's score instead),
        ``'otsu'`` (Otsu's on the log scores of all local maxima),
        ``'reference'`` (:func:`reference_threshold`), none (every maximum is
        returned) or a value.
    min_contrast : float
        A cell's blurred intensity must exceed the lowest within ``radius`` of it
        by this many standard deviations of the image noise (default 3; 0: no
        test). Scores are relative to the image's strongest edge and Otsu's
        threshold always splits them, so without this an image of pure noise
        would still give cells. A cell that is not brighter than five eighths
        of the ring between half the radius and the radius around it (a point
        on a ramp, a gradient or the edge of a blob much larger than the radius)
        has contrast 0. Applied after ``threshold``, whichever it is
        (``'auto'`` may raise it; the result's ``min_contrast`` is the floor used).
    channel : int, optional
        For RGB input, detect on this channel instead of the hematoxylin density.
    stains : None, 'auto' or (2, 3) array
        For RGB input read as H&E: Ruifrok's fixed stain vectors (None, the
        default), vectors estimated from the image (``'auto'``, Macenko; see
        :func:`ivote.detect.stain_vectors`) or the given hematoxylin and
        eosin optical-density vectors.
    features : array or object, optional
        Detect on this (spatial-shape) array instead of the blurred image, or on
        ``features.detection_input(image)`` for an object with that method.
    return_votes : bool
        Keep the final vote field in the result.
    iter_callback : callable, optional
        ``iter_callback(pass_index, n_passes)`` after each pass is queued;
        raising from it cancels.
    backend : {'auto', 'numpy', 'numba', 'cupy'}
        'auto' runs on CuPy for CuPy input, else on the default backend
        (``IVOTE_BACKEND``); 'numba' the compiled CPU kernels, 'numpy' the
        NumPy path. Both CPU paths give the same cells.
    detector : LearnedDetector or path, optional
        A detector learned from corrected points (:func:`ivote.learn_detector`,
        or the JSON file it was saved to): every local maximum is scored by its
        probability of being a nucleus, and ``threshold='auto'`` is the
        detector's decision threshold (a number is a probability); the contrast
        floor is not applied (the contrast is one of its features). The image
        must be of the training's kind and ``radius``, ``spacing`` and
        ``polarity`` the training's (``radius=None`` takes the detector's).

    Returns
    -------
    Detections

    Notes
    -----
    Weights and votes are integers (gradient magnitude quantised to
    ``weight_scale`` levels) and cone tests use the same float32 arithmetic on
    both backends, so NumPy and CuPy give the same cells and GPU runs repeat
    exactly. Voters below 1/64 of the largest gradient are skipped.

    References
    ----------
    .. [1] B. Parvin, Q. Yang, J. Han, H. Chang, B. Rydberg, M. H.
           Barcellos-Hoff, "Iterative voting for inference of structural
           saliency and characterization of subcellular events", IEEE Trans.
           Image Process. 16(3), 615-623 (2007). :doi:`10.1109/TIP.2007.891154`
    .. [2] L. Saadatifard, L. C. Abbott, L. Montier, J. Ziburkus, D. Mayerich,
           "Robust cell detection for large-scale 3D microscopy using
           GPU-accelerated iterative voting", Front. Neuroanat. 12:28 (2018).
           :doi:`10.3389/fnana.2018.00028`

    Examples
    --------
    >>> from ivote.data import synthetic_nuclei
    >>> from ivote.detect import iterative_voting
    >>> from ivote.metrics import match_points
    >>> image, labels, centers, *_ = synthetic_nuclei((96, 96), radius=6, seed=4)
    >>> found = iterative_voting(image, radius=6, backend="numpy")
    >>> found.points.shape, found.n_passes
    ((38, 2), 5)
    >>> match_points(found.points, centers, tolerance=3).f1
    1.0
    """
    if detector is not None:  # ivote.iterative_voting (detect/_dispatch.py) applies it, above both
        raise IvoteError("detector= is applied by ivote.iterative_voting (ivote.detect.iterative_voting)")
    xp = select_xp(backend, image)
    if features is not None and hasattr(features, "detection_input"):
        features = features.detection_input(image)
    image = check_image(image, allow_rgb=True, finite=features is not None)  # else: from min/max below
    image = to_device(image, xp) if get_array_module(image) is not xp else image
    signal, from_rgb = _spatial_image(image, channel, xp, stains)
    ndim = signal.ndim
    spacing, blur, min_contrast = check_settings(signal.shape, spacing, polarity, blur, min_contrast, threshold)
    sign = 1.0 if (polarity == "bright" or (from_rgb and channel is None)) else -1.0
    radius_estimated = isinstance(radius, str) and radius.strip().lower() == "auto"
    radius_note = ""
    if radius_estimated:
        from ._radius import auto_radius

        check_finite_range([float(signal.min()), float(signal.max())], name="image")
        radius, radius_note = auto_radius(signal, spacing, sign, xp, "cupy" if xp is not np else (
            "numba" if use_numba(xp, backend) else "numpy"))
    elif isinstance(radius, str):
        raise ParameterTypeError(f"radius must be a positive number or 'auto'; got {radius!r}")
    radius = check_radius(radius, signal.shape, spacing)
    if iter_callback is not None and not callable(iter_callback):
        raise TypeError(f"iter_callback must be callable; got {iter_callback!r}")

    if features is not None:
        features = check_image(features, name="features", ndims=(ndim,))
        if tuple(features.shape) != tuple(signal.shape):
            raise ValueError(f"features must have the image's spatial shape {tuple(signal.shape)}; got {tuple(features.shape)}")
        signal = to_device(features, xp) if get_array_module(features) is not xp else features
    compiled = xp is np and use_numba(xp, backend)
    from ._memory import check_detection_memory  # before any table that grows with the radius

    check_detection_memory("iterative_voting", signal.shape, radius, spacing,
                           "cupy" if xp is not np else ("numba" if compiled else "numpy"))
    plan = make_plan(radius, spacing, ndim)
    _check_work(signal.shape, plan, spacing, blur if features is None else 0.0, xp is not np,
                "numba" if compiled else "numpy")
    if signal.size >= 2**31 and xp is not np:
        raise ValueError(f"image is too large for one GPU pass ({signal.size} pixels >= 2**31); process it in tiles")

    detect_on = _detect_on_gpu if xp is not np else (_detect_on_numba if compiled else _detect_on_cpu)
    votes, coords, values, contrast, n_passes = detect_on(
        image, signal, plan, sign, blur, spacing, from_rgb, features is not None, iter_callback, return_votes
    )
    candidates = coords.astype(np.float64)
    candidate_scores = values / float(plan.weight_scale)
    vote_field = votes.astype(np.float32) / np.float32(plan.weight_scale) if return_votes else None
    value, min_contrast = _resolve_rule(threshold, candidate_scores, contrast, min_contrast)
    keep = (candidate_scores >= value) & (contrast >= min_contrast)
    return Detections(
        points=candidates[keep],
        scores=candidate_scores[keep],
        threshold=value,
        candidates=candidates,
        candidate_scores=candidate_scores,
        candidate_contrasts=contrast,
        min_contrast=min_contrast,
        vote_field=vote_field,
        n_passes=n_passes,
        backend="cupy" if xp is not np else ("numba" if compiled else "numpy"),
        radius=radius,
        spacing=spacing,
        radius_estimated=radius_estimated,
        radius_note=radius_note,
    )


_MIN_AXIS_PIXELS = 3
_CPU_MEMORY = {"numba": (96, 16 * 2**20), "numpy": (256, 128 * 2**20)}
"""Host memory of a CPU detection beyond its input: (bytes per pixel, fixed bytes). Measured with
tracemalloc (2D 384² and 1024², 3D 40³ and 96³): Numba 66-94 B/pixel (float64 copies, blur,
gradient, votes and their sparse table in a frame padded by the window, the voters' tables); the
NumPy path 240-275 B/pixel at 1024² and 96³ plus buffers of its batched votes (87-112 MiB on small
images)."""


def cpu_detection_memory(pixels: int, path: str) -> float:
    """Host bytes a CPU detection (``path`` 'numba' or 'numpy') of ``pixels`` pixels allocates."""
    per_pixel, fixed = _CPU_MEMORY[path]
    return per_pixel * pixels + fixed


def check_settings(shape, spacing, polarity, blur, min_contrast, threshold) -> tuple:
    """The checks of :func:`iterative_voting`'s settings other than the radius, for an image of
    spatial ``shape`` (``ivote.distributed.detect_chunked`` makes them on the whole image's):
    returns ``(spacing, blur, min_contrast)``, ``blur`` None becoming its default."""
    spacing = check_spacing(spacing, len(shape))
    _check_thin_axes(shape, len(shape))
    if polarity not in ("bright", "dark"):
        raise ValueError(f"polarity must be 'bright' or 'dark'; got {polarity!r}")
    if blur is None:
        blur = _DEFAULT_BLUR_PIXELS * min(spacing)
    blur = check_positive(blur, "blur", allow_zero=True, upper=max(n * s for n, s in zip(shape, spacing)))
    min_contrast = check_positive(min_contrast, "min_contrast", allow_zero=True)
    _resolve_rule(threshold, np.zeros(0), np.zeros(0), min_contrast)  # validate before the work
    return spacing, blur, min_contrast


def _check_thin_axes(shape, ndim) -> None:
    """The noise behind the contrast test is measured on 3^ndim boxes: every axis needs 3 pixels."""
    for axis, n in enumerate(shape):
        if n < _MIN_AXIS_PIXELS:
            hint = (f"; for one plane pass a 2D (Y, X) array, e.g. image[0]" if ndim == 3 and axis == 0
                    else "")
            raise IvoteError(
                f"image has {n} pixel(s) along axis {axis} (shape {tuple(shape)}); detection needs at least "
                f"{_MIN_AXIS_PIXELS} along every axis to measure the noise{hint}"
            )


def _cone_votes_per_voter(plan) -> float:
    """Offsets a voter's cone holds, summed over the passes (the cone's share of the disc/ball)."""
    if plan.ndim == 2:
        share = sum(phi / (2 * math.pi) for phi in plan.cone_angles)
    else:
        share = sum((1 - math.cos(phi / 2)) / 2 for phi in plan.cone_angles)
    return len(plan.offsets) * share


def _check_work(shape, plan, spacing, blur, gpu, cpu_path: str = "numba") -> None:
    """Refuse (ResourceLimitError) a detection whose estimated votes and blur taps or host
    memory exceed the limits of ``ivote._limits``."""
    from .._limits import check_budget

    pixels = math.prod(shape)
    taps = sum(8 * blur / s + 1 for s in spacing) if blur > 0 else 0  # the Gaussian's 4 sigma on either side
    work = pixels * (_cone_votes_per_voter(plan) + taps)
    check_budget(
        f"iterative_voting on {'x'.join(map(str, shape))} pixels with radius {plan.radius:g} "
        f"({len(plan.offsets)} offsets, {plan.n_passes} passes)",
        work=work, memory=None if gpu else cpu_detection_memory(pixels, cpu_path), gpu=gpu,
        advice="use a smaller radius or blur, or a crop of the image",
    )


def _detect_on_gpu(*args):
    """Votes (None unless ``keep_votes``), cell coordinates and votes, and passes run,
    with one host synchronisation (``_cuda.detect``; repeated detections of one
    shape and setting replay a CUDA graph); NaN/Inf are found from the image's
    statistics, reported at the end."""
    from ._cuda import detect

    return _detect_with(detect, *args)


def _detect_on_numba(*args):
    """As :func:`_detect_on_gpu`, on the CPU's cores (``_numba.detect``)."""
    from ._numba import detect

    return _detect_with(detect, *args)


def _detect_with(detect, image, signal, plan, sign, blur, spacing, from_rgb, has_features, iter_callback, keep_votes,
                 given=None):
    """The detection by a backend module's ``detect`` (``_cuda`` or ``_numba``), then the kept cells.

    ``given``: the whole image's ``_result.GlobalStatistics`` when ``signal`` is a
    block of it (``ivote.distributed``): every local maximum is returned then
    (the suppression of close maxima is the whole image's), and contrasts are to
    the image's noise."""
    sigma = tuple(blur / s for s in spacing) if not has_features and blur > 0 else None
    rgb = image if not has_features and from_rgb and image.dtype.kind == "f" else None
    found = detect(signal, plan, sign, sigma, iter_callback, also_finite=rgb, reuse=not keep_votes, given=given)
    check_finite_range(found.extremes, name="features" if has_features else "image")
    low, high = found.extremes
    if not high > low:  # constant image: no gradient, no voter, no cell
        return found.votes, np.zeros((0, plan.ndim), np.int64), np.zeros(0, np.int64), np.zeros(0), 0
    keep = _greedy_keep(len(found.flat), found.pairs) if given is None else slice(None)
    coords, values = _cells_at(found.flat, found.values, keep, signal.shape)
    sigma_noise = (noise_sigma(found.residuals, plan.ndim, grey_step(signal.dtype, low, high)) if given is None
                   else given.noise_sigma)
    contrast = contrasts(found.numerators[keep], sigma_noise)
    return found.votes, coords, values, contrast, plan.n_passes


def _detect_on_cpu(image, signal, plan, sign, blur, spacing, from_rgb, has_features, iter_callback, keep_votes,
                   given=None):
    """As :func:`_detect_on_gpu`, on NumPy: normalise, blur, vote (``_cpu.run_passes``), cells."""
    # float64 up to the quantised weights: both backends then round alike (see _plan.py)
    smoothed = signal.astype(np.float64, order="C", copy=True)
    extremes = [smoothed.min(), smoothed.max()] if given is None else [given.low, given.high]
    if not has_features and from_rgb and image.dtype.kind == "f":  # every channel, not just the signal
        extremes += [image.min(), image.max()]
    check_finite_range([float(v) for v in extremes], name="features" if has_features else "image")
    low, high = float(extremes[0]), float(extremes[1])
    if not high > low:  # constant image: no gradient, no voter, no cell
        empty = np.zeros((0, plan.ndim), np.int64), np.zeros(0, np.int64), np.zeros(0)
        return np.zeros(signal.shape, dtype=np.uint32), *empty, 0
    smoothed -= low
    smoothed /= high - low
    if given is None:
        residuals = noise_residuals(smoothed, noise_positions(tuple(signal.shape)))
        sigma_noise = noise_sigma(residuals, plan.ndim, grey_step(signal.dtype, low, high))
    else:
        sigma_noise = given.noise_sigma
    if not has_features and blur > 0:
        sigma = tuple(blur / s for s in spacing)
        smoothed = ndimage_module(np).gaussian_filter(smoothed, sigma=sigma, mode="reflect")
    from ._cpu import run_passes  # equal to _reference.run_passes, over the cone tables

    smoothed32 = smoothed.astype(np.float32)  # the contrasts compare in float32, as the kernel
    holder = [smoothed]  # run_passes takes the only reference and frees it early
    del smoothed
    from ._reach import pass_boxes

    votes = run_passes(holder, plan, sign, iter_callback, None if given is None else given.largest,
                       pass_boxes(plan, signal.shape, getattr(given, "owned", None)))
    coords, values = _candidates(votes, plan, suppress=given is None)
    contrast = contrasts(contrast_numerators(smoothed32, coords, plan.window, sign, bump_ring(plan)), sigma_noise)
    return votes, coords, values, contrast, plan.n_passes
