"""Iterative voting on NumPy: accuracy on synthetic nuclei, options, bad input."""

import numpy as np
import pytest

from ivote.data import synthetic_nuclei
from ivote.detect import Detections, hematoxylin_density, iterative_voting
from ivote.metrics import match_points


def detect(image, **kwargs):
    kwargs.setdefault("backend", "numpy")
    return iterative_voting(image, **kwargs)


def f1(found, centers, radius, spacing=None):
    return match_points(found.points, centers, tolerance=radius / 2, spacing=spacing).f1


@pytest.fixture(scope="module")
def sample2d():
    return synthetic_nuclei((128, 128), radius=6, overlap=0.3, seed=11)


@pytest.fixture(scope="module")
def found2d(sample2d):
    return detect(sample2d.image, radius=6, return_votes=True)


def test_2d_synthetic_f1(sample2d, found2d):
    assert len(sample2d.centers) > 40
    assert f1(found2d, sample2d.centers, 6) >= 0.95
    assert found2d.backend == "numpy" and found2d.n_passes == 5
    assert found2d.points.dtype == np.float64 and found2d.points.shape[1] == 2
    assert np.all(np.diff(found2d.scores) <= 0)  # best first
    assert np.all(found2d.scores >= found2d.threshold)


def test_3d_anisotropic_synthetic_f1():
    spacing = (2.0, 0.5, 0.5)
    sample = synthetic_nuclei((16, 48, 48), spacing=spacing, radius=4.0, overlap=0.3, seed=4)
    found = detect(sample.image, radius=4.0, spacing=spacing)
    assert len(sample.centers) > 15
    assert f1(found, sample.centers, 4.0, spacing) >= 0.95
    assert found.points.shape[1] == 3


def test_maxima_are_at_least_radius_apart(found2d):
    points = found2d.candidates
    distance = np.linalg.norm(points[:, None] - points[None], axis=-1)
    np.fill_diagonal(distance, np.inf)
    assert distance.min() >= 6


def test_vote_field_matches_scores(found2d, sample2d):
    field = found2d.vote_field
    assert field.shape == sample2d.image.shape
    at_points = field[tuple(found2d.points.astype(int).T)]
    np.testing.assert_allclose(at_points, found2d.scores, rtol=1e-6)


def _disc(shape, centres, radius, value=1.0):
    yy, xx = np.indices(shape)
    image = np.zeros(shape)
    for cy, cx in centres:
        image[(yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2] = value
    return image


def test_touching_pair_gives_two_cells():
    image = _disc((64, 64), [(32, 24), (32, 40)], 8)  # discs of radius 8 touching
    found = detect(image, radius=9)
    assert len(found.points) == 2
    truth = np.array([[32, 24], [32, 40]])
    assert match_points(found.points, truth, tolerance=2).true_positives == 2


def test_dark_polarity():
    sample = synthetic_nuclei((128, 128), radius=6, polarity="dark", seed=12)
    found = detect(sample.image, radius=6, polarity="dark")
    assert f1(found, sample.centers, 6) >= 0.95
    wrong = detect(sample.image, radius=6, polarity="bright")
    assert f1(wrong, sample.centers, 6) < 0.5


def test_rgb_hematoxylin_and_channel():
    from skimage.color import rgb2hed

    sample = synthetic_nuclei((96, 96), radius=6, seed=13)
    # H&E-like: nuclei absorb red and green more than blue
    absorb = np.clip(sample.image, 0, 1)[..., None] * np.array([0.75, 0.8, 0.35])
    rgb = np.round(255 * (1 - absorb)).astype(np.uint8)
    np.testing.assert_allclose(hematoxylin_density(rgb), rgb2hed(rgb)[..., 0], atol=1e-12)
    found = detect(rgb, radius=6)
    assert found.points.shape[1] == 2
    assert f1(found, sample.centers, 6) >= 0.9
    red = detect(rgb, radius=6, channel=0, polarity="dark")
    assert f1(red, sample.centers, 6) >= 0.9


def test_rgb_of_any_type_is_scaled_by_its_real_range():
    """8-bit colour stored as float 0..255, float 0..1, uint16 or int32/int64 gives the
    uint8 image's hematoxylin density and cells (issue 13: these used to give 0 cells)."""
    sample = synthetic_nuclei((96, 96), radius=6, seed=13)
    absorb = np.clip(sample.image, 0, 1)[..., None] * np.array([0.75, 0.8, 0.35])
    rgb = np.round(255 * (1 - absorb)).astype(np.uint8)
    expected = detect(rgb, radius=6)
    assert len(expected.points) > 10
    for stored in (rgb.astype(np.float32), rgb / 255.0, rgb.astype(np.uint16), rgb.astype(np.int32),
                   rgb.astype(np.int64)):
        np.testing.assert_allclose(hematoxylin_density(stored), hematoxylin_density(rgb), atol=1e-6)
        found = detect(stored, radius=6)
        np.testing.assert_array_equal(found.points, expected.points)
    # genuinely 16-bit colour is scaled by 65535
    np.testing.assert_allclose(hematoxylin_density(rgb.astype(np.uint16) * 257), hematoxylin_density(rgb), atol=1e-9)


def test_threshold_options(found2d):
    every = found2d.with_threshold(None, min_contrast=0)
    assert every.threshold == float("-inf") and len(every.points) == len(found2d.candidates)
    assert len(found2d.with_threshold("none", 0.0).points) == len(found2d.candidates)
    none = found2d.with_threshold(None)  # the contrast test still applies
    assert none.min_contrast == 3.0
    assert len(none.points) == np.sum(found2d.candidate_contrasts >= 3.0) < len(found2d.candidates)
    np.testing.assert_array_equal(none.contrasts, found2d.candidate_contrasts[found2d.candidate_contrasts >= 3.0])
    with pytest.raises(ValueError, match="min_contrast"):
        found2d.with_threshold("otsu", min_contrast=-1)
    value = float(np.median(found2d.candidate_scores))
    fixed = found2d.with_threshold(value)
    assert np.all(fixed.scores >= value) and len(fixed.points) == np.sum(found2d.candidate_scores >= value)
    otsu = fixed.with_threshold("otsu")
    np.testing.assert_array_equal(otsu.points, found2d.points)
    assert isinstance(otsu, Detections)
    with pytest.raises(ValueError, match="threshold"):
        found2d.with_threshold("median")


def test_threshold_argument_equals_refilter(sample2d, found2d):
    direct = detect(sample2d.image, radius=6, threshold=10.0)
    np.testing.assert_array_equal(direct.points, found2d.with_threshold(10.0).points)


def test_features_array_used_instead_of_image(sample2d, found2d):
    from scipy import ndimage as ndi

    smoothed = ndi.gaussian_filter(sample2d.image.astype(np.float64), 2.0)
    noise = np.random.default_rng(0).random(sample2d.image.shape)
    found = detect(noise, radius=6, features=smoothed)
    np.testing.assert_array_equal(found.candidates, found2d.candidates)

    class Provider:
        def detection_input(self, image):
            return smoothed

    # the noise is measured on what is voted on (here smooth features), so compare without the contrast test
    every = found2d.with_threshold("auto", min_contrast=0)
    assert np.array_equal(detect(noise, radius=6, features=Provider(), min_contrast=0).points, every.points)
    with pytest.raises(ValueError, match="features"):
        detect(sample2d.image, radius=6, features=smoothed[:10])


def test_iter_callback_and_cancel(sample2d):
    calls = []
    detect(sample2d.image[:64, :64], radius=6, iter_callback=lambda i, n: calls.append((i, n)))
    assert calls == [(i, 5) for i in range(5)]

    class Cancelled(Exception):
        pass

    def cancel(i, n):
        raise Cancelled

    with pytest.raises(Cancelled):
        detect(sample2d.image[:64, :64], radius=6, iter_callback=cancel)


def test_constant_image_gives_no_cells():
    found = detect(np.full((32, 32), 7.0), radius=4, return_votes=True)
    assert found.points.shape == (0, 2) and found.scores.shape == (0,)
    assert found.candidates.shape == (0, 2)
    assert found.vote_field.shape == (32, 32) and not found.vote_field.any()


@pytest.mark.parametrize(
    "convert",
    [
        lambda a: (np.clip(a, 0, None) * 1000).astype(np.uint16),
        lambda a: (a * 1000).astype(np.int32),
        lambda a: a.astype(np.float16),
        lambda a: a.astype(">f8"),
        lambda a: np.asfortranarray(a),
        lambda a: np.pad(a, 2)[2:-2:1, 2:-2][:, ::1].T.copy().T,
    ],
)
def test_dtypes_and_layouts_work(sample2d, found2d, convert):
    image = convert(sample2d.image.astype(np.float64))
    found = detect(image, radius=6)
    assert f1(found, sample2d.centers, 6) >= 0.93


def test_non_contiguous_view(sample2d):
    big = np.zeros((256, 256), dtype=np.float32)
    big[::2, ::2] = sample2d.image
    view = big[::2, ::2]
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(detect(view, radius=6).points, detect(np.ascontiguousarray(view), radius=6).points)


def test_bool_image():
    image = _disc((64, 64), [(20, 20), (44, 40)], 7) > 0
    found = detect(image, radius=8)
    assert match_points(found.points, [[20, 20], [44, 40]], tolerance=2).true_positives == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"radius": 0}, "radius"),
        ({"radius": -3}, "radius"),
        ({"radius": 1000}, "radius"),
        ({"radius": float("nan")}, "radius"),
        ({"radius": 4, "spacing": (1, 1, 1)}, "spacing"),
        ({"radius": 4, "spacing": (1, 0)}, "spacing"),
        ({"radius": 4, "polarity": "grey"}, "polarity"),
        ({"radius": 4, "blur": -1}, "blur"),
        ({"radius": 4, "threshold": "mean"}, "threshold"),
        ({"radius": 4, "channel": 0}, "channel"),
        ({"radius": 4, "backend": "gpu"}, "backend"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        detect(np.random.default_rng(0).random((32, 32)), **kwargs)


@pytest.mark.parametrize(
    "image, message",
    [
        (np.zeros((4, 8, 8, 8)), "image must be 2D or 3D"),
        (np.zeros((0, 8)), "empty"),
        (np.pad([[0.0, np.nan], [1.0, 2.0]], 1, mode="edge"), "NaN"),
        (np.pad([[0.0, np.inf], [1.0, 2.0]], 1, mode="edge"), "NaN or infinite"),
        (np.where(np.eye(8)[..., None] > 0, np.nan, 0.5) * np.ones(3), "NaN"),  # RGB
        (np.full((6, 6, 6), -np.inf), "NaN or infinite"),
        (np.where(np.eye(8)[..., None] > 0, -np.inf, 0.5) * np.ones(3), "NaN or infinite"),  # RGB, clipped by H&E
        (np.zeros(8), "image must be 2D or 3D"),
        (np.zeros((8, 8), dtype=complex), "real-valued"),
    ],
)
def test_bad_images(image, message):
    with pytest.raises((ValueError, TypeError), match=message):
        detect(image, radius=2)


def test_rgb_nan_in_an_unused_channel():
    rgb = np.random.default_rng(0).random((16, 16, 3))
    rgb[3, 3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        detect(rgb, radius=3, channel=0)


def test_rgb_channel_out_of_range():
    with pytest.raises(ValueError, match="channel"):
        detect(np.zeros((16, 16, 3), np.uint8), radius=3, channel=3)


def _greedy_scan(votes, plan):
    """The definition: local maxima in order of score (ties: lower flat index),
    each kept unless a kept one lies within the radius (float32 disc test)."""
    from scipy import ndimage

    size = tuple(2 * h + 1 for h in plan.maxima_half_width)
    peaks = np.argwhere((votes == ndimage.maximum_filter(votes, size=size, mode="constant")) & (votes > 0))
    values = votes[tuple(peaks.T)].astype(np.int64)
    order = np.lexsort((np.ravel_multi_index(peaks.T, votes.shape), -values))
    kept = []
    for i in order:
        close = False
        for j in kept:
            offset = (peaks[i] - peaks[j]).astype(np.float32) * plan.spacing32
            length_sq = np.float32(0)
            for component in offset:
                length_sq = np.float32(length_sq + component * component)
            close = close or length_sq < plan.radius_sq32
        if not close:
            kept.append(i)
    return peaks[kept], values[kept]


@pytest.mark.parametrize("seed", range(6))
def test_candidates_equal_the_greedy_scan(seed):
    from ivote.detect._plan import make_plan
    from ivote.detect._cells import _candidates

    rng = np.random.default_rng(seed)
    ndim = 2 + seed % 2
    votes = np.zeros((36,) * ndim, dtype=np.uint32)
    n = 40 * ndim
    votes[tuple(rng.integers(0, 36, size=(ndim, n)))] = rng.integers(1, 4, size=n)  # many ties and close pairs
    plan = make_plan(float(rng.uniform(3, 8)), (1.0, 1.0) if ndim == 2 else (2.0, 1.0, 1.0), ndim)
    coords, values = _candidates(votes, plan)
    expected_coords, expected_values = _greedy_scan(votes, plan)
    assert len(coords) > 5
    assert np.array_equal(coords, expected_coords) and np.array_equal(values, expected_values)


def test_otsu_threshold_equals_scikit_image():
    """The detector's own Otsu (for speed) gives scikit-image's threshold exactly,
    on log-normal scores, integer-valued votes with ties, few values and values
    one ulp from a bin edge."""
    from skimage.filters import threshold_otsu

    from ivote.detect._thresholds import otsu_threshold

    rng = np.random.default_rng(12)
    cases = [rng.lognormal(0, s, n) for s, n in ((0.5, 2), (1.0, 3), (2.0, 1000), (3.0, 5000))]
    cases += [rng.integers(1, k, n).astype(float) for k, n in ((3, 10), (50, 400), (10**6, 3000))]
    edges = np.exp(np.linspace(0.0, 1.0, 257))
    cases.append(np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, 10)]))
    for _ in range(200):
        cases.append(rng.lognormal(rng.uniform(-5, 5), rng.uniform(0.01, 4), int(rng.integers(2, 3000))))
    for scores in cases:
        expected = float(np.exp(threshold_otsu(np.log(scores))))
        assert otsu_threshold(scores) == expected
    assert otsu_threshold(np.full(5, 3.0)) == float("-inf")
    assert otsu_threshold(np.zeros(4)) == float("-inf")
    mixed = np.array([0.0, -2.0, 1.0, 2.0, 5.0, 40.0])  # non-positive scores are left out
    assert otsu_threshold(mixed) == float(np.exp(threshold_otsu(np.log(mixed[mixed > 0]))))
    assert otsu_threshold(np.array([0.0, 3.0, 3.0])) == float("-inf")


def test_histogram_of_the_otsu_threshold_equals_numpy():
    from ivote.detect._thresholds import _histogram_256

    rng = np.random.default_rng(13)
    for low, high in ((0.0, 1.0), (-3.7, 12.9), (1e-3, 1e-3 + 1e-9), (-1e6, 1e6)):
        edges = np.linspace(low, high, 257)
        values = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf),
                                 rng.uniform(low, high, 500)])
        values = values[(values >= low) & (values <= high)]
        counts, got_edges = _histogram_256(values)
        expected, expected_edges = np.histogram(values, bins=256)
        np.testing.assert_array_equal(counts, expected)
        np.testing.assert_array_equal(got_edges, expected_edges)
    for _ in range(500):  # the edges are np.linspace's, bit for bit, over many ranges
        low = rng.normal(0, 10) * 10.0 ** rng.integers(-3, 4)
        high = low + abs(rng.normal(0, 10)) * 10.0 ** rng.integers(-6, 4) + 1e-300
        values = np.array([low, high, (low + high) / 2])
        np.testing.assert_array_equal(_histogram_256(values)[1], np.linspace(low, high, 257))
        np.testing.assert_array_equal(_histogram_256(values, low, high)[1], np.linspace(low, high, 257))
