import subprocess
import sys

import numpy as np
import pytest

from ivote.cli import main


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "napari-ivote" in out and "backend:" in out


def test_demo_writes_outputs(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "backend:" in out
    centers = np.loadtxt(tmp_path / "demo" / "sample_2d_centers.csv", delimiter=",", skiprows=1)
    assert centers.shape[1] == 2 and len(centers) > 100
    assert (tmp_path / "demo" / "sample_3d.tif").is_file()


def test_installed_entry_point():
    result = subprocess.run([sys.executable, "-m", "ivote.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "demo" in result.stdout


def test_unknown_command_fails():
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
