"""The learned detector: candidate features (NumPy against Numba), the exported forest against
scikit-learn, learning from corrected points, the saved file, the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ivote import iterative_voting
from ivote.data import synthetic_nuclei
from ivote.errors import InputFileError, IvoteError
from ivote.learn import (LearnedDetector, candidate_features, choose_threshold, feature_names, learn_detector,
                         load_detector)
from ivote.learn._candidates import suppress, widen
from ivote.learn._features import gather_reference
from ivote.metrics import match_points

pytest.importorskip("sklearn")


def _rgb_from_dark(image):
    """An H&E-like RGB image: dark nuclei absorbing red and green more than blue."""
    grey = (image - image.min()) / (image.max() - image.min())
    absorb = np.stack([0.8 * grey, 0.9 * grey, 0.4 * grey], axis=-1)
    return np.round(255 * (1 - absorb)).astype(np.uint8)


@pytest.fixture(scope="module")
def pair():
    """Two images of one kind with their true centres."""
    first = synthetic_nuclei((128, 128), radius=6, seed=11)
    second = synthetic_nuclei((128, 128), radius=6, seed=12)
    return first, second


@pytest.fixture(scope="module")
def detector(pair):
    first, _ = pair
    return learn_detector(first.image, first.centers, radius=9, n_trees=25, backend="numpy")


@pytest.mark.parametrize("kind", ["2d", "3d", "rgb"])
def test_features_numpy_equal_numba(kind):
    pytest.importorskip("numba")
    if kind == "3d":
        sample = synthetic_nuclei((24, 64, 64), spacing=(2.0, 1.0, 1.0), radius=6, seed=3)
        image, radius, spacing, polarity = sample.image, 7.0, (2.0, 1.0, 1.0), "bright"
    else:
        sample = synthetic_nuclei((96, 96), radius=6, seed=3, polarity="dark" if kind == "rgb" else "bright")
        image = _rgb_from_dark(sample.image) if kind == "rgb" else sample.image
        radius, spacing, polarity = 8.0, None, "bright"
    found = iterative_voting(image, radius=radius, spacing=spacing, polarity=polarity, threshold=None,
                             return_votes=True, backend="numpy")
    wide, original = widen(found)
    reference = candidate_features(image, wide, polarity=polarity, original=original, backend="numpy")
    compiled = candidate_features(image, wide, polarity=polarity, original=original, backend="numba")
    assert reference.names == feature_names(kind == "rgb")
    assert reference.values.shape == (len(wide.candidates), len(reference.names)) and len(reference) > 5
    assert np.isfinite(reference.values).all()
    np.testing.assert_array_equal(reference.values, compiled.values)


def test_gather_reads_nearest_clipped_pixels():
    array = np.arange(20.0).reshape(4, 5)
    points = np.array([[0, 0], [3, 4]])
    offsets = np.array([[0, 0], [-1, 2], [5, -9]])
    expected = [[0, 2, 15], [19, 14, 15]]  # clipped at the border
    np.testing.assert_array_equal(gather_reference(array, points, offsets), expected)


def test_features_describe_the_candidates(pair):
    """Nuclei are brighter inside than around and their gradient points inwards; background maxima are not."""
    first, _ = pair
    found = iterative_voting(first.image, radius=9, threshold=None, return_votes=True, backend="numpy")
    features = candidate_features(first.image, found, backend="numpy")
    match = match_points(found.candidates, first.centers, tolerance=3)
    nucleus = np.zeros(len(found.candidates), bool)
    nucleus[match.pairs[:, 0]] = True
    column = {name: features.values[:, k] for k, name in enumerate(features.names)}
    assert nucleus.sum() > 20 and (~nucleus).sum() > 5
    assert np.median(column["inner_minus_ring"][nucleus]) > np.median(column["inner_minus_ring"][~nucleus]) + 0.05
    assert np.median(column["gradient_coherence"][nucleus]) > 0.5
    np.testing.assert_allclose(column["log_score"], np.log(found.candidate_scores), rtol=1e-6)
    with pytest.raises(IvoteError, match="return_votes=True"):
        candidate_features(first.image, iterative_voting(first.image, radius=9, backend="numpy"))


@pytest.mark.parametrize("n_trees", [1, 15])
def test_forest_equals_scikit_learn(n_trees):
    """The trees grown one by one are RandomForestClassifier's, node for node, with its out-of-bag
    probabilities and predict_proba (NumPy and Numba walks)."""
    import warnings

    from sklearn.ensemble import RandomForestClassifier

    from ivote.learn._forest import MIN_SAMPLES_LEAF, fit_forest

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 6)).astype(np.float32)
    y = x[:, 0] + 0.5 * x[:, 1] ** 2 + 0.3 * rng.normal(size=300) > 0.4
    forest, oob = fit_forest(x, y, n_trees=n_trees, seed=1)
    classifier = RandomForestClassifier(n_estimators=n_trees, min_samples_leaf=MIN_SAMPLES_LEAF, max_features="sqrt",
                                        class_weight="balanced_subsample", bootstrap=True, oob_score=n_trees > 1,
                                        random_state=1, n_jobs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classifier.fit(x, y)
    assert len(forest.roots) == n_trees
    for k, estimator in enumerate(classifier.estimators_):
        tree = estimator.tree_
        start = forest.roots[k]
        nodes = slice(start, start + tree.node_count)
        np.testing.assert_array_equal(forest.threshold[nodes][tree.children_left >= 0],
                                      tree.threshold[tree.children_left >= 0])
        np.testing.assert_array_equal(forest.feature[nodes] >= 0, tree.children_left >= 0)
    test = rng.normal(size=(200, 6)).astype(np.float32)
    expected = classifier.predict_proba(test)[:, list(classifier.classes_).index(True)]
    for backend in ("numpy", "auto"):
        np.testing.assert_allclose(forest.probability(test, backend=backend), expected, atol=1e-12)
    if n_trees > 1:
        seen = np.isfinite(oob)
        assert seen.mean() > 0.9
        np.testing.assert_allclose(oob[seen], classifier.oob_decision_function_[seen, 1], atol=1e-12)


def test_forest_numba_walk_equals_numpy():
    """The compiled walk gives the NumPy walk's probabilities bit for bit (the trees summed in one order)."""
    pytest.importorskip("numba")
    from ivote.learn._forest import fit_forest

    rng = np.random.default_rng(4)
    x = rng.normal(size=(400, 9)).astype(np.float32)
    y = np.sin(3 * x[:, 0]) + x[:, 2] > 0
    forest, _ = fit_forest(x, y, n_trees=12, seed=3)
    test = rng.normal(size=(500, 9)).astype(np.float32)
    np.testing.assert_array_equal(forest.probability(test, backend="numpy"), forest.probability(test, backend="numba"))
    unseen = rng.random((12, 500)) < 0.4
    a, b = forest.out_of_bag(test, unseen, backend="numpy"), forest.out_of_bag(test, unseen, backend="numba")
    np.testing.assert_array_equal(np.isnan(a), ~unseen.any(axis=0))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", [(90, 70), (12, 40, 36)])
def test_widened_maxima_equal_scipy_filter(shape, monkeypatch):
    """The vote field's closer maxima through the detection's separable maxima equal SciPy's maximum_filter."""
    pytest.importorskip("numba")
    from scipy import ndimage as ndi

    from ivote.learn import _candidates

    rng = np.random.default_rng(2)
    votes = ndi.gaussian_filter(rng.random(shape), 1.5).astype(np.float32)
    votes[votes < np.median(votes)] = 0  # zeros and plateaus, as a vote field has
    votes[(0,) * len(shape)] = votes.max() + 1  # a maximum on the border
    half = np.array([3] + [4] * (len(shape) - 1))
    compiled = _candidates._local_maxima(votes, half, np)
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")
    reference = _candidates._local_maxima(votes, half, np)
    largest = ndi.maximum_filter(votes, size=tuple(2 * half + 1), mode="constant", cval=0)
    np.testing.assert_array_equal(reference, np.flatnonzero((votes == largest) & (votes > 0)))
    np.testing.assert_array_equal(compiled, reference)
    assert len(reference) > 3


def test_choose_threshold_and_suppress():
    p = np.array([0.95, 0.9, 0.7, 0.2, 0.1])
    y = np.array([True, True, True, False, False])
    t = choose_threshold(p, y)
    assert 0.2 < t <= 0.7  # every nucleus kept, no other candidate
    points = np.array([[0.0, 0.0], [0.0, 3.0], [0.0, 10.0]])
    np.testing.assert_array_equal(suppress(points, np.array([0.5, 0.9, 0.4]), (1.0, 1.0), 5.0), [False, True, True])


def test_learned_detector_finds_the_nuclei_of_another_image(pair, detector):
    _, second = pair
    found = iterative_voting(second.image, radius=9, detector=detector, backend="numpy")
    default = iterative_voting(second.image, radius=9, backend="numpy")
    learned_f1 = match_points(found.points, second.centers, tolerance=3).f1
    default_f1 = match_points(default.points, second.centers, tolerance=3).f1
    assert learned_f1 >= 0.7  # dense synthetic nuclei: the candidates hold about 75% of them
    assert learned_f1 >= default_f1 - 0.02
    # the probability is the score; the points are the candidates at or above the threshold
    assert np.all((found.scores >= found.threshold) & (found.scores <= 1))
    assert found.threshold == detector.threshold or detector.decision == "default"
    forced = iterative_voting(second.image, radius=9, detector=detector, threshold=0.5, backend="numpy")
    assert np.all(forced.scores >= 0.5) and np.all(np.isin(forced.scores, found.candidate_scores))
    assert found.min_contrast == 0 and found.vote_field is None
    assert len(found.candidates) >= len(default.candidates)


def test_learning_removes_look_alikes_the_default_keeps():
    """Small bright debris beside the nuclei: corrections that delete it teach the detector to drop it."""
    from scipy import ndimage as ndi

    def scene(seed, shape=(160, 160)):
        nuclei = synthetic_nuclei(shape, radius=7, seed=seed, n_nuclei=18, noise=0.03, overlap=0.0)
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[: shape[0], : shape[1]]
        debris, placed = np.zeros(shape, np.float32), []
        for _ in range(400):
            c = rng.uniform(8, np.array(shape) - 8)
            if np.min(np.hypot(*(nuclei.centers - c).T)) > 14 and all(np.hypot(*(c - q)) > 14 for q in placed):
                placed.append(c)
                debris[np.hypot(yy - c[0], xx - c[1]) <= 2.5] = 1
            if len(placed) == 14:
                break
        image = nuclei.image + ndi.gaussian_filter(debris, 0.7) * nuclei.image.max()
        return image.astype(np.float32), nuclei.centers

    train, train_centers = scene(1)
    test, test_centers = scene(2)
    learned = learn_detector(train, train_centers, radius=10, n_trees=50, backend="numpy")
    default = iterative_voting(test, radius=10, backend="numpy")
    found = iterative_voting(test, radius=10, detector=learned, backend="numpy")
    before = match_points(default.points, test_centers, tolerance=3.5)
    after = match_points(found.points, test_centers, tolerance=3.5)
    assert after.precision >= before.precision
    assert after.f1 >= before.f1 - 0.05


def test_save_load_gives_identical_points(tmp_path, pair, detector):
    _, second = pair
    path = detector.save(tmp_path / "detector.json")
    loaded = load_detector(path)
    assert isinstance(loaded, LearnedDetector) and LearnedDetector.load(path).threshold == detector.threshold
    data = json.loads(path.read_text())  # plain, inspectable JSON
    assert data["format"] == "ivote-learned-detector" and data["version"] == 1
    assert data["radius"] == 9 and data["polarity"] == "bright" and data["feature_names"][0] == "log_score"
    a = iterative_voting(second.image, radius=9, detector=detector, backend="numpy")
    b = iterative_voting(second.image, radius=9, detector=str(path), backend="numpy")
    np.testing.assert_array_equal(a.points, b.points)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(loaded.samples, detector.samples)


def test_bad_files_and_incompatible_images(tmp_path, pair, detector):
    first, _ = pair
    (tmp_path / "other.json").write_text('{"a": 1}')
    (tmp_path / "text.json").write_text("y,x\n1,2\n")
    for name in ("other.json", "text.json", "missing.json"):
        with pytest.raises(InputFileError, match="learned detector|not found"):
            load_detector(tmp_path / name)
    newer = detector.to_dict() | {"version": 99}
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    with pytest.raises(InputFileError, match="version 99"):
        load_detector(tmp_path / "newer.json")
    rgb = _rgb_from_dark(first.image)
    with pytest.raises(IvoteError, match="trained on a grey image; got an RGB"):
        iterative_voting(rgb, radius=9, detector=detector)
    volume = np.stack([first.image] * 5)
    with pytest.raises(IvoteError, match="trained on 2D images; got a 3D image"):
        iterative_voting(volume, radius=9, detector=detector)
    with pytest.raises(IvoteError, match="polarity 'bright'"):
        iterative_voting(first.image, radius=9, polarity="dark", detector=detector)
    with pytest.raises(IvoteError, match="probability in \\[0, 1\\]"):
        iterative_voting(first.image, radius=9, threshold=3.0, detector=detector)


def test_learning_needs_corrections(pair):
    first, _ = pair
    with pytest.raises(IvoteError, match="no corrected point lies on a candidate"):
        learn_detector(first.image, np.zeros((0, 2)), radius=9, backend="numpy")
    with pytest.raises(IvoteError, match="one points array"):
        learn_detector([first.image, first.image], [first.centers], radius=9, backend="numpy")


def test_rounds_accumulate(pair, detector):
    _, second = pair
    more = learn_detector(second.image, second.centers, radius=9, detector=detector, n_trees=25, backend="numpy")
    assert more.n_images == 2
    assert more.n_samples > detector.n_samples
    np.testing.assert_array_equal(more.samples[: detector.n_samples], detector.samples)


def test_volume_corrected_in_a_few_planes():
    sample = synthetic_nuclei((24, 80, 80), radius=6, seed=5)
    other = synthetic_nuclei((24, 80, 80), radius=6, seed=6)
    planes = [6, 12, 18]
    # the corrections: the nuclei whose centre lies near one of the corrected planes, in that plane
    near = np.min(np.abs(sample.centers[:, :1] - np.array(planes)[None]), axis=1) <= 2
    learned = learn_detector(sample.image, sample.centers[near], radius=7.5, annotated=planes, n_trees=25,
                             backend="numpy")
    assert learned.ndim == 3 and learned.n_samples < len(iterative_voting(
        sample.image, radius=7.5, threshold=None, backend="numpy").candidates) * 2
    found = iterative_voting(other.image, radius=7.5, detector=learned, backend="numpy")
    assert match_points(found.points, other.centers, tolerance=3).f1 >= 0.7


def test_missing_scikit_learn_is_a_clear_error(monkeypatch, pair):
    import sys

    first, _ = pair
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.ensemble", None)
    monkeypatch.setitem(sys.modules, "sklearn.tree", None)
    with pytest.raises(IvoteError, match="needs scikit-learn"):
        learn_detector(first.image, first.centers, radius=9, backend="numpy")


def test_command_line_learn_then_detect(tmp_path, pair, capsys):
    import tifffile

    from ivote.cli import main
    from ivote.io import read_points_csv, write_points_csv

    first, second = pair
    tifffile.imwrite(tmp_path / "a.tif", first.image)
    tifffile.imwrite(tmp_path / "b.tif", second.image)
    write_points_csv(tmp_path / "a.csv", first.centers)
    assert main(["learn", str(tmp_path / "a.tif"), "--points", str(tmp_path / "a.csv"), "--radius", "9",
                 "--out", str(tmp_path / "d.json")]) == 0
    assert "learned from 1 image(s)" in capsys.readouterr().out
    assert main(["detect", str(tmp_path / "b.tif"), "--detector", str(tmp_path / "d.json"),
                 "--out", str(tmp_path / "b.csv")]) == 0
    table = read_points_csv(tmp_path / "b.csv")
    direct = iterative_voting(second.image, radius=9, detector=load_detector(tmp_path / "d.json"))
    np.testing.assert_allclose(np.sort(table.points, axis=0), np.sort(direct.points, axis=0))
    assert main(["learn", str(tmp_path / "a.tif"), str(tmp_path / "b.tif"), "--points", str(tmp_path / "a.csv"),
                 "--radius", "9", "--out", str(tmp_path / "e.json")]) == 2
    assert "one --points table per image" in capsys.readouterr().err
    assert main(["detect", str(tmp_path / "b.tif"), "--out", str(tmp_path / "c.csv")]) == 2
    assert "--radius is required" in capsys.readouterr().err


def test_rethresholding_learned_detections(pair, detector):
    """The slider's refilter: 'auto' is the detector's decision again, a number a probability."""
    _, second = pair
    found = iterative_voting(second.image, radius=9, detector=detector, backend="numpy")
    again = found.with_threshold("auto")
    np.testing.assert_array_equal(again.points, found.points)
    np.testing.assert_array_equal(found.contrasts, found.candidate_contrasts[found.auto_kept])
    low = found.with_threshold(0.05)
    assert len(low.points) >= len(found.points) and np.all(low.scores >= 0.05)
    kept = np.flatnonzero(found.eligible & (found.candidate_scores >= 0.05))
    np.testing.assert_array_equal(low.points, found.candidates[kept])


def test_feature_maps_are_sampled_at_the_candidates(pair):
    """Feature maps (e.g. a ConvRBM's responses) add their value at the centre and inside half the radius."""
    first, _ = pair
    found = iterative_voting(first.image, radius=9, threshold=None, return_votes=True, backend="numpy")
    maps = np.stack([first.image, (first.labels > 0).astype(np.float32)])
    features = candidate_features(first.image, found, maps=maps, backend="numpy")
    assert features.names[-4:] == ("map0_centre", "map0_inner", "map1_centre", "map1_inner")
    y, x = found.candidates.astype(int).T
    np.testing.assert_allclose(features.values[:, -4], first.image[y, x], rtol=1e-6)
    np.testing.assert_allclose(features.values[:, -2], (first.labels[y, x] > 0), rtol=0)
    # inside half the radius: the mean of the mask map there lies in [0, 1] and is high on nuclei
    match = match_points(found.candidates, first.centers, tolerance=3)
    assert np.all((features.values[:, -1] >= 0) & (features.values[:, -1] <= 1))
    assert np.median(features.values[match.pairs[:, 0], -1]) > 0.8
