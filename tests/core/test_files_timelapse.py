"""Time-lapse files, labels written with their scale (checked by independent readers), the
points table's columns, and the command line's --axes/--channel/--scene/--spacing."""

import importlib.util

import numpy as np
import pandas as pd
import pytest
import tifffile

from ivote import detect_frames, iterative_voting, open_image, segment_frames, segment_nuclei, write_image
from ivote.cli import main
from ivote.data import synthetic_nuclei
from ivote.io import read_points_csv, write_points_csv

SPACING = (0.5, 0.5)
RADIUS = 3.0


@pytest.fixture(scope="module")
def movie():
    """Three frames of different nuclei (uint16, T, Y, X)."""
    frames = [synthetic_nuclei((64, 64), radius=RADIUS, spacing=SPACING, seed=20 + t) for t in range(3)]
    return np.stack([(np.clip(f.image, 0, 1.2) * 50000).astype(np.uint16) for f in frames]), frames


def test_detect_frames_uses_one_threshold_for_every_frame(movie):
    stack, frames = movie
    found = detect_frames(stack, radius=RADIUS, spacing=SPACING, backend="numpy", workers=2)
    assert found.points.shape[1] == 3 and sorted(set(found.times.tolist())) == [0, 1, 2]
    singles = [iterative_voting(frame, radius=RADIUS, spacing=SPACING, threshold="none", backend="numpy")
               for frame in stack]
    from ivote.detect import auto_threshold, otsu_threshold

    pooled, floor = auto_threshold(np.concatenate([s.candidate_scores for s in singles]),
                                   np.concatenate([s.candidate_contrasts for s in singles]), 3.0)
    assert found.threshold == pooled
    for t, single in enumerate(singles):
        expected = single.with_threshold(pooled, floor)
        np.testing.assert_array_equal(found.points[found.times == t, 1:], expected.points)
        assert all(f.threshold == pooled and f.min_contrast == floor for f in found.frames)
    otsu = detect_frames(stack, radius=RADIUS, spacing=SPACING, threshold="otsu", backend="numpy")
    assert otsu.threshold == otsu_threshold(np.concatenate([s.candidate_scores for s in singles]))
    sequential = detect_frames(stack, radius=RADIUS, spacing=SPACING, backend="numpy", workers=1)
    np.testing.assert_array_equal(sequential.points, found.points)
    fixed = detect_frames(stack, radius=RADIUS, spacing=SPACING, threshold=0.5, backend="numpy")
    assert fixed.threshold == 0.5 and (fixed.scores >= 0.5).all()
    from ivote.metrics import match_points

    for t, truth in enumerate(frames):
        assert match_points(found.points[found.times == t, 1:], truth.centers, tolerance=1.5, spacing=SPACING).f1 >= 0.8
    calls = []
    detect_frames(stack[:2], radius=RADIUS, spacing=SPACING, backend="numpy", progress=lambda d, n: calls.append((d, n)))
    assert calls == [(1, 2), (2, 2)]
    with pytest.raises(ValueError, match="workers"):
        detect_frames(stack, radius=RADIUS, workers=0)


def test_detect_frames_estimates_one_radius_for_every_frame(movie):
    """radius='auto' on a time-lapse: estimated once (on the first frame), used for every frame,
    so the points are those of the detection with that number."""
    stack, _ = movie
    first = iterative_voting(stack[0], radius="auto", spacing=SPACING, threshold="none", backend="numpy")
    found = detect_frames(stack, radius="auto", spacing=SPACING, backend="numpy", workers=1)
    assert {f.radius for f in found.frames} == {first.radius} and all(f.radius_estimated for f in found.frames)
    fixed = detect_frames(stack, radius=first.radius, spacing=SPACING, backend="numpy", workers=1)
    np.testing.assert_array_equal(found.points, fixed.points)
    assert not any(f.radius_estimated for f in fixed.frames)


def test_detect_frames_reads_a_dask_array_one_frame_at_a_time(tmp_path, movie):
    stack, _ = movie
    path = tmp_path / "movie.ome.tif"
    tifffile.imwrite(path, stack, ome=True, metadata={"axes": "TYX", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
    image = open_image(path)
    assert image.axes == "TYX" and image.n_frames == 3 and image.spacing == SPACING
    lazy = detect_frames(image.data, radius=RADIUS, spacing=image.known_spacing(), backend="numpy")
    eager = detect_frames(stack, radius=RADIUS, spacing=SPACING, backend="numpy")
    np.testing.assert_array_equal(lazy.points, eager.points)


def test_segment_frames_keeps_t(movie):
    stack, _ = movie
    found = detect_frames(stack[:2], radius=RADIUS, spacing=SPACING, backend="numpy")
    labels = segment_frames(stack[:2], found.points, radius=RADIUS, spacing=SPACING, iterations=60, backend="numpy")
    assert labels.shape == (2, 64, 64) and labels.dtype == np.int32
    from ivote import segment_nuclei

    for t in range(2):
        alone = segment_nuclei(stack[t], found.points[found.times == t, 1:], radius=RADIUS, spacing=SPACING,
                               iterations=60, backend="numpy")
        assert alone.max() >= 3
        np.testing.assert_array_equal(labels[t], alone)
    with pytest.raises(ValueError, match="frame"):
        segment_frames(stack[:2], [[5, 10.0, 10.0]], radius=RADIUS)


# ---------------------------------------------------------------- writing images and labels


def test_labels_ome_tiff_have_their_scale_for_independent_readers(tmp_path):
    from bioio import BioImage
    from bioio_ome_tiff import Reader

    labels = np.zeros((2, 4, 16, 16), np.int32)
    labels[:, 1:3, 4:9, 4:9] = 7
    path = write_image(tmp_path / "labels.ome.tif", labels, axes="TZYX", spacing=(2.0, 0.25, 0.5))
    with tifffile.TiffFile(path) as tif:  # tifffile's OME parser
        assert tif.is_ome and tif.series[0].axes == "TZYX"
        pixels = tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]["Pixels"]
        np.testing.assert_array_equal(tif.asarray(), labels)
    assert (pixels["PhysicalSizeZ"], pixels["PhysicalSizeY"], pixels["PhysicalSizeX"]) == (2.0, 0.25, 0.5)
    assert {pixels[f"PhysicalSize{a}Unit"] for a in "ZYX"} == {"µm"}
    sizes = BioImage(path, reader=Reader).physical_pixel_sizes  # bioio
    assert (sizes.Z, sizes.Y, sizes.X) == (2.0, 0.25, 0.5)
    back = open_image(path)
    assert back.axes == "TZYX" and back.spacing == (2.0, 0.25, 0.5)
    with tifffile.TiffFile(path) as tif:  # resolution tags too, for plain TIFF readers (pixels per cm)
        x_res = tif.pages[0].tags["XResolution"].value
        assert x_res[0] / x_res[1] == pytest.approx(1e4 / 0.5)


def test_labels_ome_zarr(tmp_path):
    import zarr
    from bioio_ome_zarr import Reader

    labels = np.arange(5 * 12 * 10, dtype=np.int32).reshape(5, 12, 10)
    path = write_image(tmp_path / "labels.ome.zarr", labels, axes="ZYX", spacing=(3.0, 0.5, 0.25))
    attrs = dict(zarr.open_group(str(path), mode="r").attrs)
    ms = attrs["multiscales"][0]
    assert ms["version"] == "0.4" and [a["name"] for a in ms["axes"]] == ["z", "y", "x"]
    assert ms["datasets"][0]["coordinateTransformations"][0]["scale"] == [3.0, 0.5, 0.25]
    reader = Reader(str(path))
    assert tuple(reader.physical_pixel_sizes) == (3.0, 0.5, 0.25)
    np.testing.assert_array_equal(np.asarray(reader.data), labels)
    write_image(path, labels + 1, axes="ZYX", spacing=(3.0, 0.5, 0.25))  # replaces atomically
    np.testing.assert_array_equal(open_image(path).data.compute(), labels + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.ome.zarr"]
    (tmp_path / "notes.zarr").mkdir()
    (tmp_path / "notes.zarr" / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="not a Zarr store"):
        write_image(tmp_path / "notes.zarr", labels, axes="ZYX")
    assert (tmp_path / "notes.zarr" / "mine.txt").read_text() == "keep"


def test_write_image_checks(tmp_path):
    with pytest.raises(ValueError, match="one letter per dimension"):
        write_image(tmp_path / "a.tif", np.zeros((4, 4)), axes="ZYX")
    with pytest.raises(ValueError, match="spacing must have 2"):
        write_image(tmp_path / "a.tif", np.zeros((4, 4)), axes="YX", spacing=(1, 1, 1))
    with pytest.raises(ValueError, match="must end in"):
        write_image(tmp_path / "a.png", np.zeros((4, 4)), axes="YX")


# ---------------------------------------------------------------- points tables


@pytest.mark.parametrize("spacing", [None, (2.0, 0.5, 0.5)])
def test_points_table_columns_are_fixed_and_pandas_reads_them(tmp_path, spacing):
    points = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    path = tmp_path / "p.csv"
    write_points_csv(path, points, [0.9, 0.8], spacing=spacing, units="um" if spacing else None, times=[0, 3])
    table = pd.read_csv(path, comment="#")
    unit = "um" if spacing else "px"
    assert list(table.columns) == ["t", "z", "y", "x", "score", f"z_{unit}", f"y_{unit}", f"x_{unit}"]
    assert table["t"].tolist() == [0, 3] and table["t"].dtype.kind == "i"
    np.testing.assert_allclose(table[f"x_{unit}"], points[:, 2] * (spacing[2] if spacing else 1))
    back = read_points_csv(path)
    np.testing.assert_array_equal(back.times, [0, 3])
    np.testing.assert_array_equal(back.points, points)
    write_points_csv(path, points)  # no scores: the column is still there
    assert list(pd.read_csv(path, comment="#").columns) == ["z", "y", "x", "score", "z_px", "y_px", "x_px"]
    assert read_points_csv(path).scores is None


def test_napari_reader_reads_the_t_column(tmp_path):
    from ivote.napari._io import get_reader

    path = tmp_path / "t.csv"
    write_points_csv(path, [[1.0, 2.0], [3.0, 4.0]], [0.5, 0.6], spacing=(0.5, 0.25), times=[0, 2])
    reader = get_reader(str(path))
    assert reader is not None
    data, attributes, kind = reader(str(path))[0]
    assert kind == "points" and data.shape == (2, 3)
    np.testing.assert_array_equal(data[:, 0], [0, 2])
    assert tuple(attributes["scale"]) == (1.0, 0.5, 0.25)
    from ivote.napari._io import write_points

    [again] = write_points(str(tmp_path / "again.csv"), data, attributes)  # the frame stays a frame
    back = read_points_csv(again)
    np.testing.assert_array_equal(back.times, [0, 2])
    np.testing.assert_array_equal(back.points, [[1.0, 2.0], [3.0, 4.0]])
    assert back.spacing == (0.5, 0.25)


def test_parquet_points(tmp_path):
    pytest.importorskip("pyarrow")
    from ivote.io import write_points_parquet

    path = write_points_parquet(tmp_path / "p.parquet", [[1.0, 2.0]], [0.5], spacing=(0.5, 0.5), times=[1])
    table = pd.read_parquet(path)
    assert list(table.columns) == ["t", "y", "x", "score", "y_um", "x_um"]


# ---------------------------------------------------------------- the command line


def test_cli_timelapse_detect_then_segment(tmp_path, movie, capsys):
    stack, _ = movie
    path = tmp_path / "movie.ome.tif"
    tifffile.imwrite(path, stack[:2], ome=True, metadata={"axes": "TYX", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
    points = tmp_path / "points.csv"
    assert main(["detect", str(path), "--radius", str(RADIUS), "--backend", "numpy", "--out", str(points)]) == 0
    assert "2 frames" in capsys.readouterr().out
    table = pd.read_csv(points, comment="#")
    assert list(table.columns) == ["t", "y", "x", "score", "y_um", "x_um"]
    expected = detect_frames(stack[:2], radius=RADIUS, spacing=SPACING, backend="numpy")
    np.testing.assert_array_equal(table[["t", "y", "x"]].to_numpy(), expected.points)
    labels = tmp_path / "labels.ome.tif"
    assert main(["segment", str(path), "--points", str(points), "--radius", str(RADIUS), "--iterations", "40",
                 "--backend", "numpy", "--out", str(labels)]) == 0
    back = open_image(labels)
    assert back.axes == "TYX" and back.spacing == SPACING and back.shape == (2, 64, 64)


def test_cli_axes_channel_and_spacing_warning(tmp_path, movie, capsys):
    frame = movie[0][0]
    noise = np.random.default_rng(1).integers(0, 60000, frame.shape).astype(np.uint16)
    path = tmp_path / "two.tif"
    tifffile.imwrite(path, np.stack([noise, frame]), photometric="minisblack")
    out = tmp_path / "p.csv"
    assert main(["detect", str(path), "--radius", "6", "--backend", "numpy", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(2, 64, 64)" in err and "--axes" in err
    assert main(["detect", str(path), "--radius", "6", "--axes", "CYX", "--channel", "1", "--backend", "numpy",
                 "--out", str(out)]) == 0
    expected = iterative_voting(frame, radius=6, backend="numpy")
    np.testing.assert_array_equal(read_points_csv(out).points, expected.points)
    ome = tmp_path / "f.ome.tif"
    tifffile.imwrite(ome, frame, ome=True, metadata={"axes": "YX", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
    capsys.readouterr()
    assert main(["detect", str(ome), "--radius", "6", "--spacing", "1", "1", "--backend", "numpy",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: --spacing 1 1 differs from the file's 0.5 0.5 um; using --spacing" in err
    assert read_points_csv(out).spacing == (1.0, 1.0)
    if importlib.util.find_spec("pyarrow") is not None:
        parquet = tmp_path / "p.parquet"
        assert main(["detect", str(ome), "--radius", "3", "--format", "parquet", "--backend", "numpy",
                     "--out", str(parquet)]) == 0
        csv = tmp_path / "same.csv"
        assert main(["detect", str(ome), "--radius", "3", "--backend", "numpy", "--out", str(csv)]) == 0
        pd.testing.assert_frame_equal(pd.read_parquet(parquet), pd.read_csv(csv, comment="#"))
    assert main(["detect", str(ome), "--radius", "3", "--format", "parquet", "--out", str(out)]) == 2
    assert ".parquet" in capsys.readouterr().err


def test_cli_scene_all_writes_one_output_each(tmp_path, movie, capsys):
    frames = movie[0]
    path = tmp_path / "plate.ome.tif"
    with tifffile.TiffWriter(path, ome=True) as tif:
        for name, frame in (("A1", frames[0]), ("B2", frames[1])):
            tif.write(frame, metadata={"axes": "YX", "Name": name, "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
    out = tmp_path / "p.csv"
    assert main(["detect", str(path), "--radius", str(RADIUS), "--scene", "all", "--backend", "numpy",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "scene A1" in printed and "scene B2" in printed
    for t, name in enumerate(("A1", "B2")):
        expected = iterative_voting(frames[t], radius=RADIUS, spacing=SPACING, backend="numpy")
        np.testing.assert_array_equal(read_points_csv(tmp_path / f"p_{name}.csv").points, expected.points)
    assert main(["detect", str(path), "--radius", str(RADIUS), "--scene", "B2", "--backend", "numpy",
                 "--out", str(out)]) == 0
    np.testing.assert_array_equal(read_points_csv(out).points, read_points_csv(tmp_path / "p_B2.csv").points)
    labels = tmp_path / "labels.ome.tif"  # each scene seeded by its own points file
    assert main(["segment", str(path), "--points", str(out), "--radius", str(RADIUS), "--scene", "all",
                 "--iterations", "20", "--backend", "numpy", "--out", str(labels)]) == 0
    for t, name in enumerate(("A1", "B2")):
        back = open_image(tmp_path / f"labels_{name}.ome.tif")
        points = read_points_csv(tmp_path / f"p_{name}.csv").points
        expected = segment_nuclei(frames[t], points, radius=RADIUS, spacing=SPACING, iterations=20, backend="numpy")
        assert back.spacing == SPACING
        np.testing.assert_array_equal(back.data.compute(), expected)  # each scene with its own seeds
