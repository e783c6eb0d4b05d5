"""Issue 34, items 4, 5, 9 and 10: ambiguous in-memory layouts and masked arrays, messages that say
what the input was, failing fast on schedulers and tiny blocks, no clean refusal framed as a bug."""

from __future__ import annotations

import socket
import sys
import threading
import time
import warnings

import numpy as np
import pytest

from ivote.data import synthetic_nuclei
from ivote.detect import iterative_voting
from ivote.errors import IvoteError, LayoutWarning, ResourceLimitError

from reliability_helpers import assert_one_line_failure


@pytest.fixture(scope="module")
def planes():
    return np.stack([synthetic_nuclei((64, 64), radius=5, seed=s)[0] for s in range(3)]).astype(np.float32)


def test_grey_stack_with_planes_last_is_read_as_rgb_with_a_warning(planes):
    with pytest.warns(LayoutWarning, match=r"read as a 2D RGB image.*moveaxis\(image, -1, 0\)"):
        iterative_voting(np.moveaxis(planes, 0, -1), radius=5, backend="numba")
    rgb = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)  # the usual RGB: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", LayoutWarning)
        iterative_voting(rgb, radius=5, backend="numba")


def test_colour_first_array_is_read_as_planes_with_a_warning(planes):
    with pytest.warns(LayoutWarning, match=r"z stack of 3 planes.*moveaxis\(image, 0, -1\)"):
        found = iterative_voting(planes, radius=5, backend="numba")
    assert found.points.shape[1] == 3


def test_masked_array_mask_is_refused_or_empty(planes):
    image = np.ma.masked_array(planes[0], mask=np.zeros(planes[0].shape, bool))
    whole = iterative_voting(planes[0], radius=5, backend="numba")
    assert np.array_equal(iterative_voting(image, radius=5, backend="numba").points, whole.points)
    image.mask[:8] = True
    with pytest.raises(IvoteError, match=r"masked array with 512 masked pixel\(s\).*filled"):
        iterative_voting(image, radius=5, backend="numba")


def test_seed_rounding_outside_is_explained():
    from ivote.segment import segment_nuclei

    image = synthetic_nuclei((96, 96), radius=5, seed=1)[0]
    with pytest.raises(ValueError, match=r"\[95\.5, 10\.0\], which rounds to \[96, 10\]"):
        segment_nuclei(image, np.array([[95.5, 10.0]]), radius=5, backend="numpy")
    segment_nuclei(image, np.array([[95.4, 10.0]]), radius=5, backend="numpy")  # rounds to 95: inside


def test_points_that_overflow_distances_are_named():
    from ivote.components import cluster_points

    with pytest.raises(ValueError, match="points times spacing reach 1e\\+300"):
        cluster_points(np.array([[0.0, 0.0], [1e300, 1e300]]), distance=1.0)
    assert cluster_points(np.array([[0.0, 0.0], [1e100, 1e100]]), distance=1.0).n_clusters == 2


class _SilentServer:
    """A local TCP server that accepts connections and never sends a byte."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(8)
        self.port = self.socket.getsockname()[1]
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.held.append(connection)

    def close(self):
        for c in self.held:
            c.close()
        self.socket.close()


def test_scheduler_that_accepts_and_never_answers_fails_fast(monkeypatch):
    pytest.importorskip("distributed")
    from ivote.distributed import cluster

    monkeypatch.setenv("IVOTE_SCHEDULER_TIMEOUT", "2")
    server = _SilentServer()
    try:
        start = time.perf_counter()
        with pytest.raises(IvoteError, match="sent no Dask handshake within 2 s"):
            with cluster(f"tcp://127.0.0.1:{server.port}"):
                pass
        assert time.perf_counter() - start < 10
    finally:
        server.close()


def test_refused_port_and_http_server_fail_fast_with_what_is_there(monkeypatch):
    pytest.importorskip("distributed")
    import http.server

    from ivote.distributed import cluster

    monkeypatch.setenv("IVOTE_SCHEDULER_TIMEOUT", "2")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    start = time.perf_counter()
    with pytest.raises(IvoteError, match="connection refused"):
        with cluster(f"tcp://127.0.0.1:{port}"):
            pass
    assert time.perf_counter() - start < 3
    web = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        with pytest.raises(IvoteError, match="not a Dask scheduler"):
            with cluster(f"127.0.0.1:{web.server_address[1]}"):
                pass
    finally:
        web.shutdown()
        web.server_close()


def test_a_real_scheduler_still_connects():
    distributed = pytest.importorskip("distributed")
    from ivote.distributed import cluster

    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                                  protocol="tcp") as local:
        with cluster(local.scheduler_address) as client:
            assert client.submit(sum, [1, 2]).result(timeout=30) == 3


def test_tiny_blocks_are_refused_for_the_whole_run_up_front():
    pytest.importorskip("dask")
    from ivote.distributed import detect_chunked

    image = synthetic_nuclei((96, 96), radius=4, seed=1)[0]
    start = time.perf_counter()
    with pytest.raises(ResourceLimitError, match=r"9216 block\(s\).*IVOTE_MAX_WORK"):
        detect_chunked(image, 4, chunks=1, scheduler="sync", backend="numba")
    assert time.perf_counter() - start < 20


@pytest.mark.parametrize("value", ["inf", "-inf", "1e400"])
def test_memory_limit_inf_is_a_clean_error(tmp_path, cli, image_tif, value):
    status, _, err = cli("detect", image_tif, "--radius", 4, "--chunks", 32, f"--memory-limit={value}",
                         "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "memory_limit must be a finite number")
    assert "internal error" not in err


def test_parquet_without_pyarrow_is_not_a_bug_report(tmp_path, cli, image_tif, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    status, _, err = cli("detect", image_tif, "--radius", 4, "--out", tmp_path / "p.parquet")
    assert_one_line_failure(status, err, "pyarrow", "pip install")
    assert "internal error" not in err and "report" not in err
