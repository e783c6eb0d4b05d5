"""Parallel loops for the compiled CPU kernels without Numba's ``parallel=True``.

A ``prange`` loop costs 1-6 s of compilation each (Numba's parfor passes), paid
once per machine but first at the very first detection a user runs. A serial
``@njit(nogil=True, cache=True)`` kernel over a range of tasks compiles in a
fraction of that, and releases the GIL: :func:`for_ranges` cuts the tasks into
ranges and runs the kernel on them from a pool of Python threads, as many as
``numba.get_num_threads()`` (``ivote._backend.cpu_threads``, so
``numba.set_num_threads`` still sets the parallelism).

Under :func:`recording`, ``for_ranges`` runs no compiled kernel: it notes which
kernel would run with which argument types (``ivote._compile`` compiles them
ahead, in several processes).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ._backend import cpu_threads

__all__ = ["for_ranges", "recording"]

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_RANGES_PER_THREAD = 4
"""Ranges per thread: uneven tasks (rows with and without nuclei) still share out evenly."""
_RECORDING: contextvars.ContextVar[list | None] = contextvars.ContextVar("ivote_recording", default=None)


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


def for_ranges(kernel, n_tasks: int, *args, grain: int = 1) -> None:
    """``kernel(first, last, *args)`` over ranges covering ``0 .. n_tasks``, in parallel.

    ``grain``: the smallest range worth a thread. One range (one thread, or
    few tasks) runs in the calling thread.
    """
    calls = _RECORDING.get()
    if calls is not None and hasattr(kernel, "compile"):
        from numba import typeof

        calls.append((kernel, tuple(typeof(value) for value in (0, n_tasks, *args))))
        return
    threads = cpu_threads()
    parts = min(threads * _RANGES_PER_THREAD, max(1, n_tasks // max(grain, 1)))
    if threads <= 1 or parts <= 1:
        kernel(0, n_tasks, *args)
        return
    bounds = [n_tasks * i // parts for i in range(parts + 1)]
    # at most `threads` kernels at once: the first `threads` ranges start, each finished one starts the next
    pool = _pool()
    pending = iter(zip(bounds[:-1], bounds[1:]))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                nxt = next(pending, None)
            if nxt is None:
                return
            kernel(nxt[0], nxt[1], *args)

    futures = [pool.submit(worker) for _ in range(min(threads, parts) - 1)]
    worker()  # the caller works too: no wait on a busy pool
    for future in futures:
        future.result()
