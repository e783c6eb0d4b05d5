"""Input checks and the dtype policy, written once for every stage.

Dtype policy (as scikit-image): float32 stays float32, every other real dtype
(integers, booleans, float16, float64, big-endian) becomes float64 in native
byte order, C-contiguous. GPU kernels may run in float32; that is their choice,
made explicitly where they launch.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from ._backend import get_array_module

__all__ = [
    "as_float_image",
    "check_finite_range",
    "check_image",
    "check_positive",
    "check_spacing",
    "radius_in_pixels",
]


def check_positive(value, name: str, *, upper: float | None = None, allow_zero=False) -> float:
    """``float(value)``, or a ValueError naming ``name`` and the accepted range."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number; got {value!r}") from None
    low_ok = number >= 0 if allow_zero else number > 0
    if not math.isfinite(number) or not low_ok or (upper is not None and number > upper):
        low = "0 <=" if allow_zero else "0 <"
        high = f" <= {upper:g}" if upper is not None else ""
        raise ValueError(f"{name} must satisfy {low} {name}{high}; got {value!r}")
    return number


def check_spacing(spacing, ndim: int) -> tuple[float, ...]:
    """Voxel spacing as ``ndim`` positive floats; ``None`` means 1 along every axis."""
    if spacing is None:
        return (1.0,) * ndim
    if isinstance(spacing, Real):
        spacing = (spacing,) * ndim
    spacing = tuple(spacing)
    if len(spacing) != ndim:
        raise ValueError(
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
    xp = get_array_module(image)
    image = xp.asarray(image)
    if image.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real-valued (bool, integer or float); got dtype {image.dtype}")
    is_rgb = allow_rgb and image.ndim == 3 and image.shape[-1] in (3, 4) and 2 in ndims
    if image.ndim not in ndims and not is_rgb:
        allowed = " or ".join(f"{n}D" for n in ndims)
        rgb = " (or 2D RGB)" if allow_rgb else ""
        raise ValueError(f"{name} must be {allowed}{rgb}; got {image.ndim}D with shape {image.shape}")
    if image.size == 0:
        raise ValueError(f"{name} is empty (shape {image.shape})")
    if finite and image.dtype.kind == "f" and not bool(xp.isfinite(image).all()):
        raise ValueError(f"{name} contains NaN or infinite values; replace them first (e.g. numpy.nan_to_num)")
    return image


def check_finite_range(extremes, *, name: str = "image") -> None:
    """Raise the NaN/Inf error of :func:`check_image` unless the min and max
    of an image (NaN propagates through both) are all finite."""
    if not all(math.isfinite(float(v)) for v in extremes):
        raise ValueError(f"{name} contains NaN or infinite values; replace them first (e.g. numpy.nan_to_num)")


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
