"""One background run at a time for a dock widget: worker thread, napari progress, cancel, safe hand-back.

Every widget of the plugin runs its core call through a :class:`Runner`. It
guarantees what the widgets must never get wrong:

- the core's ``iter_callback`` raises :class:`Cancelled` as soon as the widget's
  Cancel, the activity dock's cancel (``cancelable_progress.cancel``), a newer
  run, closing the widget or closing the viewer asks, so the CPU stops too;
- progress reaches the activity dock on the main thread (``update``, so the bar
  and its counter agree);
- the result is handed to the widget on the main thread, and only when the run
  is still wanted, the widget is still docked and every input layer is still in
  the viewer: no half layer, no layer added by a closed widget, no layer touched
  while napari removes it, no redraw from the worker thread;
- an exception in the worker becomes a napari notification and the widget's
  status, and the widget stays usable.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence

from napari.qt.threading import create_worker
from napari.utils import cancelable_progress
from napari.utils.notifications import show_error
from qtpy.QtCore import QCoreApplication, QEvent, QObject, Signal, Slot

from .. import _backend

__all__ = ["Cancelled", "Job", "Runner", "on_main_thread"]


class _MainThreadRelay(QObject):
    """Runs the callables it is sent on the thread it lives in, the main thread.

    A signal emitted in a worker (a Qt worker, a Dask or Numba thread) reaches this object's slot
    through Qt's event queue. superqt's ``ensure_main_thread`` makes a QObject in the calling thread
    for every call instead; under PySide6, processes running many widget tests were killed by
    segmentation faults inside such calls from the worker thread.
    """

    send = Signal(object)

    def __init__(self):
        super().__init__()
        self.send.connect(self._run)

    @Slot(object)
    def _run(self, call):
        call()


_RELAY: list[_MainThreadRelay] = []


def _relay() -> _MainThreadRelay:
    if not _RELAY:  # made by the first Runner or Job, on the main thread
        relay = _MainThreadRelay()
        relay.moveToThread(QCoreApplication.instance().thread())
        _RELAY.append(relay)
    return _RELAY[0]


def on_main_thread(func: Callable) -> Callable:
    """``func(*args)`` runs on the main thread: at once when called there, else queued (it returns nothing)."""

    @functools.wraps(func)
    def queued(*args, **kwargs) -> None:
        if threading.current_thread() is threading.main_thread():  # Qt's main thread is Python's
            func(*args, **kwargs)
        else:
            _relay().send.emit(functools.partial(func, *args, **kwargs))

    return queued


class Cancelled(Exception):
    """Raised from a core ``iter_callback`` to stop a run."""


class Job:
    """One run: its cancel flag (read from the worker thread) and its progress bar."""

    def __init__(self, desc: str, total: int, inputs: Sequence = ()):
        self._cancel = threading.Event()
        self._closed = False
        self.inputs = tuple(inputs)
        self.stop_reason: str | None = None
        """Why the job was stopped when not by Cancel (its status line at the end), else None."""
        self.progress = cancelable_progress(total=total, desc=desc, cancel_callback=self.cancel)
        self._report = on_main_thread(self._report_now)  # check() calls it from the worker
        _relay()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set() or self.progress.is_canceled

    def cancel(self):
        self._cancel.set()

    def check(self, done: int | None = None, total: int | None = None):
        """The core's callback: raise :class:`Cancelled` when asked, else report progress."""
        if self.cancelled:
            raise Cancelled
        if done is not None:
            self._report(int(done), None if total is None else int(total))

    def _report_now(self, done: int, total: int | None):
        bar = self.progress
        if self._closed or self.cancelled:
            return
        resized = total is not None and total != bar.total
        if resized:
            bar.total = total
        # reports from several of the engine's threads can arrive out of order: the bar never goes back
        if done > bar.n or (resized and done != bar.n):
            bar.update(done - bar.n)  # update(), not n=: the bar moves with its counter

    def close(self):
        if not self._closed:
            self._closed = True
            self.progress.close()


class GoneWatcher(QObject):
    """Calls ``callbacks`` once when a widget is gone: undocked (napari sets its parent to None) or destroyed.

    A QObject with a Qt slot rather than Python lambdas on ``destroyed``: Qt
    drops the connection cleanly when either side dies (lambdas on a deleted
    widget crashed the interpreter's final garbage collection).
    """

    def __init__(self, native):
        super().__init__()
        self.callbacks: list = []
        self._fired = False
        native.installEventFilter(self)
        native.destroyed.connect(self.fire)

    @Slot()
    def fire(self):
        if not self._fired:
            self._fired = True
            for callback in self.callbacks:
                callback()

    def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.ParentChange and obj.parent() is None:
            self.fire()
        return False


def watch_gone(native) -> GoneWatcher:
    """The one :class:`GoneWatcher` of a native widget.

    Not a child of ``native``: a QWidget deletes its children before it emits
    ``destroyed``. It is kept in a module registry until it has fired.
    """
    watcher = _WATCHERS.get(id(native))
    if watcher is None or watcher._fired:
        watcher = _WATCHERS[id(native)] = GoneWatcher(native)
        watcher.callbacks.append(lambda key=id(native): _WATCHERS.pop(key, None))
    return watcher


_WATCHERS: dict[int, GoneWatcher] = {}


def _disconnect(emitter, callback):
    try:
        emitter.disconnect(callback)
    except (RuntimeError, ValueError, TypeError):  # a closed viewer's emitters may be gone already
        pass


class Runner:
    """Runs a widget's core calls in a worker thread, one at a time."""

    def __init__(self, viewer, native, set_status: Callable[[str, bool], None], *, report_cancel: bool = True):
        self.viewer = viewer
        self._set_status = set_status
        self._report_cancel = report_cancel  # False for previews: superseded all the time, not news
        self.job: Job | None = None
        self._workers: set = set()
        self.closed = False
        _relay()
        watch_gone(native).callbacks.append(self.close)
        layers_events = getattr(getattr(viewer, "layers", None), "events", None)
        if layers_events is not None:  # an input layer removed mid-run: stop now, as Cancel does
            layers_events.removed.connect(self._on_layer_removed)
            watch_gone(native).callbacks.append(lambda: _disconnect(layers_events.removed, self._on_layer_removed))

    def _on_layer_removed(self, event):
        job = self.job
        if job is not None and any(layer is event.value for layer in job.inputs):
            job.stop_reason = f"'{event.value.name}' was removed: the run stopped; nothing was added."
            self.cancel()
            self._set_status(job.stop_reason, True)

    @property
    def busy(self) -> bool:
        """True while any worker (current or superseded) is still running."""
        return bool(self._workers)

    def close(self):
        """The widget is gone (undocked, deleted, viewer closed): stop and hand nothing back."""
        self.closed = True
        self.cancel()

    def cancel(self):
        job, self.job = self.job, None
        if job is not None:
            job.cancel()
            job.close()

    def start(self, work: Callable[[Job], object], on_result: Callable[[object], None], *, desc: str,
              total: int = 0, inputs: Sequence = (), on_end: Callable[[], None] | None = None) -> Job | None:
        """Run ``work(job)`` in a thread; ``on_result(value)`` on the main thread if still wanted.

        ``work`` passes ``job.check`` as the core's callback. ``inputs`` are the
        layers the result belongs to: when one has left the viewer, nothing is
        added. ``on_end()`` runs on the main thread after every run of this
        job (result, cancel or error) unless the widget is gone.
        """
        if self.closed:
            return None
        self.cancel()
        job = self.job = Job(desc, total, inputs)

        def run():  # never raises: the Qt event loop must not see a worker's exception
            # (wrapped in a list: superqt re-raises an Exception returned bare)
            try:
                return [work(job)]
            except Cancelled:
                return [Cancelled()]
            except Exception as exc:  # noqa: BLE001 (shown to the user, not swallowed)
                return [exc]
            finally:
                _backend.free_gpu_memory()

        worker = create_worker(run, _start_thread=False)
        worker.returned.connect(lambda value: self._finish(job, value[0], on_result, on_end))
        worker.finished.connect(lambda: self._workers.discard(worker))
        self._workers.add(worker)
        worker.start()
        return job

    def _finish(self, job: Job, value, on_result, on_end):
        job.close()
        if self.closed:
            return
        current = job is self.job and not job.cancelled
        if job is self.job:
            self.job = None
        if on_end is not None and (current or self.job is None):
            on_end()
        if isinstance(value, Cancelled) or not current:
            if job.stop_reason is not None:
                self._set_status(job.stop_reason, True)
            elif self.job is None and self._report_cancel:
                self._set_status("cancelled", False)
            return
        gone = [layer.name for layer in job.inputs if layer not in self.viewer.layers]
        if gone:
            return self._set_status(f"'{gone[0]}' was removed during the run; nothing was added.", True)
        if isinstance(value, Exception):
            message = f"{type(value).__name__}: {value}" if not isinstance(value, (ValueError, OSError)) else str(value)
            show_error(f"napari-ivote: {message}")
            return self._set_status(message, True)
        on_result(value)
