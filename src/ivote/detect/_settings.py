"""The checks a detection makes before any work: its settings (spacing, polarity, blur,
contrast floor, threshold rule), every axis long enough for the noise estimate, and the votes,
blur taps and host memory it will need against ``ivote._limits``. ``detect_chunked`` makes the
same checks on the whole image and on its blocks."""

from __future__ import annotations

import math

import numpy as np

from .._validate import check_positive, check_spacing
from ..errors import IvoteError
from ._thresholds import _resolve_rule

_DEFAULT_BLUR_PIXELS = 2.0
_MIN_AXIS_PIXELS = 3
_CPU_MEMORY = {"numba": (96, 16 * 2**20), "numpy": (256, 128 * 2**20)}
"""Host memory of a CPU detection beyond its input: (bytes per pixel, fixed bytes). Measured with
tracemalloc (2D 384² and 1024², 3D 40³ and 96³): Numba 66-94 B/pixel (float64 copies, blur,
gradient, votes and their sparse table in a frame padded by the window, the voters' tables); the
NumPy path 240-275 B/pixel at 1024² and 96³ plus buffers of its batched votes (87-112 MiB on small
images)."""


def cpu_detection_memory(pixels: int, path: str) -> float:
    """Host bytes a CPU detection (``path`` 'numba' or 'numpy') of ``pixels`` pixels allocates."""
    per_pixel, fixed = _CPU_MEMORY[path]
    return per_pixel * pixels + fixed


def check_settings(shape, spacing, polarity, blur, min_contrast, threshold) -> tuple:
    """The checks of :func:`iterative_voting`'s settings other than the radius, for an image of
    spatial ``shape`` (``ivote.distributed.detect_chunked`` makes them on the whole image's):
    returns ``(spacing, blur, min_contrast)``, ``blur`` None becoming its default."""
    spacing = check_spacing(spacing, len(shape))
    _check_thin_axes(shape, len(shape))
    if polarity not in ("bright", "dark"):
        raise ValueError(f"polarity must be 'bright' or 'dark'; got {polarity!r}")
    if blur is None:
        blur = _DEFAULT_BLUR_PIXELS * min(spacing)
    blur = check_positive(blur, "blur", allow_zero=True, upper=max(n * s for n, s in zip(shape, spacing)))
    min_contrast = check_positive(min_contrast, "min_contrast", allow_zero=True)
    _resolve_rule(threshold, np.zeros(0), np.zeros(0), min_contrast)  # validate before the work
    return spacing, blur, min_contrast


def _check_thin_axes(shape, ndim) -> None:
    """The noise behind the contrast test is measured on 3^ndim boxes: every axis needs 3 pixels."""
    for axis, n in enumerate(shape):
        if n < _MIN_AXIS_PIXELS:
            hint = ("; for one plane pass a 2D (Y, X) array, e.g. image[0]" if ndim == 3 and axis == 0
                    else "")
            raise IvoteError(
                f"image has {n} pixel(s) along axis {axis} (shape {tuple(shape)}); detection needs at least "
                f"{_MIN_AXIS_PIXELS} along every axis to measure the noise{hint}"
            )


def _cone_votes_per_voter(plan) -> float:
    """Offsets a voter's cone holds, summed over the passes (the cone's share of the disc/ball)."""
    if plan.ndim == 2:
        share = sum(phi / (2 * math.pi) for phi in plan.cone_angles)
    else:
        share = sum((1 - math.cos(phi / 2)) / 2 for phi in plan.cone_angles)
    return len(plan.offsets) * share


def _check_work(shape, plan, spacing, blur, gpu, cpu_path: str = "numba") -> None:
    """Refuse (ResourceLimitError) a detection whose estimated votes and blur taps or host
    memory exceed the limits of ``ivote._limits``."""
    from .._limits import check_budget

    pixels = math.prod(shape)
    taps = sum(8 * blur / s + 1 for s in spacing) if blur > 0 else 0  # the Gaussian's 4 sigma on either side
    work = pixels * (_cone_votes_per_voter(plan) + taps)
    check_budget(
        f"iterative_voting on {'x'.join(map(str, shape))} pixels with radius {plan.radius:g} "
        f"({len(plan.offsets)} offsets, {plan.n_passes} passes)",
        work=work, memory=None if gpu else cpu_detection_memory(pixels, cpu_path), gpu=gpu,
        advice="use a smaller radius or blur, or a crop of the image",
    )

