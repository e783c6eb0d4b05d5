"""The napari part of issue 14: previews of lazy layers (Dask, multiscale) read only the visible region at full
resolution; "Run on whole volume" runs the chunked engine in the background with progress and cancel."""

from __future__ import annotations

import time

import numpy as np
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pytestqt")
da = pytest.importorskip("dask.array")

from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

pytestmark = [pytest.mark.napari, pytest.mark.usefixtures("numpy_backend")]
TIMEOUT_MS = 60_000


class CountingArray:
    """An array that records every region read from it (what Dask or napari asks for)."""

    def __init__(self, array):
        self.array = array
        self.shape, self.dtype, self.ndim, self.size = array.shape, array.dtype, array.ndim, array.size
        self.reads: list[tuple[slice, ...]] = []

    def __getitem__(self, key):
        part = self.array[key]
        if part.size:
            key = key if isinstance(key, tuple) else (key,)
            self.reads.append(tuple(slice(*k.indices(n)[:2]) if isinstance(k, slice) else slice(k, k + 1)
                                    for k, n in zip(key, self.shape)))
        return part

    def __array__(self, dtype=None, copy=None):
        self.reads.append(tuple(slice(0, n) for n in self.shape))
        return self.array if dtype is None else self.array.astype(dtype)

    def voxels_read(self) -> int:
        return sum(int(np.prod([s.stop - s.start for s in read])) for read in self.reads)


def _tiled_volume(nuclei_3d, tiles=4):
    sample, _ = nuclei_3d  # 16 x 64 x 64 at (2, 0.5, 0.5) µm
    volume = np.tile(sample.image, (1, tiles, tiles)).astype(np.float32)
    centres = np.concatenate([sample.centers + [0, 64 * i, 64 * j] for i in range(tiles) for j in range(tiles)])
    return volume, centres, sample


def _zoom_on(viewer, qtbot, layer, centre_world, zoom, smaller_than):
    """Show the canvas zoomed on ``centre_world`` until the visible region is smaller than ``smaller_than`` pixels."""
    from ivote.napari._detect_layers import camera_of, canvas_size, visible_pixels

    viewer.window._qt_window.show()
    zooms = [zoom]

    def zoomed():
        # napari < 0.9: the view is reset when the window is first shown, and the docks may leave the canvas
        # no width in a small window; the camera is set again, and closer, until the region is small enough
        if 0 in canvas_size(viewer):
            viewer.window._qt_window.resize(1600, 1000)
        camera_of(viewer).center = centre_world
        camera_of(viewer).zoom = zooms[-1]
        view = visible_pixels(viewer, layer)
        small = view is not None and np.all(view[1] > view[0]) and np.all(view[1] - view[0] < smaller_than)
        if view is not None and not small:
            zooms.append(zooms[-1] * 1.5)
        return small

    qtbot.waitUntil(zoomed, timeout=5000)
    qtbot.wait(100)  # napari's own reads of the displayed plane happen now, before ours are counted
    plane = np.array((layer.data[0] if layer.multiscale else layer.data).shape[-2:])
    return np.clip(visible_pixels(viewer, layer), 0, plane - 1)


def _within(read, low, high):
    return all(s.start >= lo and s.stop <= hi + 1 for s, lo, hi in zip(read, low, high))


def test_preview_of_a_dask_volume_reads_the_slab_of_the_visible_region_only(make_napari_viewer, detect_widget,
                                                                           nuclei_3d, qtbot, monkeypatch):
    from ivote.napari import _detect_preview

    monkeypatch.setattr(_detect_preview, "preview_plane_budget", lambda: None)  # as on a GPU or with Numba
    volume, centres, sample = _tiled_volume(nuclei_3d)
    source = CountingArray(volume)
    viewer = make_napari_viewer()
    layer = viewer.add_image(da.from_array(source, chunks=(4, 32, 32)), name="vol", scale=sample.spacing,
                             units=("um",) * 3, contrast_limits=(0.0, 1.0))
    widget = detect_widget(viewer)
    widget.radius.value = sample.radius
    viewer.dims.set_point(0, 8 * sample.spacing[0])
    view = _zoom_on(viewer, qtbot, layer, (16.0, 40.0, 60.0), zoom=8.0, smaller_than=128)  # of a 256 x 256 plane
    source.reads.clear()
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS):
        widget.preview()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    half = int(np.ceil(sample.radius / sample.spacing[0])) + 1
    chunk = np.array([4, 32, 32])
    low = (np.array([8 - half, *view[0]]) // chunk) * chunk  # whole chunks: Dask reads chunk by chunk
    high = (np.array([8 + half, *view[1]]) // chunk + 1) * chunk - 1
    assert source.reads and all(_within(read, low, high) for read in source.reads)
    assert source.voxels_read() < 0.15 * volume.size
    points = viewer.layers["nuclei (preview): vol"].data
    assert len(points) and np.all((points[:, 1:] >= view[0] - 1) & (points[:, 1:] <= view[1] + 1))
    seen = centres[np.all((centres[:, 1:] >= view[0] + 4) & (centres[:, 1:] <= view[1] - 4), axis=1)
                   & (np.abs(centres[:, 0] - 8) <= half - 1)]
    assert match_points(points, seen, tolerance=4).recall >= 0.8
    assert not widget.volume.native.isHidden()  # a lazy layer is offered "Run on whole volume"


def test_preview_of_a_multiscale_image_reads_the_visible_region_at_full_resolution(make_napari_viewer, detect_widget,
                                                                                   qtbot, monkeypatch):
    from ivote.napari import _detect_preview

    monkeypatch.setattr(_detect_preview, "preview_plane_budget", lambda: None)
    sample = synthetic_nuclei((128, 128), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=5)
    full = np.tile(sample.image, (8, 8)).astype(np.float32)  # 1024 x 1024
    source = CountingArray(full)
    viewer = make_napari_viewer()
    layer = viewer.add_image([source, full[::2, ::2], full[::4, ::4]], multiscale=True, name="slide",
                             scale=sample.spacing, units=("um", "um"), contrast_limits=(0.0, 1.0))
    widget = detect_widget(viewer)
    widget.radius.value = sample.radius
    view = _zoom_on(viewer, qtbot, layer, (100.0, 150.0), zoom=8.0, smaller_than=256)  # of 1024 x 1024
    source.reads.clear()
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS) as blocker:
        widget.preview()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    assert blocker.args[0].window_shape is not None
    assert source.reads and all(_within(read, view[0], view[1]) for read in source.reads)
    assert source.voxels_read() <= 1.1 * np.prod(view[1] - view[0] + 1)  # the level-0 pixels on screen, once
    points = viewer.layers["nuclei (preview): slide"].data
    centres = np.concatenate([sample.centers + [128 * i, 128 * j] for i in range(8) for j in range(8)])
    seen = centres[np.all((centres >= view[0] + 4) & (centres <= view[1] - 4), axis=1)]
    assert match_points(points, seen, tolerance=4).recall >= 0.8


# -- Run on whole volume (ivote.distributed.detect_chunked, built by the chunk-detect work) ---------------------------
def _has_chunked_engine() -> bool:
    try:
        from ivote.distributed import detect_chunked  # noqa: F401
    except ImportError:
        return False
    return True


needs_engine = pytest.mark.skipif(not _has_chunked_engine(), reason="ivote.distributed has no detect_chunked yet")


@pytest.fixture
def chunked_engine():
    import ivote.distributed

    return ivote.distributed


@needs_engine
def test_run_on_whole_volume_is_the_in_memory_result_with_progress(make_napari_viewer, detect_widget, nuclei_3d,
                                                                   qtbot, chunked_engine):
    import ivote

    volume, centres, sample = _tiled_volume(nuclei_3d, tiles=2)
    source = CountingArray(volume)
    viewer = make_napari_viewer()
    layer = viewer.add_image(da.from_array(source, chunks=(8, 64, 64)), name="vol", scale=sample.spacing,
                             translate=(-8.0, 4.0, 100.0), units=("um",) * 3, contrast_limits=(0.0, 1.0))
    widget = detect_widget(viewer)
    widget.radius.value = sample.radius
    assert not widget.volume.native.isHidden()
    seen, streamed = [], []

    def watch_running(event):  # the provisional cells of each finished block, before the final layer
        if event.value.name == "nuclei (running): vol":
            running = event.value
            np.testing.assert_allclose(running.translate, layer.translate)
            streamed.append(len(running.data))
            running.events.data.connect(lambda _: streamed.append(len(running.data)))
            assert "nuclei: vol" not in viewer.layers

    viewer.layers.events.inserted.connect(watch_running)
    widget.volume.attach()  # a fresh runner whose jobs we can watch
    with qtbot.waitSignal(widget.finished_result, timeout=TIMEOUT_MS):
        widget.volume.run(chunks=(16, 64, 64))
        job = widget.volume.runner.job
        job.progress.events.value.connect(lambda event: seen.append(event.value))
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    found = viewer.layers["nuclei: vol"]
    expected = ivote.iterative_voting(volume, radius=sample.radius, spacing=sample.spacing, threshold="auto",
                                      backend="numpy")  # the widget's threshold
    order = lambda a: a[np.lexsort(np.asarray(a).T[::-1])]  # noqa: E731
    np.testing.assert_allclose(order(found.data), order(expected.points))
    np.testing.assert_allclose(found.translate, layer.translate)
    assert match_points(found.data, centres, tolerance=4).f1 >= 0.9
    # the activity dock's bar went to the end (its value handler runs processEvents, so a later report can be
    # handled inside an earlier one's: the values this listener sees need not come in order)
    assert job.progress.n == job.progress.total == 2 * 4 and max(seen) == 2 * 4  # 2 passes x 4 blocks
    # points streamed in block by block (4 blocks), at least every final cell, and gave way to the final layer
    assert len(streamed) >= 2 and streamed == sorted(streamed) and streamed[-1] >= len(found.data)
    assert "nuclei (running): vol" not in viewer.layers


@needs_engine
def test_run_on_whole_volume_cancels_promptly_and_adds_nothing(make_napari_viewer, detect_widget, nuclei_3d, qtbot,
                                                               chunked_engine, monkeypatch):
    volume, _, sample = _tiled_volume(nuclei_3d, tiles=2)
    real, blocks = chunked_engine.detect_chunked, []

    def slow(image, radius, *, progress=None, **kwargs):
        def slowed(done, total):
            blocks.append(done)
            time.sleep(0.2)
            progress(done, total)

        return real(image, radius, progress=slowed, **kwargs)

    monkeypatch.setattr(chunked_engine, "detect_chunked", slow)
    viewer = make_napari_viewer()
    viewer.add_image(da.from_array(volume, chunks=(8, 32, 32)), name="vol", scale=sample.spacing,
                     units=("um",) * 3, contrast_limits=(0.0, 1.0))
    widget = detect_widget(viewer)
    widget.radius.value = sample.radius
    widget.volume.run(chunks=(8, 32, 32))
    qtbot.waitUntil(lambda: len(blocks) >= 2, timeout=TIMEOUT_MS)
    widget.cancel()
    start = time.perf_counter()
    qtbot.waitUntil(lambda: not widget.busy, timeout=TIMEOUT_MS)
    assert time.perf_counter() - start < 5.0
    assert "nuclei: vol" not in viewer.layers and len(blocks) < 3 * 16
    qtbot.wait(50)  # queued block results must not bring the provisional layer back
    assert "nuclei (running): vol" not in viewer.layers


def test_only_lazy_layers_are_offered_run_on_whole_volume(make_napari_viewer, detect_widget):
    viewer = make_napari_viewer()
    in_memory = viewer.add_image(np.random.default_rng(0).random((48, 48)), name="in memory")
    widget = detect_widget(viewer)
    assert widget.image.value is in_memory and widget.volume.native.isHidden()
    lazy = viewer.add_image(da.random.random((48, 48), chunks=16), name="lazy", contrast_limits=(0, 1))
    widget.image.value = lazy
    assert not widget.volume.native.isHidden()
    rgb = viewer.add_image(da.zeros((48, 48, 3), dtype=np.uint8, chunks=16), name="rgb", rgb=True)
    widget.image.value = rgb
    assert not widget.volume.native.isHidden()  # RGB: H&E, block by block (tests/napari/test_slide_layer.py)


def test_choosing_a_dask_volume_to_count_reads_a_few_chunks_for_its_otsu_threshold(make_napari_viewer, nuclei_3d,
                                                                                 qtbot):
    """Label and count sets its threshold to Otsu's when a layer is chosen: on a lazy volume it reads a bounded
    sample of whole chunks (ivote.napari._layer_sample), not the volume, and the threshold is the volume's."""
    from skimage.filters import threshold_otsu

    from ivote.napari._components_widget import LabelCountWidget
    from ivote.napari._layer_sample import MAX_SAMPLE

    volume = np.tile(_tiled_volume(nuclei_3d)[0], (4, 1, 1))  # 64 x 256 x 256: 4 M voxels
    source = CountingArray(volume)
    viewer = make_napari_viewer()
    viewer.add_image(da.from_array(source, chunks=(16, 64, 64)), name="vol", scale=nuclei_3d[0].spacing)
    qtbot.wait(100)  # napari's own reads of the displayed plane
    source.reads.clear()
    widget = LabelCountWidget(viewer)
    assert widget.layer.value is viewer.layers["vol"]
    assert 0 < source.voxels_read() <= MAX_SAMPLE <= volume.size / 4
    expected = threshold_otsu(volume)
    assert abs(widget.threshold.value - expected) < 0.05 * np.ptp(volume), (widget.threshold.value, expected)


def test_layer_sample_is_bounded_for_every_kind_of_array(tmp_path):
    from ivote.napari._layer_sample import layer_sample

    zarr = pytest.importorskip("zarr")
    image = np.arange(300 * 400, dtype=np.float32).reshape(300, 400)
    stored = zarr.open_array(str(tmp_path / "a.zarr"), mode="w", shape=image.shape, chunks=(50, 50), dtype="f4")
    stored[:] = image
    for data in (image, da.from_array(image, chunks=(64, 100)), stored):
        sample = layer_sample(data, max_elements=30_000)
        assert 6_000 <= sample.size <= 30_000 and np.isin(sample, image).all()
        assert sample.min() < 0.1 * image.max() and sample.max() > 0.9 * image.max()  # spread over the image
    np.testing.assert_array_equal(layer_sample(image, max_elements=image.size), image)
    pyramid = [image, image[::2, ::2], image[::4, ::4]]
    np.testing.assert_array_equal(layer_sample(pyramid, multiscale=True, max_elements=10_000), image[::4, ::4])
