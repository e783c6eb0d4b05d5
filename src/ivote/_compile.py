"""The first call's compilation of the Numba kernels, spread over processes.

The compiled CPU kernels are cached on disk (``cache=True``): a machine compiles
them once, at the first call. Numba compiles one function at a time in a process
(its global compiler lock), so that first call waits for every kernel in turn:
a first 2D detection compiles seven kernels, 4.5-5.5 s of one core of a
2-core laptop. Processes do not share that lock, and they do share the cache on
disk (Numba writes its files atomically, for processes that share a cache).

:func:`compile_ahead` dry-runs the call (``_parallel.recording``: the Python code
runs, no kernel does) to list the kernels it needs with their argument types;
the ones in neither this process nor the cache on disk are shared out between
this process and a few fresh Python processes (as many as the threads the
kernels may use, ``_backend.cpu_threads``, less one), each compiling its share
into the cache. The call then finds every kernel in the cache.

Nothing changes where it cannot help or could go wrong: one thread, a cache that
is not written (read-only, or disabled), a frozen application, a Numba whose
cache internals differ, or a helper process that fails or overruns (this
process then compiles what is missing itself, as without it).
``IVOTE_COMPILE_PROCESSES=1`` turns it off.
"""

from __future__ import annotations

import dis
import importlib
import logging
import os
import pickle
import subprocess
import sys
import time

from ._backend import cpu_threads
from ._parallel import recording

__all__ = ["compile_ahead"]

_LOG = logging.getLogger(__name__)
_ENV = "IVOTE_COMPILE_PROCESSES"
_START_WEIGHT = 700
"""A helper process's start (importing NumPy, SciPy, Numba and ivote; Numba's first compile) in
the units of :func:`_weight`: about 1 s on the 2-core development machine, where a kernel of
300 bytecode instructions takes about 0.5 s."""
_PATIENCE = 3.0
"""How much longer than this process's own share the helpers may take before they are stopped."""


def _weight(kernel, seen=None) -> int:
    """A kernel's compile cost, roughly: its bytecode instructions and its compiled helpers' (each
    counted once), plus a fixed cost per function (measured on the detection's kernels: 0.1 s +
    1.7 ms per instruction)."""
    seen = set() if seen is None else seen
    function = kernel.py_func
    if function in seen:
        return 0
    seen.add(function)
    total = 60 + len(list(dis.get_instructions(function)))
    for name in function.__code__.co_names:
        value = function.__globals__.get(name)
        if value is not None and hasattr(value, "py_func") and hasattr(value, "compile"):
            total += _weight(value, seen)
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


def _share(jobs, helpers: int):
    """Jobs ``(kernel, signature, weight)`` shared out longest first to the least loaded of this
    process (index 0) and ``helpers`` helper processes, whose start costs ``_START_WEIGHT``."""
    loads = [0] + [_START_WEIGHT] * helpers
    shares: list[list] = [[] for _ in loads]
    for job in sorted(jobs, key=lambda job: -job[2]):
        least = min(range(len(loads)), key=lambda index: loads[index])
        shares[least].append(job)
        loads[least] += job[2]
    return shares


_HELPER_CODE = "import sys; from ivote._compile import _helper; sys.exit(_helper())"


def _start_helper(share) -> subprocess.Popen:
    """A fresh Python process compiling ``share`` into the cache on disk; it imports what this
    process imports (its ``sys.path``: the same copy of ivote, the same cache)."""
    jobs = [(kernel.py_func.__module__, kernel.py_func.__qualname__, signature) for kernel, signature, _ in share]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    env[_ENV] = "1"
    helper = subprocess.Popen([sys.executable, "-c", _HELPER_CODE], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        helper.stdin.write(pickle.dumps(jobs))
        helper.stdin.close()
    except OSError:  # it died at once; wait() tells
        pass
    return helper


def _helper() -> int:
    """A helper process: compile the pickled jobs (module, qualified name, signature) on stdin
    into the cache on disk."""
    for module, name, signature in pickle.loads(sys.stdin.buffer.read()):
        kernel = importlib.import_module(module)
        for part in name.split("."):
            kernel = getattr(kernel, part)
        kernel.compile(signature)
    return 0


def compile_ahead(run, processes: int | None = None) -> dict:
    """Compile the Numba kernels that ``run()`` would call, several processes at once.

    ``run`` is a dry run of the call (tiny data, same dtypes and options: the same argument
    types), run under ``_parallel.recording``. Kernels already compiled in this process or
    cached on disk are left to the call (it loads them). ``processes``: at most this many
    compiling processes, this one included (default: ``IVOTE_COMPILE_PROCESSES``, else the
    kernels' threads).

    Returns what happened: ``needed`` (kernel names, in call order), ``missing`` (the ones neither
    here nor on disk), ``here`` (compiled in this process), ``helpers`` (the names each helper was
    given), ``failed`` (helpers that did not finish in time or exited with an error), ``seconds``.
    """
    started = time.perf_counter()
    with recording() as calls:
        run()
    needed = []
    for kernel, signature in calls:
        if (kernel, signature) not in needed:
            needed.append((kernel, signature))
    report = {"needed": [kernel.py_func.__name__ for kernel, _ in needed], "missing": [], "here": [],
              "helpers": [], "failed": 0, "seconds": 0.0}
    missing = [(kernel, signature) for kernel, signature in needed if signature not in kernel.overloads]
    on_disk = [_on_disk(kernel, signature) for kernel, signature in missing]
    missing = [pair for pair, cached in zip(missing, on_disk) if not cached]
    report["missing"] = [kernel.py_func.__name__ for kernel, _ in missing]
    processes = _processes() if processes is None else max(1, int(processes))
    if (len(missing) < 2 or processes < 2 or any(cached is None for cached in on_disk)
            or getattr(sys, "frozen", False) or not sys.executable):
        report["seconds"] = time.perf_counter() - started
        return report  # the call compiles (or loads) its kernels itself, as without this
    jobs = [(kernel, signature, _weight(kernel)) for kernel, signature in missing]
    shares = _share(jobs, min(processes, len(missing)) - 1)
    helpers = []
    for share in shares[1:]:
        if not share:
            continue
        try:
            helpers.append((_start_helper(share), share))
        except OSError as error:  # no process could be started: this process compiles it later
            _LOG.debug("no helper process for the Numba compilation: %s", error)
    own_start = time.perf_counter()
    for kernel, signature, _ in shares[0]:
        kernel.compile(signature)
        report["here"].append(kernel.py_func.__name__)
    report["own_seconds"] = time.perf_counter() - own_start
    deadline = time.perf_counter() + max(30.0, _PATIENCE * report["own_seconds"])
    for helper, share in helpers:
        report["helpers"].append([kernel.py_func.__name__ for kernel, _, _ in share])
        try:
            code = helper.wait(timeout=max(0.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()
            code = None
        if code != 0:
            report["failed"] += 1
            _LOG.debug("a helper process compiling %s ended with %s; the call compiles them",
                       report["helpers"][-1], code)
    report["seconds"] = time.perf_counter() - started
    return report
