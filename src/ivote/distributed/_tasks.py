"""Running a chunked stage's block tasks, shared by every chunked engine.

- Where a task reads its block: a view of a NumPy array, a Dask array's slice
  (computed by Dask as the task's input), or a lazy region of any other array
  (Zarr, HDF5, ...) read in the task (``_source``, ``_read``).
- The memory one block may use (``parse_bytes``, ``_memory_limit``) and, on a
  GPU, one block at a time under that limit (``gpu_limit``, ``_on_device``).
- The Dask runner of a pass over the blocks, with ``progress(done, total)`` as
  tasks finish (``_Runner``), on a local scheduler or a distributed client.
"""

from __future__ import annotations

import threading

import numpy as np

#: host memory a block may use on the CPU when no limit is given
DEFAULT_CPU_BLOCK_BYTES = 2 * 2**30
#: share of a GPU's memory a block may use when no limit is given
DEFAULT_GPU_FRACTION = 0.75
#: Dask threads of the threads scheduler: one block computes per GPU (or Numba) at a time while
#: the others read theirs; host memory holds this many blocks
THREADS = 4

_GPU_LOCK = threading.Lock()  # one block at a time on this process's GPU (threads scheduler)


def parse_bytes(value) -> int | None:
    """``"8GB"``, ``"512MiB"``, ``2**30`` -> bytes (None stays None)."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        number = int(value)
    else:
        text = str(value).strip().upper().replace(" ", "")
        units = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "KIB": 2**10, "M": 10**6, "MB": 10**6, "MIB": 2**20,
                 "G": 10**9, "GB": 10**9, "GIB": 2**30, "T": 10**12, "TB": 10**12, "TIB": 2**40}
        digits = text.rstrip("KMGTIB")
        try:
            number = int(float(digits) * units[text[len(digits):]])
        except (ValueError, KeyError, OverflowError):
            raise ValueError(f"memory_limit must be a finite number of bytes or a size like '8GB' or '512MiB' "
                             f"(leave it out for the default); got {value!r}") from None
    if number <= 0:
        raise ValueError(f"memory_limit must be positive; got {value!r}")
    return number


def _memory_limit(memory_limit, gpu: bool) -> int:
    limit = parse_bytes(memory_limit)
    if limit is not None:
        return limit
    if gpu:
        from .._backend import _cupy

        total = _cupy().cuda.Device().mem_info[1]
        return int(DEFAULT_GPU_FRACTION * total)
    return DEFAULT_CPU_BLOCK_BYTES


def _source(image, region):
    """What a task reads its block from: a slice of a NumPy array (a view) or of a
    Dask array (computed by Dask as the task's input), else the array itself (the
    task slices it: Zarr, HDF5, ...)."""
    if isinstance(image, np.ndarray) or _is_dask(image):
        return image[region]
    return _Lazy(image, region)


def _is_dask(array) -> bool:
    return type(array).__module__.split(".")[0] == "dask" and hasattr(array, "dask")


class _Lazy:
    """A region of an array, read in the task."""

    def __init__(self, array, region):
        self.array, self.region = array, region

    def read(self):
        return self.array[self.region]


def _read(source) -> np.ndarray:
    from .._backend import to_host

    block = source.read() if isinstance(source, _Lazy) else source
    return np.ascontiguousarray(to_host(block))


def _on_device(backend: str, limit: int):
    """(xp, context) of a task: on a GPU, one block at a time under the memory limit."""
    import contextlib

    from .._backend import select_xp

    xp = select_xp(backend)
    if xp is np:
        return xp, contextlib.nullcontext()
    return xp, gpu_limit(limit)


class gpu_limit:
    """Hold the GPU lock and let the block allocate at most ``limit`` new bytes
    through CuPy's memory pool (``_backend.limit_gpu_memory``), restored after.
    Buffers kept between calls (captured detections) are dropped first and the
    pool's free blocks returned; what the pool still holds then (the caller's
    arrays, memoized tables, a freed block the pool cannot return because a
    part of it is in use) is counted on top of the limit, not against it: the
    cap is the pool's size at the start plus ``limit``, so what ran before in
    the process does not shrink the block's share. The block's own buffers are
    freed after. Used by every chunked stage."""

    def __init__(self, limit: int):
        self.limit = limit

    def __enter__(self):
        from .._backend import _cupy, free_gpu_memory, limit_gpu_memory, pin_gpu_tables

        _GPU_LOCK.acquire()
        self.pinned = pin_gpu_tables()  # another thread's free_gpu_memory keeps them meanwhile
        self.pinned.__enter__()
        try:
            free_gpu_memory(keep_tables=True)  # tables are counted outside the block's share
            held = int(_cupy().get_default_memory_pool().total_bytes())
            self.previous = limit_gpu_memory(held + self.limit)
        except BaseException:
            self.pinned.__exit__(None, None, None)
            _GPU_LOCK.release()
            raise

    def __exit__(self, *exc):
        from .._backend import _cupy, limit_gpu_memory

        try:
            _cupy().get_default_memory_pool().free_all_blocks()
            limit_gpu_memory(self.previous)
        finally:
            self.pinned.__exit__(None, None, None)
            _GPU_LOCK.release()


class _Runner:
    """Runs each pass's block tasks on Dask and reports ``progress(done, total)`` as they finish."""

    def __init__(self, progress, total: int):
        self.progress, self.total, self.done = progress, total, 0
        if progress is not None:
            progress(0, total)

    def _finished(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)

    def skip(self, n: int) -> None:
        self.done += n - 1
        self._finished()

    def run(self, function, arguments, scheduler, each=None) -> list:
        """``[function(*args) for args in arguments]`` as Dask tasks, in order;
        ``each(result)`` in this thread as each task finishes."""
        import dask

        tasks = [dask.delayed(function, pure=False)(*args) for args in arguments]
        results = [None] * len(tasks)
        client = _client(scheduler)
        if client is not None:
            from distributed import as_completed

            futures = client.compute(tasks)
            where = {future.key: i for i, future in enumerate(futures)}
            try:
                for future in as_completed(futures):
                    results[where[future.key]] = future.result()
                    if each is not None:
                        each(results[where[future.key]])
                    self._finished()
            except BaseException:
                client.cancel(futures)
                raise
            return results
        from dask.callbacks import Callback

        where = {task.key: i for i, task in enumerate(tasks)}

        def finished(key, result, dsk, state, worker_id):
            if key in where:
                results[where[key]] = result
                if each is not None:
                    each(result)
                self._finished()

        options = {"num_workers": THREADS} if scheduler in (None, "threads") else {}
        with Callback(posttask=finished):
            dask.compute(*tasks, scheduler=scheduler or "threads", **options)
        return results


def _workers(scheduler) -> int:
    """Workers of the distributed cluster the tasks go to (1 for a local scheduler)."""
    client = _client(scheduler)
    if client is None:
        return 1
    return max(1, len(client.scheduler_info().get("workers", {})))


def _client(scheduler):
    """The ``dask.distributed.Client`` the tasks go to, or None for a local scheduler."""
    if scheduler is not None and not isinstance(scheduler, str):
        return scheduler  # a Client
    if scheduler not in (None, "distributed", "dask.distributed"):
        return None
    import dask

    if dask.config.get("scheduler", None) not in (None, "distributed", "dask.distributed"):
        return None
    try:
        from distributed import Client
    except ImportError:
        return None
    try:
        return Client.current(allow_global=True)
    except ValueError:
        return None
