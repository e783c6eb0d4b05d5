"""The first kernels of a GPU detection: the image's statistics (minimum, maximum,
NaN/Inf; the whole image's, written into a block's), the noise grid's residuals,
and the normalisation fused into the separable Gaussian pre-blur. Part of the GPU
detection (``_cuda.py``)."""

from __future__ import annotations

import math

import numpy as np

from .._backend import get_array_module
from ._cuda_kernels import (_BLOCK, _CTYPES, _FUSED_BLUR, _HIGH_KEY, _LARGEST, _LOW_KEY, _N_SLOTS, _REDUCE_BLOCKS,
                            _blur_name, _grid, _module)
from ._cuda_tables import _noise_positions_on_gpu, _taps_on_gpu

__all__ = ["smoothed_block"]


def _kernel_input(array, xp):
    """The array as the statistics/blur kernels read it: as is for the dtypes they
    take (C-contiguous), else a float64 copy."""
    if array.dtype in _CTYPES and array.flags.c_contiguous:
        return array
    return xp.ascontiguousarray(array, dtype=np.float64)


def _min_max(array, stats, kernels):
    """Queue the minimum/maximum/NaN statistics of ``array`` into stats[0..3)."""
    grid = (min(_grid(array.size)[0], _REDUCE_BLOCKS),)
    kernels[f"ivote_min_max<{_CTYPES[array.dtype]}>"](grid, (_BLOCK,), (array, np.int64(array.size), stats))


def _blur_steps(sigma, ndim: int, xp) -> list:
    """(axis, taps on the GPU) of each axis the blur runs along; the identity
    tap along the last axis when none (the normalisation still runs)."""
    steps = [(axis, _taps_on_gpu(float(s), xp)) for axis, s in enumerate(sigma or ())]
    steps = [(axis, taps) for axis, taps in steps if taps is not None]
    return steps or [(ndim - 1, _taps_on_gpu(None, xp))]


def _noise_samples(source, stats, residuals, kernels, xp, positions=None):
    """Queue the residuals of the noise grid (``_contrast.noise_positions``; ``positions``:
    that grid on the GPU, when already looked up) into ``residuals``."""
    if residuals.size == 0:
        return
    positions = _noise_positions_on_gpu(tuple(source.shape), xp) if positions is None else positions
    shape = source.shape
    kernels[f"ivote_noise_samples<{_CTYPES[source.dtype]}>"](
        _grid(positions.size), (_BLOCK,),
        (source, np.int32(len(shape)), np.int32(shape[-2]), np.int32(shape[-1]), positions, np.int32(positions.size),
         stats, residuals),
    )


def _normalise_and_blur(source, sigma, stats, kernels, xp, fused: bool = _FUSED_BLUR, outputs=None, steps=None,
                        first: int = 0, last: int | None = None):
    """(source - min) / (max - min) with the statistics on the GPU, then the
    separable Gaussian of sigma (per axis, pixels; None: none), as
    ``cupyx.scipy.ndimage.gaussian_filter(..., mode="reflect")`` computes it.
    Normalisation is fused into the first axis.

    ``outputs``: two float64 arrays of the image's shape that the axes write in
    turn (default: new ones); ``steps``: ``_blur_steps(sigma, ...)`` when already
    looked up; ``first``/``last``: run only these steps (with ``outputs``; a
    later step reads the output the step before it wrote).
    """
    shape = outputs[0].shape if source is None else source.shape
    steps = _blur_steps(sigma, len(shape), xp) if steps is None else steps
    size = math.prod(shape)
    current = source if first == 0 else outputs[(first - 1) % 2]
    for step in range(first, len(steps) if last is None else last):
        axis, taps = steps[step]
        ctype, normalise = (_CTYPES[current.dtype], True) if step == 0 else ("double", False)
        out = xp.empty(shape, dtype=np.float64) if outputs is None else outputs[step % 2]
        stride = math.prod(shape[axis + 1:])
        kernels[_blur_name(ctype, normalise, fused)](
            _grid(size), (_BLOCK,),
            (current, np.int32(size), np.int32(shape[axis]), np.int32(stride), taps, np.int32(taps.size), stats, out),
        )
        current = out
    return current


def _to_key(value: float) -> np.uint64:
    """A double as the kernels' ``ivote_key``: an unsigned integer of the same order."""
    bits = np.array([value], dtype=np.float64).view(np.uint64)[0]
    return ~bits if bits >> np.uint64(63) else bits | np.uint64(1 << 63)


def _write_given(stats, low: float, high: float, largest: float, xp) -> None:
    """The whole image's minimum, maximum (as keys) and largest gradient (its bits)
    into a block's statistics."""
    host = np.zeros(_N_SLOTS, dtype=np.uint64)
    host[_LOW_KEY] = ~_to_key(low)
    host[_HIGH_KEY] = _to_key(high)
    host[_LARGEST] = np.array([float(largest)], dtype=np.float64).view(np.uint64)[0]
    stats[:] = xp.asarray(host)


def smoothed_block(signal, sigma, low: float, high: float):
    """The normalised ((signal - low) / (high - low)), blurred block (float64, on the
    GPU) of an image whose minimum and maximum are ``low`` and ``high``: the
    detection's own kernels, so that its gradients are the detection's."""
    xp = get_array_module(signal)
    kernels = _module(signal.ndim, "int", xp)
    stats = xp.zeros(_N_SLOTS, dtype=np.uint64)
    _write_given(stats, low, high, 0.0, xp)
    return _normalise_and_blur(_kernel_input(signal, xp), sigma, stats, kernels, xp)


def _from_key(key) -> float:
    key = np.uint64(key)
    bits = key & np.uint64(0x7FFF_FFFF_FFFF_FFFF) if key >> np.uint64(63) else ~key
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])
