"""Reading microscopy files: each layout written by the library users have, its axes, channel,
spacing and detections checked against the same image given as a plain array."""

import json

import numpy as np
import pytest
import tifffile

from ivote import AxesError, iterative_voting, open_image
from ivote.data import synthetic_nuclei
from ivote.io import read_image

SPACING = (0.5, 0.5)
RADIUS = 3.0  # micrometres: 6 pixels


@pytest.fixture(scope="module")
def nuclei():
    """A 2D nuclear stain (uint16), a second channel of noise, and its detections as a plain array."""
    sample = synthetic_nuclei((80, 80), radius=RADIUS, spacing=SPACING, seed=3)
    stain = (np.clip(sample.image, 0, 1.2) * 50000).astype(np.uint16)
    noise = np.random.default_rng(0).integers(0, 60000, stain.shape).astype(np.uint16)
    found = iterative_voting(stain, radius=RADIUS, spacing=SPACING, backend="numpy")
    assert len(found.points) >= 5
    return stain, noise, found


@pytest.fixture(scope="module")
def volume():
    sample = synthetic_nuclei((10, 40, 40), radius=3.0, spacing=(2.0, 0.5, 0.5), seed=5)
    stack = (np.clip(sample.image, 0, 1.2) * 50000).astype(np.uint16)
    found = iterative_voting(stack, radius=3.0, spacing=(2.0, 0.5, 0.5), backend="numpy")
    assert len(found.points) >= 3
    return stack, found


@pytest.fixture(scope="module")
def he_rgb():
    sample = synthetic_nuclei((80, 80), radius=6, seed=13)
    absorb = np.clip(sample.image, 0, 1)[..., None] * np.array([0.75, 0.8, 0.35])
    rgb = np.round(255 * (1 - absorb)).astype(np.uint8)
    found = iterative_voting(rgb, radius=6, backend="numpy")
    assert len(found.points) >= 5
    return rgb, found


def detect_file(path, radius=RADIUS, **read):
    array, spacing = read_image(path, **read)
    return iterative_voting(array, radius=radius, spacing=spacing, backend="numpy"), spacing


def assert_same(found, reference):
    np.testing.assert_array_equal(found.points, reference.points)
    np.testing.assert_array_equal(found.scores, reference.scores)


# ---------------------------------------------------------------- OME-TIFF, ImageJ


def test_ome_tiff_two_channels_in_nanometres(tmp_path, nuclei):
    stain, noise, reference = nuclei
    path = tmp_path / "cells.ome.tif"
    tifffile.imwrite(path, np.stack([noise, stain]), ome=True, photometric="minisblack",
                     metadata={"axes": "CYX", "PhysicalSizeX": 500, "PhysicalSizeXUnit": "nm",
                               "PhysicalSizeY": 500, "PhysicalSizeYUnit": "nm", "Channel": {"Name": ["GFP", "DAPI"]}})
    image = open_image(path)
    assert image.axes == "CYX" and image.spacing == pytest.approx(SPACING)
    assert image.channel_names == ("GFP", "DAPI") and image.axes_from == "OME metadata"
    with pytest.raises(AxesError, match=r"2 channels \(GFP, DAPI\).*--channel N \(0\.\.1\).*channel=N"):
        read_image(path)
    found, spacing = detect_file(path, channel=1)
    assert spacing == pytest.approx(SPACING)
    assert_same(found, reference)
    assert_same(detect_file(path, channel="dapi")[0], reference)
    with pytest.raises(AxesError, match="no channel named 'H3'"):
        read_image(path, channel="H3")
    with pytest.raises(AxesError, match="0..1"):
        read_image(path, channel=2)


def test_ome_tiff_zcyx_data_follow_their_axes(tmp_path):
    data = np.arange(3 * 2 * 5 * 6, dtype=np.uint16).reshape(3, 2, 5, 6)  # Z, C, Y, X: all values distinct
    tifffile.imwrite(tmp_path / "zc.ome.tif", data, ome=True, metadata={"axes": "ZCYX"})
    image = open_image(tmp_path / "zc.ome.tif")
    assert image.axes == "CZYX"
    np.testing.assert_array_equal(image.data.compute(), data.transpose(1, 0, 2, 3))
    np.testing.assert_array_equal(read_image(tmp_path / "zc.ome.tif", channel=1)[0], data[:, 1])


def test_imagej_hyperstack_zcyx_with_units(tmp_path, volume):
    stack, reference = volume
    data = np.stack([stack, stack[::-1]], axis=1)  # Z, C, Y, X
    path = tmp_path / "hyper.tif"
    tifffile.imwrite(path, data, imagej=True, resolution=(2.0, 2.0),
                     metadata={"axes": "ZCYX", "unit": "micron", "spacing": 2.0})
    image = open_image(path)
    assert image.axes == "CZYX" and image.axes_from == "ImageJ hyperstack"
    assert image.spacing == pytest.approx((2.0, 0.5, 0.5))
    found, spacing = detect_file(path, radius=3.0, channel=0)
    assert spacing == pytest.approx((2.0, 0.5, 0.5))
    assert_same(found, reference)


def test_imagej_time_lapse_hyperstack(tmp_path, volume):
    stack = volume[0]
    data = np.stack([stack[:4], stack[4:8], stack[2:6]])[:, :, None]  # T, Z, C, Y, X
    path = tmp_path / "movie.tif"
    tifffile.imwrite(path, data, imagej=True, resolution=(2.0, 2.0),
                     metadata={"axes": "TZCYX", "unit": "um", "spacing": 2.0, "finterval": 30.0})
    image = open_image(path)
    assert image.axes == "TZYX" and image.n_frames == 3 and image.time_interval == 30.0
    assert image.spacing == pytest.approx((2.0, 0.5, 0.5))
    array, spacing = read_image(path)
    np.testing.assert_array_equal(array, data[:, :, 0])


def test_imagej_cyx_is_two_channels_not_a_volume(tmp_path, nuclei):
    stain, noise, reference = nuclei
    path = tmp_path / "cyx.tif"
    tifffile.imwrite(path, np.stack([stain, noise]), imagej=True, resolution=(2.0, 2.0),
                     metadata={"axes": "CYX", "unit": "\\u00B5m"})
    assert open_image(path).axes == "CYX"
    assert_same(detect_file(path, channel=0)[0], reference)


def test_imagej_units_are_converted_and_missing_ones_are_not_guessed(tmp_path, nuclei):
    stain = nuclei[0]
    tifffile.imwrite(tmp_path / "nm.tif", stain, imagej=True, resolution=(1 / 500, 1 / 500), metadata={"unit": "nm"})
    assert open_image(tmp_path / "nm.tif").spacing == pytest.approx(SPACING)
    tifffile.imwrite(tmp_path / "px.tif", stain, imagej=True, resolution=(2.0, 2.0))
    assert read_image(tmp_path / "px.tif")[1] is None  # no unit: pixels, never micrometres


def test_plain_tiff_with_centimetre_resolution_and_inches_ignored(tmp_path, nuclei):
    stain = nuclei[0]
    tifffile.imwrite(tmp_path / "cm.tif", stain, resolution=(2e4, 2e4), resolutionunit="CENTIMETER")
    assert open_image(tmp_path / "cm.tif").spacing == pytest.approx(SPACING)
    tifffile.imwrite(tmp_path / "dpi.tif", stain, resolution=(72, 72), resolutionunit="INCH")
    assert open_image(tmp_path / "dpi.tif").spacing == (None, None)


def test_partial_spacing_names_the_fix(tmp_path, volume):
    stack = volume[0]
    path = tmp_path / "noz.ome.tif"
    tifffile.imwrite(path, stack, ome=True, metadata={"axes": "ZYX", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
    image = open_image(path)
    assert image.spacing == (None, 0.5, 0.5)
    with pytest.raises(ValueError, match="not of Z.*--spacing Z Y X"):
        image.known_spacing()


# ---------------------------------------------------------------- OME-Zarr


def _write_ome_zarr(path, data, version, axes, scale, zarr_api, unit="micrometer"):
    import zarr

    axes_meta = [{"name": a.lower(), "type": {"c": "channel", "t": "time"}.get(a.lower(), "space")} for a in axes]
    for entry in axes_meta:
        if entry["type"] == "space":
            entry["unit"] = unit
    datasets = []
    for level in range(2):
        factor = [1.0 if a in "CTZ" else 2.0**level for a in axes]
        datasets.append({"path": str(level), "coordinateTransformations": [
            {"type": "scale", "scale": [s * f for s, f in zip(scale, factor)]}]})
    multiscales = {"axes": axes_meta, "datasets": datasets, "name": "cells"}
    if version == "0.4":
        group = zarr.open_group(str(path), mode="w", **zarr_api.v2)
        group.attrs["multiscales"] = [{"version": "0.4", **multiscales}]
    else:
        zarr_api.need_v3()
        group = zarr.open_group(str(path), mode="w", zarr_format=3)
        group.attrs["ome"] = {"version": "0.5", "multiscales": [multiscales]}
    zarr_api.add(group, "0", data)
    half = data[..., ::2, ::2]
    zarr_api.add(group, "1", np.ascontiguousarray(half))


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_zarr_multiscale(tmp_path, nuclei, version, zarr_api):
    stain, noise, reference = nuclei
    path = tmp_path / f"cells_{version}.ome.zarr"
    _write_ome_zarr(path, np.stack([stain, noise]), version, "CYX", [1.0, 500.0, 500.0], zarr_api, unit="nanometer")
    image = open_image(path)
    assert image.axes == "CYX" and image.axes_from == "OME-Zarr metadata"
    assert image.spacing == pytest.approx(SPACING)
    assert type(image.data).__module__.startswith("dask")
    with pytest.raises(AxesError, match="--channel"):
        read_image(path)
    found, spacing = detect_file(path, channel=0)
    assert spacing == pytest.approx(SPACING)
    assert_same(found, reference)


def test_ome_zarr_volume_v05(tmp_path, volume, zarr_api):
    stack, reference = volume
    path = tmp_path / "vol.ome.zarr"
    _write_ome_zarr(path, stack, "0.5", "ZYX", [2.0, 0.5, 0.5], zarr_api)
    assert open_image(path).axes == "ZYX"
    found, spacing = detect_file(path, radius=3.0)
    assert spacing == pytest.approx((2.0, 0.5, 0.5))
    assert_same(found, reference)


# ---------------------------------------------------------------- RGB


def test_png_and_jpeg_rgb(tmp_path, he_rgb):
    import imageio.v3 as iio
    from PIL import Image

    rgb, reference = he_rgb
    Image.fromarray(rgb).save(tmp_path / "he.png")
    image = open_image(tmp_path / "he.png")
    assert image.axes == "YXS" and image.is_rgb and image.spacing == (None, None)
    array, spacing = read_image(tmp_path / "he.png")
    np.testing.assert_array_equal(array, rgb)
    assert spacing is None
    assert_same(iterative_voting(array, radius=6, backend="numpy"), reference)
    Image.fromarray(rgb).convert("RGBA").save(tmp_path / "he_alpha.png")
    assert open_image(tmp_path / "he_alpha.png").shape == (80, 80, 4)
    iio.imwrite(tmp_path / "he.jpg", rgb, quality=95)
    decoded = iio.imread(tmp_path / "he.jpg")  # lossy: the plain array is what JPEG decodes to
    array, _ = read_image(tmp_path / "he.jpg")
    np.testing.assert_array_equal(array, decoded)
    assert_same(iterative_voting(array, radius=6, backend="numpy"), iterative_voting(decoded, radius=6, backend="numpy"))


@pytest.mark.parametrize("kind", ["float 0..1", "float 0..255", "int32", "int64", "uint16 0..255"])
def test_rgb_any_dtype_is_scaled_by_its_range(tmp_path, he_rgb, kind):
    rgb, reference = he_rgb
    stored = {
        "float 0..1": rgb.astype(np.float64) / 255.0,
        "float 0..255": rgb.astype(np.float64),
        "int32": rgb.astype(np.int32),
        "int64": rgb.astype(np.int64),
        "uint16 0..255": rgb.astype(np.uint16),
    }[kind]
    path = tmp_path / "rgb.tif"
    tifffile.imwrite(path, stored, photometric="rgb")
    image = open_image(path)
    assert image.axes == "YXS" and image.axes_from == "TIFF photometric tag"
    array, _ = read_image(path)
    assert array.max() <= 1.0
    found = iterative_voting(array, radius=6, backend="numpy")
    assert len(found.points) == len(reference.points)
    np.testing.assert_allclose(found.points, reference.points)


# ---------------------------------------------------------------- ambiguity


@pytest.mark.parametrize("shape, reading", [((2, 40, 40), "CYX"), ((4, 40, 40), "CYX"), ((40, 40, 2), "YXC"),
                                           ((40, 40, 3), "YXC")])
def test_ambiguous_shapes_name_the_fix(tmp_path, shape, reading):
    path = tmp_path / "ambiguous.tif"
    tifffile.imwrite(path, np.zeros(shape, np.uint16), photometric="minisblack")
    with pytest.raises(AxesError) as error:
        open_image(path)
    message = str(error.value)
    assert str(shape) in message and reading in message and "--axes" in message and "axes='CYX'" in message
    assert "--channel" in message


def test_naming_the_axes_resolves_the_ambiguity(tmp_path, nuclei, volume):
    stain, noise, reference = nuclei
    tifffile.imwrite(tmp_path / "cyx.tif", np.stack([noise, stain]), photometric="minisblack")
    found, _ = detect_file(tmp_path / "cyx.tif", axes="CYX", channel=1)
    assert len(found.points)  # pixels: no spacing in the file
    np.testing.assert_array_equal(
        found.points, iterative_voting(stain, radius=RADIUS, backend="numpy").points)
    tifffile.imwrite(tmp_path / "yxc.tif", np.stack([noise, stain], axis=-1), photometric="minisblack")
    assert open_image(tmp_path / "yxc.tif", axes="YXC").axes == "CYX"
    np.testing.assert_array_equal(read_image(tmp_path / "yxc.tif", axes="YXC", channel=1)[0], stain)
    small = volume[0][:3]
    tifffile.imwrite(tmp_path / "zyx.tif", small, photometric="minisblack")
    assert open_image(tmp_path / "zyx.tif", axes="ZYX").axes == "ZYX"
    with pytest.raises(AxesError, match="names 2 axes"):
        open_image(tmp_path / "zyx.tif", axes="YX")
    with pytest.raises(AxesError, match="letters of TCZYXS"):
        open_image(tmp_path / "zyx.tif", axes="QYX")


def test_metadata_axes_win_over_shape_and_user_axes_warn(tmp_path, nuclei):
    stain, noise, _ = nuclei
    path = tmp_path / "two.ome.tif"
    tifffile.imwrite(path, np.stack([stain, noise]), ome=True, metadata={"axes": "CYX"})
    with pytest.warns(UserWarning, match="names the axes CYX; using ZYX"):
        assert open_image(path, axes="ZYX").axes == "ZYX"


def test_plain_stack_of_many_planes_is_z_and_single_channel_index(tmp_path, volume):
    stack, _ = volume
    tifffile.imwrite(tmp_path / "stack.tif", stack, photometric="minisblack")
    image = open_image(tmp_path / "stack.tif")
    assert image.axes == "ZYX" and image.axes_from == "shape"
    with pytest.raises(AxesError, match="one channel"):
        image.select_channel(1)
    assert image.select_channel(0).axes == "ZYX" and image.select_channel("0").axes == "ZYX"  # as the CLI gives it


def test_legacy_ivote_json_spacing(tmp_path, volume):
    stack, reference = volume
    small = stack[:3]
    tifffile.imwrite(tmp_path / "old.tif", small, photometric="minisblack", metadata={"spacing": [2.0, 0.5, 0.5]})
    assert json.loads(tifffile.TiffFile(tmp_path / "old.tif").pages[0].description)["spacing"] == [2.0, 0.5, 0.5]
    image = open_image(tmp_path / "old.tif")
    assert image.axes == "ZYX" and image.spacing == (2.0, 0.5, 0.5)


# ---------------------------------------------------------------- scenes


def test_scenes_of_an_ome_tiff(tmp_path, nuclei, volume):
    stain = nuclei[0]
    path = tmp_path / "plate.ome.tif"
    with tifffile.TiffWriter(path, ome=True) as tif:
        tif.write(stain, metadata={"axes": "YX", "Name": "A1", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
        tif.write(volume[0], metadata={"axes": "ZYX", "Name": "B2", "PhysicalSizeX": 0.25, "PhysicalSizeY": 0.25,
                                       "PhysicalSizeZ": 1.0})
    first = open_image(path)
    assert first.scenes == ("A1", "B2") and first.scene == "A1" and first.axes == "YX"
    second = open_image(path, scene="B2")
    assert second.axes == "ZYX" and second.spacing == (1.0, 0.25, 0.25)
    assert open_image(path, scene=1).scene == "B2"
    with pytest.raises(ValueError, match="scenes are A1, B2"):
        open_image(path, scene="C3")
    with pytest.raises(ValueError, match="scene must be 0..1"):
        open_image(path, scene=5)


def test_tifffile_fallback_reads_what_bioio_cannot(tmp_path, nuclei, monkeypatch):
    import bioio_tifffile

    stain = nuclei[0]
    tifffile.imwrite(tmp_path / "a.tif", stain)

    def broken(*args, **kwargs):
        raise RuntimeError("reader cannot read this")

    monkeypatch.setattr(bioio_tifffile, "Reader", broken)
    array, _ = read_image(tmp_path / "a.tif")
    np.testing.assert_array_equal(array, stain)


def test_unknown_and_missing_files(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ValueError, match="TIFF or PNG"):
        open_image(tmp_path / "a.txt")
    with pytest.raises(FileNotFoundError):
        open_image(tmp_path / "missing.tif")
    (tmp_path / "fake.czi").write_bytes(b"not a czi")
    with pytest.raises(ValueError, match=r"napari-ivote\[formats\]"):
        open_image(tmp_path / "fake.czi")


def test_scale_for_a_layer_without_one(tmp_path, volume):
    from ivote._files import scale_for_layer

    stack = volume[0]
    tifffile.imwrite(tmp_path / "ij.tif", stack[:, None], imagej=True, resolution=(4.0, 4.0),
                     metadata={"axes": "ZCYX", "unit": "um", "spacing": 2.0})
    assert scale_for_layer(tmp_path / "ij.tif", 3) == pytest.approx((2.0, 0.25, 0.25))
    assert scale_for_layer(tmp_path / "ij.tif", 2) is None  # not this layer's layout
    tifffile.imwrite(tmp_path / "plain.tif", stack[0])
    assert scale_for_layer(tmp_path / "plain.tif", 2) is None
    assert scale_for_layer(tmp_path / "missing.tif", 2) is None
