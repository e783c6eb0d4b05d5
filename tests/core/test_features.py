"""ConvRBM: frequency-domain passes equal direct spatial convolution; training, save/load."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.signal

from ivote.data import synthetic_nuclei
from ivote.features import ConvRBM, depth_to_space, fft_size, space_to_depth

CASES = [
    # (image shape, filter shape, stride)
    *[((21, 26), (5, 4), s) for s in (1, 2, 4)],
    *[((9, 11, 10), (3, 5, 4), s) for s in (1, 2, 4)],
]


def _relative_error(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(actual - expected).max() / max(np.abs(expected).max(), 1e-30))


def _model(filter_shape, stride, seed=3, dtype=np.float32, extent="valid"):
    model = ConvRBM(4, filter_shape, stride=stride, seed=seed, xp=np, dtype=dtype, hidden_extent=extent)
    model._initialise(len(filter_shape))
    rng = np.random.default_rng(seed)
    model.filters_ = rng.normal(0, 0.3, model.filters_.shape).astype(dtype)
    model.hidden_bias_ = rng.normal(0, 0.5, model.n_filters).astype(dtype)
    model.visible_bias_ = 0.25
    return model


def _standardised(image):
    image = np.asarray(image, np.float64)
    return (image - image.mean()) / image.std()


def _geometry(shape, filter_shape, stride, extent="same"):
    """Hidden extent (units per axis) and pixel offset of tap 0 from s n: 'same' centres the filter, 'valid' starts it."""
    blocks = tuple(-(-n // stride) for n in shape)
    filter_blocks = tuple(-(-k // stride) for k in filter_shape)
    if extent == "valid":
        return tuple(b - k + 1 for b, k in zip(blocks, filter_blocks)), (0,) * len(shape)
    return blocks, tuple(stride * ((k - 1) // 2) for k in filter_blocks)


# ---- direct spatial reference (explicit loops over filter taps) ----------------------------


def direct_pre_activation(v, filters, bias, stride, extent="same"):
    """mu[k, n] = sum_m w[k, m] v[s n - o + m] + c_k, zero outside the image."""
    n_filters, *kshape = filters.shape
    blocks, offsets = _geometry(v.shape, kshape, stride, extent)
    padded = np.pad(v, [(o, stride * b + k) for o, b, k in zip(offsets, blocks, kshape)])
    out = np.zeros((n_filters,) + blocks)
    for tap in itertools.product(*map(range, kshape)):
        window = padded[tuple(slice(m, m + stride * b, stride) for m, b in zip(tap, blocks))]
        out += filters[(slice(None),) + tap].reshape((-1,) + (1,) * v.ndim) * window
    return out + bias.reshape((-1,) + (1,) * v.ndim)


def direct_visible(hidden, filters, bias, stride, shape, extent="same"):
    """v[x] = sum_k sum_n h[k, n] w[k, x - s n + o] + b, for x inside the image."""
    n_filters, *kshape = filters.shape
    blocks, offsets = _geometry(shape, kshape, stride, extent)
    padded = np.zeros(tuple(o + stride * b + k for o, b, k in zip(offsets, blocks, kshape)))
    for tap in itertools.product(*map(range, kshape)):
        contribution = np.tensordot(filters[(slice(None),) + tap], hidden, axes=(0, 0))
        padded[tuple(slice(m, m + stride * b, stride) for m, b in zip(tap, blocks))] += contribution
    return padded[tuple(slice(o, o + n) for o, n in zip(offsets, shape))] + bias


def direct_weight_statistics(v, hidden, kshape, stride, extent="same"):
    """g[k, m] = sum_n h[k, n] v[s n - o + m]."""
    blocks, offsets = _geometry(v.shape, kshape, stride, extent)
    padded = np.pad(v, [(o, stride * b + k) for o, b, k in zip(offsets, blocks, kshape)])
    out = np.zeros((hidden.shape[0],) + tuple(kshape))
    for tap in itertools.product(*map(range, kshape)):
        window = padded[tuple(slice(m, m + stride * b, stride) for m, b in zip(tap, blocks))]
        out[(slice(None),) + tap] = np.tensordot(hidden, window, axes=(tuple(range(1, v.ndim + 1)), tuple(range(v.ndim))))
    return out


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---- tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "kshape", "stride"), CASES)
def test_hidden_and_reconstruction_equal_direct_convolution(shape, kshape, stride):
    rng = np.random.default_rng(0)
    image = rng.normal(2.0, 3.0, shape)
    model = _model(kshape, stride)
    v = _standardised(image)
    mu = direct_pre_activation(v, model.filters_.astype(np.float64), model.hidden_bias_.astype(np.float64), stride)
    expected_hidden = np.maximum(mu, 0)
    assert _relative_error(model.hidden_grid(image), expected_hidden) < 1e-4
    expected_visible = direct_visible(expected_hidden, model.filters_.astype(np.float64), model.visible_bias_, stride,
                                      shape)
    recon = (model.reconstruct(image) - image.mean()) / image.std()
    assert recon.shape == shape
    assert _relative_error(recon, expected_visible) < 1e-4
    features = model.transform(image)
    assert features.shape == (4,) + shape
    if stride == 1:
        assert _relative_error(features, expected_hidden) < 1e-4


@pytest.mark.parametrize("extent", ["valid", "same"])
@pytest.mark.parametrize(("shape", "kshape", "stride"), CASES)
def test_cd1_statistics_equal_direct_convolution(shape, kshape, stride, extent):
    rng = np.random.default_rng(1)
    image = rng.normal(0.0, 1.0, shape)
    model = _model(kshape, stride, extent=extent)
    v0 = _standardised(image).astype(np.float32)
    geometry = model._geometry(shape)
    filter_spec = model._filter_spectra(geometry)
    gradient_spec = np.zeros_like(filter_spec)
    noise = rng.standard_normal((model.n_filters,) + geometry.fft_shape).astype(np.float32)
    h0, v1, h1, visible_stat, hidden_stat, error = model._cd1(
        model._visible_blocks(v0, geometry), geometry, filter_spec, gradient_spec, noise
    )
    assert geometry.hidden == _geometry(shape, kshape, stride, extent)[0]
    if extent == "valid":  # the thesis' transform size: the visible extent itself, no padding
        assert all(p == fft_size(b) for p, b in zip(geometry.fft_shape, geometry.blocks))
    inside = (slice(None),) + tuple(slice(0, b) for b in geometry.hidden)
    weight_stat = model._filter_gradient(gradient_spec, geometry)

    w = model.filters_.astype(np.float64)
    c = model.hidden_bias_.astype(np.float64)
    v0 = v0.astype(np.float64)
    mu0 = direct_pre_activation(v0, w, c, stride, extent)
    e_h0 = np.maximum(mu0 + np.sqrt(_sigmoid(mu0)) * noise[inside], 0)
    e_v1 = direct_visible(e_h0, w, model.visible_bias_, stride, shape, extent)
    e_h1 = np.maximum(direct_pre_activation(e_v1, w, c, stride, extent), 0)
    e_weight = (direct_weight_statistics(v0, e_h0, kshape, stride, extent)
                - direct_weight_statistics(e_v1, e_h1, kshape, stride, extent))
    # outside the hidden extent the spatial maps are zero (no unit there)
    outside = np.ones(h0.shape, bool)
    outside[inside] = False
    assert not h0[outside].any() and not h1[outside].any()

    assert _relative_error(h0[inside], e_h0) < 1e-4
    visible = (slice(None),) + tuple(slice(0, b) for b in geometry.blocks)
    assert _relative_error(model._pixels(v1[visible], geometry), e_v1) < 1e-4
    assert _relative_error(h1[inside], e_h1) < 1e-4
    assert _relative_error(weight_stat, e_weight) < 1e-4
    assert _relative_error(hidden_stat, (e_h0 - e_h1).sum(axis=tuple(range(1, len(shape) + 1)))) < 1e-4
    assert abs(float(visible_stat) - (v0 - e_v1).sum()) < 1e-4 * np.abs(v0).sum()
    assert abs(float(error) - ((v0 - e_v1) ** 2).sum()) < 1e-4 * ((v0 - e_v1) ** 2).sum()


def test_stride_one_matches_scipy_correlate():
    rng = np.random.default_rng(2)
    image = rng.normal(size=(17, 23))
    model = _model((5, 5), 1)
    v = _standardised(image)
    expected = np.stack([
        scipy.signal.correlate(v, w.astype(np.float64), mode="same") + c
        for w, c in zip(model.filters_, model.hidden_bias_)
    ])
    assert _relative_error(model.hidden_grid(image), np.maximum(expected, 0)) < 1e-4
    expected_v = sum(scipy.signal.convolve(h, w.astype(np.float64), mode="same")
                     for h, w in zip(np.maximum(expected, 0), model.filters_)) + model.visible_bias_
    assert _relative_error((model.reconstruct(image) - image.mean()) / image.std(), expected_v) < 1e-4


@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize("stride", [2, 4])
def test_space_to_depth_strided_correlation_equals_direct(ndim, stride):
    rng = np.random.default_rng(4)
    shape = (8, 12, 16)[-ndim:]
    image = rng.normal(size=shape)
    kernel = rng.normal(size=(stride * 2,) * ndim)
    # direct: valid correlation evaluated every `stride` pixels
    direct = scipy.signal.correlate(image, kernel, mode="valid")[(slice(None, None, stride),) * ndim]
    # rearranged: stride-1 valid correlation summed over the s**ndim channels
    image_blocks = space_to_depth(image, stride, ndim)
    kernel_blocks = space_to_depth(kernel, stride, ndim)
    rearranged = sum(scipy.signal.correlate(a, b, mode="valid") for a, b in zip(image_blocks, kernel_blocks))
    assert _relative_error(rearranged, direct) < 1e-12
    assert np.array_equal(depth_to_space(image_blocks, stride, ndim), image)


@pytest.mark.parametrize("shape", [(12, 10), (9, 11, 15), (8, 6, 7)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pruned_dfts_equal_fft_of_padded_taps(shape, dtype):
    from ivote.features._spectral import cropped_irfftn, taps_rfftn

    rng = np.random.default_rng(4)
    ndim = len(shape)
    kshape = (3, 4, 2)[:ndim]
    positions = [(np.arange(k) - 1) % p for k, p in zip(kshape, shape)]  # wraps around the origin
    taps = rng.normal(size=(2, 3) + kshape).astype(dtype)
    padded = np.zeros((2, 3) + shape)
    padded[(slice(None), slice(None)) + np.ix_(*positions)] = taps
    axes = tuple(range(-ndim, 0))
    expected = np.fft.rfftn(padded, axes=axes)
    spectrum = taps_rfftn(taps, positions, shape, np)
    assert spectrum.dtype == (np.complex64 if dtype == np.float32 else np.complex128)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    assert np.abs(spectrum - expected).max() / np.abs(expected).max() < tolerance  # complex: not _relative_error
    # inverse at the taps: a spectrum of a real volume (Hermitian), e.g. a product of two
    volume = rng.normal(size=(2, 3) + shape)
    full = np.fft.rfftn(volume, axes=axes).astype(spectrum.dtype)
    cropped = cropped_irfftn(full, positions, shape, np)
    assert _relative_error(cropped, volume[(slice(None), slice(None)) + np.ix_(*positions)]) < tolerance


def test_fft_size_is_5_smooth_and_minimal():
    def smooth(n):
        for p in (2, 3, 5):
            while n % p == 0:
                n //= p
        return n == 1

    for n in range(1, 400):
        m = fft_size(n)
        assert m >= n and smooth(m)
        assert all(not smooth(k) for k in range(n, m))


@pytest.mark.parametrize("extent", ["valid", "same"])
def test_reconstruction_error_falls_on_synthetic_nuclei(extent):
    image = synthetic_nuclei((64, 64), radius=6, seed=5).image
    model = ConvRBM(8, 7, stride=1, xp=np, seed=0, hidden_extent=extent)
    model.fit(image, epochs=20, batch_size=4, learning_rate=1e-2, momentum=0.5, patch_shape=(32, 32))
    errors = model.reconstruction_errors_
    assert len(errors) == 20
    assert np.mean(errors[-3:]) < 0.5 * errors[0]


def test_fit_3d_strided_and_progress_cancel():
    image = synthetic_nuclei((16, 24, 24), radius=4, seed=6).image
    seen = []

    def progress(epoch, n_epochs, error):
        seen.append((epoch, n_epochs, error))
        if epoch == 2:
            raise KeyboardInterrupt

    model = ConvRBM(3, 3, stride=2, xp=np)
    with pytest.raises(KeyboardInterrupt):
        model.fit(image, epochs=5, progress=progress)
    assert [s[:2] for s in seen] == [(1, 5), (2, 5)]
    assert model.transform(image).shape == (3, 16, 24, 24)


def test_save_load_round_trip_is_exact(tmp_path):
    image = synthetic_nuclei((40, 40), radius=5, seed=7).image
    model = ConvRBM(5, (5, 3), stride=2, xp=np, seed=4, hidden_extent="same").fit(image, epochs=3)
    path = model.save(tmp_path / "model.npz")
    loaded = ConvRBM.load(path, xp=np)
    assert np.array_equal(loaded.filters_, model.filters_)
    assert loaded.filters_.dtype == model.filters_.dtype
    assert np.array_equal(loaded.hidden_bias_, model.hidden_bias_)
    assert loaded.visible_bias_ == model.visible_bias_
    assert loaded.stride == 2 and loaded.filter_shape == (5, 3) and loaded.hidden_extent == "same"
    assert loaded.reconstruction_errors_ == model.reconstruction_errors_
    assert np.array_equal(loaded.transform(image), model.transform(image))
    with np.load(path, allow_pickle=False) as data:
        assert all(data[key].dtype != object for key in data.files)


def test_detection_input_keeps_nuclei_bright():
    sample = synthetic_nuclei((64, 64), radius=6, seed=8)
    model = ConvRBM(8, 7, xp=np).fit(sample.image, epochs=10, learning_rate=1e-2, patch_shape=(32, 32))
    detection = model.detection_input(sample.image)
    assert detection.shape == sample.image.shape
    inside = sample.labels > 0
    assert detection[inside].mean() > detection[~inside].mean() + 0.5
    assert np.corrcoef(detection.ravel(), sample.image.ravel())[0, 1] > 0.5


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="stride"):
        ConvRBM(4, 5, stride=3)
    with pytest.raises(ValueError, match="n_filters"):
        ConvRBM(0, 5)
    model = ConvRBM(2, (3, 3), xp=np)
    with pytest.raises(ValueError, match="2D"):
        model.fit(np.zeros((4, 5, 6)))
    with pytest.raises(RuntimeError, match="fit"):
        model.transform(np.zeros((8, 8)))
    with pytest.raises(ValueError, match="learning_rate"):
        model.fit(np.ones((8, 8)), learning_rate=-1)
    with pytest.raises(ValueError, match="hidden_extent"):
        ConvRBM(4, 5, hidden_extent="full")
    with pytest.raises(ValueError, match="hidden_extent='valid'.*at least as large as the filters"):
        ConvRBM(2, 9, xp=np).fit(np.random.default_rng(0).normal(size=(6, 20)))
    with pytest.raises(ValueError, match="hidden_extent='valid'"):
        ConvRBM(2, 9, xp=np).fit(np.random.default_rng(0).normal(size=(32, 32)), patch_shape=(8, 8))


@pytest.mark.parametrize(("extent", "side"), [("valid", 128), ("same", 135)])
def test_memory_estimate_counts_spectra(extent, side):
    # 'valid' transforms at the image's own size (the thesis' eq. 1.14), 'same' pads by half a filter
    model = ConvRBM(32, 9, xp=np, hidden_extent=extent)
    estimate = model.memory_estimate((128, 128, 128))
    assert estimate["fft_shape"] == (side,) * 3
    freq = side * side * (side // 2 + 1)
    assert estimate["spectra"] == 8 * freq * (2 + 2 * 32 + 2 * 32)
    assert estimate["spatial"] == 4 * side**3 * (2 + 3 * 32)
