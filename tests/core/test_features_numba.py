"""The ConvRBM's spectral products in Numba (features/_numba.py) against the NumPy reference
(features/_reference.py), on the spectra of real geometries: 2D and 3D, strides 1 and 2."""

import numpy as np
import pytest

pytest.importorskip("numba")

from ivote.data import synthetic_nuclei
from ivote.features import ConvRBM
from ivote.features import _numba, _reference
from ivote.features._space_to_depth import space_to_depth
from ivote.features._spectral import rfftn

GEOMETRIES = [  # (image shape, filters, stride): channels = stride ** ndim after space-to-depth
    ((40, 36), 5, 1),
    ((40, 36), 6, 2),
    ((12, 16, 14), 3, 1),
    ((12, 16, 14), 4, 2),
]


def _spectra(shape, n_filters, stride, dtype, seed=0):
    """Filter, visible and hidden spectra of the shapes ConvRBM uses, from random maps."""
    rng = np.random.default_rng(seed)
    ndim = len(shape)
    blocks = space_to_depth(rng.normal(size=shape).astype(dtype), stride, ndim)  # (C, *shape / stride)
    fft_shape = blocks.shape[1:]
    visible = rfftn(blocks, fft_shape, np)
    filters = rfftn(rng.normal(size=(n_filters,) + blocks.shape).astype(dtype), fft_shape, np)
    hidden = rfftn(rng.normal(size=(n_filters,) + fft_shape).astype(dtype), fft_shape, np)
    return filters, visible, hidden


def _tolerance(dtype):
    return dict(rtol=2e-5, atol=2e-4) if np.dtype(dtype) == np.float32 else dict(rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, n_filters, stride", GEOMETRIES)
def test_products_equal_reference(shape, n_filters, stride, dtype):
    filters, visible, hidden = _spectra(shape, n_filters, stride, dtype)
    assert filters.shape[1] == stride ** len(shape)
    tol = _tolerance(dtype)
    for scale in (1.0, 1.0 / 97):
        got = _numba.hidden_spectrum(filters, visible, scale=scale)
        assert got.dtype == visible.dtype and got.shape == hidden.shape
        np.testing.assert_allclose(got, _reference.hidden_spectrum(filters, visible, scale=scale), **tol)
        got = _numba.visible_spectrum(filters, hidden, scale=scale)
        assert got.shape == visible.shape
        np.testing.assert_allclose(got, _reference.visible_spectrum(filters, hidden, scale=scale), **tol)
    _, v1, h1 = _spectra(shape, n_filters, stride, dtype, seed=1)
    start = np.asarray(filters) * 0.5
    expected = _reference.accumulate_gradient(start.copy(), hidden, visible, h1, v1)
    got = start.copy()
    assert _numba.accumulate_gradient(got, hidden, visible, h1, v1) is got
    np.testing.assert_allclose(got, expected, **tol)


def test_accumulate_into_a_non_contiguous_gradient():
    filters, visible, hidden = _spectra((24, 20), 3, 2, np.float64)
    wide = np.zeros(filters.shape[:-1] + (2 * filters.shape[-1],), dtype=filters.dtype)
    view = wide[..., ::2]
    _numba.accumulate_gradient(view, hidden, visible, hidden, 2 * visible)
    expected = _reference.accumulate_gradient(np.zeros_like(filters), hidden, visible, hidden, 2 * visible)
    np.testing.assert_allclose(wide[..., ::2], expected, rtol=1e-12, atol=1e-12)
    assert not wide[..., 1::2].any()


@pytest.mark.parametrize("stride", [1, 2])
def test_training_with_numba_equals_reference(monkeypatch, stride):
    image = synthetic_nuclei((48, 48), radius=5, seed=2).image
    models = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setenv("IVOTE_BACKEND", backend)
        models[backend] = ConvRBM(4, 5, stride=stride, xp=np, seed=1).fit(image, epochs=2, patch_shape=(24, 24))
    np.testing.assert_allclose(models["numba"].filters_, models["numpy"].filters_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(models["numba"].reconstruction_errors_, models["numpy"].reconstruction_errors_,
                               rtol=1e-4)


def test_threaded_and_single_thread_loops_agree(monkeypatch):
    """Small products run the loops on one thread, large ones over the cores: both equal the reference."""
    filters, visible, hidden = _spectra((40, 36), 5, 2, np.float64)
    expected = _reference.hidden_spectrum(filters, visible, scale=0.5)
    expected_grad = _reference.accumulate_gradient(np.zeros_like(filters), hidden, visible, hidden, 2 * visible)
    for threshold in (0, 1 << 40):  # every product threaded / none
        monkeypatch.setattr(_numba, "_PARALLEL_MIN_WORK", threshold)
        np.testing.assert_allclose(_numba.hidden_spectrum(filters, visible, scale=0.5), expected, rtol=1e-12, atol=1e-12)
        grad = _numba.accumulate_gradient(np.zeros_like(filters), hidden, visible, hidden, 2 * visible)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, atol=1e-12)
    assert _numba._contract_kernels[0] is not _numba._contract_kernels[1]
    assert not _numba._contract_kernels[1].targetoptions.get("parallel", False)
