"""Images and labels written by ``write_image`` keep the layer's translate (the world position of
pixel 0) as well as its pixel sizes: OME-TIFF Plane positions, OME-Zarr ``translation``; the
readers give it back as ``ImageFile.origin``."""

import csv
import json

import numpy as np
import pytest
import tifffile

from ivote import open_image, write_image
from ivote.data import synthetic_nuclei


@pytest.fixture(scope="module")
def labels_3d():
    return synthetic_nuclei((6, 24, 20), radius=3.0, spacing=(2.0, 0.5, 0.5), seed=2).labels.astype(np.int32)


def _planes(path):
    """The OME Plane elements of an OME-TIFF, as tifffile parses its XML (not our reader)."""
    with tifffile.TiffFile(path) as tif:
        pixels = tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]["Pixels"]
    planes = pixels["Plane"]
    return planes if isinstance(planes, list) else [planes]


@pytest.mark.parametrize("suffix", [".ome.tif", ".ome.zarr"])
def test_translate_round_trips_with_the_pixel_sizes(tmp_path, labels_3d, suffix):
    path = tmp_path / f"labels{suffix}"
    write_image(path, labels_3d, axes="ZYX", spacing=(2.0, 0.5, 0.5), translate=(-8.0, 4.25, 100.0), name="labels")
    image = open_image(path)
    assert image.spacing == pytest.approx((2.0, 0.5, 0.5))
    assert image.origin == pytest.approx((-8.0, 4.25, 100.0))
    np.testing.assert_array_equal(np.asarray(image.data), labels_3d)


def test_ome_tiff_stores_each_planes_position_in_micrometres(tmp_path, labels_3d):
    path = tmp_path / "labels.ome.tif"
    write_image(path, labels_3d, axes="ZYX", spacing=(2.0, 0.5, 0.5), translate=(-8.0, 4.25, 100.0))
    planes = _planes(path)
    assert len(planes) == labels_3d.shape[0]
    for plane in planes:  # Bio-Formats' reading: the stage position of each plane
        assert plane["PositionXUnit"] == plane["PositionYUnit"] == plane["PositionZUnit"] == "µm"
        assert (float(plane["PositionX"]), float(plane["PositionY"])) == (100.0, 4.25)
        assert float(plane["PositionZ"]) == pytest.approx(-8.0 + 2.0 * int(plane["TheZ"]))


def test_time_lapse_positions_follow_z_not_t(tmp_path):
    frames = np.arange(2 * 3 * 8 * 8, dtype=np.int32).reshape(2, 3, 8, 8)
    path = tmp_path / "frames.ome.tif"
    write_image(path, frames, axes="TZYX", spacing=(3.0, 1.0, 1.0), translate=(1.5, 0.0, -2.0))
    planes = _planes(path)
    assert len(planes) == 6
    assert sorted((int(p["TheT"]), int(p["TheZ"]), float(p["PositionZ"])) for p in planes) == [
        (t, z, 1.5 + 3.0 * z) for t in range(2) for z in range(3)]
    image = open_image(path)
    assert image.axes == "TZYX" and image.origin == pytest.approx((1.5, 0.0, -2.0))
    np.testing.assert_array_equal(np.asarray(image.data), frames)


def test_ome_zarr_stores_a_translation_after_the_scale(tmp_path):
    path = tmp_path / "labels.ome.zarr"
    write_image(path, np.zeros((2, 8, 8), np.int32), axes="TYX", spacing=(0.5, 0.25), translate=(3.0, -1.0))
    transforms = json.loads((path / ".zattrs").read_text())["multiscales"][0]["datasets"][0][
        "coordinateTransformations"]
    assert transforms == [{"type": "scale", "scale": [1.0, 0.5, 0.25]},
                          {"type": "translation", "translation": [0.0, 3.0, -1.0]}]


def test_ome_zarr_translation_of_another_writer_in_nanometres(tmp_path, zarr_api):
    """Dataset transforms come first, then the multiscale's (OME-NGFF 0.4), in the axes' unit."""
    import zarr

    path = tmp_path / "other.ome.zarr"
    group = zarr.open_group(str(path), mode="w", **zarr_api.v2)
    group.attrs["multiscales"] = [{
        "version": "0.4", "axes": [{"name": n, "type": "space", "unit": "nanometer"} for n in "yx"],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [250.0, 500.0]}, {"type": "translation", "translation": [1000.0, 0.0]}]}],
        "coordinateTransformations": [{"type": "scale", "scale": [2.0, 2.0]},
                                      {"type": "translation", "translation": [0.0, -3000.0]}],
    }]
    zarr_api.add(group, "0", np.zeros((8, 8), np.uint8))
    image = open_image(path)
    assert image.spacing == pytest.approx((0.5, 1.0))
    assert image.origin == pytest.approx((2.0, -3.0))


def test_files_without_a_position_have_no_origin(tmp_path, labels_3d):
    for name in ("a.ome.tif", "b.ome.zarr"):
        write_image(tmp_path / name, labels_3d, axes="ZYX", spacing=(2.0, 0.5, 0.5))
        assert open_image(tmp_path / name).origin is None
    tifffile.imwrite(tmp_path / "plain.tif", labels_3d[0])
    assert open_image(tmp_path / "plain.tif").origin is None


def test_bad_translate_names_the_parameter(tmp_path, labels_3d):
    with pytest.raises(ValueError, match="translate must have 3 values"):
        write_image(tmp_path / "x.ome.tif", labels_3d, axes="ZYX", spacing=(2.0, 0.5, 0.5), translate=(1.0, 2.0))
    with pytest.raises(ValueError, match="translate must be finite"):
        write_image(tmp_path / "x.ome.zarr", labels_3d, axes="ZYX", spacing=(2.0, 0.5, 0.5),
                    translate=(1.0, float("nan"), 0.0))
    with pytest.raises(ValueError, match="translate .* needs spacing"):
        write_image(tmp_path / "x.ome.zarr", labels_3d, axes="ZYX", translate=(1.0, 2.0, 0.0))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("chunked", [False, True])
def test_segment_and_components_commands_keep_the_inputs_origin(tmp_path, chunked):
    from ivote.cli import main
    from ivote.io import write_points_csv

    sample = synthetic_nuclei((48, 48), radius=3.0, spacing=(0.5, 0.5), seed=6)
    image, origin = tmp_path / "cells.ome.tif", (12.5, -30.0)
    write_image(image, sample.image.astype(np.float32), axes="YX", spacing=(0.5, 0.5), translate=origin)
    write_points_csv(tmp_path / "seeds.csv", sample.centers)
    out = tmp_path / ("labels.ome.zarr" if chunked else "labels.ome.tif")
    engine = ["--chunks", "24", "--scheduler", "threads"] if chunked else []
    assert main(["segment", str(image), "--points", str(tmp_path / "seeds.csv"), "--radius", "3", "--iterations",
                 "5", "--backend", "numpy", *engine, "--out", str(out)]) == 0
    labels = open_image(out)
    assert labels.origin == pytest.approx(origin) and labels.spacing == pytest.approx((0.5, 0.5))

    mask = tmp_path / "mask.ome.tif"
    write_image(mask, (sample.labels > 0).astype(np.uint8), axes="YX", spacing=(0.5, 0.5), translate=origin)
    components = tmp_path / ("components.ome.zarr" if chunked else "components.ome.tif")
    assert main(["components", str(mask), *(["--chunks", "24"] if chunked else []), "--out", str(components)]) == 0
    assert open_image(components).origin == pytest.approx(origin)


def test_a_microscopes_stage_positions_are_not_an_origin(tmp_path, labels_3d):
    """Plane positions written by other software (Micro-Manager, Bio-Formats: the stage position, the field's
    centre or a corner by vendor) do not move the image: only napari-ivote's own, marked, are read."""
    path = tmp_path / "stage.ome.tif"
    n = labels_3d.shape[0]
    tifffile.imwrite(path, labels_3d, ome=True, photometric="minisblack", metadata={
        "axes": "ZYX", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5, "PhysicalSizeZ": 2.0,
        "Plane": {"PositionX": [12345.0] * n, "PositionY": [-678.0] * n,
                  "PositionZ": [1500.0 + 2 * z for z in range(n)],
                  "PositionXUnit": ["µm"] * n, "PositionYUnit": ["µm"] * n, "PositionZUnit": ["µm"] * n}})
    image = open_image(path)
    assert image.spacing == pytest.approx((2.0, 0.5, 0.5))
    assert image.origin is None
    ours = tmp_path / "ours.ome.tif"
    write_image(ours, labels_3d, axes="ZYX", spacing=(2.0, 0.5, 0.5), translate=(1500.0, -678.0, 12345.0))
    assert open_image(ours).origin == pytest.approx((1500.0, -678.0, 12345.0))


@pytest.mark.parametrize("engine", [[], ["--chunks", "32", "--scheduler", "threads"]])
def test_detect_command_keeps_the_inputs_origin(tmp_path, engine):
    """The points of ``ivote detect`` sit on the image and on the labels of ``ivote segment``: its translate."""
    from ivote.cli import main
    from ivote.io import read_points_csv
    from ivote.metrics import match_points

    sample = synthetic_nuclei((64, 64), radius=3.0, spacing=(0.5, 0.5), seed=7)
    image, origin = tmp_path / "cells.ome.tif", (12.5, -30.0)
    write_image(image, sample.image.astype(np.float32), axes="YX", spacing=(0.5, 0.5), translate=origin)
    out = tmp_path / "points.csv"
    assert main(["detect", str(image), "--radius", "3", "--backend", "numpy", "-q", *engine, "--out", str(out)]) == 0
    table = read_points_csv(out)
    assert table.translate == pytest.approx(origin) and table.spacing == pytest.approx((0.5, 0.5))
    assert match_points(table.points, sample.centers, tolerance=1.5, spacing=(0.5, 0.5)).f1 > 0.9
    rows = list(csv.DictReader(line for line in out.read_text().splitlines() if not line.startswith("#")))
    world = np.array([[float(r["y_um"]), float(r["x_um"])] for r in rows])
    np.testing.assert_allclose(world, table.points * 0.5 + np.asarray(origin))
