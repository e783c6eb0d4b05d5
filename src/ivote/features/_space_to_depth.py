"""Space-to-depth rearrangement and FFT-friendly sizes (Brosch thesis, eqs. 1.9-1.11).

A convolution with stride ``s`` equals a stride-1 convolution once every
``s x s (x s)`` block of pixels becomes ``s**ndim`` channels of one pixel, in the
image and in the filters alike. These helpers do that reshuffle, channels-first,
so that FFTs run over the trailing (spatial) axes.
"""

from __future__ import annotations

import math

__all__ = ["depth_to_space", "fft_size", "fft_size_candidates", "space_to_depth"]


def fft_size(n: int) -> int:
    """The smallest ``m >= n`` of the form ``2**a * 3**b * 5**c`` (fast for cuFFT and pocketfft).

    Examples
    --------
    >>> fft_size(131), fft_size(66), fft_size(7)
    (135, 72, 8)
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    best = 2 ** math.ceil(math.log2(n))
    power5 = 1
    while power5 < best:
        power35 = power5
        while power35 < best:
            candidate = power35
            while candidate < n:
                candidate *= 2
            best = min(best, candidate)
            power35 *= 3
        power5 *= 5
    return best


def _smallest_multiple(n: int, primes: tuple) -> int:
    """Smallest m >= n whose prime factors are all in ``primes``."""
    m = n
    while True:
        rest = m
        for p in primes:
            while rest % p == 0:
                rest //= p
        if rest == 1:
            return m
        m += 1


def fft_size_candidates(n: int) -> tuple[int, ...]:
    """FFT lengths worth timing for a minimum length ``n``: the smallest 5-smooth
    length, the smallest 7-smooth one (cuFFT has radix-7 kernels; 140 instead of
    144 is 9% fewer elements in 3D), the smallest ``2**a 3**b`` length, and a
    power of two within 15%.

    Examples
    --------
    >>> fft_size_candidates(132)
    (135, 144)
    >>> fft_size_candidates(136)
    (140, 144)
    >>> fft_size_candidates(66)
    (70, 72)
    """
    n = int(n)
    candidates = {fft_size(n), _smallest_multiple(n, (2, 3, 5, 7)), _smallest_multiple(n, (2, 3))}
    power2 = 2 ** math.ceil(math.log2(n))
    if power2 <= 1.15 * n:
        candidates.add(power2)
    return tuple(sorted(candidates))


def space_to_depth(array, stride: int, ndim: int):
    """Move each ``stride**ndim`` block of the last ``ndim`` axes into a new channel axis.

    Parameters
    ----------
    array : ndarray
        Shape ``(..., N_1, ..., N_ndim)`` with every ``N_i`` a multiple of ``stride``.
    stride : int
        Block edge length.
    ndim : int
        Number of trailing spatial axes (2 or 3).

    Returns
    -------
    ndarray
        Shape ``(..., stride**ndim, N_1 // stride, ..., N_ndim // stride)``;
        channel ``c = (c_1, ..., c_ndim)`` (raveled, C order) at block position
        ``n`` holds ``array[..., stride * n + c]``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(16).reshape(4, 4)
    >>> space_to_depth(x, 2, 2)[:, 0, 0]
    array([0, 1, 4, 5])
    """
    if stride == 1:
        return array.reshape(array.shape[: array.ndim - ndim] + (1,) + array.shape[array.ndim - ndim :])
    lead = array.shape[: array.ndim - ndim]
    spatial = array.shape[array.ndim - ndim :]
    if any(n % stride for n in spatial):
        raise ValueError(f"spatial shape {spatial} must be a multiple of stride {stride}")
    split = lead + tuple(v for n in spatial for v in (n // stride, stride))
    blocks = array.reshape(split)
    nl = len(lead)
    # (..., n1, c1, n2, c2, ...) -> (..., c1, c2, ..., n1, n2, ...)
    order = tuple(range(nl)) + tuple(nl + 2 * i + 1 for i in range(ndim)) + tuple(nl + 2 * i for i in range(ndim))
    moved = blocks.transpose(order)
    return moved.reshape(lead + (stride**ndim,) + tuple(n // stride for n in spatial))


def depth_to_space(array, stride: int, ndim: int):
    """Inverse of :func:`space_to_depth`: ``(..., stride**ndim, *n) -> (..., *(n * stride))``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(36.0).reshape(6, 6)
    >>> bool((depth_to_space(space_to_depth(x, 3, 2), 3, 2) == x).all())
    True
    """
    if stride == 1:
        return array.reshape(array.shape[: array.ndim - ndim - 1] + array.shape[array.ndim - ndim :])
    lead = array.shape[: array.ndim - ndim - 1]
    spatial = array.shape[array.ndim - ndim :]
    nl = len(lead)
    split = array.reshape(lead + (stride,) * ndim + spatial)
    # (..., c1, c2, ..., n1, n2, ...) -> (..., n1, c1, n2, c2, ...)
    order = tuple(range(nl)) + tuple(v for i in range(ndim) for v in (nl + ndim + i, nl + i))
    return split.transpose(order).reshape(lead + tuple(n * stride for n in spatial))
