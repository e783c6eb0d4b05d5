"""One rule, one code path, one answer: the Detect dock's Run finds what ``iterative_voting`` (and
``detect_frames`` for a time-lapse) finds with the same settings, on grey, RGB (H&E), 3D and time-lapse images.

The images have textured backgrounds, where the default rule raises the contrast floor: re-applying the rule from
the raised floor (what the dock once did) kept more maxima than the command line.
"""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")

import ivote  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
HEMATOXYLIN = np.array([0.65, 0.70, 0.29])


def _textured(shape, seed=2, amplitude=0.3):
    """Sparse nuclei on a smooth random texture (stroma-like): a contrast split the 'auto' rule acts on."""
    from scipy import ndimage as ndi

    sample = synthetic_nuclei(shape, radius=5.0, noise=0.02, seed=seed, n_nuclei=30 if len(shape) == 2 else 12)
    texture = ndi.gaussian_filter(np.random.default_rng(seed).normal(size=shape), 2.0)
    image = sample.image + amplitude * 0.3 * sample.image.max() * texture / texture.std()
    return image.astype(np.float32)


def _as_he(grey):
    """An H&E-like RGB image whose haematoxylin density is ``grey``."""
    density = 1.5 * (grey - grey.min()) / np.ptp(grey)
    return np.round(255 * np.exp(-density[..., None] * HEMATOXYLIN)).astype(np.uint8)


def _run(make_napari_viewer, qtbot, detect_widget, image, radius, **layer):
    viewer = make_napari_viewer()
    viewer.add_image(image, name="cells", **layer)
    widget = detect_widget(viewer)
    widget.radius.value = radius
    with qtbot.waitSignal(widget.finished_result, timeout=120_000):
        widget.run()
    return viewer.layers["nuclei: cells"]


@pytest.mark.parametrize("kind", ["grey", "rgb"])
def test_the_widgets_count_is_iterative_votings_in_2d(make_napari_viewer, qtbot, detect_widget, kind):
    grey = _textured((128, 128))
    image = grey if kind == "grey" else _as_he(grey)
    expected = ivote.detect.iterative_voting(image, radius=6.0, backend="numpy")
    assert expected.min_contrast > 3.0  # the texture raised the floor: the case the dock got wrong
    layer = _run(make_napari_viewer, qtbot, detect_widget, image, 6.0, rgb=kind == "rgb")
    assert len(layer.data) == len(expected)
    np.testing.assert_allclose(np.sort(layer.features["score"]), np.sort(expected.scores))


def test_the_widgets_count_is_iterative_votings_in_3d(make_napari_viewer, qtbot, detect_widget):
    sample = synthetic_nuclei((16, 48, 48), spacing=(2.0, 0.5, 0.5), radius=4.0, noise=0.05, seed=3)
    expected = ivote.detect.iterative_voting(sample.image, radius=4.0, spacing=sample.spacing, backend="numpy")
    layer = _run(make_napari_viewer, qtbot, detect_widget, sample.image, 4.0, scale=sample.spacing)
    assert len(expected) > 5 and len(layer.data) == len(expected)
    np.testing.assert_allclose(np.sort(layer.features["score"]), np.sort(expected.scores))


def test_the_widgets_count_is_detect_frames_on_a_timelapse(make_napari_viewer, qtbot, detect_widget):
    frames = np.stack([_textured((96, 96), seed=s) for s in (2, 4)])
    expected = ivote.detect_frames(frames, radius=6.0, backend="numpy")
    layer = _run(make_napari_viewer, qtbot, detect_widget, frames, 6.0, axis_labels=("t", "y", "x"))
    assert len(layer.data) == len(expected.points)
    np.testing.assert_array_equal(np.bincount(layer.data[:, 0].astype(int)),
                                  np.bincount(np.asarray(expected.points)[:, 0].astype(int)))
