"""Repeated GPU detections of one image shape and setting, replayed from a CUDA
graph (``_Graphed``): captured at the second such detection, kept for the last
``_GRAPHS_KEPT`` shapes. Part of the GPU detection (``_cuda.py``)."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np

from .._backend import on_free_gpu_memory
from ._cuda_blur import _blur_steps, _kernel_input, _min_max, _noise_samples, _normalise_and_blur
from ._cuda_cells import _Cells, _finish, _results_buffer
from ._cuda_kernels import _LARGEST, _N_SLOTS, _module
from ._cuda_passes import _passes, _voters
from ._cuda_tables import _ball, _initial_directions, _noise_positions_on_gpu, _ring, _schedule
from ._plan import VotingPlan
from ._result import RawDetection


_GRAPH_MAX = 1 << 22
"""Images up to this many pixels (2048^2) are replayed from a CUDA graph on
repeated detections: there, queueing ~20 kernels one by one from Python costs
as much as running them (a 1024^2 detection is about 1.2 ms of GPU work)."""
_GRAPHS_KEPT = 4
_graphs: OrderedDict = OrderedDict()
_graphs_seen: OrderedDict = OrderedDict()
_graphs_lock = threading.Lock()


def _seen_once(key) -> None:
    with _graphs_lock:
        _graphs_seen[key] = True
        while len(_graphs_seen) > 64:
            _graphs_seen.popitem(last=False)


def _graphed(key, plan: VotingPlan, xp):
    """The captured detection for ``key``, captured now if a plain detection with
    this key ran before (so every memoized table is built); else None."""
    with _graphs_lock:
        if key in _graphs:
            _graphs.move_to_end(key)
            return _graphs[key]
        if key not in _graphs_seen:
            return None
    try:
        graphed = _Graphed(key, plan, xp)
    except Exception:  # e.g. a cache evicted by another thread mid-capture: run the plain path
        with _graphs_lock:
            _graphs_seen.pop(key, None)
        return None
    with _graphs_lock:
        _graphs[key] = graphed
        _graphs.move_to_end(key)
        while len(_graphs) > _GRAPHS_KEPT:
            _graphs.popitem(last=False)
    return graphed


@on_free_gpu_memory
def release_graphs() -> None:
    """Drop the captured detections and the GPU buffers they hold."""
    with _graphs_lock:
        _graphs.clear()
        _graphs_seen.clear()


class _Graphed:
    """Detections of one image shape and setting, replayed from a CUDA graph.

    Every launch argument of a graph is fixed at capture, so the graph owns
    its buffers: two float64 work arrays (the blur's axes write them in turn;
    the blurred image stays in one for the contrasts, the two vote buffers
    live in the other), the voters (their weights hold the maxima flags after
    the passes), and the results (statistics, lists sized from the last
    detection, contrasts, noise residuals). It also holds the memoized tables,
    initial-direction table, disc offsets, bump ring, taps and noise grid it reads, looked up once before the
    capture, which passes them on: a lookup during the capture could return
    another object (evicted and rebuilt by another thread since), which the
    graph would read after a cache frees it, or build one there (an allocation
    and a synchronisation, which the capture forbids). The kernels that read
    the image itself (its statistics, noise grid and the blur's first axis)
    are launched before the graph, so the image needs no copy: five launches
    per detection instead of about 20.
    A detection runs under a lock (napari detects in worker threads). Lists
    that overflow are found again outside the graph, which is then dropped and
    captured anew, with larger lists, on the next detection.
    """

    def __init__(self, key, plan: VotingPlan, xp):
        shape, _, _, _, sign, sigma, _ = key
        self.key, self.shape, self.plan, self.xp, self.stale = key, shape, plan, xp, False
        size = math.prod(shape)
        self.results, maxima, pairs, numerators, self.residuals = _results_buffer(shape, plan, xp)
        self.work = (xp.empty(shape, dtype=np.float64), xp.empty(shape, dtype=np.float64))
        voters = (xp.empty(shape, dtype=np.uint16), xp.empty((size, plan.ndim), dtype=np.int16))
        self.kernels = kernels = _module(plan.ndim, "int", xp)
        # memoized arrays the kernels read: looked up (built if evicted) outside the capture, held, and
        # passed to it (no lookup inside)
        self.steps = _blur_steps(sigma, plan.ndim, xp)
        self.schedule, self.offsets, self.ring = _schedule(plan, "int", xp), _ball(plan, xp), _ring(plan, xp)
        self.initial = _initial_directions(plan, xp)
        self.noise_positions = _noise_positions_on_gpu(tuple(shape), xp)
        self.stats = stats = self.results[:_N_SLOTS]
        stream = xp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            try:
                smoothed = _normalise_and_blur(None, sigma, stats, kernels, xp, outputs=self.work, steps=self.steps,
                                               first=1)
                _voters(smoothed, plan, sign, stats[_LARGEST:], kernels, "int", xp, out=voters, initial=self.initial)
                other = self.work[1] if smoothed is self.work[0] else self.work[0]
                halves = other.view(np.uint32).reshape(-1)
                buffers = (halves[:size].reshape(shape), halves[size:].reshape(shape))
                buffers[0].fill(0)
                votes = _passes(*voters, plan, "int", None, kernels, xp, buffers=buffers, schedule=self.schedule)
                is_maximum = voters[0].view(np.uint8).reshape(-1)[:size]  # the weights are read no more
                is_maximum.fill(0)
                self.cells = _Cells(votes, plan, stats, kernels, xp, is_maximum=is_maximum, smoothed=smoothed,
                                    sign=sign, offsets=self.offsets, ring=self.ring)
                self.cells.find_maxima(len(maxima), maxima)
                self.cells.find_contrast(numerators)
                self.cells.find_pairs(len(pairs), pairs)
            finally:
                self.graph = stream.end_capture()
        stream.synchronize()
        self.voters = voters
        self.lock = threading.Lock()

    def detect(self, signal) -> RawDetection | None:
        """The detection of ``signal``; None if this graph is stale (the caller runs the plain path)."""
        with self.lock:
            if self.stale:
                return None
            source = _kernel_input(signal, self.xp)
            self.stats.fill(0)  # a memset on the current stream
            _min_max(source, self.stats, self.kernels)
            _noise_samples(source, self.stats, self.residuals, self.kernels, self.xp, self.noise_positions)
            _normalise_and_blur(source, None, self.stats, self.kernels, self.xp, outputs=self.work, steps=self.steps,
                                last=1)
            self.graph.launch()
            capacities = (self.cells.capacity, self.cells.pair_capacity)
            found = _finish(self.results, self.cells, self.shape, self.plan, self.xp)
            if (self.cells.capacity, self.cells.pair_capacity) != capacities:  # a list overflowed: found again
                self.stale = True  # the cells now point at other lists; capture anew next time
                with _graphs_lock:
                    if _graphs.get(self.key) is self:
                        del _graphs[self.key]
        found.votes = None
        return found
