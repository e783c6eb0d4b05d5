"""Automatic radius (``estimate_radius``, ``radius="auto"``) against synthetic nuclei of known size."""

import numpy as np
import pytest

from ivote.cli import main
from ivote.data import synthetic_nuclei
from ivote.detect import estimate_radius, iterative_voting, stain_vectors, typical_radius
from ivote.detect._colour import _RUIFROK_HE
from ivote.metrics import match_points


def true_typical_radius(labels, spacing):
    """Median equivalent radius of the labelled nuclei (2D disc, 3D sphere), physical units."""
    sizes = np.bincount(labels.ravel())[1:]
    sizes = sizes[sizes > 0] * float(np.prod(spacing))
    return float(np.median(np.sqrt(sizes / np.pi) if labels.ndim == 2 else np.cbrt(3 * sizes / (4 * np.pi))))


def he_image(nuclei, seed=0, stains=_RUIFROK_HE):
    """An H&E-like RGB image: hematoxylin in ``nuclei`` (an amount in [0, 1]),
    eosin around them, Beer-Lambert."""
    rng = np.random.default_rng(seed)
    hematoxylin = 1.2 * nuclei * rng.uniform(0.8, 1.2, nuclei.shape) + 0.02
    eosin = 0.5 * (1 - nuclei) * rng.uniform(0.6, 1.0, nuclei.shape) + 0.02
    amounts = np.stack([hematoxylin, eosin], axis=-1)
    return np.round(255 * np.exp(-amounts @ stains)).astype(np.uint8)


def normalised(image):
    """A synthetic fluorescence image scaled to [0, 1]: the nuclei's hematoxylin amount,
    with their edges and texture."""
    return (image - image.min()) / np.ptp(image)


CASES = [
    dict(shape=(192, 192), spacing=None, radius=6, polarity="bright", seed=0),
    dict(shape=(192, 192), spacing=None, radius=10, polarity="dark", seed=1),
    dict(shape=(128, 128), spacing=(0.5, 0.5), radius=4, polarity="bright", seed=2),
    dict(shape=(40, 96, 96), spacing=(2.0, 0.5, 0.5), radius=5, polarity="bright", seed=3),
    dict(shape=(48, 64, 64), spacing=None, radius=7, polarity="dark", seed=4),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c['shape'])}d-{c['polarity']}-{c['spacing']}")
def test_typical_radius_within_15_percent_of_the_labels(case):
    sample = synthetic_nuclei(case["shape"], spacing=case["spacing"], radius=case["radius"],
                              polarity=case["polarity"], seed=case["seed"])
    estimate = typical_radius(sample.image, spacing=case["spacing"], polarity=case["polarity"], backend="numpy")
    truth = true_typical_radius(sample.labels, sample.spacing)
    assert abs(estimate / truth - 1) <= 0.15, (estimate, truth)


def test_radius_is_physical_and_follows_the_spacing():
    """The same pixels with twice the pixel size give twice the radius; a wrong z
    spacing on an anisotropic volume gives a different one."""
    sample = synthetic_nuclei((40, 96, 96), spacing=(2.0, 0.5, 0.5), radius=5, seed=3)
    right = typical_radius(sample.image, spacing=(2.0, 0.5, 0.5), backend="numpy")
    doubled = typical_radius(sample.image, spacing=(4.0, 1.0, 1.0), backend="numpy")
    assert doubled == pytest.approx(2 * right, rel=1e-6)
    wrong = typical_radius(sample.image, spacing=(0.5, 0.5, 0.5), backend="numpy")
    assert abs(wrong / true_typical_radius(sample.labels, (0.5, 0.5, 0.5)) - 1) > 0.15


def test_polarity_matters():
    sample = synthetic_nuclei((192, 192), radius=8, polarity="dark", seed=5)
    truth = true_typical_radius(sample.labels, (1, 1))
    assert abs(typical_radius(sample.image, polarity="dark", backend="numpy") / truth - 1) <= 0.15
    assert abs(typical_radius(sample.image, polarity="bright", backend="numpy") / truth - 1) > 0.15


def test_rgb_is_read_as_hematoxylin():
    sample = synthetic_nuclei((192, 192), radius=9, seed=6)
    rgb = he_image(normalised(sample.image), seed=6)
    estimate = typical_radius(rgb, backend="numpy")
    assert abs(estimate / true_typical_radius(sample.labels, (1, 1)) - 1) <= 0.15


def ellipses_image(shape, semi_axes, count, seed):
    """Uniform ellipses (2D) or ellipsoids (3D) of the given semi-axes, random
    centres at least two long semi-axes apart, random in-plane orientations,
    blurred by 1 pixel, with a little noise."""
    from scipy import ndimage as ndi

    rng = np.random.default_rng(seed)
    grid = np.indices(shape).astype(float)
    image = np.zeros(shape)
    centres = []
    margin = max(semi_axes) + 2
    while len(centres) < count:
        centre = rng.uniform(margin, np.asarray(shape) - margin)
        if any(np.linalg.norm(centre - c) < 2.2 * max(semi_axes) for c in centres):
            continue
        centres.append(centre)
        offset = grid - centre.reshape((-1,) + (1,) * len(shape))
        angle = rng.uniform(0, np.pi)
        y, x = offset[-2], offset[-1]
        along, across = np.cos(angle) * x + np.sin(angle) * y, -np.sin(angle) * x + np.cos(angle) * y
        inside = (along / semi_axes[-1]) ** 2 + (across / semi_axes[-2]) ** 2
        if len(shape) == 3:
            inside = inside + (offset[0] / semi_axes[0]) ** 2
        image[inside <= 1] = 1.0
    return ndi.gaussian_filter(image, 1.0) + rng.normal(0, 0.02, shape)


def test_estimate_follows_the_length_of_elongated_nuclei():
    """2.5:1 ellipses and discs of the same area: the same typical (equivalent)
    radius, but the voting radius follows the semi-major axis (x 1.25)."""
    elongated = ellipses_image((256, 256), (6.0, 15.0), 14, seed=1)
    round_ = ellipses_image((256, 256), (9.5, 9.5), 14, seed=2)
    assert typical_radius(elongated, backend="numpy") == pytest.approx(typical_radius(round_, backend="numpy"), rel=0.2)
    assert estimate_radius(elongated, backend="numpy") / (1.25 * 15.0) == pytest.approx(1, abs=0.15)
    assert estimate_radius(round_, backend="numpy") / (1.25 * 9.5) == pytest.approx(1, abs=0.15)


def test_estimate_in_3d_takes_the_middle_semi_axis():
    """Ellipsoids stretched along z (as a microscope's blur stretches nuclei):
    the voting radius follows the in-plane semi-axes, not the stretch."""
    volume = ellipses_image((64, 72, 72), (12.0, 6.0, 6.0), 6, seed=3)
    assert estimate_radius(volume, backend="numpy") / (1.25 * 6.0) == pytest.approx(1, abs=0.15)


@pytest.mark.parametrize("shape, spacing, radius", [((192, 192), (0.5, 0.5), 4.0), ((32, 80, 80), (2.0, 0.5, 0.5), 5.0)])
def test_iterative_voting_with_auto_radius(shape, spacing, radius):
    sample = synthetic_nuclei(shape, spacing=spacing, radius=radius, seed=9)
    found = iterative_voting(sample.image, radius="auto", spacing=spacing, backend="numpy")
    assert found.radius_estimated
    assert found.radius == pytest.approx(estimate_radius(sample.image, spacing=spacing, backend="numpy"))
    given = iterative_voting(sample.image, radius=radius, spacing=spacing, backend="numpy")
    assert not given.radius_estimated and given.radius == radius
    f1 = match_points(found.points, sample.centers, tolerance=radius / 2, spacing=sample.spacing).f1
    assert f1 >= 0.9, f1


@pytest.mark.parametrize("kwargs, message", [
    (dict(radius="big"), "radius"),
    (dict(radius="auto", polarity="up"), "polarity"),
])
def test_bad_radius_arguments(kwargs, message):
    image = synthetic_nuclei((64, 64), radius=5, seed=0).image
    with pytest.raises(ValueError, match=message):
        iterative_voting(image, backend="numpy", **kwargs)


def test_estimator_errors_name_the_problem():
    with pytest.raises(ValueError, match="constant"):
        typical_radius(np.ones((64, 64)), backend="numpy")
    image = synthetic_nuclei((64, 64), radius=5, seed=0).image
    with pytest.raises(ValueError, match="max_radius"):
        typical_radius(image, min_radius=10, max_radius=5, backend="numpy")
    with pytest.raises(ValueError, match="polarity"):
        typical_radius(image, polarity="up", backend="numpy")
    with pytest.raises(ValueError, match=r"too thin .* 3 pixel\(s\) along axis 0 .* give the radius as a number"):
        estimate_radius(np.random.default_rng(0).random((3, 64, 64)), backend="numpy")  # nothing about max_radius


def test_cli_radius_auto_prints_the_estimate(tmp_path, capsys):
    import tifffile

    sample = synthetic_nuclei((128, 128), radius=6, seed=10)
    path = tmp_path / "nuclei.tif"
    tifffile.imwrite(path, sample.image)
    out = tmp_path / "points.csv"
    assert main(["detect", str(path), "--radius", "auto", "--backend", "numpy", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    expected = estimate_radius(sample.image, backend="numpy")
    assert f"radius {expected:.4g} px (auto)" in printed
    lines = out.read_text().splitlines()  # stored with the points, where napari's reader finds it
    assert f"# radius: {expected!r}" in lines and "# radius_estimated: true" in lines
    given = tmp_path / "given.csv"
    assert main(["detect", str(path), "--radius", "7.5", "--backend", "numpy", "--out", str(given)]) == 0
    lines = given.read_text().splitlines()
    assert "# radius: 7.5" in lines and not any(line.startswith("# radius_estimated") for line in lines)
    with pytest.raises(SystemExit) as info:  # argparse's one-line usage error
        main(["detect", str(path), "--radius", "six", "--out", str(tmp_path / "x.csv")])
    assert info.value.code == 2
    assert "argument --radius: must be a positive number or 'auto'; got 'six'" in capsys.readouterr().err


# Macenko stain vectors


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stain_vectors_recover_known_stains(seed):
    rng = np.random.default_rng(seed)
    stains = np.abs(_RUIFROK_HE + rng.normal(0, 0.08, (2, 3)))
    stains /= np.linalg.norm(stains, axis=1, keepdims=True)
    sample = synthetic_nuclei((160, 160), radius=8, seed=seed)
    from scipy import ndimage as ndi

    rgb = he_image(ndi.gaussian_filter((sample.labels > 0).astype(float), 1.0), seed=seed, stains=stains)
    found = stain_vectors(rgb)
    angles = np.degrees(np.arccos(np.clip(np.sum(found * stains, axis=1), -1, 1)))
    assert np.all(angles < 3.0), angles  # uint8 rounding and the robust percentiles cost a little


def test_adaptive_density_unmixes_shifted_stains_better_than_fixed():
    from ivote.detect import hematoxylin_density

    stains = np.array([[0.45, 0.80, 0.40], [0.25, 0.90, 0.35]])  # far from Ruifrok's
    stains /= np.linalg.norm(stains, axis=1, keepdims=True)
    rng = np.random.default_rng(3)
    amounts = rng.uniform(0.05, 1.5, (96, 96, 2))
    rgb = np.round(255 * np.exp(-amounts @ stains)).astype(np.uint8)
    adaptive = hematoxylin_density(rgb, stains="auto")
    fixed = hematoxylin_density(rgb)
    truth = amounts[..., 0].ravel()
    r_adaptive = np.corrcoef(adaptive.ravel(), truth)[0, 1]
    assert r_adaptive > 0.99
    assert r_adaptive > np.corrcoef(fixed.ravel(), truth)[0, 1] + 0.05
    exact = np.exp(-amounts @ stains)  # no rounding: unmixing with the true stains returns the amounts
    np.testing.assert_allclose(hematoxylin_density(exact, stains=stains), amounts[..., 0], atol=1e-9)


def test_stain_vectors_fall_back_and_reject_bad_input():
    from ivote.detect import hematoxylin_density

    white = np.full((32, 32, 3), 255, np.uint8)
    np.testing.assert_allclose(stain_vectors(white), _RUIFROK_HE)
    with pytest.raises(ValueError, match="percentile"):
        stain_vectors(white, percentile=60)
    with pytest.raises(ValueError, match="stains"):
        hematoxylin_density(white, stains="macenko")
    with pytest.raises(ValueError, match="stains"):
        hematoxylin_density(white, stains=np.ones((2, 3)))


# The reference threshold


def test_reference_threshold_follows_the_nuclei_that_pass_the_noise_test():
    from ivote.detect import reference_threshold

    rng = np.random.default_rng(0)
    nuclei = rng.uniform(50, 100, 40)
    noise = rng.uniform(0.1, 2, 400)
    scores = np.concatenate([nuclei, noise])
    contrasts = np.concatenate([np.full(40, 10.0), np.full(400, 1.0)])
    value = reference_threshold(scores, contrasts, 3.0)
    assert noise.max() < value < nuclei.min()  # Otsu on log scores here: inside the noise or the nuclei
    assert reference_threshold(7 * scores, contrasts, 3.0) == pytest.approx(7 * value)
    assert reference_threshold(scores, np.zeros_like(scores), 3.0) == -np.inf


def test_reference_threshold_keeps_a_dense_field_of_nuclei():
    sample = synthetic_nuclei((160, 160), radius=6, n_nuclei=200, noise=0.02, seed=11)
    found = iterative_voting(sample.image, radius=6, threshold="reference", backend="numpy")
    assert found.with_threshold("reference").threshold == found.threshold
    f1 = match_points(found.points, sample.centers, tolerance=3).f1
    # seeds 11-16 of this field give F1 0.93-0.96 (0.945 here, since the initial directions are
    # quantised; mean 0.943 against 0.947 before): 0.94 is a margin, not a seed's value
    assert f1 >= 0.94, f1
    with pytest.raises(ValueError, match="'otsu', 'reference'"):
        found.with_threshold("mean")


def test_stains_reach_the_detector_and_the_cli(tmp_path, capsys):
    import tifffile

    stains = np.array([[0.45, 0.80, 0.40], [0.25, 0.90, 0.35]])
    stains /= np.linalg.norm(stains, axis=1, keepdims=True)
    sample = synthetic_nuclei((128, 128), radius=7, seed=12)
    rgb = he_image(normalised(sample.image), seed=12, stains=stains)
    found = iterative_voting(rgb, radius=7, stains="auto", backend="numpy")
    assert match_points(found.points, sample.centers, tolerance=3.5).f1 >= 0.9
    path = tmp_path / "he.tif"
    tifffile.imwrite(path, rgb, photometric="rgb")
    out = tmp_path / "points.csv"
    assert main(["detect", str(path), "--radius", "7", "--stains", "auto", "--backend", "numpy", "--out", str(out)]) == 0
    assert f"{len(found.points)} nuclei" in capsys.readouterr().out


@pytest.mark.parametrize("sigma", [0.3, 1.7, 3.9])
@pytest.mark.parametrize("order", [0, 1, 2])
def test_gpu_taps_are_scipys_gaussian_padded(sigma, order):
    """The GPU scale space filters with SciPy's Gaussian (derivative) taps padded with zeros
    (fewer CuPy kernels): the same filter as gaussian_filter1d."""
    import scipy.ndimage as ndi

    from ivote.detect._radius import _gaussian_taps

    image = np.random.default_rng(3).random((12, 40))
    taps = _gaussian_taps(sigma, order, 16)
    padded = int(4 * sigma + 0.5) < 16
    assert taps.size == 33 and (taps[0] == 0) == padded and (taps[-1] == 0) == padded
    for axis in (0, 1):
        expected = ndi.gaussian_filter1d(image, sigma, axis=axis, order=order, mode="reflect")
        np.testing.assert_allclose(ndi.correlate1d(image, taps, axis=axis, mode="reflect"), expected,
                                   rtol=0, atol=1e-14)


@pytest.mark.parametrize("shape, budget, expected", [
    ((100, 100), 10_000, (100, 100)),  # fits: whole
    ((400, 400), 10_000, (100, 100)),  # a square crop, centred
    ((40, 1000, 1000), 400_000, (40, 100, 100)),  # a thin stack keeps every plane
    ((40, 1000, 1000), 40_000, (34, 34, 34)),  # unless it is thicker than the crop
    ((8, 2000, 3), 1_000, (8, 41, 3)),  # two short axes kept whole
    ((64, 64, 64), 4_096, (16, 16, 16)),
])
def test_central_crop_keeps_short_axes_whole(shape, budget, expected):
    from ivote.detect._radius import central_crop

    crop = central_crop(shape, budget)
    sides = tuple(s.stop - s.start for s in crop)
    assert sides == expected and np.prod(sides) <= max(budget, np.prod(shape) if np.prod(shape) <= budget else 0)
    for s, n in zip(crop, shape):  # centred
        assert 0 <= s.start and s.stop <= n and abs(s.start - (n - s.stop)) <= 1


def test_large_images_are_estimated_on_the_crop_rgb_before_its_colour_conversion(monkeypatch):
    from ivote.detect import _radius

    monkeypatch.setattr(_radius, "_MAX_PIXELS", 96 * 96)
    sample = synthetic_nuclei((160, 200), radius=5.0, noise=0.05, seed=4)
    crop = _radius.central_crop(sample.image.shape)
    assert estimate_radius(sample.image, backend="numpy") == estimate_radius(sample.image[crop], backend="numpy")
    rgb = np.stack([255 - 150 * sample.image, 255 - 200 * sample.image, 255 - 60 * sample.image], axis=-1)
    rgb = np.clip(rgb, 0, 255).astype(np.uint8)
    converted, real = [], _radius.spatial_signal
    monkeypatch.setattr(_radius, "spatial_signal", lambda image, *a, **k: (converted.append(image.shape), real(image, *a, **k))[1])
    assert estimate_radius(rgb, backend="numpy") == estimate_radius(rgb[crop], backend="numpy")
    assert converted == [rgb[crop].shape] * 2  # the colour conversion sees the crop only
