"""Issue 34, item 1: every allocation that grows with the radius is estimated and checked first.

``detection_memory`` is checked against the measured peak (tracemalloc for the arrays NumPy
allocates, the process's peak RSS in a fresh interpreter for everything), and detections past
the limit are refused before they allocate, with small limits (``IVOTE_MAX_MEMORY``).
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

from ivote.data import synthetic_nuclei
from ivote.detect import detection_memory, iterative_voting, largest_radius
from ivote.errors import IvoteError, ResourceLimitError

from reliability_helpers import SRC, assert_one_line_failure


def _peak_bytes(call):
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape, radius, backend", [
    ((128, 128), 24.0, "numba"), ((160, 160), 36.0, "numba"), ((24, 24, 24), 6.0, "numba"),
    ((128, 128), 20.0, "numpy"), ((24, 24, 24), 5.0, "numpy"),
])
def test_estimate_bounds_the_measured_peak(shape, radius, backend):
    pytest.importorskip("numba") if backend == "numba" else None
    image = synthetic_nuclei(shape, radius=4, seed=2)[0]
    iterative_voting(image, radius=3, backend=backend)  # compile outside the measurement
    from ivote.detect._cpu import _tables
    from ivote.detect._run_tables import discrete_runs

    _tables.cache_clear(), discrete_runs.cache_clear()
    measured = _peak_bytes(lambda: iterative_voting(image, radius=radius, backend=backend))
    estimate = detection_memory(shape, radius, backend=backend)
    assert measured <= estimate <= 4 * measured + 64 * 2**20, (measured, estimate)


_RSS_SCRIPT = """
import sys
import numpy as np
from ivote.data import synthetic_nuclei
from ivote.detect import iterative_voting

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

image = synthetic_nuclei((200, 200), radius=4, seed=2)[0]
iterative_voting(image, radius=3, backend="numba")
with open("/proc/self/clear_refs", "w") as f:  # the peak RSS (VmHWM) starts again from the current RSS
    f.write("5")
before = status("VmRSS")
iterative_voting(image, radius=float(sys.argv[1]), backend="numba")
print(status("VmHWM") - before)
"""


def test_estimate_bounds_the_peak_rss_of_a_radius_dominated_run():
    """The peak resident memory (compiled code's allocations included) of a 2D radius 40 run,
    where the radius' tables are 95 % of it."""
    pytest.importorskip("numba")
    import os

    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak RSS")

    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, "40"], capture_output=True, text=True, timeout=240,
                          env=env)
    assert done.returncode == 0, done.stderr
    grown = int(done.stdout.split()[-1])
    estimate = detection_memory((200, 200), 40.0, backend="numba")
    assert 100 * 2**20 < grown <= estimate <= 4 * grown, (grown, estimate)


@pytest.mark.parametrize("ndim", [2, 3])
def test_estimate_grows_with_radius_and_image(ndim):
    shape = (64,) * ndim
    radii = [2.0, 4.0, 8.0, 16.0, 31.0]
    sizes = [detection_memory(shape, r, backend="numba") for r in radii]
    assert sizes == sorted(sizes) and sizes[-1] > 8 * sizes[0]
    assert detection_memory((128,) * ndim, 4.0, backend="numpy") > detection_memory(shape, 4.0, backend="numpy")
    # the compiled path's run tables: r^4 in 2D, r^6 in 3D, once they dominate
    big = [detection_memory((8,) * ndim, r, backend="numba") for r in (60.0, 120.0)]
    assert big[1] / big[0] > (2 ** (2 * ndim)) * 0.8


def test_refused_before_allocating_with_the_radius_that_fits(monkeypatch):
    """The reported case: a radius far above the nuclei on a 256 x 256 image, under a 256 MB limit."""
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "256M")
    image = synthetic_nuclei((256, 256), radius=7, seed=3)[0]
    start = time.perf_counter()
    with pytest.raises(ResourceLimitError) as caught:
        peak = _peak_bytes(lambda: iterative_voting(image, radius=119, backend="numba"))
    assert time.perf_counter() - start < 5
    message = str(caught.value)
    assert "radius 119" in message and "256 MB" in message and "IVOTE_MAX_MEMORY" in message
    fits = float(message.split("the largest radius that fits is ")[1].split(",")[0])
    assert fits == pytest.approx(largest_radius((256, 256), memory_limit=256 * 2**20, backend="numba"), rel=1e-2)
    assert 5 < fits < 119
    assert detection_memory((256, 256), fits, backend="numba") <= 256 * 2**20


def test_refusal_allocates_nothing_large(monkeypatch):
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "64M")
    image = np.zeros((96, 96, 96), np.float32)
    image[40:56, 40:56, 40:56] = 1
    tracemalloc.start()
    try:
        with pytest.raises(ResourceLimitError, match="radius 40"):
            iterative_voting(image, radius=40, backend="numba")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20  # the 3D plan alone (meshgrid of 81^3 offsets) would take more


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_largest_radius_fits_and_is_the_largest(backend):
    shape, limit = (300, 300), 512 * 2**20
    r = largest_radius(shape, memory_limit=limit, backend=backend)
    assert 1 <= r <= 150
    assert detection_memory(shape, r, backend=backend) <= limit
    if r < 150:
        assert detection_memory(shape, r * 1.02, backend=backend) > limit
    assert largest_radius((32, 32), memory_limit=2**40, backend=backend) == 16  # the image's own bound
    assert largest_radius((300, 300), memory_limit=1024, backend=backend) == 0.0  # nothing fits
    r_um = largest_radius(shape, spacing=0.5, memory_limit=limit, backend=backend)
    assert r_um == pytest.approx(r * 0.5, rel=0.02)


def test_bad_arguments_are_named():
    with pytest.raises(IvoteError, match="shape"):
        detection_memory((5,), 3)
    with pytest.raises(IvoteError, match="radius"):
        detection_memory((64, 64), -1)
    with pytest.raises(IvoteError, match="backend"):
        detection_memory((64, 64), 3, backend="opencl")
    with pytest.raises(IvoteError, match="memory_limit"):
        largest_radius((64, 64), memory_limit=-5)


def test_chunked_detection_checks_the_radius_tables_first(monkeypatch):
    da = pytest.importorskip("dask.array")
    from ivote.distributed import detect_chunked

    monkeypatch.setenv("IVOTE_MAX_MEMORY", "128M")
    image = da.from_array(np.random.default_rng(1).random((400, 400)).astype(np.float32), chunks=100)
    with pytest.raises(ResourceLimitError, match="radius 150"):
        detect_chunked(image, 150, chunks=200, scheduler="sync", backend="numba")


def test_cli_refuses_a_radius_past_the_limit(tmp_path, cli, image_tif, monkeypatch):
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "1G")
    big = tmp_path / "big.tif"
    import tifffile

    tifffile.imwrite(big, np.random.default_rng(0).random((520, 696)).astype(np.float32))
    status, out, err = cli("detect", big, "--radius", "130", "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "radius 130", "1 GB", "largest radius that fits")
    assert not (tmp_path / "p.csv").exists()
