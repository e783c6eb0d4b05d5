"""Issue 34, items 6, 7 and 11: Zarr outputs are written to a private temporary store and moved into
place whole: two concurrent writers never mix, SIGTERM leaves nothing behind, reruns replace the store.
Real processes (``python -m ivote``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tifffile

from ivote.data import synthetic_nuclei

from reliability_helpers import SRC, assert_one_line_failure, files_in

zarr = pytest.importorskip("zarr")
pytest.importorskip("dask")


def _start(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    env.pop("IVOTE_DEBUG", None)
    return subprocess.Popen([sys.executable, "-m", "ivote", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _labels(store):
    from ivote import open_image

    return np.asarray(open_image(store).data)


@pytest.fixture(scope="module")
def nuclei(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nuclei")
    image, labels, centers, *_ = synthetic_nuclei((96, 96), radius=6, seed=3)
    from ivote.io import write_points_csv

    tifffile.imwrite(folder / "image.tif", image.astype(np.float32))
    write_points_csv(folder / "points.csv", centers, units=None)
    return folder, len(centers)


def test_two_segmentations_writing_one_store_do_not_mix(tmp_path, nuclei):
    folder, n = nuclei
    out = tmp_path / "same.zarr"
    args = ("segment", folder / "image.tif", "--points", folder / "points.csv", "--radius", 6, "--chunks", 48,
            "--out", out, "-q")
    alone = tmp_path / "alone.zarr"
    first = _start(*args[:-3], "--out", alone, "-q")
    assert first.wait(timeout=240) == 0, first.stderr.read()
    expected = _labels(alone)
    runs = [_start(*args) for _ in range(2)]
    codes = [run.wait(timeout=240) for run in runs]
    assert codes == [0, 0], [run.stderr.read() for run in runs]
    assert np.array_equal(_labels(out), expected)  # one complete result, never a mix
    assert len(np.unique(expected)) - 1 >= n - 3
    assert files_in(tmp_path) == {"same.zarr", "alone.zarr"}  # no scratch or temporary store left


def _mask(path):
    mask = np.zeros((96, 96), np.uint8)
    for k in range(12):
        y, x = divmod(k, 4)
        mask[4 + 24 * y: 18 + 24 * y, 3 + 23 * x: 17 + 23 * x] = 1
    tifffile.imwrite(path, mask)
    return 12


def test_two_component_labellings_writing_one_store_do_not_mix(tmp_path):
    count = _mask(tmp_path / "mask.tif")
    out = tmp_path / "same.zarr"
    runs = [_start("components", tmp_path / "mask.tif", "--out", out, "--chunks", 32, "-q") for _ in range(3)]
    codes = [run.wait(timeout=240) for run in runs]
    assert codes == [0, 0, 0], [run.stderr.read() for run in runs]
    labels = _labels(out)
    assert len(np.unique(labels)) - 1 == count and np.array_equal(labels > 0, tifffile.imread(tmp_path / "mask.tif") > 0)
    assert files_in(tmp_path) == {"mask.tif", "same.zarr"}


def test_sigterm_during_a_chunked_zarr_write_leaves_nothing(tmp_path):
    image, labels, centers, *_ = synthetic_nuclei((384, 384), radius=6, seed=3)
    from ivote.io import write_points_csv

    tifffile.imwrite(tmp_path / "big.tif", image.astype(np.float32))
    write_points_csv(tmp_path / "big.csv", centers, units=None)
    before = files_in(tmp_path)
    run = _start("segment", tmp_path / "big.tif", "--points", tmp_path / "big.csv", "--radius", 6, "--chunks", 48,
                 "--out", tmp_path / "x.zarr", "-q")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(n.endswith(".ivote-labels") for n in files_in(tmp_path)):
        assert run.poll() is None, run.stderr.read()
        time.sleep(0.1)
    time.sleep(1.0)  # blocks are being written into the private store
    assert run.poll() is None, "the run ended before the signal; make the image larger"
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 128 + signal.SIGTERM
    assert files_in(tmp_path) == before  # no x.zarr, no .x.zarr.*.ivote-labels, no .x.zarr.*.tmp


def test_rerun_replaces_an_existing_store_and_refuses_other_folders(tmp_path, cli):
    count = _mask(tmp_path / "mask.tif")
    out = tmp_path / "lab.zarr"
    for _ in range(2):
        status, _, err = cli("components", tmp_path / "mask.tif", "--out", out, "--chunks", 32, "-q")
        assert status == 0, err
        assert len(np.unique(_labels(out))) - 1 == count
    assert files_in(tmp_path) == {"mask.tif", "lab.zarr"}
    folder = tmp_path / "notes.zarr"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    status, _, err = cli("components", tmp_path / "mask.tif", "--out", folder, "--chunks", 32)
    assert_one_line_failure(status, err, "notes.zarr", "not a Zarr store")
    assert (folder / "keep.txt").read_text() == "mine"
