"""CUDA launch code of the voting passes (kernels in ``ivote/kernels/ivote.cu``).

Mirrors ``_reference.py`` step by step; the kernels do the loops that NumPy
vectorises over offsets, each voter over the offsets listed for its
direction's bin (``_cone_tables.py``). Voters are compacted once (one host synchronisation,
before the passes); the pass loop then only queues kernels.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from .._backend import BackendError, get_array_module, load_module, to_host
from ._cone_tables import cone_tables
from ._plan import VotingPlan, make_plan

__all__ = ["run_passes"]

_BLOCK = 256
_OPTIONS = ("--fmad=false",)  # round like NumPy: see the header of ivote.cu


def _module(ndim: int, index: str):
    names = tuple(
        f"{kernel}<{ndim}, {index}>"
        for kernel in (
            "ivote_gradient_max", "ivote_quantise_weights", "ivote_initial_directions", "ivote_vote_table",
            "ivote_turn_table",
        )
    )
    module = load_module("ivote", name_expressions=names, options=_OPTIONS)
    return {name.split("<")[0]: module.get_function(name) for name in names}


_tables: OrderedDict = OrderedDict()


def _cone_tables(plan: VotingPlan, xp):
    """The plan's cone tables on the current GPU, memoized (a few plans)."""
    key = (plan.radius, plan.spacing, plan.ndim, xp.cuda.Device().id)
    if key not in _tables:
        _tables[key] = cone_tables(plan, xp)
        while len(_tables) > 8:
            _tables.popitem(last=False)
    _tables.move_to_end(key)
    return _tables[key]


def _dims(shape):
    return (1,) * (3 - len(shape)) + tuple(int(n) for n in shape)


def _grid(n: int) -> tuple[int]:
    return (max(1, math.ceil(n / _BLOCK)),)


def run_passes(smoothed, plan: VotingPlan, sign: float, iter_callback=None):
    """The vote field V (uint32 CuPy array, image shape) after the last pass.

    ``smoothed`` may be a one-element list holding the image: it is then taken
    out, so that its memory is freed as soon as the voters are set up.
    """
    holder = smoothed if isinstance(smoothed, list) else [smoothed]
    del smoothed
    xp = get_array_module(holder[0])
    index = "int" if holder[0].size < 2**31 else "long long"
    _check_kernels(xp, plan.ndim, index)
    return _run_passes(holder, plan, sign, iter_callback, index)


_checked: set = set()


def _check_kernels(xp, ndim: int, index: str) -> None:
    """Once per process, GPU and kernel variant: the kernels must reproduce the
    NumPy reference exactly on a small image, else raise (never wrong cells)."""
    key = (ndim, index, xp.cuda.Device().id)
    if key in _checked:
        return
    from ._reference import run_passes as reference_passes

    shape = (32, 32) if ndim == 2 else (8, 24, 24)
    coords = np.indices(shape, dtype=np.float64)
    centre_a = np.array(shape) * 0.35
    centre_b = np.array(shape) * 0.65
    image = sum(
        np.exp(-sum((c - m) ** 2 for c, m in zip(coords, centre)) / 18.0) for centre in (centre_a, centre_b)
    )
    image /= image.max()
    spacing = (1.0,) * ndim if ndim == 2 else (2.0, 1.0, 1.0)
    plan = make_plan(5.0, spacing, ndim)
    expected = reference_passes(image, plan, 1.0)
    got = to_host(_run_passes([xp.asarray(image)], plan, 1.0, None, index))
    if not np.array_equal(got, expected):
        raise BackendError(
            f"the iterative-voting CUDA kernels ({ndim}D, {index} indices) disagree with the NumPy reference on "
            f"this GPU/driver ({int(got.sum())} vs {int(expected.sum())} votes); use backend='numpy' "
            "(IVOTE_BACKEND=numpy) and report the GPU, driver and CuPy versions"
        )
    _checked.add(key)


def _run_passes(holder: list, plan: VotingPlan, sign: float, iter_callback, index: str):
    """The passes; ``holder`` holds the only reference to the image, freed early."""
    xp = get_array_module(holder[0])
    smoothed = xp.ascontiguousarray(holder.pop(), dtype=np.float64)
    ndim = plan.ndim
    index_dtype = np.int32 if index == "int" else np.int64
    kernels = _module(ndim, index)
    Z, Y, X = _dims(smoothed.shape)
    spacing64 = (1.0,) * (3 - ndim) + plan.spacing
    spacing32 = tuple(np.float32(s) for s in (1.0,) * (3 - ndim) + tuple(plan.spacing32))
    size = smoothed.size

    # weights: the gradient magnitude quantised exactly as in _reference.prepare_voters
    image_geometry = (np.int32(Z), np.int32(Y), np.int32(X), *map(np.float64, spacing64))
    size_arg = np.int32(size) if index == "int" else np.int64(size)
    grid = (min(_grid(size)[0], 2048),)
    largest_bits = xp.zeros(1, dtype=np.uint64)
    kernels["ivote_gradient_max"](grid, (_BLOCK,), (smoothed, size_arg, *image_geometry, largest_bits))
    votes = xp.zeros(smoothed.shape, dtype=np.uint32)
    if int(largest_bits[0]) == 0:  # host sync (before the passes): a flat image has no voter
        return votes
    weights = xp.empty(smoothed.shape, dtype=np.uint16)
    kernels["ivote_quantise_weights"](
        grid, (_BLOCK,),
        (smoothed, size_arg, *image_geometry, largest_bits, np.float64(plan.weight_scale), weights),
    )
    voters = xp.flatnonzero(weights >= plan.min_weight).astype(index_dtype)  # host sync
    weights = weights.ravel()[voters].astype(np.uint32)
    n_voters = int(voters.size)
    directions = xp.empty((n_voters, ndim), dtype=np.int16)
    if n_voters:
        kernels["ivote_initial_directions"](
            _grid(n_voters), (_BLOCK,),
            (smoothed, voters, np.int64(n_voters), np.int32(Z), np.int32(Y), np.int32(X),
             *map(np.float64, spacing64), np.float64(sign), directions),
        )
    del smoothed

    tables = _cone_tables(plan, xp)
    for pass_index, (table, cos_half) in enumerate(zip(tables, plan.cos_half32)):
        last = pass_index == plan.n_passes - 1
        votes.fill(0)
        if n_voters:
            geometry = (
                np.int64(n_voters), np.int32(Z), np.int32(Y), np.int32(X), *spacing32, np.float32(cos_half),
                np.int32(table.cells), table.starts, table.entries,
            )
            kernels["ivote_vote_table"](_grid(n_voters), (_BLOCK,), (voters, weights, directions, *geometry, votes))
            if not last:
                kernels["ivote_turn_table"](_grid(n_voters), (_BLOCK,), (voters, directions, *geometry, votes))
        if iter_callback is not None:
            iter_callback(pass_index, plan.n_passes)
    return votes
