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
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["PointsTable", "check_output_path", "read_image", "read_points_csv", "write_atomic", "write_points_csv"]

_AXES = "zyx"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_output_path(path, suffixes: tuple[str, ...] = (), *, name: str = "--out") -> Path:
    """Check an output path before any work: its folder exists, its suffix is one of ``suffixes``."""
    path = Path(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise ValueError(f"{name} must end in {' or '.join(suffixes)}; got {path.name!r}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"{name}: output folder does not exist: {folder}")
    return path


def write_atomic(path, write: Callable[[Path], None]) -> Path:
    """Write a file so that ``path`` is either untouched or complete.

    ``write(tmp_path)`` writes the content to a temporary file in the same folder,
    which then replaces ``path`` in one rename. On any error the temporary file
    is removed and ``path`` keeps its old content.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"output folder does not exist: {folder}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        # mkstemp makes the file owner-only; give it the mode a plain open() would
        os.chmod(tmp_path, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def read_image(path) -> tuple[np.ndarray, tuple[float, ...] | None]:
    """Read a TIFF or PNG image; return ``(array, spacing or None)``.

    The spacing is taken from ImageJ metadata (``spacing`` for z, resolution for
    y and x) or from a ``spacing`` entry that napari-ivote wrote; otherwise None.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"input image not found: {path}")
    suffix = path.suffix.lower()
    if suffix in (".tif", ".tiff"):
        import tifffile

        with tifffile.TiffFile(path) as tif:
            array = tif.asarray()
            spacing = _tiff_spacing(tif, array)
        return array, spacing
    if suffix in (".png", ".jpg", ".jpeg", ".bmp"):
        from skimage.io import imread

        return np.asarray(imread(path)), None
    raise ValueError(f"input must be a TIFF or PNG image; got {path.name!r}")


def _tiff_spacing(tif, array) -> tuple[float, ...] | None:
    import json

    page = tif.pages[0]
    description = getattr(page, "description", "") or ""
    if description.startswith("{"):
        try:
            meta = json.loads(description)
        except ValueError:
            meta = {}
        spacing = meta.get("spacing")
        if spacing is not None:
            return tuple(float(s) for s in spacing)
    ij = tif.imagej_metadata
    if ij:
        tags = page.tags
        res = tags.get("XResolution"), tags.get("YResolution")
        if all(res):
            xres = res[0].value[1] / res[0].value[0]
            yres = res[1].value[1] / res[1].value[0]
            if "spacing" in ij and array.ndim >= 3:
                return (float(ij["spacing"]), yres, xres)
            return (yres, xres)
    return None


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

    @property
    def world(self) -> np.ndarray:
        """World coordinates: ``points * spacing + translate``."""
        scale = np.asarray(self.spacing if self.spacing else (1.0,) * self.points.shape[1])
        shift = np.asarray(self.translate if self.translate else (0.0,) * self.points.shape[1])
        return self.points * scale + shift


def _unit_suffix(units: str | None) -> str:
    if not units or units in ("pixel", "px"):
        return "world"
    return {"micrometer": "um", "µm": "um", "micron": "um", "nanometer": "nm", "millimeter": "mm"}.get(units, units)


def write_points_csv(path, points, scores=None, *, spacing=None, translate=None, units: str | None = "um") -> Path:
    """Write points (pixel coordinates) and their scores to CSV, atomically.

    Parameters
    ----------
    path : path-like
        Output file; replaced in one rename, never left half-written.
    points : (N, ndim) array_like
        Pixel coordinates (``y, x`` or ``z, y, x``).
    scores : (N,) array_like, optional
        One score per point.
    spacing, translate : sequence of float, optional
        The layer's scale and translate; with a spacing, world coordinates
        ``points * spacing + translate`` are written too.
    units : str, optional
        Unit of the world coordinates (default ``'um'``).

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "points.csv")
    >>> _ = write_points_csv(path, [[1.5, 2.0]], [0.9], spacing=(0.5, 0.5))
    >>> open(path).read().splitlines()[-2:]
    ['y,x,score,y_um,x_um', '1.5,2.0,0.9,0.75,1.0']
    """
    points = np.asarray(points, dtype=np.float64)
    if points.size == 0:
        ndim = len(spacing) if spacing is not None else (points.shape[1] if points.ndim == 2 else 2)
        points = points.reshape(0, ndim)
    if points.ndim != 2 or points.shape[1] not in (2, 3):
        raise ValueError(f"points must be an (N, 2) or (N, 3) array; got shape {points.shape}")
    ndim = points.shape[1]
    axes = list(_AXES[-ndim:])
    if scores is not None:
        scores = np.asarray(scores, dtype=np.float64).ravel()
        if len(scores) != len(points):
            raise ValueError(f"scores must have one value per point ({len(points)}); got {len(scores)}")
    spacing = None if spacing is None else tuple(float(s) for s in spacing)
    translate = None if translate is None else tuple(float(t) for t in translate)
    for name, value in (("spacing", spacing), ("translate", translate)):
        if value is not None and len(value) != ndim:
            raise ValueError(f"{name} must have {ndim} values for {ndim}D points; got {value}")
    suffix = _unit_suffix(units)
    header = axes + (["score"] if scores is not None else [])
    world = None
    if spacing is not None or translate is not None:
        world = points * np.asarray(spacing or (1.0,) * ndim) + np.asarray(translate or (0.0,) * ndim)
        header += [f"{a}_{suffix}" for a in axes]

    def fmt(v: float) -> str:
        return repr(float(v))  # shortest text that reads back to the same float

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            if spacing is not None:
                fh.write("# scale: " + ",".join(fmt(s) for s in spacing) + "\n")
            if translate is not None:
                fh.write("# translate: " + ",".join(fmt(t) for t in translate) + "\n")
            if units:
                fh.write(f"# units: {units}\n")
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(header)
            for i in range(len(points)):
                row = [fmt(v) for v in points[i]]
                if scores is not None:
                    row.append(fmt(scores[i]))
                if world is not None:
                    row += [fmt(v) for v in world[i]]
                writer.writerow(row)

    return write_atomic(path, write)


def read_points_csv(path) -> PointsTable:
    """Read a CSV written by :func:`write_points_csv` (or ``ivote detect``).

    Pixel coordinates come from the ``z,y,x`` / ``y,x`` columns; a table with
    only world columns (``*_um``) and a ``# scale`` line is converted back.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"points file not found: {path}")
    text = path.read_text(encoding="utf-8")
    meta: dict[str, str] = {}
    lines = text.splitlines()
    body_start = 0
    for i, line in enumerate(lines):
        if line.startswith("#"):
            key, _, value = line[1:].partition(":")
            meta[key.strip().lower()] = value.strip()
            body_start = i + 1
        else:
            break
    rows = list(csv.reader(io.StringIO("\n".join(lines[body_start:]))))
    if not rows:
        raise ValueError(f"{path.name}: no header row; expected columns like 'y,x,score'")
    header = [h.strip().lower() for h in rows[0]]
    axes = [a for a in _AXES if a in header]
    if len(axes) not in (2, 3) or axes != list(_AXES[-len(axes):]):
        raise ValueError(f"{path.name}: expected pixel columns 'y,x' or 'z,y,x' in the header; got {rows[0]}")
    try:
        data = np.array([[float(v) for v in row] for row in rows[1:] if row], dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"{path.name}: a value is not a number ({exc})") from None
    data = data.reshape(-1, len(header))
    if not np.isfinite(data).all():
        raise ValueError(f"{path.name}: contains NaN or infinite values")
    points = data[:, [header.index(a) for a in axes]]
    scores = data[:, header.index("score")] if "score" in header else None

    def parse(key):
        if key not in meta:
            return None
        values = tuple(float(v) for v in meta[key].split(","))
        if len(values) != len(axes) or not all(math.isfinite(v) for v in values):
            raise ValueError(f"{path.name}: '# {key}' must have {len(axes)} finite values")
        return values

    return PointsTable(points, scores, parse("scale"), parse("translate"), meta.get("units"))
