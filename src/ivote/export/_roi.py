"""Fiji/ImageJ ROI sets: a ``.zip`` of ``.roi`` files (what Fiji's ROI Manager saves and opens), via ``roifile``.

ImageJ's coordinates, like QuPath's, put the top-left corner of pixel ``(0, 0)`` at ``(0, 0)``,
so the centre of pixel ``(row, col)`` is ``(col + 0.5, row + 0.5)``; the ROIs keep subpixel
(float32) coordinates. A nucleus is one polygon ROI, or a composite (shape) ROI when it has
holes or several parts (ImageJ fills shape ROIs by the even-odd rule, so holes stay holes).
In a 3D image each label gives one ROI per Z plane, with the plane as its stack position.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .._atomic import write_atomic

__all__ = ["outline_rois", "point_rois", "write_outlines_roi_zip", "write_points_roi_zip"]


def _roifile():
    try:
        import roifile
    except ImportError:
        raise ImportError("Fiji ROI sets need roifile: pip install 'napari-ivote[export]' "
                          "(or pip install roifile)") from None
    return roifile


def _xy(ring: np.ndarray) -> np.ndarray:
    """``(y, x)`` pixel-centre coordinates to ImageJ's ``(x, y)``."""
    return np.asarray(ring, dtype=np.float64)[:, ::-1] + 0.5


def _bounds(roi, xy: np.ndarray) -> None:
    low, high = np.floor(xy.min(axis=0)), np.ceil(xy.max(axis=0))
    roi.left, roi.top, roi.right, roi.bottom = int(low[0]), int(low[1]), int(high[0]), int(high[1])


def _polygon_roi(roifile, ring: np.ndarray, name: str, position: int | None):
    xy = _xy(ring[:-1])  # ImageJ closes polygons itself
    roi = roifile.ImagejRoi.frompoints(xy, name=name, position=position)
    roi.roitype = roifile.ROI_TYPE.POLYGON
    return roi


def _composite_roi(roifile, parts, name: str, position: int | None):
    """A shape ROI: every ring as MOVETO, LINETO..., CLOSE (ImageJ's path operations 0, 1, 4)."""
    path, everything = [], []
    for exterior, holes in parts:
        for ring in (exterior, *holes):
            xy = _xy(ring[:-1])
            everything.append(xy)
            path += [0.0, *xy[0]]
            for x, y in xy[1:]:
                path += [1.0, x, y]
            path.append(4.0)
    roi = roifile.ImagejRoi()
    roi.roitype = roifile.ROI_TYPE.RECT
    roi.name = name
    roi.multi_coordinates = np.asarray(path, dtype=np.float32)
    roi.shape_roi_size = len(path)
    if position is not None:
        roi.position = position + 1
    _bounds(roi, np.concatenate(everything))
    return roi


def outline_rois(outlines) -> list:
    """``roifile.ImagejRoi`` objects for :func:`ivote.export.label_outlines`'s outlines, named
    ``<label>`` (2D) or ``<label>-z<plane>`` (3D)."""
    roifile = _roifile()
    rois = []
    for outline in outlines:
        name = f"{outline.label}" if outline.plane is None else f"{outline.label}-z{outline.plane}"
        if len(outline.polygons) == 1 and not outline.has_holes:
            rois.append(_polygon_roi(roifile, outline.polygons[0][0], name, outline.plane))
        else:
            rois.append(_composite_roi(roifile, outline.polygons, name, outline.plane))
    return rois


def point_rois(points, scores=None) -> list:
    """One ImageJ point ROI per point (pixel coordinates ``(y, x)`` or ``(z, y, x)``; a 3D point
    on plane ``round(z)``), named by its 1-based index, with its score when given."""
    roifile = _roifile()
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] not in (2, 3):
        raise ValueError(f"points must be an (N, 2) or (N, 3) array of pixel coordinates; got shape {points.shape}")
    width = len(str(len(points)))
    rois = []
    for i, point in enumerate(points):
        name = f"{i + 1:0{width}d}"
        if scores is not None and np.isfinite(scores[i]):
            name += f" score {float(scores[i]):.4g}"
        roi = roifile.ImagejRoi.frompoints(_xy(point[None, -2:]), name=name,
                                           position=int(round(point[0])) if points.shape[1] == 3 else None)
        roi.roitype = roifile.ROI_TYPE.POINT
        rois.append(roi)
    return rois


def _write_zip(path, rois) -> Path:
    """Write ROIs (any iterable, streamed) as a ``.zip``, atomically; none at all is an error."""

    def write(tmp: Path) -> None:
        names: set[str] = set()
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for roi in rois:
                entry, n = f"{roi.name}.roi", 1
                while entry in names:  # the ROI Manager needs distinct entries
                    n += 1
                    entry = f"{roi.name}-{n}.roi"
                names.add(entry)
                archive.writestr(entry, roi.tobytes())
        if not names:
            raise ValueError("nothing to export: no nuclei (an ImageJ ROI set cannot be empty)")

    return write_atomic(path, write)


def write_outlines_roi_zip(path, labels) -> Path:
    """Write the outline of every label (every label and Z plane in 3D) as a Fiji ROI set, atomically.

    A lazy 2D label image (Dask, Zarr) is read band by band of rows.

    Examples
    --------
    >>> import os, tempfile, numpy as np, roifile
    >>> labels = np.zeros((8, 8), int); labels[2:5, 3:6] = 1
    >>> path = write_outlines_roi_zip(os.path.join(tempfile.mkdtemp(), "nuclei.zip"), labels)
    >>> [roi.name for roi in roifile.roiread(path)]
    ['1']
    """
    from ._bands import outline_batches

    batches = outline_batches(labels, measurements=False)
    return _write_zip(path, (roi for outlines, _ in batches for roi in outline_rois(outlines)))


def write_points_roi_zip(path, points, scores=None) -> Path:
    """Write points (pixel coordinates) as a Fiji ROI set of point ROIs, atomically."""
    return _write_zip(path, point_rois(points, scores))
