"""``ivote detect`` block by block (--chunks, --scheduler) and in batches (--out-dir)."""

import csv

import numpy as np
import pytest
import tifffile

pytest.importorskip("dask")

from ivote import iterative_voting  # noqa: E402
from ivote.cli import main  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.io import read_points_csv  # noqa: E402

RADIUS = 4


@pytest.fixture(scope="module")
def images():
    return [synthetic_nuclei((110, 130), radius=RADIUS, seed=seed).image for seed in (11, 12)]


def test_detect_zarr_block_by_block_equals_in_memory(images, tmp_path, capsys):
    from ivote._files import write_image

    image = images[0]
    path = write_image(tmp_path / "image.ome.zarr", image, axes="YX", spacing=(0.5, 0.5))
    chunked, whole = tmp_path / "chunked.csv", tmp_path / "whole.csv"
    common = ["--radius", "2", "--backend", "numpy", "-q"]
    assert main(["detect", str(path), *common, "--chunks", "40", "55", "--out", str(chunked)]) == 0
    assert "block by block" in capsys.readouterr().out
    assert main(["detect", str(path), *common, "--out", str(whole)]) == 0
    got, expected = read_points_csv(chunked), read_points_csv(whole)
    assert len(expected.points) > 20
    np.testing.assert_array_equal(got.points, expected.points)
    np.testing.assert_array_equal(got.scores, expected.scores)


def test_detect_chunked_takes_rgb_and_refuses_threads_with_gpus(tmp_path, capsys):
    rgb = tmp_path / "rgb.tif"
    tifffile.imwrite(rgb, np.full((40, 40, 3), 240, np.uint8), photometric="rgb")  # glass: no nucleus
    assert main(["detect", str(rgb), "--radius", "4", "--chunks", "20", "--out", str(tmp_path / "x.csv")]) == 0
    assert "0 nuclei" in capsys.readouterr().out
    gray = tmp_path / "gray.tif"
    tifffile.imwrite(gray, np.zeros((40, 40), np.float32))
    assert main(["detect", str(gray), "--radius", "4", "--gpus", "1", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--scheduler local" in capsys.readouterr().err


def test_batch_of_files_writes_one_table_each_and_a_summary(images, tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    for i, image in enumerate(images):
        tifffile.imwrite(folder / f"field_{i}.tif", image)
    (folder / "broken.tif").write_bytes(b"not a tiff")
    out_dir = tmp_path / "out"
    code = main(["detect", str(folder / "*.tif"), "--radius", str(RADIUS), "--backend", "numpy", "-q",
                 "--out-dir", str(out_dir)])
    assert code == 1  # one file failed; the others are written
    printed = capsys.readouterr().out
    assert "2 of 3 files" in printed
    with open(out_dir / "summary.csv", newline="") as stream:
        rows = {row["file"].rsplit("/", 1)[-1]: row for row in csv.DictReader(stream)}
    assert rows["broken.tif"]["count"] == "" and rows["broken.tif"]["error"]
    for i, image in enumerate(images):
        expected = iterative_voting(image, radius=RADIUS, backend="numpy")
        row = rows[f"field_{i}.tif"]
        assert int(row["count"]) == len(expected.points) > 10
        table = read_points_csv(out_dir / row["output"])
        np.testing.assert_array_equal(table.points, expected.points)


def test_batch_needs_out_dir(tmp_path, capsys):
    assert main(["detect", str(tmp_path / "*.tif"), "--radius", "4", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--out-dir" in capsys.readouterr().err
    assert main(["detect", str(tmp_path / "*.tif"), "--radius", "4", "--out-dir", str(tmp_path / "o")]) == 2
    assert "no file matches" in capsys.readouterr().err


def test_an_unquoted_pattern_the_shell_expanded_is_a_batch_of_those_files(images, tmp_path, capsys):
    """``ivote detect folder/*.tif --out-dir DIR`` unquoted: the shell passes the files, which argparse refused
    ("unrecognized arguments"); they are a batch, each table that of the file alone."""
    paths = []
    for i, image in enumerate(images):
        paths.append(str(tmp_path / f"field_{i}.tif"))
        tifffile.imwrite(paths[-1], image)
    out_dir = tmp_path / "out"
    assert main(["detect", *paths, "--radius", str(RADIUS), "--backend", "numpy", "-q", "--out-dir", str(out_dir)]) == 0
    with open(out_dir / "summary.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [row["file"] for row in rows] == paths
    for image, row in zip(images, rows):
        expected = iterative_voting(image, radius=RADIUS, backend="numpy")
        np.testing.assert_array_equal(read_points_csv(out_dir / row["output"]).points, expected.points)
    capsys.readouterr()
    assert main(["detect", *paths, "--radius", str(RADIUS), "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "--out-dir" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "x.csv").exists()
