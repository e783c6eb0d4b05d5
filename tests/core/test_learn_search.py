"""The learned detector's widened search: corrected nuclei without a candidate near them lower the
floor of the vote field's maxima that become candidates, on the training image and wherever the
detector is applied."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ivote import iterative_voting
from ivote.data import synthetic_nuclei
from ivote.learn import corrections_of, learn_detector, load_detector
from ivote.learn._candidates import search_floor, widen
from ivote.learn._learn import default_tolerance
from ivote.metrics import match_points

pytest.importorskip("sklearn")

RADIUS = 12.0


@pytest.fixture(scope="module")
def dense():
    """Dense synthetic nuclei: the detector's candidates miss a good share of them."""
    sample = synthetic_nuclei((256, 256), radius=8, seed=0)
    found = iterative_voting(sample.image, radius=RADIUS, threshold=None, return_votes=True, backend="numpy")
    return sample, found


def _missed(found, centers, tolerance):
    wide, _ = widen(found)
    match = match_points(wide.candidates, centers, tolerance=tolerance)
    missed = np.ones(len(centers), bool)
    missed[match.pairs[:, 1]] = False
    return centers[missed]


def test_missed_points_widen_the_candidates(dense):
    sample, found = dense
    tolerance = default_tolerance(RADIUS, 2)
    missed = _missed(found, sample.centers, tolerance)
    assert len(missed) > 5
    plain = corrections_of(sample.image, found, sample.centers, search=False, backend="numpy")
    searched = corrections_of(sample.image, found, sample.centers, backend="numpy")
    assert plain.search_floor is None and len(plain.unmatched_points) == len(missed)
    assert searched.search_floor is not None and searched.n_searched == len(missed)
    # the search finds candidates for some of them: they are positives now, not misses
    assert len(searched.unmatched_points) < len(missed)
    assert searched.labels.sum() == plain.labels.sum() + len(missed) - len(searched.unmatched_points)
    # ... and never displace a candidate's match: every nucleus of the plain samples is one of the searched samples
    plain_nuclei = {tuple(p) for p in plain.positions[plain.labels]}
    assert plain_nuclei <= {tuple(p) for p in searched.positions[searched.labels]}
    # the floor is the weakest of the maxima it found near the missed points: every one of them
    # (their best 3x3 maximum within the tolerance) scores at least that
    assert search_floor(found, missed, tolerance) == pytest.approx(searched.search_floor)
    deeper, original, added = widen(found, searched.search_floor, return_searched=True)
    assert added.sum() > 0 and not (added & original).any()
    assert len(deeper.candidates) == len(widen(found)[0].candidates) + added.sum()
    # the added maxima lie as far from every other candidate as the closer maxima from each other
    from scipy.spatial import cKDTree

    from ivote.learn._candidates import DENSE_FRACTION

    others = cKDTree(deeper.candidates[~added])
    assert others.query(deeper.candidates[added])[0].min() > DENSE_FRACTION * RADIUS


def test_no_missed_points_no_search(dense):
    sample, found = dense
    tolerance = default_tolerance(RADIUS, 2)
    wide, _ = widen(found)
    match = match_points(wide.candidates, sample.centers, tolerance=tolerance)
    found_only = sample.centers[match.pairs[:, 1]]
    corrections = corrections_of(sample.image, found, found_only, backend="numpy")
    assert corrections.search_floor is None and corrections.n_searched == 0
    assert search_floor(found, np.zeros((0, 2)), tolerance) is None


def test_detector_applies_its_search_floor(tmp_path, dense):
    """At apply time the same widened candidates exist, so the detector can keep nuclei below the default's
    candidates; the floor is saved with the detector."""
    sample, found = dense
    detector = learn_detector(sample.image, sample.centers, radius=RADIUS, n_trees=20, backend="numpy")
    plain = learn_detector(sample.image, sample.centers, radius=RADIUS, n_trees=20, search=False, backend="numpy")
    assert detector.search_floor is not None and plain.search_floor is None
    assert detector.n_unmatched_points < plain.n_unmatched_points
    other = synthetic_nuclei((256, 256), radius=8, seed=1)
    every = iterative_voting(other.image, radius=RADIUS, threshold=None, return_votes=True, backend="numpy")
    scored = detector.rescore(other.image, every)
    assert len(scored.candidates) > len(plain.rescore(other.image, every).candidates)
    # with a low enough threshold the added candidates can be points (not only the default's maxima)
    forced = replace(detector, decision="learned").rescore(other.image, every, threshold=0.0)
    searched = widen(every, detector.search_floor, return_searched=True)[2]
    added = widen(every, detector.search_floor)[0].candidates[searched]
    assert match_points(forced.points, added, tolerance=0.5).true_positives > 0
    path = detector.save(tmp_path / "d.json")
    assert load_detector(path).search_floor == detector.search_floor
    np.testing.assert_array_equal(load_detector(path).rescore(other.image, every).points, scored.points)


def test_one_floor_for_every_training_image(dense):
    """Images of one detector share one candidate set: the lowest floor of their searches."""
    sample, _ = dense
    second = synthetic_nuclei((256, 256), radius=8, seed=2)
    half = second.centers[second.centers[:, 0] < 128]  # fewer corrected points: another floor
    detector = learn_detector([sample.image, second.image], [sample.centers, half], radius=RADIUS, n_trees=10,
                              annotated=[None, np.arange(256 * 256).reshape(256, 256) // 256 < 128],
                              backend="numpy")
    floors = []
    for image, points, region in ((sample.image, sample.centers, None),
                                  (second.image, half, np.arange(256 * 256).reshape(256, 256) // 256 < 128)):
        found = iterative_voting(image, radius=RADIUS, threshold=None, return_votes=True, backend="numpy")
        floors.append(corrections_of(image, found, points, annotated=region, backend="numpy").search_floor)
    assert detector.search_floor == pytest.approx(min(f for f in floors if f is not None))
