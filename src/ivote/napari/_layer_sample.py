"""A bounded sample of an image layer's data (Qt-free), for defaults computed when a layer is
chosen (the Label-and-count dock's Otsu threshold): it reads a few of a lazy array's chunks,
never the whole image."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_SAMPLE", "layer_sample"]

MAX_SAMPLE = 2**20
"""Elements a sample holds at most (a 1024² image), unless one chunk of the array is larger."""


def layer_sample(data, *, multiscale: bool = False, max_elements: int = MAX_SAMPLE) -> np.ndarray:
    """At most about ``max_elements`` values of a layer's data, spread over the image.

    A pyramid (``multiscale``): its finest level that small, else its coarsest, sampled. An array
    that small: all of it. A chunked array (Dask, Zarr): whole chunks spread evenly through the
    chunk grid, as many as ``max_elements`` holds (at least one), so only they are read. An array
    in memory: a strided view.
    """
    if multiscale:
        levels = list(data)
        data = next((level for level in levels if math.prod(level.shape) <= max_elements), levels[-1])
    shape = tuple(int(n) for n in data.shape)
    if math.prod(shape) <= max_elements:
        return np.asarray(data)
    bounds = _chunk_bounds(data, shape)
    if bounds is None:
        step = math.ceil((math.prod(shape) / max_elements) ** (1 / len(shape)))
        return np.asarray(data[(slice(None, None, step),) * len(shape)])
    grid = tuple(len(b) - 1 for b in bounds)
    largest = math.prod(int(np.max(np.diff(b))) for b in bounds)  # elements of the largest chunk
    total = math.prod(grid)
    count = min(total, max(1, max_elements // largest))
    picks = ((np.arange(count) + 0.5) * total / count).astype(np.int64)  # the middles of count equal runs
    parts = []
    for flat in picks:
        index = np.unravel_index(int(flat), grid)
        region = tuple(slice(int(b[i]), int(b[i + 1])) for b, i in zip(bounds, index))
        parts.append(np.asarray(data[region]).ravel())
    return np.concatenate(parts)


def _chunk_bounds(data, shape) -> list[np.ndarray] | None:
    """Per axis, the chunk boundaries of a Dask (``chunks``: sizes per axis) or Zarr (``chunks``: one
    size per axis) array; None for an array without chunks."""
    chunks = getattr(data, "chunks", None)
    if chunks is None or len(chunks) != len(shape):
        return None
    bounds = []
    for n, c in zip(shape, chunks):
        sizes = [int(s) for s in c] if isinstance(c, (tuple, list)) else [int(c)] * math.ceil(n / int(c))
        bounds.append(np.minimum(np.concatenate([[0], np.cumsum(sizes)]), n))
    return bounds
