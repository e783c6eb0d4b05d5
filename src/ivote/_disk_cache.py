"""A per-machine cache of small computed arrays (the trained shape priors), on disk.

Some set-up results are deterministic but cost a second or more to compute in every fresh
process (the 3D shape prior: 60 exact distance transforms of 49^3 grids). They are computed once
per machine and kept as ``.npz`` files, named by a hash of everything that decides them: the
caller's key (its parameters), the source file of the code that computes them, and the NumPy
and SciPy versions. A change to any of these is a new name, so a stale file is never read.

The folder: ``$IVOTE_CACHE_DIR``; else ``$NUMBA_CACHE_DIR/ivote`` when Numba's cache is
moved there (one folder to clear for both); else the user's cache folder (``$XDG_CACHE_HOME``
or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) plus
``ivote``. ``IVOTE_CACHE_DIR=""`` turns the cache off. A folder that cannot be written, or a
file that cannot be read, only costs the computation: the result is the same.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["cache_folder", "cached_arrays"]

_ENV = "IVOTE_CACHE_DIR"


def cache_folder() -> Path | None:
    """The cache folder (see the module's docstring), or None when caching is off."""
    explicit = os.environ.get(_ENV)
    if explicit is not None:
        return Path(explicit).expanduser() if explicit.strip() else None
    numba_cache = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    if numba_cache:
        return Path(numba_cache).expanduser() / "ivote"
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ivote"


def _fingerprint(name: str, key: dict, source: str) -> str:
    import scipy

    text = repr((name, sorted(key.items()), np.__version__, scipy.__version__))
    digest = hashlib.sha256(text.encode())
    digest.update(Path(source).read_bytes())
    return digest.hexdigest()[:24]


def cached_arrays(name: str, key: dict, source: str, compute: Callable[[], dict]) -> dict:
    """``compute()`` (a dict of NumPy arrays), or the same arrays as saved by an earlier call
    with the same ``name``, ``key`` and ``source`` file content (see the module's docstring)."""
    folder = cache_folder()
    if folder is None:
        return compute()
    try:
        path = folder / f"{name}-{_fingerprint(name, key, source)}.npz"
    except OSError:  # no readable source (a frozen or .pyc-only install): no cache, never an error
        return compute()
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {k: stored[k] for k in stored.files}
    except Exception:  # absent, unreadable or damaged: compute it again
        pass
    arrays = compute()

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as file:  # (a file object: np.savez would add ".npz" to a path)
            np.savez(file, **arrays)

    try:
        from ._atomic import write_atomic

        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, write)
    except OSError:  # a read-only or full disk: the result stands, uncached
        pass
    return arrays
