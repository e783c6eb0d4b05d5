"""The recommended learned detection input: NucleusFeatures, the reconstruction map, the CLI options."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tifffile
from scipy import ndimage as ndi

from ivote.cli import main
from ivote.data import synthetic_nuclei
from ivote.detect import iterative_voting
from ivote.features import ConvRBM, NucleusFeatures, nucleus_filter_shape
from ivote.metrics import match_points


def test_filter_shape_is_half_the_voting_radius_per_axis():
    assert nucleus_filter_shape(18) == (9, 9)
    assert nucleus_filter_shape(18.0, (1.0, 1.0)) == (9, 9)
    assert nucleus_filter_shape(24, (0.5, 0.5)) == (25, 25)  # 48 pixels
    assert nucleus_filter_shape(4) == (5, 5)  # never under 5 in-plane
    assert nucleus_filter_shape(8, (2.0, 1.0, 1.0)) == (3, 5, 5)  # z: 2 pixels -> 3, in-plane 4 -> 5
    with pytest.raises(ValueError, match="radius"):
        nucleus_filter_shape(0)


@pytest.mark.parametrize("polarity", ["bright", "dark"])
def test_reconstruction_input_is_the_blurred_reconstruction(polarity):
    sample = synthetic_nuclei((64, 64), radius=6, seed=8, polarity=polarity)
    model = ConvRBM(8, 7, xp=np).fit(sample.image, epochs=5, learning_rate=1e-2, patch_shape=(32, 32))
    detection = model.detection_input(sample.image)
    expected = ndi.gaussian_filter(model.reconstruct(sample.image).astype(np.float64), 2.0, mode="nearest")
    expected = (expected - expected.mean()) / expected.std()
    np.testing.assert_allclose(detection, expected, atol=1e-5)
    assert detection.dtype == np.float32 and abs(float(detection.std()) - 1) < 1e-4
    inside = sample.labels > 0
    contrast = detection[inside].mean() - detection[~inside].mean()
    assert (contrast > 0.5) if polarity == "bright" else (contrast < -0.5)  # the input's polarity is kept
    unblurred = model.detection_input(sample.image, blur=0)
    assert np.corrcoef(unblurred.ravel(), model.reconstruct(sample.image).ravel())[0, 1] > 0.9999
    component = model.detection_input(sample.image, source="principal_component")
    assert np.corrcoef(component.ravel(), sample.image.ravel())[0, 1] > 0.5
    with pytest.raises(ValueError, match="source"):
        model.detection_input(sample.image, source="energy")
    with pytest.raises(ValueError, match="blur"):
        model.detection_input(sample.image, blur=-1)


@pytest.mark.parametrize("polarity", ["bright", "dark"])
def test_nucleus_map_is_the_hidden_map_most_correlated_with_the_image(polarity):
    sample = synthetic_nuclei((64, 64), radius=6, seed=8, polarity=polarity)
    model = ConvRBM(8, 7, xp=np).fit(sample.image, epochs=5, learning_rate=1e-2, patch_shape=(32, 32))
    maps = model.transform(sample.image).astype(np.float64)
    correlation = [np.corrcoef(m.ravel(), sample.image.ravel())[0, 1] if m.std() > 0 else -1 for m in maps]
    chosen = maps[int(np.argmax(correlation))]
    for blur in (0.0, 1.5):
        expected = ndi.gaussian_filter(chosen, blur, mode="nearest") if blur else chosen
        expected = (expected - expected.mean()) / expected.std()
        detection = model.detection_input(sample.image, source="nucleus_map", blur=blur)
        np.testing.assert_allclose(detection, expected, atol=1e-5)
        assert detection.dtype == np.float32
    inside = sample.labels > 0
    contrast = detection[inside].mean() - detection[~inside].mean()
    assert (contrast > 0.5) if polarity == "bright" else (contrast < -0.5)  # the input's polarity is kept


def test_nucleus_features_nucleus_map_option_detects():
    sample = synthetic_nuclei((96, 96), radius=6, seed=4)
    learned = NucleusFeatures(9, source="nucleus_map")
    detection = learned.detection_input(sample.image)
    expected = learned.model.detection_input(sample.image, source="nucleus_map", blur=9 / 6)  # radius / 6
    np.testing.assert_allclose(detection, expected, atol=1e-6)
    found = iterative_voting(sample.image, radius=9, features=detection, backend="numpy")
    assert match_points(found.points, sample.centers, tolerance=3).f1 >= 0.7
    with pytest.raises(ValueError, match="source"):
        NucleusFeatures(9, source="energy")


def test_nucleus_features_fit_the_recommended_model_and_detect():
    sample = synthetic_nuclei((96, 96), radius=6, seed=4)
    learned = NucleusFeatures(9)
    found = iterative_voting(sample.image, radius=9, features=learned, backend="numpy")
    assert learned.model.n_filters == 8 and learned.model.filter_shape == (5, 5)
    assert len(learned.model.reconstruction_errors_) == 10
    blurred = iterative_voting(sample.image, radius=9, backend="numpy")  # crowded: 38 nuclei, some touching
    f1 = match_points(found.points, sample.centers, tolerance=3).f1
    assert f1 >= 0.7 and f1 >= match_points(blurred.points, sample.centers, tolerance=3).f1 - 0.05


def test_nucleus_features_read_rgb_as_hematoxylin():
    sample = synthetic_nuclei((64, 64), radius=6, seed=2, polarity="dark")
    grey = (sample.image - sample.image.min()) / np.ptp(sample.image)
    rgb = np.stack([0.25 + 0.75 * grey, 0.1 + 0.9 * grey, 0.6 + 0.4 * grey], axis=-1)  # dark purple nuclei
    detection = NucleusFeatures(9).detection_input((rgb * 255).astype(np.uint8))
    assert detection.shape == (64, 64)
    inside = sample.labels > 0
    assert detection[inside].mean() > detection[~inside].mean() + 0.5  # hematoxylin: nuclei bright


def test_cli_learn_and_fit_with_radius(tmp_path, capsys):
    sample = synthetic_nuclei((96, 96), radius=6, seed=4)
    image_path = tmp_path / "nuclei.tif"
    tifffile.imwrite(image_path, sample.image)
    for option in ("learn", "learn-map"):
        out = tmp_path / f"points-{option}.csv"
        assert main(["detect", str(image_path), "--radius", "9", "--features", option, "--backend", "numpy",
                     "--out", str(out), "--quiet"]) == 0
        rows = [line for line in out.read_text().splitlines() if not line.startswith("#")]  # comments: units, radius
        points = np.loadtxt(rows[1:], delimiter=",", usecols=(0, 1), ndmin=2)  # after the header
        assert match_points(points, sample.centers, tolerance=3).f1 >= 0.7
    model_path = tmp_path / "model.npz"
    assert main(["features", "fit", str(image_path), "--radius", "18", "--epochs", "1", "--quiet",
                 "--out", str(model_path)]) == 0
    model = ConvRBM.load(model_path)
    assert model.n_filters == 8 and model.filter_shape == (9, 9)
    capsys.readouterr()
    assert main(["features", "fit", str(image_path), "--out", str(tmp_path / "m2.npz")]) != 0
    assert "--radius" in capsys.readouterr().err


def test_max_patches_bounds_the_training_steps(monkeypatch):
    image = synthetic_nuclei((64, 64), radius=5, seed=1).image
    steps = []
    original = ConvRBM._cd1

    def counting(self, *args, **kwargs):
        steps.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ConvRBM, "_cd1", counting)
    ConvRBM(3, 5, xp=np).fit(image, epochs=2, patch_shape=(16, 16))
    every = len(steps)
    assert every >= 2 * 16  # a grid of at least 4 x 4 tiles per epoch
    steps.clear()
    capped = ConvRBM(3, 5, xp=np).fit(image, epochs=2, patch_shape=(16, 16), max_patches=5)
    assert len(steps) == 10 and len(capped.reconstruction_errors_) == 2
    steps.clear()
    same = ConvRBM(3, 5, xp=np).fit(image, epochs=2, patch_shape=(16, 16), max_patches=10_000)
    reference = ConvRBM(3, 5, xp=np).fit(image, epochs=2, patch_shape=(16, 16))
    np.testing.assert_array_equal(same.filters_, reference.filters_)  # a cap above the count changes nothing
    with pytest.raises(ValueError, match="max_patches"):
        ConvRBM(3, 5, xp=np).fit(image, max_patches=0)


def test_nucleus_features_warn_in_3d_not_in_2d():
    volume = synthetic_nuclei((16, 24, 24), radius=4, seed=1)
    learned = NucleusFeatures(5)
    with pytest.warns(UserWarning, match="worse than the default blur in 3D"):
        learned.fit(volume.image)
    assert learned.model.ndim == 3  # warned, not refused: the model is still fitted
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        NucleusFeatures(5).fit(synthetic_nuclei((32, 32), radius=4, seed=1).image)
