"""Detection on the CPU's cores: the CUDA kernels of ``kernels/ivote.cu`` as
Numba-compiled loops run on a pool of threads (``ivote._parallel``).

Same entry point as ``_cuda.py`` (:func:`detect`, returning the fields of
``_result.RawDetection``), same arithmetic as the NumPy path (``_cpu.py`` walking
the cone tables, ``_reference.py`` the oracle): the blur is
``scipy.ndimage.correlate1d``'s sums with ``gaussian_filter``'s taps, the cone
tests the kernels' float32 operations, weights and votes are integers, so the
vote field, the cells and their scores equal the NumPy path's. Around the
passes, the voters' set-up is compiled (``_voters``, row by row, straight into
the passes' order) and so is the blur (``_blur_along``, ``_blur_across``: SciPy's
``correlate1d`` holds the GIL); the local maxima are NumPy on ranges of rows in
parallel, so they add nothing to the first call's compile.

Where each part lives: the blur in ``_numba_blur.py``, the voters' set-up in
``_numba_voters.py``, the passes in ``_numba_passes.py`` (the run tables, the
classes, the races), the cells (local maxima, contrasts) in ``_numba_cells.py``;
here the entry point (:func:`detect`, :func:`run_passes`) and the loop over the
passes. Every compiled kernel is importable from here too (one namespace that lists
them: ``ivote._compile``'s tests read it).

Compiled once per machine (``cache=True``, in ``__pycache__`` next to this
file, or in Numba's user cache directory when the package is read-only); the
kernels are serial ``nogil`` loops over ranges, which compile several times
sooner than ``parallel=True`` loops.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import numba_lock
from .._compile import compile_ahead_once
from .._parallel import for_ranges
from ._contrast import noise_positions, noise_residuals
# the compiled kernels, and the names other modules and tests read, importable from here too
from ._numba_blur import _BLUR_COLUMNS, _blur_across, _blur_along, gaussian_blur  # noqa: F401
from ._numba_cells import _cells, _contrast_numerators, _local_maxima, contrast_numerators  # noqa: F401
from ._numba_passes import (_TOP_LEVELS, _compact_records, _drop_voters, _entries, _group_end,  # noqa: F401
                            _passes_of_voters, _regroup, _scan_rows, _turn, _vote)
from ._numba_voters import (_direction_bin, _Frame, _gradient_at, _quotient, _record_fields, _steps,  # noqa: F401
                            _voters, prepare_voters)
from ._plan import VotingPlan
from ._result import RawDetection
from ._reach import pass_boxes

__all__ = ["detect", "run_passes"]

_LOCK = numba_lock
"""One detection at a time (and no other stage's Numba kernels meanwhile): Numba's workqueue
threading layer must not be entered from two threads at once (``_backend.numba_lock``)."""


def _vote_field(smoothed: np.ndarray, plan: VotingPlan, sign: float, iter_callback=None, largest=None, boxes=None):
    """The padded frame and its vote field (uint32, padding zeroed) after the last pass.
    ``boxes``: per pass, the box whose voters it needs (``_reach.pass_boxes``, a block of
    an image): the others are dropped before the pass and before the turn preceding it."""
    frame = _Frame(smoothed.shape, plan)
    if len(plan.offsets) == 0:  # a radius under a pixel: no votes (the reference's empty loop)
        if iter_callback is not None:
            for index in range(plan.n_passes):
                iter_callback(index, plan.n_passes)
        return frame, np.zeros(frame.size, dtype=np.uint32)
    passes = _entries(plan.radius, plan.spacing, plan.ndim, frame.padded_shape)
    in_order, slab_starts, colours = prepare_voters(smoothed, plan, sign, largest, frame)  # records in flat order
    grouped = np.empty_like(in_order)  # each pass sorts them by class (frame order within a class)
    # each voter's class at its frame index (uint32 records hold at most 2**16 classes); written by the first
    # regroup, then by the turns
    classes = np.empty(frame.size, dtype=np.uint16 if in_order.dtype == np.uint32 else np.uint32)
    marks = np.zeros(frame.size, dtype=np.uint32)
    tops = np.zeros((_TOP_LEVELS[plan.ndim] + 1, frame.size), dtype=np.uint32)
    n_slabs = len(slab_starts) - 1
    widths = np.zeros(n_slabs, dtype=np.int64)  # per slab: its largest group (_regroup)
    (PZ, PY, PX), (wz, wy, wx) = frame.padded3()
    passes_of = None if boxes is None or not DROP_VOTERS else _passes_of_voters(frame, boxes)
    for index, (starts, step, vote, first_read, last_read, item_k) in enumerate(passes):
        if passes_of is not None:
            in_order, grouped, slab_starts = _drop_voters(passes_of, index, in_order, grouped, slab_starts)
        if index > 0:  # the turn in the last pass's field, with the last pass's cones
            last_starts, last_step, _, last_first, last_last, last_k = passes[index - 1]
            for_ranges(_turn, n_slabs, tops.reshape(-1), slab_starts, widths, grouped, last_starts, last_step,
                       last_first, last_last, last_k, classes)
        for_ranges(_regroup, n_slabs, slab_starts, len(starts) - 1, in_order, classes, index == 0, grouped,
                   widths)
        for slabs in colours:
            for_ranges(_vote, len(slabs), marks, slabs, slab_starts, widths, grouped, *vote)
        final = index == plan.n_passes - 1
        for_ranges(_scan_rows, PZ * PY, marks, vote[3], tops[:1] if final else tops, PZ, PY, PX, wz, wy, wx, grain=8)
        if iter_callback is not None:
            iter_callback(index, plan.n_passes)
    votes = tops[0]
    return frame, votes


#: whether a block's passes drop the voters they do not need (``_reach.pass_boxes``; exact either
#: way). Off: measured on 16 cores (bench_scale --detect --size 256 --chunks 128 --backend numba,
#: 2026-12-01) the serial compaction cost more than the passes saved (4.93 s against 4.41 s); on
#: 2 cores a 100³ block's passes took 0.64-0.97 s with it against 1.07-1.21 s without.
DROP_VOTERS = False


def run_passes(smoothed, plan: VotingPlan, sign: float, iter_callback=None) -> np.ndarray:
    """The vote field V (uint32, image shape) after the last pass; as ``_reference.run_passes``."""
    if isinstance(smoothed, list):
        smoothed = smoothed.pop()
    smoothed = np.ascontiguousarray(smoothed, dtype=np.float64)
    with _LOCK:
        frame, votes = _vote_field(smoothed, plan, sign, iter_callback)
    return np.ascontiguousarray(votes.reshape(frame.padded_shape)[frame.inside])


def _normalise_part(first, last, signal, out, low, span):
    """Slices first..last of ``(signal - low) / span`` in float64 (the signal cast first)."""
    part = out[first:last]
    part[...] = signal[first:last]
    part -= low
    part /= span


def _compile_first(plan: VotingPlan, sign: float, sigma) -> None:
    """At the first detection of its kind (dimensions, blur) in this process, compile the kernels
    it needs ahead, several processes at once (``ivote._compile``: a dry run on a tiny image
    lists them; their argument types do not depend on the image's size, except the uint64
    records of frames of 2**32 pixels or of blocks whose gradient exceeds the whole image's,
    ``_record_layout``, which the call then compiles itself). Later calls, and calls in
    processes that find the kernels in the cache on disk, compile nothing."""
    tiny = np.arange(8.0**plan.ndim).reshape((8,) * plan.ndim)
    compile_ahead_once(("detect", plan.ndim, sigma is None), lambda: detect(tiny, plan, sign, sigma))


def detect(signal, plan: VotingPlan, sign: float, sigma=None, iter_callback=None, *, also_finite=None,
           reuse: bool = False, given=None) -> RawDetection:
    """Normalise, blur (``sigma`` per axis, pixels; None: no blur), vote, find the
    local maxima, their close pairs and contrasts: ``_cuda.detect`` on the CPU.

    ``also_finite``: another array (all channels of an RGB image) whose NaN/Inf
    are reported too. ``reuse``: the caller does not keep the vote field (then
    None). ``given``: the whole image's ``_result.GlobalStatistics`` when
    ``signal`` is a block of it. The caller checks ``extremes`` (NaN/Inf,
    constant image) first.
    """
    signal = np.asarray(signal)
    extremes = [signal.min(), signal.max()] if given is None else [given.low, given.high]
    if also_finite is not None:
        extremes += [np.min(also_finite), np.max(also_finite)]
    empty = np.zeros(0, dtype=np.int64)
    if not all(math.isfinite(float(v)) for v in extremes):
        return RawDetection(None, empty, empty, np.zeros((0, 2), np.int64), (float("nan"),))
    low, high = float(extremes[0]), float(extremes[1])
    if not high > low:
        votes = None if reuse else np.zeros(signal.shape, dtype=np.uint32)
        return RawDetection(votes, empty, empty, np.zeros((0, 2), np.int64), (low, high), np.zeros(0), np.zeros(0))
    _compile_first(plan, sign, sigma)
    smoothed = np.empty(signal.shape)  # as _backends._detect_on_cpu: the same roundings
    for_ranges(_normalise_part, len(signal), signal, smoothed, low, high - low, grain=64)
    residuals = noise_residuals(smoothed, noise_positions(tuple(signal.shape)))
    with _LOCK:
        if sigma is not None:
            smoothed = gaussian_blur(smoothed, sigma)
        frame, votes = _vote_field(smoothed, plan, sign, iter_callback, None if given is None else given.largest,
                                   pass_boxes(plan, signal.shape, getattr(given, "owned", None)))
        field = None if reuse else np.ascontiguousarray(votes.reshape(frame.padded_shape)[frame.inside])
        flat, values, pairs, numerators = _cells(frame, votes, plan, smoothed, sign)
    return RawDetection(field, flat, values, pairs, (low, high), numerators, residuals)
