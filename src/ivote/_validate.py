"""Input checks and the dtype policy, written once for every stage.

Dtype policy (as scikit-image): float32 stays float32, every other real dtype
(integers, booleans, float16, float64, big-endian) becomes float64 in native
byte order, C-contiguous. GPU kernels may run in float32; that is their choice,
made explicitly where they launch.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from ._backend import get_array_module
from .errors import IvoteError, ParameterTypeError

__all__ = [
    "as_coordinates",
    "as_float_image",
    "check_count",
    "check_finite_range",
    "check_span",
    "check_image",
    "check_positive",
    "check_radius",
    "check_spacing",
    "radius_in_pixels",
]


def check_positive(value, name: str, *, upper: float | None = None, allow_zero=False) -> float:
    """``float(value)``, or a ValueError naming ``name`` and the accepted range."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterTypeError(f"{name} must be a number; got {value!r}") from None
    low_ok = number >= 0 if allow_zero else number > 0
    if not math.isfinite(number) or not low_ok or (upper is not None and number > upper):
        low = "0 <=" if allow_zero else "0 <"
        high = f" <= {upper:g}" if upper is not None else ""
        raise IvoteError(f"{name} must satisfy {low} {name}{high}; got {value!r}")
    return number


MIN_RADIUS_PIXELS = 1.5
"""Smallest nucleus radius, in pixels of the finest axis: a disc of radius 1 holds no
neighbour, so voting gets no offsets and level sets no room."""


def check_radius(radius, shape, spacing) -> float:
    """A nucleus radius in physical units: at least :data:`MIN_RADIUS_PIXELS` pixels of the
    finest axis, at most half the image's largest extent (a nucleus fits in the image)."""
    radius = check_positive(radius, "radius")
    extent = max(n * s for n, s in zip(shape, spacing))
    low, high = MIN_RADIUS_PIXELS * min(spacing), extent / 2
    if not low <= radius <= high:
        unit = "" if all(s == 1 for s in spacing) else f" (in the units of spacing {tuple(spacing)})"
        raise IvoteError(
            f"radius must satisfy {low:g} <= radius <= {high:g}{unit}: at least {MIN_RADIUS_PIXELS:g} pixels, "
            f"at most half the image's largest extent; got {radius:g}"
        )
    return radius


def check_count(value, name: str, *, allow_zero=False) -> int:
    """``value`` as an int (an integer or an integral float such as 300.0), or an error naming ``name``:
    ParameterTypeError (a TypeError and a ValueError) for a non-number, IvoteError for a
    fraction or a number out of range."""
    if isinstance(value, bool) or not isinstance(value, (Integral, Real)):
        raise ParameterTypeError(f"{name} must be an integer; got {value!r}")
    if isinstance(value, Real) and not isinstance(value, Integral):
        if not math.isfinite(value) or value != int(value):
            raise IvoteError(f"{name} must be a whole number; got {value!r}")
    count = int(value)
    if count < (0 if allow_zero else 1):
        raise IvoteError(f"{name} must be an integer >= {0 if allow_zero else 1}; got {value!r}")
    return count


def check_spacing(spacing, ndim: int) -> tuple[float, ...]:
    """Voxel spacing as ``ndim`` positive floats; ``None`` means 1 along every axis."""
    if spacing is None:
        return (1.0,) * ndim
    if isinstance(spacing, Real):
        spacing = (spacing,) * ndim
    spacing = tuple(spacing)
    if len(spacing) != ndim:
        raise IvoteError(
            f"spacing must have one value per spatial axis ({ndim} for this image); "
            f"got {len(spacing)}: {spacing!r}"
        )
    return tuple(check_positive(s, "spacing") for s in spacing)


def check_image(image, *, name: str = "image", ndims=(2, 3), allow_rgb=False, finite=True):
    """Validate an image array and return it as an array of its own module.

    Accepts NumPy and CuPy arrays (and anything ``np.asarray`` takes). Rejects
    the wrong number of dimensions, complex and object dtypes, and NaN/Inf
    (unless ``finite=False``: the caller then checks, e.g. from the image's
    min and max, with :func:`check_finite_range`). RGB (a last axis of 3 or 4
    with ``allow_rgb``) is accepted for 2D images.
    """
    image = _unmasked(image, name)
    xp = get_array_module(image)
    image = xp.asarray(image)
    if image.dtype.kind not in "biuf":
        raise ParameterTypeError(f"{name} must be real-valued (bool, integer or float); got dtype {image.dtype}")
    is_rgb = allow_rgb and image.ndim == 3 and image.shape[-1] in (3, 4) and 2 in ndims
    if image.ndim not in ndims and not is_rgb:
        allowed = " or ".join(f"{n}D" for n in ndims)
        rgb = " (or 2D RGB)" if allow_rgb else ""
        raise IvoteError(f"{name} must be {allowed}{rgb}; got {image.ndim}D with shape {image.shape}")
    if image.size == 0:
        raise IvoteError(f"{name} is empty (shape {image.shape})")
    if finite and image.dtype.kind == "f" and not bool(xp.isfinite(image).all()):
        raise IvoteError(f"{name} contains NaN or infinite values; replace them first (e.g. numpy.nan_to_num)")
    if allow_rgb:
        _warn_layout(image.shape, image.dtype, name, is_rgb, 3 in ndims)
    return image


def _unmasked(image, name: str):
    """A NumPy masked array's data when nothing is masked; refused (IvoteError) when something is:
    the methods have no notion of missing pixels, and ignoring the mask would use what it hides."""
    if not isinstance(image, np.ma.MaskedArray):
        return image
    masked = int(np.ma.count_masked(image))
    if masked == 0:
        return np.asarray(image.data)
    raise IvoteError(f"{name} is a masked array with {masked} masked pixel(s): the mask cannot be honoured (the "
                     f"masked pixels would be read as they are); fill them first, e.g. {name}.filled({name}.min()) "
                     f"for a dark background, or crop to the unmasked region")


def _warn_layout(shape, dtype, name: str, is_rgb: bool, volumes: bool) -> None:
    """An array has no metadata: say which reading was taken where the shape has two
    (``ivote.errors.LayoutWarning``); files name their axes (``--axes``) instead."""
    import warnings

    from .errors import LayoutWarning

    if is_rgb and np.dtype(dtype) != np.uint8 and min(shape[:2]) > 4:
        warnings.warn(f"{name} of shape {tuple(shape)} ({np.dtype(dtype)}) is read as a 2D RGB image (colour last; "
                      f"H&E unless channel= is given); if it is a z stack of {shape[-1]} planes pass "
                      f"numpy.moveaxis({name}, -1, 0), if it holds channels pass one of them",
                      LayoutWarning, stacklevel=4)
    elif volumes and len(shape) == 3 and shape[0] in (3, 4) and min(shape[1:]) > 4:
        warnings.warn(f"{name} of shape {tuple(shape)} is read as a z stack of {shape[0]} planes (Z, Y, X); if it "
                      f"is a colour image with the colour first pass numpy.moveaxis({name}, 0, -1), if it holds "
                      "channels pass one of them", LayoutWarning, stacklevel=4)


def check_finite_range(extremes, *, name: str = "image") -> None:
    """Raise the NaN/Inf error of :func:`check_image` unless the min and max
    of an image (NaN propagates through both) are all finite."""
    if not all(math.isfinite(float(v)) for v in extremes):
        raise IvoteError(f"{name} contains NaN or infinite values; replace them first (e.g. numpy.nan_to_num)")
    check_span(extremes[0], extremes[1], name=name)


def check_span(low, high, *, name: str = "image") -> None:
    """Refuse values whose range ``high - low`` overflows float64 (each value is finite, but
    normalising by their difference would give NaN: no cell, no label, without a word)."""
    low, high = float(low), float(high)
    if not math.isfinite(high - low):
        raise IvoteError(f"{name} values span {low:g} to {high:g}, a range beyond float64's largest number "
                         f"(1.8e+308); rescale it first, e.g. {name} / abs({name}).max()")


def as_coordinates(values, name: str, ndim: int | None = None) -> np.ndarray:
    """Point coordinates as a host float64 array, or an IvoteError naming ``name`` for ragged rows
    or values that are not numbers (instead of NumPy's own messages)."""
    from ._backend import to_host

    try:
        return np.asarray(to_host(values), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        form = f"an (N, {ndim}) array" if ndim else "an (N, ndim) array"
        problem = "rows of different lengths" if "inhomogeneous" in str(exc) or "sequence" in str(exc) else str(exc)
        raise IvoteError(f"{name} must be {form} of numbers (one row per point); got {problem}") from None


def as_float_image(image, *, dtype=None):
    """The image as native-endian, C-contiguous floats (the dtype policy above).

    ``dtype`` forces a float dtype (e.g. float32 for a GPU kernel).
    """
    xp = get_array_module(image)
    if dtype is None:
        dtype = np.float32 if image.dtype == np.float32 else np.float64
    dtype = np.dtype(dtype).newbyteorder("=")
    return xp.ascontiguousarray(image.astype(dtype, copy=False))


def radius_in_pixels(radius: float, spacing: tuple[float, ...]) -> tuple[float, ...]:
    """Radius in physical units converted to pixels along each axis."""
    return tuple(radius / s for s in spacing)
