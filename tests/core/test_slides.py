"""Whole-slide H&E images: lazy tiled reading with the pixel size, and detection and
segmentation block by block equal to the in-memory result (truth: the in-memory call,
tifffile's own full read, the synthetic nuclei's centres)."""

from __future__ import annotations

import numpy as np
import pytest

tifffile = pytest.importorskip("tifffile")
pytest.importorskip("dask")

from ivote import iterative_voting, open_image  # noqa: E402
from ivote._slides import slide_levels, slide_spacing  # noqa: E402
from ivote.data._slide import he_colour, synthetic_he_tile, write_synthetic_slide  # noqa: E402
from ivote.detect import stain_vectors  # noqa: E402
from ivote.detect._colour_blocks import HematoxylinBlocks, slide_stain_vectors, slide_tissue, tissue_mask  # noqa: E402
from ivote.distributed import detect_chunked  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

RADIUS = 6


@pytest.fixture(scope="module")
def slide(tmp_path_factory):
    """A 1024 x 768 pyramidal RGB slide of four H&E patterns (a quarter of them glass), 0.5 um pixels."""
    path = tmp_path_factory.mktemp("slide") / "he.tif"
    return write_synthetic_slide(path, (1024, 768), tile=128, pattern=256, radius=RADIUS, glass_every=4,
                                 compression="zlib")


def test_tiled_pyramid_opens_lazily_at_level_zero_with_its_pixel_size(slide, monkeypatch):
    import ivote._slides

    monkeypatch.setattr(ivote._slides, "CHUNK", 256)
    image = open_image(slide)
    assert image.axes == "YXS" and image.shape == (1024, 768, 3)
    assert image.spacing == pytest.approx((0.5, 0.5))
    assert image.data.chunks[:2] == ((256,) * 4, (256,) * 3)  # whole tiles: a block reads only its own
    np.testing.assert_array_equal(np.asarray(image.data), tifffile.imread(slide))
    levels = slide_levels(slide)
    assert [level.shape for level in levels] == [(1024, 768, 3), (512, 384, 3), (256, 192, 3)]
    np.testing.assert_array_equal(levels[2].compute(), tifffile.imread(slide, level=2))
    mask = slide_tissue(image)  # from the smallest level: a quarter of the pattern tiles are glass
    assert mask.cell == 4 and mask.cells.shape == (256, 192) and 0.6 < mask.fraction < 0.95


def _write_svs(path, rgb, mpp):
    description = (f"Aperio Image Library v12.0.15\r\n{rgb.shape[1]}x{rgb.shape[0]} [0,0 {rgb.shape[1]}x{rgb.shape[0]}] "
                   f"(128x128) JPEG/RGB Q=90|AppMag = 20|MPP = {mpp}|Filename = test")
    with tifffile.TiffWriter(path) as tif:
        tif.write(rgb, tile=(128, 128), photometric="rgb", description=description, compression="zlib")
        tif.write(rgb[::4, ::4], photometric="rgb", description="Aperio Image Library v12.0.15\r\nthumbnail")
        tif.write(rgb[::2, ::2], tile=(128, 128), photometric="rgb", subfiletype=1,
                  description="Aperio Image Library v12.0.15\r\nlevel 1", compression="zlib")


def test_aperio_svs_gives_its_mpp_and_baseline(tmp_path):
    rgb, _ = synthetic_he_tile(256, seed=3)
    path = tmp_path / "slide.svs"
    _write_svs(path, rgb, 0.2520)
    assert slide_spacing(path) == {"Y": 0.252, "X": 0.252}
    image = open_image(path)
    assert image.axes == "YXS" and image.spacing == pytest.approx((0.252, 0.252))
    np.testing.assert_array_equal(np.asarray(image.data), rgb)


def test_pyramidal_ome_tiff_gives_its_physical_size(tmp_path):
    rgb, _ = synthetic_he_tile(256, seed=5)
    path = tmp_path / "slide.ome.tif"
    with tifffile.TiffWriter(path) as tif:
        tif.write(rgb, tile=(128, 128), photometric="rgb", subifds=1, metadata={
            "axes": "YXS", "PhysicalSizeX": 0.25, "PhysicalSizeY": 0.25})
        tif.write(rgb[::2, ::2], tile=(128, 128), photometric="rgb", subfiletype=1)
    image = open_image(path)
    assert image.axes == "YXS" and image.spacing == pytest.approx((0.25, 0.25))
    assert len(slide_levels(path)) == 2
    np.testing.assert_array_equal(np.asarray(image.data), rgb)


def _tasks_of(progress_calls) -> int:
    """Block tasks run (every pass's), from the last ``progress(done, total)``."""
    return progress_calls[-1][1] if progress_calls else 0


def test_block_by_block_under_a_small_memory_limit_equals_in_memory(slide):
    image = open_image(slide)
    rgb = np.asarray(image.data)
    whole = iterative_voting(rgb, radius=RADIUS, backend="numba")
    calls = []
    chunked = detect_chunked(image.data, RADIUS, memory_limit="48MB", backend="numba",
                             progress=lambda done, total: calls.append((done, total)))
    assert _tasks_of(calls) >= 8  # at least 4 blocks, each in at least two passes
    np.testing.assert_array_equal(chunked.points, whole.points)
    np.testing.assert_array_equal(chunked.scores, whole.scores)
    assert chunked.threshold == whole.threshold
    # and they are the nuclei: the slide repeats tiles whose true centres are known
    assert len(whole.points) > 300


def test_nuclei_found_are_the_true_ones():
    rgb, centres = synthetic_he_tile(384, radius=RADIUS, seed=2)
    chunked = detect_chunked(rgb, RADIUS, chunks=160, scheduler="sync", backend="numba")
    assert match_points(chunked.points, centres, tolerance=RADIUS / 2).f1 > 0.9


def test_stains_fitted_once_on_the_whole_slide(slide):
    image = open_image(slide)
    rgb = np.asarray(image.data)
    np.testing.assert_array_equal(slide_stain_vectors(image.data), stain_vectors(rgb))
    whole = iterative_voting(rgb, radius=RADIUS, stains="auto", backend="numba")
    chunked = detect_chunked(image.data, RADIUS, chunks=300, stains="auto", backend="numba")
    np.testing.assert_array_equal(chunked.points, whole.points)


def test_sixteen_bit_slide_uses_the_slide_white_not_the_block_maximum():
    rgb8, _ = synthetic_he_tile(320, radius=RADIUS, seed=7)
    rgb = rgb8.astype(np.uint16) * 257  # 0..65535
    whole = iterative_voting(rgb, radius=RADIUS, backend="numba")
    chunked = detect_chunked(rgb, RADIUS, chunks=120, scheduler="sync", backend="numba")
    np.testing.assert_array_equal(chunked.points, whole.points)


class _ReadLog:
    """An RGB array that records the regions read from it."""

    def __init__(self, rgb):
        self.rgb, self.shape, self.dtype, self.regions = rgb, rgb.shape, rgb.dtype, []

    def __getitem__(self, key):
        self.regions.append(key)
        return self.rgb[key]


def test_glass_is_skipped_and_the_cells_are_those_of_the_masked_slide_in_memory():
    tile, _ = synthetic_he_tile(256, radius=RADIUS, seed=1)
    glass = he_colour(np.zeros((256, 768)), glass=np.ones((256, 768), bool))
    rgb = np.concatenate([np.concatenate([tile, glass[:, :512]], axis=1), glass], axis=0)  # tissue top-left only
    mask = tissue_mask(rgb[::32, ::32], cell=32)
    assert 0.05 < mask.fraction < 0.5
    log = _ReadLog(rgb)
    view = HematoxylinBlocks(log, tissue=mask)
    reference = iterative_voting(view.whole(), radius=RADIUS, backend="numba")
    log.regions.clear()
    calls = []
    chunked = detect_chunked(log, RADIUS, chunks=128, tissue=mask, backend="numba", scheduler="sync",
                             progress=lambda done, total: calls.append((done, total)))
    np.testing.assert_array_equal(chunked.points, reference.points)
    assert len(reference.points) > 20
    far = [key for key in log.regions if key[0].start >= 400 and key[1].start >= 400]
    assert not far, "glass far from the tissue was read"
    assert calls[-1][0] == calls[-1][1] >= 2 * 6 * 4  # every block accounted for, detected or skipped


def test_cli_detects_a_slide_block_by_block_as_in_memory(slide, tmp_path):
    from ivote.cli import main

    assert main(["detect", str(slide), "--radius", "3", "--out", str(tmp_path / "memory.csv"), "-q"]) == 0
    assert main(["detect", str(slide), "--radius", "3", "--out", str(tmp_path / "blocks.csv"), "--memory-limit",
                 "64MB", "--tissue", "none", "-q"]) == 0
    assert (tmp_path / "memory.csv").read_text() == (tmp_path / "blocks.csv").read_text()


@pytest.fixture
def seeded_slide(tmp_path):
    """A small slide without glass, its cells detected: (path, the segment command's common options)."""
    from ivote.cli import main

    path = write_synthetic_slide(tmp_path / "small.tif", 384, tile=128, pattern=256, radius=RADIUS, glass_every=0,
                                 compression="zlib")
    points = tmp_path / "points.csv"
    assert main(["detect", str(path), "--radius", "3", "--out", str(points), "-q"]) == 0
    return path, ["--points", str(points), "--radius", "3", "--iterations", "40", "-q"]


def test_cli_segments_a_slide_block_by_block_as_in_memory(seeded_slide, tmp_path):
    from ivote.cli import main

    path, common = seeded_slide
    assert main(["segment", str(path), *common, "--out", str(tmp_path / "memory.tif")]) == 0
    assert main(["segment", str(path), *common, "--chunks", "192", "--out", str(tmp_path / "blocks.zarr")]) == 0
    memory = np.asarray(open_image(tmp_path / "memory.tif").data)
    blocks = np.asarray(open_image(tmp_path / "blocks.zarr").data)
    assert memory.max() > 50
    np.testing.assert_array_equal(blocks, memory)


def test_packed_zlib_tiles_equal_the_uncompressed_slide_and_the_tissue_is_an_ellipse(tmp_path):
    # each distinct tile is compressed once and repeated: the pixels must be those written uncompressed
    options = dict(tile=64, pattern=128, radius=RADIUS, glass_every=0, levels=4, tissue_fraction=0.3)
    packed = write_synthetic_slide(tmp_path / "zlib.tif", (1000, 1300), compression="zlib", **options)
    plain = write_synthetic_slide(tmp_path / "plain.tif", (1000, 1300), compression=None, **options)
    for level, (a, b) in enumerate(zip(slide_levels(packed), slide_levels(plain))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"level {level}")
    rgb = tifffile.imread(plain)
    tissue = np.linalg.norm(-np.log(np.maximum(rgb / 255.0, 1e-6)), axis=-1) >= 0.15
    assert 0.2 < tissue.mean() < 0.4  # about the fraction asked for, at the pattern tiles' grain
    assert not tissue[:64].any() and not tissue[:, :64].any()  # glass around the section
    assert tissue[400:600, 550:750].mean() > 0.2  # tissue at its centre
    with pytest.raises(ValueError, match="tissue_fraction"):
        write_synthetic_slide(tmp_path / "bad.tif", 256, tile=64, pattern=128, tissue_fraction=0.9)


def test_slide_blocks_are_read_again_rather_than_kept_by_default(slide, monkeypatch):
    # a slide's density kept for the second pass would grow with the slide (8 bytes per pixel)
    import ivote.distributed._detect as engine

    kept = []
    original = engine._keeps_blocks
    monkeypatch.setattr(engine, "_keeps_blocks", lambda *args: kept.append(original(*args)) or kept[-1])
    rgb = open_image(slide).data
    mask = slide_tissue(open_image(slide))
    found = detect_chunked(rgb, RADIUS, chunks=256, scheduler="sync", tissue=mask, backend="numpy")
    assert kept == [False]
    found_kept = detect_chunked(rgb, RADIUS, chunks=256, scheduler="sync", tissue=mask, backend="numpy",
                                cache_bytes=2**30)
    assert kept == [False, True]
    np.testing.assert_array_equal(found.points, found_kept.points)
    grey = np.asarray(HematoxylinBlocks(rgb, tissue=mask).whole())
    import zarr

    store = zarr.array(grey, chunks=(256, 256))  # in memory, under Zarr 3 and Zarr 2 alike
    detect_chunked(store, RADIUS, chunks=256, scheduler="sync", backend="numpy")
    assert kept[-1] is True  # a grey lazy array that fits is still read once


def _features_by_label(path) -> dict:
    import json

    features = json.loads(path.read_text())["features"]
    return {f["properties"]["measurements"]["label"]: f for f in features}


def test_cli_segments_a_slide_block_by_block_to_geojson_as_in_memory(seeded_slide, tmp_path, monkeypatch):
    # the outlines streamed band by band from the labels' store are the in-memory export's, up to order
    import ivote.export._bands as bands
    from ivote.cli import main

    path, common = seeded_slide
    assert main(["segment", str(path), *common, "--out", str(tmp_path / "memory.geojson")]) == 0
    monkeypatch.setattr(bands, "_BAND_BYTES", 64 * 384 * 4)  # bands of 64 rows (the margin of 512 below each)
    monkeypatch.setattr(bands, "DEFAULT_MARGIN", 32)
    seen = []
    original = bands.label_batches
    monkeypatch.setattr(bands, "label_batches", lambda *a, **k: (seen.append(b) or b for b in original(
        *a, **dict(k, margin=32))))
    assert main(["segment", str(path), *common, "--chunks", "192", "--memory-limit", "64MB",
                 "--out", str(tmp_path / "blocks.geojson")]) == 0
    assert len(seen) >= 4  # several bands, each outlining the labels whose top row it holds
    memory, blocks = _features_by_label(tmp_path / "memory.geojson"), _features_by_label(tmp_path / "blocks.geojson")
    assert len(memory) > 50 and sorted(blocks) == sorted(memory)
    for label, feature in memory.items():
        assert blocks[label]["geometry"] == feature["geometry"], label
        assert blocks[label]["properties"]["objectType"] == "detection"
        got, want = blocks[label]["properties"]["measurements"], feature["properties"]["measurements"]
        assert sorted(got) == sorted(want)
        np.testing.assert_allclose([got[k] for k in sorted(want)], [want[k] for k in sorted(want)], rtol=1e-9)


def test_cli_segment_block_by_block_refuses_outlines_of_a_volume(tmp_path, capsys):
    from ivote.cli import main
    from ivote.data import synthetic_nuclei

    volume, *_ = synthetic_nuclei((16, 48, 48), radius=4, seed=0)
    tifffile.imwrite(tmp_path / "vol.tif", volume.astype(np.float32), imagej=True, metadata={"axes": "ZYX"})
    (tmp_path / "p.csv").write_text("z,y,x\n8,24,24\n")
    assert main(["segment", str(tmp_path / "vol.tif"), "--points", str(tmp_path / "p.csv"), "--radius", "4",
                 "--chunks", "24", "--out", str(tmp_path / "o.geojson"), "-q"]) == 2
    assert "block by block takes a 2D image" in capsys.readouterr().err
    assert not (tmp_path / "o.geojson").exists()
