"""The blocks of a chunked detection: the halo, the memory a block needs, the chunking.

:func:`detection_halo` is the exact reach of the detection; ``_resolve_chunks``
chooses the blocks (with their halo) that fit the memory limit at the path's
cost (``_block_cost``) and read the fewest voxels in all; ``_check_block_memory``
and ``_check_run_work`` refuse a block or a run that cannot fit before any
block runs; ``_blocks``, ``_grow`` and ``_local`` are the slices a block owns,
reads and keeps.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

#: device bytes per voxel of a block's detection (input, blur buffers, voters, two vote
#: buffers, maxima flags and lists): the in-memory detection's measured peak is 24-26
#: (docs/benchmarks.md); tests/gpu runs blocks under a limit sized with this
GPU_BYTES_PER_VOXEL = 32
# on the CPU a block's host memory is that of the path that runs it, Numba's or NumPy's
# (``detect._settings.cpu_detection_memory``), plus the block read: see _block_cost
#: most blocks per axis the default chunking considers
_MOST_SPLITS = 32


def detection_halo(plan, blur_pixels) -> tuple:
    """Voxels per axis a block must see beyond the voxels it owns, so that its
    votes, maxima and contrasts equal the whole image's.

    Parameters
    ----------
    plan : VotingPlan
        ``ivote.detect._plan.make_plan(radius, spacing, ndim)``.
    blur_pixels : sequence of float
        The pre-blur's sigma per axis, in pixels (0: none).

    Returns
    -------
    tuple of int
        Per axis: ``max(t + 1 + (2 n - 1) R + h, t + W)``, where ``t`` is the
        Gaussian's reach (``int(4 sigma + 0.5)`` taps, as SciPy and CuPy cut
        it), 1 the central difference of the gradient, ``R`` the largest offset
        of the voting disc/ball along the axis, ``n`` the passes (a vote reads
        voters within ``R``; each turn reads votes within ``R``, so the last
        pass's votes depend on voters ``(2 n - 1) R`` away), ``h`` the half width
        of the local-maximum box and ``W`` the contrast window.

    Notes
    -----
    This bound is exact, not empirical: every quantity that decides a cell is a
    function of the voxels within it. It is large (58 pixels for radius 6 and
    the default blur in 2D), so blocks should be several times larger; the
    measured trade-off of smaller halos is in ``docs/scale.md``.
    """
    from ..detect._cuda import gaussian_taps

    reach = np.abs(plan.offsets).max(axis=0, initial=0) if len(plan.offsets) else np.zeros(plan.ndim, int)
    halo = []
    for axis in range(plan.ndim):
        taps = gaussian_taps(blur_pixels[axis]) if blur_pixels[axis] > 0 else None
        t = 0 if taps is None else len(taps) // 2
        votes = t + 1 + (2 * plan.n_passes - 1) * int(reach[axis]) + plan.maxima_half_width[axis]
        halo.append(max(votes, t + plan.window[axis]))
    return tuple(halo)


def _resolve_halo(halo, plan, sigma) -> tuple:
    exact = detection_halo(plan, sigma)
    if halo is None:
        return exact
    if isinstance(halo, (int, np.integer)) and not isinstance(halo, bool):
        halo = (int(halo),) * plan.ndim
    halo = tuple(halo)
    if len(halo) != plan.ndim or any(isinstance(h, bool) or int(h) < 0 for h in halo):
        raise ValueError(f"halo must be a non-negative integer or {plan.ndim} of them; got {halo!r}")
    return tuple(int(h) for h in halo)


class _BlockCost(NamedTuple):
    """Memory of one block's detection: ``per_voxel * voxels + fixed`` bytes, on ``path``."""

    per_voxel: float
    fixed: float
    path: str  # 'cupy', 'numba' or 'numpy'


def _block_cost(path: str, dtype, ndim: int = 3) -> _BlockCost:
    """The memory of a block's detection on ``path``: on the GPU ``GPU_BYTES_PER_VOXEL`` (a float32 block),
    plus what a wider block (``dtype``) keeps on the device for the whole detection, plus 4 bytes in 2D,
    where the blurred image stays float64 through the passes (3D keeps it as float32); on the CPU the
    in-memory detection's estimate for that path (``detect._settings.cpu_detection_memory``: the NumPy
    path needs about 2.5 times Numba's bytes per voxel, and more fixed buffers) plus the block read
    (``dtype``)."""
    if path == "cupy":  # a 2D float64 block (an H&E slide's hematoxylin density): 40 bytes a voxel
        wider = max(0, np.dtype(dtype).itemsize - 4)
        return _BlockCost(GPU_BYTES_PER_VOXEL + wider + (4 if ndim == 2 else 0), 0, path)
    from ..detect._settings import cpu_detection_memory

    fixed = cpu_detection_memory(0, path)
    return _BlockCost(cpu_detection_memory(1, path) - fixed + np.dtype(dtype).itemsize, fixed, path)


def _block_voxels(chunks, shape, halo) -> int:
    return math.prod(min(n, c + 2 * h) for n, c, h in zip(shape, chunks, halo))


def _resolve_chunks(chunks, shape, halo, limit: int, cost: _BlockCost, min_blocks: int = 1) -> tuple:
    """The voxels each block owns: as given, else the blocks that fit ``limit`` (at ``cost``, :func:`_block_cost`)
    with their halo and read the fewest voxels in all (halos read twice cost),
    at least ``min_blocks`` of them (one per worker); the whole image when it fits."""
    ndim = len(shape)
    if chunks is not None:
        if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
            chunks = (int(chunks),) * ndim
        chunks = tuple(chunks)
        if len(chunks) != ndim or any(isinstance(c, bool) or int(c) < 1 for c in chunks):
            raise ValueError(f"chunks must be a positive integer or {ndim} of them; got {chunks!r}")
        return tuple(min(int(c), n) for c, n in zip(chunks, shape))
    voxels = _most_voxels(limit, cost)
    per_axis = []  # per axis, per number of splits: (chunk, blocks, voxels read along it, block length)
    for n, h in zip(shape, halo):
        options = {}
        for k in range(1, min(n, _MOST_SPLITS) + 1):
            c = math.ceil(n / k)
            starts = range(0, n, c)
            options[c] = (c, len(starts), sum(min(n, s + c + h) - max(0, s - h) for s in starts), min(n, c + 2 * h))
        per_axis.append(list(options.values()))
    best = None
    for axes in itertools.product(*per_axis):
        n_blocks = math.prod(a[1] for a in axes)
        if n_blocks < min_blocks or math.prod(a[3] for a in axes) > voxels:
            continue
        key = (math.prod(a[2] for a in axes), n_blocks, tuple(a[1] for a in reversed(axes)))  # slabs: C order
        if best is None or key < best[0]:
            best = (key, tuple(a[0] for a in axes))
    if best is None:
        raise ValueError(f"no blocks of a {'x'.join(map(str, shape))} image fit memory_limit {limit / 2**30:.2f} GiB "
                         f"with the halo of {'x'.join(map(str, halo))} voxels on the {cost.path} backend (about "
                         f"{cost.per_voxel:.0f} bytes per voxel + {cost.fixed / 2**20:.0f} MiB): give a larger "
                         "memory_limit")
    return best[1]


#: voxels of one GPU pass (``_cuda.detect`` indexes them with 32-bit integers)
GPU_MOST_VOXELS = 2**31 - 1


def _most_voxels(limit: int, cost: _BlockCost) -> int:
    """Voxels a block with its halo may hold under ``limit``."""
    voxels = max(0, int((limit - cost.fixed) // cost.per_voxel))
    return min(voxels, GPU_MOST_VOXELS) if cost.path == "cupy" else voxels


def _check_block_memory(chunks, shape, halo, limit: int, cost: _BlockCost) -> None:
    gpu = cost.path == "cupy"
    if gpu and _block_voxels(chunks, shape, halo) > GPU_MOST_VOXELS:
        raise ValueError(f"a block of {'x'.join(map(str, chunks))} voxels with its halo of {'x'.join(map(str, halo))} "
                         f"holds more than 2**31 - 1 voxels, more than one GPU pass takes: use smaller chunks")
    need = _block_voxels(chunks, shape, halo) * cost.per_voxel + cost.fixed
    if need > limit:
        where = "GPU" if gpu else "host"
        raise ValueError(
            f"a block of {'x'.join(map(str, chunks))} voxels with its halo of {'x'.join(map(str, halo))} needs about "
            f"{need / 2**30:.2f} GiB of {where} memory on the {cost.path} backend, above memory_limit "
            f"{limit / 2**30:.2f} GiB: use smaller chunks (or none: the largest that fit) or a larger memory_limit")


TASK_WORK = 1e6
"""Operations a block's task is counted as at least, whatever its size (scheduling, reading the
block, a compiled call's set-up: about a millisecond), so that a run of many tiny blocks
(``--chunks 1``) is refused up front rather than block by block."""


def _check_run_work(blocks, shape, halo, plan, spacing, blur, gpu) -> None:
    """Refuse (ResourceLimitError) a run whose blocks, halos included, and tasks (three passes per
    block) add up to more than the work limit, before any block runs."""
    from .._limits import check_budget
    from ..detect._settings import _cone_votes_per_voter

    per_voxel = _cone_votes_per_voter(plan) + (sum(8 * blur / s + 1 for s in spacing) if blur > 0 else 0)
    voxels = sum(math.prod(g.stop - g.start for g in _grow(owned, halo, shape)) for owned in blocks)
    check_budget(f"detect_chunked: {len(blocks)} block(s) of {'x'.join(map(str, shape))} voxels with halos of "
                 f"{'x'.join(map(str, halo))} (radius {plan.radius:g})",
                 work=voxels * per_voxel + 3 * len(blocks) * TASK_WORK, gpu=gpu,
                 advice="use larger --chunks (chunks=) or none (the largest blocks that fit), or a crop")


def _blocks(shape, chunks) -> list:
    """The slices each block owns, in C order."""
    ranges = [range(0, n, c) for n, c in zip(shape, chunks)]
    return [tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, chunks, shape))
            for start in itertools.product(*ranges)]


def _grow(owned, margin, shape) -> tuple:
    if isinstance(margin, int):
        margin = (margin,) * len(shape)
    return tuple(slice(max(s.start - m, 0), min(s.stop + m, n)) for s, m, n in zip(owned, margin, shape))


def _owned_rows(coords, owned) -> np.ndarray:
    inside = np.ones(len(coords), bool)
    for axis, s in enumerate(owned):
        inside &= (coords[:, axis] >= s.start) & (coords[:, axis] < s.stop)
    return coords[inside]


def _local(owned, region) -> tuple:
    """The owned slices relative to the region read."""
    return tuple(slice(o.start - r.start, o.stop - r.start) for o, r in zip(owned, region))
