"""Parallel loops for the compiled CPU kernels without Numba's ``parallel=True``.

A ``prange`` loop costs 1-6 s of compilation each (Numba's parfor passes), paid
once per machine but first at the very first detection a user runs. A serial
``@njit(nogil=True, cache=True)`` kernel over a range of tasks compiles in a
fraction of that, and releases the GIL: :func:`for_ranges` cuts the tasks into
ranges and runs the kernel on them from a pool of Python threads, as many as
``numba.get_num_threads()`` (``ivote._backend.cpu_threads``, so
``numba.set_num_threads`` still sets the parallelism).

A call wakes only as many threads as its work is worth (:func:`threads_for`: each thread
woken costs tens of microseconds, which the segmentation's iterations, about a millisecond of
work a call, paid many times over on a 16-core machine: 2.3x its time on two threads).

Under :func:`recording`, ``for_ranges`` runs no compiled kernel: it notes which
kernel would run with which argument types (``ivote._compile`` compiles them
ahead, in several processes).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ._backend import cpu_threads

__all__ = ["for_ranges", "guided_bounds", "recording", "threads_for"]

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_RECORDING: contextvars.ContextVar[list | None] = contextvars.ContextVar("ivote_recording", default=None)
_WAKE_COST = 150e-6
"""Seconds a call pays for each thread it wakes, as :func:`threads_for` models it. Measured: an
empty kernel over 40 tasks takes 3 us on one thread, 63 us on two (2-core VM); the 1024² 500-iteration
segmentation on a 16-core Xeon took 1.86 s on every thread, 1.43 s at 75 us, 0.83 s at 150 us, 0.81 s
at 300 us; on the 2-core VM 0.37 s at 0-150 us and 0.46 s at 300 us (its iterations then run on one
thread). The detection's kernels, milliseconds each, use every thread of either."""
_WORK: dict = {}
"""Per kernel and shapes (``_work_key``): seconds of work of its last call (the sum over its ranges)."""


@contextlib.contextmanager
def recording():
    """Within it, in this thread, :func:`for_ranges` runs no Numba kernel (a dispatcher: it has
    ``compile``) but appends ``(kernel, argument types)`` to the list it yields; plain Python
    kernels still run. A dry run of a call under it lists the compilations the call needs."""
    calls: list = []
    token = _RECORDING.set(calls)
    try:
        yield calls
    finally:
        _RECORDING.reset(token)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1), thread_name_prefix="ivote-cpu")
        return _POOL


def guided_bounds(n_tasks: int, threads: int, grain: int = 1) -> list[int]:
    """Range bounds over ``0 .. n_tasks`` by guided self-scheduling: each range is a
    ``2 * threads``-th of the tasks not yet in a range (at least ``grain``), so ranges shrink
    towards the end. Threads take the next range as they finish one, so the uneven tasks
    (rows with and without nuclei) share out, and a thread that runs late (its core busy
    with another job, as on a shared machine) holds the others up for a short range only
    (measured against equal ranges, four per thread: 2D 1024² detection on a 2-core VM,
    medians 149.9 -> 137.1 ms on a busy host, 112.5 -> 106.9 ms on a quiet one)."""
    grain = max(grain, 1)
    bounds, left = [0], n_tasks
    while left > 0:
        size = min(left, max(grain, -(-left // (2 * threads))))
        bounds.append(bounds[-1] + size)
        left -= size
    return bounds


def threads_for(work: float | None, threads: int) -> int:
    """How many of ``threads`` a call of ``work`` seconds (on one thread; None: not known yet)
    should use: k threads take about work / k + k * ``_WAKE_COST``, least at k = sqrt(work /
    ``_WAKE_COST``). A detection's kernels (milliseconds each) use every thread; a segmentation
    iteration's (a fraction of one) a few."""
    if work is None or threads <= 1:
        return threads
    return max(1, min(threads, math.isqrt(int(work / _WAKE_COST))))


def _work_key(kernel, n_tasks: int, args) -> tuple:
    """What a kernel's measured work is kept under: the kernel, its task count, its arrays'
    shapes and its other arguments but floats (a stage number, a flag), so that calls whose
    tasks differ in size (the blur across planes and across rows, the set-up's stages, a small
    image then a large one) are not judged by each other."""
    parts = [kernel, n_tasks]
    for value in args:
        shape = getattr(value, "shape", None)
        if shape is not None:
            parts.append(tuple(shape))
        elif isinstance(value, (bool, int, str)):
            parts.append(value)
    return tuple(parts)


_MAX_KEYS = 4096
"""Measurements kept at most (a long session on images of many shapes): beyond, they start over."""


def for_ranges(kernel, n_tasks: int, *args, grain: int = 1) -> None:
    """``kernel(first, last, *args)`` over ranges covering ``0 .. n_tasks``, in parallel.

    ``grain``: the smallest range worth a thread. One range (one thread, few tasks,
    or too little work for more: :func:`threads_for`, from the last call of the kernel
    on the same shapes, ``_work_key``) runs in the calling thread. Ranges:
    :func:`guided_bounds`. A kernel's exception stops the ranges not yet started and
    is raised once every running range has ended.
    """
    calls = _RECORDING.get()
    if calls is not None and hasattr(kernel, "compile"):
        from numba import typeof

        calls.append((kernel, tuple(typeof(value) for value in (0, n_tasks, *args))))
        return
    if n_tasks <= 0:  # nothing to share out, nothing to learn
        kernel(0, n_tasks, *args)
        return
    key = _work_key(kernel, n_tasks, args)
    threads = threads_for(_WORK.get(key), cpu_threads())
    if len(_WORK) >= _MAX_KEYS:
        _WORK.clear()
    if threads <= 1 or n_tasks < 2 * max(grain, 1):
        start = time.perf_counter()
        kernel(0, n_tasks, *args)
        _WORK[key] = time.perf_counter() - start
        return
    bounds = guided_bounds(n_tasks, threads, grain)
    parts = len(bounds) - 1
    # at most `threads` kernels at once: the first `threads` ranges start, each finished one starts the next
    pool = _pool()
    pending = iter(zip(bounds[:-1], bounds[1:]))
    lock = threading.Lock()
    spent = []  # seconds of each range
    failed = []  # set by a range that raised: the others start no more

    def worker():
        while not failed:
            with lock:
                nxt = next(pending, None)
            if nxt is None:
                return
            start = time.perf_counter()
            try:
                kernel(nxt[0], nxt[1], *args)
            except BaseException:
                failed.append(True)
                raise
            spent.append(time.perf_counter() - start)

    futures = [pool.submit(worker) for _ in range(min(threads, parts) - 1)]
    try:
        worker()  # the caller works too: no wait on a busy pool
    finally:
        for future in futures:
            future.exception()  # waits: no range still runs on the arrays when this returns or raises
    for future in futures:
        future.result()
    _WORK[key] = sum(spent)
