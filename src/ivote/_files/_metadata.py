"""Pixel sizes, channel names, intervals and origins from a file's metadata (OME-XML, ImageJ,
TIFF tags, OME-Zarr transforms), converted to micrometres; pixel sizes that cannot be used are refused."""

from __future__ import annotations

import json
import math

from .._units import to_micrometres
from ..errors import InputFileError

__all__ = ["BadPixelSize", "ORIGIN_NAMESPACE", "file_pixel_size"]


def _check_ome_planes(tif, series, filename: str) -> None:
    """Refuse an OME-TIFF whose OME-XML declares more planes than the file stores (tifffile
    would fill the missing ones with zeros, and say so only in a log line)."""
    plane_axes = [n for a, n in zip(series.axes, series.shape) if a not in "YXS"]
    declared = math.prod(plane_axes)
    stored = sum(1 for page in series.pages if page is not None)
    if declared > stored:
        sizes = ", ".join(f"Size{a}={n}" for a, n in zip(series.axes, series.shape) if a not in "YXS")
        raise InputFileError(f"{filename}: its OME-XML declares {declared} planes ({sizes}) but the file stores "
                             f"{stored}; the file is incomplete or its metadata is wrong (correct SizeZ/SizeC/SizeT)")


def _ome_tiff_metadata(xml: str, index: int, filename: str = "the OME-TIFF"):
    import tifffile

    ome = tifffile.xml2dict(xml).get("OME", {})
    images = ome.get("Image", [])
    images = images if isinstance(images, list) else [images]
    pixels = images[index].get("Pixels", {}) if index < len(images) else {}
    spacing, problems = {}, []
    for axis in "ZYX":
        size = _read_sizes(lambda: file_pixel_size(
            pixels.get(f"PhysicalSize{axis}"), pixels.get(f"PhysicalSize{axis}Unit", "µm"), filename, axis,
            f"OME-XML PhysicalSize{axis}"), problems)
        if size is not None:
            spacing[axis] = size
    spacing.update({"problem": problems[0]} if problems else {})
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


def _transform_numbers(values, n: int, kind: str, filename: str) -> list:
    """An OME-Zarr scale or translation as ``n`` floats, or an InputFileError naming the file."""
    if not isinstance(values, (list, tuple)) or len(values) != n or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise InputFileError(f"{filename}: its OME-Zarr {kind} must be a list of {n} numbers, one per axis; "
                             f"got {values!r}")
    return [float(v) for v in values]


class BadPixelSize(InputFileError):
    """A file's pixel size that is 0, negative, not finite or in an unknown unit."""


def _read_sizes(read, problems: list) -> float | None:
    """``read()`` (a :func:`file_pixel_size` call), its refusal kept in ``problems`` instead."""
    try:
        return read()
    except BadPixelSize as exc:
        problems.append(str(exc))
        return None


def file_pixel_size(value, unit, filename: str, axis: str, source: str) -> float | None:
    """A pixel size read from a file, in micrometres; None for no value or a size in pixels.

    Refuses (InputFileError) a size of 0, a negative or non-finite one, and a unit that is
    not a length unit: such a file's radius would otherwise be read in pixels without a word
    (as a TIFF whose ``--spacing`` is 0 is refused)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    fix = f"give the pixel sizes with --spacing (spacing= in Python), or correct the file's {source}"
    if not (math.isfinite(number) and number > 0):
        raise BadPixelSize(f"{filename}: the {source} gives axis {axis} a pixel size of {value!r}; a pixel "
                             f"size must be a finite number > 0; {fix}")
    if unit is not None and str(unit).strip().lower() in ("pixel", "pixels", "px", "reference frame"):
        return None
    size = to_micrometres(number, unit)
    if size is None:
        raise BadPixelSize(f"{filename}: the {source} gives axis {axis} the unit {unit!r}, which is not a length "
                             f"unit (nm, µm, mm, cm, m, Å, or pixel); {fix}")
    return size
