"""Issue 34, items 2, 3, 8 and 11: plain Zarr arrays, corrupt chunks, non-regular files, pixel sizes
that cannot be used, OME planes that are not stored, and batches of OME-Zarr stores."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
import tifffile

from ivote.data import synthetic_nuclei
from ivote.errors import InputFileError

from reliability_helpers import assert_one_line_failure, run_module

zarr = pytest.importorskip("zarr")
da = pytest.importorskip("dask.array")


@pytest.fixture(scope="module")
def grey():
    image, labels, centers, *_ = synthetic_nuclei((96, 96), radius=5, seed=1)
    return image.astype(np.float32), centers


def _points(path):
    from ivote.io import read_points_csv

    return read_points_csv(path).points


@pytest.mark.parametrize("writer", ["zarr3", "zarr2", "dask"])
def test_plain_zarr_array_is_read_as_an_image(tmp_path, cli, grey, writer, zarr_api):
    image, centers = grey
    if writer == "zarr3":
        zarr_api.need_v3()
    store = tmp_path / "plain.zarr"
    if writer == "dask":
        da.from_array(image, chunks=48).to_zarr(str(store))
    else:
        z = zarr.open(str(store), mode="w", shape=image.shape, chunks=(48, 48), dtype="f4",
                      **({"zarr_format": 3} if writer == "zarr3" else zarr_api.v2))
        z[:] = image
    tifffile.imwrite(tmp_path / "same.tif", image)
    for source, out in ((store, "z.csv"), (tmp_path / "same.tif", "t.csv")):
        status, _, err = cli("detect", source, "--radius", 4, "--out", tmp_path / out, "-q")
        assert status == 0, err
    from_zarr, from_tiff = _points(tmp_path / "z.csv"), _points(tmp_path / "t.csv")
    assert len(from_zarr) > 20 and np.array_equal(from_zarr, from_tiff)
    status, _, err = cli("detect", store, "--radius", 4, "--chunks", 48, "--out", tmp_path / "c.csv", "-q")
    assert status == 0, err
    assert np.array_equal(_points(tmp_path / "c.csv"), from_tiff)


def test_plain_zarr_axes_and_spacing(tmp_path, cli, grey, zarr_api):
    image, _ = grey
    stack = np.stack([image] * 3)
    store = tmp_path / "three.zarr"
    zarr.open(str(store), mode="w", shape=stack.shape, dtype="f4")[:] = stack
    status, _, err = cli("detect", store, "--radius", 4, "--out", tmp_path / "a.csv")
    assert_one_line_failure(status, err, "three.zarr", "(3, 96, 96)", "--axes")
    status, _, err = cli("detect", store, "--axes", "CYX", "--channel", 1, "--radius", 2, "--spacing", 0.5, 0.5,
                         "--out", tmp_path / "a.csv", "-q")
    assert status == 0, err
    from ivote.io import read_points_csv

    table = read_points_csv(tmp_path / "a.csv")
    assert table.spacing == (0.5, 0.5) and len(table.points) > 20
    # zarr v3 dimension names name the axes
    named = tmp_path / "named.zarr"
    from ivote import open_image

    if zarr_api.v3:
        zarr.create_array(str(named), shape=stack.shape, dtype="f4", dimension_names=["c", "y", "x"])[:] = stack
        assert open_image(named).axes == "CYX"


def test_corrupt_chunk_names_the_store_and_the_chunk(tmp_path, cli, grey, zarr_api):
    image, _ = grey
    store = tmp_path / "damaged.zarr"
    zarr.open(str(store), mode="w", shape=image.shape, chunks=(48, 48), dtype="f4", **zarr_api.v2)[:] = image
    chunk = store / "1.0"
    data = bytearray(chunk.read_bytes())
    data[16:200] = bytes(184)
    chunk.write_bytes(bytes(data))
    for extra in ((), ("--chunks", 48)):
        status, _, err = cli("detect", store, "--radius", 4, *extra, "--out", tmp_path / "p.csv")
        assert_one_line_failure(status, err, "damaged.zarr", "chunk 1.0", "damaged or incomplete")
        assert "internal error" not in err
    assert not (tmp_path / "p.csv").exists()


def test_fifo_is_refused_without_blocking(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    fifo = tmp_path / "stream.tif"
    os.mkfifo(fifo)
    start = time.perf_counter()
    done = run_module("detect", fifo, "--radius", 4, "--out", tmp_path / "p.csv", timeout=60)
    assert time.perf_counter() - start < 60
    assert_one_line_failure(done.returncode, done.stderr, "stream.tif", "FIFO")
    points = tmp_path / "points.csv"
    os.mkfifo(points)
    tifffile.imwrite(tmp_path / "i.tif", np.zeros((32, 32), np.float32))
    done = run_module("segment", tmp_path / "i.tif", "--points", points, "--radius", 4, "--out", tmp_path / "l.tif",
                      timeout=60)
    assert_one_line_failure(done.returncode, done.stderr, "points.csv", "FIFO")


def _ome_zarr(tmp_path, grey, name="ome.zarr"):
    from ivote import write_image

    path = tmp_path / name
    write_image(path, grey[0], axes="YX", spacing=(0.5, 0.5))
    return path


def _edit_scale(path, scale=None, unit=None, dataset=None):
    attrs_path = path / ".zattrs"
    attrs = json.loads(attrs_path.read_text())
    ms = attrs["multiscales"][0]
    if scale is not None:
        ms["datasets"][0]["coordinateTransformations"][0]["scale"] = scale
    if unit is not None:
        for axis in ms["axes"]:
            axis["unit"] = unit
    if dataset is not None:
        ms["datasets"][0]["path"] = dataset
    attrs_path.write_text(json.dumps(attrs).replace("NaN", "NaN"))


@pytest.mark.parametrize("scale, unit, fragment", [
    ([0.0, 0.0], None, "pixel size of 0"),
    ([float("nan"), float("nan")], None, "pixel size of nan"),
    ([-0.5, -0.5], None, "pixel size of -0.5"),
    (None, "furlong", "'furlong'"),
])
def test_ome_zarr_pixel_sizes_that_cannot_be_used_are_refused(tmp_path, cli, grey, scale, unit, fragment):
    path = _ome_zarr(tmp_path, grey)
    _edit_scale(path, scale, unit)
    status, _, err = cli("detect", path, "--radius", 2, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "ome.zarr", fragment, "--spacing")
    status, _, err = cli("detect", path, "--radius", 2, "--spacing", 0.5, 0.5, "--out", tmp_path / "p.csv", "-q")
    assert status == 0, err


def test_ome_zarr_scale_as_text_and_missing_dataset(tmp_path, cli, grey):
    path = _ome_zarr(tmp_path, grey)
    _edit_scale(path, scale=["0.5", "0.5"])
    status, _, err = cli("detect", path, "--radius", 2, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "ome.zarr", "scale must be a list of 2 numbers")
    path = _ome_zarr(tmp_path, grey, "other.zarr")
    _edit_scale(path, dataset="5")
    status, _, err = cli("detect", path, "--radius", 2, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "other.zarr", "dataset '5'", "arrays: 0")


def _ome_xml(pixels_attributes: str, size_z: int = 1) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?><OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06">'
            '<Image ID="Image:0"><Pixels ID="Pixels:0" DimensionOrder="XYZCT" Type="float" SizeX="64" SizeY="64" '
            f'SizeZ="{size_z}" SizeC="1" SizeT="1" {pixels_attributes}><Channel ID="Channel:0:0" '
            'SamplesPerPixel="1"/><TiffData IFD="0" PlaneCount="1"/></Pixels></Image></OME>')


@pytest.mark.parametrize("size", ["0", "-0.5", "NaN"])
def test_ome_tiff_physical_size_that_cannot_be_used_is_refused(tmp_path, cli, size):
    path = tmp_path / "bad.ome.tif"
    image = synthetic_nuclei((64, 64), radius=4, seed=2)[0].astype(np.float32)
    tifffile.imwrite(path, image, description=_ome_xml(f'PhysicalSizeX="{size}" PhysicalSizeY="{size}"'), metadata=None)
    status, _, err = cli("detect", path, "--radius", 3, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "bad.ome.tif", "PhysicalSize", "--spacing")
    from ivote.io import read_image

    with pytest.raises(InputFileError, match="PhysicalSize"):
        read_image(path)


def test_ome_size_z_over_fewer_stored_planes_is_refused(tmp_path, cli):
    path = tmp_path / "short.ome.tif"
    image = synthetic_nuclei((64, 64), radius=4, seed=2)[0].astype(np.float32)
    tifffile.imwrite(path, image, description=_ome_xml('PhysicalSizeX="0.5" PhysicalSizeY="0.5"', size_z=4),
                     metadata=None)
    status, _, err = cli("detect", path, "--radius", 3, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "short.ome.tif", "declares 4 planes", "stores 1")
    assert not (tmp_path / "p.csv").exists()


def test_batch_pattern_matches_ome_zarr_stores(tmp_path, cli, grey):
    for name in ("a.ome.zarr", "b.ome.zarr"):
        _ome_zarr(tmp_path, grey, name)
    status, out, err = cli("detect", str(tmp_path / "*.zarr"), "--radius", 2, "--out-dir", tmp_path / "out", "-q")
    assert status == 0, err
    assert (tmp_path / "out" / "a.csv").is_file() and (tmp_path / "out" / "b.csv").is_file()
    assert len(_points(tmp_path / "out" / "a.csv")) == len(_points(tmp_path / "out" / "b.csv")) > 10
