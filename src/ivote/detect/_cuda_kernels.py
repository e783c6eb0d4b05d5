"""The detection's CUDA kernels (``ivote/kernels/ivote.cu``) loaded per GPU and
variant, their launch geometry, and the slots of the statistics array they share.
Part of the GPU detection (``_cuda.py``)."""

from __future__ import annotations

import math

import numpy as np

from .._backend import load_module


_BLOCK = 256
_OPTIONS = ("--fmad=false",)  # round like NumPy: see the header of ivote.cu
_REDUCE_BLOCKS = 1024  # blocks of the grid-stride reductions (one atomic each)

_TILE = {2: (1, 32, 32), 3: (4, 8, 8)}
"""Pixels per tile (z, y, x) of the tiled kernels; one thread each. A warp is a
row of 32 pixels in 2D (4 rows of 8 in 3D, 24 box cells apart): voters of the
same bin then add to 32 different shared-memory banks. On an H100 at 2048^2,
2D tiles of 32 x 32 gave the fastest passes (3.67 ms; 16 x 16: 3.75, 16 x 32:
3.86, 8 x 32: 4.17, the same votes)."""
_TILED_MAX_BYTES = 96 * 1024  # shared memory per block for the tile's box of votes
_TILED_GAIN = 3.0  # tile a pass when its cones hold this many times the box's cells per pixel

# Slots of the statistics array (uint64, on the GPU; see the header of ivote.cu)
_LOW_KEY, _HIGH_KEY, _NONFINITE, _LARGEST, _N_MAXIMA, _N_PAIRS = range(6)
_RGB = 8  # min/max/NaN slots of an RGB image's channels
_N_SLOTS = 12

_FUSED_BLUR = True
"""The pre-blur sums with fused multiply-adds, as cupyx.scipy.ndimage's correlate kernel compiles."""

_CTYPES = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.uint8): "unsigned char",
    np.dtype(np.uint16): "unsigned short",
}
"""Input dtypes the statistics and blur kernels read directly (others are converted to float64 first)."""


def _module(ndim: int, index: str, xp):
    """The kernels of one variant on the current GPU (memoized: every call looks them up)."""
    key = (ndim, index, xp.cuda.Device().id)
    if key not in _functions:
        _functions[key] = _load_functions(ndim, index)
    return _functions[key]


_functions: dict = {}


def _blur_name(ctype: str, normalise: bool, fused: bool) -> str:
    return f"ivote_blur_axis<{ctype}, {str(normalise).lower()}, {str(fused).lower()}>"


def _load_functions(ndim: int, index: str):
    tile = ", ".join(map(str, _TILE[ndim]))
    per_variant = tuple(
        f"{kernel}<{ndim}, {index}>"
        for kernel in ("ivote_gradient_max", "ivote_voters", "ivote_vote_table", "ivote_turn_table")
    ) + (
        f"ivote_vote_tiled<{ndim}, {tile}>", f"ivote_turn_tiled<{ndim}, {tile}>",
        f"ivote_local_maxima<{ndim}>", f"ivote_close_pairs<{ndim}>",
    )
    contrast = tuple(f"ivote_contrast<{ndim}, {c}>" for c in ("double", "float"))
    common = tuple(f"ivote_min_max<{c}>" for c in _CTYPES.values()) + tuple(
        f"ivote_noise_samples<{c}>" for c in _CTYPES.values()) + tuple(
        _blur_name(c, True, fused) for c in _CTYPES.values() for fused in (True, False)
    ) + tuple(_blur_name("double", False, fused) for fused in (True, False))
    module = load_module("ivote", name_expressions=per_variant + contrast + common, options=_OPTIONS)
    functions = {name.split("<")[0]: module.get_function(name) for name in per_variant}
    functions.update({name: module.get_function(name) for name in common})
    functions.update({f"ivote_contrast<{c}>": module.get_function(name) for c, name in zip(("double", "float"), contrast)})
    return functions


_opted_in: set = set()


def _launch_tiled(kernel, shape, ndim: int, halo, args):
    tile = _TILE[ndim]
    box_bytes = 4 * math.prod(t + 2 * h for t, h in zip(tile, halo))
    if box_bytes > 48 * 1024 and (id(kernel), box_bytes) not in _opted_in:
        if kernel.max_dynamic_shared_size_bytes < box_bytes:
            kernel.max_dynamic_shared_size_bytes = box_bytes
        _opted_in.add((id(kernel), box_bytes))
    blocks = math.prod(math.ceil(n / t) for n, t in zip(_dims(shape), tile))
    kernel((blocks,), (math.prod(tile),), args, shared_mem=box_bytes)


def _dims(shape):
    return (1,) * (3 - len(shape)) + tuple(int(n) for n in shape)


def _grid(n: int) -> tuple[int]:
    return (max(1, math.ceil(n / _BLOCK)),)
