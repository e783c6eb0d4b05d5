"""Colour deconvolution of H&E images: the hematoxylin density channel, with
fixed (Ruifrok) or per-image (Macenko) stain vectors."""

from __future__ import annotations

import math

import numpy as np

from .._backend import get_array_module, to_host
from .._typing import Array, ArrayLike

__all__ = ["GREY_RGB_NOTE", "hematoxylin_density", "is_grey_rgb", "spatial_signal", "stain_vectors"]

# Ruifrok & Johnston's stain matrix, column 0 of skimage.color.hed_from_rgb
_HEMATOXYLIN_FROM_RGB = (1.87798274, -0.06590806, -0.60190736)
_LOG_FLOOR = 1e-6  # as skimage.color.separate_stains: avoids log(0)
# Ruifrok & Johnston's optical-density vectors (rows of skimage.color.rgb_from_hed)
_RUIFROK_HE = np.array([[0.65, 0.70, 0.29], [0.07, 0.99, 0.11]])
_RUIFROK_HE /= np.linalg.norm(_RUIFROK_HE, axis=1, keepdims=True)
_MACENKO_MIN_DENSITY = 0.15  # optical density (natural log) below which a pixel is background
_MACENKO_PERCENTILE = 1.0  # robust extremes of the stain angles, in percent
_MACENKO_SAMPLE = 2 ** 18  # pixels used to fit the vectors (a fixed, even grid)


def rgb_full_scale(values) -> float:
    """The value of full intensity of an RGB image that is not uint8: the smallest of 1,
    255 and 65535 that holds its maximum (float 0..1; float or integers 0..255 or
    0..65535, as 8-bit data often comes in wider types), else its maximum."""
    high = float(values.max()) if values.size else 1.0
    for full in (1.0, 255.0, 65535.0):
        if high <= full:
            return full
    return high


def _unit_rgb(rgb, xp):
    """RGB in [0, 1]: uint8 by 255, any other type by its real range (:func:`rgb_full_scale`)."""
    rgb = xp.asarray(rgb)[..., :3]
    if rgb.dtype == np.uint8:
        return rgb.astype(np.float64) / 255.0
    values = rgb.astype(np.float64)
    return values / rgb_full_scale(values)


def _optical_density(unit_rgb, xp):
    """-ln(I / I0) per channel, I0 = 1 (white), floored at 1/255 of white."""
    return -xp.log(xp.clip(unit_rgb, 1.0 / 255.0, 1.0))


def stain_vectors(rgb: ArrayLike | Array, *, min_density: float = _MACENKO_MIN_DENSITY,
                  percentile: float = _MACENKO_PERCENTILE) -> np.ndarray:
    """Hematoxylin and eosin optical-density vectors of an H&E image (Macenko).

    The optical densities of the stained pixels lie close to the plane spanned
    by the two stains; the plane is that of their two main principal
    directions, and the stain vectors are the directions in it at the
    ``percentile`` and ``100 - percentile`` percentiles of the pixels' angles
    (robust extremes). Hematoxylin is the one absorbing more red.

    Parameters
    ----------
    rgb : (Y, X, 3|4) array
        NumPy or CuPy; integers are scaled by their dtype's maximum, floats are
        taken as [0, 1] (white = 1); alpha is ignored.
    min_density : float
        Pixels whose optical density (natural log, Euclidean norm over the
        channels) is below this are background and not used. (Macenko's
        original drops pixels below it in any channel, which drops the eosin-
        only pixels: eosin hardly absorbs red.)
    percentile : float
        Robust extreme angle, in percent (0 < percentile < 50).

    Returns
    -------
    (2, 3) float64 NumPy array
        Unit optical-density vectors (R, G, B), hematoxylin first. Ruifrok's
        fixed vectors when fewer than 100 stained pixels (or a single colour)
        are found.

    References
    ----------
    .. [1] M. Macenko et al., "A method for normalizing histology slides for
           quantitative analysis", ISBI 2009, 1107-1110.
           :doi:`10.1109/ISBI.2009.5193250`

    Examples
    --------
    >>> import numpy as np
    >>> stains = np.array([[0.65, 0.70, 0.29], [0.07, 0.99, 0.11]])
    >>> stains /= np.linalg.norm(stains, axis=1, keepdims=True)
    >>> amounts = np.random.default_rng(0).uniform(0, 1.5, (64, 64, 2))
    >>> rgb = np.exp(-amounts @ stains)
    >>> bool(np.allclose(stain_vectors(rgb), stains, atol=0.02))
    True
    """
    if not 0 < percentile < 50:
        raise ValueError(f"percentile must satisfy 0 < percentile < 50; got {percentile!r}")
    if not min_density >= 0:
        raise ValueError(f"min_density must satisfy 0 <= min_density; got {min_density!r}")
    xp = get_array_module(rgb)
    unit = _unit_rgb(rgb, xp)
    flat = unit.reshape(-1, 3)
    step = max(1, flat.shape[0] // _MACENKO_SAMPLE)
    return _fit_stain_vectors(to_host(_optical_density(flat[::step], xp)), min_density, percentile)


def _fit_stain_vectors(density, min_density, percentile) -> np.ndarray:
    """Macenko's fit on sampled optical densities (N, 3): see :func:`stain_vectors`."""
    stained = density[np.linalg.norm(density, axis=1) >= min_density]
    if len(stained) < 100:
        return _RUIFROK_HE.copy()
    _, eigenvectors = np.linalg.eigh(np.cov(stained, rowvar=False))
    plane = eigenvectors[:, [2, 1]]  # the two largest
    plane *= np.where(plane.sum(axis=0) < 0, -1.0, 1.0)  # densities are positive: point into them
    coords = stained @ plane
    angles = np.arctan2(coords[:, 1], coords[:, 0])
    low, high = np.percentile(angles, [percentile, 100 - percentile])
    if not high > low:
        return _RUIFROK_HE.copy()
    first = plane @ np.array([np.cos(low), np.sin(low)])
    second = plane @ np.array([np.cos(high), np.sin(high)])
    vectors = np.stack([first, second])
    vectors *= np.where(vectors.sum(axis=1, keepdims=True) < 0, -1.0, 1.0)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    if vectors[0, 0] < vectors[1, 0]:  # hematoxylin absorbs more red than eosin
        vectors = vectors[::-1]
    return np.ascontiguousarray(vectors)


def hematoxylin_density(rgb: ArrayLike | Array, stains: str | ArrayLike | None = None) -> Array:
    """Hematoxylin optical density of an RGB(A) image, high in nuclei.

    With ``stains=None``, the same arithmetic as
    ``skimage.color.rgb2hed(rgb)[..., 0]`` (Beer-Lambert optical density times
    Ruifrok's fixed stain separation matrix, clipped at 0), written element by
    element so that it runs unchanged on NumPy and CuPy arrays. With
    ``stains="auto"`` the stain vectors are estimated from the image
    (:func:`stain_vectors`, Macenko) and the density is the hematoxylin
    amount of the least-squares unmixing into those two stains, clipped at 0;
    a (2, 3) array gives the hematoxylin and eosin vectors directly.

    Parameters
    ----------
    rgb : (Y, X, 3) or (Y, X, 4) array
        uint8 is divided by 255; any other type by its real range: float 0..1, float or
        integers 0..255 or 0..65535 (:func:`rgb_full_scale`); an alpha channel is ignored.
    stains : None, 'auto' or (2, 3) array

    Returns
    -------
    (Y, X) float64 array of the same module as ``rgb``.

    Examples
    --------
    >>> import numpy as np
    >>> from skimage.color import rgb2hed
    >>> rgb = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    >>> bool(np.allclose(hematoxylin_density(rgb), rgb2hed(rgb)[..., 0]))
    True
    """
    xp = get_array_module(rgb)
    if stains is None:
        if xp is np and np.asarray(rgb).dtype == np.uint8:
            return _density_by_table(rgb, _ruifrok_optical, _HEMATOXYLIN_FROM_RGB)
        unit = _unit_rgb(rgb, xp)
        optical = xp.log(xp.maximum(unit, _LOG_FLOOR)) / np.log(_LOG_FLOOR)
        m0, m1, m2 = _HEMATOXYLIN_FROM_RGB
        density = optical[..., 0] * m0 + optical[..., 1] * m1 + optical[..., 2] * m2
        return xp.maximum(density, 0.0)
    if isinstance(stains, str):
        if stains != "auto":
            raise ValueError(f"stains must be None, 'auto' or a (2, 3) array; got {stains!r}")
        stains = stain_vectors(rgb)
    stains = np.asarray(to_host(stains) if not isinstance(stains, np.ndarray) else stains, dtype=np.float64)
    if stains.shape != (2, 3) or not np.all(np.isfinite(stains)) or np.linalg.matrix_rank(stains) < 2:
        raise ValueError(f"stains must be a (2, 3) array of two independent optical-density vectors; got {stains!r}")
    unmix = np.linalg.pinv(stains)[:, 0]  # optical density -> hematoxylin amount (least squares)
    if xp is np and np.asarray(rgb).dtype == np.uint8:
        return _density_by_table(rgb, lambda unit: _optical_density(unit, np), unmix)
    optical = _optical_density(_unit_rgb(rgb, xp), xp)
    m0, m1, m2 = (float(v) for v in unmix)
    density = optical[..., 0] * m0 + optical[..., 1] * m1 + optical[..., 2] * m2
    return xp.maximum(density, 0.0)


def _ruifrok_optical(unit):
    return np.log(np.maximum(unit, _LOG_FLOOR)) / np.log(_LOG_FLOOR)


def _density_by_table(rgb, optical, weights):
    """``max(optical(R) w0 + optical(G) w1 + optical(B) w2, 0)`` of uint8 RGB through one 256-entry
    table per channel: the same float64 products and sums as element by element (bit for bit),
    without a logarithm per pixel."""
    unit = np.arange(256, dtype=np.float64) / 255.0
    tables = np.stack([optical(unit) * float(w) for w in weights])
    rgb = np.asarray(rgb)
    density = np.empty(rgb.shape[:-1], dtype=np.float64)
    if rgb.size:
        _table_density(rgb.reshape(-1, rgb.shape[-1]), tables, density.reshape(-1))
    return density


def _table_density_loop(rgb, tables, out):
    """out[i] = max(t0[r] + t1[g] + t2[b], 0) per pixel (the NumPy expression's order of sums)."""
    for i in range(rgb.shape[0]):
        value = tables[0, rgb[i, 0]] + tables[1, rgb[i, 1]] + tables[2, rgb[i, 2]]
        out[i] = value if value > 0.0 else 0.0


def _table_density(rgb, tables, out):
    global _table_density_compiled
    if _table_density_compiled is None:
        from numba import njit

        _table_density_compiled = njit(nogil=True, cache=True)(_table_density_loop)
    _table_density_compiled(rgb, tables, out)


_table_density_compiled = None


def reads_as_rgb(shape) -> bool:
    """Whether detection reads an array of ``shape`` as RGB(A): (Y, X, 3|4)."""
    return len(shape) == 3 and shape[-1] in (3, 4)


GREY_RGB_NOTE = ("is RGB with red = green = blue (a grey image saved as colour); it is read as H&E "
                 "(hematoxylin density), so the nuclei found are not the grey image's")


def is_grey_rgb(rgb, *, most_pixels: int | None = None) -> bool:
    """Whether an RGB(A) array (colour last; NumPy, CuPy or Dask) holds a grey image: red = green =
    blue everywhere, e.g. a fluorescence image exported as 'RGB Color' (:data:`GREY_RGB_NOTE`).
    With ``most_pixels``, only a regular grid of at most about that many pixels is compared (a
    colour image differs almost everywhere); a Dask array is read once, not once per colour.

    >>> is_grey_rgb(np.dstack([np.eye(3)] * 3)), is_grey_rgb(np.dstack([np.eye(3), np.eye(3), 1 - np.eye(3)]))
    (True, False)
    """
    if np.ndim(rgb) < 3 or np.shape(rgb)[-1] < 3:
        return False
    if most_pixels is not None:
        if most_pixels < 1:
            raise ValueError(f"most_pixels must be a positive integer; got {most_pixels}")
        step = math.ceil(math.sqrt(math.prod(np.shape(rgb)[:-1]) / most_pixels))
        rgb = rgb[..., ::step, ::step, :]
    rgb = to_host(rgb[..., :3])
    red, green, blue = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return bool(np.array_equal(red, green) and np.array_equal(red, blue))


def spatial_signal(image, channel, xp, stains=None):
    """The 2D/3D grayscale signal to detect on, and whether it came from RGB
    (``stains``: as :func:`hematoxylin_density`'s)."""
    is_rgb = reads_as_rgb(image.shape)
    if channel is not None:
        if not is_rgb:
            raise ValueError(f"channel can only be given for RGB(A) images (Y, X, 3|4); image has shape {image.shape}")
        if isinstance(channel, bool) or not isinstance(channel, (int, np.integer)) or not 0 <= channel < image.shape[-1]:
            raise ValueError(f"channel must be an integer 0 <= channel < {image.shape[-1]}; got {channel!r}")
        return image[..., int(channel)], True
    if is_rgb:
        return hematoxylin_density(image, stains=stains), True
    return image, False
