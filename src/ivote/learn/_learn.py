"""Learning a detector from corrected points: candidates matched to a point are nuclei, the rest are not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._typing import ArrayLike, Spacing
from .._validate import check_positive
from ..errors import IvoteError
from ._candidates import search_floor, suppress, widen
from ._detector import LearnedDetector
from ._features import candidate_features
from ._forest import N_TREES, fit_forest

__all__ = ["Corrections", "corrections_of", "fit_detector", "learn_detector", "one_floor"]


@dataclass(frozen=True)
class Corrections:
    """The training samples of one corrected image."""

    features: np.ndarray
    """(N, F) float32 features of the candidates in the corrected region."""
    labels: np.ndarray
    """(N,) bool: matched to a corrected point."""
    names: tuple
    positions: np.ndarray
    """(N, ndim) float64 physical positions of the candidates (pixels times spacing)."""
    n_points: int
    """Corrected points in the region."""
    unmatched_points: np.ndarray
    """(U, ndim) corrected points with no candidate within the tolerance."""
    search_floor: float | None = None
    """The floor of the widened search (``_candidates.search_floor``) that these candidates
    include, None when every corrected point had a candidate (or ``search=False``)."""
    n_searched: int = 0
    """Corrected points that had no candidate before the widened search."""


AMBIGUOUS = 2.0
"""Unmatched candidates closer than this many tolerances to a corrected point are not used."""


def default_tolerance(radius: float, ndim: int) -> float:
    """Half the typical nucleus radius implied by the voting radius (``detect._radius``'s rule):
    the distance within which a candidate matches a corrected point."""
    from ..detect._radius import LARGEST_OVER_TYPICAL

    return float(radius) / LARGEST_OVER_TYPICAL[ndim] / 2


def _region_mask(annotated, candidates, shape, spacing, tolerance):
    """Which candidates lie in the corrected region: ``annotated`` None (all), a boolean mask of the
    image's spatial shape, or for a volume a sequence of corrected plane indices (candidates within
    ``tolerance`` of one of them)."""
    n = len(candidates)
    if annotated is None:
        return np.ones(n, dtype=bool)
    mask = np.asarray(annotated)
    if mask.dtype == bool and mask.shape == tuple(shape):
        index = tuple(np.clip(np.rint(candidates).astype(np.int64), 0, np.asarray(shape) - 1).T)
        return mask[index]
    if len(shape) == 3 and mask.ndim == 1 and mask.dtype.kind in "iu":
        planes = mask.astype(np.float64)
        dz = np.abs(candidates[:, :1] - planes[None, :]) * spacing[0]
        return (dz <= tolerance).any(axis=1) if len(planes) else np.zeros(n, dtype=bool)
    raise IvoteError(f"annotated must be None, a boolean mask of the image's shape {tuple(shape)} or, for a "
                     f"volume, a list of plane indices; got an array of shape {mask.shape} and type {mask.dtype}")


def corrections_of(image, detections, points, *, polarity: str = "bright", annotated=None, tolerance=None,
                   channel=None, stains=None, search: bool = True, floor: float | None = None,
                   backend: str = "auto") -> Corrections:
    """Training samples of one image: features of its candidates and whether a corrected point matched each.

    ``detections`` come from ``iterative_voting(image, ..., return_votes=True)``; ``points`` are
    the corrected nucleus centres (pixel coordinates); ``annotated`` limits the samples to the
    corrected region (see :func:`learn_detector`). With ``search`` (default), corrected points
    that no candidate lies near widen the candidates (``_candidates.search_floor``): the vote
    field's maxima down to the floor they set (or ``floor``, if lower) become candidates too.
    """
    ndim = len(detections.spacing)
    points = np.asarray(points, dtype=np.float64).reshape(-1, ndim) if np.size(points) else np.zeros((0, ndim))
    if points.ndim != 2 or points.shape[1] != ndim:
        raise IvoteError(f"points must be an (N, {ndim}) array of pixel coordinates; got shape {points.shape}")
    spacing = tuple(detections.spacing)
    tolerance = default_tolerance(detections.radius, ndim) if tolerance is None else check_positive(tolerance, "tolerance")
    shape = detections.vote_field.shape if detections.vote_field is not None else None
    in_points = _region_mask(annotated, points, shape, spacing, tolerance) if len(points) else np.zeros(0, bool)
    points = points[in_points]
    samples = _samples(image, detections, points, floor, polarity, annotated, tolerance, channel, stains, backend)
    n_searched = len(samples[-1])
    if search and n_searched:
        found = search_floor(detections, samples[-1], tolerance)
        lowest = found if floor is None or found is None else min(found, floor)
        if lowest is not None and lowest != floor:
            floor = lowest
            samples = _samples(image, detections, points, floor, polarity, annotated, tolerance, channel, stains,
                               backend)
    features, labels, names, positions, unmatched = samples
    return Corrections(features, labels, names, positions, len(points), unmatched, floor, n_searched)


def _samples(image, detections, points, floor, polarity, annotated, tolerance, channel, stains, backend):
    """(features, labels, names, positions, unmatched points) of the candidates (widened down to
    ``floor``) in the corrected region."""
    from scipy.spatial import cKDTree

    from ..metrics import match_points

    spacing = tuple(detections.spacing)
    shape = detections.vote_field.shape if detections.vote_field is not None else None
    detections, original, searched = widen(detections, floor, return_searched=True)
    features = candidate_features(image, detections, polarity=polarity, channel=channel, stains=stains,
                                  original=original, backend=backend)
    candidates = np.asarray(detections.candidates, dtype=np.float64)
    inside = _region_mask(annotated, candidates, shape, spacing, tolerance)
    labels = np.zeros(len(candidates), dtype=bool)
    matched_points = np.zeros(len(points), dtype=bool)
    for used in (np.flatnonzero(inside & ~searched), np.flatnonzero(inside & searched)):
        # the search's candidates take only the points the others left: they never displace a candidate's match
        rest = np.flatnonzero(~matched_points)
        if len(rest) and len(used):
            match = match_points(candidates[used], points[rest], tolerance=tolerance, spacing=spacing)
            labels[used[match.pairs[:, 0]]] = True
            matched_points[rest[match.pairs[:, 1]]] = True
    if len(points):
        # a candidate beside a nucleus, off its centre, is neither clearly one nor clearly not: left out;
        # the search's are scored wherever the detector is applied: trained on as they come, a second point
        # on a nucleus when unmatched
        near = cKDTree(points * np.asarray(spacing)).query(candidates * np.asarray(spacing), k=1)[0]
        inside &= labels | searched | (near > AMBIGUOUS * tolerance)
    return (features.values[inside], labels[inside], features.names, candidates[inside] * np.asarray(spacing),
            points[~matched_points])


def one_floor(corrections: list, again) -> list:
    """``corrections`` of several images on one candidate set: those whose widened search's floor
    is not the lowest of them are made again by ``again(index, lowest)``."""
    floors = [c.search_floor for c in corrections if c.search_floor is not None]
    lowest = min(floors) if floors else None
    return [c if c.search_floor == lowest else again(k, lowest) for k, c in enumerate(corrections)]


def fit_detector(corrections, *, radius: float, spacing, polarity: str, ndim: int, rgb: bool, tolerance: float,
                 previous: LearnedDetector | None = None, n_trees: int = N_TREES, seed: int = 0) -> LearnedDetector:
    """A detector from a list of :class:`Corrections` (and the samples of ``previous``, which they add to).

    The decision threshold is the probability that maximises F1 over the training images,
    counted on each sample's out-of-bag probability (the trees that did not see it), with the
    corrected points no candidate matched counted as misses.
    """
    names = corrections[0].names if corrections else previous.feature_names
    features = [c.features for c in corrections]
    labels = [c.labels for c in corrections]
    positions = [c.positions for c in corrections]
    groups = [np.full(len(c.labels), k, dtype=np.int64) for k, c in enumerate(corrections)]
    unmatched = sum(len(c.unmatched_points) for c in corrections)
    floors = [c.search_floor for c in corrections if c.search_floor is not None]
    n_images = len(corrections)
    if previous is not None:
        previous.check_compatible(ndim=ndim, rgb=rgb, polarity=polarity)
        if tuple(names) != previous.feature_names:
            raise IvoteError("the new corrections' features are not the detector's: learn a new detector")
        features.insert(0, previous.samples)
        labels.insert(0, previous.labels)
        positions.insert(0, previous.positions)
        groups = [g + previous.n_images for g in groups]
        groups.insert(0, previous.groups)
        unmatched += previous.n_unmatched_points
        n_images += previous.n_images
        floors += [] if previous.search_floor is None else [previous.search_floor]
    x = np.concatenate(features) if features else np.zeros((0, len(names)), np.float32)
    y = np.concatenate(labels) if labels else np.zeros(0, bool)
    where = np.concatenate(positions) if positions else np.zeros((0, ndim))
    group = np.concatenate(groups) if groups else np.zeros(0, np.int64)
    n_positive = int(y.sum())
    if n_positive == 0:
        raise IvoteError("no corrected point lies on a candidate: add points on nuclei (or keep some of the "
                         "detected ones) before learning")
    if n_positive == len(y):
        raise IvoteError("every candidate is a nucleus: delete at least one false detection before learning "
                         "(the detector learns what is not a nucleus from the deleted points)")
    forest, oob = fit_forest(x, y, n_trees=n_trees, seed=seed)
    missing = ~np.isfinite(oob)
    if missing.any():
        oob[missing] = forest.probability(x[missing])
    from ._detector import passes_noise_test

    min_distance, threshold, (learned_f1, learned_errors) = choose_selection(
        oob, y, where, group, unmatched, typical=tolerance * 2, eligible=passes_noise_test(x, names))
    default_f1, default_errors = _default_f1(x, y, names, unmatched)
    use_default = learned_errors > default_errors - GATE_SIGMAS * np.sqrt(max(default_errors, 1))
    return LearnedDetector(forest=forest, threshold=threshold, min_distance=min_distance, radius=float(radius),
                           decision="default" if use_default else "learned", training_f1=(learned_f1, default_f1),
                           spacing=tuple(float(s) for s in spacing), polarity=polarity, ndim=ndim, rgb=rgb,
                           feature_names=tuple(names), tolerance=float(tolerance), samples=x.astype(np.float32),
                           labels=y, positions=where, groups=group, n_images=n_images,
                           n_unmatched_points=int(unmatched), search_floor=min(floors) if floors else None)


DISTANCE_FACTORS = (0.6, 0.8, 1.0, 1.2, 1.5)
"""Candidate distances between kept points, in typical nucleus radii, that the training images choose from."""


def choose_selection(probability, labels, positions, groups, n_missed, *, typical: float, eligible=None):
    """(min_distance, threshold) of the best F1 on the training samples: for each distance of
    :data:`DISTANCE_FACTORS` (times the typical radius), the most probable of close points are kept
    (:func:`ivote.learn._candidates.suppress`; a nucleus suppressed is a miss) and the
    threshold is :func:`choose_threshold`'s; ties go to the larger distance."""
    best = None
    for factor in DISTANCE_FACTORS[::-1]:
        distance = factor * typical
        kept = np.zeros(len(labels), dtype=bool)
        for g in np.unique(groups):
            rows = np.flatnonzero((groups == g) & (True if eligible is None else eligible))
            kept[rows] = suppress(positions[rows], probability[rows], (1.0,) * positions.shape[1], distance)
        missed = n_missed + int((labels & ~kept).sum())
        threshold = choose_threshold(probability[kept], labels[kept], missed)
        p, y = probability[kept], labels[kept]
        tp = int((y & (p >= threshold)).sum())
        fp = int((~y & (p >= threshold)).sum())
        fn = int(labels.sum()) + n_missed - tp
        f1 = 2 * tp / max(2 * tp + fp + fn, 1)
        if best is None or f1 > best[0][0] + 1e-12:
            best = ((f1, fp + fn), distance, threshold)
    return float(best[1]), float(best[2]), best[0]


GATE_SIGMAS = 2.0
"""The learned decision is used when, on the training images (out-of-bag), it makes fewer errors
(false points and missed nuclei) than the default threshold by at least this many standard
deviations of the default's error count (counts taken as Poisson: sqrt of the count); otherwise
the detector keeps the default's points (its probability still being the score). A few hundred
candidates of one image cannot show a smaller gain apart from chance."""


def _default_f1(features, labels, names, n_missed) -> float:
    """(F1, errors) of the default threshold on the training samples (``_detector.default_keep``)."""
    from ._detector import default_keep

    kept = default_keep(features, names)
    tp = int((kept & labels).sum())
    fp = int((kept & ~labels).sum())
    fn = int(labels.sum()) + n_missed - tp
    return 2 * tp / max(2 * tp + fp + fn, 1), fp + fn


F1_SLACK = 0.02
"""Thresholds within this much of the best training F1 count as equally good."""


def choose_threshold(probability: np.ndarray, labels: np.ndarray, n_missed: int = 0) -> float:
    """The decision threshold from the training samples' (out-of-bag) probabilities: of the
    thresholds whose F1 (nuclei kept against non-nuclei kept and nuclei dropped, plus
    ``n_missed`` never found) is within :data:`F1_SLACK` of the best, the one nearest to 0.5,
    the even odds of the balanced classes. A training image's F1 is often flat over a wide
    range of thresholds, and its out-of-bag probabilities are more extreme than a new image's:
    the middle of the range carries over better than its edge.

    >>> choose_threshold(np.array([0.9, 0.8, 0.6, 0.3, 0.1]), np.array([1, 1, 0, 1, 0], bool))
    0.3
    """
    order = np.argsort(-probability, kind="stable")
    p, y = probability[order], labels[order]
    tp = np.cumsum(y)
    fp = np.cumsum(~y)
    fn = y.sum() - tp + n_missed
    f1 = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
    last = np.flatnonzero(np.r_[p[1:] != p[:-1], True])  # keep whole groups of equal probability
    below = np.r_[p[1:], 0.0][last]
    good = f1[last] >= f1[last].max() - F1_SLACK
    # keeping the group at ``last`` means a threshold in (below, p]; the good ones' union, nearest 0.5
    lows, highs = below[good], p[last][good]
    inside = (lows < 0.5) & (0.5 <= highs)
    if inside.any():
        return 0.5
    edges = np.r_[highs, lows + 1e-9]
    return float(round(edges[np.argmin(np.abs(edges - 0.5))], 12))


def learn_detector(images: Any, points: Any, *, radius: float, spacing: Spacing = None, polarity: str = "bright",
                   annotated: Any = None, tolerance: float | None = None, detector: LearnedDetector | None = None,
                   channel: int | None = None, stains: str | ArrayLike | None = None, search: bool = True,
                   n_trees: int = N_TREES, seed: int = 0, backend: str = "auto") -> LearnedDetector:
    """Learn which maxima of the vote field are nuclei from corrected points on a few images.

    Each image is detected (every local maximum of the vote field is a candidate), the
    candidates within ``tolerance`` of a corrected point are nuclei, the others are not, and a
    random forest with balanced classes learns the difference from the candidates' features
    (:func:`ivote.learn.candidate_features`). Its probability becomes each point's score; the
    decision threshold is the best F1 on the training images (out-of-bag).

    Parameters
    ----------
    images : array or sequence of arrays
        Grey 2D/3D or RGB (H&E) images, all of one kind.
    points : array or sequence of arrays
        For each image, the corrected nucleus centres, (N, ndim) pixel coordinates: every nucleus
        of the corrected region, none that is not one.
    radius, spacing, polarity, channel, stains :
        As for :func:`ivote.iterative_voting`; the detector is applied with the same ones.
    annotated : None, mask or plane list, or a sequence of them (one per image)
        The region that was corrected: the whole image (None), a boolean mask of the image's
        shape, or for a volume the indices of the corrected planes (candidates within
        ``tolerance`` of them). Candidates outside are not used.
    tolerance : float, optional
        Largest distance of a candidate from its point, in units of ``spacing``; default half
        the typical nucleus radius (the radius over ``detect._radius.LARGEST_OVER_TYPICAL``, over 2).
    detector : LearnedDetector, optional
        A detector to add these corrections to (its samples are kept: rounds accumulate).
    search : bool
        Widen the candidates where corrected points have none near them (default): the vote
        field's maxima of their 3x3 box, down to the floor the weakest of them sets, become
        candidates on the training images and on every image the detector scores
        (``LearnedDetector.search_floor``), so that it can find nuclei the default cannot.
    n_trees, seed :
        The forest's size and random seed.

    Returns
    -------
    LearnedDetector

    Examples
    --------
    >>> from ivote.data import synthetic_nuclei
    >>> image, labels, centers, *_ = synthetic_nuclei((128, 128), radius=6, seed=1)
    >>> detector = learn_detector(image, centers, radius=9, n_trees=20)
    >>> detector.n_images, 0 < detector.threshold < 1
    (1, True)
    """
    from ..detect._colour import reads_as_rgb
    from ..detect._voting import iterative_voting

    if isinstance(images, np.ndarray) or hasattr(images, "__array_namespace__"):
        images, points, annotated = [images], [points], [annotated]
    images, points = list(images), list(points)
    if annotated is None or isinstance(annotated, np.ndarray):
        annotated = [annotated] * len(images)
    annotated = list(annotated)
    if len(points) != len(images) or len(annotated) != len(images):
        raise IvoteError(f"give one points array (and one annotated region) per image: {len(images)} images, "
                         f"{len(points)} points arrays, {len(annotated)} regions")
    if not images:
        raise IvoteError("learn_detector needs at least one image with corrected points")
    floor = None if detector is None else detector.search_floor
    found_all, corrections, settings = [], [], None
    for image, corrected, region in zip(images, points, annotated):
        found = iterative_voting(image, radius=radius, spacing=spacing, polarity=polarity, channel=channel,
                                 stains=stains, threshold=None, return_votes=True, backend=backend)
        ndim = len(found.spacing)
        rgb = reads_as_rgb(np.shape(image)) and channel is None
        if settings is None:
            settings = dict(radius=found.radius, spacing=found.spacing, polarity=polarity, ndim=ndim, rgb=rgb)
        elif (ndim, rgb) != (settings["ndim"], settings["rgb"]):
            raise IvoteError("every image of one detector must be of one kind (all grey or all RGB, all 2D or 3D)")
        found_all.append(found)
        corrections.append(corrections_of(image, found, corrected, polarity=polarity, annotated=region,
                                          tolerance=tolerance, channel=channel, stains=stains, search=search,
                                          floor=floor, backend=backend))

    def again(k, lowest):
        return corrections_of(images[k], found_all[k], points[k], polarity=polarity, annotated=annotated[k],
                              tolerance=tolerance, channel=channel, stains=stains, search=False, floor=lowest,
                              backend=backend)

    corrections = one_floor(corrections, again)
    tol = default_tolerance(settings["radius"], settings["ndim"]) if tolerance is None else float(tolerance)
    return fit_detector(corrections, tolerance=tol, previous=detector, n_trees=n_trees, seed=seed, **settings)
