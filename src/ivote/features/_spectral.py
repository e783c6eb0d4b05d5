"""Frequency-domain building blocks of the convolutional RBM, NumPy and CuPy.

Every function has a readable NumPy body (the reference and the test oracle)
and a CuPy branch that launches the kernels of ``kernels/convrbm.cu``. Spectra
are channels-first: ``(n_filters, n_channels, *freq)``, ``(n_channels, *freq)``
and ``(n_filters, *freq)``; FFTs run over the trailing spatial axes.
"""

from __future__ import annotations

import numpy as np

import itertools
import threading

from .._backend import fft_module, get_kernel, index_type
from ._space_to_depth import fft_size, fft_size_candidates

__all__ = [
    "accumulate_gradient",
    "fastest_fft_shape",
    "hidden_spectrum",
    "irfftn",
    "noisy_relu",
    "rfftn",
    "visible_spectrum",
]

_BLOCK = 256


def rfftn(x, shape, xp):
    """Real FFT over the last ``len(shape)`` axes, zero-padded to ``shape``."""
    axes = tuple(range(-len(shape), 0))
    fft = fft_module(xp)
    if xp is np:
        return fft.rfftn(x, s=shape, axes=axes, workers=-1)
    return fft.rfftn(x, s=shape, axes=axes)  # cuFFT plans come from CuPy's plan cache


def irfftn(x, shape, xp, *, overwrite=False):
    """Inverse of :func:`rfftn` for spatial ``shape``; ``overwrite`` lets it destroy ``x``.

    cuFFT's complex-to-real transforms overwrite their input, so CuPy copies it
    first unless told that ``x`` is a temporary (saves one pass over the spectra).
    """
    axes = tuple(range(-len(shape), 0))
    fft = fft_module(xp)
    if xp is np:
        return fft.irfftn(x, s=shape, axes=axes, workers=-1, overwrite_x=overwrite)
    return fft.irfftn(x, s=shape, axes=axes, overwrite_x=overwrite)


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
                irfftn(rfftn(maps, shape, xp), shape, xp, overwrite=True)  # plans, warm-up
                start.record()
                for _ in range(2):
                    irfftn(rfftn(maps, shape, xp), shape, xp, overwrite=True)
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
        _tuned[key] = best
    return best


def _kernel(name, array, real):
    """The compiled ``ivote_convrbm_<name><T, I>`` for the real dtype and the index width of ``array``."""
    scalar = {"float32": "float", "float64": "double"}[np.dtype(real).name]
    itype = index_type(array)
    expression = f"ivote_convrbm_{name}<{scalar}, {itype}>"
    kernel = get_kernel("convrbm", expression, name_expressions=(expression,))
    index = np.int32 if itype == "int" else np.int64
    return kernel, index


def _launch(kernel, n, args):
    grid = (int(n) + _BLOCK - 1) // _BLOCK
    kernel((grid,), (_BLOCK,), args)


def hidden_spectrum(filters, visible, xp):
    """``sum_c conj(filters[k, c]) * visible[c]``: correlation of every filter with the visible units."""
    n_filters, n_channels = filters.shape[:2]
    if xp is np:
        flat = np.einsum("kcf,cf->kf", filters.reshape(n_filters, n_channels, -1).conj(),
                         visible.reshape(n_channels, -1))
        return flat.reshape((n_filters,) + visible.shape[1:])
    n_freq = visible[0].size
    hidden = xp.empty((n_filters,) + visible.shape[1:], dtype=visible.dtype)
    kernel, index = _kernel("hidden_spectrum", filters, filters.real.dtype)
    _launch(kernel, hidden.size, (filters, visible, hidden, np.int32(n_filters), np.int32(n_channels), index(n_freq)))
    return hidden


def visible_spectrum(filters, hidden, xp):
    """``sum_k filters[k, c] * hidden[k]``: the transpose of :func:`hidden_spectrum`."""
    n_filters, n_channels = filters.shape[:2]
    if xp is np:
        flat = np.einsum("kcf,kf->cf", filters.reshape(n_filters, n_channels, -1),
                         hidden.reshape(n_filters, -1))
        return flat.reshape((n_channels,) + hidden.shape[1:])
    n_freq = hidden[0].size
    visible = xp.empty((n_channels,) + hidden.shape[1:], dtype=hidden.dtype)
    kernel, index = _kernel("visible_spectrum", filters, filters.real.dtype)
    _launch(kernel, visible.size, (filters, hidden, visible, np.int32(n_filters), np.int32(n_channels), index(n_freq)))
    return visible


def accumulate_gradient(gradient, h0, v0, h1, v1, xp):
    """``gradient += conj(h0) v0 - conj(h1) v1`` per filter and channel (CD-1 statistics), in place."""
    n_filters, n_channels = gradient.shape[:2]
    if xp is np:
        gradient += h0.conj()[:, None] * v0[None] - h1.conj()[:, None] * v1[None]
        return gradient
    kernel, index = _kernel("accumulate_gradient", gradient, gradient.real.dtype)
    n_freq = v0[0].size
    _launch(kernel, gradient.size,
            (gradient, h0, v0, h1, v1, np.int32(n_filters), np.int32(n_channels), index(n_freq)))
    return gradient


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


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
    n_filters = pre_activation.shape[0]
    spatial = pre_activation.shape[1:]
    seeded = noise is not None and np.ndim(noise) == 0
    if xp is np:
        if seeded:
            noise = np.random.default_rng(int(noise)).standard_normal(pre_activation.shape, dtype=pre_activation.dtype)
        mu = pre_activation + bias.reshape((n_filters,) + (1,) * len(spatial))
        if noise is not None:
            mu = mu + np.sqrt(_sigmoid(mu)) * noise
        out = np.zeros_like(mu)
        inside = (slice(None),) + tuple(slice(0, b) for b in box)
        out[inside] = np.maximum(mu[inside], 0)
        return out
    pz, py, px = (1,) * (3 - len(spatial)) + tuple(spatial)
    bz, by, bx = (1,) * (3 - len(box)) + tuple(box)
    out = xp.empty_like(pre_activation)
    kernel, index = _kernel("noisy_relu", pre_activation, pre_activation.dtype)
    bias = xp.ascontiguousarray(bias, dtype=pre_activation.dtype)
    mode = 0 if noise is None else (2 if seeded else 1)
    noise_arg = xp.ascontiguousarray(noise, dtype=pre_activation.dtype) if mode == 1 else pre_activation
    seed = int(noise) % 2**64 if seeded else 0
    # threads over (x, y); blockIdx.z strides over filters x planes: no integer division per element
    block = (32, 8, 1)
    grid = ((px + 31) // 32, (py + 7) // 8, min(n_filters * pz, 65535))
    kernel(grid, block,
           (xp.ascontiguousarray(pre_activation), bias, noise_arg, out, np.int32(mode), np.uint32(seed & 0xFFFFFFFF),
            np.uint32(seed >> 32), np.int32(n_filters), np.int32(pz), np.int32(py), np.int32(px), np.int32(bz),
            np.int32(by), np.int32(bx)))
    return out
