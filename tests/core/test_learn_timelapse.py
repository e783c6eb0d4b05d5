"""A learned detector on a time-lapse: every frame scored by the model, its decision (one probability
threshold) in every frame, from Python, the command line and the napari widget's frame runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ivote import iterative_voting
from ivote._frames import detect_frames
from ivote.data import synthetic_nuclei
from ivote.learn import learn_detector

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def movie_and_detector():
    frames = [synthetic_nuclei((96, 96), radius=6, seed=s) for s in (21, 22, 23)]
    trained = learn_detector(frames[0].image, frames[0].centers, radius=9, n_trees=20, backend="numpy")
    # a learned decision whose threshold no pooled rule over the probabilities would give
    detector = replace(trained, decision="learned", threshold=0.35)
    return np.stack([f.image for f in frames]), detector


def _per_frame(movie, detector):
    return [iterative_voting(frame, radius=9, detector=detector, backend="numpy") for frame in movie]


def test_detect_frames_applies_the_detector_to_every_frame(movie_and_detector, tmp_path):
    movie, detector = movie_and_detector
    expected = _per_frame(movie, detector)
    for given in (detector, str(detector.save(tmp_path / "d.json"))):
        found = detect_frames(movie, radius=9, detector=given, backend="numpy")
        assert found.threshold == detector.threshold
        for t, (frame, alone) in enumerate(zip(found.frames, expected)):
            np.testing.assert_array_equal(frame.points, alone.points)
            np.testing.assert_array_equal(found.points[found.times == t, 1:], alone.points)
            np.testing.assert_array_equal(frame.scores, alone.scores)
    assert min(len(f.points) for f in expected) > 5


def test_cli_time_lapse_with_a_detector(movie_and_detector, tmp_path):
    import tifffile

    from ivote.cli import main
    from ivote.io import read_points_csv

    movie, detector = movie_and_detector
    tifffile.imwrite(tmp_path / "movie.tif", movie, imagej=True, metadata={"axes": "TYX"})
    path = detector.save(tmp_path / "d.json")
    assert main(["detect", str(tmp_path / "movie.tif"), "--detector", str(path), "--backend", "numpy",
                 "--out", str(tmp_path / "found.csv")]) == 0
    table = read_points_csv(tmp_path / "found.csv")
    expected = _per_frame(movie, detector)
    for t, alone in enumerate(expected):
        rows = table.times == t
        np.testing.assert_allclose(np.sort(table.points[rows], axis=0), np.sort(alone.points, axis=0))


def test_widget_frame_runs_keep_the_model_decision(movie_and_detector):
    """The Detect widget's time-lapse result: 'auto' is the model's decision in each frame, not a rule pooled
    over the frames' probabilities."""
    pytest.importorskip("napari")
    from ivote.napari._detect_jobs import DetectResult, TimelapseResult

    movie, detector = movie_and_detector
    expected = _per_frame(movie, detector)
    every = [iterative_voting(frame, radius=9, detector=detector, threshold="none", backend="numpy")
             for frame in movie]
    result = TimelapseResult((0, 1, 2), tuple(DetectResult(d, None, 0, False, 0.0) for d in every))
    points, scores, threshold = result.points("auto")
    assert threshold >= detector.threshold and np.all(scores >= detector.threshold)
    for t, alone in enumerate(expected):
        np.testing.assert_array_equal(points[points[:, 0] == t, 1:], alone.points)
