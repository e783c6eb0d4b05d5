"""Opening image files: the format readers (TIFF, OME-TIFF, PNG/JPEG/BMP, the vendor formats through
bioio, Zarr), their errors as messages naming the file, and the arrays detection reads."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ..errors import InputFileError
from ._image import (
    AxesError,
    CANONICAL,
    ImageFile,
    PLAIN_SUFFIXES,
    TIFF_SUFFIXES,
    VENDOR_SUFFIXES,
    _Raw,
    _check_axes_text,
    _name_axes,
    _quiet_bioio,
    _scene_index,
    rgb_to_unit_range,
)
from ._metadata import _check_ome_planes, _imagej_spacing, _json_description, _ome_tiff_metadata, _resolution_spacing
from ._zarr import _open_zarr
from .._slides import SLIDE_SUFFIXES, is_tiled, slide_levels, slide_spacing

__all__ = ["adopt_file_scale", "list_scenes", "not_regular_file", "open_image", "read_for_detection", "scale_for_layer"]


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
    from .._limits import check_budget

    check_budget(f"reading {path} ({'x'.join(map(str, data.shape))} {np.dtype(data.dtype)} pixels)",
                 memory=math.prod(data.shape) * np.dtype(data.dtype).itemsize,
                 advice="check that the file is not damaged")


def _unreadable(path, exc: Exception) -> Exception:
    """``exc`` itself when its message already names the file (ours, or a missing file),
    else an InputFileError (a ValueError and an OSError) that does, for a truncated, empty
    or malformed file (tifffile's IndexError, 'failed to read N bytes', PIL's errors)."""
    from ..errors import InputFileError, IvoteError

    name = Path(path).name
    if isinstance(exc, (IvoteError, AxesError, MemoryError, FileNotFoundError, PermissionError, IsADirectoryError)) or (
            isinstance(exc, (ValueError, OSError)) and name in str(exc) and not type(exc).__module__.startswith(
                ("tifffile", "PIL", "imageio"))):
        return exc
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return InputFileError(f"cannot read {path} as an image ({type(exc).__name__}: {detail[:200]}); "
                          "is it a complete image file?")


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
    if not (path.is_file() or path.is_dir()):
        raise not_regular_file(path, "input image")
    if axes is not None:
        axes = _check_axes_text(axes)
    raw = _open_raw(path, scene)
    return _name_axes(raw, axes)


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
            spacing, names, interval, origin = _ome_tiff_metadata(tif.ome_metadata, index, path.name)
            _check_ome_planes(tif, s, path.name)
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


def not_regular_file(path, what: str) -> Exception:
    """The error for a ``path`` that exists but is neither a file nor a folder (a FIFO, a socket,
    a device), refused before it is opened: reading a FIFO would wait for a writer forever."""
    import stat

    mode = os.stat(path).st_mode
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return InputFileError(f"{what} {path} is {kind}, not a regular file; give an image or table file "
                          "(copy the stream to a file first)")
