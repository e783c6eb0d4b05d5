"""Automatic radius and Macenko stains on the GPU: the NumPy estimate, on CuPy arrays."""

import numpy as np
import pytest

from ivote import _backend
from ivote.data import synthetic_nuclei
from ivote.detect import estimate_radius, hematoxylin_density, iterative_voting, stain_vectors, typical_radius

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _backend.cupy_available(), reason="needs a CUDA GPU with CuPy"),
]


@pytest.mark.parametrize("shape, spacing, radius, polarity", [
    ((256, 256), None, 8.0, "bright"),
    ((192, 160), (0.4, 0.4), 3.2, "dark"),
    ((32, 80, 80), (2.0, 0.5, 0.5), 5.0, "bright"),
])
def test_gpu_typical_radius_matches_numpy(shape, spacing, radius, polarity):
    import cupy

    sample = synthetic_nuclei(shape, spacing=spacing, radius=radius, polarity=polarity, seed=31)
    on_host = typical_radius(sample.image, spacing=spacing, polarity=polarity, backend="numpy")
    on_gpu = typical_radius(cupy.asarray(sample.image), spacing=spacing, polarity=polarity, backend="cupy")
    assert on_gpu == pytest.approx(on_host, rel=0.02)


@pytest.mark.parametrize("shape, spacing, radius", [
    ((256, 256), None, 8.0),
    ((40, 96, 96), (2.0, 0.5, 0.5), 5.0),
])
def test_gpu_voting_radius_matches_numpy(shape, spacing, radius):
    """The pyramid, the Hessian at each blob and the long-axis rule give the NumPy value on CuPy arrays."""
    import cupy

    sample = synthetic_nuclei(shape, spacing=spacing, radius=radius, seed=33)
    on_host = estimate_radius(sample.image, spacing=spacing, backend="numpy")
    on_gpu = estimate_radius(cupy.asarray(sample.image), spacing=spacing, backend="cupy")
    assert on_gpu == pytest.approx(on_host, rel=0.02)


def test_gpu_auto_radius_in_iterative_voting():
    import cupy

    sample = synthetic_nuclei((256, 256), spacing=(0.5, 0.5), radius=4.0, seed=32)
    found = iterative_voting(cupy.asarray(sample.image), radius="auto", spacing=(0.5, 0.5), backend="cupy")
    assert found.radius_estimated and found.backend == "cupy"
    assert found.radius == pytest.approx(estimate_radius(sample.image, spacing=(0.5, 0.5), backend="numpy"), rel=0.02)


def test_gpu_stains_match_numpy():
    import cupy

    stains = np.array([[0.45, 0.80, 0.40], [0.25, 0.90, 0.35]])
    stains /= np.linalg.norm(stains, axis=1, keepdims=True)
    amounts = np.random.default_rng(3).uniform(0.05, 1.5, (96, 96, 2))
    rgb = np.round(255 * np.exp(-amounts @ stains)).astype(np.uint8)
    np.testing.assert_allclose(stain_vectors(cupy.asarray(rgb)), stain_vectors(rgb), atol=1e-9)
    np.testing.assert_allclose(cupy.asnumpy(hematoxylin_density(cupy.asarray(rgb), stains="auto")),
                               hematoxylin_density(rgb, stains="auto"), atol=1e-9)


def test_gpu_scale_space_uses_few_filter_lengths(monkeypatch):
    """CuPy compiles one kernel per taps length and axis: the scale space pads its taps to a
    multiple of _GPU_TAPS_RADIUS, so a 3D estimate asks for a handful of lengths (it asked for
    dozens: 75 s of compilation on a fresh machine), and still gives the NumPy value."""
    import cupy
    import cupyx.scipy.ndimage as cundi

    from ivote.detect import _radius

    sample = synthetic_nuclei((40, 96, 96), spacing=(1.75, 0.8, 0.8), radius=6.0, seed=35)
    lengths = set()
    plain = cundi.correlate1d

    def recording(input, weights, axis=-1, *args, **kwargs):
        lengths.add((int(weights.size), axis % input.ndim))
        return plain(input, weights, axis, *args, **kwargs)

    monkeypatch.setattr(cundi, "correlate1d", recording)
    on_gpu = estimate_radius(cupy.asarray(sample.image), spacing=(1.75, 0.8, 0.8), backend="cupy")
    assert {n for n, _ in lengths} <= {2 * k * _radius._GPU_TAPS_RADIUS + 1 for k in (1, 2)}, lengths
    assert len(lengths) <= 6, lengths
    assert on_gpu == pytest.approx(estimate_radius(sample.image, spacing=(1.75, 0.8, 0.8), backend="numpy"), rel=0.02)
