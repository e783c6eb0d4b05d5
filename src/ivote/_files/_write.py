"""Writing images: OME-TIFF and OME-Zarr with axes, pixel sizes and the first pixel's position,
atomically."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from .._typing import ArrayLike
from ._image import _check_axes_text
from ._metadata import ORIGIN_NAMESPACE
from ._zarr import _v2_array, _v2_group

__all__ = ["write_image"]


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
    from .._atomic import write_atomic

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
    from .._atomic import is_zarr_store, private_folder, replace_folder

    if path.exists() and not is_zarr_store(path):
        raise FileExistsError(f"{path} exists and is not a Zarr store: not replacing it; choose another --out")
    with private_folder(path, "tmp") as tmp:
        group = _v2_group(tmp)
        group.attrs["multiscales"] = multiscales
        if channel_names is not None:
            group.attrs["omero"] = {"channels": [{"label": str(c)} for c in channel_names]}
        target = _v2_array(group, "0", shape=np.shape(array), dtype=array.dtype, chunks=chunks)
        if isinstance(array, da.Array):
            da.store(array.rechunk(chunks), target)
        else:
            target[...] = np.asarray(array)
        replace_folder(tmp, path)
    return path
