"""A long CPU computation in a child process, so that Cancel stops the CPU at once.

A Numba kernel or a NumPy call cannot be interrupted from another thread: the
core checks for cancel between voting passes, and one pass at a large radius
on the CPU can take minutes. A child process can be killed. It costs a start
(a new Python importing the detector, about 2 s), so the widgets use it only
for long runs (:func:`ivote.napari._detect_logic.runs_long`). Qt-free: the
child imports no napari.

The child is a fresh interpreter started as ``python -c`` on this module's
:func:`_serve`, never ``multiprocessing``'s spawn: spawn re-imports the
parent's ``__main__``, so napari started from a script without an
``if __name__ == "__main__":`` guard ran that script again (a second viewer).
The call and its answers are pickled over the child's stdin and stdout; what
the computation itself prints goes to stderr.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading

__all__ = ["active_children", "run_in_process"]

POLL_SECONDS = 0.05
_CHILDREN: set = set()
_SERVE = "from ivote.napari._process import _serve; _serve()"


def active_children() -> list:
    """The children still running (``subprocess.Popen`` objects)."""
    return [child for child in list(_CHILDREN) if child.poll() is None]


def _serve():
    """The child's side: read ``(function, args)`` from stdin, send progress and the answer to stdout."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints (ours or a library's) never reach the answers
    sys.stdout = sys.stderr

    def send(message):
        pickle.dump(message, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()

    function, args = pickle.load(sys.stdin.buffer)
    try:
        result = function(*args, lambda done, total: send(("progress", done, total)))
    except BaseException as exc:  # noqa: BLE001 (handed to the parent, which raises it)
        try:
            send(("error", exc))
        except Exception:  # noqa: BLE001 (an exception that does not pickle)
            send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
    else:
        send(("result", result))
    answers.close()


def _read_answers(stream, into: queue.Queue):
    try:
        while True:
            into.put(pickle.load(stream))
    except (EOFError, OSError, pickle.UnpicklingError):
        into.put(None)  # the child is gone


def _command() -> list[str]:
    import multiprocessing.spawn

    return [multiprocessing.spawn.get_executable(), "-c", _SERVE]


def run_in_process(function, args: tuple, check):
    """``function(*args, progress)`` in a child process; its value, or its exception raised here.

    ``check(done, total)`` is called here with the child's progress, and
    ``check()`` every 50 ms: raising from it (Cancel) kills the child at once
    and propagates. A child that dies without an answer (out of memory, say)
    is a ``RuntimeError`` here, not a crash of napari. ``function`` must be a
    module-level function of an importable module (it is pickled by name).
    """
    payload = pickle.dumps((function, args), protocol=pickle.HIGHEST_PROTOCOL)
    flags = getattr(subprocess, "CREATE_NO_WINDOW", 0)  # Windows: no console window
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # as spawn: the parent's path
    child = subprocess.Popen(_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, creationflags=flags)
    _CHILDREN.add(child)
    answers: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_answers, args=(child.stdout, answers), daemon=True)
    reader.start()
    try:
        child.stdin.write(payload)
        child.stdin.close()
        while True:
            try:
                message = answers.get(timeout=POLL_SECONDS)
            except queue.Empty:
                check()
                continue
            if message is None:
                child.wait(timeout=5)
                raise RuntimeError(f"the computation's process ended without an answer (exit code "
                                   f"{child.returncode}); was it out of memory?")
            kind, *value = message
            if kind == "progress":
                check(*value)
            elif kind == "result":
                return value[0]
            else:
                raise value[0]
    except BrokenPipeError:
        raise RuntimeError("the computation's process ended before it was given its work") from None
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        child.stdout.close()
        _CHILDREN.discard(child)
