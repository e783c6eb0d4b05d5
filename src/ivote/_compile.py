"""The first call's compilation of the Numba kernels, spread over processes.

The compiled CPU kernels are cached on disk (``cache=True``): a machine compiles
them once, at the first call. Numba compiles one function at a time in a process
(its global compiler lock), so that first call waits for every kernel in turn:
a first 2D detection compiles seven kernels, 4.5-5.5 s of one core of the
2-core development machine, a first segmentation four, 6-8 s. Processes do not
share that lock, and they do share the cache on disk (Numba writes its files
atomically, for processes that share a cache).

:func:`compile_ahead` dry-runs the call (``_parallel.recording``: the Python code
runs, no kernel does) to list the kernels it needs with their argument types.
The ones in neither this process nor the cache on disk are compiled by this
process and a few fresh Python processes (as many as the threads the kernels may
use, ``_backend.cpu_threads``, less one) at once: each takes the next kernel not
yet taken, longest first (an exclusive file per kernel in a scratch folder), so
a helper that starts late or runs slowly simply takes fewer. The call then finds
every kernel in the cache.

Nothing changes where it cannot help or could go wrong: one thread, fewer than
two kernels to compile, a cache that is not written (read-only, or disabled), a
frozen application, a Numba whose cache internals differ, a dry run that fails,
or a helper process that fails or overruns (this process then compiles what is missing itself, as
without it). ``IVOTE_COMPILE_PROCESSES=1`` turns it off.
"""

from __future__ import annotations

import dis
import importlib
import logging
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from ._backend import cpu_threads
from ._parallel import recording

__all__ = ["compile_ahead", "compile_ahead_once"]

_LOG = logging.getLogger(__name__)
_ENV = "IVOTE_COMPILE_PROCESSES"
_PATIENCE = 3.0
"""How much longer than this process's own compiling the helpers may take before they are stopped."""
_HELPER_CODE = "import sys; from ivote._compile import _helper; sys.exit(_helper())"
_DONE: set = set()
_DONE_LOCK = threading.Lock()


def _weight(kernel, seen=None, fixed: int = 120) -> int:
    """A kernel's compile cost, roughly, in units of about 1.25 ms of the 2-core development
    machine: its bytecode instructions and its compiled helpers' (each counted once), plus a
    fixed cost per function compiled on its own (a kernel 120, a helper 64; none for a helper
    Numba inlines). Fitted to the detection's kernels (0.37-1.35 s each); the segmentation's
    take about 1.35x as long per unit, in the same order. It orders the work, longest first."""
    seen = set() if seen is None else seen
    function = kernel.py_func
    if function in seen:
        return 0
    seen.add(function)
    total = fixed + len(list(dis.get_instructions(function)))
    for name in function.__code__.co_names:
        value = function.__globals__.get(name)
        if value is not None and hasattr(value, "py_func") and hasattr(value, "compile"):
            inlined = getattr(value, "targetoptions", {}).get("inline") == "always"
            total += _weight(value, seen, 0 if inlined else 64)
    return total


def _on_disk(kernel, signature) -> bool | None:
    """Whether the cache on disk holds ``kernel`` for ``signature``; None where that cannot be
    told (the cache disabled or not writable, another Numba's internals)."""
    try:
        from numba.core.caching import FunctionCache

        cache = kernel._cache
        if not isinstance(cache, FunctionCache):
            return None
        cache._impl.locator.ensure_cache_path()  # raises where it is not writable
        key = cache._index_key(signature, kernel.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 (any failure: do not spread the compilation)
        return None


def _processes() -> int:
    value = os.environ.get(_ENV, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            _LOG.warning("%s=%r is not a whole number; compiling in this process only", _ENV, value)
            return 1
    return cpu_threads()


def _take(folder: str, index: int) -> bool:
    """Claim job ``index`` (True once, in whichever process asks first)."""
    try:
        os.close(os.open(os.path.join(folder, f"{index}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _work(jobs, folder: str, kernels) -> list[int]:
    """Compile every job not yet taken, in order; the indices this process compiled."""
    done = []
    for index, (kernel, signature) in enumerate(zip(kernels, (job[2] for job in jobs))):
        if _take(folder, index):
            kernel.compile(signature)
            done.append(index)
    return done


def _start_helper(jobs, folder: str) -> subprocess.Popen:
    """A fresh Python process working through ``jobs`` ((module, qualified name, signature)), taking
    them in ``folder``; it imports what this process imports (its ``sys.path``: the same copy of
    ivote) and writes to the cache folder this process reads (``numba.config.CACHE_DIR``)."""
    from numba.core import config

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    env[_ENV] = "1"
    env["PYTHONSAFEPATH"] = "1"  # Python >= 3.11: the working folder is not put first on its sys.path
    # the cache folder this process's Numba read at its import, not the environment's now (changed
    # since, the helper's files would land where this process never looks)
    if config.CACHE_DIR:
        env["NUMBA_CACHE_DIR"] = config.CACHE_DIR
    else:
        env.pop("NUMBA_CACHE_DIR", None)
    no_window = getattr(subprocess, "CREATE_NO_WINDOW", 0)  # Windows: no console flashing up beside napari
    helper = subprocess.Popen([sys.executable, "-c", _HELPER_CODE], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, creationflags=no_window)
    try:
        helper.stdin.write(pickle.dumps((jobs, folder)))
        helper.stdin.close()
    except OSError:  # it died at once; wait() tells
        pass
    return helper


def _helper() -> int:
    """A helper process: compile the pickled jobs on stdin not yet taken into the cache on disk."""
    jobs, folder = pickle.loads(sys.stdin.buffer.read())
    kernels = []
    for module, name, _ in jobs:
        kernel = importlib.import_module(module)
        for part in name.split("."):
            kernel = getattr(kernel, part)
        kernels.append(kernel)
    _work(jobs, folder, kernels)
    return 0


def compile_ahead(run, processes: int | None = None) -> dict:
    """Compile the Numba kernels that ``run()`` would call, several processes at once.

    ``run`` is a dry run of the call (same dtypes and options as the call: the same argument
    types), run under ``_parallel.recording``. Kernels already compiled in this process or
    cached on disk are left to the call (it loads them). ``processes``: at most this many
    compiling processes, this one included (default: ``IVOTE_COMPILE_PROCESSES``, else the
    kernels' threads).

    Returns what happened: ``needed`` (kernel names, in call order), ``missing`` (the ones neither
    here nor on disk), ``here`` (compiled in this process), ``elsewhere`` (taken by helpers),
    ``helpers`` (how many started), ``failed`` (helpers that did not finish in time or exited
    with an error), ``seconds``.
    """
    started = time.perf_counter()
    report = {"needed": [], "missing": [], "here": [], "elsewhere": [], "helpers": 0, "failed": 0, "seconds": 0.0}
    try:
        # the dry run computes on arrays no kernel filled (uninitialised): their floating-point
        # warnings mean nothing, and a failure costs the call only this speed-up
        with recording() as calls, np.errstate(all="ignore"):
            run()
    except Exception as error:  # noqa: BLE001
        _LOG.debug("the dry run listing the Numba kernels failed (%r); the call compiles its own", error)
        report["seconds"] = time.perf_counter() - started
        return report
    needed = []
    for kernel, signature in calls:
        if (kernel, signature) not in needed:
            needed.append((kernel, signature))
    report["needed"] = [kernel.py_func.__name__ for kernel, _ in needed]
    missing = [(kernel, signature) for kernel, signature in needed if signature not in kernel.overloads]
    on_disk = [_on_disk(kernel, signature) for kernel, signature in missing]
    missing = [pair for pair, cached in zip(missing, on_disk) if not cached]
    report["missing"] = [kernel.py_func.__name__ for kernel, _ in missing]
    processes = min(_processes() if processes is None else max(1, int(processes)), len(missing))
    if (processes < 2 or any(cached is None for cached in on_disk) or getattr(sys, "frozen", False)
            or not sys.executable):
        report["seconds"] = time.perf_counter() - started
        return report  # the call compiles (or loads) its kernels itself, as without this
    missing.sort(key=lambda pair: -_weight(pair[0]))  # longest first
    jobs = [(kernel.py_func.__module__, kernel.py_func.__qualname__, signature) for kernel, signature in missing]
    folder = tempfile.mkdtemp(prefix="ivote-compile-")
    try:
        helpers = []
        for _ in range(processes - 1):
            try:
                helpers.append(_start_helper(jobs, folder))
            except OSError as error:  # no process could be started: this process compiles it all
                _LOG.debug("no helper process for the Numba compilation: %s", error)
                break
        report["helpers"] = len(helpers)
        own_start = time.perf_counter()
        here = _work(jobs, folder, [kernel for kernel, _ in missing])
        report["own_seconds"] = time.perf_counter() - own_start
        deadline = time.perf_counter() + max(30.0, _PATIENCE * report["own_seconds"])
        for helper in helpers:
            try:
                code = helper.wait(timeout=max(0.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                helper.kill()
                helper.wait()
                code = None
            if code != 0:
                report["failed"] += 1
                _LOG.debug("a helper process compiling Numba kernels ended with %s; the call compiles "
                           "what it left", code)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    names = [kernel.py_func.__name__ for kernel, _ in missing]
    report["here"] = [names[index] for index in here]
    report["elsewhere"] = [name for index, name in enumerate(names) if index not in here]
    report["seconds"] = time.perf_counter() - started
    return report


def compile_ahead_once(key, run) -> dict | None:
    """:func:`compile_ahead` of ``run`` at the first call with ``key`` in this process (the first
    detection of its kind, the first segmentation), None after: later calls find their kernels
    compiled. A call that comes while the first is compiling goes on and compiles what it needs."""
    with _DONE_LOCK:
        if key in _DONE:
            return None
        _DONE.add(key)
    return compile_ahead(run)
