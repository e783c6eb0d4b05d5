"""Array backend: CuPy on a GPU, NumPy everywhere else.

This is the only module of napari-ivote that imports CuPy. Everything else asks
it for an array module (``xp``), moves arrays with :func:`to_device` and
:func:`to_host`, and gets compiled CUDA kernels from :func:`get_kernel`.

The backend is chosen once per process, by ``IVOTE_BACKEND=auto|cupy|numba|numpy``:

* ``auto`` (or unset): CuPy when it imports and ``cupy.is_available()`` is
  true, else the Numba-compiled CPU kernels when Numba imports, else NumPy;
* ``cupy`` forces CuPy, and is an error when CuPy or a GPU is missing;
* ``numba`` forces the CPU with the compiled kernels (an error without Numba);
* ``numpy`` forces the plain NumPy reference (even on a machine with a GPU).

Arrays live in NumPy for both CPU backends: ``xp`` is ``numpy`` and
:func:`use_numba` tells a stage whether to call its ``_numba`` module or its
NumPy one.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from importlib import resources
from types import ModuleType

import numpy as np

__all__ = [
    "BackendError",
    "backend_name",
    "cpu_threads",
    "cupy_available",
    "default_xp",
    "fft_module",
    "free_gpu_memory",
    "limit_gpu_memory",
    "get_array_module",
    "get_kernel",
    "index_type",
    "is_device_array",
    "kernel_source",
    "select_xp",
    "load_module",
    "ndimage_module",
    "numba_available",
    "numba_lock",
    "use_numba",
    "synchronize",
    "empty_pinned",
    "to_device",
    "to_device_staged",
    "to_host",
    "to_host_pinned",
]

_ENV = "IVOTE_BACKEND"


class BackendError(RuntimeError):
    """The requested array backend cannot be used on this machine."""


@functools.lru_cache(maxsize=1)
def _cupy() -> ModuleType | None:
    """CuPy if it imports and sees a usable GPU, else None (memoized)."""
    try:
        import cupy
    except Exception:  # ImportError, or a broken CUDA install raising anything
        return None
    try:
        if not cupy.is_available():
            return None
    except Exception:
        return None
    return cupy


def cupy_available() -> bool:
    """True when CuPy imports and a CUDA device can be used."""
    return _cupy() is not None


@functools.lru_cache(maxsize=1)
def _numba() -> ModuleType | None:
    """Numba if it imports (memoized)."""
    try:
        import numba
    except Exception:  # ImportError, or an llvmlite that does not load
        return None
    return numba


numba_lock = threading.RLock()
"""Held around every parallel Numba kernel call: Numba's workqueue threading layer (the default
where neither OpenMP nor TBB is installed, e.g. some macOS wheels) must not be entered from two
threads at once (e.g. a detect and a segment widget's workers), and one call uses every core."""


def numba_available() -> bool:
    """True when Numba imports, so the compiled CPU kernels can run."""
    return _numba() is not None


def _requested_backend() -> str:
    value = os.environ.get(_ENV, "").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value not in ("numpy", "numba", "cupy"):
        raise BackendError(f"{_ENV} must be 'auto', 'cupy', 'numba' or 'numpy'; got {value!r}")
    return value


def use_numba(xp: ModuleType | None = None, backend: str = "auto") -> bool:
    """Whether CPU work (``xp`` is NumPy) should run the Numba kernels.

    ``backend`` is the caller's explicit choice (as for :func:`select_xp`):
    'numba' insists on the kernels, 'numpy' refuses them; 'auto' (and 'cupy',
    which never gets here with NumPy) follows ``IVOTE_BACKEND``: True for
    ``auto`` or ``numba`` when Numba imports, never for ``numpy``; never on CuPy.

    Raises
    ------
    BackendError
        If Numba was asked for (``backend`` or ``IVOTE_BACKEND``) but does not import.
    """
    if xp is not None and xp is not np:
        return False
    if backend == "numpy":
        return False
    if backend == "numba":
        if _numba() is None:
            raise BackendError("backend='numba' was requested but Numba does not import: pip install numba")
        return True
    requested = _requested_backend()
    if requested == "numpy":
        return False
    if requested == "numba" and _numba() is None:
        raise BackendError(f"{_ENV}=numba was requested but Numba does not import: pip install numba")
    return _numba() is not None


def cpu_threads() -> int:
    """Threads the compiled CPU kernels use (Numba's, else the CPU count)."""
    numba = _numba()
    if numba is not None:
        return int(numba.get_num_threads())
    return os.cpu_count() or 1


def default_xp() -> ModuleType:
    """The array module new work should run on: CuPy or NumPy.

    Raises
    ------
    BackendError
        If ``IVOTE_BACKEND=cupy`` is set but CuPy or a GPU is missing.
    """
    requested = _requested_backend()
    if requested in ("numpy", "numba"):
        use_numba()  # raises for IVOTE_BACKEND=numba without Numba
        return np
    cupy = _cupy()
    if requested == "cupy" and cupy is None:
        raise BackendError(
            f"{_ENV}=cupy was requested but no usable GPU was found: install "
            "'napari-ivote[cuda12]' or 'napari-ivote[cuda13]' on a machine with an "
            f"NVIDIA GPU, or unset {_ENV} to run on the CPU"
        )
    return cupy if cupy is not None else np


def select_xp(backend: str = "auto", *arrays) -> ModuleType:
    """The array module a computation asked to run on ``backend`` should use.

    ``"numpy"`` and ``"numba"``: NumPy (the stage then asks :func:`use_numba`
    with the same ``backend`` whether to run its compiled kernels; "numba"
    without Numba is a ``BackendError``). ``"cupy"``: CuPy (a ``BackendError``
    without a GPU; it overrides ``IVOTE_BACKEND=numpy``, since the caller asked
    explicitly). ``"auto"``: CuPy for CuPy input arrays, else :func:`default_xp`.
    """
    if backend not in ("auto", "numpy", "numba", "cupy"):
        raise ValueError(f"backend must be 'auto', 'numpy', 'numba' or 'cupy'; got {backend!r}")
    if backend == "numba":
        use_numba(np, backend)  # raises without Numba
        return np
    if backend == "numpy":
        return np
    if backend == "cupy":
        cupy = _cupy()
        if cupy is None:
            raise BackendError("backend='cupy' was requested but no usable GPU was found; use backend='numpy' or 'auto'")
        return cupy
    xp = get_array_module(*arrays)
    return xp if xp is not np else default_xp()


def is_device_array(array) -> bool:
    """True for a CuPy array (without importing CuPy when it is absent)."""
    return type(array).__module__.startswith("cupy")


def get_array_module(*arrays) -> ModuleType:
    """The array module of the given arrays: CuPy if any is a CuPy array."""
    for array in arrays:
        if is_device_array(array):
            return _cupy() or np
    return np


def to_device(array, xp: ModuleType | None = None):
    """Move ``array`` to the backend ``xp`` (default: :func:`default_xp`)."""
    xp = default_xp() if xp is None else xp
    if xp is np:
        return to_host(array)
    return xp.asarray(array)


def to_host(array) -> np.ndarray:
    """A NumPy array with the same contents (copies from the GPU when needed)."""
    if is_device_array(array):
        return array.get()
    return np.asarray(array)


# ----------------------------------------------------------------------------
# Transfers through pinned (page-locked) host memory
# ----------------------------------------------------------------------------

STAGE_CHUNK_BYTES = 4 << 20
"""Bytes per chunk of :func:`to_device_staged`: small enough that the first chunk's work starts
early, large enough that each copy runs near the link's speed."""
STAGE_SLOTS = 16
"""Chunks of pinned staging memory :func:`to_device_staged` cycles through (64 MiB by default)."""
STAGE_THREADS = max(1, min(8, (os.cpu_count() or 1) // 2))
"""Threads filling the pinned staging memory: one thread's memcpy (about 10 GB/s) is slower than
the host-to-device link (about 50 GB/s on PCIe 5)."""

_stage_pool = [None, 0]  # the pool and its number of threads
_stage_lock = threading.Lock()


def _stage_threads():
    """The pool of :data:`STAGE_THREADS` threads (made anew when that number changes)."""
    with _stage_lock:
        pool, threads = _stage_pool
        if pool is None or threads != STAGE_THREADS:
            from concurrent.futures import ThreadPoolExecutor

            if pool is not None:
                pool.shutdown(wait=False)
            _stage_pool[:] = [ThreadPoolExecutor(STAGE_THREADS, thread_name_prefix="ivote-stage"), STAGE_THREADS]
        return _stage_pool[0]


def empty_pinned(xp: ModuleType, shape, dtype) -> np.ndarray:
    """A NumPy array in pinned host memory (from CuPy's pinned pool; freed with the array)."""
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    nbytes = max(math.prod(shape) * dtype.itemsize, 1)
    return np.ndarray(shape, dtype=dtype, buffer=xp.cuda.alloc_pinned_memory(nbytes))


def _copy_stream(xp: ModuleType):
    """A non-blocking stream for host-to-device copies, one per device and thread."""
    key = ("copy", xp.cuda.Device().id)
    streams = _thread_streams.__dict__.setdefault("streams", {})
    if key not in streams:
        streams[key] = xp.cuda.Stream(non_blocking=True)
    return streams[key]


_thread_streams = threading.local()


def to_device_staged(host: np.ndarray, xp: ModuleType, *, on_chunk=None, out=None):
    """Copy a host array to the GPU through pinned memory, chunk by chunk, and overlap each
    chunk's work with the copy of the next ones.

    Worker threads copy the chunks into a ring of pinned buffers (:data:`STAGE_SLOTS` of
    :data:`STAGE_CHUNK_BYTES`) while a copy stream moves the filled ones to the device;
    ``on_chunk(start, stop)`` (element range of the flattened array) is called once per chunk,
    in order, as soon as that chunk is on the device in the sense of stream order: the work it
    queues on the current stream runs after the chunk's copy and before the next chunks' copies
    finish. No copy from pageable memory is on the path (CUDA stages those through its own
    buffers at a few GB/s). Returns the device array (``out`` if given: C-contiguous, same
    size and dtype). The caller's stream sees the whole array once this returns.
    """
    host = np.ascontiguousarray(host)
    flat = host.reshape(-1)
    device = xp.empty(host.shape, dtype=host.dtype) if out is None else out
    if device.size != host.size or device.dtype != host.dtype or not device.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous device array of the host array's size and dtype")
    n = flat.size
    if n == 0:
        return device
    itemsize = flat.dtype.itemsize
    per_chunk = max(1, STAGE_CHUNK_BYTES // itemsize)
    bounds = [(start, min(start + per_chunk, n)) for start in range(0, n, per_chunk)]
    n_slots = min(STAGE_SLOTS, len(bounds))
    ring = empty_pinned(xp, (n_slots, per_chunk), flat.dtype)
    compute = xp.cuda.get_current_stream()
    copier = _copy_stream(xp)
    copier.wait_event(compute.record(xp.cuda.Event(disable_timing=True)))  # the destination may be memory
    # the current stream has just freed, still read by its queued work
    copied = [None] * len(bounds)  # event after chunk i's copy
    recorded = [threading.Event() for _ in bounds]

    def fill(i):
        if i >= n_slots:  # the slot's previous chunk must have left it
            recorded[i - n_slots].wait()
            copied[i - n_slots].synchronize()
        start, stop = bounds[i]
        np.copyto(ring[i % n_slots, : stop - start], flat[start:stop])

    pool = _stage_threads()
    filled = [pool.submit(fill, i) for i in range(len(bounds))]
    base = device.data
    try:
        for i, (start, stop) in enumerate(bounds):
            filled[i].result()
            (base + start * itemsize).copy_from_host_async(ring[i % n_slots].ctypes.data,
                                                           (stop - start) * itemsize, stream=copier)
            copied[i] = copier.record(xp.cuda.Event(disable_timing=True))
            recorded[i].set()
            compute.wait_event(copied[i])
            if on_chunk is not None:
                on_chunk(start, stop)
    finally:
        for event in recorded:  # release any worker still waiting, so none is left blocked
            event.set()
        for future in filled:
            future.exception()
        queued = [event for event in copied if event is not None]
        if queued:
            queued[-1].synchronize()  # the ring returns to the pool only once no copy reads it
    return device


def to_host_pinned(arrays, xp: ModuleType) -> list[np.ndarray]:
    """Copy device arrays to NumPy arrays in pinned memory (one wait for all; no pageable copy)."""
    stream = xp.cuda.get_current_stream()
    outs = []
    for array in arrays:
        array = xp.ascontiguousarray(array)
        out = empty_pinned(xp, array.shape, array.dtype)
        if array.size:
            array.data.copy_to_host_async(out.ctypes.data, array.nbytes, stream=stream)
        outs.append((out, array))
    stream.synchronize()
    return [out for out, _ in outs]


def ndimage_module(xp: ModuleType) -> ModuleType:
    """``scipy.ndimage`` or ``cupyx.scipy.ndimage``, matching ``xp``."""
    if xp is np:
        import scipy.ndimage

        return scipy.ndimage
    import cupyx.scipy.ndimage

    return cupyx.scipy.ndimage


def fft_module(xp: ModuleType) -> ModuleType:
    """``scipy.fft`` or ``cupyx.scipy.fft``, matching ``xp``."""
    if xp is np:
        import scipy.fft

        return scipy.fft
    import cupyx.scipy.fft

    return cupyx.scipy.fft


def synchronize(xp: ModuleType) -> None:
    """Wait for queued GPU work (no-op on NumPy)."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


_release_hooks: list = []
_table_hooks: list = []


def on_free_gpu_memory(hook=None, *, tables: bool = False):
    """Register ``hook()`` to drop GPU buffers a module keeps between calls
    (e.g. captured detections) whenever :func:`free_gpu_memory` runs; with
    ``tables=True`` (``@on_free_gpu_memory(tables=True)``), small memoized
    tables rebuilt on demand, which a chunked run keeps between its blocks."""
    def register(function):
        target = _table_hooks if tables else _release_hooks
        if function not in target:
            target.append(function)
        return function

    return register if hook is None else register(hook)


_pinned_tables = [0]  # chunked blocks running (``pin_gpu_tables``)
_pinned_lock = threading.Lock()


class pin_gpu_tables:
    """While a chunked block runs, :func:`free_gpu_memory` keeps the memoized tables
    whoever calls it (e.g. a napari worker finishing beside a chunked run): the block's
    memory share counts them outside, as held before it started."""

    def __enter__(self):
        with _pinned_lock:
            _pinned_tables[0] += 1
        return self

    def __exit__(self, *exc):
        with _pinned_lock:
            _pinned_tables[0] -= 1


def free_gpu_memory(*, keep_tables: bool = False) -> None:
    """Drop the buffers modules keep between calls (``on_free_gpu_memory``), then
    return cached blocks of CuPy's memory pools to the driver. ``keep_tables``:
    keep the memoized tables (cone tables, taps), as between the blocks of one
    chunked run, which counts them outside each block's share (kept too while
    a block runs, :class:`pin_gpu_tables`)."""
    keep_tables = keep_tables or _pinned_tables[0] > 0
    for hook in list(_release_hooks) + ([] if keep_tables else list(_table_hooks)):
        hook()
    cupy = _cupy()
    if cupy is None:
        return
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()


def limit_gpu_memory(limit_bytes: int | None) -> int:
    """Cap CuPy's memory pool on this process's GPU at ``limit_bytes`` (None or 0: no cap);
    an allocation beyond it raises CuPy's out-of-memory error. Returns the previous cap
    (0: none), to restore it. No-op without CuPy."""
    cupy = _cupy()
    if cupy is None:
        return 0
    pool = cupy.get_default_memory_pool()
    previous = int(pool.get_limit())
    pool.set_limit(size=int(limit_bytes or 0))
    return previous


def gpu_memory_available() -> float:
    """Bytes a GPU computation may still take on this process's GPU: the device's free memory
    plus what CuPy's pool holds unused, at most the pool's cap; inf without CuPy."""
    cupy = _cupy()
    if cupy is None:
        return math.inf
    pool = cupy.get_default_memory_pool()
    free, _total = cupy.cuda.runtime.memGetInfo()
    available = float(free + pool.total_bytes() - pool.used_bytes())
    cap = int(pool.get_limit())
    return min(available, float(cap - pool.used_bytes())) if cap else available


def is_gpu_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the GPU running out of memory: CuPy's OutOfMemoryError, or a cuFFT
    or CUDA runtime error saying so."""
    cupy = _cupy()
    if cupy is None:
        return False
    if isinstance(exc, cupy.cuda.memory.OutOfMemoryError):
        return True
    text = str(exc)
    return type(exc).__module__.startswith("cupy") and ("ALLOC_FAILED" in text or "out of memory" in text.lower()
                                                         or "cudaErrorMemoryAllocation" in text)


def gpu_memory_guard(what: str):
    """Decorator: a GPU out-of-memory inside the call frees every cached GPU buffer
    (:func:`free_gpu_memory`, so the next call starts clean) and becomes a
    :class:`~ivote.errors.ResourceLimitError` saying what to do."""
    from .errors import ResourceLimitError

    def decorate(function):
        @functools.wraps(function)
        def guarded(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except Exception as exc:
                if isinstance(exc, ResourceLimitError) or not is_gpu_out_of_memory(exc):
                    raise
                message = " ".join(str(exc).split())
            # outside the handler: the failed call's frames, and the GPU arrays they hold, are gone
            free_gpu_memory()
            raise ResourceLimitError(
                f"{what}: the GPU ran out of memory ({message}); free GPU memory (close other GPU programs), "
                "use a smaller image (crop or tiles) or run on the CPU with backend='numpy' (IVOTE_BACKEND=numpy)"
            )
        return guarded

    return decorate


def backend_name(xp: ModuleType | None = None) -> str:
    """Human-readable name of the backend, e.g. ``'GPU: NVIDIA H100 (CuPy 14.0)'``
    or ``'CPU: Numba 0.62 on 8 threads, no GPU found'``."""
    xp = default_xp() if xp is None else xp
    if xp is np:
        requested = _requested_backend()
        why = f"forced by {_ENV}={requested}" if requested != "auto" else "no GPU found"
        if use_numba(xp):
            return f"CPU: Numba {_numba().__version__} on {cpu_threads()} threads ({why})"
        return f"NumPy {np.__version__} ({why})"
    device = xp.cuda.Device()
    props = xp.cuda.runtime.getDeviceProperties(device.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return f"GPU: {name} (CuPy {xp.__version__})"


def index_type(array) -> str:
    """C index type for a kernel over ``array``: 32-bit below 2**31 bytes, else 64-bit."""
    return "int" if array.nbytes < 2**31 else "long long"


# ----------------------------------------------------------------------------
# CUDA kernel modules
# ----------------------------------------------------------------------------


def kernel_source(name: str) -> str:
    """Source text of ``ivote/kernels/<name>.cu`` (package data)."""
    path = resources.files("ivote") / "kernels" / f"{name}.cu"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"no CUDA source 'ivote/kernels/{name}.cu'") from None


_module_cache: dict = {}
_module_lock = threading.Lock()


def load_module(
    name: str,
    *,
    defines: dict | None = None,
    name_expressions: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
):
    """Compile ``kernels/<name>.cu`` once per GPU and return the ``cupy.RawModule``.

    Parameters
    ----------
    name : str
        File stem under ``ivote/kernels``.
    defines : dict, optional
        ``#define`` preamble, ``{"BLOCK": 256}`` becomes ``#define BLOCK 256``.
    name_expressions : tuple of str
        Template instantiations to compile, e.g. ``("ivote_vote_2d<float>",)``.
    options : tuple of str
        Extra NVRTC options.

    The cache key holds everything that changes the compiled code (source,
    defines, instantiations, options and the current device), so a module is
    compiled once per device and reused by every later call.
    """
    cupy = _cupy()
    if cupy is None:
        raise BackendError(f"CUDA kernel module {name!r} needs CuPy and a GPU")
    defines = dict(sorted((defines or {}).items()))
    key = (
        name,
        tuple(defines.items()),
        tuple(name_expressions),
        tuple(options),
        cupy.cuda.Device().id,
    )
    with _module_lock:
        module = _module_cache.get(key)
        if module is None:
            preamble = "".join(f"#define {k} {v}\n" for k, v in defines.items())
            source = preamble + kernel_source(name)
            module = cupy.RawModule(
                code=source,
                options=("--std=c++17",) + tuple(options),
                name_expressions=tuple(name_expressions) or None,
            )
            if name_expressions:
                # compile now, so a broken kernel fails here and not mid-run
                module.compile()
            _module_cache[key] = module
    return module


def get_kernel(name: str, kernel: str, **kwargs):
    """A compiled kernel ``kernel`` (a function name or template instantiation) of
    ``kernels/<name>.cu``; ``kwargs`` go to :func:`load_module`.

    For templates, ``kernel`` must be one of ``name_expressions``.
    """
    module = load_module(name, **kwargs)
    return module.get_function(kernel)
