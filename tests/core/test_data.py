import numpy as np
import pytest
from scipy import ndimage as ndi

from ivote.data import sample_2d, sample_3d, synthetic_nuclei


@pytest.mark.parametrize(
    "shape, spacing, radius",
    [((160, 192), None, 9.0), ((24, 80, 96), (2.0, 0.5, 0.5), 5.0), ((40, 40, 40), None, 6.0)],
)
def test_labels_and_centres_agree(shape, spacing, radius):
    s = synthetic_nuclei(shape, spacing=spacing, radius=radius, seed=3)
    assert s.image.shape == shape and s.image.dtype == np.float32
    assert s.labels.shape == shape
    n = len(s.centers)
    assert n > 5
    # counts equal: labels are exactly 1..N
    np.testing.assert_array_equal(np.unique(s.labels), np.arange(n + 1))
    # every centre lies inside its own label
    idx = tuple(np.round(s.centers).astype(int).T)
    np.testing.assert_array_equal(s.labels[idx], np.arange(1, n + 1))
    # the centre is near the label's centroid (in physical units, within 0.35 r)
    cent = np.array(ndi.center_of_mass(np.ones(shape), s.labels, np.arange(1, n + 1)))
    scale = np.asarray(s.spacing)
    err = np.linalg.norm((cent - s.centers) * scale, axis=1)
    assert np.median(err) < 0.35 * radius
    # no nucleus is larger than the radius allows
    volume = np.bincount(s.labels.ravel())[1:] * np.prod(scale)
    max_volume = np.pi * radius**2 if len(shape) == 2 else 4 / 3 * np.pi * radius**3
    assert volume.max() <= max_volume * 1.05


def test_deterministic_and_seed_dependent():
    a = synthetic_nuclei((96, 96), radius=7, seed=11)
    b = synthetic_nuclei((96, 96), radius=7, seed=11)
    c = synthetic_nuclei((96, 96), radius=7, seed=12)
    np.testing.assert_array_equal(a.image, b.image)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.labels, c.labels)


def test_polarity_and_contrast():
    bright = synthetic_nuclei((128, 128), radius=8, seed=5, noise=0.0)
    dark = synthetic_nuclei((128, 128), radius=8, seed=5, noise=0.0, polarity="dark")
    np.testing.assert_allclose(dark.image, 1 - bright.image, atol=1e-6)
    inside = bright.image[bright.labels > 0].mean()
    outside = bright.image[ndi.binary_dilation(bright.labels > 0, iterations=3) == 0].mean()
    assert inside > outside + 0.4


def test_overlap_makes_touching_nuclei():
    touching = synthetic_nuclei((256, 256), radius=10, overlap=0.9, seed=1, noise=0)
    apart = synthetic_nuclei((256, 256), radius=10, overlap=0.0, seed=1, noise=0)

    def n_touching(labels):
        grown = ndi.grey_dilation(labels, size=3)
        return int(((grown != labels) & (labels > 0) & (grown > 0)).sum())

    # apart: only elongated neighbours may graze each other
    assert n_touching(touching.labels) > 10 * max(n_touching(apart.labels), 5)


def test_samples():
    s2, s3 = sample_2d(), sample_3d()
    assert s2.image.ndim == 2 and s3.image.ndim == 3
    assert s3.spacing[0] > s3.spacing[1]  # anisotropic
    assert len(s2.centers) > 100 and len(s3.centers) > 100


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"shape": (10, 10, 10, 10)}, "shape must be 2D or 3D"),
        ({"shape": (64, 64), "radius": 0}, "radius"),
        ({"shape": (64, 64), "spacing": (1, 1, 1)}, "spacing must have one value per spatial axis"),
        ({"shape": (64, 64), "overlap": 2}, "overlap"),
        ({"shape": (64, 64), "polarity": "grey"}, "polarity"),
        ({"shape": (8, 8), "radius": 10}, "too small"),
    ],
)
def test_bad_parameters(kwargs, match):
    shape = kwargs.pop("shape")
    with pytest.raises((ValueError, TypeError), match=match):
        synthetic_nuclei(shape, **kwargs)
