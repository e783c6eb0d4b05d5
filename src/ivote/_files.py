"""Microscopy files in and out: named axes, channels, time, scenes and pixel sizes.

Every entry point (``ivote.open_image``, ``ivote.io.read_image``, the command
line, the napari reader) reads images here. The file's own metadata names the
axes: OME (OME-TIFF, OME-Zarr), ImageJ hyperstacks, the TIFF photometric tag
and PNG/JPEG colour types, the vendor formats through their bioio readers.
Where the metadata names none and the shape is ambiguous, an :class:`AxesError`
says how to name them (``axes=``/``--axes``); nothing is guessed from the shape
except one documented rule: a plain stack of more than 4 planes of more than
4 x 4 pixels is a z stack.

Axes are letters of ``TCZYXS``: time, channel, z, y, x and samples (RGB/RGBA).
Pixel sizes are converted to micrometres whatever unit the file uses.
Data stay lazy (a Dask array) until a caller computes them, so a chunked
engine can work on an :class:`ImageFile` directly.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from ._slides import SLIDE_SUFFIXES, is_tiled, slide_levels, slide_spacing
from ._typing import ArrayLike
from ._units import to_micrometres

__all__ = [
    "AxesError",
    "ImageFile",
    "list_scenes",
    "open_image",
    "read_for_detection",
    "rgb_to_unit_range",
    "adopt_file_scale",
    "scale_for_layer",
    "to_micrometres",
    "write_image",
]

CANONICAL = "TCZYXS"
TIFF_SUFFIXES = (".tif", ".tiff", ".btf", ".tf8")
PLAIN_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
VENDOR_SUFFIXES = (".czi", ".nd2", ".lif")
_MIN_PLAIN_PLANES = 4  # a plain stack of more planes than this (and no metadata) is read as Z

class AxesError(ValueError):
    """The file does not say what its axes are (or which channel holds the nuclei)."""


@dataclass(frozen=True)
class ImageFile:
    """An image opened from a file: lazy data with named axes and pixel sizes.

    Axes are in canonical order (a subset of ``TCZYXS``), singleton T, C and Z
    axes dropped. ``spacing`` holds one size in micrometres per spatial axis
    (``Z, Y, X`` or ``Y, X``), None where the file gives none.
    """

    data: object
    """Dask array (lazy), one dimension per letter of ``axes``."""
    axes: str
    spacing: tuple
    path: str = ""
    scene: str | None = None
    scenes: tuple = ()
    channel_names: tuple | None = None
    axes_from: str = ""
    """Where the axes came from: 'OME metadata', 'ImageJ hyperstack', 'axes=' ..."""
    time_interval: float | None = None
    origin: tuple | None = None
    """World position of the first pixel in micrometres, one per spatial axis (a napari layer's
    translate): from an OME-Zarr ``translation``, or the Plane positions of an OME-TIFF that
    :func:`write_image` wrote (a microscope's Plane positions are stage positions and are not read:
    :data:`ORIGIN_NAMESPACE`); None when the file gives none."""

    @property
    def shape(self) -> tuple:
        return tuple(int(n) for n in self.data.shape)

    @property
    def spatial_axes(self) -> str:
        return "".join(a for a in self.axes if a in "ZYX")

    @property
    def is_rgb(self) -> bool:
        return "S" in self.axes

    @property
    def n_frames(self) -> int:
        return self.shape[self.axes.index("T")] if "T" in self.axes else 1

    def known_spacing(self) -> tuple | None:
        """The spacing when the file gives every spatial axis, None when it gives none.

        Raises
        ------
        ValueError
            When the file gives some axes' pixel sizes but not all (typically z).
        """
        if all(s is None for s in self.spacing):
            return None
        missing = [a for a, s in zip(self.spatial_axes, self.spacing) if s is None]
        if missing:
            given = ", ".join(f"{a} {s:g} um" for a, s in zip(self.spatial_axes, self.spacing) if s is not None)
            raise ValueError(
                f"{Path(self.path).name} gives the pixel size of {given} but not of {', '.join(missing)}; "
                f"give all of them with --spacing {' '.join(self.spatial_axes)} (spacing= in Python)"
            )
        return tuple(float(s) for s in self.spacing)

    def select_channel(self, channel: int | str | None = None) -> "ImageFile":
        """The nuclear stain: axes ``[T][Z]YX`` or ``[T]YXS`` (RGB), channel chosen.

        ``channel`` is an index or a channel name; it is needed when the file has
        more than one channel. For RGB(A) it picks one sample instead of the
        colour (H&E) reading.
        """
        data, axes = self.data, self.axes
        names = self.channel_names
        if isinstance(channel, str) and channel.strip().isdigit():
            channel = int(channel)
        if "C" in axes:
            n = data.shape[axes.index("C")]
            if channel is None:
                listed = f" ({', '.join(map(str, names))})" if names and len(names) == n else ""
                raise AxesError(
                    f"{self._name()} has {n} channels{listed}: choose the nuclear stain with --channel N "
                    f"(0..{n - 1}) on the command line, channel=N in Python"
                )
            index = _channel_index(channel, n, names, self._name())
            data = _take(data, axes.index("C"), index)
            axes = axes.replace("C", "")
        elif "S" in axes and channel is not None:
            n = data.shape[axes.index("S")]
            index = _channel_index(channel, n, None, self._name())
            data = _take(data, axes.index("S"), index)
            axes = axes.replace("S", "")
        elif channel is not None and not (isinstance(channel, (int, np.integer)) and int(channel) == 0):
            raise AxesError(
                f"{self._name()} has one channel (axes {axes}, shape {self.shape}); --channel/channel= "
                f"can only be 0 here (if an axis holds channels, name it C with --axes)"
            )
        if "S" in axes and data.shape[axes.index("S")] not in (3, 4):
            raise AxesError(f"{self._name()}: {data.shape[axes.index('S')]} samples per pixel is not RGB(A); "
                            f"pick one with --channel N")
        if "S" in axes and "Z" in axes:
            raise AxesError(f"{self._name()}: RGB z stacks (axes {axes}) are not supported; pick one colour with --channel N")
        return replace(self, data=data, axes=axes, channel_names=None)

    def _name(self) -> str:
        return Path(self.path).name if self.path else "the image"


def _take(data, axis: int, index: int):
    return data[(slice(None),) * axis + (index,)]


def _channel_index(channel, n: int, names, filename: str) -> int:
    if isinstance(channel, str) and not channel.strip().lstrip("-").isdigit():
        lowered = [str(c).lower() for c in (names or ())]
        if channel.lower() in lowered:
            return lowered.index(channel.lower())
        listed = ", ".join(map(str, names)) if names else "none"
        raise AxesError(f"{filename} has no channel named {channel!r} (channels: {listed}); give --channel N (0..{n - 1})")
    try:
        index = int(channel)
    except (TypeError, ValueError):
        raise AxesError(f"channel must be an integer 0..{n - 1} or a channel name; got {channel!r}") from None
    if isinstance(channel, bool) or not 0 <= index < n:
        raise AxesError(f"channel must be an integer 0..{n - 1} for {filename} ({n} channels); got {channel!r}")
    return index


def rgb_to_unit_range(rgb):
    """RGB(A) scaled by its real range for the colour transform.

    uint8 is returned as it is (the transform divides it by 255); any other
    dtype becomes float64 divided by the smallest of 1, 255 and 65535 that is
    at least its maximum (float 0..1, float or integers 0..255 or 0..65535),
    else by its maximum.

    >>> rgb_to_unit_range(np.array([[[0., 127.5, 255.]]]))
    array([[[0. , 0.5, 1. ]]])
    """
    rgb = np.asarray(rgb)
    if rgb.dtype == np.uint8:
        return rgb
    values = rgb.astype(np.float64)
    if values.size and not np.isfinite(values).all():
        raise ValueError("the RGB image contains NaN or infinite values; replace them first")
    low = float(values.min()) if values.size else 0.0
    if low < 0:
        raise ValueError(f"RGB values must not be negative; the image's minimum is {low:g}")
    from .detect._colour import rgb_full_scale

    return values / rgb_full_scale(values)


def read_for_detection(path, *, axes=None, channel=None, scene=None, lazy_frames: bool = False):
    """``(array, image)``: the nuclear stain as a NumPy array (``[T][Z]YX`` or
    ``[T]YXS`` with RGB scaled by :func:`rgb_to_unit_range`) and its
    :class:`ImageFile` (axes, spacing, scene). With ``lazy_frames`` a grey
    time-lapse stays a Dask array, read one frame at a time by
    :func:`ivote.detect_frames`."""
    try:
        image = open_image(path, axes=axes, scene=scene).select_channel(channel)
        if lazy_frames and "T" in image.axes and not image.is_rgb:
            return image.data, image
        _check_declared_size(path, image.data)
        array = np.asarray(image.data.compute() if hasattr(image.data, "compute") else image.data)
    except Exception as exc:
        raise _unreadable(path, exc) from exc
    if image.is_rgb:
        array = rgb_to_unit_range(array)
    return array, image


def _check_declared_size(path, data) -> None:
    """Refuse (ResourceLimitError) an image whose header declares more pixels than
    ``IVOTE_MAX_MEMORY``, before they are read: a damaged header can declare terabytes."""
    from ._limits import check_budget

    check_budget(f"reading {path} ({'x'.join(map(str, data.shape))} {np.dtype(data.dtype)} pixels)",
                 memory=math.prod(data.shape) * np.dtype(data.dtype).itemsize,
                 advice="check that the file is not damaged")


def _unreadable(path, exc: Exception) -> Exception:
    """``exc`` itself when its message already names the file (ours, or a missing file),
    else an InputFileError (a ValueError and an OSError) that does, for a truncated, empty
    or malformed file (tifffile's IndexError, 'failed to read N bytes', PIL's errors)."""
    from .errors import InputFileError, IvoteError

    name = Path(path).name
    if isinstance(exc, (IvoteError, AxesError, MemoryError, FileNotFoundError, PermissionError, IsADirectoryError)) or (
            isinstance(exc, (ValueError, OSError)) and name in str(exc) and not type(exc).__module__.startswith(
                ("tifffile", "PIL", "imageio"))):
        return exc
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return InputFileError(f"cannot read {path} as an image ({type(exc).__name__}: {detail[:200]}); "
                          "is it a complete image file?")


# ---------------------------------------------------------------- opening files


def list_scenes(path) -> tuple:
    """Names of the scenes (series, positions) of a file."""
    return _open_raw(Path(path), None).scenes


def open_image(path: str | os.PathLike, *, axes: str | None = None, scene: int | str | None = None) -> ImageFile:
    """Open a microscopy image lazily, with named axes and pixel sizes in micrometres.

    Parameters
    ----------
    path : path-like
        OME-TIFF, ImageJ or plain TIFF, OME-Zarr (v0.4, v0.5), PNG, JPEG, BMP;
        CZI, ND2 and LIF with ``pip install "napari-ivote[formats]"``.
    axes : str, optional
        The axes of the stored array in order, letters of ``TCZYXS`` (e.g.
        ``'CYX'``, ``'ZYX'``, ``'YXS'``): needed when the file's metadata does
        not name them and the shape is ambiguous; overrides the metadata (with
        a warning) when they differ.
    scene : int or str, optional
        Scene (series, position) index or name; default the first.

    Returns
    -------
    ImageFile

    Raises
    ------
    AxesError
        When the axes cannot be read from the file; the message shows the
        shape and how to name them.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tifffile
    >>> path = os.path.join(tempfile.mkdtemp(), "two_channels.tif")
    >>> tifffile.imwrite(path, np.zeros((2, 32, 32), np.uint16), imagej=True,
    ...                  resolution=(2, 2), metadata={"axes": "CYX", "unit": "um"})
    >>> image = open_image(path)
    >>> image.axes, image.spacing, image.select_channel(1).axes
    ('CYX', (0.5, 0.5), 'YX')
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"input image not found: {path}")
    if axes is not None:
        axes = _check_axes_text(axes)
    raw = _open_raw(path, scene)
    return _name_axes(raw, axes)


@dataclass
class _Raw:
    """What a format reader found, before the axes are settled."""

    data: object  # dask array in stored order
    axes: str  # one letter per dim; '?' where the metadata names none
    axes_from: str  # '' when nothing names them
    spacing: dict  # {'Z'|'Y'|'X': micrometres}
    scenes: tuple
    scene: str | None
    channel_names: tuple | None = None
    time_interval: float | None = None
    three_spatial_from_metadata: bool = False  # our own JSON gave 3 pixel sizes
    path: str = ""
    origin: dict = field(default_factory=dict)  # {'Z'|'Y'|'X': micrometres}, the first pixel's position


def _check_axes_text(axes) -> str:
    text = str(axes).strip().upper()
    bad = sorted(set(text) - set(CANONICAL))
    if not text or bad or len(set(text)) != len(text) or not {"Y", "X"} <= set(text):
        raise AxesError(
            f"axes must be distinct letters of TCZYXS including Y and X (e.g. CYX, ZYX, YXS, TZYX); got {axes!r}"
        )
    return text


def _open_raw(path: Path, scene) -> _Raw:
    name = path.name.lower()
    if path.is_dir() or name.endswith(".zarr"):
        raw = _open_zarr(path, scene)
    elif name.endswith(TIFF_SUFFIXES + SLIDE_SUFFIXES):
        raw = _open_tiff(path, scene)
    elif name.endswith(PLAIN_SUFFIXES):
        raw = _open_plain(path, scene)
    else:
        raw = _open_bioio(path, scene)
    raw.path = str(path)
    return raw


def _scene_index(scene, scenes, filename) -> int:
    if scene is None:
        return 0
    if isinstance(scene, str) and not scene.strip().isdigit():
        if scene in scenes:
            return scenes.index(scene)
        raise ValueError(f"{filename} has no scene {scene!r}; its scenes are {', '.join(scenes)} (or an index 0..{len(scenes) - 1})")
    index = int(scene)
    if not 0 <= index < len(scenes):
        raise ValueError(f"scene must be 0..{len(scenes) - 1} for {filename} ({len(scenes)} scenes); got {scene!r}")
    return index


def _quiet_bioio():
    """bioio logs every reader it tries and fails with; we pick the reader ourselves."""
    import logging

    logging.getLogger("bioio").setLevel(logging.ERROR)
    logging.getLogger("bioio_base").setLevel(logging.ERROR)


def _open_tiff(path: Path, scene) -> _Raw:
    import tifffile

    with tifffile.TiffFile(path) as tif:
        series = tif.series
        is_ome, is_imagej = bool(tif.is_ome), bool(tif.is_imagej)
        scenes = tuple(s.name or f"Image:{i}" for i, s in enumerate(series)) if is_ome else tuple(
            f"Image:{i}" for i in range(len(series)))
        index = _scene_index(scene, scenes, path.name)
        s = series[index]
        stored_axes, shape, dtype = s.axes, tuple(s.shape), s.dtype
        page = s.pages[0] if s.pages else tif.pages[0]
        tiled = is_tiled(s)  # a whole slide or other tiled image: read tile by tile (ivote._slides)
        spacing, names, interval, origin = {}, None, None, {}
        three_from_json = False
        if is_ome:
            spacing, names, interval, origin = _ome_tiff_metadata(tif.ome_metadata, index)
            axes_from = "OME metadata"
        elif is_imagej:
            spacing, interval = _imagej_spacing(tif.imagej_metadata or {}, page)
            axes_from = "ImageJ hyperstack"
        else:
            meta = _json_description(page)
            given = meta.get("spacing")
            if given is not None:
                given = [float(v) for v in np.atleast_1d(given)][-3:]
                spatial = "ZYX"[-len(given):] if given else ""  # one value: X only, refused as partial
                spacing = dict(zip(spatial, given))
                three_from_json = len(given) == 3
            else:
                spacing = _resolution_spacing(page)
            axes_from = "TIFF metadata" if "axes" in meta else ""
    axes = "".join(a if a in CANONICAL else "?" for a in stored_axes)
    if is_imagej and "?" in axes:
        axes_from = ""
    if not axes_from and set(axes) <= set(CANONICAL) and axes.endswith("YXS"):
        axes_from = "TIFF photometric tag"
    if axes_from == "" or "?" in axes:
        # tifffile names a plain stack's axes Q or I: not a name
        axes = "".join(a if a in "YXS" else "?" for a in axes)
        if axes.endswith("S"):
            axes_from = "TIFF photometric tag"
    if tiled and not spacing:
        spacing = slide_spacing(path, index)
    data = slide_levels(path, index)[0] if tiled else _tiff_dask(path, index, stored_axes, shape, dtype, is_ome)
    return _Raw(data, axes, axes_from, spacing, scenes, scenes[index], names, interval, three_from_json,
                origin=origin)


def _tiff_dask(path: Path, index: int, stored_axes: str, shape, dtype, is_ome: bool):
    """The series as a lazy Dask array in tifffile's stored order: bioio's readers, tifffile
    where they fail. bioio-ome-tiff gives every OME image as TCZYX(S): its axes are matched
    to tifffile's by name, never by reshaping."""
    _quiet_bioio()
    try:
        if is_ome:
            from bioio_ome_tiff import Reader
        else:
            from bioio_tifffile import Reader
        reader = Reader(str(path))
        reader.set_scene(index)
        data, dims = reader.dask_data, "".join(reader.dims.order)
        if is_ome and dims != stored_axes and set(stored_axes) <= set(dims):
            extra = [i for i, a in enumerate(dims) if a not in stored_axes]
            if all(data.shape[i] == 1 for i in extra):
                data = data[tuple(0 if i in extra else slice(None) for i in range(len(dims)))]
                kept = [a for a in dims if a in stored_axes]
                data = data.transpose([kept.index(a) for a in stored_axes])
        if tuple(data.shape) == tuple(shape):
            return data
    except Exception:  # noqa: BLE001 - any reader failure falls back to tifffile
        pass
    return _tifffile_dask(path, index, shape, dtype)


def _tifffile_dask(path, index, shape, dtype):
    import tifffile

    try:
        import dask
        import dask.array as da
    except ImportError:  # a minimal install (a GPU node without Dask): read it now
        return tifffile.imread(str(path), series=index)
    return da.from_delayed(dask.delayed(tifffile.imread)(str(path), series=index), shape=shape, dtype=dtype)


def _ome_tiff_metadata(xml: str, index: int):
    import tifffile

    ome = tifffile.xml2dict(xml).get("OME", {})
    images = ome.get("Image", [])
    images = images if isinstance(images, list) else [images]
    pixels = images[index].get("Pixels", {}) if index < len(images) else {}
    spacing = {}
    for axis in "ZYX":
        size = to_micrometres(pixels.get(f"PhysicalSize{axis}"), pixels.get(f"PhysicalSize{axis}Unit", "µm"))
        if size is not None:
            spacing[axis] = size
    channels = pixels.get("Channel", [])
    channels = channels if isinstance(channels, list) else [channels]
    names = tuple(str(c.get("Name", f"Channel:{i}")) for i, c in enumerate(channels)) or None
    interval = pixels.get("TimeIncrement")
    origin = _ome_plane_origin(pixels) if _marks_origin(ome, images[index] if index < len(images) else {}) else {}
    return spacing, names, None if interval is None else float(interval), origin


ORIGIN_NAMESPACE = "napari-ivote/origin"
"""Namespace of the OME MapAnnotation by which :func:`write_image` says that its Plane positions are the
first pixel's position (a layer's translate). A microscope's Plane positions are stage positions (the field's
centre or a corner, depending on the vendor; Fiji, QuPath and bioio open such images at 0): they are not read."""


def _marks_origin(ome: dict, image: dict) -> bool:
    """Whether ``image`` (a parsed OME Image) refers to the MapAnnotation of :data:`ORIGIN_NAMESPACE`."""
    def listed(item):
        return item if isinstance(item, list) else [item]

    refs = {r.get("ID") for r in listed(image.get("AnnotationRef", [])) if isinstance(r, dict)}
    maps = listed(ome.get("StructuredAnnotations", {}).get("MapAnnotation", []))
    return any(isinstance(m, dict) and m.get("ID") in refs and m.get("Namespace") == ORIGIN_NAMESPACE for m in maps)


def _ome_plane_origin(pixels: dict) -> dict:
    """The position of the first plane (TheZ = TheT = TheC = 0) in micrometres, per axis whose
    position has a length unit (OME's default unit, 'reference frame', is not one); read only from
    napari-ivote's own files (:data:`ORIGIN_NAMESPACE`)."""
    planes = pixels.get("Plane", [])
    planes = planes if isinstance(planes, list) else [planes]
    first = [p for p in planes if all(int(p.get(f"The{a}", 0)) == 0 for a in "ZTC")]
    if not first:
        return {}
    origin = {}
    for axis in "ZYX":
        position = _length_um(first[0].get(f"Position{axis}"), first[0].get(f"Position{axis}Unit", "reference frame"))
        if position is not None:
            origin[axis] = position
    return origin


def _length_um(value, unit) -> float | None:
    """A position (any sign) in ``unit`` as micrometres; None without a value or a length unit."""
    um_per_unit = to_micrometres(1.0, unit)
    if value is None or um_per_unit is None or not math.isfinite(float(value)):
        return None
    return float(value) * um_per_unit


def _imagej_spacing(ij: dict, page):
    unit = ij.get("unit", "pixel")
    if isinstance(unit, bytes):
        unit = unit.decode(errors="replace")
    unit = str(unit).replace("\\u00B5", "µ")
    spacing = {}
    for axis, tag in (("Y", "YResolution"), ("X", "XResolution")):
        res = page.tags.get(tag)
        if res is not None and res.value[0]:
            size = to_micrometres(res.value[1] / res.value[0], unit)
            if size is not None:
                spacing[axis] = size
    if "spacing" in ij:
        size = to_micrometres(ij["spacing"], unit)
        if size is not None:
            spacing["Z"] = size
    interval = ij.get("finterval")
    return spacing, None if interval is None else float(interval)


def _json_description(page) -> dict:
    description = getattr(page, "description", "") or ""
    if description.startswith("{"):
        try:
            meta = json.loads(description)
            return meta if isinstance(meta, dict) else {}
        except ValueError:
            return {}
    return {}


def _resolution_spacing(page) -> dict:
    """Pixel size from the resolution tags of a plain TIFF, when in centimetres (inches are a
    printer's dots, not a microscope's pixels)."""
    unit = page.tags.get("ResolutionUnit")
    if unit is None or int(unit.value) != 3:  # 3: CENTIMETER
        return {}
    spacing = {}
    for axis, tag in (("Y", "YResolution"), ("X", "XResolution")):
        res = page.tags.get(tag)
        if res is not None and res.value[0]:
            spacing[axis] = res.value[1] / res.value[0] * 1e4
    return spacing


def _open_zarr(path: Path, scene) -> _Raw:
    import zarr

    _quiet_bioio()
    group = zarr.open_group(str(path), mode="r")
    attrs = dict(group.attrs)
    multiscales = attrs.get("ome", {}).get("multiscales") or attrs.get("multiscales")
    if not multiscales:
        raise ValueError(f"{path.name} is a Zarr store without OME-Zarr 'multiscales' metadata; "
                         f"write it as OME-Zarr (v0.4 or v0.5) or give a TIFF")
    scenes = tuple(m.get("name") or f"Image:{i}" for i, m in enumerate(multiscales))
    index = _scene_index(scene, scenes, path.name)
    ms = multiscales[index]
    axes_meta = ms.get("axes") or [{"name": a} for a in "tczyx"]
    letters = "".join(str(a["name"] if isinstance(a, dict) else a)[:1].upper() for a in axes_meta)
    letters = "".join(a if a in CANONICAL else "?" for a in letters)
    dataset = ms["datasets"][0]
    scale, shift, translated = [1.0] * len(letters), [0.0] * len(letters), False
    # the dataset's transforms first, then the multiscale's (OME-NGFF): world = scale * index + shift
    for transform in dataset.get("coordinateTransformations", []) + ms.get("coordinateTransformations", []):
        if transform.get("type") == "scale":
            scale = [a * b for a, b in zip(scale, transform["scale"])]
            shift = [a * b for a, b in zip(shift, transform["scale"])]
        elif transform.get("type") == "translation":
            translated = True
            if "translation" in transform:
                shift = [a + float(b) for a, b in zip(shift, transform["translation"])]
    spacing, origin = {}, {}
    for letter, size, position, ax in zip(letters, scale, shift, axes_meta):
        if letter in "ZYX":
            unit = ax.get("unit") if isinstance(ax, dict) else None
            um = to_micrometres(size, unit) if unit else None  # no unit: the scale is in pixels
            if um is not None:
                spacing[letter] = um
            position_um = _length_um(position, unit) if unit else None
            if translated and position_um is not None:
                origin[letter] = position_um
    try:
        from bioio_ome_zarr import Reader

        reader = Reader(str(path))
        reader.set_scene(index)
        data = reader.dask_data
        if "".join(reader.dims.order) != letters.replace("?", "") or len(data.shape) != len(letters):
            raise ValueError("bioio's dims differ from the metadata's axes")
    except Exception:  # noqa: BLE001 - fall back to the Zarr array itself
        import dask.array as da

        data = da.from_zarr(group[dataset["path"]])
    names = None
    omero = attrs.get("ome", attrs).get("omero")
    if omero and omero.get("channels"):
        names = tuple(str(c.get("label", i)) for i, c in enumerate(omero["channels"]))
    return _Raw(data, letters, "OME-Zarr metadata", spacing, scenes, scenes[index], names, origin=origin)


def _open_plain(path: Path, scene) -> _Raw:
    import dask.array as da
    from PIL import Image

    _scene_index(scene, ("Image:0",), path.name)
    with Image.open(path) as img:
        mode = img.mode
        if mode == "P":
            img = img.convert("RGBA" if "transparency" in img.info else "RGB")
            mode = img.mode
        if mode == "LA":
            img, mode = img.getchannel("L"), "L"
        if mode == "1":
            img, mode = img.convert("L"), "L"
        array = np.asarray(img)
    axes = "YXS" if array.ndim == 3 else "YX"
    return _Raw(da.from_array(array, chunks=array.shape), axes, f"{path.suffix[1:].upper()} colour type ({mode})",
                {}, ("Image:0",), "Image:0")


def _open_bioio(path: Path, scene) -> _Raw:
    _quiet_bioio()
    try:
        from bioio import BioImage

        image = BioImage(str(path))
    except Exception as exc:  # noqa: BLE001 - any plugin error: say what to install
        vendor = path.suffix.lower() in VENDOR_SUFFIXES
        hint = ('install the vendor readers: pip install "napari-ivote[formats]"' if vendor
                else "input must be a TIFF or PNG/JPEG/BMP image, an OME-Zarr, or CZI/ND2/LIF with "
                     "napari-ivote[formats]")
        raise ValueError(f"cannot read {path.name}: {hint} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    scenes = tuple(str(s) for s in image.scenes)
    index = _scene_index(scene, scenes, path.name)
    image.set_scene(index)
    reader = image.reader
    dims = "".join(reader.dims.order)
    sizes = reader.physical_pixel_sizes  # bioio's readers give micrometres
    spacing = {a: float(getattr(sizes, a)) for a in "ZYX" if getattr(sizes, a, None)}
    axes = "".join(a if a in CANONICAL else "?" for a in dims)
    names = tuple(str(c) for c in (reader.channel_names or ())) or None
    return _Raw(reader.dask_data, axes, f"{type(reader).__module__.split('.')[0]} metadata", spacing, scenes,
                scenes[index], names)


def scale_for_layer(path, ndim: int) -> tuple | None:
    """The scale a napari layer of ``ndim`` dimensions opened from ``path`` should have:
    1 per T frame, the file's pixel sizes (micrometres) per spatial axis; None when the
    file gives no pixel size, cannot be read, or its layout does not match ``ndim``
    (for widgets whose layer came from a reader that set no scale)."""
    try:
        image = open_image(path)
        spacing = image.known_spacing()
    except (OSError, ValueError):
        return None
    if spacing is None:
        return None
    scale = (1.0,) * ("T" in image.axes) + spacing  # a channel axis is split off; RGB has no layer dimension
    return scale if len(scale) == ndim else None


def adopt_file_scale(layer) -> tuple | None:
    """Give a napari image layer opened without pixel sizes (scale all 1, e.g. by napari's own
    TIFF reader) the pixel sizes of the file it came from (``layer.source.path``), in
    micrometres, so that radii and every output are physical, and its position (``ImageFile.origin``)
    as the translate when the layer has none. Returns the scale set, or None (the layer has a scale
    already, no file, or the file gives none). Duck-typed: no napari import."""
    path = getattr(getattr(layer, "source", None), "path", None)
    if not path or not np.allclose(np.asarray(layer.scale, float), 1.0):
        return None
    scale = scale_for_layer(path, layer.ndim)
    if scale is None:
        return None
    image = open_image(path)
    n_spatial = len(image.spatial_axes)  # the leading axis, if any, is time
    layer.scale = scale
    layer.units = tuple(layer.units)[: layer.ndim - n_spatial] + ("µm",) * n_spatial
    if image.origin is not None and not np.any(np.asarray(layer.translate, float)):
        layer.translate = tuple(layer.translate)[: layer.ndim - n_spatial] + tuple(image.origin)
    return tuple(scale)


# ---------------------------------------------------------------- naming the axes


def _name_axes(raw: _Raw, axes: str | None) -> ImageFile:
    data, stored = raw.data, raw.axes
    filename = Path(raw.path).name
    shape = tuple(int(n) for n in data.shape)
    if axes is not None:
        squeezed = [i for i, n in enumerate(shape) if not (n == 1 and stored[i] in "TCZ?")]
        if len(axes) == len(shape):
            keep = list(range(len(shape)))
        elif len(axes) == len(squeezed):
            keep = squeezed
            data = data.reshape(tuple(shape[i] for i in keep))
        else:
            raise AxesError(f"axes={axes!r} names {len(axes)} axes but {filename} has shape {shape}; "
                            f"give one letter per axis")
        from_file = "".join(stored[i] for i in keep)
        if raw.axes_from and "?" not in from_file and from_file != axes:
            warnings.warn(f"{filename}: its {raw.axes_from} names the axes {from_file}; using {axes} as given",
                          UserWarning, stacklevel=3)
        named, source = axes, "axes="
    elif "?" in stored or not raw.axes_from:
        named = _axes_from_shape(stored, shape, filename, raw.three_spatial_from_metadata)
        source = raw.axes_from or ("napari-ivote's TIFF spacing" if raw.three_spatial_from_metadata else "shape")
    else:
        named, source = stored, raw.axes_from
    # canonical order, singleton T/C/Z dropped
    order = sorted(range(len(named)), key=lambda i: CANONICAL.index(named[i]))
    data = data.transpose(order) if order != sorted(order) else data  # identity: keep the reader's array
    named = "".join(named[i] for i in order)
    drop = [i for i, a in enumerate(named) if a in "TCZ" and data.shape[i] == 1]
    if drop:
        data = data[tuple(0 if i in drop else slice(None) for i in range(len(named)))]
        named = "".join(a for i, a in enumerate(named) if i not in drop)
    if "S" in named and data.shape[named.index("S")] == 1:
        data, named = data[..., 0], named[:-1]
    spatial = "".join(a for a in named if a in "ZYX")
    spacing = tuple(raw.spacing.get(a) for a in spatial)
    origin = tuple(raw.origin.get(a, 0.0) for a in spatial) if raw.origin else None
    names = raw.channel_names if "C" in named and raw.channel_names and len(raw.channel_names) == data.shape[named.index("C")] else None
    return ImageFile(data=data, axes=named, spacing=spacing, path=raw.path, scene=raw.scene, scenes=raw.scenes,
                     channel_names=names, axes_from=source, time_interval=raw.time_interval, origin=origin)


def _axes_from_shape(stored: str, shape: tuple, filename: str, three_spatial: bool) -> str:
    """Axes where the metadata names none: only shapes with one reading pass."""
    fix = ("name them with --axes (e.g. --axes CYX --channel 0, --axes ZYX, --axes YXS, --axes TYX) on the "
           "command line, axes='CYX', channel=0 in Python")
    if len(shape) == 2:
        return "YX"
    if stored.endswith("YXS") and len(shape) == 3:
        return "YXS"
    if len(shape) == 3 and stored[1:] == "YX":
        n, height, width = shape
        if three_spatial:
            return "ZYX"
        if n > _MIN_PLAIN_PLANES and height > _MIN_PLAIN_PLANES and width > _MIN_PLAIN_PLANES:
            return "ZYX"
        if width <= _MIN_PLAIN_PLANES:
            reading = f"its last axis ({width}) could be channels or colours (YXC, YXS) or it is a z stack (ZYX)"
        else:
            reading = f"its first axis ({n}) could be channels (CYX) or z planes (ZYX)"
        raise AxesError(f"{filename} has shape {shape} and its metadata does not name the axes: {reading}; {fix}")
    raise AxesError(f"{filename} has shape {shape} and its metadata does not name the axes; {fix}")


# ---------------------------------------------------------------- writing


def _ome_unit() -> str:
    return "µm"


def write_image(path: str | os.PathLike, array: ArrayLike, *, axes: str, spacing: Sequence[float] | None = None,
                channel_names: Sequence[str] | None = None, name: str | None = None,
                translate: Sequence[float] | None = None) -> Path:
    """Write an image or labels with named axes and pixel sizes, atomically.

    ``.ome.tif``/``.tif``/``.tiff``: OME-TIFF (BigTIFF when large) with
    ``PhysicalSize*`` in micrometres (Fiji/Bio-Formats, bioio, tifffile read
    them), plus resolution tags in centimetres for plain TIFF readers.
    ``.zarr``: OME-Zarr v0.4 with a scale ``coordinateTransformations`` and
    micrometre units on the spatial axes. A ``translate`` is kept as each
    OME-TIFF plane's ``PositionX/Y/Z`` (micrometres; ``PositionZ`` is that
    plane's own depth, marked as such by a MapAnnotation of
    :data:`ORIGIN_NAMESPACE`) and as an OME-Zarr ``translation``;
    :func:`open_image` reads it back as ``ImageFile.origin``.

    Parameters
    ----------
    path : path-like
    array : array_like
        NumPy or Dask array.
    axes : str
        Letters of ``TCZYX`` in the array's order, e.g. ``'TZYX'``.
    spacing : sequence of float, optional
        Micrometres per spatial axis (``Z, Y, X`` or ``Y, X``), in ``axes`` order.
    channel_names : sequence of str, optional
    name : str, optional
        The image's name (OME ``Image Name``, OME-Zarr ``name``); ``'labels'``
        makes napari-ivote's reader open it as a Labels layer.
    translate : sequence of float, optional
        World position of the first pixel in micrometres per spatial axis, in
        ``axes`` order (a napari layer's translate).
    """
    path = Path(path)
    axes = _check_axes_text(axes)
    if len(axes) != np.ndim(array):
        raise ValueError(f"axes {axes!r} must have one letter per dimension of the array (shape {np.shape(array)})")
    spatial = "".join(a for a in axes if a in "ZYX")
    if spacing is not None:
        spacing = tuple(float(s) for s in spacing)
        if len(spacing) != len(spatial):
            raise ValueError(f"spacing must have {len(spatial)} values ({spatial}); got {spacing}")
    if translate is not None:
        translate = tuple(float(t) for t in translate)
        if len(translate) != len(spatial):
            raise ValueError(f"translate must have {len(spatial)} values ({spatial}), micrometres; got {translate}")
        if not all(math.isfinite(t) for t in translate):
            raise ValueError(f"translate must be finite micrometres; got {translate}")
        if spacing is None:
            raise ValueError("translate (micrometres) needs spacing: a file without pixel sizes has no micrometres")
    if path.name.lower().endswith(".zarr"):
        return _write_ome_zarr(path, array, axes, spacing, channel_names, name, translate)
    if not path.name.lower().endswith((".tif", ".tiff")):
        raise ValueError(f"output image must end in .ome.tif, .tif, .tiff or .zarr; got {path.name!r}")
    from ._atomic import write_atomic

    array = np.asarray(array)
    metadata = {"axes": axes}
    if name is not None:
        metadata["Name"] = str(name)
    if spacing is not None:
        for letter, size in zip(spatial, spacing):
            metadata[f"PhysicalSize{letter}"] = size
            metadata[f"PhysicalSize{letter}Unit"] = _ome_unit()
    if channel_names is not None:
        metadata["Channel"] = {"Name": list(channel_names)}
    if translate is not None:
        metadata["Plane"] = _plane_positions(array.shape, axes, spacing, translate)
        metadata["MapAnnotation"] = {"Namespace": ORIGIN_NAMESPACE, "Value": {
            "Plane Position": "the first pixel's position in micrometres (a napari layer's translate)"}}
    resolution = None
    if spacing is not None:
        resolution = (1e4 / spacing[-1], 1e4 / spacing[-2])  # pixels per centimetre, X then Y

    def write(tmp: Path) -> None:
        import tifffile

        tifffile.imwrite(tmp, array, ome=True, photometric="minisblack", metadata=metadata,
                         resolution=resolution, resolutionunit="CENTIMETER" if resolution else None,
                         bigtiff=array.nbytes > 2**31, compression="zlib" if array.dtype.kind in "iub" else None)

    return write_atomic(path, write)


def _plane_positions(shape, axes: str, spacing, translate) -> dict:
    """OME Plane positions for tifffile, one per plane in stored (C) order: the first pixel's
    x and y, and each plane's own z (the origin plus its index times the z spacing)."""
    spatial = "".join(a for a in axes if a in "ZYX")
    origin, step = dict(zip(spatial, translate)), dict(zip(spatial, spacing))
    leading = "".join(a for a in axes if a not in "YX")
    n_planes = math.prod(n for a, n in zip(axes, shape) if a not in "YX")
    plane = {f"Position{a}": [origin[a]] * n_planes for a in "YX"}
    if "Z" in origin:
        planes = np.ndindex(*[n for a, n in zip(axes, shape) if a not in "YX"])
        plane["PositionZ"] = [origin["Z"] + step["Z"] * index[leading.index("Z")] for index in planes]
    plane.update({f"Position{a}Unit": [_ome_unit()] * n_planes for a in "ZYX" if f"Position{a}" in plane})
    return plane


def _write_ome_zarr(path: Path, array, axes: str, spacing, channel_names, name=None, translate=None) -> Path:
    import dask.array as da
    import zarr

    if not hasattr(array, "dtype"):
        array = np.asarray(array)
    kinds = {"T": "time", "C": "channel", "Z": "space", "Y": "space", "X": "space"}
    axes_meta = []
    for a in axes:
        entry = {"name": a.lower(), "type": kinds[a]}
        if a in "ZYX" and spacing is not None:
            entry["unit"] = "micrometer"
        axes_meta.append(entry)
    sizes = dict(zip("".join(a for a in axes if a in "ZYX"), spacing or ()))
    scale = [float(sizes.get(a, 1.0)) for a in axes]
    transforms = [{"type": "scale", "scale": scale}]
    if translate is not None:
        origin = dict(zip("".join(a for a in axes if a in "ZYX"), translate))
        transforms.append({"type": "translation", "translation": [float(origin.get(a, 0.0)) for a in axes]})
    multiscales = [{
        "version": "0.4", "name": name or path.name, "axes": axes_meta,
        "datasets": [{"path": "0", "coordinateTransformations": transforms}],
    }]
    chunks = tuple(1 if a in "TC" else min(n, 256 if a != "Z" else 32) for a, n in zip(axes, np.shape(array)))
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"output folder does not exist: {folder}")
    if path.exists() and not any((path / marker).exists() for marker in (".zgroup", "zarr.json", ".zattrs")):
        raise FileExistsError(f"{path} exists and is not a Zarr store: not replacing it; choose another --out")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder))
    try:
        group = zarr.open_group(str(tmp), mode="w", zarr_format=2)
        group.attrs["multiscales"] = multiscales
        if channel_names is not None:
            group.attrs["omero"] = {"channels": [{"label": str(c)} for c in channel_names]}
        target = group.create_array("0", shape=np.shape(array), dtype=array.dtype, chunks=chunks,
                                    chunk_key_encoding={"name": "v2", "separator": "/"})
        if isinstance(array, da.Array):
            da.store(array.rechunk(chunks), target)
        else:
            target[...] = np.asarray(array)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


# ---------------------------------------------------------------- command-line helpers


def add_input_options(parser, *, channel: bool = True) -> None:
    """``--axes``, ``--channel`` and ``--scene`` for a command that reads an image."""
    parser.add_argument("--axes", default=None, metavar="AXES",
                        help="the stored axes in order, letters of TCZYXS (e.g. CYX, ZYX, YXS, TZYX), when the "
                             "file's metadata does not name them (default: from the file)")
    if channel:
        parser.add_argument("--channel", default=None, metavar="N",
                            help="the nuclear-stain channel (index or name) of a multi-channel image; for RGB, "
                                 "one colour instead of the hematoxylin density")
    parser.add_argument("--scene", default=None, metavar="S",
                        help="scene/series/position index or name of a multi-scene file, or 'all' (one output "
                             "each, named OUT_<scene>) (default: the first)")


def input_scenes(args) -> list:
    """The scenes a command runs on: ``[(scene or None, output path)]``."""
    if str(getattr(args, "scene", None) or "").lower() != "all":
        return [(args.scene, Path(args.out))]
    return [(i, scene_path(args.out, s)) for i, s in enumerate(list_scenes(args.input))]


def scene_path(path, scene) -> Path:
    """``OUT.csv`` -> ``OUT_<scene>.csv`` (``.ome.tif``, ``.ome.zarr`` kept whole)."""
    path = Path(path)
    name = path.name
    for double in (".ome.tif", ".ome.tiff", ".ome.zarr"):
        if name.lower().endswith(double):
            stem, suffix = name[: -len(double)], name[-len(double):]
            break
    else:
        stem, suffix = path.stem, path.suffix
    return path.with_name(f"{stem}_{_safe(scene)}{suffix}")


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))


def resolve_spacing(file_spacing, given, ndim: int, *, command: str = "ivote", source: str = "the file"):
    """The spacing a command uses: ``--spacing`` when given (a warning on stderr
    when it contradicts the file's), else the file's, else None (pixels)."""
    if given:
        given = tuple(float(s) for s in given)
        if len(given) != ndim:
            axes = "Z Y X" if ndim == 3 else "Y X"
            raise ValueError(f"--spacing needs {ndim} values ({axes}) for this {ndim}D image; got {len(given)}")
        if file_spacing is not None and len(file_spacing) == ndim and not np.allclose(given, file_spacing, rtol=1e-6):
            print(f"{command}: warning: --spacing {' '.join(f'{s:g}' for s in given)} differs from {source}'s "
                  f"{' '.join(f'{s:g}' for s in file_spacing)} um; using --spacing", file=sys.stderr)
        return given
    return file_spacing


def command_spacing(image: ImageFile, given, *, command: str, fallback=None):
    """The spacing a command uses for ``image``: ``--spacing`` (``given``), else the
    file's, else ``fallback`` (e.g. the points table's scale), else None (pixels)."""
    ndim = len(image.spatial_axes)
    try:
        file_spacing = image.known_spacing()
    except ValueError:
        if not given:
            raise
        file_spacing = None
    if file_spacing is None and not given and fallback is not None and len(fallback) == ndim:
        file_spacing = tuple(fallback)
    return resolve_spacing(file_spacing, given, ndim, command=command)
