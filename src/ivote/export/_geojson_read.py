"""Reading GeoJSON features (QuPath's exports, napari-ivote's) with exact decimal coordinates.

Its own module, importing nothing of napari-ivote but its errors, so that the points reader of
``ivote.io`` can read QuPath points without ``ivote.io`` and ``ivote.export`` importing each other.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, localcontext
from pathlib import Path

import numpy as np

from ..errors import InputFileError, IvoteError

__all__ = ["load_features", "read_geojson_points"]

_HALF = Decimal("0.5")


def unshifted(number) -> float:
    """A coordinate read from the file (Decimal or int) minus 0.5, as the nearest float: QuPath's
    pixel-corner origin to pixel centres on integers."""
    with localcontext() as context:
        context.prec = 400  # exact for any double's text
        return float(Decimal(number) - _HALF)


def load_features(path) -> list:
    """The features of a GeoJSON file (a FeatureCollection, a Feature, or a list of Features as
    QuPath writes for several objects without the FeatureCollection option); numbers with a
    fraction are read as Decimal."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"GeoJSON file is a folder, not a file: {path}")
    if not path.is_file():
        raise FileNotFoundError(f"GeoJSON file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"), parse_float=Decimal)
    except UnicodeDecodeError:
        raise InputFileError(f"{path}: not a UTF-8 text file; expected GeoJSON") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}, line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})") from None
    if isinstance(data, dict) and data.get("type") == "FeatureCollection":
        features = data.get("features")
    elif isinstance(data, dict) and data.get("type") == "Feature":
        features = [data]
    elif isinstance(data, list):
        features = data
    else:
        features = None
    if not isinstance(features, list) or not all(isinstance(f, dict) for f in features):
        raise InputFileError(f"{path}: expected a GeoJSON FeatureCollection (or a list of Features), as QuPath's "
                             "'Export as GeoJSON' writes")
    return features


def _number(value, path, what) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise InputFileError(f"{path}: {what} {value!r} is not a number")
    if not Decimal(value).is_finite():
        raise InputFileError(f"{path}: {what} {value!r} is not finite")
    return Decimal(value)


def measurement_dict(properties) -> dict:
    """``properties.measurements`` as a dict (QuPath 0.4+: an object; 0.2-0.3: a list of {name, value})."""
    found = properties.get("measurements") if isinstance(properties, dict) else None
    if isinstance(found, list):
        found = {m.get("name"): m.get("value") for m in found if isinstance(m, dict)}
    return found if isinstance(found, dict) else {}


def read_geojson_points(path) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(points, scores or None, times or None)`` of the Point and MultiPoint features of a
    GeoJSON file (see :func:`ivote.export.read_points_geojson`)."""
    features = load_features(path)
    rows, scores, planes, frames, third = [], [], [], [], []
    for index, feature in enumerate(features):
        geometry = feature.get("geometry") or {}
        kind = geometry.get("type")
        if kind not in ("Point", "MultiPoint"):
            continue
        coordinates = geometry.get("coordinates")
        points = [coordinates] if kind == "Point" else coordinates
        if not isinstance(points, list) or not all(isinstance(p, list) and len(p) in (2, 3) for p in points):
            raise InputFileError(f"{path}: feature {index}: {kind} coordinates must be [x, y] (or [x, y, z]); "
                                 f"got {coordinates!r}")
        plane = geometry.get("plane") if isinstance(geometry.get("plane"), dict) else {}
        score = measurement_dict(feature.get("properties")).get("score")
        for point in points:
            x, y = (_number(v, path, f"feature {index}: coordinate") for v in point[:2])
            rows.append((unshifted(y), unshifted(x)))
            third.append(float(_number(point[2], path, f"feature {index}: z")) if len(point) == 3 else None)
            planes.append(int(plane.get("z", 0) or 0))
            frames.append(int(plane.get("t", 0) or 0))
            scores.append(float(score) if isinstance(score, (int, Decimal)) and not isinstance(score, bool)
                          else math.nan)
    if not rows:
        kinds = sorted({str((f.get("geometry") or {}).get("type")) for f in features})
        raise IvoteError(f"{path}: no Point features (found {', '.join(kinds) or 'no features'}); expected "
                         "QuPath points or 'ivote export --to geojson' of a points table")
    points = np.array(rows, dtype=np.float64)
    if any(z is not None for z in third) or any(planes):
        z = np.array([t if t is not None else float(p) for t, p in zip(third, planes)])
        points = np.column_stack([z, points])
    score_array = np.array(scores)
    times = np.array(frames, dtype=np.int64) if any(frames) else None
    return points, (None if np.isnan(score_array).all() else score_array), times
