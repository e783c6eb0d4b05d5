"""Pass 1 of a chunked segmentation: the image's normalisation percentiles, exactly.

``segment_nuclei`` normalises the image by its ``INTENSITY_PERCENTILES``; they
are found here block by block from the image's exact order statistics, by a
radix select over the floats' bits (a histogram of ``RADIX_BITS`` bits a pass).
"""

from __future__ import annotations

import math

import numpy as np

from ._tasks import _piece, _read_piece

RADIX_BITS = 16  # bits of the float keys decided per pass of the percentile search


def _float_dtype(dtype) -> np.dtype:
    """The float dtype ``segment_nuclei`` computes in (``ivote._validate.as_float_image``)."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float32 else np.dtype(np.float64)


def _keys(values: np.ndarray) -> np.ndarray:
    """Unsigned integers in the order of the floats (IEEE-754 bits, negatives flipped)."""
    unsigned = np.uint32 if values.dtype == np.float32 else np.uint64
    bits = values.dtype.itemsize * 8
    raw = np.ascontiguousarray(values).view(unsigned)
    top = unsigned(1) << unsigned(bits - 1)
    return np.where(raw & top, ~raw, raw | top)


def _from_key(key: int, dtype: np.dtype) -> float:
    unsigned = np.uint32 if dtype == np.float32 else np.uint64
    bits = dtype.itemsize * 8
    key = unsigned(key)
    top = unsigned(1) << unsigned(bits - 1)
    raw = key ^ top if key & top else ~key
    return float(np.array([raw], unsigned).view(dtype)[0])


def _digit_histograms(piece, region, dtype, prefixes, decided: int) -> dict:
    """Per prefix of ``decided`` bits: histogram of the next RADIX_BITS bits of the block's keys."""
    keys = _keys(_read_piece(piece, region).astype(dtype, copy=False).ravel())
    bits = dtype.itemsize * 8
    shift = keys.dtype.type(bits - decided - RADIX_BITS)
    mask = keys.dtype.type((1 << RADIX_BITS) - 1)
    out = {}
    for prefix in prefixes:
        chosen = keys if decided == 0 else keys[(keys >> keys.dtype.type(bits - decided)) == keys.dtype.type(prefix)]
        out[prefix] = np.bincount(((chosen >> shift) & mask).astype(np.int64), minlength=1 << RADIX_BITS)
    return out


def intensity_range_chunked(image, blocks, run) -> tuple[float, float]:
    """The image's ``INTENSITY_PERCENTILES`` from its exact order statistics, found block by block
    (``run(tasks)`` computes Dask tasks); equal to what ``segment_nuclei`` computes in memory."""
    import dask

    from ..segment._segment import INTENSITY_PERCENTILES, percentile_from_ranks, percentile_ranks

    dtype = _float_dtype(image.dtype)
    size = math.prod(image.shape)
    ranks = [percentile_ranks(size, q) for q in INTENSITY_PERCENTILES]
    wanted = sorted({r for below, above, _ in ranks for r in (below, above)})
    state = {rank: [0, rank] for rank in wanted}  # rank -> [key prefix, rank among keys with that prefix]
    task = dask.delayed(_digit_histograms, pure=False)
    for decided in range(0, dtype.itemsize * 8, RADIX_BITS):
        prefixes = sorted({prefix for prefix, _ in state.values()})
        found = run([task(*_piece(image, s), dtype, prefixes, decided) for _, s in blocks])
        for rank, (prefix, rest) in state.items():
            cumulative = np.cumsum(sum(block[prefix] for block in found))
            digit = int(np.searchsorted(cumulative, rest, side="right"))
            state[rank] = [(prefix << RADIX_BITS) | digit, rest - (int(cumulative[digit - 1]) if digit else 0)]
    values = {rank: _from_key(prefix, dtype) for rank, (prefix, _) in state.items()}
    return tuple(percentile_from_ranks(values[below], values[above], w) for below, above, w in ranks)
