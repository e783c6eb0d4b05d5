"""``ivote segment`` command line: the contract with ``ivote detect``'s points CSV."""

import numpy as np
import pytest
import tifffile

from ivote.cli import main
from ivote.data import synthetic_nuclei
from ivote.io import write_points_csv
from ivote.metrics import match_labels


@pytest.fixture
def sample(tmp_path):
    image, truth, centers, spacing, radius = synthetic_nuclei((96, 96), radius=7, seed=12)
    tifffile.imwrite(tmp_path / "image.tif", image)
    write_points_csv(tmp_path / "points.csv", centers)
    return tmp_path, truth, centers


def test_segment_writes_labels(sample, capsys):
    folder, truth, centers = sample
    out = folder / "labels.tif"
    code = main(["segment", str(folder / "image.tif"), "--points", str(folder / "points.csv"), "--radius", "7",
                 "--iterations", "150", "--backend", "numpy", "--out", str(out)])
    assert code == 0
    labels = tifffile.imread(out)
    assert labels.dtype == np.int32 and labels.shape == truth.shape
    assert match_labels(labels, truth).f1 >= 0.85
    assert "nuclei from" in capsys.readouterr().out


def test_segment_bad_input_is_one_line(sample, capsys):
    folder, truth, centers = sample
    write_points_csv(folder / "far.csv", np.array([[500.0, 5.0]]))
    code = main(["segment", str(folder / "image.tif"), "--points", str(folder / "far.csv"), "--radius", "7",
                 "--backend", "numpy", "--out", str(folder / "x.tif")])
    assert code == 2
    err = capsys.readouterr().err
    assert "seeds" in err and len(err.strip().splitlines()) == 1
    assert not (folder / "x.tif").exists()
    write_points_csv(folder / "p3.csv", np.array([[1.0, 5.0, 5.0]]))
    code = main(["segment", str(folder / "image.tif"), "--points", str(folder / "p3.csv"), "--radius", "7",
                 "--backend", "numpy", "--out", str(folder / "x.tif")])
    assert code == 2 and "2D" in capsys.readouterr().err
    code = main(["segment", str(folder / "missing.tif"), "--points", str(folder / "points.csv"), "--radius", "7",
                 "--out", str(folder / "x.tif")])
    assert code == 2


def test_segment_chunked_writes_the_in_memory_labels_to_zarr(sample, capsys):
    """--chunks runs the blocks on Dask and writes OME-Zarr: the labels of the in-memory command."""
    pytest.importorskip("dask")
    pytest.importorskip("zarr")
    from ivote._files import open_image
    from ivote.segment import segment_nuclei

    folder, truth, centers = sample
    out = folder / "labels.ome.zarr"
    code = main(["segment", str(folder / "image.tif"), "--points", str(folder / "points.csv"), "--radius", "7",
                 "--iterations", "60", "--backend", "numpy", "--chunks", "40", "--out", str(out), "-q"])
    assert code == 0
    assert "blocks of 40x40" in capsys.readouterr().out
    labels = np.asarray(open_image(out).data)
    expected = segment_nuclei(tifffile.imread(folder / "image.tif"), centers, radius=7, iterations=60,
                              backend="numpy")
    np.testing.assert_array_equal(labels.reshape(expected.shape), expected)
    assert not list(folder.glob(".*ivote-labels"))  # the scratch array is gone
    code = main(["segment", str(folder / "image.tif"), "--points", str(folder / "points.csv"), "--radius", "7",
                 "--chunks", "40", "--out", str(folder / "labels.tif")])
    assert code == 2 and ".zarr" in capsys.readouterr().err


def test_segment_radius_auto_is_detects_estimate(sample, capsys):
    """The README's ``ivote segment ... --radius R|auto``: auto was an argparse error; it is the estimate
    ``ivote detect --radius auto`` uses, printed, and the labels are those of that number given."""
    from ivote.detect import estimate_radius

    folder, truth, centers = sample
    image = tifffile.imread(folder / "image.tif")
    estimate = estimate_radius(image, backend="numpy")
    common = ["segment", str(folder / "image.tif"), "--points", str(folder / "points.csv"), "--iterations", "60",
              "--backend", "numpy"]
    assert main([*common, "--radius", "auto", "--out", str(folder / "auto.tif")]) == 0
    assert f"radius {estimate:.4g} px (auto" in capsys.readouterr().err
    assert main([*common, "--radius", repr(estimate), "--out", str(folder / "given.tif")]) == 0
    np.testing.assert_array_equal(tifffile.imread(folder / "auto.tif"), tifffile.imread(folder / "given.tif"))
    with pytest.raises(SystemExit):  # argparse's one-line usage error
        main([*common, "--radius", "big", "--out", str(folder / "x.tif")])
    assert "'auto'" in capsys.readouterr().err and not (folder / "x.tif").exists()


def test_segment_radius_auto_reads_rgb_as_detect_does(sample, monkeypatch):
    """``--radius auto`` on H&E: the estimate is given the RGB image, as ``ivote detect --radius auto`` gives it
    (cropped before its colour conversion), not the density of the whole image."""
    import ivote.detect

    folder, truth, centers = sample
    grey = tifffile.imread(folder / "image.tif")
    scaled = (grey - grey.min()) / np.ptp(grey)
    rgb = np.stack([255 - 120 * scaled, 255 - 180 * scaled, 255 - 60 * scaled], axis=-1).astype(np.uint8)
    tifffile.imwrite(folder / "he.tif", rgb, photometric="rgb")
    seen, real = [], ivote.detect.estimate_radius
    monkeypatch.setattr(ivote.detect, "estimate_radius", lambda image, **kw: (seen.append(image.shape), real(image, **kw))[1])
    assert main(["segment", str(folder / "he.tif"), "--points", str(folder / "points.csv"), "--radius", "auto",
                 "--iterations", "20", "--backend", "numpy", "--out", str(folder / "he_labels.tif")]) == 0
    assert seen == [rgb.shape]



def test_napari_points_csv_is_read_with_a_one_line_warning(sample, capsys):
    """napari's own points CSV is read; the CLI says which columns it read in one line, as its own warnings."""
    folder, truth, centers = sample
    rows = "".join(f"{i},{y},{x},seed\n" for i, (y, x) in enumerate(centers))
    (folder / "napari.csv").write_text("index,axis-0,axis-1,kind\n" + rows)
    assert main(["segment", str(folder / "image.tif"), "--points", str(folder / "napari.csv"), "--radius", "7",
                 "--iterations", "5", "--backend", "numpy", "--out", str(folder / "labels.tif"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "ivote segment: warning: napari.csv is napari's points CSV: read columns axis-0, axis-1" in err
    assert "UserWarning" not in err and "read_points_csv(" not in err
    assert main(["segment", str(folder / "image.tif"), "--points", str(folder / "points.csv"), "--radius", "7",
                 "--iterations", "5", "--backend", "numpy", "--out", str(folder / "ours.tif"), "-q"]) == 0
    labels = tifffile.imread(folder / "labels.tif")
    assert labels.max() == len(centers)
    np.testing.assert_array_equal(labels, tifffile.imread(folder / "ours.tif"))  # the seeds of our own CSV


def test_napari_points_csv_of_a_time_lapse_says_what_to_do(tmp_path, capsys):
    from ivote import write_image

    frames = [synthetic_nuclei((48, 48), radius=3.0, spacing=(0.5, 0.5), seed=s) for s in (1, 2)]
    write_image(tmp_path / "movie.ome.tif", np.stack([f.image for f in frames]).astype(np.float32), axes="TYX",
                spacing=(0.5, 0.5))
    rows = "".join(f"{i},{t},{y},{x}\n" for t, f in enumerate(frames) for i, (y, x) in enumerate(f.centers))
    (tmp_path / "napari.csv").write_text("index,axis-0,axis-1,axis-2\n" + rows)
    assert main(["segment", str(tmp_path / "movie.ome.tif"), "--points", str(tmp_path / "napari.csv"), "--radius",
                 "1.5", "--out", str(tmp_path / "labels.tif"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "3D points but the image is 2D (TYX)" in err and "axis-0 is the frame" in err and "'t' column" in err
    assert not (tmp_path / "labels.tif").exists()
