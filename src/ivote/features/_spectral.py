"""Frequency-domain building blocks of the convolutional RBM, NumPy and CuPy.

The FFTs (``scipy.fft`` with ``workers``, or cuFFT) and the pruned DFTs of the
filter taps are here; the spectral products and the hidden units have one
module per backend with the same entry points (``hidden_spectrum``,
``visible_spectrum``, ``accumulate_gradient``, ``noisy_relu``):
:mod:`._reference` (NumPy, the readable oracle), :mod:`._numba` (Numba, the CPU
default) and :mod:`._cuda` (the kernels of ``kernels/convrbm.cu``); the
functions below pick one. Spectra are channels-first:
``(n_filters, n_channels, *freq)``, ``(n_channels, *freq)`` and
``(n_filters, *freq)``; FFTs run over the trailing spatial axes.
"""

from __future__ import annotations

import numpy as np

import itertools
import math
import threading

from .._backend import fft_module, on_free_gpu_memory, use_numba
from ._space_to_depth import fft_size, fft_size_candidates

__all__ = [
    "accumulate_gradient",
    "cropped_irfftn",
    "fastest_fft_shape",
    "hidden_spectrum",
    "irfftn",
    "noisy_relu",
    "rfftn",
    "taps_rfftn",
    "visible_spectrum",
]

def rfftn(x, shape, xp):
    """Real FFT over the last ``len(shape)`` axes, zero-padded to ``shape``."""
    axes = tuple(range(-len(shape), 0))
    fft = fft_module(xp)
    if xp is np:
        return fft.rfftn(x, s=shape, axes=axes, workers=-1)
    return fft.rfftn(x, s=shape, axes=axes)  # cuFFT plans come from CuPy's plan cache


def irfftn(x, shape, xp, *, overwrite=False, normalise=True):
    """Inverse of :func:`rfftn` for spatial ``shape``; ``overwrite`` lets it destroy ``x``.

    cuFFT's complex-to-real transforms overwrite their input, so CuPy copies it
    first unless told that ``x`` is a temporary (saves one pass over the spectra).
    ``normalise=False`` skips the ``1 / prod(shape)`` of the inverse transform
    (CuPy applies it as a separate pass over the output): callers fold it into
    the spectral products instead (the ``scale`` of :func:`hidden_spectrum`).
    """
    axes = tuple(range(-len(shape), 0))
    fft = fft_module(xp)
    norm = "backward" if normalise else "forward"  # "forward": the inverse is not scaled
    if xp is np:
        return fft.irfftn(x, s=shape, axes=axes, workers=-1, overwrite_x=overwrite, norm=norm)
    return fft.irfftn(x, s=shape, axes=axes, overwrite_x=overwrite, norm=norm)


_twiddle_cache: dict = {}


@on_free_gpu_memory(tables=True)
def _release_twiddles() -> None:
    """Drop the cached twiddle matrices (device copies among them)."""
    _twiddle_cache.clear()


def _twiddles(positions, length, n_freq, sign, dtype, xp, *, weights=None, transpose=False):
    """``weights[f] exp(sign 2 pi i f t / length)`` for ``t`` in ``positions`` (rows) and ``f < n_freq``
    (columns), or its transpose.

    The phase is reduced modulo ``length`` in integers first, so it is exact for
    any length; device copies are cached (they are tiny: taps x frequencies).
    """
    positions = tuple(int(t) for t in positions)
    weight_key = None if weights is None else tuple(float(w) for w in weights)
    device = None if xp is np else xp.cuda.Device().id
    key = (positions, int(length), int(n_freq), int(sign), weight_key, bool(transpose), np.dtype(dtype).name, device)
    matrix = _twiddle_cache.get(key)
    if matrix is None:
        phase = (np.outer(np.asarray(positions, np.int64), np.arange(n_freq)) % length) * (2 * np.pi / length)
        host = np.exp(sign * 1j * phase)
        if weights is not None:
            host = host * np.asarray(weights)
        if transpose:
            host = host.T
        matrix = xp.asarray(np.ascontiguousarray(host.astype(dtype)))
        _twiddle_cache[key] = matrix
    return matrix


def _complex_dtype(real):
    return np.complex64 if np.dtype(real) == np.float32 else np.complex128


def taps_rfftn(taps, positions, shape, xp):
    """:func:`rfftn` of small filters placed in zeros of ``shape``, as a pruned DFT.

    ``taps`` is ``(..., k_1, ..., k_d)``; tap ``m`` along axis ``a`` sits at
    ``positions[a][m]`` (modulo ``shape[a]``). Equals ``rfftn`` of the
    zero-padded array, but costs one small matrix product per axis instead of
    zero-filling and transforming the whole padded volume (taps << shape).
    The leading axes go first (small arrays); the last axis, which writes the
    whole spectrum, is a single matrix product ``(rows, k_d) @ (k_d, P_d/2+1)``.
    """
    d = len(shape)
    n_lead = taps.ndim - d
    complex_dtype = _complex_dtype(taps.dtype)
    x = taps.astype(complex_dtype)
    for a in range(d - 1):
        axis = n_lead + a
        before, k, after = x.shape[:axis], x.shape[axis], x.shape[axis + 1:]
        matrix = _twiddles(positions[a], shape[a], shape[a], -1, complex_dtype, xp, transpose=True)  # (P_a, k_a)
        x = xp.matmul(matrix, x.reshape(math.prod(before), k, math.prod(after)))
        x = x.reshape(before + (shape[a],) + after)
    n_last = shape[-1] // 2 + 1
    matrix = _twiddles(positions[-1], shape[-1], n_last, -1, complex_dtype, xp)  # (k_d, F)
    return (x.reshape(-1, x.shape[-1]) @ matrix).reshape(x.shape[:-1] + (n_last,))


def cropped_irfftn(spectrum, positions, shape, xp):
    """:func:`irfftn` of ``spectrum`` evaluated at the ``positions`` only (a pruned inverse DFT).

    ``spectrum`` is ``(..., *freq)`` for spatial ``shape``; returns
    ``(..., len(positions[0]), ..., len(positions[-1]))``, the same numbers as
    ``irfftn(spectrum, shape)[..., ix_(*positions)]`` (the imaginary parts of
    the self-conjugate frequencies of the last axis are ignored, as a
    complex-to-real FFT does). The last axis goes first, as one matrix product
    ``(rows, P_d/2+1) @ (P_d/2+1, k_d)`` that reads the spectrum once; the real
    part is taken at the end (every step is linear).
    """
    d = len(shape)
    n_lead = spectrum.ndim - d
    complex_dtype = spectrum.dtype
    n_last = shape[-1] // 2 + 1
    weights = np.full(n_last, 2.0)  # frequencies 1 .. ceil(P/2) - 1 stand for their conjugates too
    weights[0] = 1.0
    if shape[-1] % 2 == 0:
        weights[-1] = 1.0
    matrix = _twiddles(positions[-1], shape[-1], n_last, 1, complex_dtype, xp, weights=weights, transpose=True)
    x = (spectrum.reshape(-1, n_last) @ matrix).reshape(spectrum.shape[:-1] + (len(positions[-1]),))
    for a in reversed(range(d - 1)):
        axis = n_lead + a
        before, after = x.shape[:axis], x.shape[axis + 1:]
        matrix = _twiddles(positions[a], shape[a], shape[a], 1, complex_dtype, xp)  # (k_a, P_a)
        x = xp.matmul(matrix, x.reshape(math.prod(before), shape[a], math.prod(after)))
        x = x.reshape(before + (len(positions[a]),) + after)
    return x.real / math.prod(shape)


_tuned: dict = {}
_tuned_lock = threading.Lock()


def fastest_fft_shape(minimum_shape, batch: int, dtype, xp) -> tuple[int, ...]:
    """The FFT shape for transforms of ``batch`` real maps of at least ``minimum_shape``.

    NumPy: the smallest ``2**a 3**b 5**c`` length per axis. CuPy: the fastest
    combination of :func:`fft_size_candidates` per axis, timed once per GPU
    (one forward and one inverse batched transform each, after a warm-up; a
    few hundred milliseconds at first use, like ``cudnn.benchmark``) and
    memoized. cuFFT is often faster on a slightly larger length of radix 2 and
    3 than on the smallest one with a factor 5.
    """
    minimum_shape = tuple(int(n) for n in minimum_shape)
    smallest = tuple(fft_size(n) for n in minimum_shape)
    if xp is np:
        return smallest
    options = list(itertools.product(*(fft_size_candidates(n) for n in minimum_shape)))
    if len(options) == 1:
        return options[0]
    key = (minimum_shape, int(batch), np.dtype(dtype).name, xp.cuda.Device().id)
    with _tuned_lock:
        if key in _tuned:
            return _tuned[key]
        best, best_time = smallest, float("inf")
        start, stop = xp.cuda.Event(), xp.cuda.Event()
        for shape in options:
            try:
                maps = xp.zeros((int(batch),) + shape, dtype=dtype)
                irfftn(rfftn(maps, shape, xp), shape, xp, overwrite=True, normalise=False)  # plans, warm-up
                start.record()
                for _ in range(2):
                    irfftn(rfftn(maps, shape, xp), shape, xp, overwrite=True, normalise=False)
                stop.record()
                stop.synchronize()
                seconds = xp.cuda.get_elapsed_time(start, stop)
            except Exception:  # out of memory for a larger candidate: skip it
                continue
            finally:
                maps = None
            if seconds < best_time:
                best, best_time = shape, seconds
        xp.fft.config.get_plan_cache().clear()  # trial plans hold GPU work areas
        xp.get_default_memory_pool().free_all_blocks()
        if best_time < float("inf"):  # every trial failed (out of memory): try again next time
            _tuned[key] = best
    return best


def _products(xp):
    """The module of the spectral products for ``xp``: CUDA kernels, Numba kernels or the reference."""
    if xp is not np:
        from . import _cuda

        return _cuda
    if use_numba(xp):
        from . import _numba

        return _numba
    from . import _reference

    return _reference


def hidden_spectrum(filters, visible, xp, *, scale=1.0):
    """``scale * sum_c conj(filters[k, c]) * visible[c]``: correlation of every filter with the visible units."""
    return _products(xp).hidden_spectrum(filters, visible, scale=scale)


def visible_spectrum(filters, hidden, xp, *, scale=1.0):
    """``scale * sum_k filters[k, c] * hidden[k]``: the transpose of :func:`hidden_spectrum`."""
    return _products(xp).visible_spectrum(filters, hidden, scale=scale)


def accumulate_gradient(gradient, h0, v0, h1, v1, xp):
    """``gradient += conj(h0) v0 - conj(h1) v1`` per filter and channel (CD-1 statistics), in place."""
    return _products(xp).accumulate_gradient(gradient, h0, v0, h1, v1)


def noisy_relu(pre_activation, bias, box, noise, xp):
    """Hidden units from pre-activations (without bias), zero outside ``box``.

    ``max(0, mu + sqrt(sigm(mu)) * noise)`` with ``mu = pre_activation + bias[k]``
    (Nair & Hinton's noisy rectified linear unit, noise of variance ``sigm(mu)``);
    ``noise=None`` gives the expectation used for inference, ``max(0, mu)``.
    ``noise`` is an array of standard normal numbers, or an integer seed: on
    CuPy the kernel then makes its own counter-based normals (no noise array),
    on NumPy they come from ``numpy.random.default_rng(seed)``.
    ``box`` is the hidden extent inside the padded FFT shape.
    """
    return _products(xp).noisy_relu(pre_activation, bias, box, noise)
