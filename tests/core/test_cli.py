import subprocess
import sys

import numpy as np
import pytest
import tifffile

from ivote.cli import main


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "napari-ivote" in out and "backend:" in out


def test_demo_writes_outputs(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "backend:" in out
    demo = tmp_path / "demo"
    centers = np.loadtxt(demo / "sample_2d_centers.csv", delimiter=",", skiprows=1)
    assert centers.shape[1] == 2 and len(centers) > 50
    assert (demo / "sample_3d.tif").is_file()
    # the pipeline's outputs: detections near the true centres, one segment per nucleus
    from ivote.io import read_points_csv
    from ivote.metrics import match_labels, match_points

    found = read_points_csv(demo / "detect_sample_2d.csv")
    assert match_points(found.points, centers, tolerance=3.0, spacing=found.spacing).f1 >= 0.9
    labels = tifffile.imread(demo / "segment_sample_2d.tif")
    truth = tifffile.imread(demo / "sample_2d_labels.tif")
    assert match_labels(labels, truth.astype(np.int32)).f1 >= 0.85


def test_installed_entry_point():
    result = subprocess.run([sys.executable, "-m", "ivote.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "demo" in result.stdout


def test_unknown_command_fails():
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_bad_output_fails_before_any_work(tmp_path, capsys):
    image = tmp_path / "in.tif"
    tifffile.imwrite(image, np.zeros((32, 32), np.float32))
    assert main(["detect", str(image), "--radius", "4", "--out", str(tmp_path / "no" / "p.csv")]) == 2
    assert "output folder does not exist" in capsys.readouterr().err
    points = tmp_path / "p.csv"
    points.write_text("y,x\n5,5\n")
    assert main(["segment", str(image), "--points", str(points), "--radius", "4", "--out",
                 str(tmp_path / "labels.png")]) == 2
    assert "--out must end in .tif or .tiff" in capsys.readouterr().err


def test_backend_errors_are_one_line(monkeypatch, capsys):
    from ivote._backend import cupy_available

    if cupy_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.setenv("IVOTE_BACKEND", "cupy")
    assert main(["info"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ivote info: error:") and "no usable GPU" in err and "\n" not in err


def test_bad_feature_model_is_one_line(tmp_path, capsys):
    image = tmp_path / "in.tif"
    tifffile.imwrite(image, np.zeros((32, 32), np.float32))
    bogus = tmp_path / "model.npz"
    np.savez(bogus, data=np.array([object()], dtype=object))
    for model, message in ((bogus, "is not a napari-ivote ConvRBM model"), (tmp_path / "none.npz", "model file not found")):
        assert main(["detect", str(image), "--radius", "4", "--features", str(model), "--out", str(tmp_path / "p.csv")]) == 2
        assert message in capsys.readouterr().err
