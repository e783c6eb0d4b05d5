"""Atomic file writes: a path is either untouched or complete (``ivote.io.write_atomic``).

Its own module so that both ``ivote.io`` and the file readers/writers of ``ivote._files``
import it without importing each other.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

__all__ = ["Terminated", "is_zarr_store", "private_folder", "replace_folder", "write_atomic"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask



def write_atomic(path, write: Callable[[Path], None]) -> Path:
    """Write a file so that ``path`` is either untouched or complete.

    ``write(tmp_path)`` writes the content to a temporary file in the same folder,
    which then replaces ``path`` in one rename. On any error the temporary file
    is removed and ``path`` keeps its old content.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"output folder does not exist: {folder}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        with _terminate_as_exception():
            write(tmp_path)
            # mkstemp makes the file owner-only; give it the mode a plain open() would
            os.chmod(tmp_path, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
            os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


class Terminated(SystemExit):
    """SIGTERM arrived during :func:`write_atomic`: the temporary file is removed, then the
    process exits with status 143 (128 + SIGTERM), as it would have without the handler."""


@contextlib.contextmanager
def _terminate_as_exception():
    """While writing, SIGTERM (a scheduler's or ``timeout``'s kill) raises :class:`Terminated`
    so the caller's clean-up runs, as on Ctrl-C. Only in the main thread (where Python runs
    signal handlers) and only over the default handler (a program's own handler is kept)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminate(signum, frame):
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


ZARR_MARKERS = (".zgroup", ".zarray", "zarr.json", ".zattrs")


def is_zarr_store(path) -> bool:
    """Whether ``path`` is a folder holding Zarr metadata (v2 or v3)."""
    path = Path(path)
    return path.is_dir() and any((path / marker).exists() for marker in ZARR_MARKERS)


@contextlib.contextmanager
def private_folder(path, kind: str):
    """A new folder beside ``path``, ``.NAME.XXXX.KIND``, private to this call (two runs writing
    the same ``path`` never share one), removed when the block ends, on an error, Ctrl-C or
    SIGTERM (as :func:`write_atomic`'s temporary file)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"output folder does not exist: {folder}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=f".{kind}", dir=folder))
    try:
        with _terminate_as_exception():
            yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_folder(tmp, path) -> Path:
    """Move the complete folder ``tmp`` to ``path`` in one rename, the old ``path`` (if any) moved
    aside first and removed after: a reader sees the old store or the new one, never a mix.
    When another writer puts its own store at ``path`` in between, that one is moved aside in
    turn: the last complete store stays."""
    tmp, path = Path(tmp), Path(path)
    for _ in range(100):
        try:
            os.rename(tmp, path)
            return path
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR, errno.ENOTDIR):
                raise
        aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
        try:
            os.rename(path, aside)  # onto the empty folder just made
        except FileNotFoundError:  # the other writer's old store already went
            pass
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    raise OSError(f"could not move the new store into place at {path}: other writers kept replacing it")
