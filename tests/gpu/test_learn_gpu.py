"""The learned detector's candidate features on CuPy against the NumPy reference (skipped without a GPU)."""

import numpy as np
import pytest

from ivote import _backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _backend.cupy_available(), reason="needs a CUDA GPU with CuPy"),
]


def _rgb_from_dark(image):
    grey = (image - image.min()) / (image.max() - image.min())
    absorb = np.stack([0.8 * grey, 0.9 * grey, 0.4 * grey], axis=-1)
    return np.round(255 * (1 - absorb)).astype(np.uint8)


@pytest.mark.parametrize("kind", ["2d", "3d", "rgb"])
def test_features_cupy_equal_numpy(kind):
    import cupy

    from ivote.data import synthetic_nuclei
    from ivote.detect._voting import iterative_voting
    from ivote.learn import candidate_features
    from ivote.learn._candidates import widen

    if kind == "3d":
        sample = synthetic_nuclei((24, 64, 64), spacing=(2.0, 1.0, 1.0), radius=6, seed=3)
        image, radius, spacing = sample.image, 7.0, (2.0, 1.0, 1.0)
    else:
        sample = synthetic_nuclei((96, 96), radius=6, seed=3, polarity="dark" if kind == "rgb" else "bright")
        image = _rgb_from_dark(sample.image) if kind == "rgb" else sample.image
        radius, spacing = 8.0, None
    found = iterative_voting(image, radius=radius, spacing=spacing, threshold=None, return_votes=True,
                             backend="numpy")
    wide, original = widen(found)
    reference = candidate_features(image, wide, original=original, backend="numpy")
    on_gpu = candidate_features(cupy.asarray(image), type(wide)(**{**wide.__dict__,
                                "vote_field": cupy.asarray(wide.vote_field)}), original=original, backend="cupy")
    assert on_gpu.names == reference.names
    np.testing.assert_allclose(on_gpu.values, reference.values, rtol=1e-5, atol=1e-6)


def test_learned_detector_on_cupy_input_gives_the_cpu_points():
    import cupy

    from ivote import iterative_voting
    from ivote.data import synthetic_nuclei
    from ivote.learn import learn_detector

    first = synthetic_nuclei((128, 128), radius=6, seed=11)
    second = synthetic_nuclei((128, 128), radius=6, seed=12)
    detector = learn_detector(first.image, first.centers, radius=9, n_trees=25, backend="numpy")
    on_cpu = iterative_voting(second.image, radius=9, detector=detector, backend="numpy")
    on_gpu = iterative_voting(cupy.asarray(second.image), radius=9, detector=detector)
    np.testing.assert_array_equal(on_gpu.points, on_cpu.points)


def test_widened_search_cupy_equal_numpy():
    """The widened candidates and the search below the floor read a CuPy vote field as they read NumPy's."""
    from dataclasses import replace

    import cupy

    from ivote.data import synthetic_nuclei
    from ivote.detect._voting import iterative_voting
    from ivote.learn._candidates import search_floor, widen

    sample = synthetic_nuclei((192, 192), radius=8, seed=4)
    found = iterative_voting(sample.image, radius=12, threshold=None, return_votes=True, backend="numpy")
    on_gpu = replace(found, vote_field=cupy.asarray(found.vote_field))
    floor = search_floor(found, sample.centers, 4.0)
    assert floor is not None
    assert search_floor(on_gpu, sample.centers, 4.0) == floor
    for given in (None, floor):
        host, host_original = widen(found, given)
        device, device_original = widen(on_gpu, given)
        np.testing.assert_array_equal(host.candidates, device.candidates)
        np.testing.assert_array_equal(host.candidate_scores, device.candidate_scores)
        np.testing.assert_array_equal(host_original, device_original)
