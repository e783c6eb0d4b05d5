"""``ivote measure`` and the segment command's report of its seeds."""

import csv

import numpy as np
import tifffile

from ivote.cli import main
from ivote.data import synthetic_nuclei
from ivote.io import write_points_csv
from ivote.measure import measure_nuclei


def read_csv(path):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], {name: np.array([float(r[i]) if r[i] else np.nan for r in rows[1:]])
                     for i, name in enumerate(rows[0])}


def test_measure_3d_reads_the_spacing_from_the_image(tmp_path, capsys):
    sample = synthetic_nuclei((12, 40, 40), spacing=(2.0, 0.5, 0.5), radius=5, seed=2)
    image, labels = tmp_path / "image.tif", tmp_path / "labels.tif"
    tifffile.imwrite(image, sample.image, metadata={"spacing": list(sample.spacing)})
    tifffile.imwrite(labels, sample.labels)
    out = tmp_path / "table.csv"
    assert main(["measure", str(image), "--labels", str(labels), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"{len(np.unique(sample.labels)) - 1} nuclei measured" in printed.out and out.name in printed.out
    assert "(pixel size 2 x 0.5 x 0.5 um)" in printed.out  # one vocabulary: the columns say um too
    assert printed.err == ""  # no progress bar when stderr is not a terminal
    header, table = read_csv(out)
    assert "volume_um3" in header and "equivalent_diameter_um" in header and "centroid_z_um" in header
    expected = measure_nuclei(sample.labels, sample.image, spacing=sample.spacing)
    for name in header:
        np.testing.assert_allclose(table[name], expected[name].astype(float), rtol=1e-12, err_msg=name)


def test_measure_scores_from_points_and_spacing_override(tmp_path, capsys):
    sample = synthetic_nuclei((64, 64), radius=6, seed=5)
    image, labels, points = tmp_path / "image.tif", tmp_path / "labels.tif", tmp_path / "points.csv"
    tifffile.imwrite(image, sample.image)
    tifffile.imwrite(labels, sample.labels)
    scores = np.arange(len(sample.centers)) / 10.0
    write_points_csv(points, sample.centers, scores)
    out = tmp_path / "table.csv"
    assert main(["measure", str(image), "--labels", str(labels), "--points", str(points), "--spacing", "0.25", "0.25",
                 "--out", str(out)]) == 0
    header, table = read_csv(out)
    assert "area_um2" in header and "score" in header
    inside = sample.labels[tuple(np.rint(sample.centers).astype(int).T)]
    for label, score in zip(inside, scores):
        if label:
            row = np.flatnonzero(table["label"] == label)[0]
            assert table["score"][row] >= score  # the best point inside the nucleus
    ones = measure_nuclei(sample.labels, spacing=(0.25, 0.25))
    np.testing.assert_allclose(table["area_um2"], ones["area_um2"])


def test_measure_without_spacing_writes_pixels(tmp_path):
    labels = np.zeros((20, 20), np.int32)
    labels[2:5, 2:6] = 1
    tifffile.imwrite(tmp_path / "labels.tif", labels)
    tifffile.imwrite(tmp_path / "image.tif", labels.astype(np.float32))
    assert main(["measure", str(tmp_path / "image.tif"), "--labels", str(tmp_path / "labels.tif"),
                 "--out", str(tmp_path / "t.csv")]) == 0
    header, table = read_csv(tmp_path / "t.csv")
    assert "area_px2" in header and table["area_px2"].tolist() == [12.0]


def test_measure_errors_are_one_line(tmp_path, capsys):
    tifffile.imwrite(tmp_path / "labels.tif", np.zeros((20, 20), np.int32))
    tifffile.imwrite(tmp_path / "image.tif", np.zeros((21, 20), np.float32))
    assert main(["measure", str(tmp_path / "image.tif"), "--labels", str(tmp_path / "labels.tif"),
                 "--out", str(tmp_path / "t.csv")]) == 2
    assert "must have the same shape" in capsys.readouterr().err
    assert main(["measure", str(tmp_path / "image.tif"), "--labels", str(tmp_path / "labels.tif"),
                 "--out", str(tmp_path / "t.txt")]) == 2
    assert "--out must end in .csv" in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists()


def test_segment_reports_what_became_of_the_seeds(tmp_path, capsys):
    sample = synthetic_nuclei((64, 64), radius=6, seed=2, n_nuclei=4)
    image, points = tmp_path / "image.tif", tmp_path / "points.csv"
    tifffile.imwrite(image, sample.image)
    seeds = np.vstack([sample.centers, sample.centers[:1]])  # one duplicate
    write_points_csv(points, seeds, np.ones(len(seeds)))
    out = tmp_path / "labels.tif"
    assert main(["segment", str(image), "--points", str(points), "--radius", "6", "--iterations", "100",
                 "--out", str(out)]) == 0
    line = capsys.readouterr().out
    labels = tifffile.imread(out)
    n = len(np.unique(labels)) - 1
    assert line.startswith(f"{n} nuclei from {len(seeds)} seeds; ") and "1 duplicate" in line


def test_measure_centroids_include_the_images_position(tmp_path):
    """An image with a position (here, written with a translate): the centroids are where the points of
    'ivote detect' and the napari dock's table put the nuclei, in the unit of the columns."""
    from ivote import write_image

    sample = synthetic_nuclei((48, 40), radius=3.0, spacing=(0.5, 0.5), seed=3)
    origin = (12.5, -30.0)
    write_image(tmp_path / "image.ome.tif", sample.image.astype(np.float32), axes="YX", spacing=(0.5, 0.5),
                translate=origin)
    tifffile.imwrite(tmp_path / "labels.tif", sample.labels.astype(np.int32))
    for units, per_um in (("um", 1.0), ("nm", 1000.0)):
        spacing = [] if units == "um" else ["--spacing", "500", "500"]
        out = tmp_path / f"table_{units}.csv"
        assert main(["measure", str(tmp_path / "image.ome.tif"), "--labels", str(tmp_path / "labels.tif"),
                     *spacing, "--units", units, "--out", str(out), "-q"]) == 0
        _, table = read_csv(out)
        for axis, name in enumerate("yx"):
            pixel = [np.nonzero(sample.labels == label)[axis].mean() for label in table["label"].astype(int)]
            expected = (np.array(pixel) * 0.5 + origin[axis]) * per_um
            np.testing.assert_allclose(table[f"centroid_{name}_{units}"], expected, rtol=1e-9)


def test_measure_without_a_pixel_size_says_so_once(tmp_path, capsys):
    sample = synthetic_nuclei((64, 64), radius=5, seed=3)
    image, labels = tmp_path / "image.tif", tmp_path / "labels.tif"
    tifffile.imwrite(image, sample.image)
    tifffile.imwrite(labels, sample.labels)
    assert main(["measure", str(image), "--labels", str(labels), "--out", str(tmp_path / "t.csv")]) == 0
    printed = capsys.readouterr().out
    assert "(no pixel size: values in pixels)" in printed and "pixels, pixels" not in printed
