"""The memory a detection will take, from its shape and radius alone, and the largest radius that fits.

A detection's memory has two parts. One grows with the image: copies of the
image, the blur, the gradient, the vote field and the voters' records, a fixed
number of bytes per pixel on each backend. The other grows with the radius and
not with the image: the voting ball holds K ~ r^ndim offsets, the cone tables
of every pass list for each of up to 6144 direction bins the offsets of its
cone (``_cone_tables``), and the compiled CPU path's run tables
(``_run_tables.discrete_runs``) test every class direction (C = K of them)
against every offset of its cone, C x K x share pairs per pass: r^4 in 2D and
r^6 in 3D, before they are cut into runs. At 2D radius 119 px that is about
21 GB on the CPU while the image's part of a 256 x 256 image is 6 MB.

:func:`detection_memory` adds both parts from closed-form counts (the ball's
lattice points row by row, the cone shares of every pass, the bins of every
pass's table), without building any table; the per-pixel and per-pair bytes
were measured with ``tracemalloc`` (2D radius 4-48 on 200 x 200, 3D radius
4-12 on 40^3; ``tests/core/reliability/test_rel_memory_bound.py`` checks the
estimate is above the measured peak and within a few times of it).
:func:`largest_radius` searches the radius whose estimate meets a limit.
"""

from __future__ import annotations

import math

import numpy as np

from .._limits import format_bytes, max_memory
from .._validate import check_positive, check_spacing
from ..errors import IvoteError, ResourceLimitError

__all__ = ["check_detection_memory", "check_radius_memory", "detection_memory", "largest_radius", "memory_limit_for"]

_PER_PIXEL = {"numba": 96, "numpy": 280, "cupy": 72}
"""Bytes per pixel beyond the input (measured on the CPU paths; on the GPU: two float64 work
arrays, the voters' uint16 weight and int16 direction, two uint32 vote fields, the maxima flags)."""
_FIXED = {"numba": 16 * 2**20, "numpy": 160 * 2**20, "cupy": 64 * 2**20}
"""Bytes of bounded buffers (batched votes and tests; on the GPU the pools' first blocks)."""
_RUN_PAIR_BYTES = {2: 28, 3: 56}
"""Bytes per (class, offset) pair of the widest pass while ``discrete_runs`` sorts and cuts them,
with the runs of every pass kept (measured asymptote 23.4 B in 2D, 47 B in 3D)."""
_ENTRY_BYTES = {"numba": 12, "numpy": 12, "cupy": 4}
"""Bytes per cone-table entry kept: the packed int32 offset, and on the CPU its int64 index."""
_TABLE_CHUNK = 1 << 24  # bins x offsets tested at once while a cone table is built (_cone_tables._CHUNK)
_TABLE_CHUNK_BYTES = 10  # ... a float64 product and a bool per test
_RUN_CHUNK = 1 << 22  # _run_tables._CHUNK: class x offset tests at once ...
_RUN_CHUNK_BYTES = 24  # ... of float32 products and bools
_MAX_CELLS = {2: 256, 3: 32}
_ANGLE_FRACTION = 3.0
_MARGIN = 1e-3
_INITIAL_RADIUS = {2: 5.0, 3: 8.0}

BACKENDS = ("numpy", "numba", "cupy")


def _resolve_backend(backend) -> str:
    if backend is None or backend == "auto":
        from .._backend import default_xp, use_numba

        xp = default_xp()
        if xp is not np:
            return "cupy"
        return "numba" if use_numba(np, "auto") else "numpy"
    if backend not in BACKENDS:
        raise IvoteError(f"backend must be one of 'auto', 'numpy', 'numba', 'cupy' or None; got {backend!r}")
    return backend


def _check_shape(shape) -> tuple:
    try:
        shape = tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise IvoteError(f"shape must be a tuple of 2 or 3 positive integers (the spatial shape); got {shape!r}") from None
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise IvoteError(f"shape must be a tuple of 2 or 3 positive integers (the spatial shape); got {shape!r}")
    return shape


def ball_offsets(radius: float, spacing: tuple) -> int:
    """Offsets of the voting disc/ball (``make_plan(...).offsets``: 0 < |offset| < radius, in the
    units of ``spacing``), counted row by row without building them."""
    window = [int(math.floor(radius / s)) + 1 for s in spacing]
    lead = np.meshgrid(*[np.arange(-w, w + 1) * s for w, s in zip(window[:-1], spacing[:-1])], indexing="ij")
    left = radius * radius - sum(g.astype(np.float64) ** 2 for g in lead)
    inside = left > 0
    # along the last axis: |dx| * s < sqrt(left), dx integer
    half = np.where(inside, np.ceil(np.sqrt(np.where(inside, left, 0)) / spacing[-1]) - 1, -1)
    count = int(np.sum(2 * half + 1, where=inside))
    return max(count - 1, 0)  # without the centre


def _cone_share(half_angle: float, ndim: int) -> float:
    half_angle = min(half_angle, math.pi)
    return half_angle / math.pi if ndim == 2 else (1 - math.cos(half_angle)) / 2


def _passes(radius_px: float):
    from ._plan import cone_angles

    return cone_angles(radius_px)


def _bins(half_angle: float, ndim: int) -> tuple[int, int]:
    reach = 1.0 if ndim == 2 else math.sqrt(2.0)
    cells = int(min(max(math.ceil(reach * _ANGLE_FRACTION / half_angle), 1), _MAX_CELLS[ndim]))
    return cells, (4 * cells if ndim == 2 else 6 * cells * cells)


def _radius_bytes(radius: float, spacing: tuple, path: str) -> float:
    """Bytes of the tables that grow with the radius (not with the image)."""
    ndim = len(spacing)
    offsets = ball_offsets(radius, spacing)
    if offsets == 0:
        return 0.0
    radius_px = radius / min(spacing)
    plan_bytes = offsets * (8 * ndim + 4 * ndim + 4 + 2 * ndim) * 3  # the plan's arrays and their temporaries
    entries, build = 0.0, 0.0
    pairs = []
    classes = offsets
    if radius_px < _INITIAL_RADIUS[ndim]:
        classes += ball_offsets(_INITIAL_RADIUS[ndim] * min(spacing), spacing)
    for phi in _passes(radius_px):
        alpha = phi / 2
        cells, n_bins = _bins(alpha, ndim)
        reach = (1.0 if ndim == 2 else math.sqrt(2.0)) / cells
        entries += n_bins * offsets * min(1.0, _cone_share(alpha + reach + _MARGIN, ndim))
        build = max(build, min(n_bins * offsets, _TABLE_CHUNK) * _TABLE_CHUNK_BYTES)
        pairs.append(classes * offsets * _cone_share(alpha, ndim))
    total = plan_bytes + entries * _ENTRY_BYTES[path] + build
    if path == "numba":
        total += _RUN_PAIR_BYTES[ndim] * sum(pairs) + min(2 * max(pairs), _RUN_CHUNK) * _RUN_CHUNK_BYTES
    if path == "cupy":  # the direction quantisation and the plan stay on the host; the tables' build is on the GPU
        total += offsets * 16  # cone-table rows and columns of the nonzero() of each chunk
    return float(total)


def detection_memory(shape, radius: float, *, spacing=None, backend: str | None = None) -> int:
    """Peak bytes a detection (:func:`~ivote.detect.iterative_voting`) of an image of spatial
    ``shape`` at ``radius`` allocates on ``backend``, beyond the input image.

    Parameters
    ----------
    shape : tuple of int
        Spatial shape ``(Y, X)`` or ``(Z, Y, X)`` (without the colour axis of an RGB image).
    radius : float
        Voting radius in the units of ``spacing``.
    spacing : float or tuple, optional
        Pixel size per spatial axis (default 1).
    backend : {None, 'auto', 'numpy', 'numba', 'cupy'}
        None or 'auto': the backend ``iterative_voting`` picks for a NumPy image
        (``IVOTE_BACKEND``). For 'cupy' the bytes are GPU memory.

    Returns
    -------
    int
        Bytes: host memory on 'numpy'/'numba', GPU memory on 'cupy'. The estimate is an
        upper bound of the measured peak (``tracemalloc``), within about 2x of it where the
        radius' tables dominate, from counts only (nothing is allocated).

    Notes
    -----
    The radius' part grows as r^4 in 2D and r^6 in 3D on the compiled CPU path (its run
    tables), r^ndim x the direction bins on the others; see ``docs/reliability.md``.

    Examples
    --------
    >>> from ivote.detect import detection_memory
    >>> small = detection_memory((256, 256), 7, backend="numba")
    >>> large = detection_memory((256, 256), 119, backend="numba")
    >>> small < 2**28 < 2**34 < large
    True
    """
    shape = _check_shape(shape)
    spacing = check_spacing(spacing, len(shape))
    radius = check_positive(radius, "radius")
    path = _resolve_backend(backend)
    pixels = math.prod(shape)
    return int(_PER_PIXEL[path] * pixels + _FIXED[path] + _radius_bytes(radius, spacing, path))


def memory_limit_for(backend: str | None = None) -> float:
    """The default memory limit of a detection on ``backend``: ``IVOTE_MAX_MEMORY`` (default 75 %
    of the machine's memory) on the host; on the GPU the device's free memory plus what CuPy's
    pool holds, at most ``IVOTE_MAX_MEMORY``."""
    path = _resolve_backend(backend)
    limit = max_memory()
    if path == "cupy":
        from .._backend import gpu_memory_available

        limit = min(limit, gpu_memory_available())
    return limit


def image_radius_bound(shape, spacing) -> float:
    """The largest radius a detection accepts for this image (``check_radius``: half its largest
    extent), in the units of ``spacing``."""
    return max(n * s for n, s in zip(shape, spacing)) / 2


def largest_radius(shape, *, spacing=None, memory_limit: float | None = None, backend: str | None = None) -> float:
    """The largest radius (units of ``spacing``) whose detection of an image of spatial ``shape``
    fits ``memory_limit`` bytes (default :func:`memory_limit_for`) and the image's own bound (half
    its largest extent); 0.0 when not even a one-pixel radius fits.

    Examples
    --------
    >>> from ivote.detect import detection_memory, largest_radius
    >>> r = largest_radius((256, 256), memory_limit=2**30, backend="numba")
    >>> 30 < r < 128 and detection_memory((256, 256), r, backend="numba") <= 2**30
    True
    """
    shape = _check_shape(shape)
    spacing = check_spacing(spacing, len(shape))
    path = _resolve_backend(backend)
    limit = memory_limit_for(path) if memory_limit is None else check_positive(memory_limit, "memory_limit")
    return _largest(shape, image_radius_bound(shape, spacing), spacing, limit, path)


def _largest(shape, high: float, spacing, limit: float, path: str) -> float:
    """The largest radius up to ``high`` whose estimate on ``shape`` meets ``limit``; 0.0 if none."""
    low = min(spacing)  # MIN_RADIUS_PIXELS is 1 pixel of the finest axis
    if _estimate(shape, low, spacing, path) > limit:
        return 0.0
    if _estimate(shape, high, spacing, path) <= limit:
        return float(high)
    for _ in range(40):  # bisection to about 1e-12 of the range; the estimate grows with the radius
        middle = (low + high) / 2
        if _estimate(shape, middle, spacing, path) <= limit:
            low = middle
        else:
            high = middle
        if high - low <= 1e-3 * min(spacing):
            break
    return float(low)


def _estimate(shape, radius, spacing, path) -> float:
    return _PER_PIXEL[path] * math.prod(shape) + _FIXED[path] + _radius_bytes(radius, spacing, path)


def _round_down(value: float, digits: int = 3) -> float:
    """``value`` rounded down to ``digits`` significant digits (a radius quoted as fitting must fit)."""
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(value)))
    return math.floor(value * scale) / scale


def check_detection_memory(what: str, shape, radius: float, spacing, path: str) -> None:
    """Refuse (ResourceLimitError) before anything is allocated when the detection's estimate
    exceeds the limit; the message names ``radius``, the estimate, the limit and the largest
    radius that fits."""
    limit = memory_limit_for(path)
    if not math.isfinite(limit):
        return
    estimate = _estimate(tuple(shape), radius, tuple(spacing), path)
    if estimate <= limit:
        return
    fits = largest_radius(shape, spacing=spacing, memory_limit=limit, backend=path)
    where = "GPU memory" if path == "cupy" else "memory"
    fit_text = (f"the largest radius that fits is {_round_down(fits):g}" if fits > 0
                else "no radius fits; use a crop or tiles of the image")
    raise ResourceLimitError(
        f"{what}: radius {radius:g} would take about {format_bytes(estimate)} of {where}, above the limit of "
        f"{format_bytes(limit)} (IVOTE_MAX_MEMORY); {fit_text}, or raise the limit (see docs/reliability.md)"
    )


def largest_tables_radius(ndim: int, spacing, high: float, path: str) -> float:
    """The largest radius up to ``high`` whose tables alone (a block of one pixel) fit the limit."""
    return _largest((1,) * ndim, high, tuple(spacing), memory_limit_for(path), path)


def check_radius_memory(what: str, ndim: int, radius: float, spacing, path: str) -> None:
    """As :func:`check_detection_memory` for the tables that grow with the radius alone (the part
    every block of a chunked detection builds again), before the blocks are chosen."""
    check_detection_memory(what, (1,) * ndim, radius, spacing, path)
