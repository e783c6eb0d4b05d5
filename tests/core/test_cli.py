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
