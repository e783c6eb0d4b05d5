"""Numba side of the ConvRBM's spectral products: the loops of ``kernels/convrbm.cu`` on the CPU's
cores, the same entry points as :mod:`._reference` (their oracle). The FFTs stay in ``scipy.fft``
(``workers=-1``); the hidden units' noisy ReLU is the reference's (one NumPy pass).

Spectra are flattened over the frequencies; the parallel loops run over (filter or channel,
block of frequencies) pairs, so each output element has one writer and 2 cores get balanced
work even for a few filters. Small products (training tiles: 16 filters of 52x27 frequencies)
run the same loops compiled without threads: a parallel region costs 0.3-8 ms to start on a
loaded CPU, 5-100 times the work itself (0.06 ms).
"""

from __future__ import annotations

import types

import numpy as np
from numba import njit, prange

from .._backend import numba_lock
from ._reference import noisy_relu

__all__ = ["accumulate_gradient", "hidden_spectrum", "noisy_relu", "visible_spectrum"]

_FREQ_BLOCK = 4096  # frequencies per work item
_PARALLEL_MIN_WORK = 1 << 20  # complex multiply-adds below which one thread is faster


def _contract(weights, inputs, scale, conjugate, out):
    """out[o, f] = scale * sum_i w(weights[o, i, f]) inputs[i, f], w the conjugate or the identity:
    ivote_convrbm_hidden_spectrum (weights = filters, conjugated) and _visible_spectrum (weights =
    filters with the filter and channel axes swapped)."""
    n_out, n_in, n_freq = weights.shape
    blocks = (n_freq + _FREQ_BLOCK - 1) // _FREQ_BLOCK
    for item in prange(n_out * blocks):
        o, start = item // blocks, (item % blocks) * _FREQ_BLOCK
        stop = min(start + _FREQ_BLOCK, n_freq)
        for f in range(start, stop):
            out[o, f] = 0
        for i in range(n_in):
            for f in range(start, stop):
                w = weights[o, i, f]
                out[o, f] += (w.conjugate() if conjugate else w) * inputs[i, f]
        for f in range(start, stop):
            out[o, f] *= scale


def _accumulate(gradient, h0, v0, h1, v1):
    """gradient[k, c, f] += conj(h0[k, f]) v0[c, f] - conj(h1[k, f]) v1[c, f] (ivote_convrbm_accumulate_gradient)."""
    n_filters, n_channels, n_freq = gradient.shape
    for item in prange(n_filters * n_channels):
        k, c = item // n_channels, item % n_channels
        for f in range(n_freq):
            gradient[k, c, f] += h0[k, f].conjugate() * v0[c, f] - h1[k, f].conjugate() * v1[c, f]


def _compiled(loop):
    """The loop compiled twice: over the cores (prange) and on one thread (prange runs as range).

    The one-thread copy gets its own name: Numba's on-disk cache is keyed on the
    function's name and bytecode, not on ``parallel``.
    """
    serial = types.FunctionType(loop.__code__, loop.__globals__, f"{loop.__name__}_serial")
    serial.__qualname__ = serial.__name__
    return (njit(parallel=True, cache=True, error_model="numpy")(loop),
            njit(parallel=False, cache=True, error_model="numpy")(serial))


_contract_kernels = _compiled(_contract)
_accumulate_kernels = _compiled(_accumulate)


def _pick(kernels, work):
    return kernels[0] if work >= _PARALLEL_MIN_WORK else kernels[1]


def _flat(spectra, leading):
    return np.ascontiguousarray(spectra).reshape(leading + (-1,))


def hidden_spectrum(filters, visible, *, scale=1.0):
    """``scale * sum_c conj(filters[k, c]) * visible[c]``: correlation of every filter with the visible units."""
    n_filters, n_channels = filters.shape[:2]
    hidden = np.empty((n_filters,) + visible.shape[1:], dtype=np.result_type(filters, visible))
    flat_filters = _flat(filters, (n_filters, n_channels)).astype(hidden.dtype, copy=False)
    with numba_lock:
        _pick(_contract_kernels, flat_filters.size)(flat_filters, _flat(visible, (n_channels,)).astype(hidden.dtype, copy=False),
                  hidden.real.dtype.type(scale), True, hidden.reshape(n_filters, -1))
    return hidden


def visible_spectrum(filters, hidden, *, scale=1.0):
    """``scale * sum_k filters[k, c] * hidden[k]``: the transpose of :func:`hidden_spectrum`."""
    n_filters, n_channels = filters.shape[:2]
    visible = np.empty((n_channels,) + hidden.shape[1:], dtype=np.result_type(filters, hidden))
    flat_filters = _flat(filters, (n_filters, n_channels)).astype(visible.dtype, copy=False)
    with numba_lock:
        _pick(_contract_kernels, flat_filters.size)(flat_filters.transpose(1, 0, 2), _flat(hidden, (n_filters,)).astype(visible.dtype, copy=False),
                  visible.real.dtype.type(scale), False, visible.reshape(n_channels, -1))
    return visible


def accumulate_gradient(gradient, h0, v0, h1, v1):
    """``gradient += conj(h0) v0 - conj(h1) v1`` per filter and channel (CD-1 statistics), in place."""
    n_filters, n_channels = gradient.shape[:2]
    if not gradient.flags.c_contiguous:  # the kernel writes through a flat view
        gradient[...] = accumulate_gradient(np.ascontiguousarray(gradient), h0, v0, h1, v1)
        return gradient
    dtype = gradient.dtype
    with numba_lock:
        _pick(_accumulate_kernels, gradient.size)(gradient.reshape(n_filters, n_channels, -1), _flat(h0, (n_filters,)).astype(dtype, copy=False),
                    _flat(v0, (n_channels,)).astype(dtype, copy=False),
                    _flat(h1, (n_filters,)).astype(dtype, copy=False), _flat(v1, (n_channels,)).astype(dtype, copy=False))
    return gradient
