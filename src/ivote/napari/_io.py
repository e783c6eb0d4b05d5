"""Reader and writer contributions for points CSV files (``ivote.io`` formats) and labels.

The points writer saves a Points layer of ours as pixel coordinates, scores
and world coordinates, with the layer's scale, translate and unit in ``#``
header lines (other Points layers go to napari's own CSV writer, unchanged);
the reader claims only CSV files whose header starts with the pixel columns
(``y,x`` or ``z,y,x``) and restores the points, scores and scale exactly. The
labels writer saves a Labels layer as OME-TIFF (or OME-Zarr) with its pixel
sizes and translate, which the image reader opens as a Labels layer again. Both are napari's
default for their extensions (see :mod:`._writer_order`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._units import to_micrometres
from ..io import read_points_csv, write_points_csv
from ._units import unit_name

__all__ = ["get_reader", "read_points", "write_labels", "write_points"]

_PIXEL_HEADERS = (["t", "z", "y", "x"], ["t", "y", "x"], ["z", "y", "x"], ["y", "x"])


def _is_points_csv(path: Path) -> bool:
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.startswith("#"):
                    header = [h.strip().lower() for h in line.strip().split(",")]
                    return any(header[: len(axes)] == axes for axes in _PIXEL_HEADERS)
    except (OSError, UnicodeDecodeError):
        return False
    return False


def _header_value(path: Path, key: str) -> str | None:
    """The value of a ``# key: value`` line before the CSV header, or None."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.startswith("#"):
                return None
            name, _, value = line[1:].partition(":")
            if name.strip().lower() == key:
                return value.strip()
    return None


def _is_napari_points_csv(path: Path) -> bool:
    """napari's own points CSV (``index,axis-0,axis-1,...``, no ``#`` lines): its reader's test, on the header."""
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            header = [h.strip() for h in fh.readline().strip().split(",")]
    except (OSError, UnicodeDecodeError):
        return False
    return {"axis-0", "axis-1"} <= set(header) and "shape-type" not in header


def read_napari_points(path) -> list[tuple]:
    """napari's points CSV through napari's own reader (every feature kept), for ``*.csv`` files sent to this
    plugin (a reader preference for ``*.csv``, or ``plugin="napari-ivote"``)."""
    from napari_builtins.io import csv_to_layer_data

    path = path[0] if isinstance(path, (list, tuple)) else path
    return [csv_to_layer_data(str(path), require_type="points")]


def get_reader(path):
    """napari reader hook: a reader for one points CSV file (ours, or napari's layout), or None."""
    if isinstance(path, (list, tuple)):
        if len(path) != 1:
            return None
        path = path[0]
    if _is_points_csv(Path(path)):
        return read_points
    return read_napari_points if _is_napari_points_csv(Path(path)) else None


def _known_unit(name: str) -> bool:
    """Whether napari (pint) understands ``name`` as a unit."""
    try:
        import pint

        pint.get_application_registry().Unit(name)
        return True
    except Exception:  # noqa: BLE001 (pint raises several kinds for a name it does not know)
        return False


def read_points(path) -> list[tuple]:
    """Read a points CSV as a napari Points layer (data, attributes, 'points')."""
    from ._writer_order import prefer_ivote_writers

    prefer_ivote_writers()  # a layer of ours: File > Save writes this format again
    path = Path(path[0] if isinstance(path, (list, tuple)) else path)
    table = read_points_csv(path)
    data, spacing, translate = table.points, table.spacing, table.translate
    if table.times is not None:  # a time-lapse: the frame is the first coordinate, one frame per step
        data = np.column_stack([table.times, data])
        spacing = None if spacing is None else (1.0, *spacing)
        translate = None if translate is None else (0.0, *translate)
    ndim = data.shape[1]
    axes = ("t" if table.times is not None else "") + "zyx"[-table.points.shape[1]:]
    attributes: dict = {"name": path.stem, "ndim": ndim, "metadata": {"source": str(path), "axes": axes}}
    if spacing is not None:
        attributes["scale"] = spacing
    if translate is not None:
        attributes["translate"] = translate
    if table.units:
        attributes["metadata"]["units"] = table.units
        if table.units not in ("pixel", "px") and table.times is None and _known_unit(table.units):
            attributes["units"] = (table.units,) * ndim
    radius = _header_value(path, "radius")
    if radius is not None:  # drawn as Detect draws them: rings of the nucleus' size
        scale = table.spacing or (1.0,) * table.points.shape[1]
        attributes.update(size=2.0 * float(radius) / scale[-1], face_color="transparent", border_width=0.12,
                          border_width_is_relative=True)
        attributes["metadata"]["radius"] = float(radius)
        attributes["metadata"]["radius_estimated"] = _header_value(path, "radius_estimated") == "true"
    if table.scores is not None:
        colour = "border" if radius is not None else "face"
        attributes.update({"features": {"score": table.scores}, f"{colour}_color": "score",
                           f"{colour}_colormap": "viridis"})
    return [(data, attributes, "points")]


def write_points(path: str, data, attributes: dict) -> list[str]:
    """napari single-layer writer: a Points layer to ``.csv`` (atomically).

    Writes pixel coordinates, the ``score`` feature when there is one, world
    coordinates and the layer's scale, translate and unit. A layer that is not
    ours (no detection metadata, no score) goes to napari's builtin CSV writer,
    which keeps all of its features.
    """
    if not _is_ivote_points(attributes):
        from napari_builtins.io import napari_write_points

        written = napari_write_points(str(path), np.asarray(data), attributes)
        return [written] if written else []
    points = np.asarray(data, dtype=np.float64)
    ndim = points.shape[1] if points.ndim == 2 else int(attributes.get("ndim", 2))
    points = points.reshape(-1, ndim)
    axes = str((attributes.get("metadata") or {}).get("axes", ""))
    times = None
    if ndim == 4 or (axes.startswith("t") and len(axes) == ndim):  # a time-lapse: the frame comes first
        times, points, ndim = np.round(points[:, 0]).astype(np.int64), points[:, 1:], ndim - 1
    if ndim not in (2, 3):
        raise ValueError(f"only 2D or 3D points (or T plus 2D/3D) can be written to CSV; this layer has "
                         f"{ndim} dimensions")
    features = attributes.get("features")
    scores = None
    if features is not None and "score" in getattr(features, "columns", features):
        scores = np.asarray(features["score"], dtype=np.float64)
    scale = attributes.get("scale")
    translate = attributes.get("translate")
    metadata = attributes.get("metadata") or {}
    units = unit_name(attributes.get("units")) or unit_name(metadata.get("units"))
    if units is not None and not _known_unit(units):  # e.g. 'world units': napari could not re-open it
        units = None
    path = Path(path)
    if path.suffix.lower() != ".csv":
        path = path.with_suffix(".csv")
    write_points_csv(
        path,
        points,
        scores,
        spacing=None if scale is None else tuple(scale)[-ndim:],
        translate=None if translate is None else tuple(translate)[-ndim:],
        units=units or _no_unit(scale, translate),
        times=times,
        radius=metadata.get("radius"),
        radius_estimated=bool(metadata.get("radius_estimated", False)),
    )
    return [str(path)]


def _no_unit(scale, translate) -> str:
    """The unit of a layer that names none: 'pixel' when its scale is 1 and translate 0, else 'world' (the world
    coordinates are then not pixels: ``z_world``, as the measurements' ``centroid_z_world``)."""
    moved = translate is not None and any(float(t) != 0.0 for t in translate)
    scaled = scale is not None and any(float(s) != 1.0 for s in scale)
    return "world" if moved or scaled else "pixel"


def _is_ivote_points(attributes: dict) -> bool:
    """A Points layer of ours: from Detect or our reader (their metadata), or scored."""
    metadata = attributes.get("metadata") or {}
    features = attributes.get("features")
    scored = features is not None and "score" in getattr(features, "columns", features)
    return scored or any(key in metadata for key in ("ivote_image", "radius", "axes"))


_LABEL_AXES = {2: "YX", 3: "ZYX", 4: "TZYX"}


def write_labels(path: str, data, attributes: dict) -> list[str]:
    """napari single-layer writer: a Labels layer to OME-TIFF (``.tif``) or OME-Zarr (``.zarr``), atomically.

    The layer's scale goes into the file as pixel sizes, and its translate as
    the first pixel's position, when its unit is a length (converted to the
    micrometres that the file carries: a layer in nm or mm keeps its size; in
    pixels, neither is written); the file opens as a Labels layer
    with napari-ivote's image reader, and as an image with any TIFF reader.
    """
    from .._files import write_image
    from ._image_io import LABELS_NAME

    labels = np.asarray(data[0] if isinstance(data, (list, tuple)) else data)  # multiscale: full resolution
    axes = _LABEL_AXES.get(labels.ndim)
    if axes is None:
        raise ValueError(f"only 2D, 3D or T+3D labels can be written; this layer has {labels.ndim} dimensions")
    scale = attributes.get("scale")
    units = [str(u) for u in np.atleast_1d(np.asarray(attributes.get("units") or (), dtype=object))]
    metadata_unit = str((attributes.get("metadata") or {}).get("units", ""))
    unit = unit_name(units[-1] if units else metadata_unit)
    um_per_unit = to_micrometres(1.0, unit) if unit else None  # None: pixels, or not a length
    spatial = len(axes.replace("T", ""))
    spacing = tuple(float(s) * um_per_unit for s in scale)[-spatial:] if scale is not None and um_per_unit else None
    translate = attributes.get("translate")
    translate = tuple(float(t) * um_per_unit for t in translate)[-spatial:] if translate is not None and spacing \
        else None
    if translate is not None and not any(translate):
        translate = None  # the origin: nothing to record
    path = Path(path)
    if not path.name.lower().endswith((".tif", ".tiff", ".zarr")):
        path = path.with_name(path.name + ".ome.tif")
    return [str(write_image(path, labels, axes=axes, spacing=spacing, translate=translate, name=LABELS_NAME))]
