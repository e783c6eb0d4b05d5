"""ConvRBM on CuPy equals the NumPy reference (same parameters, same noise)."""

from __future__ import annotations

import numpy as np
import pytest

from ivote import _backend
from ivote.data import synthetic_nuclei
from ivote.features import ConvRBM

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _backend.cupy_available(), reason="needs CuPy and a CUDA GPU"),
]

CASES = [
    *[((45, 38), (7, 6), s) for s in (1, 2, 4)],
    *[((18, 21, 20), (5, 5, 4), s) for s in (1, 2, 4)],
]


def _relative_error(actual, expected):
    actual = np.asarray(_backend.to_host(actual), np.float64)
    expected = np.asarray(_backend.to_host(expected), np.float64)
    return float(np.abs(actual - expected).max() / max(np.abs(expected).max(), 1e-30))


def _pair(filter_shape, stride, extent="valid"):
    cp = _backend.default_xp()
    rng = np.random.default_rng(11)
    models = []
    for xp in (np, cp):
        model = ConvRBM(6, filter_shape, stride=stride, xp=xp, hidden_extent=extent)
        model._initialise(len(filter_shape))
        rng = np.random.default_rng(11)
        model.filters_ = xp.asarray(rng.normal(0, 0.3, model.filters_.shape), dtype=np.float32)
        model.hidden_bias_ = xp.asarray(rng.normal(0, 0.5, 6), dtype=np.float32)
        model.visible_bias_ = -0.1
        models.append(model)
    return models


@pytest.mark.parametrize("extent", ["valid", "same"])
@pytest.mark.parametrize(("shape", "kshape", "stride"), CASES)
def test_passes_match_numpy(shape, kshape, stride, extent):
    cpu, gpu = _pair(kshape, stride, extent)
    cp = gpu.xp
    image = np.random.default_rng(0).normal(3, 2, shape).astype(np.float32)
    assert _relative_error(gpu.hidden_grid(cp.asarray(image)), cpu.hidden_grid(image)) < 1e-4
    assert _relative_error(gpu.transform(image), cpu.transform(image)) < 1e-4
    assert _relative_error(gpu.reconstruct(image), cpu.reconstruct(image)) < 1e-4

    geometry = cpu._geometry(shape)
    noise = np.random.default_rng(1).standard_normal((6,) + geometry.fft_shape).astype(np.float32)
    v0 = ((image - image.mean()) / image.std()).astype(np.float32)
    results = []
    for model, xp in ((cpu, np), (gpu, cp)):
        spec = model._filter_spectra(geometry)
        grad = xp.zeros_like(spec)
        out = model._cd1(model._visible_blocks(xp.asarray(v0), geometry), geometry, spec, grad, xp.asarray(noise))
        results.append((*out, model._filter_gradient(grad, geometry)))
    for a, b in zip(results[1], results[0]):
        assert _relative_error(a, b) < 1e-4


def test_fit_on_gpu_lowers_error_and_round_trips(tmp_path):
    cp = _backend.default_xp()
    image = synthetic_nuclei((24, 64, 64), radius=5, seed=3).image
    model = ConvRBM(8, 5, stride=2, xp=cp).fit(image, epochs=15, learning_rate=1e-2, patch_shape=(16, 32, 32))
    errors = model.reconstruction_errors_
    assert np.mean(errors[-3:]) < 0.7 * errors[0]
    loaded = ConvRBM.load(model.save(tmp_path / "m.npz"), xp=cp)
    assert bool((loaded.filters_ == model.filters_).all())
    detection = model.detection_input(image)
    assert detection.shape == image.shape
    assert _backend.is_device_array(detection)


def test_hashed_noise_is_standard_normal():
    from ivote.features._spectral import noisy_relu

    cp = _backend.default_xp()
    zeros = cp.zeros((4, 64, 64, 64), dtype=np.float32)
    bias = cp.zeros(4, dtype=np.float32)
    sample = noisy_relu(zeros, bias, (60, 64, 50), 1234, cp)
    inside = _backend.to_host(sample[:, :60, :, :50])
    # mu = 0: h = max(0, sqrt(1/2) z), so half are zero and the mean is sqrt(1/2) / sqrt(2 pi)
    assert abs((inside == 0).mean() - 0.5) < 0.005
    assert abs(inside.mean() - np.sqrt(0.5) / np.sqrt(2 * np.pi)) < 0.005
    assert float(abs(sample[:, 60:]).max()) == 0 and float(abs(sample[..., 50:]).max()) == 0
    other = _backend.to_host(noisy_relu(zeros, bias, (60, 64, 50), 1235, cp)[:, :60, :, :50])
    assert abs(np.corrcoef(inside.ravel(), other.ravel())[0, 1]) < 0.01


def test_fft_shape_is_timed_among_candidates():
    from ivote.features._space_to_depth import fft_size_candidates
    from ivote.features._spectral import fastest_fft_shape

    cp = _backend.default_xp()
    shape = fastest_fft_shape((132, 66, 132), 8, np.float32, cp)
    assert shape[0] in fft_size_candidates(132) and shape[1] in fft_size_candidates(66)
    assert shape[2] in fft_size_candidates(132)
    assert fastest_fft_shape((132, 66, 132), 8, np.float32, cp) == shape  # memoized


def test_fft_shape_is_not_memoized_when_every_trial_fails(monkeypatch):
    """A GPU full at the first call gets the smallest shape, and the timing is
    tried again at the next call instead of remembering that fallback."""
    from ivote.features import _spectral
    from ivote.features._space_to_depth import fft_size

    cp = _backend.default_xp()

    def out_of_memory(*args, **kwargs):
        raise cp.cuda.memory.OutOfMemoryError(1 << 40, 0)

    minimum = (132, 66, 132)
    monkeypatch.setattr(_spectral, "rfftn", out_of_memory)
    assert _spectral.fastest_fft_shape(minimum, 3, np.float32, cp) == tuple(fft_size(n) for n in minimum)
    key = (minimum, 3, "float32", cp.cuda.Device().id)
    assert key not in _spectral._tuned
    monkeypatch.undo()
    _spectral.fastest_fft_shape(minimum, 3, np.float32, cp)
    assert key in _spectral._tuned


def test_noisy_relu_vector_and_scalar_paths_agree():
    from ivote.features._spectral import noisy_relu

    cp = _backend.default_xp()
    shape = (3, 10, 12, 16)
    mu = cp.asarray(np.random.default_rng(2).normal(0, 2, shape), dtype=np.float32)
    bias = cp.asarray([0.5, -0.3, 0.1], dtype=np.float32)
    # a view 4 bytes into a buffer is not 16-byte aligned: the kernel falls back to one element per thread
    buffer = cp.empty(mu.size + 1, dtype=np.float32)
    unaligned = buffer[1:].reshape(shape)
    unaligned[...] = mu
    assert unaligned.data.ptr % 16 != 0 and mu.data.ptr % 16 == 0
    box = (9, 11, 14)
    for noise in (None, 99, cp.asarray(np.random.default_rng(3).standard_normal(shape), dtype=np.float32)):
        vector = _backend.to_host(noisy_relu(mu, bias, box, noise, cp))
        scalar = _backend.to_host(noisy_relu(unaligned, bias, box, noise, cp))
        assert np.allclose(vector, scalar, rtol=1e-6, atol=1e-6)
        if noise is None or not isinstance(noise, int):
            expected = noisy_relu(_backend.to_host(mu), _backend.to_host(bias), box,
                                  None if noise is None else _backend.to_host(noise), np)
            assert _relative_error(vector, expected) < 1e-5


def test_pruned_dfts_match_cufft():
    from ivote.features._spectral import cropped_irfftn, irfftn, rfftn, taps_rfftn

    cp = _backend.default_xp()
    shape = (40, 36, 30)
    positions = [(np.arange(9) - 4) % p for p in shape]
    taps = cp.asarray(np.random.default_rng(5).normal(size=(4, 1, 9, 9, 9)), dtype=np.float32)
    padded = cp.zeros((4, 1) + shape, dtype=np.float32)
    index = cp.ix_(*[cp.asarray(p) for p in positions])
    padded[(slice(None), slice(None)) + index] = taps
    spectrum = taps_rfftn(taps, positions, shape, cp)
    expected = rfftn(padded, shape, cp)
    assert float(abs(spectrum - expected).max() / abs(expected).max()) < 1e-5
    volume = cp.asarray(np.random.default_rng(6).normal(size=(4, 1) + shape), dtype=np.float32)
    cropped = cropped_irfftn(rfftn(volume, shape, cp), positions, shape, cp)
    assert _relative_error(cropped, volume[(slice(None), slice(None)) + index]) < 1e-5
    assert _relative_error(irfftn(rfftn(volume, shape, cp), shape, cp, normalise=False) / np.prod(shape), volume) < 1e-5


@pytest.mark.parametrize("shape", [(64, 72), (16, 40, 36)])
def test_detection_inputs_match_numpy(shape):
    """The reconstruction input (cupyx.scipy.ndimage's blur), the nucleus map, the principal component: CuPy = NumPy."""
    image = synthetic_nuclei(shape, radius=5, seed=9).image
    host, device = _pair((5,) * len(shape), 1)
    for source in ("reconstruction", "nucleus_map", "principal_component"):
        expected = host.detection_input(image, source=source)
        got = device.detection_input(_backend.to_device(image, device.xp), source=source)
        assert _backend.is_device_array(got) and got.shape == image.shape
        assert _relative_error(got, expected) < 1e-4


def test_nucleus_features_on_gpu_detect_like_numpy():
    from ivote.detect import iterative_voting
    from ivote.features import NucleusFeatures
    from ivote.metrics import match_points

    sample = synthetic_nuclei((96, 96), radius=6, seed=4)
    cp = _backend.default_xp()
    learned = NucleusFeatures(9)
    found = iterative_voting(cp.asarray(sample.image), radius=9, features=learned)
    assert learned.model.xp is cp and learned.model.n_filters == 8
    blurred = iterative_voting(sample.image, radius=9, backend="numpy")
    f1 = match_points(_backend.to_host(found.points), sample.centers, tolerance=3).f1
    assert f1 >= 0.7 and f1 >= match_points(blurred.points, sample.centers, tolerance=3).f1 - 0.05
