"""``ivote detect``: the CSV contract and one-line errors."""

import numpy as np
import pytest
import tifffile

from ivote.cli import main
from ivote.data import synthetic_nuclei
from ivote.io import read_points_csv
from ivote.metrics import match_points


@pytest.fixture(scope="module")
def sample_tif(tmp_path_factory):
    sample = synthetic_nuclei((96, 96), radius=6, seed=4)
    path = tmp_path_factory.mktemp("detect") / "nuclei.tif"
    tifffile.imwrite(path, sample.image)
    return path, sample


def test_detect_writes_points(sample_tif, tmp_path, capsys):
    path, sample = sample_tif
    out = tmp_path / "points.csv"
    assert main(["detect", str(path), "--radius", "6", "--backend", "numpy", "--out", str(out)]) == 0
    assert "nuclei" in capsys.readouterr().out
    header = [line for line in out.read_text().splitlines() if not line.startswith("#")][0]
    assert header == "y,x,score,y_px,x_px"  # the same columns with or without a spacing
    table = read_points_csv(out)
    assert match_points(table.points, sample.centers, tolerance=3).f1 >= 0.95
    assert np.all(np.diff(table.scores) <= 0)


def test_detect_spacing_and_threshold_none(sample_tif, tmp_path):
    path, _ = sample_tif
    out = tmp_path / "all.csv"
    code = main(["detect", str(path), "--radius", "3", "--spacing", "0.5", "0.5", "--threshold", "none",
                 "--backend", "numpy", "--out", str(out)])
    assert code == 0
    header = [line for line in out.read_text().splitlines() if not line.startswith("#")][0]
    assert header == "y,x,score,y_um,x_um"
    table = read_points_csv(out)
    np.testing.assert_allclose(table.world, table.points * 0.5)
    fixed = tmp_path / "fixed.csv"
    main(["detect", str(path), "--radius", "3", "--spacing", "0.5", "0.5", "--threshold", "1e9",
          "--backend", "numpy", "--out", str(fixed)])
    assert len(read_points_csv(fixed).points) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--radius", "-1"], "radius"),
        (["--radius", "6", "--spacing", "1", "1", "1"], "spacing"),
        (["--radius", "6", "--threshold", "mean"], "threshold"),
    ],
)
def test_detect_bad_input_is_one_line(sample_tif, tmp_path, capsys, args, message):
    path, _ = sample_tif
    code = main(["detect", str(path), *args, "--backend", "numpy", "--out", str(tmp_path / "x.csv")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err and err.startswith("ivote detect: error:")


def test_detect_missing_file(tmp_path, capsys):
    assert main(["detect", str(tmp_path / "none.tif"), "--radius", "4", "--out", str(tmp_path / "x.csv")]) == 2
    assert "not found" in capsys.readouterr().err


def test_detect_with_learned_features(sample_tif, tmp_path):
    """``ivote features fit`` then ``ivote detect --features``: the model's map replaces the blur."""
    path, sample = sample_tif
    model = tmp_path / "model.npz"
    assert main(["features", "fit", str(path), "--filters", "4", "--size", "5", "--epochs", "2",
                 "--out", str(model)]) == 0
    out = tmp_path / "points.csv"
    assert main(["detect", str(path), "--radius", "6", "--features", str(model), "--backend", "numpy",
                 "--out", str(out)]) == 0
    table = read_points_csv(out)
    assert match_points(table.points, sample.centers, tolerance=3).f1 >= 0.8
    assert main(["detect", str(path), "--radius", "6", "--features", str(tmp_path / "missing.npz"),
                 "--out", str(out)]) == 2


def test_detect_threshold_none_writes_every_maximum(tmp_path):
    """``--threshold none`` is for precision-recall sweeps: every local maximum is
    written (the contrast test off) unless ``--min-contrast`` is given; other
    thresholds keep the default contrast test (3)."""
    from ivote.detect import iterative_voting

    rng = np.random.default_rng(6)
    image = (0.3 + rng.normal(0.0, 0.05, (96, 96))).astype(np.float32)  # noise: maxima of low contrast
    path = tmp_path / "noise.tif"
    tifffile.imwrite(path, image)
    found = iterative_voting(image, radius=6, threshold=None, min_contrast=0, backend="numpy")
    assert len(found.candidates) > 10 and np.sum(found.candidate_contrasts >= 3) < len(found.candidates)

    def written(*args):
        out = tmp_path / "points.csv"
        assert main(["detect", str(path), "--radius", "6", *args, "--backend", "numpy", "--out", str(out)]) == 0
        return read_points_csv(out).points

    np.testing.assert_array_equal(written("--threshold", "none"), found.candidates)
    np.testing.assert_array_equal(written("--threshold", "None", "--min-contrast", "3"),
                                  found.with_threshold(None, min_contrast=3).points)
    np.testing.assert_array_equal(written("--threshold", "0"), found.with_threshold(0.0, min_contrast=3).points)


def test_a_grey_image_saved_as_rgb_is_flagged_and_channel_0_reads_it_as_grey(sample_tif, tmp_path, capsys):
    """Fluorescence exported as 'RGB Color' (red = green = blue) is read as H&E by default: a warning names
    --channel 0, which gives the grey image's own nuclei; a real colour image gets no warning."""
    path, sample = sample_tif
    grey = np.round(255 * np.clip(sample.image / sample.image.max(), 0, 1)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "grey.tif", grey)
    tifffile.imwrite(tmp_path / "as_rgb.tif", np.dstack([grey] * 3), photometric="rgb")
    run = ["--radius", "6", "--backend", "numpy", "--out"]
    assert main(["detect", str(tmp_path / "as_rgb.tif"), *run, str(tmp_path / "he.csv")]) == 0
    assert "--channel 0" in capsys.readouterr().err
    assert main(["detect", str(tmp_path / "as_rgb.tif"), "--channel", "0", *run, str(tmp_path / "c0.csv")]) == 0
    assert main(["detect", str(tmp_path / "grey.tif"), *run, str(tmp_path / "grey.csv")]) == 0
    assert "warning" not in capsys.readouterr().err
    np.testing.assert_array_equal(read_points_csv(tmp_path / "c0.csv").points,
                                  read_points_csv(tmp_path / "grey.csv").points)
    colour = np.dstack([grey, 255 - grey, grey // 2])
    tifffile.imwrite(tmp_path / "colour.tif", colour, photometric="rgb")
    assert main(["detect", str(tmp_path / "colour.tif"), *run, str(tmp_path / "colour.csv")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_constant_image_says_nothing_stands_out_not_threshold_minus_inf(tmp_path, capsys):
    tifffile.imwrite(tmp_path / "flat.tif", np.full((40, 40), 5, np.float32))
    assert main(["detect", str(tmp_path / "flat.tif"), "--radius", "4", "--backend", "numpy",
                 "--out", str(tmp_path / "p.csv")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("0 nuclei (of 0 maxima, no maximum stands out)") and "inf" not in printed
    assert len(read_points_csv(tmp_path / "p.csv").points) == 0
