"""Automatic radius: the nucleus size from the image's scale-space blobs.

A uniform disc of radius R gives its strongest scale-normalised Laplacian-of-
Gaussian response, -sigma^2 lap(G_sigma * I), at its centre for sigma =
R / sqrt(2); a ball in 3D for sigma = R / sqrt(3) (Lindeberg, IJCV 1998,
doi:10.1023/A:1008045108935). The image's bright blobs are the local maxima of
that response over space and scale, computed on an octave pyramid. The median
sqrt(ndim) sigma of the strong ones (weighted by the area they cover) is the
typical (equivalent) nucleus radius, :func:`typical_radius`. The voting radius
(the *largest* nucleus radius, ``iterative_voting``'s ``radius``) follows the
nuclei's length instead: each blob's semi-axes are read from the Hessian at its
maximum, and :func:`estimate_radius` is ``VOTING_OVER_LONG_AXIS`` x the same
weighted median of the blobs' long semi-axis (2D: the semi-major; 3D: the
middle one). Everything is in physical units (the Gaussians are isotropic in
micrometres), on the array's own backend.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import get_array_module, ndimage_module, select_xp, to_device, to_host
from .._typing import Array, ArrayLike, Spacing
from .._validate import check_image, check_positive, check_spacing
from ..errors import IvoteError
from ._colour import reads_as_rgb, spatial_signal

__all__ = ["LARGEST_OVER_TYPICAL", "VOTING_OVER_LONG_AXIS", "estimate_radius", "typical_radius"]

LARGEST_OVER_TYPICAL = {2: 1.5, 3: 1.25}
"""Voting radius / the median *equivalent* radius: the rule of
``benchmarks/accuracy_detect.py``'s per-image radius from the labels (2D: a 2:1
ellipse's semi-major axis is 1.41 times its equivalent radius, and sizes
spread; 3D: the labels' median is already close to the larger semi-axes)."""

VOTING_OVER_LONG_AXIS = 1.25
"""Voting radius / the typical *long* semi-axis that :func:`estimate_radius`
measures (2D: the semi-major axis; 3D: the middle one), one value for 2D and
3D; chosen on the evaluation data (see ``docs/detect.md``)."""

_SCALE_STEP = 2 ** 0.25  # four scales per octave
_MIN_RADIUS_PIXELS = 2.0  # smaller blobs are the pre-blur's and the noise's
_MAX_PIXELS = 2 ** 21  # larger images are estimated on a central crop of this many pixels
_PIXELS_PER_SIGMA = 2.0  # each scale is filtered on the coarsest pyramid level where sigma spans this many pixels
_ALIAS_BLUR = 1.0  # blur (in the coarser pixels) before each decimation by 2
_MAX_CURVATURE_RATIO = 4.0  # flatter blobs (about 3:1 and beyond) are ridges or split nuclei: capped


def typical_radius(image: ArrayLike | Array, *, spacing: Spacing = None, polarity: str = "bright",
                   channel: int | None = None, min_radius: float | None = None, max_radius: float | None = None,
                   backend: str = "auto") -> float:
    """The typical (median) radius of an image's nuclei, in the units of ``spacing``.

    For a disc, the equivalent radius sqrt(area / pi); for a ball, the radius.
    Parameters as :func:`estimate_radius`.
    """
    signal, spacing, sign, xp = _grey_signal(image, spacing, polarity, channel, backend)
    return _signal_typical_radius(signal, spacing, sign, min_radius, max_radius, xp)


def _grey_signal(image, spacing, polarity, channel, backend):
    """(signal, spacing, sign, xp): the checked grey 2D/3D signal of ``image`` on its backend
    (RGB: the hematoxylin density, nuclei bright), its spacing, and the sign that makes nuclei
    bright (-1 for ``polarity='dark'``)."""
    xp = select_xp(backend, image)
    image = check_image(image, allow_rgb=True)
    rgb = reads_as_rgb(image.shape)
    crop = central_crop(image.shape[:-1] if rgb else image.shape)
    image = image[crop + (slice(None),) * rgb]  # before the colour conversion and the copy to the GPU
    image = to_device(image, xp) if get_array_module(image) is not xp else image
    signal, from_rgb = spatial_signal(image, channel, xp)
    spacing = check_spacing(spacing, signal.ndim)
    if polarity not in ("bright", "dark"):
        raise IvoteError(f"polarity must be 'bright' or 'dark'; got {polarity!r}")
    sign = 1.0 if (polarity == "bright" or (from_rgb and channel is None)) else -1.0
    return signal, spacing, sign, xp


def _signal_typical_radius(signal, spacing, sign, min_radius, max_radius, xp) -> float:
    """:func:`typical_radius` of a grey 2D/3D ``signal`` (``sign`` -1: dark nuclei)."""
    strengths, blob_radii, _ = _signal_blobs(signal, spacing, sign, min_radius, max_radius, xp)
    return _area_weighted_median(strengths, blob_radii, blob_radii, signal.ndim)


def _signal_voting_radius(signal, spacing, sign, min_radius, max_radius, xp) -> float:
    """:func:`estimate_radius` of a grey 2D/3D ``signal`` (``sign`` -1: dark nuclei)."""
    return _voting_radius_and_support(signal, spacing, sign, min_radius, max_radius, xp)[0]


def _voting_radius_and_support(signal, spacing, sign, min_radius, max_radius, xp):
    """(the voting radius, the blobs that support it, whether isolated sizes were dropped)."""
    strengths, blob_radii, semi_axes = _signal_blobs(signal, spacing, sign, min_radius, max_radius, xp)
    long_axes = semi_axes[:, 1]
    value = _area_weighted_median(strengths, blob_radii, long_axes, signal.ndim)
    support = _support(long_axes, value)
    if support >= MIN_SUPPORT:
        return VOTING_OVER_LONG_AXIS * value, support, False
    shared = _supported(long_axes)
    if not shared.any():  # no size is shared by MIN_SUPPORT blobs: the estimate stands, unsupported
        return VOTING_OVER_LONG_AXIS * value, support, False
    value = _area_weighted_median(strengths[shared], blob_radii[shared], long_axes[shared], signal.ndim)
    return VOTING_OVER_LONG_AXIS * value, _support(long_axes, value), True


MIN_SUPPORT = 3
"""Blobs whose long semi-axis lies within ``SUPPORT_FACTOR`` of a size for the size to be the
nuclei's. The area weighting lets one large blob (uneven illumination, a tissue fold) outweigh a
few small nuclei: five nuclei of radius 7 px beside a 60 px illumination hump gave 118 px."""
SUPPORT_FACTOR = 1.5


def _support(long_axes, value) -> int:
    return int(np.sum((long_axes >= value / SUPPORT_FACTOR) & (long_axes <= value * SUPPORT_FACTOR)))


def _supported(long_axes) -> np.ndarray:
    """Blobs whose size is shared by at least ``MIN_SUPPORT`` blobs (themselves included)."""
    ordered = np.sort(long_axes)
    low = np.searchsorted(ordered, long_axes / SUPPORT_FACTOR, side="left")
    high = np.searchsorted(ordered, long_axes * SUPPORT_FACTOR, side="right")
    return (high - low) >= MIN_SUPPORT


def _signal_blobs(signal, spacing, sign, min_radius, max_radius, xp):
    """(strengths, radii, semi-axes ascending) of the blobs of a grey 2D/3D ``signal``."""
    signal = _central_crop(signal, _MAX_PIXELS)
    extent = min(n * s for n, s in zip(signal.shape, spacing))
    low = _MIN_RADIUS_PIXELS * min(spacing) if min_radius is None else check_positive(min_radius, "min_radius")
    high = extent / 4 if max_radius is None else check_positive(max_radius, "max_radius")
    if not high > low:
        if min_radius is None and max_radius is None:  # nothing the user set: the image is too thin
            shortest = min(range(signal.ndim), key=lambda a: signal.shape[a] * spacing[a])
            raise IvoteError(
                f"image is too thin to estimate a nucleus radius: {signal.shape[shortest]} pixel(s) along axis "
                f"{shortest} ({extent:g} in the spacing's units) hold less than 4 radii of the smallest nucleus "
                f"measured ({low:g}); give the radius as a number, or a 2D plane of a thin stack")
        raise IvoteError(f"max_radius must be larger than min_radius ({low:g}); got {high:g} "
                         f"(the image is {extent:g} wide along its shortest axis: at least 4 radii are needed)")
    radii = _radii(low, high)
    scaled = signal.astype(np.float32)  # float32 filters: ample for a size
    lowest, highest = float(scaled.min()), float(scaled.max())
    if not highest > lowest:
        raise IvoteError("image is constant: no nucleus size can be estimated from it")
    scaled = (scaled - lowest) * np.float32(sign / (highest - lowest))
    strengths, blob_radii, curvatures = _scale_space_blobs(scaled, radii, spacing, xp)
    if len(strengths) == 0:
        raise IvoteError("no blob found in the image: no nucleus size can be estimated from it")
    return strengths, blob_radii, _semi_axes(blob_radii, curvatures)


def estimate_radius(image: ArrayLike | Array, *, spacing: Spacing = None, polarity: str = "bright",
                    channel: int | None = None, min_radius: float | None = None, max_radius: float | None = None,
                    backend: str = "auto") -> float:
    """The radius to detect an image's nuclei with, estimated from the image.

    ``iterative_voting``'s ``radius`` is the *largest* nucleus radius (votes
    reach that far, and detections are at least that far apart): this is
    1.25 x the typical long semi-axis of the image's blobs (2D: the
    semi-major axis; 3D: the middle one), read from the scale-normalised
    Laplacian-of-Gaussian blobs and the Hessian at each.

    Parameters
    ----------
    image : (Y, X), (Z, Y, X) or RGB (Y, X, 3|4) array
        NumPy or CuPy array; RGB is read as H&E (hematoxylin density) unless
        ``channel`` is given, as in ``iterative_voting``.
    spacing : sequence of float, optional
        Pixel size per spatial axis (default 1); the result is in its units,
        and the blobs are measured isotropically in them.
    polarity : {'bright', 'dark'}
        Bright nuclei on a dark background or dark on bright (ignored for RGB
        read as H&E).
    channel : int, optional
        For RGB input, measure this channel instead of the hematoxylin density.
    min_radius, max_radius : float, optional
        Range of typical radii searched, in the units of ``spacing``. Default:
        2 pixels of the finest axis to a quarter of the shortest extent.
    backend : {'auto', 'numpy', 'cupy'}

    Returns
    -------
    float
        The voting radius, in the units of ``spacing``.

    Notes
    -----
    Blobs are the local maxima, over space and scale (3 x ... x 3), of
    -sigma^2 lap(G_sigma * I) on the image scaled to [0, 1] (nuclei bright),
    four scales per octave, each blob's scale refined by a parabola through
    its three scales; the scales are filtered on an octave pyramid (each
    on the coarsest level where sigma still spans 2 pixels). Each blob's
    semi-axes come from its scale and the eigenvalues of the normalised
    Hessian at its maximum (a Gaussian-blob model, exact for discs and
    balls). The typical long semi-axis is the median of the blobs'
    second-smallest semi-axis weighted by response x radius^ndim (the area
    they cover, so that the many small blobs of noise and texture inside
    nuclei do not count for more than the nuclei). An elongated nucleus's
    Laplacian-of-Gaussian scale follows its minor axis, its equivalent radius
    at best; the detector needs its length. In 3D the middle semi-axis,
    not the longest: volumes are blurred most along the optical axis, which
    stretches every nucleus along z in the image. Images over 2^21 pixels
    are measured on a central crop of that size (the same side along every
    longer axis; shorter axes, such as a thin z stack's, whole); RGB is
    cropped before its colour conversion.

    Examples
    --------
    >>> import numpy as np
    >>> from ivote.data import synthetic_nuclei
    >>> image, labels, *_ = synthetic_nuclei((128, 128), radius=6, seed=1)
    >>> median_radius = np.median(np.sqrt(np.bincount(labels.ravel())[1:] / np.pi))  # the truth
    >>> estimate = estimate_radius(image, backend="numpy")
    >>> bool(abs(estimate / (1.5 * median_radius) - 1) < 0.2)
    True
    """
    signal, spacing, sign, xp = _grey_signal(image, spacing, polarity, channel, backend)
    return _signal_voting_radius(signal, spacing, sign, min_radius, max_radius, xp)


def _radii(low: float, high: float) -> np.ndarray:
    """Typical radii searched: geometric from ``low`` to ``high``, plus one
    scale either side so that a blob at either end can be a maximum over scale."""
    count = int(math.ceil(math.log(high / low) / math.log(_SCALE_STEP))) + 1
    return low * _SCALE_STEP ** np.arange(-1, count + 1)


def central_crop(shape, max_pixels: int | None = None) -> tuple:
    """Slices of the central crop a radius is estimated on: the whole image up to
    ``max_pixels`` pixels; beyond, the same side s along every axis longer than s
    and the whole of every shorter axis (a thin z stack keeps all its planes), s as
    large as ``max_pixels`` allows. The one rule for in-memory and chunked images,
    so a lazy volume and the same volume in memory get the same estimate."""
    shape = tuple(int(n) for n in shape)
    max_pixels = _MAX_PIXELS if max_pixels is None else max_pixels
    keep = list(shape)
    if math.prod(shape) > max_pixels:
        budget, remaining = float(max_pixels), sorted(range(len(shape)), key=lambda a: shape[a])
        while remaining:
            side = budget ** (1 / len(remaining)) * (1 + 1e-12)  # 4096 ** (1/3) is 15.999...
            if shape[remaining[0]] <= side:  # shorter than the crop's side: kept whole
                budget /= shape[remaining.pop(0)]
                continue
            for axis in remaining:
                keep[axis] = max(int(side), 1)
            break
    return tuple(slice((n - k) // 2, (n - k) // 2 + k) for n, k in zip(shape, keep))


def _central_crop(signal, max_pixels: int):
    return signal[central_crop(signal.shape, max_pixels)]


_GPU_TAPS_RADIUS = 16  # GPU filters pad their taps to a multiple of this radius (see _gaussian)


def _gaussian_taps(sigma: float, order: int, radius: int) -> np.ndarray:
    """SciPy's ``gaussian_filter1d`` taps (truncate 4) for ``correlate1d``, zero-padded to ``radius``."""
    own = int(4.0 * sigma + 0.5)
    x = np.arange(-own, own + 1, dtype=np.float64)
    phi = np.exp(-0.5 / (sigma * sigma) * x * x)
    phi /= phi.sum()
    if order:  # phi's derivative: a polynomial q(x) times phi, as SciPy computes it
        exponents = np.arange(order + 1)
        q = np.zeros(order + 1)
        q[0] = 1
        step = np.diag(exponents[1:], 1) + np.diag(np.ones(order) / -(sigma * sigma), -1)
        for _ in range(order):
            q = step.dot(q)
        phi = (x[:, None] ** exponents).dot(q) * phi
    taps = np.zeros(2 * radius + 1)
    taps[radius - own: radius + own + 1] = phi[::-1]
    return taps


def _gaussian(level, sigmas, orders, ndimage, xp):
    """``ndimage.gaussian_filter(level, sigmas, order=orders, mode="reflect")``.

    On the GPU as ``correlate1d`` along each axis with taps zero-padded to a
    multiple of ``_GPU_TAPS_RADIUS``: CuPy compiles one kernel per taps length
    and axis, and the scale space asks for dozens of lengths (75 s of kernel
    compilation at the first 3D estimate on a machine, 0.14 s after); padded,
    a handful. The zeros add exact zeros: the same sums.
    """
    if xp is np:
        return ndimage.gaussian_filter(level, sigmas, order=orders, mode="reflect")
    out = level.astype(np.float64, copy=False) if level.dtype.kind != "f" else level
    for axis, (sigma, order) in enumerate(zip(sigmas, orders)):
        if sigma <= 1e-15:
            continue  # as SciPy and CuPy skip such axes
        radius = -(-int(4.0 * sigma + 0.5) // _GPU_TAPS_RADIUS) * _GPU_TAPS_RADIUS
        taps = xp.asarray(_gaussian_taps(sigma, order, max(radius, _GPU_TAPS_RADIUS)))
        out = ndimage.correlate1d(out, taps, axis=axis, mode="reflect")
    return out.copy() if out is level else out  # callers scale the result in place


def _scale_responses(image, sigmas, spacing, ndimage):
    """-sigma^2 lap(G_sigma * image) for each sigma (physical, ascending), each on
    the coarsest grid of an octave pyramid where sigma still spans
    ``_PIXELS_PER_SIGMA`` pixels per axis: a list of (response, decimation per axis).

    The pyramid blurs each axis to ``_ALIAS_BLUR`` of the coarser pixel before
    taking every other sample, and a scale's filter adds only the blur still
    missing, sqrt(sigma^2 - blur^2) (the Gaussian semigroup); the large scales,
    the cost of a full-resolution scale space, then cost little, and the filter
    sizes in pixels repeat from octave to octave."""
    ndim = image.ndim
    xp = get_array_module(image)
    level, factors, blur = image, (1,) * ndim, (0.0,) * ndim
    responses = []
    for sigma in sigmas:
        wanted = tuple(max(f, 1 << max(0, int(math.floor(math.log2(sigma / (s * _PIXELS_PER_SIGMA))))))
                       for s, f in zip(spacing, factors))
        if wanted != factors:
            target = tuple(_ALIAS_BLUR * s * w if w > f else b for s, w, f, b in zip(spacing, wanted, factors, blur))
            extra = tuple(math.sqrt(max(t * t - b * b, 0.0)) / (s * f) for t, b, s, f in zip(target, blur, spacing, factors))
            level = _gaussian(level, extra, (0,) * ndim, ndimage, xp)
            level = level[tuple(slice(None, None, w // f) for w, f in zip(wanted, factors))]
            factors, blur = wanted, target
        pixel = tuple(s * f for s, f in zip(spacing, factors))
        missing = tuple(math.sqrt(max(sigma * sigma - b * b, 0.0)) / p for b, p in zip(blur, pixel))
        hessian = {}
        for i in range(ndim):
            for j in range(i, ndim):
                order = [0] * ndim
                order[i] += 1
                order[j] += 1
                term = _gaussian(level, missing, order, ndimage, xp)
                term *= -(sigma * sigma / (pixel[i] * pixel[j]))
                hessian[i, j] = term.astype(np.float32)
        total = sum(hessian[i, i] for i in range(ndim))
        responses.append((total, factors, hessian))
    return responses


def _scale_space_blobs(image, radii, spacing, xp):
    """(strengths, radii, Hessian eigenvalues descending) of the positive local maxima
    of the normalised LoG over space and scale (3 x ... x 3 in each scale's grid, the
    neighbouring scales sampled at the same place), host arrays; the first and last
    scale only bound."""
    ndimage = ndimage_module(xp)
    ndim = image.ndim
    responses = _scale_responses(image, [r / math.sqrt(ndim) for r in radii], spacing, ndimage)
    largest = [ndimage.maximum_filter(r, size=3, mode="nearest") for r, _, _ in responses]
    strengths, steps, curvatures = [], [], []
    for k in range(1, len(responses) - 1):
        response, factors, hessian = responses[k]
        peaks = (response == largest[k]) & (response > 0)
        interior = xp.zeros_like(peaks)  # a blob against the edge is cut: its scale is wrong
        inner = tuple(slice(1, -1) for _ in range(ndim))
        interior[inner] = peaks[inner]
        where = xp.nonzero(interior)
        if len(where[0]) == 0:
            continue
        centre = response[where]
        keep = xp.ones(centre.shape, dtype=bool)
        around = []
        for j in (k - 1, k + 1):
            other, other_factors, _ = responses[j]
            index = tuple(xp.clip(xp.rint(w * (f / g)).astype(w.dtype), 0, n - 1)
                          for w, f, g, n in zip(where, factors, other_factors, other.shape))
            keep &= centre >= largest[j][index]
            around.append(other[index])
        before, after = around
        # parabola through the three scales (log radius): the peak between them
        curvature = before - 2 * centre + after
        offset = xp.where(curvature < 0, 0.5 * (before - after) / xp.where(curvature < 0, curvature, -1), 0)
        offset = xp.clip(offset, -0.5, 0.5)
        keep = to_host(keep)
        strengths.append(to_host(centre).astype(np.float64)[keep])
        steps.append((k + to_host(offset).astype(np.float64))[keep])
        matrix = np.empty((int(keep.sum()), ndim, ndim))
        for (i, j), term in hessian.items():
            matrix[:, i, j] = matrix[:, j, i] = to_host(term[where])[keep]
        curvatures.append(np.linalg.eigvalsh(matrix)[:, ::-1])
    if not strengths:
        return np.zeros(0), np.zeros(0), np.zeros((0, ndim))
    steps = np.concatenate(steps)
    blob_radii = radii[0] * (radii[1] / radii[0]) ** steps
    return np.concatenate(strengths), blob_radii, np.concatenate(curvatures)


def _semi_axes(blob_radii, curvatures):
    """Semi-axes (ascending) of each blob, from its scale and the eigenvalues
    of the normalised Hessian -sigma^2 H at its maximum (descending).

    A Gaussian blob of per-axis variances s_i^2 seen at scale sigma has
    curvatures mu_i proportional to 1 / A_i, A_i = s_i^2 + sigma^2, and its
    normalised LoG peaks where 1/sigma^2 = sum(1/A_i^2) / sum(1/A_i) +
    sum(1/A_i) / 2. With the ratios rho_i = mu_1 / mu_i = A_i / A_1 read off
    the Hessian, A_1 = sigma^2 (Q/P + P/2), P = sum(1/rho_i), Q = sum(1/rho_i^2).
    A uniform disc or ball of radius R peaks at sigma = R / sqrt(n) with
    s^2 = n sigma^2 / 2, so the semi-axis is sqrt(2) s_i (the disc exactly,
    uniform 2:1 ellipses within 10%)."""
    ndim = curvatures.shape[1]
    sigma2 = (blob_radii / math.sqrt(ndim))[:, None] ** 2
    sharpest = np.maximum(curvatures[:, :1], 1e-12)
    rho = np.clip(sharpest / np.maximum(curvatures, 1e-12 * sharpest), 1.0, _MAX_CURVATURE_RATIO)
    p, q = np.sum(1 / rho, axis=1, keepdims=True), np.sum(1 / rho**2, axis=1, keepdims=True)
    return math.sqrt(2) * np.sqrt(np.maximum(rho * sigma2 * (q / p + p / 2) - sigma2, 0.0))


def _area_weighted_median(strengths, blob_radii, values, ndim: int) -> float:
    """Median of ``values`` over the area (volume) the blobs cover, weighted by
    their response: weight = strength x radius^ndim. Counting blobs instead lets
    the many small blobs of noise and chromatin texture inside the nuclei win
    (H&E: 0.3 of the true radius); they cover little of the image."""
    weights = strengths * blob_radii**ndim
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


AUTO_MAX_FRACTION = 0.25
"""``radius="auto"`` is at most this fraction of the image's smallest spatial extent (physical
units). On the evaluation data the labels' voting radius reaches 0.15 of it (dsb2018's largest
nuclei; 3D stacks in their physical spacing); ``check_radius`` alone allows half the largest."""


def auto_radius(signal, spacing, sign, xp, path: str, *, shape=None, tables_only: bool = False):
    """``radius="auto"``: (voting radius, note) for a grey 2D/3D ``signal`` detected on ``path``
    ('numpy', 'numba' or 'cupy').

    The estimate (:func:`estimate_radius`) is bounded by :data:`AUTO_MAX_FRACTION` of the
    smallest extent of ``shape`` (default the signal's) and by the largest radius whose
    detection fits the memory limit (:func:`ivote.detect.largest_radius`; ``tables_only``:
    the radius' tables alone, for a chunked detection whose blocks are chosen to fit). A radius
    carried by fewer than :data:`MIN_SUPPORT` blobs of that size is unsure. ``note`` says what
    was bounded or unsure ("" when nothing was) and is also warned (``AutoRadiusWarning``).
    """
    radius, support, dropped = _voting_radius_and_support(signal, spacing, sign, None, None, xp)
    return bound_auto_radius(radius, support, tuple(signal.shape) if shape is None else tuple(shape), spacing, path,
                             dropped=dropped, tables_only=tables_only)


def bound_auto_radius(radius, support, shape, spacing, path, *, dropped=False, tables_only=False):
    """:func:`auto_radius`'s bounds and note, for an estimate ``radius`` carried by ``support`` blobs."""
    import warnings

    from ..errors import AutoRadiusWarning
    from ._memory import largest_radius, largest_tables_radius

    notes = []
    if dropped:
        notes.append("sizes carried by fewer than {} blobs were left out".format(MIN_SUPPORT))
    if support < MIN_SUPPORT:
        notes.append(f"unsure: only {support} blob(s) of about that size in the image")
    image_bound = AUTO_MAX_FRACTION * min(n * s for n, s in zip(shape, spacing))
    if radius > image_bound:
        notes.append(f"the estimate {radius:.3g} was above {AUTO_MAX_FRACTION:g} of the image's smallest extent "
                     f"and was lowered to {image_bound:.3g}")
        radius = image_bound
    fits = (largest_tables_radius(len(shape), spacing, radius, path) if tables_only
            else largest_radius(shape, spacing=spacing, backend=path))
    if 0 < fits < radius:
        notes.append(f"the estimate {radius:.3g} would not fit the memory limit and was lowered to {fits:.3g}")
        radius = fits
    note = "; ".join(notes)
    if notes and (support < MIN_SUPPORT or len(notes) > int(dropped)):
        warnings.warn(f"radius='auto' chose {radius:.3g}: {note}; give the radius as a number if the nuclei "
                      "are another size", AutoRadiusWarning, stacklevel=3)
    return radius, note
