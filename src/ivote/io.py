"""Reading images and reading/writing point tables, with atomic writes.

Point tables are CSV files with a header: pixel coordinates (``z,y,x`` or
``y,x``), ``score`` when known, and world coordinates (``z_um,y_um,x_um``, named
after the unit) when a spacing is known. Comment lines starting with ``#`` at
the top carry the scale, translate and unit, so a table read back restores the
points exactly (coordinates are written with 17 significant digits).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._atomic import Terminated, write_atomic  # noqa: F401 (both public here, written in _atomic)
from ._units import unit_symbol
from .errors import InputFileError, IvoteError

__all__ = [
    "AxesError",
    "ImageFile",
    "PointsTable",
    "check_input_file",
    "check_output_path",
    "open_image",
    "read_image",
    "read_points_csv",
    "write_atomic",
    "write_image",
    "write_points_csv",
    "write_points_parquet",
]

_AXES = "zyx"


def __getattr__(name):  # the file readers load bioio and Dask: only when asked for
    if name in ("AxesError", "ImageFile", "open_image", "write_image"):
        from . import _files

        return getattr(_files, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_input_file(path, what: str) -> Path:
    """``path`` as a Path if it is a file; else FileNotFoundError ("{what} not found") or
    IsADirectoryError (a folder was given)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{what} is a folder, not a file: {path}")
    if not path.is_file():
        if path.exists():
            from ._files import not_regular_file

            raise not_regular_file(path, what)
        raise FileNotFoundError(f"{what} not found: {path}")
    return path


def check_output_path(path, suffixes: tuple[str, ...] = (), *, name: str = "--out", inputs=()) -> Path:
    """Check an output path before any work: its folder exists, its suffix is one of ``suffixes``,
    it is not a folder, and it is none of the ``inputs`` (the result would replace the input)."""
    path = Path(path)
    for source in inputs:
        if source is not None and _same_file(path, Path(source)):
            raise ValueError(f"{name} {path} is also an input ({source}); writing it would replace that input: "
                             "give another output name")
    if suffixes and path.suffix.lower() not in suffixes:
        raise ValueError(f"{name} must end in {' or '.join(suffixes)}; got {path.name!r}")
    if path.is_dir() and not (path.suffix.lower() == ".zarr" and (not suffixes or ".zarr" in suffixes)):
        raise IsADirectoryError(f"{name}: {path} is a folder; give a file name inside it")
    if path.is_dir():  # an existing .zarr output: replaced atomically (write_image), as files are
        from ._atomic import is_zarr_store

        if not is_zarr_store(path):
            raise IsADirectoryError(f"{name}: {path} is a folder but not a Zarr store: not replacing it; "
                                    "give another name, or remove the folder")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"{name}: output folder does not exist: {folder}")
    return path


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (or folder, for Zarr): the same inode when both exist
    (hard and symbolic links, other spellings), else the same absolute path."""
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b) or a.resolve() == b.resolve()
    except OSError:
        return False


def read_image(path, *, axes: str | None = None, channel=None, scene=None) -> tuple[np.ndarray, tuple[float, ...] | None]:
    """Read the nuclear stain of an image file; return ``(array, spacing or None)``.

    The file's metadata names the axes (OME-TIFF, OME-Zarr, ImageJ, the
    photometric tag; see :func:`ivote.open_image`); ``axes`` names them where it
    does not, ``channel`` picks the nuclear stain of a multi-channel image,
    ``scene`` a scene of a multi-scene file. The array is ``[T][Z]YX`` or
    ``[T]YXS`` (RGB, scaled by its real range); the spacing is in micrometres
    per spatial axis, None when the file gives no pixel size.
    """
    from ._files import read_for_detection

    array, image = read_for_detection(path, axes=axes, channel=channel, scene=scene)
    return array, image.known_spacing()


@dataclass(frozen=True)
class PointsTable:
    """A table of points as read from CSV."""

    points: np.ndarray
    """(N, ndim) float64 pixel coordinates."""
    scores: np.ndarray | None
    """(N,) float64 scores, or None when the file has no ``score`` column."""
    spacing: tuple[float, ...] | None
    """Pixel size along each axis (the layer's scale), or None."""
    translate: tuple[float, ...] | None
    """World position of pixel 0, or None."""
    units: str | None
    times: np.ndarray | None = None
    """(N,) int64 frame of each point (the ``t`` column of a time-lapse), or None."""
    columns: tuple = ()
    """The file's columns read as the pixel coordinates, in order: ``('y', 'x')``, or napari's
    ``('axis-0', 'axis-1')``."""

    @property
    def world(self) -> np.ndarray:
        """World coordinates: ``points * spacing + translate``."""
        scale = np.asarray(self.spacing if self.spacing else (1.0,) * self.points.shape[1])
        shift = np.asarray(self.translate if self.translate else (0.0,) * self.points.shape[1])
        return self.points * scale + shift


def write_points_csv(path, points, scores=None, *, spacing=None, translate=None, units: str | None = "um",
                     times=None, radius: float | None = None, radius_estimated: bool = False) -> Path:
    """Write points (pixel coordinates) and their scores to CSV, atomically.

    The columns are the same for every table of one dimensionality: ``t`` (the
    frame, with ``times``), the pixel coordinates, ``score`` (``nan`` when
    unknown) and the physical coordinates ``points * spacing + translate``,
    named after the unit (``y_um``; ``y_px`` with neither spacing nor
    translate). ``#`` lines at the top carry the scale, translate and unit, so
    ``pandas.read_csv(path, comment="#")`` and napari's reader read it.

    Parameters
    ----------
    path : path-like
        Output file; replaced in one rename, never left half-written.
    points : (N, ndim) array_like
        Pixel coordinates (``y, x`` or ``z, y, x``).
    scores : (N,) array_like, optional
        One score per point.
    spacing, translate : sequence of float, optional
        The layer's scale and translate along the spatial axes.
    units : str, optional
        Unit of the physical coordinates (default ``'um'``).
    times : (N,) array_like of int, optional
        The frame of each point, for a time-lapse.
    radius : float, optional
        The detection radius (physical units), kept in a ``# radius`` line so
        a viewer can draw the points at the nuclei's size.
    radius_estimated : bool
        The radius was estimated from the image (``radius="auto"``): a
        ``# radius_estimated: true`` line says so.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "points.csv")
    >>> _ = write_points_csv(path, [[1.5, 2.0]], [0.9], spacing=(0.5, 0.5))
    >>> open(path).read().splitlines()[-2:]
    ['y,x,score,y_um,x_um', '1.5,2.0,0.9,0.75,1.0']
    """
    header, columns, meta = _points_columns(points, scores, spacing, translate, units, times, radius,
                                            radius_estimated)
    n_rows = len(columns[0])
    is_time = header[0] == "t"

    def fmt(v: float) -> str:
        return repr(float(v))  # shortest text that reads back to the same float

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            for key, value in meta.items():
                fh.write(f"# {key}: {value if isinstance(value, str) else ','.join(fmt(v) for v in value)}\n")
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(header)
            for i in range(n_rows):
                row = [fmt(c[i]) for c in columns]
                if is_time:
                    row[0] = str(int(columns[0][i]))
                writer.writerow(row)

    return write_atomic(path, write)


def write_points_parquet(path, points, scores=None, *, spacing=None, translate=None, units: str | None = "um",
                         times=None, radius: float | None = None, radius_estimated: bool = False) -> Path:
    """:func:`write_points_csv`'s table as Parquet (needs ``pyarrow``); the scale,
    translate, unit and radius are in the file's key-value metadata."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("Parquet output needs pyarrow: pip install pyarrow (or write .csv)") from None
    import json

    header, columns, meta = _points_columns(points, scores, spacing, translate, units, times, radius,
                                            radius_estimated)
    table = pa.table({h: (np.asarray(c, np.int64) if h == "t" else np.asarray(c, np.float64))
                      for h, c in zip(header, columns)})
    table = table.replace_schema_metadata({"ivote": json.dumps({k: v if isinstance(v, str) else list(v)
                                                                for k, v in meta.items()})})
    return write_atomic(path, lambda tmp: pq.write_table(table, tmp))


def _points_columns(points, scores, spacing, translate, units, times, radius=None, radius_estimated=False):
    """Header, columns and ``#`` metadata of a points table (see :func:`write_points_csv`)."""
    points = np.asarray(points, dtype=np.float64)
    if points.size == 0:
        ndim = len(spacing) if spacing is not None else (points.shape[1] if points.ndim == 2 else 2)
        points = points.reshape(0, ndim)
    if points.ndim != 2 or points.shape[1] not in (2, 3):
        raise ValueError(f"points must be an (N, 2) or (N, 3) array; got shape {points.shape}")
    ndim = points.shape[1]
    axes = list(_AXES[-ndim:])
    if scores is None:
        scores = np.full(len(points), np.nan)
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if len(scores) != len(points):
        raise ValueError(f"scores must have one value per point ({len(points)}); got {len(scores)}")
    spacing = None if spacing is None else tuple(float(s) for s in spacing)
    translate = None if translate is None else tuple(float(t) for t in translate)
    for name, value in (("spacing", spacing), ("translate", translate)):
        if value is not None and len(value) != ndim:
            raise ValueError(f"{name} must have {ndim} values for {ndim}D points; got {value}")
        if value is not None and not all(math.isfinite(v) for v in value):
            raise IvoteError(f"{name} must be finite; got {value}")
    # refused here, not when the table is read back (a NaN score means "no score")
    for name, bad in (("points", ~np.isfinite(points).all(axis=1)), ("scores", np.isinf(scores))):
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = (points if name == "points" else scores)[row]
            raise IvoteError(f"{name} must be finite; row {row} is {np.asarray(value).tolist()} "
                             f"({int(bad.sum())} row(s) with {'NaN or ' if name == 'points' else ''}infinite values)")
    if spacing is None and translate is None:
        units = "pixel"
    suffix = unit_symbol(units) or "world"
    world = points * np.asarray(spacing or (1.0,) * ndim) + np.asarray(translate or (0.0,) * ndim)
    header = axes + ["score"] + [f"{a}_{suffix}" for a in axes]
    columns = [points[:, i] for i in range(ndim)] + [scores] + [world[:, i] for i in range(ndim)]
    if times is not None:
        times = np.asarray(times).ravel()
        if len(times) != len(points) or (times.size and (times.dtype.kind not in "iuf" or (times < 0).any()
                                                         or (times != np.round(times)).any())):
            raise ValueError(f"times must be one frame index >= 0 per point ({len(points)}); got {times!r}")
        header, columns = ["t"] + header, [times.astype(np.int64)] + columns
    meta: dict = {}
    if spacing is not None:
        meta["scale"] = spacing
    if translate is not None:
        meta["translate"] = translate
    if units:
        meta["units"] = units
    if radius is not None:
        meta["radius"] = (float(radius),)
        if radius_estimated:
            meta["radius_estimated"] = "true"
    return header, columns, meta


def read_points_csv(path) -> PointsTable:
    """Read a CSV written by :func:`write_points_csv` (or ``ivote detect``), or by napari.

    Pixel coordinates come from the ``z,y,x`` / ``y,x`` columns. Lines starting
    with ``#`` before the header carry ``key: value`` metadata; other ``#``
    lines and blank lines are skipped; a UTF-8 byte-order mark is ignored.
    Errors name the file, line and column.

    napari's own points CSV (``index,axis-0,axis-1[,axis-2],<features>``, what
    napari's File > Save writes for a Points layer) is read too: its ``axis-*``
    columns as ``y, x`` or ``z, y, x`` pixel coordinates, its ``score`` feature
    as the scores, other features ignored; it keeps no scale or translate. A
    ``UserWarning`` says which columns were read.

    A ``.geojson`` (or ``.json``) file is read as QuPath points
    (:func:`ivote.export.read_points_geojson`).
    """
    if Path(path).suffix.lower() in (".geojson", ".json"):
        from .export._geojson_read import read_geojson_points

        points, scores, times = read_geojson_points(path)
        return PointsTable(points, scores, None, None, "pixel", times, tuple(_AXES[-points.shape[1]:]))
    path = check_input_file(path, "points file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not a UTF-8 text file (byte {exc.object[exc.start]:#04x} at offset "
                             f"{exc.start}); save the table as UTF-8 CSV") from None
    meta: dict[str, tuple[int, str]] = {}
    numbered = []  # (line number, row) of the header and the data
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            key, colon, value = line.lstrip()[1:].partition(":")
            if colon and not numbered:
                meta[key.strip().lower()] = (number, value.strip())
            continue
        if line.strip():
            numbered.append((number, next(csv.reader([line]))))
    if not numbered:
        raise IvoteError(f"{path}: no header row; expected columns like 'y,x,score'")
    header_line, raw_header = numbered[0]
    header = [h.strip().lower() for h in raw_header]
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise IvoteError(f"{path}, line {header_line}: column(s) {', '.join(map(repr, duplicated))} appear more "
                         f"than once in the header {raw_header}; each column must be named once")
    axes = [a for a in _AXES if a in header]
    columns = axes
    numeric = range(len(header))  # our tables: every column is a number
    napari_layout = header[:2] == ["index", "axis-0"]  # napari's, whose features may be named 'y', 'x' or 't'
    if napari_layout or len(axes) not in (2, 3) or axes != list(_AXES[-len(axes):]):
        columns = _napari_axis_columns(path, header_line, header, raw_header)
        axes = list(_AXES[-len(columns):])
        score = "score" if "score" in header else None
        numeric = sorted(header.index(c) for c in columns + [score] if c)  # features may be text
        warnings.warn(f"{path.name} is napari's points CSV: read columns {', '.join(columns)}"
                      f"{' and score' if score else ''} as pixel coordinates {', '.join(axes)}"
                      f"{' and scores' if score else ''}; it keeps no scale or translate (the image's pixel "
                      "sizes apply)", UserWarning, stacklevel=2)
    score_column = header.index("score") if "score" in header else None
    data = np.full((len(numbered) - 1, len(header)), np.nan)
    for i, (number, row) in enumerate(numbered[1:]):
        if len(row) != len(header):
            raise IvoteError(f"{path}, line {number}: {len(row)} value(s), but the header on line {header_line} "
                             f"has {len(header)} columns ({','.join(raw_header)})")
        for j in numeric:
            value = row[j]
            try:
                data[i, j] = float(value)
            except ValueError:
                raise IvoteError(f"{path}, line {number}, column {raw_header[j].strip()!r}: {value!r} is not a "
                                 "number") from None
            if not math.isfinite(data[i, j]) and not (j == score_column and math.isnan(data[i, j])):
                raise IvoteError(f"{path}, line {number}, column {raw_header[j].strip()!r}: {value!r}; "
                                 "coordinates must be finite (a score may be nan: unknown)")
    points = data[:, [header.index(c) for c in columns]]
    scores = data[:, score_column] if score_column is not None else None
    if scores is not None and len(scores) and np.isnan(scores).all():
        scores = None
    times = None
    if "t" in header and columns == axes:  # napari's CSV: a feature 't' is not our frame column
        times = data[:, header.index("t")]
        if (times < 0).any() or (times != np.round(times)).any():
            raise IvoteError(f"{path}: the 't' column must hold frame indices (integers >= 0)")
        times = times.astype(np.int64)

    def parse(key):
        if key not in meta:
            return None
        number, text = meta[key]
        form = f"'# {key}: ' and {len(axes)} finite numbers separated by commas, e.g. '# {key}: " + ",".join(
            ["1.0"] * len(axes)) + "'"
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            raise IvoteError(f"{path}, line {number}: cannot read {text!r}; expected {form}") from None
        if len(values) != len(axes) or not all(math.isfinite(v) for v in values):
            raise IvoteError(f"{path}, line {number}: got {text!r}; expected {form}")
        if key == "scale" and not all(v > 0 for v in values):
            raise IvoteError(f"{path}, line {number}: the scale must be positive; got {text!r}")
        return values

    units = meta.get("units")
    return PointsTable(points, scores, parse("scale"), parse("translate"), units[1] if units else None, times,
                       tuple(columns))


_NAPARI_COLUMNS = "'index,axis-0,axis-1' or 'index,axis-0,axis-1,axis-2', then features"
_EXPECTED_COLUMNS = f"pixel columns 'y,x' or 'z,y,x' (napari-ivote's CSV) or {_NAPARI_COLUMNS} (napari's points CSV)"


def _napari_axis_columns(path, header_line: int, header: list, raw_header: list) -> list:
    """The ``axis-0, axis-1[, axis-2]`` columns of napari's points CSV, in order; an error naming
    the expected columns for any other header."""
    where = f"{path}, line {header_line}"
    numbers = sorted(int(m.group(1)) for h in header if (m := re.fullmatch(r"axis-(\d+)", h)))
    if numbers != list(range(len(numbers))) or len(numbers) < 2:
        raise IvoteError(f"{where}: expected pixel columns 'y,x' or 'z,y,x' in the header; got {raw_header} "
                         f"(napari's points CSV is read too: {_NAPARI_COLUMNS})")
    if "shape-type" in header:
        raise IvoteError(f"{where}: this is napari's shapes CSV, not points; expected {_EXPECTED_COLUMNS}")
    if len(numbers) not in (2, 3):
        raise IvoteError(f"{where}: napari's points CSV with {len(numbers)} axes (axis-0..axis-{len(numbers) - 1}) "
                         f"cannot be read: which axis is time or a channel is not written in it; expected "
                         f"{_EXPECTED_COLUMNS} (save a time-lapse's points with napari-ivote's writer: a 't' column)")
    return [f"axis-{n}" for n in numbers]
