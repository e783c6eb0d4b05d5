import numpy as np
import pytest

from ivote.metrics import (
    iou_matrix,
    match_labels,
    match_points,
    pooled_precision_recall,
    precision_recall_curve,
)


def test_optimal_not_greedy():
    # Greedy nearest-first would pair d0-t0 (distance 0.5) and leave d1 unmatched;
    # the optimal matching pairs d0-t1 and d1-t0: two true positives.
    detected = [[0.0, 0.0], [0.0, -1.4]]
    truth = [[0.0, -0.5], [0.0, 1.2]]
    m = match_points(detected, truth, tolerance=1.3)
    assert m.true_positives == 2
    assert sorted(map(tuple, m.pairs)) == [(0, 1), (1, 0)]
    assert m.precision == m.recall == m.f1 == 1.0


def test_counts_and_rates():
    truth = np.array([[10, 10], [30, 30], [50, 50], [70, 70]], float)
    detected = np.array([[11, 10], [30, 32.5], [90, 90]], float)
    m = match_points(detected, truth, tolerance=2.0)
    assert (m.true_positives, m.false_positives, m.false_negatives) == (1, 2, 3)
    assert m.precision == pytest.approx(1 / 3)
    assert m.recall == pytest.approx(1 / 4)
    assert m.f1 == pytest.approx(2 * 1 / (3 + 4))
    np.testing.assert_allclose(m.distances, [1.0])


def test_tolerance_in_physical_units():
    truth = [[10.0, 10.0, 10.0]]
    detected = [[11.0, 10.0, 10.0]]  # one slice off in z
    assert match_points(detected, truth, tolerance=1.5, spacing=(2.0, 0.5, 0.5)).true_positives == 0
    assert match_points(detected, truth, tolerance=2.0, spacing=(2.0, 0.5, 0.5)).true_positives == 1


def test_one_to_one():
    truth = [[0.0, 0.0]]
    detected = [[0.1, 0.0], [0.0, 0.1], [0.2, 0.2]]
    m = match_points(detected, truth, tolerance=1)
    assert m.true_positives == 1 and m.false_positives == 2


def test_empty_inputs():
    assert match_points(np.zeros((0, 2)), [[1, 1]], tolerance=1).recall == 0.0
    assert match_points([[1, 1]], np.zeros((0, 2)), tolerance=1).precision == 0.0
    both = match_points(np.zeros((0, 2)), np.zeros((0, 2)), tolerance=1)
    assert both.f1 == 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="tolerance"):
        match_points([[0, 0]], [[0, 0]], tolerance=0)
    with pytest.raises(ValueError, match="detected must be an"):
        match_points([[0, 0, 0]], [[0, 0]], tolerance=1)


def test_pooled_counts():
    a = match_points([[0, 0]], [[0, 0], [5, 5]], tolerance=1)
    b = match_points([[0, 0], [9, 9]], [[0, 0]], tolerance=1)
    total = a + b
    assert (total.true_positives, total.n_detected, total.n_true) == (2, 3, 3)
    assert total.f1 == pytest.approx(2 / 3)


def test_precision_recall_curve_known_answer():
    truth = [[0, 0], [10, 10]]
    detected = [[0, 0], [50, 50], [10, 10]]
    scores = [0.9, 0.8, 0.7]
    pr = precision_recall_curve(detected, scores, truth, tolerance=1)
    np.testing.assert_allclose(pr.thresholds, [0.9, 0.8, 0.7])
    np.testing.assert_allclose(pr.precision, [1.0, 0.5, 2 / 3])
    np.testing.assert_allclose(pr.recall, [0.5, 0.5, 1.0])
    # envelope: precision 1 up to recall 0.5, 2/3 from 0.5 to 1
    assert pr.area == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    pooled = pooled_precision_recall([(detected, scores, truth, None)], tolerance=1)
    assert pooled.area == pytest.approx(pr.area)


def test_perfect_ranking_has_area_one():
    truth = np.array([[i * 10.0, 0] for i in range(5)])
    detected = np.concatenate([truth, [[100.0, 100.0]]])
    scores = np.array([5, 4, 3, 2, 1, 0.5])
    assert precision_recall_curve(detected, scores, truth, tolerance=1).area == pytest.approx(1.0)


def test_label_matching_known_ious():
    truth = np.zeros((10, 10), int)
    truth[0:4, 0:4] = 1  # 16 px
    truth[6:10, 6:10] = 2  # 16 px
    pred = np.zeros((10, 10), int)
    pred[0:4, 0:3] = 7  # 12 px inside label 1: IoU 12/16
    pred[6:8, 6:10] = 9  # 8 px inside label 2: IoU 8/16 = 0.5
    pred[0:2, 8:10] = 4  # false positive
    iou, pids, tids = iou_matrix(pred, truth)
    np.testing.assert_array_equal(pids, [4, 7, 9])
    np.testing.assert_array_equal(tids, [1, 2])
    np.testing.assert_allclose(iou, [[0, 0], [0.75, 0], [0, 0.5]])
    m = match_labels(pred, truth, iou_threshold=0.5)
    assert m.true_positives == 2
    np.testing.assert_allclose(sorted(m.ious), [0.5, 0.75])
    assert m.precision == pytest.approx(2 / 3) and m.recall == 1.0
    assert m.mean_matched_iou == pytest.approx(0.625)
    strict = match_labels(pred, truth, iou_threshold=0.6)
    assert strict.true_positives == 1 and strict.f1 == pytest.approx(2 / 5)


def test_label_matching_identical_and_errors():
    labels = np.array([[0, 1, 1], [2, 2, 0]])
    m = match_labels(labels * 3, labels)
    assert m.f1 == 1.0 and m.mean_matched_iou == 1.0
    with pytest.raises(ValueError, match="same shape"):
        match_labels(labels, labels[:1])
    with pytest.raises(TypeError, match="integer label image"):
        match_labels(labels.astype(float), labels)
