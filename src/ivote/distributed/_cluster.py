"""Where the tasks of a chunked run go: one Dask cluster, chosen in one place.

``cluster("local")`` starts one worker per GPU when CuPy sees GPUs
(``dask_cuda.LocalCUDACluster`` when ``dask-cuda`` is installed, else worker
processes of one thread, each seeing one GPU through ``CUDA_VISIBLE_DEVICES``),
else a local cluster of processes; ``cluster("tcp://host:8786")`` connects to a running scheduler (for
example one started by ``dask-jobqueue`` on SLURM). napari-ivote writes no
scheduler of its own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os

from ..errors import IvoteError

__all__ = ["check_scheduler", "cluster", "gpu_count", "scheduler_timeout"]

DEFAULT_SCHEDULER_TIMEOUT = 10.0


def scheduler_timeout() -> float:
    """Seconds to wait for a scheduler to accept and answer (``IVOTE_SCHEDULER_TIMEOUT``, default 10)."""
    text = os.environ.get("IVOTE_SCHEDULER_TIMEOUT", "")
    if not text:
        return DEFAULT_SCHEDULER_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise IvoteError(f"environment variable IVOTE_SCHEDULER_TIMEOUT must be a number of seconds > 0; got {text!r}")
    return value


def check_scheduler(address: str, timeout: float) -> None:
    """Fail fast, with a message saying what is at ``address``, unless a Dask scheduler answers there.

    Only plain TCP addresses (``tcp://host:port``, ``host:port``) are probed: a Dask scheduler sends
    its handshake as soon as a connection is accepted, an 8-byte frame length first. A refused
    port, a server that accepts and never answers, and one that answers otherwise (an HTTP
    server: the dashboard's port) are refused here, in at most ``timeout`` seconds, instead of
    hanging or reading an HTTP reply as a frame length of exabytes."""
    import socket

    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp"):
        return  # tls://, ucx://, inproc://: left to distributed
    host, _, port_text = rest.rpartition(":")
    if not host or not port_text.isdigit():
        raise IvoteError(f"--scheduler must be 'threads', 'local' or a scheduler address such as "
                         f"tcp://10.0.0.5:8786; got {address!r}")
    where = f"--scheduler {address}"
    try:
        connection = socket.create_connection((host.strip("[]"), int(port_text)), timeout=timeout)
    except ConnectionRefusedError:
        raise IvoteError(f"{where}: connection refused: no Dask scheduler listens there (start one with "
                         "'dask scheduler', or use --scheduler local)") from None
    except socket.timeout:
        raise IvoteError(f"{where}: no answer to the connection within {timeout:g} s (a firewall, or the wrong "
                         "host); IVOTE_SCHEDULER_TIMEOUT sets the wait") from None
    except OSError as exc:
        raise IvoteError(f"{where}: cannot connect ({exc.strerror or exc})") from None
    with connection:
        connection.settimeout(timeout)
        received = b""
        try:
            while len(received) < 8:
                part = connection.recv(8 - len(received))
                if not part:
                    break
                received += part
        except socket.timeout:
            pass
        except OSError as exc:
            raise IvoteError(f"{where}: the connection failed ({exc.strerror or exc})") from None
    if len(received) < 8:
        raise IvoteError(f"{where}: accepts connections but sent no Dask handshake within {timeout:g} s: it is not "
                         "a Dask scheduler (or it is stuck); the scheduler's port is usually 8786, and "
                         "IVOTE_SCHEDULER_TIMEOUT sets the wait")
    if received.startswith(b"HTTP") or int.from_bytes(received, "little") > 2**32:
        raise IvoteError(f"{where}: answers, but not as a Dask scheduler (it looks like "
                         f"{'an HTTP server, such as the dashboard' if received[:4] in (b'HTTP', b'<!DO', b'<htm') else 'another service'}); "
                         "give the scheduler's own port (usually 8786)")


def gpu_count() -> int:
    """GPUs CuPy can use here (0 without CuPy or a GPU)."""
    from .._backend import _cupy

    cupy = _cupy()
    if cupy is None:
        return 0
    return int(cupy.cuda.runtime.getDeviceCount())


@contextlib.contextmanager
def cluster(scheduler: str = "local", *, gpus: int | None = None, workers: int | None = None,
            memory_limit: str | None = None, dashboard: bool = False):
    """A ``dask.distributed.Client`` for the duration of a ``with`` block.

    Parameters
    ----------
    scheduler : str
        ``"local"`` to start a cluster on this machine, or a scheduler address
        (``"tcp://10.0.0.5:8786"``) to use an existing one.
    gpus : int, optional
        Local GPU workers (one per GPU); default every GPU; 0 forces CPU workers.
        Without dask-cuda each is a process of one thread that sees its GPU
        only (``CUDA_VISIBLE_DEVICES``).
    workers : int, optional
        Local CPU worker processes (default: the CPU count, at most 4).
    memory_limit : str, optional
        Host memory per worker (``"8GB"``); Dask spills and pauses above it.
    """
    from dask.distributed import Client, LocalCluster

    if scheduler != "local":
        timeout = scheduler_timeout()
        check_scheduler(scheduler, timeout)
        try:
            client = Client(scheduler, timeout=timeout)
        except OSError as exc:  # distributed's connect timeout (a TimeoutError) or a closed connection
            raise IvoteError(f"--scheduler {scheduler}: could not connect within {timeout:g} s "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]}); check that a Dask "
                             f"scheduler runs there, or use --scheduler local") from None
        with client:
            yield client
        return
    available = gpu_count()
    gpus = available if gpus is None else int(gpus)
    if gpus < 0 or gpus > available:
        raise ValueError(f"gpus must be between 0 and {available} (the GPUs found here); got {gpus}")
    if gpus and importlib.util.find_spec("dask_cuda") is not None:
        from dask_cuda import LocalCUDACluster

        devices = ",".join(str(i) for i in range(gpus))
        local = LocalCUDACluster(CUDA_VISIBLE_DEVICES=devices, memory_limit=memory_limit or "auto",
                                 dashboard_address=":0" if dashboard else None)
    elif gpus:
        local = _gpu_cluster(gpus, memory_limit, dashboard)
    else:
        n = workers or min(os.cpu_count() or 1, 4)
        local = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                             memory_limit=memory_limit or "auto",
                             dashboard_address=":0" if dashboard else None)
    with local, Client(local) as client:
        yield client


def _gpu_cluster(gpus: int, memory_limit, dashboard: bool):
    """One worker process of one thread per GPU, each seeing only its GPU
    (``CUDA_VISIBLE_DEVICES``), without dask-cuda: what ``LocalCUDACluster`` does
    at its simplest."""
    from dask.distributed import Nanny, Scheduler, SpecCluster

    workers = {
        f"gpu-{i}": {"cls": Nanny, "options": {"nthreads": 1, "memory_limit": memory_limit or "auto",
                                                "env": {"CUDA_VISIBLE_DEVICES": str(i)}}}
        for i in range(gpus)
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0" if dashboard else None}}
    return SpecCluster(workers=workers, scheduler=scheduler)
