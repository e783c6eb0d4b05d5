"""Whole slides in napari: SVS and pyramidal OME-TIFF open as a multiscale RGB layer with their pixel size
(truth: the pyramid tifffile reads), and "Run on whole volume" on the slide streams its nuclei in and ends
with the cells of the in-memory detection of the same signal (the slide's hematoxylin density, glass at 0)."""

from __future__ import annotations

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")
tifffile = pytest.importorskip("tifffile")

from ivote.data._slide import synthetic_he_tile, write_synthetic_slide  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 120_000


def _write_svs(path, rgb, mpp):
    height, width = rgb.shape[:2]
    head = f"Aperio Image Library v12.0.15\r\n{width}x{height} [0,0 {width}x{height}] (128x128) JPEG/RGB Q=90"
    with tifffile.TiffWriter(path) as tif:
        tif.write(rgb, tile=(128, 128), photometric="rgb", description=f"{head}|AppMag = 20|MPP = {mpp}",
                  compression="zlib")
        tif.write(rgb[::4, ::4], photometric="rgb", description=f"{head}\r\nthumbnail")
        tif.write(rgb[::2, ::2], tile=(128, 128), photometric="rgb", subfiletype=1, description=head,
                  compression="zlib")


def test_svs_opens_as_a_multiscale_layer_with_its_mpp(make_napari_viewer, tmp_path):
    rgb, _ = synthetic_he_tile(512, seed=1)
    path = tmp_path / "slide.svs"
    _write_svs(path, rgb, 0.25)
    viewer = make_napari_viewer()
    (layer,) = viewer.open(str(path), plugin="napari-ivote")
    assert layer.multiscale and layer.rgb and len(layer.data) == 2
    assert [tuple(level.shape) for level in layer.data] == [(512, 512, 3), (256, 256, 3)]
    np.testing.assert_allclose(layer.scale, (0.25, 0.25))
    np.testing.assert_array_equal(np.asarray(layer.data[0]), rgb)


def test_pyramidal_ome_tiff_opens_as_a_multiscale_layer(make_napari_viewer, tmp_path):
    rgb, _ = synthetic_he_tile(256, seed=2)
    path = tmp_path / "slide.ome.tif"
    with tifffile.TiffWriter(path) as tif:
        tif.write(rgb, tile=(128, 128), photometric="rgb", subifds=1,
                  metadata={"axes": "YXS", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
        tif.write(rgb[::2, ::2], tile=(128, 128), photometric="rgb", subfiletype=1)
    viewer = make_napari_viewer()
    (layer,) = viewer.open(str(path), plugin="napari-ivote")
    assert layer.multiscale and layer.rgb and len(layer.data) == 2
    np.testing.assert_allclose(layer.scale, (0.5, 0.5))
    np.testing.assert_array_equal(np.asarray(layer.data[1]), tifffile.imread(path, level=1))


def test_run_on_whole_slide_streams_the_in_memory_cells(make_napari_viewer, detect_widget, qtbot, tmp_path):
    import ivote
    from ivote.napari._slide_reader import slide_signal

    path = write_synthetic_slide(tmp_path / "he.tif", 384, tile=128, pattern=256, radius=5, glass_every=2,
                                 levels=2, compression="zlib")
    viewer = make_napari_viewer()
    layer = viewer.add_image([level for level in ivote._slides.slide_levels(path)], rgb=True, name="slide",
                             scale=(0.5, 0.5), multiscale=True)
    widget = detect_widget(viewer)
    widget.image.value = layer
    widget.radius.value = 2.5  # micrometres: 5 pixels
    assert widget.polarity.value == "dark"  # brightfield RGB; the density it is read as has bright nuclei
    assert not widget.volume.native.isHidden()
    streamed = []

    def watch_running(event):
        if event.value.name == "nuclei (running): slide":
            streamed.append(len(event.value.data))
            event.value.events.data.connect(lambda _: streamed.append(len(event.value.data)))

    viewer.layers.events.inserted.connect(watch_running)
    widget.volume.attach()
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS):
        widget.volume.run(chunks=(192, 192))
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    found = viewer.layers["nuclei: slide"]
    signal = slide_signal(layer)
    assert signal.tissue is not None and 0.2 < signal.tissue.fraction < 1.0  # from the smallest level
    expected = ivote.iterative_voting(signal.whole(), radius=2.5, spacing=(0.5, 0.5), backend="numpy")
    order = lambda a: a[np.lexsort(np.asarray(a).T[::-1])]  # noqa: E731
    assert len(expected.points) > 50
    np.testing.assert_allclose(order(found.data), order(expected.points))
    assert streamed and max(streamed) >= len(found.data)
    assert "nuclei (running): slide" not in viewer.layers
