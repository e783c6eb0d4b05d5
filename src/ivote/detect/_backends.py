"""One detection on each backend, from the checked signal to the cells with their votes and
contrasts: CUDA and Numba through their modules' ``detect`` (``_detect_with``), NumPy here
(normalise, blur, ``_cpu.run_passes``, local maxima). ``ivote.distributed`` runs the same
functions on blocks, with the whole image's statistics (``given``)."""

from __future__ import annotations

import numpy as np

from .._backend import ndimage_module
from .._validate import check_finite_range
from ._cells import _candidates, _cells_at, _greedy_keep
from ._contrast import bump_ring, contrast_numerators, contrasts, grey_step, noise_positions, noise_residuals, noise_sigma


def _detect_on_gpu(*args):
    """Votes (None unless ``keep_votes``), cell coordinates and votes, and passes run,
    with one host synchronisation (``_cuda.detect``; repeated detections of one
    shape and setting replay a CUDA graph); NaN/Inf are found from the image's
    statistics, reported at the end."""
    from ._cuda import detect

    return _detect_with(detect, *args)


def _detect_on_numba(*args):
    """As :func:`_detect_on_gpu`, on the CPU's cores (``_numba.detect``)."""
    from ._numba import detect

    return _detect_with(detect, *args)


def _detect_with(detect, image, signal, plan, sign, blur, spacing, from_rgb, has_features, iter_callback, keep_votes,
                 given=None):
    """The detection by a backend module's ``detect`` (``_cuda`` or ``_numba``), then the kept cells.

    ``given``: the whole image's ``_result.GlobalStatistics`` when ``signal`` is a
    block of it (``ivote.distributed``): every local maximum is returned then
    (the suppression of close maxima is the whole image's), and contrasts are to
    the image's noise."""
    sigma = tuple(blur / s for s in spacing) if not has_features and blur > 0 else None
    rgb = image if not has_features and from_rgb and image.dtype.kind == "f" else None
    found = detect(signal, plan, sign, sigma, iter_callback, also_finite=rgb, reuse=not keep_votes, given=given)
    check_finite_range(found.extremes, name="features" if has_features else "image")
    low, high = found.extremes
    if not high > low:  # constant image: no gradient, no voter, no cell
        return found.votes, np.zeros((0, plan.ndim), np.int64), np.zeros(0, np.int64), np.zeros(0), 0
    keep = _greedy_keep(len(found.flat), found.pairs) if given is None else slice(None)
    coords, values = _cells_at(found.flat, found.values, keep, signal.shape)
    sigma_noise = (noise_sigma(found.residuals, plan.ndim, grey_step(signal.dtype, low, high)) if given is None
                   else given.noise_sigma)
    contrast = contrasts(found.numerators[keep], sigma_noise)
    return found.votes, coords, values, contrast, plan.n_passes


def _detect_on_cpu(image, signal, plan, sign, blur, spacing, from_rgb, has_features, iter_callback, keep_votes,
                   given=None):
    """As :func:`_detect_on_gpu`, on NumPy: normalise, blur, vote (``_cpu.run_passes``), cells."""
    # float64 up to the quantised weights: both backends then round alike (see _plan.py)
    smoothed = signal.astype(np.float64, order="C", copy=True)
    extremes = [smoothed.min(), smoothed.max()] if given is None else [given.low, given.high]
    if not has_features and from_rgb and image.dtype.kind == "f":  # every channel, not just the signal
        extremes += [image.min(), image.max()]
    check_finite_range([float(v) for v in extremes], name="features" if has_features else "image")
    low, high = float(extremes[0]), float(extremes[1])
    if not high > low:  # constant image: no gradient, no voter, no cell
        empty = np.zeros((0, plan.ndim), np.int64), np.zeros(0, np.int64), np.zeros(0)
        return np.zeros(signal.shape, dtype=np.uint32), *empty, 0
    smoothed -= low
    smoothed /= high - low
    if given is None:
        residuals = noise_residuals(smoothed, noise_positions(tuple(signal.shape)))
        sigma_noise = noise_sigma(residuals, plan.ndim, grey_step(signal.dtype, low, high))
    else:
        sigma_noise = given.noise_sigma
    if not has_features and blur > 0:
        sigma = tuple(blur / s for s in spacing)
        smoothed = ndimage_module(np).gaussian_filter(smoothed, sigma=sigma, mode="reflect")
    from ._cpu import run_passes  # equal to _reference.run_passes, over the cone tables

    smoothed32 = smoothed.astype(np.float32)  # the contrasts compare in float32, as the kernel
    holder = [smoothed]  # run_passes takes the only reference and frees it early
    del smoothed
    from ._reach import pass_boxes

    votes = run_passes(holder, plan, sign, iter_callback, None if given is None else given.largest,
                       pass_boxes(plan, signal.shape, getattr(given, "owned", None)))
    coords, values = _candidates(votes, plan, suppress=given is None)
    contrast = contrasts(contrast_numerators(smoothed32, coords, plan.window, sign, bump_ring(plan)), sigma_noise)
    return votes, coords, values, contrast, plan.n_passes
