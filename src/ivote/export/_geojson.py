"""QuPath-compatible GeoJSON: nuclei as detections (points or outlines), QuPath points and annotations read back.

QuPath's conventions (QuPath 0.4 and later, ``File > Object data > Import/Export as GeoJSON``):

* a ``FeatureCollection`` of ``Feature`` objects; ``properties.objectType`` is ``"detection"``
  for nuclei (``"annotation"`` for regions drawn by hand), ``properties.measurements`` a flat
  object of numbers, ``properties.classification`` ``{"name": ..., "color": [r, g, b]}``;
* coordinates ``[x, y]`` in pixels of the full-resolution image (level 0), the origin at the
  top-left *corner* of the top-left pixel, so the centre of pixel ``(row, col)`` is
  ``[col + 0.5, row + 0.5]``;
* the Z plane (and time point) of a 3D object in ``geometry.plane``: ``{"c": -1, "z": z, "t": t}``.

napari-ivote's pixel coordinates put pixel centres on integers (NumPy, scikit-image, napari),
so export adds half a pixel and import takes it away. Point coordinates are written as the
exact decimal sum of their shortest text and 0.5, and read with decimal arithmetic, so a
point written and read back is the same float.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, localcontext
from pathlib import Path

import numpy as np

from .._atomic import write_atomic
from ..errors import InputFileError, IvoteError
from ._geojson_read import load_features

__all__ = ["Region", "geojson_text", "outlines_features", "points_features", "read_points_geojson",
           "read_regions_geojson", "write_outlines_geojson", "write_points_geojson"]

_HALF = Decimal("0.5")


class _Raw(str):
    """JSON text written as it is (coordinates, built exactly)."""


def _shifted(value: float) -> _Raw:
    """``value + 0.5`` as exact decimal text: ``float(Decimal(text) - 0.5) == value``."""
    with localcontext() as context:
        context.prec = 400  # enough for any double's shortest text plus 0.5, so the sum is exact
        text = str(Decimal(repr(float(value))) + _HALF)
    return _Raw(text)


def _dump(value) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_dump(v) for v in value) + "]"
    if isinstance(value, (np.integer, np.bool_)):
        value = value.item()
    if isinstance(value, (float, np.floating)):
        value = float(value)
    return json.dumps(value, allow_nan=False)


def geojson_text(features) -> str:
    """A FeatureCollection of ``features`` as JSON text, one feature per line."""
    lines = ",\n".join(_dump(feature) for feature in features)
    return '{"type": "FeatureCollection", "features": [\n' + lines + ("\n" if lines else "") + "]}\n"


def _measurements(columns: dict | None, row: int) -> dict:
    """One row of a column table as QuPath measurements: numbers only, NaN left out."""
    if not columns:
        return {}
    out = {}
    for name, values in columns.items():
        values = np.asarray(values)
        if values.dtype.kind in "iu":
            out[name] = int(values[row])
        elif values.dtype.kind in "fb":
            value = float(values[row])
            if math.isfinite(value):
                out[name] = value
    return out


def _plane(z=None, t=None) -> dict:
    return {"c": -1, "z": int(z or 0), "t": int(t or 0)}


def _check_points(points, scores, times):
    points = np.asarray(points, dtype=np.float64)
    if points.size == 0:
        points = points.reshape(0, points.shape[1] if points.ndim == 2 else 2)
    if points.ndim != 2 or points.shape[1] not in (2, 3):
        raise ValueError(f"points must be an (N, 2) or (N, 3) array of pixel coordinates; got shape {points.shape}")
    if not np.isfinite(points).all():
        row = int(np.flatnonzero(~np.isfinite(points).all(axis=1))[0])
        raise IvoteError(f"points must be finite; row {row} is {points[row].tolist()}")
    if scores is not None:
        scores = np.asarray(scores, dtype=np.float64).ravel()
        if len(scores) != len(points):
            raise ValueError(f"scores must have one value per point ({len(points)}); got {len(scores)}")
    if times is not None:
        times = np.asarray(times).ravel()
        if len(times) != len(points):
            raise ValueError(f"times must have one frame per point ({len(points)}); got {len(times)}")
    return points, scores, times


def points_features(points, scores=None, *, times=None, measurements: dict | None = None,
                    classification: str | None = None) -> list[dict]:
    """GeoJSON Point features (QuPath detections) for points in pixel coordinates.

    Parameters
    ----------
    points : (N, 2) or (N, 3) array_like
        Pixel coordinates ``(y, x)`` or ``(z, y, x)``, pixel centres on integers.
    scores : (N,) array_like, optional
        Detection scores: the ``score`` measurement (NaN: left out).
    times : (N,) array_like of int, optional
        The frame of each point (QuPath's ``t`` plane).
    measurements : dict of str to (N,) array, optional
        More per-point numbers for ``properties.measurements``.
    classification : str, optional
        QuPath class name of every point (e.g. ``"Nucleus"``).

    Returns
    -------
    list of dict
        Features whose coordinates are exact JSON text (see :func:`geojson_text`). A 3D point
        is ``[x, y, z]`` with its plane ``round(z)`` in ``geometry.plane``.
    """
    points, scores, times = _check_points(points, scores, times)
    columns = dict(measurements or {})
    if scores is not None:
        columns = {"score": scores, **columns}
    features = []
    for i, point in enumerate(points):
        coordinates = [_shifted(point[-1]), _shifted(point[-2])]
        geometry: dict = {"type": "Point"}
        if points.shape[1] == 3:
            coordinates.append(_Raw(repr(float(point[0]))))  # Z: a plane index, not a pixel edge
        geometry["coordinates"] = coordinates
        if points.shape[1] == 3 or times is not None:
            geometry["plane"] = _plane(round(point[0]) if points.shape[1] == 3 else 0,
                                       times[i] if times is not None else 0)
        properties: dict = {"objectType": "detection", "isLocked": False}
        if classification:
            properties["classification"] = {"name": str(classification)}
        found = _measurements(columns, i)
        if found:
            properties["measurements"] = found
        features.append({"type": "Feature", "geometry": geometry, "properties": properties})
    return features


def _ring_xy(ring: np.ndarray) -> list:
    # vertices are on half pixels: the sum is exact in binary, repr is its shortest text
    return [[_Raw(repr(float(x) + 0.5)), _Raw(repr(float(y) + 0.5))] for y, x in ring]


def _oriented(ring: np.ndarray, exterior: bool) -> np.ndarray:
    """RFC 7946's winding in the x, y numbers written: exteriors counter-clockwise, holes clockwise."""
    from ._outlines import _signed_area

    positive = _signed_area(ring) > 0
    return ring if positive == exterior else ring[::-1]


def outlines_features(outlines, *, measurements: dict | None = None, classification: str | None = None) -> list[dict]:
    """GeoJSON Polygon (or MultiPolygon, for a label in pieces) features, one per label and plane.

    ``outlines`` are :func:`ivote.export.label_outlines`'s; ``measurements`` a column table
    with a ``label`` column (such as :func:`ivote.measure_nuclei`'s): each outline gets its
    label's row as ``properties.measurements``. Every feature has the ``label`` measurement.
    """
    rows = {}
    if measurements:
        if "label" not in measurements:
            raise ValueError("measurements must have a 'label' column to match the outlines")
        rows = {int(label): i for i, label in enumerate(np.asarray(measurements["label"]))}
    features = []
    for outline in outlines:
        polygons = [[_ring_xy(_oriented(exterior, True))] + [_ring_xy(_oriented(h, False)) for h in holes]
                    for exterior, holes in outline.polygons]
        geometry: dict = ({"type": "Polygon", "coordinates": polygons[0]} if len(polygons) == 1
                          else {"type": "MultiPolygon", "coordinates": polygons})
        if outline.plane is not None:
            geometry["plane"] = _plane(outline.plane)
        properties: dict = {"objectType": "detection", "isLocked": False}
        if classification:
            properties["classification"] = {"name": str(classification)}
        found = {"label": int(outline.label)}
        if outline.label in rows:
            found.update(_measurements(measurements, rows[outline.label]))
        properties["measurements"] = found
        features.append({"type": "Feature", "geometry": geometry, "properties": properties})
    return features


def write_points_geojson(path, points, scores=None, *, times=None, measurements=None,
                         classification: str | None = None) -> Path:
    """Write points (pixel coordinates) as a QuPath GeoJSON FeatureCollection of Point detections, atomically.

    See :func:`points_features` for the parameters; :func:`read_points_geojson` reads the
    points back exactly.

    Examples
    --------
    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "nuclei.geojson")
    >>> _ = write_points_geojson(path, [[10.0, 20.0]], [0.9])
    >>> feature = json.load(open(path))["features"][0]
    >>> feature["geometry"], feature["properties"]["measurements"]
    ({'type': 'Point', 'coordinates': [20.5, 10.5]}, {'score': 0.9})
    """
    text = geojson_text(points_features(points, scores, times=times, measurements=measurements,
                                        classification=classification))
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_outlines_geojson(path, labels, *, spacing=None, translate=None, units: str | None = "um",
                           measurements=True, classification: str | None = None) -> Path:
    """Write the outline of every label as QuPath GeoJSON Polygon detections, atomically.

    Parameters
    ----------
    path : path-like
        Output ``.geojson``.
    labels : (Y, X) or (Z, Y, X) int array
        Label image; a 3D one gives one feature per label and Z plane (``geometry.plane.z``).
        A lazy 2D one (Dask, Zarr: a whole slide's labels) is read band by band of rows.
    spacing, translate, units
        Pixel size, position and unit for the measurements (:func:`ivote.measure_nuclei`).
    measurements : bool or dict
        True: each feature carries its nucleus' :func:`ivote.measure_nuclei` row (area, diameter,
        solidity...); a dict: that column table; False: only the label.
    classification : str, optional
        QuPath class name of every nucleus.
    """
    from ._bands import outline_batches

    batches = outline_batches(labels, spacing=spacing, translate=translate, units=units, measurements=measurements)
    return write_outline_batches_geojson(path, batches, classification=classification)


def write_outline_batches_geojson(path, batches, *, classification: str | None = None) -> Path:
    """Write ``(outlines, measurements)`` batches as one FeatureCollection, streamed, atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write('{"type": "FeatureCollection", "features": [\n')
            separator = ""
            for outlines, table in batches:
                for feature in outlines_features(outlines, measurements=table, classification=classification):
                    fh.write(separator + _dump(feature))
                    separator = ",\n"
            fh.write(("\n" if separator else "") + "]}\n")

    return write_atomic(path, write)


def read_points_geojson(path):
    """Read the Point (and MultiPoint) features of a GeoJSON file, such as QuPath's points or
    :func:`write_points_geojson`'s, as an :class:`ivote.io.PointsTable` of pixel coordinates.

    QuPath's ``[x, y]`` (pixel corners at integers) become ``(y, x)`` with pixel centres on
    integers; a third coordinate, or else ``geometry.plane.z`` when some point is off plane 0,
    gives ``z``; ``geometry.plane.t`` gives the frames when some point is off frame 0. The
    ``score`` measurement gives the scores. Features of other geometries (outlines, regions)
    are skipped; a file with no point at all is an error. The table has no scale or translate
    (QuPath's coordinates are pixels: the image's pixel sizes apply).
    """
    from ..io import PointsTable
    from ._geojson_read import read_geojson_points

    points, scores, times = read_geojson_points(path)
    return PointsTable(points, scores, None, None, "pixel", times, tuple("zyx"[-points.shape[1]:]))


class Region:
    """An annotated region read from GeoJSON: its name and its shapely geometry in napari-ivote
    pixel coordinates (``x`` = column, ``y`` = row, pixel centres on integers)."""

    def __init__(self, name: str, geometry):
        self.name = name
        self.geometry = geometry

    def __repr__(self) -> str:
        return f"Region({self.name!r}, area {self.geometry.area:.6g} px²)"


def _shapely():
    try:
        import shapely
    except ImportError:
        raise ImportError("regions from GeoJSON need shapely: pip install 'napari-ivote[export]' "
                          "(or pip install shapely)") from None
    return shapely


def read_regions_geojson(path) -> list[Region]:
    """Read the Polygon and MultiPolygon features of a GeoJSON file (QuPath annotations such as
    'Tumor' and 'Stroma') as regions, one per name.

    A feature's name is its QuPath classification's name, else its ``name`` property, else
    ``region <n>``; features of one name are merged. Coordinates are shifted by half a pixel
    into napari-ivote's pixel convention. Point and line features, and QuPath detections, cells
    and tiles (``objectType``), are skipped. Invalid rings
    (self-crossing, as hand-drawn ones can be) are repaired with shapely's ``make_valid``.
    """
    shapely = _shapely()
    from shapely import affinity
    from shapely.geometry import shape

    features = load_features(path)
    merged: dict[str, list] = {}
    for index, feature in enumerate(features):
        geometry = feature.get("geometry") or {}
        if geometry.get("type") not in ("Polygon", "MultiPolygon"):
            continue
        properties = feature.get("properties") if isinstance(feature.get("properties"), dict) else {}
        if properties.get("objectType", properties.get("object_type")) in ("detection", "cell", "tile"):
            continue  # nuclei or tiles, not regions
        classification = properties.get("classification")
        name = classification.get("name") if isinstance(classification, dict) else classification
        name = name or properties.get("name") or f"region {index + 1}"
        try:
            plain = json.loads(json.dumps({"type": geometry["type"], "coordinates": geometry.get("coordinates")},
                                          default=float))
            polygon = shape(plain)
        except Exception as exc:  # noqa: BLE001 (shapely raises several kinds for bad coordinates)
            raise InputFileError(f"{path}: feature {index} ({name}): not a valid {geometry['type']}: {exc}") from None
        if not polygon.is_valid:
            polygon = shapely.make_valid(polygon)
        merged.setdefault(str(name), []).append(affinity.translate(polygon, -0.5, -0.5))
    if not merged:
        raise IvoteError(f"{path}: no Polygon or MultiPolygon annotations; expected QuPath annotations "
                         "(File > Object data > Export as GeoJSON, annotations)")
    return [Region(name, shapely.union_all(parts)) for name, parts in merged.items()]
