"""``ivote features fit/apply`` on small synthetic images."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

from ivote.cli import main
from ivote.data import synthetic_nuclei
from ivote.features import ConvRBM


@pytest.fixture
def image_path(tmp_path):
    sample = synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=4, seed=3)
    path = tmp_path / "nuclei.tif"
    tifffile.imwrite(path, sample.image, metadata={"spacing": [0.5, 0.5]})
    return path


def test_fit_then_apply(tmp_path, image_path, capsys):
    model_path = tmp_path / "model.npz"
    assert main(["features", "fit", str(image_path), str(image_path), "--filters", "3", "--size", "5",
                 "--stride", "2", "--epochs", "2", "--patch", "32", "--out", str(model_path)]) == 0
    model = ConvRBM.load(model_path)
    assert model.n_filters == 3 and model.filter_shape == (5, 5) and model.stride == 2
    assert model.hidden_extent == "valid"  # the default
    assert len(model.reconstruction_errors_) == 2
    same_path = tmp_path / "same.npz"
    assert main(["features", "fit", str(image_path), "--filters", "2", "--size", "5", "--epochs", "1",
                 "--hidden-extent", "same", "--quiet", "--out", str(same_path)]) == 0
    assert ConvRBM.load(same_path).hidden_extent == "same"
    out = tmp_path / "features.tif"
    assert main(["features", "apply", str(image_path), "--model", str(model_path), "--out", str(out)]) == 0
    with tifffile.TiffFile(out) as tif:
        assert tif.series[0].axes == "CYX"
        features = tif.asarray()
    assert features.shape == (3, 64, 64) and features.dtype == np.float32
    expected = model.transform(tifffile.imread(image_path))
    np.testing.assert_allclose(features, np.asarray(expected), rtol=1e-6, atol=1e-6)
    single = tmp_path / "detection.tif"
    assert main(["features", "apply", str(image_path), "--model", str(model_path), "--out", str(single),
                 "--detection-input"]) == 0
    assert tifffile.imread(single).shape == (64, 64)
    assert "epoch 2/2" in capsys.readouterr().out


def test_errors_are_one_line(tmp_path, image_path, capsys):
    assert main(["features", "fit", str(image_path), "--filters", "3", "--size", "5", "--out",
                 str(tmp_path / "model.txt")]) == 2
    assert "npz" in capsys.readouterr().err
    assert main(["features", "fit", str(image_path), "--filters", "3", "--size", "0", "--out",
                 str(tmp_path / "m.npz")]) == 2
    assert "--size" in capsys.readouterr().err
    assert main(["features", "apply", str(tmp_path / "missing.tif"), "--model", "m.npz", "--out",
                 str(tmp_path / "f.tif")]) == 2
