"""CUDA launch code of a detection (kernels in ``ivote/kernels/ivote.cu``).

Mirrors ``_reference.py`` step by step; the kernels do the loops that NumPy
vectorises over offsets, each voter over the offsets listed for its
direction's bin (``_cone_tables.py``).

A detection is one queue of about 20 kernels and one host synchronisation, at
the end: the image's minimum and maximum (and whether it holds NaN/Inf), the
largest gradient and the counts of maxima and close pairs stay in a small
array of statistics on the GPU, read by the kernels that need them through a
pointer and copied to the host with the results. Voters are dense (a weight
per pixel, 0 for pixels that do not vote), so no list of voters is built, and
the two vote buffers of the passes take turns: each turn step zeroes the
buffer the next pass fills.

Where each part lives: the kernels' loading and launch geometry in
``_cuda_kernels.py``, the memoized tables (and each pass's tiling) in
``_cuda_tables.py``, the statistics and the blur in ``_cuda_blur.py``, the voters
and passes in ``_cuda_passes.py``, the cells and the results' one copy in
``_cuda_cells.py``, the CUDA graph of repeated detections in ``_cuda_graph.py``;
here the entry points (:func:`detect`, :func:`run_passes`) and the self-checks
against the NumPy reference. The names other modules and tests read are
importable from here too (not the caches and settings: a test that replaces one
replaces it in the module that reads it).
"""

from __future__ import annotations

import numpy as np

from .._backend import BackendError, get_array_module, to_host
from ._cone_tables import check_packable
from ._contrast import bump_ring, noise_positions
# the names other modules and tests read, importable from here too
from ._cuda_blur import (_blur_steps, _from_key, _kernel_input, _min_max, _noise_samples,  # noqa: F401
                         _normalise_and_blur, _to_key, _write_given, smoothed_block)
from ._cuda_cells import _Cells, _finish, _order_cells, _order_keys, _results_buffer, sorted_close_pairs  # noqa: F401
from ._cuda_graph import _GRAPH_MAX, _graphed, _Graphed, _seen_once, release_graphs  # noqa: F401
from ._cuda_kernels import _FUSED_BLUR, _LARGEST, _N_SLOTS, _RGB, _module  # noqa: F401
from ._cuda_passes import _passes, _voters
from ._cuda_tables import _reach, _taps_on_gpu, _tiled_box, cone_limits, gaussian_taps, release_tables  # noqa: F401
from ._plan import VotingPlan, make_plan
from ._reach import pass_boxes
from ._result import RawDetection

__all__ = ["detect", "run_passes", "sorted_close_pairs"]


def run_passes(smoothed, plan: VotingPlan, sign: float, iter_callback=None):
    """The vote field V (uint32 CuPy array, image shape) after the last pass,
    from the normalised, blurred image (float64).

    ``smoothed`` may be a one-element list holding the image: it is then taken
    out, so that its memory is freed as soon as the voters are set up.
    """
    holder = smoothed if isinstance(smoothed, list) else [smoothed]
    del smoothed
    xp = get_array_module(holder[0])
    index = "int" if holder[0].size < 2**31 else "long long"
    check_packable(plan)  # before any work
    _check_kernels(xp, plan.ndim, index)
    return _run_passes(holder, plan, sign, iter_callback, index)


def _run_passes(holder: list, plan: VotingPlan, sign: float, iter_callback, index: str):
    """The passes; ``holder`` holds the only reference to the image, freed early."""
    xp = get_array_module(holder[0])
    smoothed = xp.ascontiguousarray(holder.pop(), dtype=np.float64)
    kernels = _module(plan.ndim, index, xp)
    stats = xp.zeros(_N_SLOTS, dtype=np.uint64)
    weights, directions = _voters(smoothed, plan, sign, stats[_LARGEST:], kernels, index, xp)
    del smoothed
    return _passes(weights, directions, plan, index, iter_callback, kernels, xp)


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
    # radius / spacing just under 7 (float64) while offsets of 7 pass the float32 disc test
    spacing = (1.3,) * ndim if ndim == 2 else (2.6, 1.3, 1.3)
    plan = make_plan(9.1, spacing, ndim)
    expected = reference_passes(image, plan, 1.0)
    got = to_host(_run_passes([xp.asarray(image)], plan, 1.0, None, index))
    if not np.array_equal(got, expected):
        raise BackendError(
            f"the iterative-voting CUDA kernels ({ndim}D, {index} indices) disagree with the NumPy reference on "
            f"this GPU/driver ({int(got.sum())} vs {int(expected.sum())} votes); use backend='numpy' "
            "(IVOTE_BACKEND=numpy) and report the GPU, driver and CuPy versions"
        )
    if index == "int":
        _check_contrast_kernels(xp, image, plan, xp.asarray(got))
    _checked.add(key)


def _check_contrast_kernels(xp, image, plan: VotingPlan, votes) -> None:
    """The noise-residual and contrast kernels must equal ``_contrast``'s NumPy
    reference on the self-check's image and vote field (dark polarity), else raise."""
    from ._contrast import contrast_numerators, noise_residuals

    kernels = _module(plan.ndim, "int", xp)
    source = xp.asarray(image)
    stats = xp.zeros(_N_SLOTS, dtype=np.uint64)
    _min_max(source, stats, kernels)
    positions = noise_positions(tuple(image.shape))
    residuals = xp.empty(len(positions), dtype=np.float64)
    _noise_samples(source, stats, residuals, kernels, xp)
    cells = _Cells(votes, plan, stats, kernels, xp, smoothed=source, sign=-1.0)
    cells.find_maxima(256)
    cells.find_contrast()
    cells.find_pairs(1024)
    rows, _, numerators = cells.fetch(to_host(stats))
    low, high = image.min(), image.max()
    points = np.stack(np.unravel_index(rows[:, 0].astype(np.int64), image.shape), axis=1)
    expected = contrast_numerators(image.astype(np.float32), points, plan.window, -1.0, bump_ring(plan))
    same_noise = np.array_equal(to_host(residuals), noise_residuals((image - low) / (high - low), positions))
    if not (len(rows) and same_noise and np.array_equal(numerators, expected)):
        raise BackendError(
            f"the contrast CUDA kernels ({plan.ndim}D) disagree with the NumPy reference on this GPU/driver; "
            "use backend='numpy' (IVOTE_BACKEND=numpy) and report the GPU, driver and CuPy versions"
        )


def detect(signal, plan: VotingPlan, sign: float, sigma=None, iter_callback=None, *, also_finite=None,
           phase_callback=None, reuse: bool = False, given=None) -> RawDetection:
    """Normalise, blur (``sigma`` per axis, pixels; None: no blur), vote and find
    the local maxima and their close pairs, with one synchronisation at the end.

    ``also_finite``: another array (e.g. all channels of an RGB image) whose
    NaN/Inf are reported too. ``phase_callback(name)`` is called after each phase
    is queued (benchmarks record CUDA events there). ``reuse``: the caller does
    not keep ``votes`` (it is then None) and may detect on images of this shape
    and settings again: from the second such call on, the kernels are replayed
    from a CUDA graph (see ``_Graphed``). ``given``: the whole image's
    ``_result.GlobalStatistics`` when ``signal`` is a block of it (its minimum,
    maximum and largest gradient are then written into the statistics instead of
    the block's; the minimum/maximum kernel still runs, for NaN/Inf). The caller
    checks ``extremes`` (NaN/Inf, constant image) before using the rest.
    """
    xp = get_array_module(signal)
    if signal.size >= 2**31:
        raise ValueError(f"image is too large for one GPU pass ({signal.size} pixels >= 2**31); process it in tiles")
    check_packable(plan)  # before any work
    _check_kernels(xp, plan.ndim, "int")
    key = None
    if (reuse and given is None and iter_callback is None and also_finite is None and phase_callback is None
            and signal.size <= _GRAPH_MAX):
        key = (tuple(signal.shape), plan.radius, plan.spacing, plan.ndim, float(sign),
               None if sigma is None else tuple(map(float, sigma)), xp.cuda.Device().id)
        graphed = _graphed(key, plan, xp)
        found = None if graphed is None else graphed.detect(signal)
        if found is not None:
            return found
    kernels = _module(plan.ndim, "int", xp)
    mark = phase_callback or (lambda name: None)

    results, maxima, pairs, numerators, residuals = _results_buffer(signal.shape, plan, xp)
    stats = results[:_N_SLOTS]
    if given is not None:
        _write_given(stats, given.low, given.high, given.largest, xp)
    source = _kernel_input(signal, xp)
    _min_max(source, stats, kernels)
    if also_finite is not None:
        _min_max(_kernel_input(also_finite, xp), stats[_RGB:], kernels)
    _noise_samples(source, stats, residuals, kernels, xp)
    smoothed = _normalise_and_blur(source, sigma, stats, kernels, xp)
    del source
    mark("blur")
    weights, directions = _voters(smoothed, plan, sign, stats[_LARGEST:], kernels, "int", xp,
                                  largest_given=given is not None)
    if plan.ndim == 3:  # the contrasts read it in float32: 4 bytes a voxel kept instead of 8
        smoothed = smoothed.astype(np.float32)
    mark("voters")
    boxes = pass_boxes(plan, signal.shape, getattr(given, "owned", None))
    votes = _passes(weights, directions, plan, "int", iter_callback, kernels, xp, boxes=boxes)
    del weights, directions
    mark("passes")
    cells = _Cells(votes, plan, stats, kernels, xp, smoothed=smoothed, sign=sign)
    del smoothed
    cells.find_maxima(len(maxima), maxima)
    cells.find_contrast(numerators)
    cells.find_pairs(len(pairs), pairs)
    mark("maxima")
    found = _finish(results, cells, signal.shape, plan, xp, mark)
    if key is not None:
        _seen_once(key)
    if reuse:
        found.votes = None
    return found
